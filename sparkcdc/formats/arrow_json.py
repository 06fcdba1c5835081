"""The change-event formats written from Arrow rows on the driver, without Spark.

``encode`` (``sparkcdc.formats``) builds messages with Spark expressions, which suits a
DataFrame spread over a cluster. The pipeline holds each micro-batch's change rows as Arrow
on the driver already; turning them into a Spark DataFrame, then JSON, then back to Arrow
cost the kafka sink most of its time (docs/benchmarks.md). This module writes the same
messages straight from the Arrow rows, and column-wise throughout, since the kafka sink
spends its time here: each column's values become JSON text once
(``formats/json_columns.py``), each row's object is joined from them by Arrow, an update's
post-image finds its pre-image with array arithmetic, and each message is joined by Arrow
from its pieces taken by row. Python touches only the finished messages, as the bytes the
producer takes.

The messages are those of the Spark encoders, read back the same by ``decode`` and by the
kafka source (``tests/formats/test_arrow_json.py`` holds them side by side); two things
differ in form, not in meaning: timestamps are written in UTC (``Z``) whatever Spark's
session time zone, and a DOUBLE's exponent as Python spells it (``1e+300``).
"""

from __future__ import annotations

import json
from collections.abc import Iterator, Sequence
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from sparkcdc.core.records import META_COLUMNS
from sparkcdc.formats.json_columns import Json, column_parts, constant, join

_dumps = json.JSONEncoder(ensure_ascii=False).encode

KINDS = ("insert", "update_preimage", "update_postimage", "delete")
INSERT, PRE, POST, DELETE = range(4)  # codes of KINDS; -1 for another kind


class Rows:
    """The batch's rows as JSON text, in ``_seq`` order: each row's data columns as one
    object, its key's object (None without keys), each column's values (for Canal's
    changed columns), the metadata columns' values, and each row's kind as a code."""

    def __init__(self, table: pa.Table, keys: Sequence[str]):
        table = _in_seq_order(table)
        self.count = table.num_rows
        self.names = [n for n in table.column_names if n not in META_COLUMNS]
        self.labels = [_dumps(n) + ":" for n in self.names]
        self.cells = [column_parts(table.column(n)) for n in self.names]
        self.objects = _objects(self.labels, self.cells, self.count)
        key_at = [self.names.index(k) for k in keys]
        self.keys = (_objects([self.labels[c] for c in key_at], [self.cells[c] for c in key_at],
                              self.count) if key_at else None)
        self.kind = _kind_codes(table)
        self.db = constant(table.column("_database"))
        self.table = constant(table.column("_table"))
        seq = _array(table.column("_seq"))
        self.seq = Json(pc.cast(seq, pa.string()), '"', '"')
        if seq.null_count:
            self.seq = Json(pc.fill_null(join(self.seq), "null"))
        self.ts_null, ts_ms = _millis(_array(table.column("_op_ts")))
        self.ts_ms = Json(ts_ms)

    def preimages(self) -> np.ndarray:
        """Each row's pre-image's row, or -1: an update's post-image is paired with the row
        before it of the same key when that row is its pre-image (what the Spark encoders'
        window does)."""
        n, kind = self.count, self.kind
        out = np.full(n, -1, dtype=np.int64)
        if n == 0 or not (kind == PRE).any():
            return out
        prev = _previous_of_key(self.keys, kind)
        post = np.flatnonzero(kind == POST)
        post = post[prev[post] >= 0]
        paired = post[kind[prev[post]] == PRE]
        out[paired] = prev[paired]
        return out


def _in_seq_order(table: pa.Table) -> pa.Table:
    """The rows sorted by ``_seq``, equal ones in their order (a stable sort); a batch
    comes in order already, which one comparison of neighbours tells."""
    seq = table.column("_seq")
    if table.num_rows <= 1 or (seq.null_count == 0 and pc.all(
            pc.greater_equal(seq[1:], seq[:-1])).as_py()):
        return table
    return table.take(pc.sort_indices(table, sort_keys=[("_seq", "ascending")]))


def _kind_codes(table: pa.Table) -> np.ndarray:
    """Each row's kind as its code in ``KINDS``, -1 for another kind."""
    kind = _array(table.column("_change_type"))
    if pa.types.is_dictionary(kind.type):
        kind = kind.dictionary_decode()
    return pc.fill_null(pc.index_in(kind, value_set=pa.array(KINDS)), -1).to_numpy()


def _array(col: pa.ChunkedArray) -> pa.Array:
    return col.chunk(0) if col.num_chunks == 1 else col.combine_chunks()


def _objects(labels: list[str], cells: list[Json], n: int) -> pa.Array:
    """One JSON object per row from its columns' JSON text."""
    if not cells:
        return pa.array(["{}"] * n, pa.string())
    parts: list[Any] = []
    for i, (label, cell) in enumerate(zip(labels, cells)):
        parts += [("{" if i == 0 else ",") + label, cell]
    return join(*parts, "}")


