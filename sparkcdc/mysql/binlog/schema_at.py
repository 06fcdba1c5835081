"""A table's schema where the binlog is, read from its table map.

A stream that carries schema changes decodes each row event by the table map written before
it, not by the schema captured when the stream started. With ``binlog_row_metadata=FULL``
(which validation requires) a table map names every column and gives its binlog type,
signedness, charset and ENUM/SET members. So:

* ``fits`` says whether a schema still describes a table map, column by column: the same
  name, a binlog type the column's type is written as, and the details the decoder or the
  Arrow type depend on (signedness, DECIMAL precision and scale, fractional seconds, BIT
  width, BINARY length, charset, ENUM/SET members). A VARCHAR that grew still fits: the
  decoder reads the length prefix from the map itself.
* ``resolve`` gives the schema for a table map that no longer fits: information_schema's
  when that fits the map (it is exact: ``tinyint(1)``, the declared lengths), otherwise
  one built from the map itself. The second case is a backlog with several DDLs of a table:
  information_schema already shows a later schema than the rows being read.

A built column reuses a known column of the same name that fits, and otherwise spells its
type the way information_schema would (``decimal(10,2)``, ``datetime(3)``, ``enum('a','b')``),
which is all ``mysql.types`` needs to give it its canonical Arrow type.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from typing import Any

from sparkcdc.core.schema import Column, TableId, TableSchema
from sparkcdc.errors import DecodeError, SchemaError
from sparkcdc.mysql import types as T
from sparkcdc.mysql.binlog.protocol.codes import ColumnType as F

_BINARY_CHARSET = "binary"
_INTS = {F.TINY: "tinyint", F.SHORT: "smallint", F.INT24: "mediumint", F.LONG: "int",
         F.LONGLONG: "bigint"}
_BLOBS = {F.TINY_BLOB, F.MEDIUM_BLOB, F.LONG_BLOB, F.BLOB}
_STRINGS = {F.VARCHAR, F.VAR_STRING, F.STRING}
_BLOB_SIZE = {1: "tiny", 2: "", 3: "medium", 4: "long"}
# the column types each binlog type is written for (the base names of mysql.types)
_BASES: dict[int, set[str]] = {
    F.TINY: {"tinyint", "bool", "boolean"}, F.SHORT: {"smallint"}, F.INT24: {"mediumint"},
    F.LONG: {"int", "integer"}, F.LONGLONG: {"bigint"}, F.FLOAT: {"float"},
    F.DOUBLE: {"double"}, F.YEAR: {"year"}, F.NEWDECIMAL: {"decimal", "numeric", "dec", "fixed"},
    F.DATE: {"date"}, F.NEWDATE: {"date"}, F.TIME: {"time"}, F.TIME2: {"time"},
    F.DATETIME: {"datetime"}, F.DATETIME2: {"datetime"}, F.TIMESTAMP: {"timestamp"},
    F.TIMESTAMP2: {"timestamp"}, F.BIT: {"bit"}, F.ENUM: {"enum"}, F.SET: {"set"},
    F.JSON: {"json"},
}
_MBMAXLEN = {"utf8mb4": 4, "utf8mb3": 3, "utf8": 3, "ucs2": 2, "utf16": 4, "utf16le": 4,
             "utf32": 4, "big5": 2, "gbk": 2, "gb2312": 2, "sjis": 2, "cp932": 2,
             "ujis": 3, "eucjpms": 3, "euckr": 2, "gb18030": 4}


def fits(columns: list[Any], schema: TableSchema) -> bool:
    """Whether ``schema`` describes a table map's ``columns``, column by column."""
    if len(columns) != len(schema.columns):
        return False
    return all(describes(bc, col) for bc, col in zip(columns, schema.columns))


def describes(bc: Any, col: Column) -> bool:
    """Whether the captured column ``col`` is what the table map's column ``bc`` holds."""
    if bc.name is not None and bc.name != col.name:
        return False
    try:
        t = T.mysql_type(col)
    except SchemaError:
        return False
    bt = bc.type
    charset = bc.character_set_name
    if bt in _STRINGS or bt in _BLOBS:
        if t.kind not in (T.STRING, T.BINARY, T.JSON):
            return False
        if charset is not None and (charset == _BINARY_CHARSET) != (t.kind == T.BINARY):
            return False
        if bt in _BLOBS:  # TEXT/BLOB sizes: the length prefix is the map's own
            return t.base.endswith(("text", "blob", "json")) or t.kind == T.JSON
        if t.base.endswith(("text", "blob")):
            return False
        if t.kind == T.BINARY and bt == F.STRING and t.base == "binary":
            return bc.max_length == t.length  # BINARY(n) pads to n bytes
        # the decoder reads the text in the column's charset
        return not (t.kind == T.STRING and col.charset and charset and col.charset != charset)
    if bt == F.GEOMETRY:
        return t.kind == T.GEOMETRY
    if t.base not in _BASES.get(bt, ()):
        return False
    # signedness is optional metadata: a map without names has none to compare
    if ((bt in _INTS or bt in (F.NEWDECIMAL, F.FLOAT, F.DOUBLE))
            and bc.name is not None and bool(bc.unsigned) != t.unsigned):
        return False
    if bt == F.NEWDECIMAL:
        return (bc.precision, bc.decimals) == (t.precision, t.scale)
    if bt in (F.TIME2, F.DATETIME2, F.TIMESTAMP2):
        return (bc.fsp or 0) == t.fsp
    if bt == F.BIT:
        return bc.bits == (t.length or 1)
    if bt == F.ENUM:
        return not bc.enum_values or tuple(bc.enum_values[1:]) == t.members
    if bt == F.SET:
        return not bc.set_values or tuple(bc.set_values) == t.members
    return True


