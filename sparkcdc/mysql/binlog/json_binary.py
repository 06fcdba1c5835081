"""MySQL's binary JSON (how a JSON column is stored and binlogged) as MySQL prints it.

The snapshot reads a JSON column as the server's text (``SELECT j``), so the binlog path
must print the binary value exactly as the server does (``Json_wrapper::to_string``):
``", "`` and ``": "`` separators, object keys in stored order (MySQL keeps them sorted by
length, then bytes), doubles through ``my_gcvt`` with ``.0`` added to whole numbers,
DECIMAL unquoted with its scale's digits, DATE/TIME/DATETIME/TIMESTAMP quoted with six
fractional digits (DATE without a time), a VAR_STRING opaque value as a string, any other
opaque value as ``"base64:type<N>:<base64>"`` (a line break every 76 characters, escaped),
and control characters escaped as ``\\n``, ``\\u001f``... An empty value (a NOT NULL
column filled leniently) prints as ``null``, as the server reads it. docs/types.md has the
table of these forms.

``to_text`` prints a stored value; ``parse`` builds the tree that partial updates
(``json_diff``) change: an object is a ``dict`` (keys in MySQL's order), an array a
``list``, and every scalar is already its printed text (a ``str``), so no number or date
is ever converted twice. ``render`` prints such a tree.
"""

from __future__ import annotations

import base64
import json
import math
import struct
from decimal import Decimal
from typing import Any

from sparkcdc.errors import DecodeError

# value types (json_binary.h)
SMALL_OBJECT, LARGE_OBJECT, SMALL_ARRAY, LARGE_ARRAY, LITERAL = 0, 1, 2, 3, 4
INT16, UINT16, INT32, UINT32, INT64, UINT64, DOUBLE, STRING, OPAQUE = (
    5, 6, 7, 8, 9, 10, 11, 12, 15)
# field types an opaque value names (enum_field_types)
_DECIMAL, _NEWDECIMAL, _TIMESTAMP, _DATE, _TIME, _DATETIME, _VAR_STRING = (
    0, 246, 7, 10, 11, 12, 253)
_LITERALS = {0: "null", 1: "true", 2: "false"}
_FIXED = {INT16: struct.Struct("<h"), UINT16: struct.Struct("<H"), INT32: struct.Struct("<i"),
          UINT32: struct.Struct("<I"), INT64: struct.Struct("<q"), UINT64: struct.Struct("<Q")}
_DOUBLE = struct.Struct("<d")
_DIG2BYTES = (0, 1, 1, 2, 2, 3, 3, 4, 4, 4)
_MAX_DECPT_FOR_F = 15  # DBL_DIG: my_gcvt prints 'f' within 10^-15 .. 10^15
_GCVT_WIDTH = 34  # MY_GCVT_MAX_FIELD_WIDTH

Tree = Any  # dict (object) | list (array) | str (a scalar's printed text)


class _Malformed(Exception):
    pass


def to_text(b: bytes) -> str:
    """A JSON column's stored bytes as the server prints them."""
    if not b:
        return "null"
    return render(parse(b))


def parse(b: bytes) -> Tree:
    """The tree of a stored value (type byte, then the value)."""
    if not b:
        return "null"
    try:
        return _value(b[0], b, 1, len(b))
    except (_Malformed, IndexError, struct.error, UnicodeDecodeError, RecursionError) as e:
        raise malformed(e or type(e).__name__) from None


def malformed(why: object) -> DecodeError:
    return DecodeError(f"malformed binary JSON value ({why})",
                       fix="report the server version; the JSON value could not be read")


def render(node: Tree) -> str:
    if type(node) is str:
        return node
    if type(node) is dict:
        return "{" + ", ".join(quote(k) + ": " + render(v) for k, v in node.items()) + "}"
    return "[" + ", ".join(render(v) for v in node) + "]"


def quote(s: str) -> str:
    """A JSON string as MySQL's ``double_quote`` writes it: ``"`` and ``\\`` escaped, the
    control characters as ``\\b \\t \\n \\f \\r`` or ``\\u00xx``, nothing else (Python's
    encoder makes the same choices)."""
    return json.dumps(s, ensure_ascii=False)


def sort_key(key: str) -> tuple[int, bytes]:
    """The order MySQL keeps object keys in: shorter first, then bytewise."""
    k = key.encode("utf-8", "surrogateescape")
    return len(k), k


