"""A column's value in a row image, read by the Python decoder: one small decoder per
column, chosen from the table map's binlog type and metadata and the captured column's
canonical kind (``sparkcdc.mysql.types``), so a binlog value equals what the snapshot reads
for it. ``row_decoding.PyRowDecoder`` plans rows from these; the compiled decoder
(``fastdecode``) makes the same choices in C and reuses the checks, the codecs and the
fallbacks here. Apart from ``row_decoding`` because the types are many and the plan is not.
"""

from __future__ import annotations

import datetime as _dt
import struct
from collections.abc import Callable
from decimal import Decimal
from typing import Any

from sparkcdc.core.schema import Column
from sparkcdc.errors import DecodeError
from sparkcdc.mysql import types as T
from sparkcdc.mysql.binlog import json_binary
from sparkcdc.mysql.binlog.protocol.codes import ColumnType as CT

Field = Callable[[bytes, int], tuple[Any, int]]  # (bytes, pos) -> (value, next pos)
_Field = Field

# -- per-column decoders ---------------------------------------------------------------------

PY_CODECS = {
    "utf8mb4": "utf-8", "utf8mb3": "utf-8", "utf8": "utf-8", "ascii": "ascii",
    "latin1": "cp1252", "latin2": "iso8859-2", "latin5": "iso8859-9", "latin7": "iso8859-13",
    "ucs2": "utf-16-be", "utf16": "utf-16-be", "utf16le": "utf-16-le", "utf32": "utf-32-be",
    "cp1250": "cp1250", "cp1251": "cp1251", "cp1256": "cp1256", "cp1257": "cp1257",
    "cp850": "cp850", "cp852": "cp852", "cp866": "cp866", "greek": "iso8859-7",
    "hebrew": "iso8859-8", "koi8r": "koi8-r", "koi8u": "koi8-u", "gbk": "gbk",
    "gb2312": "gb2312", "gb18030": "gb18030", "big5": "big5", "sjis": "shift_jis",
    "cp932": "cp932", "ujis": "euc-jp", "eucjpms": "euc-jp", "euckr": "euc-kr",
    "tis620": "tis-620", "macroman": "mac-roman", "macce": "mac-latin2",
}
_DIG2BYTES = (0, 1, 1, 2, 2, 3, 3, 4, 4, 4)
# binlog type -> the canonical kinds (or, for integers, the base types) it may carry
COMPAT: dict[int, set[str]] = {
    CT.TINY: {"tinyint", "bool", "boolean"}, CT.SHORT: {"smallint"}, CT.INT24: {"mediumint"},
    CT.LONG: {"int", "integer"}, CT.LONGLONG: {"bigint"}, CT.FLOAT: {T.FLOAT32},
    CT.DOUBLE: {T.FLOAT64}, CT.YEAR: {T.YEAR}, CT.NEWDECIMAL: {T.DECIMAL, T.DECIMAL_TEXT},
    CT.VARCHAR: {T.STRING, T.BINARY, T.JSON}, CT.VAR_STRING: {T.STRING, T.BINARY, T.JSON},
    CT.STRING: {T.STRING, T.BINARY, T.JSON}, CT.ENUM: {T.ENUM}, CT.SET: {T.SET},
    CT.BLOB: {T.STRING, T.BINARY, T.JSON}, CT.TINY_BLOB: {T.STRING, T.BINARY, T.JSON},
    CT.MEDIUM_BLOB: {T.STRING, T.BINARY, T.JSON}, CT.LONG_BLOB: {T.STRING, T.BINARY, T.JSON},
    CT.GEOMETRY: {T.GEOMETRY}, CT.JSON: {T.JSON}, CT.BIT: {T.BIT1, T.BITS}, CT.DATE: {T.DATE},
    CT.NEWDATE: {T.DATE}, CT.TIME: {T.TIME}, CT.TIME2: {T.TIME}, CT.DATETIME: {T.DATETIME},
    CT.DATETIME2: {T.DATETIME}, CT.TIMESTAMP: {T.TIMESTAMP}, CT.TIMESTAMP2: {T.TIMESTAMP},
}


