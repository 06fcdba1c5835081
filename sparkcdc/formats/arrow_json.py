"""The change-event formats written from Arrow rows on the driver, without Spark.

``encode`` (``sparkcdc.formats``) builds messages with Spark expressions, which suits a
DataFrame spread over a cluster. The pipeline holds each micro-batch's change rows as Arrow
on the driver already; turning them into a Spark DataFrame, then JSON, then back to Arrow
cost the kafka sink most of its time (docs/benchmarks.md). This module writes the same
messages straight from the Arrow rows: each column gets one small function that renders
its values as JSON text (as ``formats/values.py`` describes the wire: decimals with every
digit, binary as base64, timestamps with microseconds, TIME as microseconds, nulls
written), and each message is put together from those pieces.

The messages are those of the Spark encoders, read back the same by ``decode`` and by the
kafka source (``tests/formats/test_arrow_json.py`` holds them side by side); two things
differ in form, not in meaning: timestamps are written in UTC (``Z``) whatever Spark's
session time zone, and a DOUBLE's exponent as Python spells it (``1e+300``).
"""

from __future__ import annotations

import base64
import datetime as dt
import json
import math
from collections.abc import Callable, Sequence
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc
from numpy import float32 as _np_float32

from sparkcdc.core.records import META_COLUMNS

Render = Callable[[Any], str]
_UTC = dt.timezone.utc
_dumps = json.JSONEncoder(ensure_ascii=False).encode


def _text(v: Any) -> str:
    return _dumps(v)


def _integer(v: Any) -> str:
    return str(int(v))


def _boolean(v: Any) -> str:
    return "true" if v else "false"


def _floating(v: Any) -> str:
    if math.isnan(v):
        return '"NaN"'
    if math.isinf(v):
        return '"Infinity"' if v > 0 else '"-Infinity"'
    return repr(float(v))


def _float32(v: Any) -> str:
    """A FLOAT in its shortest text for 32 bits (``1.1``, not the double ``1.1000000238``),
    as Java writes it."""
    if math.isnan(v) or math.isinf(v):
        return _floating(v)
    return str(_np_float32(v))


def _decimal(v: Any) -> str:
    return format(v, "f")


def _binary(v: Any) -> str:
    return '"' + base64.b64encode(v).decode("ascii") + '"'


def _date(v: Any) -> str:
    return f'"{v.year:04d}-{v.month:02d}-{v.day:02d}"'


def _datetime(v: dt.datetime) -> str:
    return (f"{v.year:04d}-{v.month:02d}-{v.day:02d}T{v.hour:02d}:{v.minute:02d}:"
            f"{v.second:02d}.{v.microsecond:06d}")


def _timestamp(v: Any) -> str:
    return '"' + _datetime(v.astimezone(_UTC)) + 'Z"'


def _naive(v: Any) -> str:
    return '"' + _datetime(v) + '"'


def _micros(v: Any) -> str:  # MySQL TIME: Debezium's MicroTime
    return str((v.days * 86_400 + v.seconds) * 1_000_000 + v.microseconds)


def renderer(t: pa.DataType) -> Render:
    """How a column of Arrow type ``t`` is written (values are never null here)."""
    if pa.types.is_boolean(t):
        return _boolean
    if pa.types.is_integer(t):
        return _integer
    if pa.types.is_float32(t):
        return _float32
    if pa.types.is_floating(t):
        return _floating
    if pa.types.is_decimal(t):
        return _decimal
    if pa.types.is_binary(t) or pa.types.is_large_binary(t) or pa.types.is_fixed_size_binary(t):
        return _binary
    if pa.types.is_date(t):
        return _date
    if pa.types.is_timestamp(t):
        return _timestamp if t.tz else _naive
    if pa.types.is_duration(t):
        return _micros
    if pa.types.is_string(t) or pa.types.is_large_string(t):
        return _text
    raise TypeError(f"no JSON form for Arrow type {t}")


class Rows:
    """The batch's rows as JSON pieces: for every row, each data column's rendered value,
    and the metadata columns as Python values; rows in ``_seq`` order."""

    def __init__(self, table: pa.Table):
        order = pc.sort_indices(table, sort_keys=[("_seq", "ascending")])
        table = table.take(order)
        self.names = [n for n in table.column_names if n not in META_COLUMNS]
        self.labels = [_dumps(n) + ":" for n in self.names]
        self.values: list[list[str]] = []
        for n in self.names:
            col = table.column(n)
            render = renderer(col.type)
            self.values.append([("null" if v is None else render(v)) for v in col.to_pylist()])
        self.kind = table.column("_change_type").to_pylist()
        self.db = table.column("_database").to_pylist()
        self.table = table.column("_table").to_pylist()
        self.seq = [None if s is None else str(s) for s in table.column("_seq").to_pylist()]
        self.ts_ms = [None if t is None else _millis(t)
                      for t in table.column("_op_ts").to_pylist()]
        self.count = table.num_rows

    def row(self, i: int, only: Sequence[int] | None = None) -> str:
        cols = range(len(self.names)) if only is None else only
        return "{" + ",".join(self.labels[c] + self.values[c][i] for c in cols) + "}"

    def key(self, i: int, keys: Sequence[int]) -> str:
        return self.row(i, keys)

    def pairs(self, keys: Sequence[int]) -> list[tuple[int, int | None]]:
        """``(row, its pre-image's row)`` for every row but the pre-images: an update's
        post-image is paired with the row before it of the same key when that row is its
        pre-image (what the Spark encoders' window does)."""
        last: dict[tuple, int] = {}
        out = []
        for i in range(self.count):
            k = tuple(self.values[c][i] for c in keys)
            prev = last.get(k)
            last[k] = i
            if self.kind[i] == "update_preimage":
                continue
            pre = (prev if self.kind[i] == "update_postimage" and prev is not None
                   and self.kind[prev] == "update_preimage" else None)
            out.append((i, pre))
        return out