# -- reading -----------------------------------------------------------------------------

def _value(t: int, d: bytes, p: int, end: int) -> Tree:
    """The value of type ``t`` whose data starts at ``p`` (container offsets are relative
    to ``p``)."""
    if t <= LARGE_ARRAY:
        return _container(t, d, p, end)
    if t == STRING:
        n, p = _varlen(d, p)
        if p + n > end:
            raise _Malformed("a string longer than its value")
        return quote(d[p:p + n].decode("utf-8", "surrogateescape"))
    if t == LITERAL:
        lit = _LITERALS.get(d[p])
        if lit is None:
            raise _Malformed(f"literal {d[p]}")
        return lit
    fixed = _FIXED.get(t)
    if fixed is not None:
        return str(fixed.unpack_from(d, p)[0])
    if t == DOUBLE:
        return double_text(_DOUBLE.unpack_from(d, p)[0])
    if t == OPAQUE:
        field_type = d[p]
        n, p = _varlen(d, p + 1)
        if p + n > end:
            raise _Malformed("an opaque value longer than its value")
        return _opaque(field_type, bytes(d[p:p + n]))
    raise _Malformed(f"value type {t}")


def _container(t: int, d: bytes, p: int, end: int) -> Tree:
    large = t & 1
    fmt = "<I" if large else "<H"
    osz = 4 if large else 2
    count, size = struct.unpack_from("<II" if large else "<HH", d, p)
    if p + size > end:
        raise _Malformed("a container longer than its value")
    is_object = t <= LARGE_OBJECT
    entries = p + 2 * osz
    values = entries + count * (osz + 2) if is_object else entries
    out_values = []
    for i in range(count):
        e = values + i * (1 + osz)
        vt = d[e]
        if vt in (LITERAL, INT16, UINT16) or (large and vt in (INT32, UINT32)):
            out_values.append(_value(vt, d, e + 1, e + 1 + osz))  # inlined in the entry
        else:
            (off,) = struct.unpack_from(fmt, d, e + 1)
            if off >= size:
                raise _Malformed("a value outside its container")
            out_values.append(_value(vt, d, p + off, p + size))
    if not is_object:
        return out_values
    obj = {}
    for i in range(count):
        e = entries + i * (osz + 2)
        (off,) = struct.unpack_from(fmt, d, e)
        (n,) = struct.unpack_from("<H", d, e + osz)
        if off + n > size:
            raise _Malformed("a key outside its object")
        obj[d[p + off:p + off + n].decode("utf-8", "surrogateescape")] = out_values[i]
    return obj


def _varlen(d: bytes, p: int) -> tuple[int, int]:
    """A length in 7-bit groups, lowest first (at most 5 bytes)."""
    n = shift = 0
    for _ in range(5):
        c = d[p]
        p += 1
        n |= (c & 0x7F) << shift
        if not c & 0x80:
            return n, p
        shift += 7
    raise _Malformed("a length of more than 5 bytes")


# -- scalars -----------------------------------------------------------------------------

def double_text(x: float) -> str:
    """A double as MySQL prints it in JSON: ``my_gcvt`` at its widest field (the shortest
    digits that read back, 'f' notation for exponents -15..15, else ``1.5e-16``/``1e15``:
    no '+', no leading zeros), then ``.0`` when neither '.' nor 'e' is in it."""
    if not math.isfinite(x):  # no JSON number; MySQL never stores one
        raise _Malformed("a double that is not a number")
    digits, exp = _shortest(x)
    n = len(digits)
    decpt = n + exp  # value = 0.<digits> * 10**decpt
    sign = "-" if math.copysign(1.0, x) < 0 else ""
    width = _GCVT_WIDTH - len(sign)
    have_space = (n - decpt + 2 if decpt <= 0 else n + 1 if decpt < n else decpt) <= width
    if have_space and -_MAX_DECPT_FOR_F + 1 <= decpt and (decpt <= _MAX_DECPT_FOR_F
                                                             or n > decpt):
        if decpt <= 0:
            text = "0." + "0" * -decpt + digits
        elif decpt < n:
            text = digits[:decpt] + "." + digits[decpt:]
        else:
            text = digits + "0" * (decpt - n)
        text = sign + text
    else:
        e = decpt - 1
        text = sign + digits[0] + ("." + digits[1:] if n > 1 else "") + "e" + str(e)
    if "." not in text and "e" not in text:
        text += ".0"
    return text


