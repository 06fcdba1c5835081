"""Each Arrow column's values as JSON text, a whole column at a time.

The driver-side writer (``formats/arrow_json.py``) puts every message together from these
pieces, so a batch's values are rendered once, column by column, in Arrow's kernels where
they write what Spark's JSON writer writes (``formats/values.py`` describes the wire:
decimals with every digit, binary as base64, timestamps with microseconds, TIME as
microseconds, nulls written). Python renders a value only where no kernel writes it
right: binary (base64), NaN and infinities, text that needs JSON's escapes, and the rare
units and ranges named below. Text is the common case worth care: most values need no
escape, so they are quoted by Arrow, and only those holding ``"``, ``\\`` or a control
character are escaped one by one, as ``json`` escapes them (non-ASCII kept as is).

Arrow's join of strings costs about the same per piece whatever its length, and a message
is joined from many. So a column is kept as ``Json``: a body and the constant text around
it in every row (the quotes of text, dates and timestamps without nulls; a metadata column
of one value is all constant), and ``join`` writes that constant text together with its
neighbours' rather than in passes of its own.
"""

from __future__ import annotations

import base64
import datetime as dt
import json
import math
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, TypeAlias

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

Render = Callable[[Any], str]
_UTC = dt.timezone.utc

text: Render = json.encoder.encode_basestring  # type: ignore[attr-defined]  # C, no ASCII escapes

# the bytes JSON escapes in text: control characters, '"' and '\'; UTF-8 puts none of them
# inside a multi-byte character, so a byte scan finds the values that need escaping
_ESCAPED = np.zeros(256, dtype=bool)
_ESCAPED[:0x20] = _ESCAPED[ord('"')] = _ESCAPED[ord("\\")] = True

# the microseconds since the epoch of 0001-01-01 and of the end of 9999, the range in which
# Arrow's cast of a timestamp to text writes what strftime writes
_FIRST_US, _LAST_US = -62_135_596_800_000_000, 253_402_300_799_999_999


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
    return str(np.float32(v))


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
        return text
    raise TypeError(f"no JSON form for Arrow type {t}")


@dataclass(frozen=True)
class Json:
    """A column's JSON text: ``prefix + body + suffix`` in every row, ``body`` a str when
    the column holds one value."""

    body: pa.Array | str
    prefix: str = ""
    suffix: str = ""

    def take(self, rows: np.ndarray | None, missing: np.ndarray | None = None) -> Json:
        """The rows at ``rows`` (all, in order, when None), JSON's ``null`` where
        ``missing``."""
        body = self.body
        if isinstance(body, str):
            if missing is None:
                return self
            return Json(pc.if_else(pa.array(missing), "null", self.prefix + body + self.suffix))
        if missing is not None:
            at = pa.array(np.arange(len(missing)) if rows is None else rows, mask=missing)
            return Json(pc.fill_null(join(Json(body.take(at), self.prefix, self.suffix)),
                                     "null"))
        return self if rows is None else Json(body.take(rows), self.prefix, self.suffix)


Piece: TypeAlias = "str | pa.Array | Json"


def join(*pieces: Piece) -> pa.Array:
    """Each row's pieces joined, constant text merged with its neighbours' first."""
    parts: list[Any] = []
    fixed = ""  # the constant text since the last column
    for p in pieces:
        if isinstance(p, Json):
            if isinstance(p.body, str):
                fixed += p.prefix + p.body + p.suffix
                continue
            parts += [fixed + p.prefix, p.body]
            fixed = p.suffix
        elif isinstance(p, str):
            fixed += p
        else:
            parts += [fixed, p]
            fixed = ""
    parts = [p for p in parts + [fixed] if not isinstance(p, str) or p]
    if not any(isinstance(p, pa.Array) for p in parts):
        raise ValueError("join needs one column among its pieces")
    return pc.binary_join_element_wise(*parts, "")


def column_json(col: pa.ChunkedArray | pa.Array) -> pa.Array:
    """A column's values as JSON text, ``null`` for nulls."""
    j = column_parts(col)
    return j.body if not (j.prefix or j.suffix) else join(j)  # type: ignore[return-value]


def constant(col: pa.ChunkedArray | pa.Array) -> Json:
    """``column_parts``, all constant when the column holds one value (the database and
    table of a batch, mostly)."""
    col = col.combine_chunks() if isinstance(col, pa.ChunkedArray) else col
    if len(col) and not col.null_count and pc.all(pc.equal(col, col[0])).as_py():
        return Json(column_json(col.slice(0, 1))[0].as_py())
    return column_parts(col)


