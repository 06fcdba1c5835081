"""The source's output rows (sparkcdc.spark.rows), against a plain row-by-row reference.

The RowBuilder builds its columns in bulk (kind and table codes, ``_seq`` as 128-bit words
from numpy); here every output row is also built the obvious way, one dict per row with
``seq_number``, and the two Arrow batches must be equal. No server, no Spark.
"""

from __future__ import annotations

import datetime as dt
import decimal
import random

import pyarrow as pa
import pytest

from sparkcdc.core.offsets import BinlogOffset
from sparkcdc.core.records import SEQ_AFTER, SEQ_BEFORE, SEQ_SNAPSHOT, ChangeRecord, seq_number
from sparkcdc.core.schema import Column, TableId, TableSchema
from sparkcdc.core.stream_filter import Verdict
from sparkcdc.spark.rows import (
    COLUMNS,
    ENVELOPE,
    RowBuilder,
    in_key_order,
    output_schema,
    row_json,
    snapshot_batches,
)

UTC = dt.timezone.utc


def _schema(db: str, table: str) -> TableSchema:
    cols = (Column("id", "bigint(20)", False), Column("v", "varchar(20)"),
            Column("at", "timestamp"), Column("amount", "decimal(10,2)"))
    return TableSchema(TableId(db, table), cols, ("id",), "id")


DATA = pa.schema([("id", pa.int64()), ("v", pa.string()),
                  ("at", pa.timestamp("us", tz="UTC")), ("amount", pa.decimal128(10, 2))])
KINDS = {("c", "after"): "insert", ("d", "before"): "delete"}


def _row(rnd: random.Random, key: int) -> dict:
    return {"id": key, "v": rnd.choice([None, "x", "é€", ""]),
            "at": rnd.choice([None, dt.datetime(2024, 1, 2, 3, 4, 5, rnd.randrange(10**6),
                                                tzinfo=UTC)]),
            "amount": rnd.choice([None, decimal.Decimal("-12.34"), decimal.Decimal("0.01")])}


def _records(rnd: random.Random, tables: list[TableSchema], n: int):
    out = []
    file_no, pos, events, rows = 1, 4, 0, 0
    for _ in range(n):
        if rnd.random() < 0.3:  # a new transaction, sometimes in a new file
            if rnd.random() < 0.1:
                file_no += rnd.choice([1, 999_999])
                pos = 4
            pos += rnd.randrange(1, 10**6) * rnd.choice([1, 10**6])
            events, rows = 0, 0
        elif rnd.random() < 0.3:
            events += rnd.choice([1, 10**8])
            rows = 0
        else:
            rows += rnd.choice([1, 10**6])
        s = rnd.choice(tables)
        op = rnd.choice("cud")
        k = rnd.randrange(100)
        before = _row(rnd, k) if op != "c" else None
        after = _row(rnd, rnd.choice([k, k, k + 1])) if op != "d" else None
        off = BinlogOffset(f"binlog.{file_no:06d}", pos, events, rows)
        rec = ChangeRecord(op, s.table_id, before, after, off,
                           rnd.randrange(10**12, 2 * 10**12))
        v = Verdict(before is not None and rnd.random() < 0.9,
                    after is not None and rnd.random() < 0.9)
        out.append((rec, v))
    return out


def _reference(pairs, schemas, out_schema, shape) -> pa.Table:
    rows = []

    def add(s, img, kind, rec, sub):
        meta = {"_change_type": kind, "_database": s.table_id.database,
                "_table": s.table_id.table,
                "_op_ts": dt.datetime.fromtimestamp(rec.ts_ms / 1000, UTC),
                "_seq": decimal.Decimal(seq_number(rec.offset, sub))}
        if shape == COLUMNS:
            rows.append({**img, **meta})
        else:
            rows.append({**meta, "key": row_json(img, s.row_key),
                         "data": row_json(img, s.column_names)})

    for rec, v in pairs:
        s = schemas[rec.table_id]
        if rec.op == "c" and v.after:
            add(s, rec.after, "insert", rec, SEQ_AFTER)
        elif rec.op == "d" and v.before:
            add(s, rec.before, "delete", rec, SEQ_BEFORE)
        elif rec.op == "u":
            same = rec.before["id"] == rec.after["id"]
            if v.before:
                add(s, rec.before, "update_preimage" if same else "delete", rec, SEQ_BEFORE)
            if v.after:
                add(s, rec.after, "update_postimage" if same else "insert", rec, SEQ_AFTER)
    return pa.Table.from_pylist(rows, schema=out_schema)