def resolve(columns: list[Any], table_id: TableId, known: Iterable[TableSchema],
            current: Callable[[], TableSchema | None]) -> TableSchema:
    """The schema of ``table_id`` that a table map's ``columns`` describe: ``current()``
    (information_schema now) when it fits them, else one built from the map, reusing the
    ``known`` schemas' columns and keys where they fit."""
    known = [k for k in known if k is not None]
    now = current()
    if now is not None and fits(columns, now):
        return _with_chunk_key(now, known)
    if any(bc.name is None for bc in columns):
        raise DecodeError(
            f"{table_id}: its structure changed and the binlog does not name its columns",
            fix="set binlog_row_metadata=FULL on the server (and in my.cnf)")
    pool = [*known, *([now] if now is not None else [])]
    cols = []
    for bc in columns:
        same = next((c for s in pool for c in s.columns
                     if c.name == bc.name and describes(bc, c)), None)
        cols.append(same or Column(bc.name, type_text(bc), True, _charset(bc)))
    names = {c.name for c in cols}
    key = next((s.primary_key for s in pool if s.primary_key
                and all(k in names for k in s.primary_key)), ())
    built = TableSchema(table_id, tuple(cols), tuple(key), key[0] if key else cols[0].name)
    return _with_chunk_key(built, known)


def _with_chunk_key(schema: TableSchema, known: list[TableSchema]) -> TableSchema:
    """A configured chunk key (not the first key column) carries over while it exists."""
    for k in known:
        if k.chunk_key != schema.chunk_key and k.chunk_key in schema.column_names:
            return TableSchema(schema.table_id, schema.columns, schema.primary_key,
                               k.chunk_key)
    return schema


def _charset(bc: Any) -> str | None:
    cs = bc.character_set_name
    return None if cs in (None, _BINARY_CHARSET) else cs


def type_text(bc: Any) -> str:
    """A table map column's type spelled as information_schema's ``COLUMN_TYPE``."""
    bt = bc.type
    unsigned = " unsigned" if bc.unsigned else ""
    if bt in _INTS:
        return _INTS[bt] + unsigned
    if bt == F.FLOAT:
        return "float" + unsigned
    if bt == F.DOUBLE:
        return "double" + unsigned
    if bt == F.NEWDECIMAL:
        return f"decimal({bc.precision},{bc.decimals})" + unsigned
    if bt == F.YEAR:
        return "year(4)"
    if bt in (F.DATE, F.NEWDATE):
        return "date"
    if bt in (F.TIME2, F.DATETIME2, F.TIMESTAMP2):
        base = {F.TIME2: "time", F.DATETIME2: "datetime", F.TIMESTAMP2: "timestamp"}[bt]
        return f"{base}({bc.fsp})" if bc.fsp else base
    if bt in (F.TIME, F.DATETIME, F.TIMESTAMP):
        return {F.TIME: "time", F.DATETIME: "datetime", F.TIMESTAMP: "timestamp"}[bt]
    if bt == F.BIT:
        return f"bit({bc.bits})"
    if bt in (F.ENUM, F.SET):
        members = (bc.enum_values or [""])[1:] if bt == F.ENUM else (bc.set_values or [])
        quoted = ",".join("'" + m.replace("\\", "\\\\").replace("'", "''") + "'"
                          for m in members)
        return f"{'enum' if bt == F.ENUM else 'set'}({quoted})"
    if bt == F.JSON:
        return "json"
    if bt == F.GEOMETRY:
        return "geometry"
    binary = bc.character_set_name == _BINARY_CHARSET
    if bt in _BLOBS:
        return _BLOB_SIZE.get(bc.length_size or 2, "long") + ("blob" if binary else "text")
    if bt in _STRINGS:
        n = bc.max_length or 0
        if not binary:
            n //= _MBMAXLEN.get((bc.character_set_name or "").lower(), 1)
        fixed = bt == F.STRING
        return (("binary" if fixed else "varbinary") if binary
                else ("char" if fixed else "varchar")) + f"({n})"
    raise DecodeError(f"binlog column type {bt} is not supported")
