"""Turning snapshot chunks and change records into the source's output rows (Arrow).

Two output shapes (docs/spark-source.md):

* ``columns``: the table's own columns, typed, then the metadata columns. Used when the
  captured tables share one schema (one table, or shards of one table).
* ``envelope``: the metadata columns, then ``key`` and ``data`` as JSON text. Used when the
  captured tables differ; ``from_json(data, <one table's schema>)`` after filtering on
  ``_table`` turns one table's rows back into columns.

Metadata: ``_change_type`` (Delta's change-feed names), ``_database``, ``_table``,
``_op_ts`` (commit time; null for snapshot rows), ``_seq`` (apply order, DECIMAL(38,0)).
An update that changes the row key becomes a delete of the old key and an insert of the
new one, so a sink that merges on the key never keeps the old row.
"""

from __future__ import annotations

import base64
import datetime as dt
import decimal
import json
from collections.abc import Iterable, Sequence
from typing import Any

import pyarrow as pa

from sparkcdc.core.records import SEQ_AFTER, SEQ_BEFORE, SEQ_SNAPSHOT, ChangeRecord, seq_number
from sparkcdc.core.offsets import BinlogOffset
from sparkcdc.core.schema import TableSchema
from sparkcdc.core.stream_filter import Verdict

INSERT, PRE, POST, DELETE = "insert", "update_preimage", "update_postimage", "delete"
META_FIELDS = [
    pa.field("_change_type", pa.string(), nullable=False),
    pa.field("_database", pa.string(), nullable=False),
    pa.field("_table", pa.string(), nullable=False),
    pa.field("_op_ts", pa.timestamp("us", tz="UTC")),
    pa.field("_seq", pa.decimal128(38, 0), nullable=False),
]
META_NAMES = [f.name for f in META_FIELDS]
ENVELOPE_FIELDS = [pa.field("key", pa.string()), pa.field("data", pa.string())]
COLUMNS, ENVELOPE = "columns", "envelope"


def output_schema(data: pa.Schema | None) -> pa.Schema:
    """``data`` is the shared Arrow schema of the captured tables, or None for envelopes."""
    if data is None:
        return pa.schema(META_FIELDS + ENVELOPE_FIELDS)
    fields = [pa.field(f.name, f.type, nullable=True) for f in data]
    return pa.schema(fields + META_FIELDS)


def _json_value(v: Any) -> Any:
    if isinstance(v, decimal.Decimal):
        return str(v)
    if isinstance(v, (bytes, bytearray)):
        return base64.b64encode(bytes(v)).decode("ascii")
    if isinstance(v, dt.timedelta):
        return v // dt.timedelta(microseconds=1)  # microseconds, like Debezium's MicroTime
    if isinstance(v, (dt.datetime, dt.date)):
        return v.isoformat()
    return v


def row_json(row: dict[str, Any], columns: Sequence[str]) -> str:
    return json.dumps({c: _json_value(row.get(c)) for c in columns}, ensure_ascii=False,
                      separators=(",", ":"))


class RowBuilder:
    """Accumulates output rows for one partition and cuts them into Arrow batches.

    Values are kept column by column (one list per output field) and turned into Arrow
    arrays once per batch: a binlog backlog passes here at every row change, and building a
    dict per row then ``from_pylist`` cost more than decoding the binlog."""

    def __init__(self, out_schema: pa.Schema, shape: str):
        self.schema = out_schema
        self.shape = shape
        self.data_names = [n for n in out_schema.names
                           if n not in META_NAMES and shape == COLUMNS]
        self._reset()

    def _reset(self) -> None:
        names = self.data_names if self.shape == COLUMNS else ["key", "data"]
        self._data: dict[str, list] = {n: [] for n in names}
        self._columns = list(self._data.items())
        self._kind: list[str] = []
        self._db: list[str] = []
        self._table: list[str] = []
        self._ts_us: list[int | None] = []
        self._seq: list[int] = []

    def _add(self, schema: TableSchema, row: dict[str, Any], kind: str, ts_ms: int | None,
             seq: int) -> None:
        if self.shape == COLUMNS:
            get = row.get
            for n, col in self._columns:
                col.append(get(n))
        else:
            self._data["key"].append(row_json(row, schema.row_key))
            self._data["data"].append(row_json(row, schema.column_names))
        self._kind.append(kind)
        self._db.append(schema.table_id.database)
        self._table.append(schema.table_id.table)
        self._ts_us.append(None if ts_ms is None else ts_ms * 1000)
        self._seq.append(seq)

    def add_change(self, schema: TableSchema, rec: ChangeRecord, verdict: Verdict) -> None:
        seq = seq_number(rec.offset, 0)  # + SEQ_BEFORE / SEQ_AFTER: the sub-order digit
        if rec.op == "c":
            if verdict.after:
                self._add(schema, rec.after, INSERT, rec.ts_ms, seq + SEQ_AFTER)
        elif rec.op == "d":
            if verdict.before:
                self._add(schema, rec.before, DELETE, rec.ts_ms, seq + SEQ_BEFORE)
        else:
            same_key = rec.key(schema.row_key, "before") == rec.key(schema.row_key, "after")
            if verdict.before:
                self._add(schema, rec.before, PRE if same_key else DELETE, rec.ts_ms,
                          seq + SEQ_BEFORE)
            if verdict.after:
                self._add(schema, rec.after, POST if same_key else INSERT, rec.ts_ms,
                          seq + SEQ_AFTER)

    def __len__(self) -> int:
        return len(self._kind)

    def flush(self) -> pa.RecordBatch | None:
        if not self._kind:
            return None
        meta = {
            "_change_type": self._kind, "_database": self._db, "_table": self._table,
            "_seq": self._seq,
        }
        arrays = []
        for f in self.schema:
            if f.name == "_op_ts":
                arrays.append(pa.array(self._ts_us, pa.int64()).cast(f.type))
            else:
                values = meta[f.name] if f.name in meta else self._data[f.name]
                arrays.append(pa.array(values, f.type))
        batch = pa.RecordBatch.from_arrays(arrays, schema=self.schema)
        self._reset()
        return batch


def snapshot_batches(table: pa.Table, schema: TableSchema, as_of: BinlogOffset,
                     out_schema: pa.Schema, shape: str,
                     max_rows: int = 65536) -> Iterable[pa.RecordBatch]:
    """A normalized chunk as ``insert`` rows, all with ``_seq`` = (as_of, snapshot)."""
    n = table.num_rows
    if n == 0:
        return
    seq = pa.scalar(decimal.Decimal(seq_number(as_of, SEQ_SNAPSHOT)), pa.decimal128(38, 0))
    meta = {
        "_change_type": pa.array([INSERT] * n, pa.string()),
        "_database": pa.array([schema.table_id.database] * n, pa.string()),
        "_table": pa.array([schema.table_id.table] * n, pa.string()),
        "_op_ts": pa.nulls(n, pa.timestamp("us", tz="UTC")),
        "_seq": pa.array([seq.as_py()] * n, pa.decimal128(38, 0)),
    }
    if shape == COLUMNS:
        cols = [table.column(f.name).cast(f.type) if f.name not in meta else meta[f.name]
                for f in out_schema]
    else:
        rows = table.to_pylist()
        keys = pa.array([row_json(r, schema.row_key) for r in rows], pa.string())
        data = pa.array([row_json(r, schema.column_names) for r in rows], pa.string())
        cols = [meta[f.name] if f.name in meta else (keys if f.name == "key" else data)
                for f in out_schema]
    full = pa.Table.from_arrays(cols, schema=out_schema)
    yield from full.to_batches(max_chunksize=max_rows)
