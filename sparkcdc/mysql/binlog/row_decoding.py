"""Row decoding: how the bytes of a row image become canonical values, column by column.

A ``RowDecoder`` turns one row event's images into dicts of values equal to what the
snapshot reads for the same row (``sparkcdc.mysql.types``). ``PyRowDecoder`` plans one small
field decoder per column from the TABLE_MAP's metadata and the captured schema, then walks
the bytes; the compiled ``fastdecode.CRowDecoder`` makes the same choices in C and falls
back to these plans for what it does not handle. (The tests' reference reader,
tests/support/library_reader.py, adds ``LibraryRowDecoder``: python-mysql-replication's own values,
lossy, made canonical.)
The binlog reader (``reader.py``) and the compiled decoder's wrapper (``fastdecode.py``)
import this module; it imports neither.
"""

from __future__ import annotations

import datetime as _dt
import struct
from collections.abc import Callable
from decimal import Decimal
from typing import Any, Protocol

from sparkcdc.core.records import DELETE, INSERT, UPDATE
from sparkcdc.core.schema import Column, TableSchema
from sparkcdc.errors import DecodeError
from sparkcdc.mysql import types as T
from sparkcdc.mysql.binlog import json_binary, json_diff
from sparkcdc.mysql.binlog.protocol import (  # MySQL field types as TABLE_MAP events carry them
    _BIT,
    _BLOB,
    _DATE,
    _DATETIME,
    _DATETIME2,
    _DOUBLE,
    _ENUM,
    _FLOAT,
    _GEOMETRY,
    _INT24,
    _JSON,
    _LONG,
    _LONG_BLOB,
    _LONGLONG,
    _MEDIUM_BLOB,
    _NEWDATE,
    _NEWDECIMAL,
    _SET,
    _SHORT,
    _STRING,
    _TIME,
    _TIME2,
    _TIMESTAMP,
    _TIMESTAMP2,
    _TINY,
    _TINY_BLOB,
    _VAR_STRING,
    _VARCHAR,
    _YEAR,
    _packed_int,
)

# -- the decoder interface --------------------------------------------------------------------

class RowDecoder(Protocol):
    """Turns one row event into ``(before, after)`` canonical row dicts, in event order.

    ``decode_rows`` serves our own event layer: ``table_map`` is an ``events.TableMap``
    (``columns`` with the TABLE_MAP metadata), ``mode`` 0 insert, 1 delete, 2 update, and
    ``data`` the event's row images. ``decode`` serves the tests' reference reader
    (tests/support/library_reader.py): ``event`` is a python-mysql-replication rows event whose
    header has been read. ``schema`` is the captured table. A decoder may also have
    ``decode_partial_rows(table_map, schema, data)`` for MySQL's PARTIAL_UPDATE_ROWS events
    (both of sparkcdc's do); the reader names a decoder without it when one arrives.
    """

    def decode_rows(self, table_map: Any, schema: TableSchema, mode: int,
                    data: bytes) -> list[tuple[dict | None, dict | None]]:
        ...

    def decode(self, event: Any, schema: TableSchema) -> list[tuple[dict | None, dict | None]]:
        ...


_Field = Callable[[bytes, int], tuple[Any, int]]  # (bytes, pos) -> (value, next pos)