def text_decoder(charset: str | None) -> Callable[[bytes], str]:
    codec = PY_CODECS.get((charset or "utf8mb4").lower(), "utf-8")
    if codec == "cp1252":  # MySQL's latin1 is cp1252 with the 5 holes mapped to C1 controls
        def dec(b: bytes) -> str:
            try:
                return b.decode("cp1252")
            except UnicodeDecodeError:
                return "".join(bytes([x]).decode("cp1252", "ignore") or chr(x) for x in b)
        return dec
    return lambda b: b.decode(codec)


def _length_prefixed(nbytes: int, conv: Callable[[bytes], Any]) -> _Field:
    def dec(data: bytes, pos: int) -> tuple[Any, int]:
        n = int.from_bytes(data[pos:pos + nbytes], "little")
        pos += nbytes
        return conv(data[pos:pos + n]), pos + n
    return dec


def _fixed_int(fmt: str, conv: Callable[[int], Any] | None = None) -> _Field:
    s = struct.Struct(fmt)
    size = s.size
    unpack = s.unpack_from
    if conv is None:
        return lambda data, pos: (unpack(data, pos)[0], pos + size)
    return lambda data, pos: (conv(unpack(data, pos)[0]), pos + size)


def type_mismatch(col: Column, binlog_type: int) -> DecodeError:
    """A binlog column type the captured column cannot hold (``_field_decoder``,
    ``fastdecode.column_spec``)."""
    return DecodeError(f"column {col.name!r}: binlog type {binlog_type} does not match the "
                       f"captured type {col.column_type!r}",
                       fix="the table was altered; restart capture with a new snapshot")


def column_types(bc: Any, col: Column) -> tuple[T.MySQLType, int, Callable[[], DecodeError]]:
    """A column's canonical type and its binlog type, checked to agree (``COMPAT``), and
    the error a later disagreement raises: the start of both plans (this module's and the
    compiled decoder's, ``fastdecode.column_spec``)."""
    t = T.mysql_type(col)
    bt = bc.type

    def mismatch() -> DecodeError:
        return type_mismatch(col, bt)

    allowed = COMPAT.get(bt)
    if allowed is not None and t.kind not in allowed and t.base not in allowed:
        raise mismatch()
    return t, bt, mismatch


def field_decoder(bc: Any, col: Column) -> _Field:
    """A decoder for one column from its binlog type/metadata and its canonical type."""
    t, bt, mismatch = column_types(bc, col)
    k = t.kind
    unsigned = t.unsigned

    if bt == CT.TINY:
        return _fixed_int("<B" if unsigned else "<b")
    if bt == CT.SHORT:
        return _fixed_int("<H" if unsigned else "<h")
    if bt == CT.INT24:
        return lambda d, p: (int.from_bytes(d[p:p + 3], "little", signed=not unsigned), p + 3)
    if bt == CT.LONG:
        return _fixed_int("<I" if unsigned else "<i")
    if bt == CT.LONGLONG:
        return _fixed_int("<Q", Decimal) if k == T.UINT64 else _fixed_int("<q")
    if bt == CT.FLOAT:
        return _fixed_int("<f")
    if bt == CT.DOUBLE:
        return _fixed_int("<d")
    if bt == CT.YEAR:
        return _fixed_int("<B", lambda v: 1900 + v if v else 0)
    if bt == CT.NEWDECIMAL:
        return _decimal_decoder(bc.precision, bc.decimals, t)
    if bt in (CT.VARCHAR, CT.VAR_STRING, CT.STRING):
        nbytes = 2 if bc.max_length > 255 else 1
        if k == T.BINARY:
            return _length_prefixed(nbytes, t.pad_binary)
        if k in (T.STRING, T.JSON):
            return _length_prefixed(nbytes, text_decoder(col.charset or bc.character_set_name))
        raise mismatch()
    if bt == CT.ENUM:
        members = enum_members(bc.enum_values[1:] if bc.enum_values else None, t)
        return _fixed_int("<B" if bc.size == 1 else "<H",
                          lambda i: members[i - 1] if 0 < i <= len(members) else "")
    if bt == CT.SET:
        members = enum_members(bc.set_values, t)
        size = bc.size

        def dec_set(data: bytes, pos: int) -> tuple[str, int]:
            mask = int.from_bytes(data[pos:pos + size], "little")
            return ",".join(m for i, m in enumerate(members) if mask >> i & 1), pos + size
        return dec_set
    if bt in (CT.BLOB, CT.TINY_BLOB, CT.MEDIUM_BLOB, CT.LONG_BLOB):
        if k == T.BINARY:
            return _length_prefixed(bc.length_size, bytes)
        if k in (T.STRING, T.JSON):
            return _length_prefixed(bc.length_size,
                                    text_decoder(col.charset or bc.character_set_name))
        raise mismatch()
    if bt == CT.GEOMETRY:
        return _length_prefixed(bc.length_size, lambda b: T.ewkb(bytes(b)))  # SRID, then WKB
    if bt == CT.JSON:
        return _length_prefixed(bc.length_size, mysql_json)
    if bt == CT.BIT:
        nbytes = bc.bytes
        if k == T.BIT1:
            return lambda d, p: (any(d[p:p + nbytes]), p + nbytes)
        return lambda d, p: (bytes(d[p:p + nbytes]).rjust(t.nbytes, b"\0")[-t.nbytes:],
                             p + nbytes)
    if bt == CT.DATE or bt == CT.NEWDATE:
        return _date
    if bt == CT.TIME2:
        return _time2_decoder(bc.fsp)
    if bt == CT.DATETIME2:
        return _datetime2_decoder(bc.fsp)
    if bt == CT.TIMESTAMP2:
        return _timestamp2_decoder(bc.fsp)
    if bt == CT.TIME:
        return _time_old
    if bt == CT.DATETIME:
        return _datetime_old
    if bt == CT.TIMESTAMP:
        return _fixed_int("<I", lambda s: T.epoch_micros_to_utc(s * 1_000_000) if s else None)
    raise DecodeError(f"column {col.name!r}: binlog type {bt} is not supported")


