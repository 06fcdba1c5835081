"""Schema changes of captured tables: what changed, where in the binlog, and the rows before it.

The runner compares each table's schema (re-discovered every ``discovery.interval``, and
whenever a table's stream fails) with the schema its stream was started with. When they
differ, ``find_ddls`` looks for the DDL statement in the binlog (``SHOW BINLOG EVENTS``,
which ``REPLICATION CLIENT``/``BINLOG MONITOR`` allows) after the last applied position, so
the old schema's rows up to the DDL can be applied (``read_gap``) and the new generation of
the stream can start right after it.
"""

from __future__ import annotations

import json
import logging
import re
from collections.abc import Callable
from dataclasses import dataclass

import pyarrow as pa

from sparkcdc.core.offsets import BinlogOffset
from sparkcdc.core.schema import TableSchema
from sparkcdc.mysql.connection import ConnectionOptions, retry_lost
from sparkcdc.mysql.ddl import (
    column_renames,
    is_ddl,
    mentions,
    split_use,
    table_renames,
    truncated_table,
)

log = logging.getLogger("sparkcdc.pipeline")

@dataclass(frozen=True)
class Diff:
    added: tuple[str, ...] = ()
    dropped: tuple[str, ...] = ()
    modified: tuple[tuple[str, str, str], ...] = ()  # (column, old type, new type)
    key_changed: bool = False
    renamed: tuple[tuple[str, str], ...] = ()  # (old name, new name), found in the DDL

    def __bool__(self) -> bool:
        return bool(self.added or self.dropped or self.modified or self.key_changed
                    or self.renamed)

    def with_renames(self, statements: list[str]) -> Diff:
        """The diff with the renames that ``statements`` (the DDL) made: a column dropped
        and one added are a rename when a statement says so (``RENAME COLUMN a TO b``,
        ``CHANGE [COLUMN] a b ...``), not a guess from names or positions."""
        pairs = []
        for old, new in column_renames(statements):
            old = next((d for d in self.dropped if d.lower() == old.lower()), None)
            new = next((a for a in self.added if a.lower() == new.lower()), None)
            if old and new and (old, new) not in pairs:
                pairs.append((old, new))
        if not pairs:
            return self
        gone = {o for o, _ in pairs}
        came = {n for _, n in pairs}
        return Diff(tuple(a for a in self.added if a not in came),
                    tuple(d for d in self.dropped if d not in gone), self.modified,
                    self.key_changed, tuple(pairs))

    def describe(self) -> str:
        parts = [f"renamed {a} to {b}" for a, b in self.renamed]
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
                tuple((c, o[c], n[c]) for c in n if c in o and not _same_type(o[c], n[c])),
                tuple(old.primary_key) != tuple(new.primary_key))


def _same_type(a: str, b: str) -> bool:
    """Whether two spellings of a column type hold the same values: ``int(11)`` (MariaDB's
    information_schema) is ``int`` (a schema read from a table map, or MySQL 8's), and a
    text column's declared length is no change of its values."""
    if a == b:
        return True
    from dataclasses import replace

    from sparkcdc.errors import SchemaError
    from sparkcdc.mysql.types import STRING, parse_column_type

    try:
        ta, tb = parse_column_type(a), parse_column_type(b)
    except SchemaError:
        return False
    if ta.kind == tb.kind == STRING:
        ta, tb = replace(ta, length=None), replace(tb, length=None)
    return ta == tb


@dataclass(frozen=True)
class DDLEvent:
    start: BinlogOffset  # where the DDL's transaction starts (the end of the window before)
    end: BinlogOffset  # the next event: where the new generation starts
    statement: str
    rows_before: bool = False  # row events of the table since the previous DDL (find_ddls)


@dataclass(frozen=True)
class _Event:
    """One row of ``SHOW BINLOG EVENTS``, with where its transaction starts and the
    statement's default database (``use `db`;``) split off a Query's text."""

    file: str
    pos: int
    end_pos: int
    kind: str
    info: str
    txn_start: int
    current_db: str | None = None
    sql: str = ""

    def span(self, flavor: str) -> tuple[BinlogOffset, BinlogOffset]:
        """(where the event's transaction starts, the next event)."""
        return (BinlogOffset(self.file, self.txn_start, flavor=flavor),
                BinlogOffset(self.file, self.end_pos, flavor=flavor))