class PyRowDecoder:
    """Decodes row images from the event's bytes straight into canonical values."""

    def __init__(self) -> None:
        self._plans: dict[tuple, list[_Field]] = {}
        self._by_map: dict[Any, tuple[TableSchema, list[_Field]]] = {}

    def decode(self, event: Any, schema: TableSchema) -> list[tuple[dict | None, dict | None]]:
        from pymysqlreplication.row_event import PartialUpdateRowsEvent, UpdateRowsEvent

        if isinstance(event, PartialUpdateRowsEvent):
            raise DecodeError(f"{schema.table_id}: partial JSON updates cannot be decoded",
                              fix="set binlog_row_value_options='' on the server")
        plan = self._plan(event, schema)
        ncols = len(schema.columns)
        all_present(event.columns_present_bitmap, ncols, schema)
        update = isinstance(event, UpdateRowsEvent)
        if update:
            all_present(event.columns_present_bitmap2, ncols, schema)
        delete = op_of(event) == DELETE
        pkt = event.packet
        data = pkt.read(event.event_size - pkt.read_bytes)
        return self._decode_data(plan, schema, data, update, delete)

    def decode_rows(self, table_map: Any, schema: TableSchema, mode: int,
                    data: bytes) -> list[tuple[dict | None, dict | None]]:
        """The row images of one rows event (``data``: after its header and bitmaps) for
        our own event layer (``sparkcdc.mysql.binlog.protocol``); ``mode`` 0 insert, 1 delete,
        2 update."""
        plan = self._plan_of(table_map, schema)
        return self._decode_data(plan, schema, data, mode == 2, mode == 1)

    def _plan_of(self, table_map: Any, schema: TableSchema):
        """The decoding plan of a table map read with ``schema``, kept per table map (at
        most 1,024 of them)."""
        hit = self._by_map.get(table_map)
        if hit is not None and hit[0] is schema:
            return hit[1]
        plan = self._plan_for(table_map.columns, schema)
        if len(self._by_map) > 1024:
            self._by_map.clear()
        self._by_map[table_map] = (schema, plan)
        return plan

    def decode_partial_rows(self, table_map: Any, schema: TableSchema,
                            data: bytes) -> list[tuple[dict | None, dict | None]]:
        """The row images of a PARTIAL_UPDATE_ROWS event (``data``: after its header and
        bitmaps): each row is a before image, the shared image (``value_options``, then one
        bit per JSON column of the table when PARTIAL_JSON is on) and an after image whose
        JSON columns with their bit set hold diffs, applied here to the before image's
        value (``json_diff``). The compiled decoder hands here the events whose rows hold
        diffs (JSON_SET/JSON_REPLACE/JSON_REMOVE updates)."""
        plan = self._plan_of(table_map, schema)
        names = schema.column_names
        nbits = (len(names) + 7) // 8
        json_cols = [i for i, c in enumerate(table_map.columns) if c.type == _JSON]
        sizes = {i: table_map.columns[i].length_size for i in json_cols}
        pos, end = 0, len(data)
        out: list[tuple[dict | None, dict | None]] = []
        try:
            while pos < end:
                before, pos, raw = _partial_before(data, pos, plan, names, nbits, sizes)
                options, pos = _packed_int(data, pos)
                partial = set()
                if options & 1:  # PARTIAL_JSON_UPDATES: one bit per JSON column
                    nb = (len(json_cols) + 7) // 8
                    bits = int.from_bytes(data[pos:pos + nb], "little")
                    pos += nb
                    partial = {c for k, c in enumerate(json_cols) if bits >> k & 1}
                after, pos = _partial_after(data, pos, plan, names, nbits, sizes, partial,
                                            raw)
                out.append((before, after))
        except (IndexError, struct.error, ValueError) as e:
            raise DecodeError(f"{schema.table_id}: malformed partial update event at byte "
                              f"{pos}: {e}",
                              fix="the table's binlog metadata and schema disagree; if the "
                                  "table was altered, restart capture with a new snapshot") \
                from None
        return out

    def _decode_data(self, plan: list[_Field], schema: TableSchema, data: bytes,
                     update: bool, delete: bool) -> list[tuple[dict | None, dict | None]]:
        names = schema.column_names
        nbits = (len(names) + 7) // 8
        pos, end = 0, len(data)
        out: list[tuple[dict | None, dict | None]] = []
        try:
            while pos < end:
                img, pos = _image(data, pos, plan, names, nbits)
                if update:
                    after, pos = _image(data, pos, plan, names, nbits)
                    out.append((img, after))
                else:
                    out.append((img, None) if delete else (None, img))
        except (IndexError, struct.error, ValueError) as e:
            raise DecodeError(f"{schema.table_id}: malformed row event at byte {pos}: {e}",
                              fix="the table's binlog metadata and schema disagree; if the "
                                  "table was altered, restart capture with a new snapshot") \
                from None
        return out

    def _plan(self, event: Any, schema: TableSchema) -> list[_Field]:
        return self._plan_for(event.columns, schema)

    def _plan_for(self, cols: list, schema: TableSchema) -> list[_Field]:
        sig = (schema.table_id, tuple(c.column_type for c in schema.columns),
               tuple(meta_sig(c) for c in cols))
        plan = self._plans.get(sig)
        if plan is None:
            check_columns(cols, schema)
            plan = [_field_decoder(bc, sc) for bc, sc in zip(cols, schema.columns)]
            if len(self._plans) > 1024:
                self._plans.clear()
            self._plans[sig] = plan
        return plan