def enum_members(from_binlog: list[str] | None, t: T.MySQLType) -> tuple[str, ...]:
    """The members an ENUM or SET index is read against: the table map's own list when it
    has one (binlog_row_metadata=FULL), which is the server's spelling and the definition
    the row was written under, even after an ALTER changed the members since the schema
    was read (the schema's list then gave '' for a member it did not know yet)."""
    return tuple(from_binlog) if from_binlog else t.members


def _decimal_decoder(precision: int, scale: int, t: T.MySQLType) -> _Field:
    intg = precision - scale
    intg0, intg0x = divmod(intg, 9)
    frac0, frac0x = divmod(scale, 9)
    size = intg0 * 4 + _DIG2BYTES[intg0x] + frac0 * 4 + _DIG2BYTES[frac0x]
    lead = _DIG2BYTES[intg0x]
    tail = _DIG2BYTES[frac0x]
    as_text = t.kind == T.DECIMAL_TEXT

    def dec(data: bytes, pos: int) -> tuple[Any, int]:
        b = bytearray(data[pos:pos + size])
        negative = not b[0] & 0x80
        b[0] ^= 0x80
        if negative:
            b = bytearray(x ^ 0xFF for x in b)
        i = 0
        parts = []
        if lead:
            parts.append(str(int.from_bytes(b[0:lead], "big")))
            i = lead
        for _ in range(intg0):
            parts.append(f"{int.from_bytes(b[i:i + 4], 'big'):09d}")
            i += 4
        whole = "".join(parts).lstrip("0") or "0"
        fparts = []
        for _ in range(frac0):
            fparts.append(f"{int.from_bytes(b[i:i + 4], 'big'):09d}")
            i += 4
        if tail:
            fparts.append(f"{int.from_bytes(b[i:i + tail], 'big'):0{frac0x}d}")
        frac = "".join(fparts)
        text = whole + ("." + frac if scale else "")
        if negative and text.strip("0.") != "":
            text = "-" + text
        return (text if as_text else Decimal(text)), pos + size
    return dec


def _date(data: bytes, pos: int) -> tuple[Any, int]:
    v = int.from_bytes(data[pos:pos + 3], "little")
    day, month, year = v & 31, (v >> 5) & 15, v >> 9
    try:
        return (_dt.date(year, month, day) if year and month and day else None), pos + 3
    except ValueError:  # ALLOW_INVALID_DATES values such as 2021-02-30
        return None, pos + 3


