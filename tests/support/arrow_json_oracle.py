"""The driver-side writer of the formats as it was before it worked column-wise (commit
f90794f's ``sparkcdc/formats/arrow_json.py``, value by value in Python), kept only as the
oracle ``tests/formats/test_arrow_json.py`` compares the column-wise one with, byte for byte.
Not part of the package. One change since, made in both: a FLOAT or DOUBLE column's finite
values are written the same whether or not the batch holds a NaN or an infinity (before,
such a batch wrote ``0.0`` where another wrote ``0``), so a message's bytes never depend on
the other rows of its batch (the kafka sink writes a batch in parts)."""
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


_text: Render = json.encoder.encode_basestring  # type: ignore[attr-defined]  # C, no ASCII escapes


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


def _binary(v: Any) -> str:
    return '"' + base64.b64encode(v).decode("ascii") + '"'


def _datetime(v: dt.datetime) -> str:
    return (f"{v.year:04d}-{v.month:02d}-{v.day:02d}T{v.hour:02d}:{v.minute:02d}:"
            f"{v.second:02d}.{v.microsecond:06d}")


def _timestamp(v: Any) -> str:
    return '"' + _datetime(v.astimezone(_UTC)) + 'Z"'


def _naive(v: Any) -> str:
    return '"' + _datetime(v) + '"'


def _micros(v: Any) -> str:  # MySQL TIME: Debezium's MicroTime
    return str((v.days * 86_400 + v.seconds) * 1_000_000 + v.microseconds)


def _renderer(t: pa.DataType) -> Render:
    """How a value of Arrow type ``t`` is written one by one (never null here), for the
    columns ``column_json`` leaves to Python."""
    if pa.types.is_float32(t):
        return _float32
    if pa.types.is_floating(t):
        return _floating
    if pa.types.is_binary(t) or pa.types.is_large_binary(t) or pa.types.is_fixed_size_binary(t):
        return _binary
    if pa.types.is_timestamp(t):
        return _timestamp if t.tz else _naive
    if pa.types.is_duration(t):
        return _micros
    if pa.types.is_string(t) or pa.types.is_large_string(t):
        return _text
    raise TypeError(f"no JSON form for Arrow type {t}")


def column_json(col: pa.ChunkedArray | pa.Array) -> pa.Array:
    """A column's values as JSON text, ``null`` for nulls: in Arrow's kernels where they
    write what Spark's JSON writer writes (numbers, dates, timestamps), else value by value
    in Python (text, which needs JSON's escapes; binary; NaN and infinities)."""
    col = col.combine_chunks() if isinstance(col, pa.ChunkedArray) else col
    t = col.type
    out: pa.Array | None = None
    if pa.types.is_boolean(t):
        out = pc.if_else(col, "true", "false")
    elif pa.types.is_integer(t) or pa.types.is_decimal(t):
        out = pc.cast(col, pa.string())
    elif pa.types.is_floating(t):  # a value's text never depends on the others'
        out = pc.cast(col, pa.string())
        odd = pc.fill_null(pc.invert(pc.is_finite(col)), False)  # NaN, infinities
        if pc.any(odd).as_py():
            render = _renderer(t)
            out = pc.replace_with_mask(out, odd, pa.array(
                [render(v) for v in col.filter(odd).to_pylist()], pa.string()))
    elif pa.types.is_date(t):
        out = _quoted(pc.cast(col, pa.string()))
    elif pa.types.is_timestamp(t) and t.unit == "us":  # strftime writes the unit's digits
        if t.tz:
            utc = col.cast(pa.timestamp("us", tz="UTC"))
            out = _quoted(pc.strftime(utc, format="%Y-%m-%dT%H:%M:%SZ"))
        else:
            out = _quoted(pc.strftime(col, format="%Y-%m-%dT%H:%M:%S"))
    elif pa.types.is_duration(t) and t.unit == "us":
        out = pc.cast(pc.cast(col, pa.int64()), pa.string())
    if out is None:
        render = _renderer(t)
        out = pa.array([None if v is None else render(v) for v in col.to_pylist()],
                       pa.string())
    return pc.fill_null(out, "null")


def _quoted(a: pa.Array) -> pa.Array:
    return pc.binary_join_element_wise('"', a, '"', "")