def meta_sig(c: Any) -> tuple:
    return (c.type, getattr(c, "max_length", None), getattr(c, "length_size", None),
            getattr(c, "fsp", None), getattr(c, "precision", None),
            getattr(c, "decimals", None), getattr(c, "bits", None), getattr(c, "size", None),
            tuple(getattr(c, "enum_values", None) or ()),
            tuple(getattr(c, "set_values", None) or ()))


def all_present(bitmap: bytes, ncols: int, schema: TableSchema) -> None:
    for i in range(ncols):
        if not bitmap[i >> 3] >> (i & 7) & 1:
            raise DecodeError(f"{schema.table_id}: the binlog row image lacks column "
                              f"{schema.columns[i].name!r}",
                              fix="set binlog_row_image=FULL on the server")


def _image(data: bytes, pos: int, plan: list[_Field], names: list[str],
           nbits: int) -> tuple[dict, int]:
    nulls = data[pos:pos + nbits]
    pos += nbits
    row: dict[str, Any] = {}
    for i, dec in enumerate(plan):
        if nulls[i >> 3] >> (i & 7) & 1:
            row[names[i]] = None
        else:
            row[names[i]], pos = dec(data, pos)
    return row, pos


def _partial_before(data: bytes, pos: int, plan: list[_Field], names: list[str], nbits: int,
                    sizes: dict[int, int]) -> tuple[dict, int, dict[int, bytes | None]]:
    """A before image, and the stored bytes of its JSON columns (the diffs' base)."""
    nulls = data[pos:pos + nbits]
    pos += nbits
    row: dict = {}
    raw: dict[int, bytes | None] = {}
    for i, dec in enumerate(plan):
        if nulls[i >> 3] >> (i & 7) & 1:
            row[names[i]] = raw[i] = None
            continue
        if i in sizes:
            n = int.from_bytes(data[pos:pos + sizes[i]], "little")
            raw[i] = bytes(data[pos + sizes[i]:pos + sizes[i] + n])
        row[names[i]], pos = dec(data, pos)
    return row, pos, raw


def _partial_after(data: bytes, pos: int, plan: list[_Field], names: list[str], nbits: int,
                   sizes: dict[int, int], partial: set[int],
                   raw: dict[int, bytes | None]) -> tuple[dict, int]:
    nulls = data[pos:pos + nbits]
    pos += nbits
    row: dict = {}
    for i, dec in enumerate(plan):
        if nulls[i >> 3] >> (i & 7) & 1:
            row[names[i]] = None
        elif i in partial:
            n = int.from_bytes(data[pos:pos + sizes[i]], "little")
            diffs = data[pos + sizes[i]:pos + sizes[i] + n]
            if len(diffs) != n:
                raise ValueError("a partial JSON update longer than the event")
            pos += sizes[i] + n
            row[names[i]] = json_diff.apply(raw.get(i), diffs, names[i])
        else:
            row[names[i]], pos = dec(data, pos)
    return row, pos


def op_of(event: Any) -> str:
    from pymysqlreplication.row_event import DeleteRowsEvent, UpdateRowsEvent

    if isinstance(event, UpdateRowsEvent):
        return UPDATE
    return DELETE if isinstance(event, DeleteRowsEvent) else INSERT


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
    _TINY: {"tinyint", "bool", "boolean"}, _SHORT: {"smallint"}, _INT24: {"mediumint"},
    _LONG: {"int", "integer"}, _LONGLONG: {"bigint"}, _FLOAT: {T.FLOAT32},
    _DOUBLE: {T.FLOAT64}, _YEAR: {T.YEAR}, _NEWDECIMAL: {T.DECIMAL, T.DECIMAL_TEXT},
    _VARCHAR: {T.STRING, T.BINARY, T.JSON}, _VAR_STRING: {T.STRING, T.BINARY, T.JSON},
    _STRING: {T.STRING, T.BINARY, T.JSON}, _ENUM: {T.ENUM}, _SET: {T.SET},
    _BLOB: {T.STRING, T.BINARY, T.JSON}, _TINY_BLOB: {T.STRING, T.BINARY, T.JSON},
    _MEDIUM_BLOB: {T.STRING, T.BINARY, T.JSON}, _LONG_BLOB: {T.STRING, T.BINARY, T.JSON},
    _GEOMETRY: {T.GEOMETRY}, _JSON: {T.JSON}, _BIT: {T.BIT1, T.BITS}, _DATE: {T.DATE},
    _NEWDATE: {T.DATE}, _TIME: {T.TIME}, _TIME2: {T.TIME}, _DATETIME: {T.DATETIME},
    _DATETIME2: {T.DATETIME}, _TIMESTAMP: {T.TIMESTAMP}, _TIMESTAMP2: {T.TIMESTAMP},
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