def _scan(conn: ConnectionOptions, after: BinlogOffset, what: str,
          visit: Callable[[_Event], bool], reset: Callable[[], None]) -> None:
    """Every binlog event at or after ``after`` (from the start of the transaction holding
    it) to the end of the binlog, in order, to ``visit`` -- which returns True to stop.
    Nothing is visited if ``after``'s file is gone. A connection lost in the middle starts
    the scan over (``retry_lost``), after ``reset()`` empties what ``visit`` collected."""

    def attempt() -> None:
        reset()
        with conn.connect() as c, c.cursor() as cur:
            cur.execute("SHOW BINARY LOGS")
            files = [r[0] for r in cur.fetchall()]
            if after.file not in files:
                return
            txn_start = None
            for f in files[files.index(after.file):]:
                start = after.boundary().pos if f == after.file else 4
                while True:
                    cur.execute(f"SHOW BINLOG EVENTS IN %s FROM {int(start)} LIMIT 5000", (f,))
                    rows = cur.fetchall()
                    for log_name, pos, kind, _sid, end_pos, info in rows:
                        if kind in ("Gtid", "Anonymous_Gtid") or (kind == "Query"
                                                                   and info == "BEGIN"):
                            txn_start = pos
                        current_db, sql = None, ""
                        if kind == "Query" and info:
                            current_db, sql = split_use(info)
                        ev = _Event(log_name, pos, end_pos, kind, info or "",
                                    txn_start if txn_start is not None else pos,
                                    current_db, sql)
                        if visit(ev):
                            return
                    if len(rows) < 5000:
                        break
                    start = rows[-1][4]  # End_log_pos of the last one

    retry_lost(conn, what, attempt)


def find_ddls(conn: ConnectionOptions, after: BinlogOffset, db: str, table: str,
              flavor: str, first: bool = False) -> list[DDLEvent]:
    """Every DDL naming ``db.table`` at or after ``after``, in binlog order, each with
    ``rows_before``: whether row events of the table lie between the previous DDL of the
    list and this one (the rows a stream would have to decode with an intermediate schema)."""
    tagged = re.compile(r"\(`?" + re.escape(db) + r"`?\.`?" + re.escape(table) + r"`?\)")
    out: list[DDLEvent] = []
    rows_seen = False

    def visit(ev: _Event) -> bool:
        nonlocal rows_seen
        if ev.kind == "Table_map" and tagged.search(ev.info):
            rows_seen = True
        if (ev.kind != "Query" or not is_ddl(ev.sql)
                or not mentions(ev.sql, ev.current_db, db, table)):
            return False
        start, end = ev.span(flavor)
        if start < after:
            return False
        out.append(DDLEvent(start, end, ev.sql, rows_before=rows_seen and bool(out)))
        rows_seen = False
        return first

    def reset() -> None:
        nonlocal rows_seen
        out.clear()
        rows_seen = False

    _scan(conn, after, "reading the binlog for DDL", visit, reset)
    return out


def find_table_rename(conn: ConnectionOptions, after: BinlogOffset, table: str,
                      flavor: str) -> tuple[str, DDLEvent] | None:
    """The new name of ``table`` (``db.table``) if a RENAME at or after ``after`` renamed it
    (following a chain ``a -> b -> c`` to its end), with the first rename's event."""
    name, first = table, None

    def visit(ev: _Event) -> bool:
        nonlocal name, first
        if ev.kind != "Query" or "rename" not in ev.sql.lower():
            return False
        for old, new in table_renames(ev.sql, ev.current_db):
            if old == name:
                name = new
                if first is None:
                    first = DDLEvent(*ev.span(flavor), ev.info)
        return False

    def reset() -> None:
        nonlocal name, first
        name, first = table, None

    _scan(conn, after, "reading the binlog for table renames", visit, reset)
    return (name, first) if first is not None else None


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


def dumps(o) -> str:
    return json.dumps(o, sort_keys=True)


def find_truncates(conn: ConnectionOptions, after: BinlogOffset, captured: set[str],
                   flavor: str) -> list[tuple[str, DDLEvent]]:
    """``TRUNCATE TABLE`` statements of captured tables (``db.table``) at or after ``after``.
    They write no row events, so the streams never see them."""
    out: list[tuple[str, DDLEvent]] = []

    def visit(ev: _Event) -> bool:
        t = truncated_table(ev.sql, ev.current_db) if ev.kind == "Query" else None
        if t:
            db, table = t
            if f"{db}.{table}" in captured:
                out.append((f"{db}.{table}", DDLEvent(*ev.span(flavor), ev.info)))
        return False

    _scan(conn, after, "reading the binlog for TRUNCATE TABLE", visit, out.clear)
    return out