class Rows:
    """The batch's rows as JSON text, in ``_seq`` order: each row's data columns as one
    object, its key's object, each column's values (for Canal's changed columns), the
    metadata columns' values (``_change_type`` as a Python string)."""

    def __init__(self, table: pa.Table, keys: Sequence[str]):
        order = pc.sort_indices(table, sort_keys=[("_seq", "ascending")])
        table = table.take(order)
        self.names = [n for n in table.column_names if n not in META_COLUMNS]
        self.labels = [_dumps(n) + ":" for n in self.names]
        self.cells = [column_json(table.column(n)) for n in self.names]
        self.objects = _objects(self.labels, self.cells).to_pylist()
        key_at = [self.names.index(k) for k in keys]
        self.keys = (_objects([self.labels[c] for c in key_at], [self.cells[c] for c in key_at])
                     .to_pylist() if key_at else [None] * table.num_rows)
        self._values: list[list[str]] | None = None
        self.kind = table.column("_change_type").to_pylist()
        self.db = _texts(table.column("_database").to_pylist())
        self.table = _texts(table.column("_table").to_pylist())
        self.seq = pc.fill_null(_quoted(pc.cast(table.column("_seq"), pa.string())),
                                "null").to_pylist()
        self.ts_ms = ["null" if v is None else str(v // 1000)
                      for v in _micros_since_epoch(table.column("_op_ts"))]
        self.count = table.num_rows

    @property
    def values(self) -> list[list[str]]:
        if self._values is None:
            self._values = [c.to_pylist() for c in self.cells]
        return self._values

    def subset(self, i: int, columns: Sequence[int]) -> str:
        """Row ``i``'s object of only ``columns``."""
        return "{" + ",".join(self.labels[c] + self.values[c][i] for c in columns) + "}"

    def pairs(self) -> list[tuple[int, int | None]]:
        """``(row, its pre-image's row)`` for every row but the pre-images: an update's
        post-image is paired with the row before it of the same key when that row is its
        pre-image (what the Spark encoders' window does)."""
        last: dict[str | None, int] = {}
        out = []
        for i in range(self.count):
            k = self.keys[i]
            prev = last.get(k)
            last[k] = i
            if self.kind[i] == "update_preimage":
                continue
            pre = (prev if self.kind[i] == "update_postimage" and prev is not None
                   and self.kind[prev] == "update_preimage" else None)
            out.append((i, pre))
        return out


def _objects(labels: list[str], cells: list[pa.Array]) -> pa.Array:
    """One JSON object per row from its columns' JSON text."""
    if not cells:
        return pa.array(["{}"])
    parts: list[Any] = []
    for i, (label, cell) in enumerate(zip(labels, cells)):
        parts += [("{" if i == 0 else ",") + label, cell]
    return pc.binary_join_element_wise(*parts, "}", "")


def _texts(values: list) -> list[str]:
    seen: dict = {}
    return [seen[v] if v in seen else seen.setdefault(v, _j(v)) for v in values]


def _micros_since_epoch(col: pa.ChunkedArray) -> list[int | None]:
    t = col.type
    micros = col.cast(pa.timestamp("us", tz=t.tz)) if t.unit != "us" else col
    return pc.cast(micros, pa.int64()).to_pylist()


def _j(v: Any) -> str:
    return "null" if v is None else _dumps(v)


def encode(table: pa.Table, fmt: str, keys: Sequence[str], *, name: str = "sparkcdc",
           version: str = "", tombstones: bool = False) -> list[tuple[bytes, bytes | None]]:
    """The batch's messages (key, value) in ``_seq`` order; ``tombstones``: a null value
    after each delete."""
    rows = Rows(table, keys)
    out: list[tuple[bytes, bytes | None]] = []
    if fmt == "changelog-json":
        ops = {"insert": "+I", "update_preimage": "-U", "update_postimage": "+U",
               "delete": "-D"}
        for i in range(rows.count):
            value = (f'{{"data":{rows.objects[i]},"op":"{ops[rows.kind[i]]}",'
                     f'"seq":{rows.seq[i]},"db":{rows.db[i]},"table":{rows.table[i]},'
                     f'"ts_ms":{rows.ts_ms[i]}}}')
            _add(out, rows.keys[i], value, tombstones and rows.kind[i] == "delete")
        return out
    name, version, pk_names = _j(name), _j(version), _dumps(list(keys))
    for i, pre in rows.pairs():
        kind = rows.kind[i]
        if fmt == "debezium-json":
            value = _debezium(rows, i, pre, kind, name, version)
        elif fmt == "canal-json":
            value = _canal(rows, i, pre, kind, pk_names)
        else:
            raise ValueError(f"unknown format {fmt!r}")
        _add(out, rows.keys[i], value, tombstones and kind == "delete")
    return out


def _add(out: list, key: str | None, value: str, tombstone: bool) -> None:
    k = None if key is None else key.encode()
    out.append((k, value.encode()))
    if tombstone:
        out.append((k, None))


def _debezium(rows: Rows, i: int, pre: int | None, kind: str, name: str, version: str) -> str:
    ts = rows.ts_ms[i]
    op = ("r" if ts == "null" else "c") if kind == "insert" else (
        "d" if kind == "delete" else "u")
    before = (rows.objects[i] if op == "d" else rows.objects[pre]
              if op == "u" and pre is not None else "null")
    after = "null" if op == "d" else rows.objects[i]
    seq_before = rows.seq[pre] if pre is not None else "null"
    source = (f'{{"version":{version},"connector":"mysql","name":{name},'
              f'"ts_ms":{ts},"snapshot":"{"true" if op == "r" else "false"}",'
              f'"db":{rows.db[i]},"table":{rows.table[i]},"seq":{rows.seq[i]},'
              f'"seq_before":{seq_before}}}')
    return (f'{{"before":{before},"after":{after},"source":{source},"op":"{op}",'
            f'"ts_ms":{ts}}}')


def _canal(rows: Rows, i: int, pre: int | None, kind: str, pk_names: str) -> str:
    typ = {"insert": "INSERT", "delete": "DELETE"}.get(kind, "UPDATE")
    if pre is None:
        old = "null"
    else:
        changed = [c for c in range(len(rows.names)) if rows.values[c][pre] != rows.values[c][i]]
        old = "[" + rows.subset(pre, changed) + "]"
    ts = rows.ts_ms[i]
    seq_before = rows.seq[pre] if pre is not None else "null"
    return (f'{{"data":[{rows.objects[i]}],"old":{old},"type":"{typ}",'
            f'"database":{rows.db[i]},"table":{rows.table[i]},'
            f'"pkNames":{pk_names},"isDdl":false,"es":{ts},"ts":{ts},'
            f'"seq":{rows.seq[i]},"seq_before":{seq_before}}}')