@pytest.mark.parametrize("shape", [COLUMNS, ENVELOPE])
def test_row_builder_equals_the_row_by_row_reference(shape):
    rnd = random.Random(7)
    tables = [_schema("shop", "orders"), _schema("shop_2", "orders")]
    schemas = {t.table_id: t for t in tables}
    out = output_schema(DATA if shape == COLUMNS else None)
    for n in (1, 7, 500):
        pairs = _records(rnd, tables, n)
        b = RowBuilder(out, shape)
        cut = n // 3  # two calls per batch: state across calls must not matter
        b.add_changes([r for r, _ in pairs[:cut]], [v for _, v in pairs[:cut]], schemas)
        for rec, v in pairs[cut:]:
            b.add_change(schemas[rec.table_id], rec, v)
        batch = b.flush()
        expect = _reference(pairs, schemas, out, shape)
        if expect.num_rows == 0:
            assert batch is None
            continue
        assert batch.schema.equals(out)
        got = pa.Table.from_batches([batch])
        assert got.equals(expect), (got.slice(0, 3).to_pylist(), expect.slice(0, 3).to_pylist())
        assert len(b) == 0 and b.flush() is None


def test_seq_carries_into_the_high_word():
    """A low part that overflows 64 bits when added to the transaction's high part."""
    s = _schema("d", "t")
    out = output_schema(DATA)
    b = RowBuilder(out, COLUMNS)
    recs = []
    for f, p, e, r in [(1, 4, 0, 0), (9_999_999, 10**13 - 1, 10**9 - 1, 10**8 - 1),
                       (18, 446744073709, 551615, 0), (1844, 6744073709551, 615, 3)]:
        off = BinlogOffset(f"binlog.{f:07d}", p, e, r)
        recs.append(ChangeRecord("c", s.table_id, None, {"id": 1}, off, 0))
    b.add_changes(recs, [Verdict(False, True)] * len(recs), {s.table_id: s})
    got = b.flush().column("_seq").to_pylist()
    assert got == [decimal.Decimal(seq_number(r.offset, SEQ_AFTER)) for r in recs]


def test_an_offset_beyond_the_seq_layout_is_refused():
    s = _schema("d", "t")
    b = RowBuilder(output_schema(DATA), COLUMNS)
    rec = ChangeRecord("c", s.table_id, None, {"id": 1},
                       BinlogOffset("binlog.000001", 4, 10**9, 0), 0)
    with pytest.raises(ValueError, match="_seq layout"):
        b.add_changes([rec], [Verdict(False, True)], {s.table_id: s})


def test_snapshot_batches_and_key_order():
    s = _schema("d", "t")
    rnd = random.Random(3)
    rows = [_row(rnd, k) for k in rnd.sample(range(1000), 300)]
    table = pa.Table.from_pylist(rows, schema=DATA)
    ordered = in_key_order(table, ("id",))
    assert ordered.column("id").to_pylist() == sorted(r["id"] for r in rows)
    assert in_key_order(ordered, ("id",)) is ordered  # already in order: no sort
    as_of = BinlogOffset("binlog.000003", 1234)
    out = output_schema(DATA)
    batches = list(snapshot_batches(ordered, s, as_of, out, COLUMNS, max_rows=128))
    assert [b.num_rows for b in batches] == [128, 128, 44]
    got = pa.Table.from_batches(batches)
    assert got.schema.equals(out)
    assert set(got.column("_change_type").to_pylist()) == {"insert"}
    assert set(got.column("_seq").to_pylist()) == {
        decimal.Decimal(seq_number(as_of, SEQ_SNAPSHOT))}
    assert got.column("_op_ts").null_count == 300
    assert got.select(DATA.names).equals(ordered)


def test_a_table_event_crosses_spark_in_an_empty_batch():
    """Every kind of typed table event rides in an empty batch's schema metadata and comes
    back, typed, among its table's changes (``decode_tables``)."""
    from sparkcdc.core.table_events import Ddl, NewSchema, SchemaChanged, TableRenamed
    from sparkcdc.spark.arrow_batches import decode_tables, encode
    from sparkcdc.spark.rows import batch_event, event_batch

    t = TableId("shop", "items")
    at = BinlogOffset("mysql-bin.000003", 1234, gtid="0-1-7", server="s1")
    schema = TableSchema(t, (Column("id", "int(11)", False), Column("b", "int(11)")), ("id",),
                         "id")
    events = [SchemaChanged(t, at, 1000, Ddl("ALTER TABLE items RENAME COLUMN a TO b",
                                             (("a", "b"),))),
              NewSchema(t, at, 1000, schema), TableRenamed(t, at, 1000, TableId("x", "y"))]
    batches = [event_batch(ev, schema) for ev in events]
    assert [b.num_rows for b in batches] == [0, 0, 0]
    assert [batch_event(b.schema) for b in batches] == events
    got = decode_tables(pa.Table.from_batches([encode(b) for b in batches]))
    assert list(got) == ["shop.items"] and got["shop.items"].events == events
