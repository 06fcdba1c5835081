"""Schema changes of captured tables: what changed, where in the binlog, and the rows before it.

The runner compares each table's schema (re-discovered every ``discovery.interval``, and
whenever a table's stream fails) with the schema its stream was started with. When they
differ, ``find_ddl`` looks for the DDL statement in the binlog (``SHOW BINLOG EVENTS``,
which ``REPLICATION CLIENT``/``BINLOG MONITOR`` allows) after the last applied position, so
the old schema's rows up to the DDL can be applied (``read_gap``) and the new generation of
the stream can start right after it.
"""

from __future__ import annotations

import json
import logging
import re
from collections.abc import Iterator
from dataclasses import dataclass

import pyarrow as pa

from sparkcdc.core.offsets import BinlogOffset
from sparkcdc.core.schema import TableSchema
from sparkcdc.mysql.connection import ConnectionOptions

log = logging.getLogger("sparkcdc.pipeline")

_DDL = re.compile(r"^\s*(?:/\*.*?\*/\s*)*(ALTER|RENAME|TRUNCATE|DROP|CREATE)\b",
                  re.IGNORECASE | re.DOTALL)
_USE = re.compile(r"^use\s+`((?:[^`]|``)+)`;\s*", re.IGNORECASE)


@dataclass(frozen=True)
class Diff:
    added: tuple[str, ...] = ()
    dropped: tuple[str, ...] = ()
    modified: tuple[tuple[str, str, str], ...] = ()  # (column, old type, new type)
    key_changed: bool = False

    def __bool__(self) -> bool:
        return bool(self.added or self.dropped or self.modified or self.key_changed)

    def describe(self) -> str:
        parts = []
        if self.added:
            parts.append("added " + ", ".join(self.added))
        if self.dropped:
            parts.append("dropped " + ", ".join(self.dropped))
        for c, a, b in self.modified:
            parts.append(f"{c} {a} -> {b}")
        if self.key_changed:
            parts.append("primary key changed")
        return "; ".join(parts)


def diff(old: TableSchema, new: TableSchema) -> Diff:
    o = {c.name: c.column_type for c in old.columns}
    n = {c.name: c.column_type for c in new.columns}
    return Diff(tuple(c for c in n if c not in o), tuple(c for c in o if c not in n),
                tuple((c, o[c], n[c]) for c in n if c in o and o[c] != n[c]),
                tuple(old.primary_key) != tuple(new.primary_key))


@dataclass(frozen=True)
class DDLEvent:
    start: BinlogOffset  # where the DDL's transaction starts (the end of the window before)
    end: BinlogOffset  # the next event: where the new generation starts
    statement: str


def _mentions(sql: str, db: str, table: str) -> bool:
    body = _USE.sub("", sql)
    names = re.findall(r"`((?:[^`]|``)+)`|([A-Za-z0-9_$]+)", body)
    flat = [a.replace("``", "`") if a else b for a, b in names]
    return table in flat or table.lower() in (f.lower() for f in flat)


def _events(cur, file: str, pos: int) -> Iterator[tuple]:
    start = pos
    while True:
        cur.execute(f"SHOW BINLOG EVENTS IN %s FROM {int(start)} LIMIT 5000", (file,))
        rows = cur.fetchall()
        if not rows:
            return
        yield from rows
        if len(rows) < 5000:
            return
        start = rows[-1][4]  # End_log_pos of the last one


def find_ddl(conn: ConnectionOptions, after: BinlogOffset, db: str, table: str,
             flavor: str) -> DDLEvent | None:
    """The first DDL naming ``db.table`` at or after ``after`` (None if there is none)."""
    with conn.connect() as c, c.cursor() as cur:
        cur.execute("SHOW BINARY LOGS")
        files = [r[0] for r in cur.fetchall()]
        if after.file not in files:
            return None
        txn_start = None
        for f in files[files.index(after.file):]:
            pos = after.boundary().pos if f == after.file else 4
            for log_name, p, etype, _sid, end_pos, info in _events(cur, f, pos):
                if etype in ("Gtid", "Anonymous_Gtid") or (etype == "Query" and info == "BEGIN"):
                    txn_start = p
                if etype != "Query" or not info:
                    continue
                current_db = None
                m = _USE.match(info)
                if m:
                    current_db = m.group(1).replace("``", "`")
                sql = _USE.sub("", info)
                if not _DDL.match(sql) or not _mentions(sql, db, table):
                    continue
                if current_db not in (None, db) and f"{db}" not in sql:
                    continue
                start = BinlogOffset(log_name, txn_start if txn_start is not None else p,
                                     flavor=flavor)
                if start < after:
                    continue
                return DDLEvent(start, BinlogOffset(log_name, end_pos, flavor=flavor), sql)
    return None


