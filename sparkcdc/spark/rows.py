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
import functools
import json
from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import Any, cast

import pyarrow as pa

from sparkcdc.core.offsets import BinlogOffset
from sparkcdc.core.records import (
    META_COLUMNS,
    SEQ_AFTER,
    SEQ_BEFORE,
    SEQ_SNAPSHOT,
    ChangeRecord,
    seq_number,
)
from sparkcdc.core.schema import TableSchema
from sparkcdc.core.stream_filter import Verdict
from sparkcdc.core.table_events import TableEvent
from sparkcdc.mysql.types import arrow_schema

INSERT, PRE, POST, DELETE = "insert", "update_preimage", "update_postimage", "delete"
META_FIELDS = [
    pa.field("_change_type", pa.string(), nullable=False),
    pa.field("_database", pa.string(), nullable=False),
    pa.field("_table", pa.string(), nullable=False),
    pa.field("_op_ts", pa.timestamp("us", tz="UTC")),
    pa.field("_seq", pa.decimal128(38, 0), nullable=False),
]
META_NAMES = [f.name for f in META_FIELDS]
assert tuple(META_NAMES) == META_COLUMNS  # the Arrow types of core.records.META_COLUMNS
ENVELOPE_FIELDS = [pa.field("key", pa.string()), pa.field("data", pa.string())]
COLUMNS, ENVELOPE = "columns", "envelope"
# each table in batches of its own columns shape (with arrow-batches, whose batches carry
# their schema, so tables that differ need no envelope)
TABLES = "tables"


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


_KINDS = (INSERT, PRE, POST, DELETE)


@functools.cache
def _kind_array() -> pa.Array:
    """The kinds as an Arrow array, made at first use: building any Arrow array makes
    pyarrow import pandas (~0.2 s), and each of the Python processes Spark starts one
    after another before a stream's first batch imports this module (docs/operations.md,
    "Start-up")."""
    return pa.array(_KINDS, pa.string())
_K_INSERT, _K_PRE, _K_POST, _K_DELETE = range(4)
_TXN_SCALE = 10 ** 18  # _seq = (file * 10**13 + pos) * 10**18 + events * 10**9 + rows * 10 + sub