def _millis(t: dt.datetime) -> int:
    """Milliseconds since the epoch, rounded down (as ``floor(unix_micros / 1000)``)."""
    if t.tzinfo is None:
        t = t.replace(tzinfo=_UTC)
    return ((t - _EPOCH) // dt.timedelta(microseconds=1)) // 1000


_EPOCH = dt.datetime(1970, 1, 1, tzinfo=_UTC)


def _j(v: Any) -> str:
    return "null" if v is None else _dumps(v)


def encode(table: pa.Table, fmt: str, keys: Sequence[str], *, name: str = "sparkcdc",
           version: str = "", tombstones: bool = False) -> list[tuple[bytes, bytes | None]]:
    """The batch's messages (key, value) in ``_seq`` order; ``tombstones``: a null value
    after each delete."""
    rows = Rows(table)
    key_cols = [rows.names.index(k) for k in keys]
    out: list[tuple[bytes, bytes | None]] = []
    if fmt == "changelog-json":
        ops = {"insert": "+I", "update_preimage": "-U", "update_postimage": "+U",
               "delete": "-D"}
        for i in range(rows.count):
            value = (f'{{"data":{rows.row(i)},"op":"{ops[rows.kind[i]]}","seq":{_j(rows.seq[i])},'
                     f'"db":{_j(rows.db[i])},"table":{_j(rows.table[i])},'
                     f'"ts_ms":{_j(rows.ts_ms[i])}}}')
            _add(out, rows.key(i, key_cols) if key_cols else None, value,
                 tombstones and rows.kind[i] == "delete")
        return out
    for i, pre in rows.pairs(key_cols):
        kind = rows.kind[i]
        if fmt == "debezium-json":
            value = _debezium(rows, i, pre, kind, name, version)
        elif fmt == "canal-json":
            value = _canal(rows, i, pre, kind, keys)
        else:
            raise ValueError(f"unknown format {fmt!r}")
        _add(out, rows.key(i, key_cols), value, tombstones and kind == "delete")
    return out


def _add(out: list, key: str | None, value: str, tombstone: bool) -> None:
    k = None if key is None else key.encode()
    out.append((k, value.encode()))
    if tombstone:
        out.append((k, None))


def _debezium(rows: Rows, i: int, pre: int | None, kind: str, name: str, version: str) -> str:
    ts = rows.ts_ms[i]
    op = ("r" if ts is None else "c") if kind == "insert" else (
        "d" if kind == "delete" else "u")
    before = (rows.row(i) if op == "d" else rows.row(pre) if op == "u" and pre is not None
              else "null")
    after = "null" if op == "d" else rows.row(i)
    seq_before = rows.seq[pre] if pre is not None else None
    source = (f'{{"version":{_j(version)},"connector":"mysql","name":{_j(name)},'
              f'"ts_ms":{_j(ts)},"snapshot":"{"true" if op == "r" else "false"}",'
              f'"db":{_j(rows.db[i])},"table":{_j(rows.table[i])},"seq":{_j(rows.seq[i])},'
              f'"seq_before":{_j(seq_before)}}}')
    return (f'{{"before":{before},"after":{after},"source":{source},"op":"{op}",'
            f'"ts_ms":{_j(ts)}}}')


def _canal(rows: Rows, i: int, pre: int | None, kind: str, keys: Sequence[str]) -> str:
    typ = {"insert": "INSERT", "delete": "DELETE"}.get(kind, "UPDATE")
    if pre is None:
        old = "null"
    else:
        changed = [c for c in range(len(rows.names)) if rows.values[c][pre] != rows.values[c][i]]
        old = "[" + rows.row(pre, changed) + "]"
    ts = rows.ts_ms[i]
    seq_before = rows.seq[pre] if pre is not None else None
    return (f'{{"data":[{rows.row(i)}],"old":{old},"type":"{typ}",'
            f'"database":{_j(rows.db[i])},"table":{_j(rows.table[i])},'
            f'"pkNames":{_dumps(list(keys))},"isDdl":false,"es":{_j(ts)},"ts":{_j(ts)},'
            f'"seq":{_j(rows.seq[i])},"seq_before":{_j(seq_before)}}}')