def _field_decoder(bc: Any, col: Column) -> _Field:
    """A decoder for one column from its binlog type/metadata and its canonical type."""
    t, bt, mismatch = column_types(bc, col)
    k = t.kind
    unsigned = t.unsigned

    if bt == _TINY:
        return _fixed_int("<B" if unsigned else "<b")
    if bt == _SHORT:
        return _fixed_int("<H" if unsigned else "<h")
    if bt == _INT24:
        return lambda d, p: (int.from_bytes(d[p:p + 3], "little", signed=not unsigned), p + 3)
    if bt == _LONG:
        return _fixed_int("<I" if unsigned else "<i")
    if bt == _LONGLONG:
        return _fixed_int("<Q", Decimal) if k == T.UINT64 else _fixed_int("<q")
    if bt == _FLOAT:
        return _fixed_int("<f")
    if bt == _DOUBLE:
        return _fixed_int("<d")
    if bt == _YEAR:
        return _fixed_int("<B", lambda v: 1900 + v if v else 0)
    if bt == _NEWDECIMAL:
        return _decimal_decoder(bc.precision, bc.decimals, t)
    if bt in (_VARCHAR, _VAR_STRING, _STRING):
        nbytes = 2 if bc.max_length > 255 else 1
        if k == T.BINARY:
            return _length_prefixed(nbytes, t.pad_binary)
        if k in (T.STRING, T.JSON):
            return _length_prefixed(nbytes, text_decoder(col.charset or bc.character_set_name))
        raise mismatch()
    if bt == _ENUM:
        members = enum_members(bc.enum_values[1:] if bc.enum_values else None, t)
        return _fixed_int("<B" if bc.size == 1 else "<H",
                          lambda i: members[i - 1] if 0 < i <= len(members) else "")
    if bt == _SET:
        members = enum_members(bc.set_values, t)
        size = bc.size

        def dec_set(data: bytes, pos: int) -> tuple[str, int]:
            mask = int.from_bytes(data[pos:pos + size], "little")
            return ",".join(m for i, m in enumerate(members) if mask >> i & 1), pos + size
        return dec_set
    if bt in (_BLOB, _TINY_BLOB, _MEDIUM_BLOB, _LONG_BLOB):
        if k == T.BINARY:
            return _length_prefixed(bc.length_size, bytes)
        if k in (T.STRING, T.JSON):
            return _length_prefixed(bc.length_size,
                                    text_decoder(col.charset or bc.character_set_name))
        raise mismatch()
    if bt == _GEOMETRY:
        return _length_prefixed(bc.length_size, lambda b: T.ewkb(bytes(b)))  # SRID, then WKB
    if bt == _JSON:
        return _length_prefixed(bc.length_size, mysql_json)
    if bt == _BIT:
        nbytes = bc.bytes
        if k == T.BIT1:
            return lambda d, p: (any(d[p:p + nbytes]), p + nbytes)
        return lambda d, p: (bytes(d[p:p + nbytes]).rjust(t.nbytes, b"\0")[-t.nbytes:],
                             p + nbytes)
    if bt == _DATE or bt == _NEWDATE:
        return _date
    if bt == _TIME2:
        return _time2_decoder(bc.fsp)
    if bt == _DATETIME2:
        return _datetime2_decoder(bc.fsp)
    if bt == _TIMESTAMP2:
        return _timestamp2_decoder(bc.fsp)
    if bt == _TIME:
        return _time_old
    if bt == _DATETIME:
        return _datetime_old
    if bt == _TIMESTAMP:
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


def check_columns(cols: list, schema: TableSchema) -> None:
    """A table map's columns (library ``Column`` objects) against the captured schema: the
    same count and, where the binlog names them, the same names."""
    if len(cols) != len(schema.columns):
        raise DecodeError(
            f"{schema.table_id}: the binlog has {len(cols)} columns, the captured "
            f"schema {len(schema.columns)}",
            fix="the table was altered; restart capture with a new snapshot")
    for bc, sc in zip(cols, schema.columns):
        if bc.name and bc.name != sc.name:
            raise DecodeError(
                f"{schema.table_id}: binlog column {bc.name!r} where the captured "
                f"schema has {sc.name!r}",
                fix="the table was altered; restart capture with a new snapshot")
