"""Table maps: a table's columns as the binlog describes them, and the header of the row
events that point into them.

A TABLE_MAP event (``parse_table_map``) is parsed once per distinct body (the server writes
one before every statement's rows): column types, their metadata, and the optional metadata
of ``binlog_row_metadata=FULL`` (names, charsets, ENUM and SET members). Its ``columns``
carry the attribute names the row decoders read (``type``, ``max_length``, ``fsp`` ...).
``rows_header`` reads the header of WRITE/UPDATE/DELETE_ROWS v1 and v2 (table id, column
count, the columns-present bitmaps); the row images that follow go to a row decoder as they
are.
"""

from __future__ import annotations

import struct

from sparkcdc.errors import DecodeError
from sparkcdc.mysql.binlog.protocol.codes import ColumnType as CT
from sparkcdc.mysql.binlog.protocol.codes import (
    _packed_int,
)

_NUMERIC = frozenset({CT.TINY, CT.SHORT, CT.INT24, CT.LONG, CT.LONGLONG, CT.NEWDECIMAL, CT.FLOAT, CT.DOUBLE,
                      CT.YEAR})
_CHARACTER = frozenset({CT.STRING, CT.VAR_STRING, CT.VARCHAR, CT.BLOB})


class ColumnMeta:
    """One column of a table map, with the attribute names the row decoders read."""

    __slots__ = (
        "bits",
        "bytes",
        "character_set_name",
        "charset_id",
        "decimals",
        "enum_values",
        "fsp",
        "length_size",
        "max_length",
        "name",
        "precision",
        "set_values",
        "size",
        "type",
        "unsigned",
    )

    def __init__(self, type_: int):
        self.type = type_
        self.name: str | None = None
        self.max_length: int | None = None
        self.length_size: int | None = None
        self.fsp: int | None = None
        self.precision: int | None = None
        self.decimals: int | None = None
        self.bits: int | None = None
        self.bytes: int | None = None
        self.size: int | None = None
        self.enum_values: list[str] | None = None
        self.set_values: list[str] | None = None
        self.character_set_name: str | None = None
        self.charset_id: int | None = None
        self.unsigned = False

    def __repr__(self) -> str:
        return f"ColumnMeta({self.type}, {self.name!r})"


class TableMap:
    """A parsed TABLE_MAP event."""

    __slots__ = (
        "__weakref__",
        "columns",
        "full",
        "key",
        "ncols",
        "schema",
        "table",
        "table_id",
    )

    def __init__(self, table_id: int, schema: str, table: str, columns: list[ColumnMeta]):
        self.table_id = table_id
        self.schema = schema
        self.table = table
        self.key = (schema, table)
        self.columns = columns
        self.ncols = len(columns)
        self.full = (1 << self.ncols) - 1  # every column present

    def __repr__(self) -> str:
        return f"TableMap({self.table_id}, {self.schema}.{self.table}, {self.ncols} columns)"



def _charset_name(collation_id: int) -> str | None:
    try:
        from pymysql.charset import charset_by_id

        return charset_by_id(collation_id).name
    except (KeyError, ImportError):
        return None


def parse_table_map(body: bytes, flavor: str = "mariadb", table_id_len: int = 6) -> TableMap:
    """A TABLE_MAP event's body (after the header, without the checksum)."""
    try:
        return _parse_table_map(body, flavor, table_id_len)
    except (IndexError, struct.error, UnicodeDecodeError) as e:
        raise DecodeError(f"malformed TABLE_MAP event: {e!r}",
                          fix="report the server version; the event could not be parsed") \
            from None


def _parse_table_map(d: bytes, flavor: str, table_id_len: int) -> TableMap:
    table_id = int.from_bytes(d[0:table_id_len], "little")
    p = table_id_len + 2  # flags
    n = d[p]
    schema = d[p + 1:p + 1 + n].decode()
    p += 1 + n + 1  # NUL
    n = d[p]
    table = d[p + 1:p + 1 + n].decode()
    p += 1 + n + 1
    ncols, p = _packed_int(d, p)
    types = d[p:p + ncols]
    p += ncols
    meta_len, p = _packed_int(d, p)
    meta_end = p + meta_len
    cols = []
    for t in types:
        c = ColumnMeta(t)
        if t == CT.VARCHAR:
            c.max_length = d[p] | d[p + 1] << 8
            p += 2
        elif t in (CT.FLOAT, CT.DOUBLE):
            c.size = d[p]
            p += 1
        elif t in (CT.TIMESTAMP2, CT.DATETIME2, CT.TIME2):
            c.fsp = d[p]
            p += 1
        elif t in (CT.VAR_STRING, CT.STRING):
            # byte 0: the real type (and, for long CHARs, two bits of the length); byte 1
            real, low = d[p], d[p + 1]
            p += 2
            if real in (CT.ENUM, CT.SET):
                c.type = real
                c.size = low
            else:
                c.max_length = (((real << 4) & 0x300) ^ 0x300) + low
        elif t in (CT.BLOB, CT.GEOMETRY, CT.JSON, CT.TINY_BLOB, CT.MEDIUM_BLOB, CT.LONG_BLOB):
            c.length_size = d[p]
            p += 1
        elif t == CT.NEWDECIMAL:
            c.precision, c.decimals = d[p], d[p + 1]
            p += 2
        elif t == CT.BIT:
            bits, nbytes = d[p], d[p + 1]
            p += 2
            c.bits = nbytes * 8 + bits
            c.bytes = (c.bits + 7) // 8
        cols.append(c)
    p = meta_end + (ncols + 7) // 8  # the NULL-able bitmap
    _optional_metadata(d, p, cols, flavor)
    return TableMap(table_id, schema, table, cols)