def column_parts(col: pa.ChunkedArray | pa.Array) -> Json:
    """A column's values as JSON text, ``null`` for nulls, the quotes around text, dates
    and timestamps kept apart when the column has no nulls."""
    col = col.combine_chunks() if isinstance(col, pa.ChunkedArray) else col
    if pa.types.is_dictionary(col.type):
        col = col.dictionary_decode()
    t = col.type
    out: pa.Array | None = None
    if pa.types.is_large_string(t):  # a message's pieces share one type
        return _quoted(col, _text_body(col.cast(pa.string())))
    if pa.types.is_string(t):
        return _quoted(col, _text_body(col))
    if pa.types.is_date(t):
        return _quoted(col, pc.cast(col, pa.string()))
    if pa.types.is_timestamp(t) and t.unit == "us":  # the unit's digits, as Python's
        return _quoted(col, _iso(col), 'Z"' if t.tz else '"')
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
    elif pa.types.is_duration(t) and t.unit == "us":
        out = pc.cast(pc.cast(col, pa.int64()), pa.string())
    if out is None:
        render = _renderer(t)
        out = pa.array([None if v is None else render(v) for v in col.to_pylist()],
                       pa.string())
    return Json(pc.fill_null(out, "null"))


def _quoted(col: pa.Array, body: pa.Array, suffix: str = '"') -> Json:
    if not col.null_count:
        return Json(body, '"', suffix)
    return Json(pc.fill_null(join(Json(body, '"', suffix)), "null"))


def _text_body(col: pa.Array) -> pa.Array:
    """Text as JSON writes it between its quotes: as it is, but for the values that need
    JSON's escapes, replaced by Python's."""
    needs = _needs_escape(col)
    if needs is None:
        return col
    escaped = [text(v)[1:-1] for v in col.filter(needs).to_pylist()]
    return pc.replace_with_mask(col, needs, pa.array(escaped, col.type))


def _needs_escape(col: pa.Array) -> pa.Array | None:
    """Which non-null values hold a byte JSON escapes, or None when none does: one scan of
    the column's bytes rather than a look at each value."""
    _, offsets, data = col.buffers()
    if data is None or len(col) == 0:
        return None
    ends = np.frombuffer(offsets, dtype=np.int32, count=len(col) + 1, offset=col.offset * 4)
    lo, hi = int(ends[0]), int(ends[-1])
    at = np.flatnonzero(_ESCAPED[np.frombuffer(data, dtype=np.uint8)[lo:hi]])
    if not len(at):
        return None
    mask = np.zeros(len(col), dtype=bool)
    mask[np.searchsorted(ends, at + lo, side="right") - 1] = True
    needs = pa.array(mask)
    if col.null_count:
        needs = pc.and_(needs, pc.is_valid(col))
    return needs if pc.any(needs).as_py() else None


def _iso(col: pa.Array) -> pa.Array:
    """Microsecond timestamps as ISO text, a zoned one in UTC (its ``Z`` is the caller's).
    Arrow's cast to text writes the date, a space and the time, where it writes what
    strftime writes (years 1 to 9999): its space becomes a ``T`` in a copy of its bytes
    (each value's eleventh); strftime, ten times slower, serves outside that range."""
    naive = col.view(pa.timestamp("us")) if col.type.tz else col  # UTC's wall clock
    lo, hi = pc.min_max(naive.view(pa.int64())).values()
    if lo.as_py() is not None and not (_FIRST_US <= lo.as_py() and hi.as_py() <= _LAST_US):
        return pc.strftime(naive, format="%Y-%m-%dT%H:%M:%S")
    s = pc.cast(naive, pa.string())
    validity, offsets, data = s.buffers()
    if data is None or s.null_count == len(s):
        return s
    starts = np.frombuffer(offsets, dtype=np.int32, count=len(s), offset=s.offset * 4)
    if s.null_count:
        starts = starts[pc.is_valid(s).to_numpy(zero_copy_only=False)]
    chars = np.frombuffer(data, dtype=np.uint8).copy()
    chars[starts + 10] = ord("T")
    return pa.Array.from_buffers(pa.string(), len(s), [validity, offsets, pa.py_buffer(chars)],
                                 s.null_count, s.offset)