def _millis(col: pa.Array) -> tuple[np.ndarray, pa.Array]:
    """Which commit times are null, and each as milliseconds since the epoch in JSON
    (floored, as Python's ``//``), ``null`` for nulls."""
    t = col.type
    micros = col.cast(pa.timestamp("us", tz=t.tz)) if t.unit != "us" else col
    us = pc.cast(micros, pa.int64())
    null = us.is_null().to_numpy(zero_copy_only=False)
    ms = np.floor_divide(pc.fill_null(us, 0).to_numpy(), 1000)
    return null, pc.fill_null(pc.cast(pa.array(ms, mask=null), pa.string()), "null")


def _previous_of_key(keys: pa.Array | None, kind: np.ndarray) -> np.ndarray:
    """Each row's nearest earlier row of the same key, or -1 (without keys, all rows share
    one), as far as a post-image's pairing needs it. When every pre-image is followed at
    once by a row of its key (the source writes an update's two images together), a
    post-image's pre-image can only be the row just before it, and comparing neighbours
    tells (-1 then also where the earlier row of the key cannot be a pre-image); otherwise
    the rows are sorted by key, stably."""
    n = len(kind)
    before = np.arange(-1, n - 1, dtype=np.int64)
    if keys is None:
        return before
    same = np.append(pc.equal(keys[1:], keys[:-1]).to_numpy(zero_copy_only=False), False)
    pre = np.flatnonzero(kind == PRE)
    if same[pre].all():  # same[i]: row i + 1 has row i's key
        return np.where(np.insert(same[:-1], 0, False), before, -1)
    order = pc.sort_indices(keys).to_numpy()
    ordered = keys.take(order)
    same = pc.equal(ordered[1:], ordered[:-1]).to_numpy(zero_copy_only=False)
    out = np.full(n, -1, dtype=np.int64)
    out[order[1:][same]] = order[:-1][same]
    return out


def _j(v: Any) -> str:
    return "null" if v is None else _dumps(v)


def encode(table: pa.Table, fmt: str, keys: Sequence[str], *, name: str = "sparkcdc",
           version: str = "", tombstones: bool = False) -> list[tuple[bytes, bytes | None]]:
    """The batch's messages (key, value) in ``_seq`` order; ``tombstones``: a null value
    after each delete."""
    rows = Rows(table, keys)
    if fmt == "changelog-json":
        emitted, values = None, _changelog(rows)
        kind = rows.kind
    elif fmt in ("debezium-json", "canal-json"):
        emitted = np.flatnonzero(rows.kind != PRE)  # a pre-image travels in its update
        if len(emitted) == rows.count:
            emitted = None
        pre = rows.preimages()
        if emitted is not None:
            pre = pre[emitted]
        kind = rows.kind if emitted is None else rows.kind[emitted]
        if fmt == "debezium-json":
            values = _debezium(rows, emitted, pre, kind, _j(name), _j(version))
        else:
            values = _canal(rows, emitted, pre, kind, _dumps(list(keys)))
    else:
        raise ValueError(f"unknown format {fmt!r}")
    key = None if rows.keys is None else rows.keys if emitted is None else rows.keys.take(emitted)
    return _messages(key, values, (kind == DELETE) if tombstones else None)


PART_ROWS = 10_000


def encode_parts(table: pa.Table, fmt: str, keys: Sequence[str], *, rows: int = PART_ROWS,
                 **kw: Any) -> Iterator[list[tuple[bytes, bytes | None]]]:
    """``encode``'s messages in parts of about ``rows`` rows each, the same messages in the
    same order: the kafka sink hands each part to its producer, whose threads send it while
    the next is encoded, and a part's memory is used again for the next (fresh memory made
    the encoding of one large batch take twice as long). A part ends only where no update's
    two images would be parted; a batch whose pre-images do not each come just before their
    post-image (never so from the pipeline's source) is encoded whole."""
    table = _in_seq_order(table)
    for part in _parts(table, keys, rows):
        yield encode(part, fmt, keys, **kw)


def _parts(table: pa.Table, keys: Sequence[str], rows: int) -> Iterator[pa.Table]:
    n = table.num_rows
    if n <= rows:
        yield table
        return
    code = _kind_codes(table)
    pre = np.flatnonzero(code == PRE)
    if len(pre):
        nxt = pre + 1
        if nxt[-1] >= n or not (code[nxt] == POST).all():
            yield table
            return
        for k in keys:  # and of the same key
            col = _array(table.column(k))
            same = pc.equal(col[1:], col[:-1]).to_numpy(zero_copy_only=False)
            if not same[pre].all():
                yield table
                return
    start = 0
    while start < n:
        end = min(n, start + rows)
        if end < n and code[end - 1] == PRE:
            end += 1  # the post-image stays with its pre-image
        yield table.slice(start, end - start)
        start = end