def _is_character(c: ColumnMeta, flavor: str) -> bool:
    return c.type in _CHARACTER or (c.type == CT.GEOMETRY and flavor == "mariadb")


def _optional_metadata(d: bytes, p: int, cols: list[ColumnMeta], flavor: str) -> None:
    """binlog_row_metadata=FULL: TLV fields after the NULL bitmap."""
    end = len(d)
    chars = [c for c in cols if _is_character(c, flavor)]
    enums_sets = [c for c in cols if c.type in (CT.ENUM, CT.SET)]
    raw_members: list[tuple[ColumnMeta, list[bytes], bool]] = []  # decoded once charsets known
    while p < end:
        kind = d[p]
        length, p = _packed_int(d, p + 1)
        q, stop = p, p + length
        p = stop
        if kind == 1:  # signedness of the numeric columns, one bit each, high bit first
            i = 0
            for c in cols:
                if c.type in _NUMERIC:
                    c.unsigned = bool(d[q + (i >> 3)] & (0x80 >> (i & 7)))
                    i += 1
        elif kind in (2, 10):  # default charset (+ exceptions), of text / of ENUM and SET
            targets = chars if kind == 2 else enums_sets
            default, q = _packed_int(d, q)
            ids = [default] * len(targets)
            while q < stop:
                idx, q = _packed_int(d, q)
                cid, q = _packed_int(d, q)
                if idx < len(ids):
                    ids[idx] = cid
            for c, cid in zip(targets, ids):
                c.charset_id = cid
        elif kind in (3, 11):  # one charset per text / ENUM and SET column
            targets = chars if kind == 3 else enums_sets
            i = 0
            while q < stop and i < len(targets):
                cid, q = _packed_int(d, q)
                targets[i].charset_id = cid
                i += 1
        elif kind == 4:  # column names
            i = 0
            while q < stop and i < len(cols):
                n, q = _packed_int(d, q)
                cols[i].name = d[q:q + n].decode()
                q += n
                i += 1
        elif kind in (5, 6):  # SET / ENUM member strings
            targets = [c for c in cols if c.type == (CT.SET if kind == 5 else CT.ENUM)]
            i = 0
            while q < stop and i < len(targets):
                count, q = _packed_int(d, q)
                members = []
                for _ in range(count):
                    n, q = _packed_int(d, q)
                    members.append(d[q:q + n])
                    q += n
                raw_members.append((targets[i], members, kind == 6))
                i += 1
    for c in cols:
        if c.charset_id is not None:
            c.character_set_name = _charset_name(c.charset_id)
    for c, members, is_enum in raw_members:
        vals = [_member_text(m, c.charset_id) for m in members]
        if is_enum:
            c.enum_values = [""] + vals
        else:
            c.set_values = vals


def _member_text(raw: bytes, collation_id: int | None) -> str:
    """An ENUM/SET member in its column's charset (the ENUM_AND_SET charset metadata)."""
    codec = "utf-8"
    if collation_id is not None:
        try:
            from pymysql.charset import charset_by_id

            codec = charset_by_id(collation_id).encoding
        except (KeyError, ImportError):
            pass
    try:
        return raw.decode(codec)
    except (UnicodeDecodeError, LookupError):
        return raw.decode("latin-1")


def rows_header(data: bytes, b: int, end: int, version: int, update: bool,
                table_id_len: int = 6) -> tuple[int, int, int, int | None, int]:
    """(table id, column count, present bitmap, update's second bitmap or None, where the
    row images start) of a rows event whose body starts at ``b``."""
    table_id = int.from_bytes(data[b:b + table_id_len], "little")
    p = b + table_id_len + 2
    if version == 2:
        p += data[p] | data[p + 1] << 8  # extra data, its length included
    c = data[p]
    if c < 251:
        ncols, p = c, p + 1
    else:
        ncols, p = _packed_int(data, p)
    nb = (ncols + 7) >> 3
    present = int.from_bytes(data[p:p + nb], "little")
    p += nb
    present2 = None
    if update:
        present2 = int.from_bytes(data[p:p + nb], "little")
        p += nb
    return table_id, ncols, present, present2, p

