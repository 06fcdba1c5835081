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
from dataclasses import dataclass

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
    return can_change(sink, Change("add", ""))


# -- schema evolution ----------------------------------------------------------------------------

@dataclass(frozen=True)
class Change:
    """One change to a target table's columns.

    ``add`` a nullable column of ``type``; ``drop`` it; ``rename`` it to ``new_name`` (values
    kept); ``retype`` it to ``type`` (values converted); ``copy`` the values of ``name`` into
    the (added) column ``new_name`` (lenient's rename: the old column stays for old readers).
    ``type`` is the logical Arrow type the stream gives; each target stores it its own way."""

    kind: str  # add | drop | rename | retype | copy
    name: str
    new_name: str | None = None
    type: pa.DataType | None = None

    def describe(self) -> str:
        return {"add": f"add {self.name} {self.type}", "drop": f"drop {self.name}",
                "rename": f"rename {self.name} to {self.new_name}",
                "retype": f"change {self.name} to {self.type}",
                "copy": f"copy {self.name} into {self.new_name}"}[self.kind]


def _iceberg_stored(t: pa.DataType) -> pa.DataType:
    from sparkcdc.sinks.iceberg.sink import storage_table

    return storage_table(pa.table({"c": pa.array([], t)})).schema.field("c").type


def _delta_stored(t: pa.DataType) -> pa.DataType:
    from sparkcdc.sinks.delta.sink import storage_table

    return storage_table(pa.table({"c": pa.array([], t)})).schema.field("c").type


def _iceberg_promotable(old: pa.DataType, new: pa.DataType) -> bool:
    """Iceberg's allowed type promotions (the spec): int -> long, float -> double, and a
    decimal's precision widened with the same scale."""
    if old == new:
        return True
    if pa.types.is_int32(old) and pa.types.is_int64(new):
        return True
    if pa.types.is_float32(old) and pa.types.is_float64(new):
        return True
    return (pa.types.is_decimal(old) and pa.types.is_decimal(new) and old.scale == new.scale
            and new.precision >= old.precision)


def can_change(sink, change: Change, current: pa.DataType | None = None) -> bool:
    """Whether the target can make ``change`` (``current``: the column's stored type, for a
    retype). The files sink writes a changelog: it takes each batch's shape (so new columns
    just appear) but never rewrites what it wrote."""
    kind = change.kind
    if sink.type == "console":
        return True
    if sink.type == "files":
        return kind == "add"
    if sink.type == "iceberg" and kind == "retype" and current is not None:
        return _iceberg_promotable(current, _iceberg_stored(change.type))
    return sink.type in ("delta", "iceberg", "postgres", "mysql")


def target_columns(sink) -> pa.Schema | None:
    """The target's stored columns, or None when it does not exist yet (or has no schema:
    console, files)."""
    if sink.type == "delta":
        return target_schema(sink)
    if sink.type == "iceberg":
        t = sink.catalog().load_table(sink.config.identifier) if _iceberg_exists(sink) else None
        return None if t is None else t.schema().as_arrow()
    if sink.type in ("postgres", "mysql"):
        return _sql_columns(sink)
    return None


def _iceberg_exists(sink) -> bool:
    return sink.catalog().table_exists(sink.config.identifier)


def _sql_columns(sink) -> pa.Schema | None:
    """Column names of a SQL target (types as null: the SQL sinks map them themselves)."""
    conn = sink.connection()
    if sink.type == "postgres":
        with conn.transaction(), conn.cursor() as cur:
            cur.execute("SELECT column_name FROM information_schema.columns WHERE "
                        "table_schema = %s AND table_name = %s ORDER BY ordinal_position",
                        (sink.config.schema, sink.config.table))
            names = [r[0] for r in cur.fetchall()]
    else:
        with conn.cursor() as cur:
            cur.execute("SELECT column_name FROM information_schema.columns WHERE "
                        "table_schema = %s AND table_name = %s ORDER BY ordinal_position",
                        (sink.config.database, sink.config.table))
            names = [r[0] for r in cur.fetchall()]
        conn.commit()
    return pa.schema([pa.field(n, pa.null()) for n in names]) if names else None


