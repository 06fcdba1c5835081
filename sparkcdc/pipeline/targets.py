"""An adapter between the pipeline and the sinks (``sparkcdc.sinks``, owned elsewhere).

The sinks take the options of one target table; a pipeline's ``sink`` section gives the
options of a whole destination. Here a routed target name ``db.table`` becomes that one
table's sink options (a folder under ``path`` for Delta and files, ``namespace.table`` for
Iceberg, schema/database and table for PostgreSQL and MySQL), and each table gets its own
application id. Schema evolution is each sink's own (``Sink.evolve``, sinks/evolution.py).
The sinks' public API is all this module uses.
"""

from __future__ import annotations

import importlib
import os
from collections.abc import Mapping

from sparkcdc.errors import ConfigError

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
                              + f"accepted options: {', '.join(sorted(spec))}", key=name)
    for name in PER_TABLE.get(sink_type, ()):
        if name in options and not (sink_type in ("delta", "files") and name == "path"):
            raise ConfigError(f"option '{name}' is set by the pipeline for each target table",
                              fix="name targets with 'route' (sink-table: db.table)", key=name)
        if name == "path" and name not in options:
            raise ConfigError(f"option '{name}' is required",
                              fix=f"the base directory; each table goes to {name}/<db>/<table>",
                              key=name)
    if sink_type == "iceberg" and "warehouse" not in options and not any(
            k.startswith("catalog.") for k in options):
        raise ConfigError("option 'warehouse' is required (or catalog.* options)",
                          fix="a directory for the Iceberg tables and the SQLite catalog")
    probe = target_options(sink_type, options, "db.table", "probe")
    sink_class(sink_type).from_options(probe)  # parses options only; connects lazily


def create_sink(sink_type: str, options: Mapping[str, str], target: str, app_id: str):
    from sparkcdc.sinks import create

    return create(sink_type, target_options(sink_type, options, target, app_id))
