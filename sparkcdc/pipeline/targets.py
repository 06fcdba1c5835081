"""An adapter between the pipeline and the sinks (``sparkcdc.sinks``, owned elsewhere).

The sinks take the options of one target table; a pipeline's ``sink`` section gives the
options of a whole destination. Here a routed target name ``db.table`` becomes that one
table's sink options (a folder under ``path`` for Delta and files, ``namespace.table`` for
Iceberg, schema/database and table for PostgreSQL and MySQL), each stream gets its own
application id, and schema evolution is done where the sink's storage allows it (Delta:
add columns). The sinks' public API is all this module uses, except for Delta's schema,
which it reads and alters through ``deltalake`` itself.
"""

from __future__ import annotations

import importlib
import os
from collections.abc import Mapping

import pyarrow as pa

from sparkcdc.errors import ConfigError, SchemaError

# options the pipeline derives per target table; the YAML may not set them
PER_TABLE = {"delta": ("path",), "files": ("path",), "iceberg": ("table",),
             "postgres": ("table",), "mysql": ("database", "table"), "console": ()}


def _spec(sink_type: str) -> Mapping:
    return importlib.import_module(f"sparkcdc.sinks.{sink_type}.config").OPTIONS


def has_option(sink_type: str, name: str) -> bool:
    return name in _spec(sink_type)


def target_options(sink_type: str, options: Mapping[str, str], target: str,
                   app_id: str | None = None) -> dict[str, str]:
    """The sink options for one target table ``db.table``."""
    db, _, table = target.partition(".")
    opts = dict(options)
    if sink_type in ("delta", "files"):
        opts["path"] = os.path.join(options["path"], db, table) if "://" not in options[
            "path"] else f"{options['path'].rstrip('/')}/{db}/{table}"
    elif sink_type == "iceberg":
        opts["table"] = f"{db}.{table}"
    elif sink_type == "postgres":
        opts.setdefault("schema", db)
        opts["table"] = table
    elif sink_type == "mysql":
        opts["database"] = db
        opts["table"] = table
    if app_id is not None and has_option(sink_type, "app-id"):
        opts["app-id"] = app_id
    return opts


def check_sink_options(sink_type: str, options: Mapping[str, str]) -> None:
    """Fail now, naming the option, if the sink would refuse these options."""
    import difflib

    from sparkcdc.sinks import sink_class

    spec = _spec(sink_type)
    for name in options:
        if name not in spec and not name.startswith(("storage.", "catalog.")):
            close = difflib.get_close_matches(name, list(spec), n=1, cutoff=0.5)
            raise ConfigError(f"unknown option '{name}' for the {sink_type} sink",
                              fix=(f"did you mean '{close[0]}'? " if close else "")
                              + f"accepted options: {', '.join(sorted(spec))}")
    for name in PER_TABLE.get(sink_type, ()):
        if name in options and not (sink_type in ("delta", "files") and name == "path"):
            raise ConfigError(f"option '{name}' is set by the pipeline for each target table",
                              fix="name targets with 'route' (sink-table: db.table)")
        if name == "path" and name not in options:
            raise ConfigError(f"option '{name}' is required",
                              fix=f"the base directory; each table goes to {name}/<db>/<table>")
    if sink_type == "iceberg" and "warehouse" not in options and not any(
            k.startswith("catalog.") for k in options):
        raise ConfigError("option 'warehouse' is required (or catalog.* options)",
                          fix="a directory for the Iceberg tables and the SQLite catalog")
    probe = target_options(sink_type, options, "db.table", "probe")
    sink_class(sink_type).from_options(probe)  # parses options only; connects lazily


def create_sink(sink_type: str, options: Mapping[str, str], target: str, app_id: str):
    from sparkcdc.sinks import create

    return create(sink_type, target_options(sink_type, options, target, app_id))


# -- target schemas ------------------------------------------------------------------------------

def target_schema(sink) -> pa.Schema | None:
    """The target table's stored schema, or None when it does not exist yet (or the sink
    type cannot say without reading the table)."""
    if sink.type == "delta":
        import deltalake

        cfg = sink.config
        if not deltalake.DeltaTable.is_deltatable(cfg.path, cfg.storage_options):
            return None
        t = deltalake.DeltaTable(cfg.path, storage_options=cfg.storage_options)
        return pa.schema(t.schema().to_arrow())
    return None


def can_add_columns(sink) -> bool:
    return sink.type in ("delta", "console", "files")


def add_columns(sink, fields: list[pa.Field]) -> None:
    """Add nullable columns to the target (schema evolution)."""
    if not fields:
        return
    if sink.type == "delta":
        import deltalake
        from deltalake.schema import Field, Schema

        cfg = sink.config
        if not deltalake.DeltaTable.is_deltatable(cfg.path, cfg.storage_options):
            return  # created with the new columns on the first write
        t = deltalake.DeltaTable(cfg.path, storage_options=cfg.storage_options)
        from sparkcdc.sinks.delta.sink import storage_table

        stored = storage_table(pa.table({f.name: pa.array([], f.type) for f in fields})).schema
        delta_fields = Schema.from_arrow(stored).fields
        t.alter.add_columns([Field(f.name, f.type, nullable=True) for f in delta_fields])
        return
    if sink.type in ("console", "files"):
        return  # they take each batch's shape as it comes
    raise SchemaError(f"adding columns to an existing {sink.type} target is not supported yet",
                      fix="use schema.change.behavior: ignore for this sink, or add the "
                          "columns to the target yourself and restart")


def reset_target(sink) -> None:
    """Empty the target (a table re-snapshotted from scratch after a schema change)."""
    if sink.type == "delta":
        import deltalake

        cfg = sink.config
        if deltalake.DeltaTable.is_deltatable(cfg.path, cfg.storage_options):
            t = deltalake.DeltaTable(cfg.path, storage_options=cfg.storage_options)
            t.delete()
        return
    if sink.type == "console":
        return  # in memory: the new generation's sink starts empty
    raise SchemaError(f"the {sink.type} target cannot be emptied by the pipeline",
                      fix="a table changed during its snapshot: empty the target table and "
                          "restart, or use schema.change.behavior: ignore")