def _shortest(x: float) -> tuple[str, int]:
    """(digits without trailing zeros, exponent): the shortest decimal that reads back as
    ``x`` (what dtoa's mode 4 gives at my_gcvt's width, and what ``repr`` uses)."""
    if x == 0:
        return "0", 0  # dtoa's "0" at decimal point 1
    t = Decimal(repr(abs(x))).normalize().as_tuple()
    return "".join(map(str, t.digits)), int(t.exponent)


def _opaque(field_type: int, data: bytes) -> str:
    if field_type in (_NEWDECIMAL, _DECIMAL):
        return decimal_text(data)
    if field_type in (_DATE, _DATETIME, _TIMESTAMP):
        return _datetime_text(data, field_type)
    if field_type == _TIME:
        return _time_text(data)
    if field_type == _VAR_STRING:  # a string held as opaque: printed as the string
        return quote(data.decode("utf-8", "surrogateescape"))
    b64 = base64.b64encode(data).decode("ascii")
    b64 = "\n".join(b64[i:i + 76] for i in range(0, len(b64), 76))
    return quote(f"base64:type{field_type}:{b64}")


def decimal_text(data: bytes) -> str:
    """A JSON DECIMAL (precision, scale, then MySQL's binary DECIMAL) as ``decimal2string``
    writes it: the scale's digits after the point, a '-' unless the value is zero."""
    precision, scale = data[0], data[1]
    if scale > precision:
        raise _Malformed("a DECIMAL with more scale than precision")
    b = bytearray(data[2:])
    intg = precision - scale
    size = (intg // 9 * 4 + _DIG2BYTES[intg % 9] + scale // 9 * 4 + _DIG2BYTES[scale % 9])
    if len(b) < size or size == 0:
        raise _Malformed("a DECIMAL shorter than its precision")
    negative = not b[0] & 0x80
    b[0] ^= 0x80
    mask = 0xFF if negative else 0
    groups = []
    p = 0
    # digit groups: the leading partial group, whole groups of 9, a trailing partial group
    for ndig in ([intg % 9] if intg % 9 else []) + [9] * (intg // 9):
        nb = _DIG2BYTES[ndig] if ndig < 9 else 4
        groups.append(str(int.from_bytes(bytes(x ^ mask for x in b[p:p + nb]), "big"))
                      .zfill(ndig))
        p += nb
    whole = "".join(groups).lstrip("0") or "0"
    frac = []
    for ndig in [9] * (scale // 9) + ([scale % 9] if scale % 9 else []):
        nb = _DIG2BYTES[ndig] if ndig < 9 else 4
        frac.append(str(int.from_bytes(bytes(x ^ mask for x in b[p:p + nb]), "big"))
                    .zfill(ndig))
        p += nb
    text = whole + ("." + "".join(frac) if scale else "")
    if negative and text.strip("0.") != "":
        text = "-" + text
    return text


def _datetime_text(data: bytes, field_type: int) -> str:
    """A packed DATE/DATETIME/TIMESTAMP (``TIME_to_longlong_datetime_packed``)."""
    v = int.from_bytes(data[:8], "little", signed=True)
    if v < 0:
        v = -v
    ymdhms, frac = v >> 24, v % (1 << 24)
    ymd, hms = ymdhms >> 17, ymdhms % (1 << 17)
    ym, day = ymd >> 5, ymd % 32
    year, month = divmod(ym, 13)
    if field_type == _DATE:
        return f'"{year:04d}-{month:02d}-{day:02d}"'
    return (f'"{year:04d}-{month:02d}-{day:02d} {hms >> 12:02d}:{(hms >> 6) % 64:02d}:'
            f'{hms % 64:02d}.{frac:06d}"')


def _time_text(data: bytes) -> str:
    """A packed TIME (``TIME_to_longlong_time_packed``): hours may pass 24, sign first."""
    v = int.from_bytes(data[:8], "little", signed=True)
    sign = "-" if v < 0 else ""
    v = abs(v)
    hms, frac = v >> 24, v % (1 << 24)
    return (f'"{sign}{(hms >> 12) % 1024:02d}:{(hms >> 6) % 64:02d}:{hms % 64:02d}.'
            f'{frac:06d}"')


__all__ = ["decimal_text", "double_text", "malformed", "parse", "quote", "render", "sort_key",
           "to_text"]
