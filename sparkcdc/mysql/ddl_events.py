"""What a DDL statement does to each captured table it names, as typed table events
(``core/table_events.py``): the source reads the statement's text here, once, so the
pipeline matches on what happened (dropped, renamed, truncated, swapped, changed) and never
on SQL.

The binlog reader builds the events of each statement on its own it meets
(``BinlogReader._ddl_events``); ``ddl_of`` types a statement a pipeline kept as text in its
checkpoint (a DDL whose schema had not come yet) as the event that carried it did.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping

from sparkcdc.core.offsets import BinlogOffset
from sparkcdc.core.schema import TableId
from sparkcdc.core.table_events import (
    Ddl,
    SchemaChanged,
    TableDropped,
    TableEvent,
    TableRenamed,
    TablesSwapped,
    TableTruncated,
)
from sparkcdc.mysql import ddl, online_schema


def statement_events(sql: str, current_db: str | None,
                     captured: Mapping[tuple[str, str], object], offset: BinlogOffset,
                     ts_ms: int) -> Iterator[TableEvent]:
    """The events of one DDL statement (run in the default database ``current_db``) for
    the ``(db, table)`` keys of ``captured`` it names: a TRUNCATE of one of them
    (``TableTruncated``), or, for each named table (each one of a dropped database), what
    the statement does to it. Nothing for a statement that is no DDL."""
    if not ddl.is_ddl(sql):
        return
    cut = ddl.truncated_table(sql, current_db)
    if cut is not None:
        db, name = cut
        if db is not None and (db, name) in captured:
            yield TableTruncated(TableId(db, name), offset, ts_ms, sql)
        return
    gone_db = ddl.dropped_database(sql)
    named = ([k for k in captured if k[0].lower() == gone_db.lower()]
             if gone_db is not None else ddl.named_tables(sql, current_db, captured))
    for key in named:
        yield table_event(sql, current_db, TableId(*key), offset, ts_ms)


def table_event(sql: str, current_db: str | None, table: TableId, offset: BinlogOffset,
                ts_ms: int) -> TableEvent:
    """What a DDL statement that names ``table`` does to it: dropped, renamed (to the end
    of a chain), an online schema change tool's swap of it, or changed under its name."""
    fate = ddl.table_fate(sql, current_db, str(table))
    if fate is None:
        return SchemaChanged(table, offset, ts_ms, Ddl(sql, _renames(sql)))
    kind, to = fate
    if kind == "dropped" or to is None:
        return TableDropped(table, offset, ts_ms)
    if online_schema.swap(sql, current_db, str(table)):
        return TablesSwapped(table, offset, ts_ms, TableId.parse(to),
                             Ddl(sql, _renames(sql), swap=True))
    return TableRenamed(table, offset, ts_ms, TableId.parse(to))


def ddl_of(statement: str, table: TableId) -> Ddl:
    """A DDL statement of ``table`` kept as text (a pipeline's checkpoint keeps the
    statements whose schema it has not met yet), typed once more: the columns it renamed and
    whether it is a tool's swap of the table (its database the default one)."""
    return Ddl(statement, _renames(statement),
               online_schema.swap(statement, None, str(table)))


def _renames(sql: str) -> tuple[tuple[str, str], ...]:
    return tuple(ddl.column_renames([sql]))