def read_gap(config, flavor: str, schema: TableSchema, start: BinlogOffset, end: BinlogOffset,
             assigner: dict) -> pa.Table:
    """The table's change rows in ``[start, end)`` decoded with ``schema`` (the schema before
    the DDL at ``end``), filtered by the stream's ``assigner`` state, exactly as the stream's
    own next batch would have emitted them."""
    from sparkcdc.mysql.types import arrow_schema
    from sparkcdc.spark.rows import COLUMNS, output_schema
    from sparkcdc.spark.source import ReadContext, WindowItem, open_dialect, read_window

    tables = {schema.table_id: schema}
    out = output_schema(arrow_schema(schema))
    ctx = ReadContext(config, flavor, tables, out, COLUMNS)
    dialect = open_dialect(config, flavor, tables)
    try:
        batches = list(read_window(ctx, dialect, WindowItem(start.to_dict(), end.to_dict(),
                                                             assigner, None)))
    finally:
        dialect.close()
    return pa.Table.from_batches(batches, schema=out) if batches else out.empty_table()


def offset_pos(offset: dict) -> BinlogOffset:
    return BinlogOffset.from_dict(offset["pos"])


def table_phase(offset: dict, table: str) -> str:
    """``planning``/``snapshotting``/``done`` of one table in a source offset."""
    for t in offset.get("assigner", {}).get("tables", []):
        if t.get("table") == table:
            return t.get("phase", "")
    return ""


def dumps(o) -> str:
    return json.dumps(o, sort_keys=True)


_TRUNCATE = re.compile(
    r"^\s*TRUNCATE\s+(?:TABLE\s+)?(`(?:[^`]|``)+`|[A-Za-z0-9_$]+)(?:\.(`(?:[^`]|``)+`|"
    r"[A-Za-z0-9_$]+))?\s*;?\s*$", re.IGNORECASE)


def _ident(s: str) -> str:
    return s[1:-1].replace("``", "`") if s.startswith("`") else s


def find_truncates(conn: ConnectionOptions, after: BinlogOffset, captured: set[str],
                   flavor: str) -> list[tuple[str, DDLEvent]]:
    """``TRUNCATE TABLE`` statements of captured tables (``db.table``) at or after ``after``.
    They write no row events, so the streams never see them."""
    out = []
    with conn.connect() as c, c.cursor() as cur:
        cur.execute("SHOW BINARY LOGS")
        files = [r[0] for r in cur.fetchall()]
        if after.file not in files:
            return out
        txn_start = None
        for f in files[files.index(after.file):]:
            pos = after.boundary().pos if f == after.file else 4
            for log_name, p, etype, _sid, end_pos, info in _events(cur, f, pos):
                if etype in ("Gtid", "Anonymous_Gtid"):
                    txn_start = p
                if etype != "Query" or not info or "truncate" not in info.lower():
                    continue
                m = _USE.match(info)
                current_db = m.group(1).replace("``", "`") if m else None
                t = _TRUNCATE.match(_USE.sub("", info))
                if not t:
                    continue
                db, table = ((_ident(t.group(1)), _ident(t.group(2))) if t.group(2)
                             else (current_db, _ident(t.group(1))))
                name = f"{db}.{table}"
                if name in captured:
                    start = BinlogOffset(log_name, txn_start if txn_start is not None else p,
                                         flavor=flavor)
                    out.append((name, DDLEvent(start, BinlogOffset(log_name, end_pos,
                                                                   flavor=flavor), info)))
    return out