def evolve(sink, changes: list[Change], keys: tuple[str, ...] = ()) -> None:
    """Make ``changes`` to the target table. Idempotent: a change the target already shows
    (a column already added, renamed or dropped) is skipped, so a run that stopped half way
    can do it again. A target that does not exist yet is left alone: its first write creates
    it with the new columns."""
    if not changes or sink.type in ("console", "files"):
        bad = [c for c in changes if not can_change(sink, c)]
        if bad:
            raise SchemaError(f"the {sink.type} target cannot {bad[0].describe()}",
                              fix="use schema.change.behavior: try_evolve or lenient")
        return
    have = target_columns(sink)
    if have is None:
        return
    names = set(have.names)
    todo = []
    for c in changes:
        if c.kind == "add" and c.name in names:
            continue
        if c.kind == "drop" and c.name not in names:
            continue
        if c.kind == "rename" and (c.name not in names or c.new_name in names):
            continue
        if c.kind == "copy" and c.name not in names:
            continue
        if c.kind == "retype" and c.name not in names:
            continue
        todo.append(c)
    if not todo:
        return
    {"delta": _evolve_delta, "iceberg": _evolve_iceberg, "postgres": _evolve_postgres,
     "mysql": _evolve_mysql}[sink.type](sink, todo, tuple(keys))


def _evolve_delta(sink, changes: list[Change], keys) -> None:
    """Adding columns is a metadata change (``add_columns``). Anything else rewrites the
    table: delta-rs cannot rename, drop or retype a column in place (that needs Delta's
    column mapping, which it does not write), so the rows are read, changed in Arrow and
    written back as one overwrite commit that also replaces the schema. The app transactions
    (the batch ids) stay in the log."""
    import deltalake

    if all(c.kind == "add" for c in changes):
        add_columns(sink, [pa.field(c.name, c.type) for c in changes])
        return
    cfg = sink.config
    t = deltalake.DeltaTable(cfg.path, storage_options=cfg.storage_options)
    data = t.to_pyarrow_table()
    for c in changes:
        data = _arrow_change(data, c, _delta_stored)
    deltalake.write_deltalake(
        t, data, mode="overwrite", schema_mode="overwrite",
        partition_by=list(t.metadata().partition_columns) or None,
        commit_properties=deltalake.CommitProperties(custom_metadata={
            "sparkcdc.schema-change": "; ".join(c.describe() for c in changes)}))


def _arrow_change(data: pa.Table, c: Change, stored) -> pa.Table:
    import pyarrow.compute as pc

    names = data.column_names
    if c.kind == "add":
        return data.append_column(pa.field(c.name, stored(c.type)),
                                  pa.nulls(data.num_rows, stored(c.type)))
    if c.kind == "drop":
        return data.drop_columns([c.name])
    if c.kind == "rename":
        return data.rename_columns([c.new_name if n == c.name else n for n in names])
    if c.kind == "retype":
        i = names.index(c.name)
        return data.set_column(i, pa.field(c.name, stored(c.type)),
                               pc.cast(data.column(i), stored(c.type)))
    if c.kind == "copy":
        i = names.index(c.new_name)
        typ = data.schema.field(i).type
        return data.set_column(i, data.schema.field(i),
                               pc.coalesce(data.column(i), pc.cast(data.column(c.name), typ)))
    raise ValueError(c.kind)


def _evolve_iceberg(sink, changes: list[Change], keys) -> None:
    """Iceberg evolves schemas in metadata (columns have ids): add, drop, rename, and the
    spec's type promotions, in one commit. ``copy`` rewrites the table's rows after it."""
    t = sink.catalog().load_table(sink.config.identifier)
    with t.transaction() as tx:
        with tx.update_schema() as u:
            for c in changes:
                if c.kind in ("add", "retype"):
                    u.union_by_name(pa.schema([pa.field(c.name, _iceberg_stored(c.type))]))
                elif c.kind == "drop":
                    u.delete_column(c.name)
                elif c.kind == "rename":
                    u.rename_column(c.name, c.new_name)
    copies = [c for c in changes if c.kind == "copy"]
    if copies:
        t = sink.catalog().load_table(sink.config.identifier)
        data = t.scan().to_arrow()
        for c in copies:
            data = _arrow_change(data, c, _iceberg_stored)
        with t.transaction() as tx:
            tx.overwrite(data.cast(t.schema().as_arrow()))