def _frac_reader(fsp: int, signed: bool) -> tuple[int, Callable[[bytes, int], int]]:
    """(bytes, reader -> microseconds) for the fractional part of TIME2/DATETIME2/TIMESTAMP2."""
    if fsp in (1, 2):
        return 1, lambda d, p: int.from_bytes(d[p:p + 1], "big", signed=signed) * 10000
    if fsp in (3, 4):
        return 2, lambda d, p: int.from_bytes(d[p:p + 2], "big", signed=signed) * 100
    if fsp in (5, 6):
        return 3, lambda d, p: int.from_bytes(d[p:p + 3], "big", signed=signed)
    return 0, lambda d, p: 0


def _time2_decoder(fsp: int) -> _Field:
    # MySQL's my_time_packed_from_binary, then TIME_from_longlong_time_packed
    def dec(d: bytes, p: int) -> tuple[_dt.timedelta, int]:
        if fsp in (5, 6):
            packed = int.from_bytes(d[p:p + 6], "big") - 0x800000000000
            n = 6
        else:
            intpart = int.from_bytes(d[p:p + 3], "big") - 0x800000
            if fsp in (1, 2):
                frac, n, full = d[p + 3], 4, 0x100
                unit = 10000
            elif fsp in (3, 4):
                frac, n, full = int.from_bytes(d[p + 3:p + 5], "big"), 5, 0x10000
                unit = 100
            else:
                frac, n, full, unit = 0, 3, 1, 0
            if intpart < 0 and frac:
                intpart += 1  # negative values store the fraction reversed, for sorting
                frac -= full
            packed = (intpart << 24) + frac * unit
        neg = packed < 0
        a = -packed if neg else packed
        hms, micro = a >> 24, a % (1 << 24)
        td = _dt.timedelta(hours=(hms >> 12) % (1 << 10), minutes=(hms >> 6) % 64,
                           seconds=hms % 64, microseconds=micro)
        return (-td if neg else td), p + n
    return dec


def _datetime2_decoder(fsp: int) -> _Field:
    nfrac, frac = _frac_reader(fsp, signed=True)

    def dec(d: bytes, p: int) -> tuple[Any, int]:
        v = int.from_bytes(d[p:p + 5], "big") - 0x8000000000
        ymd, hms = v >> 17, v % (1 << 17)
        ym, day = ymd >> 5, ymd % 32
        year, month = divmod(ym, 13)
        micro = frac(d, p + 5)
        if not (year and month and day):
            return None, p + 5 + nfrac
        try:
            value = _dt.datetime(year, month, day, hms >> 12, (hms >> 6) % 64, hms % 64, micro)
        except ValueError:
            value = None
        return value, p + 5 + nfrac
    return dec


def _timestamp2_decoder(fsp: int) -> _Field:
    nfrac, frac = _frac_reader(fsp, signed=False)

    def dec(d: bytes, p: int) -> tuple[Any, int]:
        sec = int.from_bytes(d[p:p + 4], "big")
        micro = frac(d, p + 4)
        if sec == 0 and micro == 0:
            return None, p + 4 + nfrac  # the zero timestamp
        return T.epoch_micros_to_utc(sec * 1_000_000 + micro), p + 4 + nfrac
    return dec


def _time_old(d: bytes, p: int) -> tuple[_dt.timedelta, int]:
    v = int.from_bytes(d[p:p + 3], "little", signed=True)
    neg, v = v < 0, abs(v)
    td = _dt.timedelta(hours=v // 10000, minutes=v // 100 % 100, seconds=v % 100)
    return (-td if neg else td), p + 3


def _datetime_old(d: bytes, p: int) -> tuple[Any, int]:
    v = int.from_bytes(d[p:p + 8], "little")
    date, tod = divmod(v, 1_000_000)
    year, md = divmod(date, 10000)
    month, day = divmod(md, 100)
    if not (year and month and day):
        return None, p + 8
    try:
        return _dt.datetime(year, month, day, tod // 10000, tod // 100 % 100, tod % 100), p + 8
    except ValueError:
        return None, p + 8


def mysql_json(b: bytes) -> str:
    """A JSON column's binary value as the server prints it (``json_binary``)."""
    return json_binary.to_text(b)