class RowBuilder:
    """Accumulates output rows for one partition and cuts them into Arrow batches.

    A binlog backlog passes here at every row change, so the per-row work is a few list
    appends: the row image itself (a reference), a change-kind code, a table code, the
    commit time and the low part of ``_seq``. Everything else is done once per batch in
    Arrow: the data columns from the images (``Table.from_pylist``), the kind and table
    columns by ``take`` from small dictionaries, and ``_seq`` as 128-bit integers built with
    numpy from the transaction's high part (shared by all its rows) and the low part."""

    def __init__(self, out_schema: pa.Schema, shape: str, preimages: bool = True):
        self.schema = out_schema
        self.shape = shape
        self.preimages = preimages  # False: an update in place is its postimage alone
        self.data_names = [n for n in out_schema.names
                           if n not in META_NAMES and shape == COLUMNS]
        self._data_schema = pa.schema([out_schema.field(n) for n in self.data_names])
        self._tables: list[TableSchema] = []  # table code -> schema
        self._table_code: dict[Any, tuple[int, Any]] = {}  # table id -> (code, key getter)
        self._reset()

    def _reset(self) -> None:
        self._images: list[dict[str, Any]] = []
        self._kind: list[int] = []
        self._tcode: list[int] = []
        self._ts_ms: list[int | None] = []
        self._hcode: list[int] = []  # index into self._highs: the transaction's (file, pos)
        self._low: list[int] = []  # events * 10**9 + rows * 10 + sub
        self._highs: list[int] = []
        self._last_txn: tuple | None = None

    def _table(self, schema: TableSchema) -> tuple[int, Any]:
        got = self._table_code.get(schema.table_id)
        if got is None:
            from operator import itemgetter

            key = schema.row_key
            getter = itemgetter(*key) if key else (lambda row: ())
            got = (len(self._tables), getter)
            self._tables.append(schema)
            self._table_code[schema.table_id] = got
        return got

    def add_change(self, schema: TableSchema, rec: ChangeRecord, verdict: Verdict) -> None:
        self.add_changes([rec], [verdict], {rec.table_id: schema})

    def add_changes(self, records: Sequence[ChangeRecord], verdicts: Sequence[Verdict],
                    schemas: Mapping[Any, TableSchema]) -> None:
        """Output rows for ``records`` as judged (``StreamFilter.judge``). An update is a
        preimage and a postimage, or a delete and an insert when it changes the row key."""
        images, kind, tcode, ts_ms = self._images, self._kind, self._tcode, self._ts_ms
        hcode, low = self._hcode, self._low
        add_kind, add_t, add_ts = kind.append, tcode.append, ts_ms.append
        # a record's verdict admits only the images it has (an insert's after, a delete's
        # before), which the record types cannot say
        add_img = cast(Callable[[Any], None], images.append)
        add_h, add_low = hcode.append, low.append
        last_tid, code = None, 0
        keyget: Any = None
        pre = self.preimages
        last_file, last_pos = self._last_txn or (None, None)
        h = len(self._highs) - 1
        for rec, v in zip(records, verdicts):
            vb, va = v.before, v.after
            if not (vb or va):
                continue
            tid = rec.table_id
            if tid is not last_tid:  # records of one table share their TableId object
                code, keyget = self._table(schemas[tid])
                last_tid = tid
            off = rec.offset
            if off.pos != last_pos or off.file != last_file:  # a new transaction
                self._highs.append(seq_number(BinlogOffset(off.file, off.pos), 0) // _TXN_SCALE)
                h = len(self._highs) - 1
                last_file, last_pos = off.file, off.pos
            e, r = off.events, off.rows
            if e >= 10**9 or r >= 10**8:
                seq_number(off, 0)  # raises: the offset does not fit the _seq layout
            lo = e * 10**9 + r * 10
            ts = rec.ts_ms
            op = rec.op
            if op == "c":
                if va:
                    add_img(rec.after); add_kind(_K_INSERT); add_low(lo + SEQ_AFTER)
                    add_t(code); add_ts(ts); add_h(h)
            elif op == "d":
                if vb:
                    add_img(rec.before); add_kind(_K_DELETE); add_low(lo + SEQ_BEFORE)
                    add_t(code); add_ts(ts); add_h(h)
            else:
                same = keyget(rec.before) == keyget(rec.after)
                if vb and (pre or not same):
                    add_img(rec.before); add_kind(_K_PRE if same else _K_DELETE)
                    add_low(lo + SEQ_BEFORE); add_t(code); add_ts(ts); add_h(h)
                if va:
                    add_img(rec.after); add_kind(_K_POST if same else _K_INSERT)
                    add_low(lo + SEQ_AFTER); add_t(code); add_ts(ts); add_h(h)
        self._last_txn = (last_file, last_pos)

    def __len__(self) -> int:
        return len(self._kind)

    def _seq_array(self) -> pa.Array:
        """``_seq`` = high * 10**18 + low as decimal128(38, 0): two 64-bit words per row."""
        import numpy as np

        n = len(self._low)
        hs = [hi * _TXN_SCALE for hi in self._highs]
        h_lo = np.array([x & 0xFFFFFFFFFFFFFFFF for x in hs], dtype=np.uint64)
        h_hi = np.array([x >> 64 for x in hs], dtype=np.uint64)
        idx = np.array(self._hcode, dtype=np.intp)
        lo = np.array(self._low, dtype=np.uint64)
        base = h_lo[idx]
        low_word = base + lo  # wraps modulo 2**64; the carry goes to the high word
        words = np.empty((n, 2), dtype="<u8")  # Arrow's decimals: little-endian, low first
        words[:, 0] = low_word
        words[:, 1] = h_hi[idx] + (low_word < base)
        return pa.Array.from_buffers(pa.decimal128(38, 0), n, [None, pa.py_buffer(words)])

    def batches(self) -> list[pa.RecordBatch]:
        """``flush`` as a list (empty when there are no rows), as ``TableBuilders`` gives."""
        b = self.flush()
        return [] if b is None else [b]

    def flush(self) -> pa.RecordBatch | None:
        if not self._kind:
            return None
        import pyarrow.compute as pc

        tcode = pa.array(self._tcode, pa.int32())
        meta = {
            "_change_type": _kind_array().take(pa.array(self._kind, pa.int8())),
            "_database": pa.array([t.table_id.database for t in self._tables],
                                  pa.string()).take(tcode),
            "_table": pa.array([t.table_id.table for t in self._tables],
                               pa.string()).take(tcode),
            "_op_ts": pc.multiply(pa.array(self._ts_ms, pa.int64()), 1000).cast(
                pa.timestamp("us", tz="UTC")),
            "_seq": self._seq_array(),
        }
        if self.shape == COLUMNS:
            cols = image_columns(self._images, self.data_names, self._data_schema)
        else:
            schemas = [self._tables[c] for c in self._tcode]
            cols = {
                "key": pa.array([row_json(r, s.row_key)
                                 for r, s in zip(self._images, schemas)], pa.string()),
                "data": pa.array([row_json(r, s.column_names)
                                  for r, s in zip(self._images, schemas)], pa.string()),
            }
        arrays = [meta[f.name] if f.name in meta else cols[f.name] for f in self.schema]
        batch = pa.RecordBatch.from_arrays(arrays, schema=self.schema)
        self._reset()
        return batch


def image_columns(images: Sequence[Mapping[str, Any]], names: Sequence[str],
                  schema: pa.Schema) -> dict[str, pa.Array]:
    """The row images' columns ``names`` as Arrow arrays of ``schema``'s types: each
    image's values taken by one ``itemgetter`` and the rows turned into columns by ``zip``,
    loops in C, where ``Table.from_pylist`` asks every image twice for every column (17-20%
    less time for an 11-column batch). An image without one of the columns (rows of an
    older schema in the batch) takes ``from_pylist``, which makes it null."""
    if not names:
        return {}
    if not images:
        return {n: pa.array([], type=schema.field(n).type) for n in names}
    from operator import itemgetter

    try:
        if len(names) == 1:
            values: list[Sequence[Any]] = [[img[names[0]] for img in images]]
        else:
            values = list(zip(*map(itemgetter(*names), images)))
    except KeyError:
        data = pa.Table.from_pylist(list(images), schema=schema)
        return {n: data.column(n).combine_chunks() for n in names}
    return {n: pa.array(v, type=schema.field(n).type) for n, v in zip(names, values)}


def in_key_order(table: pa.Table, key: Sequence[str]) -> pa.Table:
    """``table`` sorted by ``key`` (Arrow's order): the deterministic order that makes a
    replayed chunk byte-identical. A chunk read by its primary key usually arrives in that
    order already (InnoDB reads the clustered index in order); one vectorized comparison
    finds that out and saves the sort, which costs more than the check."""
    if table.num_rows < 2:
        return table
    if len(key) == 1:
        import pyarrow.compute as pc

        col = table.column(key[0])
        if col.null_count == 0:
            try:
                ordered = pc.all(pc.less(col[:-1], col[1:])).as_py()
            except (pa.ArrowNotImplementedError, pa.ArrowInvalid):
                ordered = False  # a type Arrow cannot compare: sort (which may also refuse)
            if ordered is True:
                return table
    return table.sort_by([(c, "ascending") for c in key])


def snapshot_batches(table: pa.Table, schema: TableSchema, as_of: BinlogOffset,
                     out_schema: pa.Schema, shape: str, max_rows: int = 65536,
                     kind: str = INSERT) -> Iterable[pa.RecordBatch]:
    """A normalized chunk as ``insert`` rows (or rows of another change ``kind``), all
    with ``_seq`` = (as_of, snapshot)."""
    n = table.num_rows
    if n == 0:
        return
    seq = pa.scalar(decimal.Decimal(seq_number(as_of, SEQ_SNAPSHOT)), pa.decimal128(38, 0))
    # constant columns are built in Arrow (pa.repeat), not from Python lists of n values
    meta = {
        "_change_type": pa.repeat(pa.scalar(kind, pa.string()), n),
        "_database": pa.repeat(pa.scalar(schema.table_id.database, pa.string()), n),
        "_table": pa.repeat(pa.scalar(schema.table_id.table, pa.string()), n),
        "_op_ts": pa.nulls(n, pa.timestamp("us", tz="UTC")),
        "_seq": pa.repeat(seq, n),
    }
    if shape == COLUMNS:
        cols = [table.column(f.name).cast(f.type) if f.name not in meta else meta[f.name]
                for f in out_schema]
    else:
        rows = table.to_pylist()
        keys = pa.array([row_json(r, schema.row_key) for r in rows], pa.string())
        data = pa.array([row_json(r, schema.column_names) for r in rows], pa.string())
        cols = [meta.get(f.name, keys if f.name == "key" else data) for f in out_schema]
    full = pa.Table.from_arrays(cols, schema=out_schema)
    yield from full.to_batches(max_chunksize=max_rows)


EVENT_KEY = b"sparkcdc.event"


def event_batch(ev: TableEvent, schema: TableSchema) -> pa.RecordBatch:
    """A ``TableEvent`` (``core/table_events.py``) as a batch without rows in the table's
    columns shape (its schema from here on): the event rides in the schema's metadata
    (``EVENT_KEY``, its ``to_dict`` as JSON), so it travels with the change batches, in
    their order, and sorts among the table's rows by its ``seq``."""

    out = output_schema(arrow_schema(schema))
    out = out.with_metadata({EVENT_KEY: json.dumps(ev.to_dict(), sort_keys=True).encode()})
    return pa.RecordBatch.from_pylist([], schema=out)


def batch_event(schema: pa.Schema) -> TableEvent | None:
    """The event a batch without rows carries (``event_batch``), typed again, else None."""
    raw = (schema.metadata or {}).get(EVENT_KEY)
    return TableEvent.from_dict(json.loads(raw)) if raw is not None else None


class TableBuilders:
    """A ``RowBuilder`` per table, each in its table's own ``columns`` shape: the ``tables``
    shape of a window over tables that differ. ``batches`` gives one batch per table that
    has rows, so each batch keeps its table's types."""

    def __init__(self, schemas: Mapping[Any, TableSchema], preimages: bool = True):
        from sparkcdc.mysql.types import arrow_schema

        self._schemas = schemas
        self._preimages = preimages
        self._builders: dict[Any, RowBuilder] = {}
        self._arrow = arrow_schema

    def add_changes(self, records: Sequence[ChangeRecord], verdicts: Sequence[Verdict],
                    schemas: Mapping[Any, TableSchema]) -> None:
        by_table: dict[Any, tuple[list, list]] = {}
        for rec, v in zip(records, verdicts):
            recs, vs = by_table.setdefault(rec.table_id, ([], []))
            recs.append(rec)
            vs.append(v)
        for tid, (recs, vs) in by_table.items():
            b = self._builders.get(tid)
            if b is None:
                out = output_schema(self._arrow(schemas[tid]))
                b = self._builders[tid] = RowBuilder(out, COLUMNS, self._preimages)
            b.add_changes(recs, vs, schemas)

    def forget(self, table_id: Any) -> None:
        """Drop the table's (drained) builder: its next rows start one in its new schema."""
        self._builders.pop(table_id, None)

    def __len__(self) -> int:
        return sum(len(b) for b in self._builders.values())

    def batches(self) -> list[pa.RecordBatch]:
        """One batch per table with rows, the builders emptied."""
        return [b for x in self._builders.values() for b in x.batches()]