def _evolve_postgres(sink, changes: list[Change], keys) -> None:
    from psycopg import sql

    from sparkcdc.sinks.postgres.sink import pg_type

    target = sql.Identifier(sink.config.schema, sink.config.table)
    conn = sink.connection()
    with conn.transaction(), conn.cursor() as cur:  # PostgreSQL's DDL is transactional
        for c in changes:
            col = sql.Identifier(c.name)
            if c.kind == "add":
                cur.execute(sql.SQL("ALTER TABLE {} ADD COLUMN IF NOT EXISTS {} {}").format(
                    target, col, sql.SQL(pg_type(c.type))))
            elif c.kind == "drop":
                cur.execute(sql.SQL("ALTER TABLE {} DROP COLUMN IF EXISTS {}").format(
                    target, col))
            elif c.kind == "rename":
                cur.execute(sql.SQL("ALTER TABLE {} RENAME COLUMN {} TO {}").format(
                    target, col, sql.Identifier(c.new_name)))
            elif c.kind == "retype":
                typ = sql.SQL(pg_type(c.type))
                cur.execute(sql.SQL("ALTER TABLE {} ALTER COLUMN {} TYPE {} USING {}::{}")
                            .format(target, col, typ, col, typ))
            elif c.kind == "copy":
                cur.execute(sql.SQL("UPDATE {} SET {} = {} WHERE {} IS NULL").format(
                    target, sql.Identifier(c.new_name), col, sql.Identifier(c.new_name)))


def _evolve_mysql(sink, changes: list[Change], keys) -> None:
    from sparkcdc.sinks.mysql.sink import mysql_type, q

    target = f"{q(sink.config.database)}.{q(sink.config.table)}"
    conn = sink.connection()
    with conn.cursor() as cur:  # each ALTER commits on its own; each is idempotent
        for c in changes:
            if c.kind == "add":
                cur.execute(f"ALTER TABLE {target} ADD COLUMN IF NOT EXISTS {q(c.name)} "
                            f"{mysql_type(c.type)}")
            elif c.kind == "drop":
                cur.execute(f"ALTER TABLE {target} DROP COLUMN IF EXISTS {q(c.name)}")
            elif c.kind == "rename":
                cur.execute(f"ALTER TABLE {target} RENAME COLUMN {q(c.name)} TO "
                            f"{q(c.new_name)}")
            elif c.kind == "retype":
                key = c.name in keys
                cur.execute(f"ALTER TABLE {target} MODIFY COLUMN {q(c.name)} "
                            f"{mysql_type(c.type, key)}" + (" NOT NULL" if key else ""))
            elif c.kind == "copy":
                cur.execute(f"UPDATE {target} SET {q(c.new_name)} = {q(c.name)} "
                            f"WHERE {q(c.new_name)} IS NULL")
    conn.commit()


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
        have = set(pa.schema(t.schema().to_arrow()).names)
        delta_fields = [f for f in Schema.from_arrow(stored).fields if f.name not in have]
        if delta_fields:
            t.alter.add_columns([Field(f.name, f.type, nullable=True) for f in delta_fields])
        return
    evolve(sink, [Change("add", f.name, type=f.type) for f in fields])


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
    if sink.type == "iceberg":
        if _iceberg_exists(sink):
            sink.catalog().load_table(sink.config.identifier).delete()  # all rows
        return
    if sink.type in ("postgres", "mysql") and _sql_columns(sink) is not None:
        conn = sink.connection()
        if sink.type == "postgres":
            from psycopg import sql

            with conn.transaction(), conn.cursor() as cur:
                cur.execute(sql.SQL("DELETE FROM {}").format(
                    sql.Identifier(sink.config.schema, sink.config.table)))
        else:
            from sparkcdc.sinks.mysql.sink import q

            with conn.cursor() as cur:
                cur.execute(f"DELETE FROM {q(sink.config.database)}.{q(sink.config.table)}")
            conn.commit()
        return
    if sink.type in ("postgres", "mysql"):
        return  # not created yet
    raise SchemaError(f"the {sink.type} target cannot be emptied by the pipeline",
                      fix="a table changed during its snapshot: empty the target table and "
                          "restart, or use schema.change.behavior: ignore")
