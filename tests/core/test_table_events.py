"""The typed table events (core/table_events.py) keep all they say on their way from the
Spark source's tasks to the pipeline's driver (``to_dict``/``from_dict``; their crossing in
an empty batch's schema metadata, ``spark/rows.event_batch``, is in tests/spark/test_rows.py)."""

from __future__ import annotations

import pytest

from sparkcdc.core.offsets import BinlogOffset
from sparkcdc.core.records import SEQ_SNAPSHOT, seq_number
from sparkcdc.core.schema import Column, TableId, TableSchema
from sparkcdc.core.table_events import (
    Ddl,
    NewSchema,
    SchemaChanged,
    TableDropped,
    TableEvent,
    TableRenamed,
    TablesSwapped,
    TableTruncated,
)

T = TableId("shop", "items")
AT = BinlogOffset("mysql-bin.000003", 1234, gtid="0-1-7", flavor="mariadb", server="s1")
SCHEMA = TableSchema(T, (Column("id", "int(11)", False), Column("v", "varchar(10)")), ("id",),
                     "id")
EVENTS = [
    NewSchema(T, AT, 1000, SCHEMA),
    SchemaChanged(T, AT, 1000, Ddl("ALTER TABLE items RENAME COLUMN a TO b", (("a", "b"),))),
    TableTruncated(T, AT, 1000, "TRUNCATE items"),
    TableDropped(T, AT, 1000),
    TableRenamed(T, AT, 1000, TableId("shop", "items2")),
    TablesSwapped(T, AT, 1000, TableId("shop", "_items_del"),
                  Ddl("RENAME TABLE items TO _items_del, _items_gho TO items", swap=True)),
]


@pytest.mark.parametrize("ev", EVENTS, ids=lambda e: type(e).__name__)
def test_an_event_comes_back_as_it_went(ev):
    assert TableEvent.from_dict(ev.to_dict()) == ev
    assert ev.seq == seq_number(AT, SEQ_SNAPSHOT)


def test_an_unknown_kind_is_refused():
    with pytest.raises(ValueError, match="unknown table event kind"):
        TableEvent.from_dict({**EVENTS[0].to_dict(), "kind": "exploded"})