def _messages(key: pa.Array | None, value: pa.Array,
              tombstone: np.ndarray | None) -> list[tuple[bytes, bytes | None]]:
    """(key, value) bytes per message; a null value after each one ``tombstone`` marks."""
    if tombstone is not None and tombstone.any():
        copies = 1 + tombstone.astype(np.int64)
        at = np.repeat(np.arange(len(value)), copies)
        empty = np.zeros(len(at), dtype=bool)
        empty[(np.cumsum(copies) - 1)[tombstone]] = True
        value = value.take(pa.array(at, mask=empty))
        key = None if key is None else key.take(at)
    values = value.cast(pa.binary()).to_pylist()
    keys = [None] * len(values) if key is None else key.cast(pa.binary()).to_pylist()
    return list(zip(keys, values))


def _changelog(rows: Rows) -> pa.Array:
    if (rows.kind < 0).any():
        raise ValueError(f"a change row of another kind than {', '.join(KINDS)}")
    op = pa.array(["+I", "-U", "+U", "-D"]).take(rows.kind)
    return join('{"data":', rows.objects, ',"op":"', op, '","seq":', rows.seq, ',"db":',
                rows.db, ',"table":', rows.table, ',"ts_ms":', rows.ts_ms, "}")


_R, _C, _D, _U = range(4)  # Debezium's ops, as codes into these:
_OPS = pa.array(["r", "c", "d", "u"])
_SNAPSHOT = pa.array(["true", "false", "false", "false"])


def _debezium(rows: Rows, emitted: np.ndarray | None, pre: np.ndarray, kind: np.ndarray,
              name: str, version: str) -> pa.Array:
    """Snapshot rows (inserts without a commit time) are ``r``; a kind other than insert
    or delete is an update, its ``before`` its pre-image when it has one."""
    ts_null = rows.ts_null if emitted is None else rows.ts_null[emitted]
    insert, delete = kind == INSERT, kind == DELETE
    op = np.where(insert, np.where(ts_null, _R, _C), np.where(delete, _D, _U))
    row = np.arange(rows.count) if emitted is None else emitted
    objects = Json(rows.objects)
    before = objects.take(np.where(delete, row, pre), ~delete & (pre < 0))
    after = objects.take(emitted, delete if delete.any() else None)
    ts = rows.ts_ms.take(emitted)
    return join(
        '{"before":', before, ',"after":', after,
        f',"source":{{"version":{version},"connector":"mysql","name":{name},"ts_ms":', ts,
        ',"snapshot":"', _SNAPSHOT.take(op), '","db":', rows.db.take(emitted),
        ',"table":', rows.table.take(emitted), ',"seq":', rows.seq.take(emitted),
        ',"seq_before":', rows.seq.take(pre, pre < 0), '},"op":"', _OPS.take(op),
        '","ts_ms":', ts, "}")


_TYPES = pa.array(["UPDATE", "INSERT", "DELETE"])  # by kind: another, insert, delete


def _canal(rows: Rows, emitted: np.ndarray | None, pre: np.ndarray, kind: np.ndarray,
           pk_names: str) -> pa.Array:
    """``old``: an update's pre-image values of the columns it changed."""
    typ = _TYPES.take(np.where(kind == INSERT, 1, np.where(kind == DELETE, 2, 0)))
    ts = rows.ts_ms.take(emitted)
    return join(
        '{"data":[', Json(rows.objects).take(emitted), '],"old":', _old(rows, emitted, pre),
        ',"type":"', typ, '","database":', rows.db.take(emitted),
        ',"table":', rows.table.take(emitted),
        f',"pkNames":{pk_names},"isDdl":false,"es":', ts, ',"ts":', ts,
        ',"seq":', rows.seq.take(emitted), ',"seq_before":', rows.seq.take(pre, pre < 0), "}")


def _old(rows: Rows, emitted: np.ndarray | None, pre: np.ndarray) -> pa.Array | str:
    """Canal's ``old`` per message: ``null`` without a pre-image, else ``[{...}]`` of the
    columns whose JSON text differs between the pre-image and the row, in column order.
    Each column's two cells are compared by Arrow for the paired rows only."""
    paired = np.flatnonzero(pre >= 0)
    if not len(paired):
        return "null"
    after = paired if emitted is None else emitted[paired]
    before = pre[paired]
    parts = []
    for label, cell in zip(rows.labels, rows.cells):
        if isinstance(cell.body, str):
            continue  # one value in every row: never changed
        was, now = cell.body.take(before), cell.body.take(after)
        parts.append(pc.if_else(pc.not_equal(was, now),
                                join(Json(was, "," + label + cell.prefix, cell.suffix)), ""))
    changed = join(*parts) if parts else pa.repeat(pa.scalar(""), len(paired))
    old = join("[{", pc.utf8_slice_codeunits(changed, 1), "}]")
    where = np.full(len(pre), len(paired), dtype=np.int64)  # "null" after the paired ones
    where[paired] = np.arange(len(paired))
    return pa.concat_arrays([old, pa.array(["null"], pa.string())]).take(where)
