"""Canonical types: one Arrow type and one Python value per MySQL/MariaDB column type.

The snapshot path (connectorx, Arrow) and the binlog path (row events) must yield equal
values for equal rows, or the watermark normalization would see phantom updates. So both
paths convert to the *canonical* form decided here from ``Column.column_type`` (the
``COLUMN_TYPE`` of information_schema), never from what a driver happens to return.

The mapping, its reasons and its edge cases (zero dates, DECIMAL wider than 38 digits,
TIME beyond 24 h, TIMESTAMP time zones) are written down in ``docs/types.md``.
"""

from __future__ import annotations

import datetime as _dt
import functools
import json
import re
from collections.abc import Mapping
from dataclasses import dataclass
from decimal import Context, Decimal
from typing import Any, Literal

import pyarrow as pa

from sparkcdc.core.schema import Column, TableSchema
from sparkcdc.errors import DecodeError, SchemaError

UTC = _dt.timezone.utc  # datetime.UTC is 3.11+
_WIDE = Context(prec=100)  # DECIMAL(65, 30) needs more than the default 28 digits
EPOCH = _dt.datetime(1970, 1, 1, tzinfo=UTC)

def ewkb(stored: bytes) -> bytes:
    """A geometry as the server stores it (a 4-byte little-endian SRID, then WKB) as WKB
    when its SRID is 0, else as EWKB: PostGIS's extended WKB, whose type word carries the
    SRID flag (0x20000000) and is followed by the SRID, as Debezium keeps it. PostGIS,
    Sedona, Shapely and GEOS read both. Bytes that are no WKB pass as they are."""
    if len(stored) <= 4:
        return b""
    srid = int.from_bytes(stored[:4], "little")
    wkb = stored[4:]
    if srid == 0 or len(wkb) < 5 or wkb[0] not in (0, 1):
        return wkb
    order: Literal["little", "big"] = "little" if wkb[0] == 1 else "big"
    kind = int.from_bytes(wkb[1:5], order) | 0x20000000
    return wkb[:1] + kind.to_bytes(4, order) + srid.to_bytes(4, order) + wkb[5:]


# kinds: the canonical families both read paths switch on
INT = "int"  # fits int64 (every signed integer, unsigned up to INT)
UINT64 = "uint64"  # BIGINT UNSIGNED -> decimal128(20, 0)
DECIMAL = "decimal"  # DECIMAL(p, s), p <= 38 -> decimal128(p, s)
DECIMAL_TEXT = "decimal_text"  # DECIMAL(p, s), p > 38 -> plain decimal text
FLOAT32 = "float32"
FLOAT64 = "float64"
BIT1 = "bit1"  # BIT(1) -> bool
BITS = "bits"  # BIT(n > 1) -> big-endian bytes
STRING = "string"
BINARY = "binary"
DATE = "date"
TIME = "time"
DATETIME = "datetime"
TIMESTAMP = "timestamp"
YEAR = "year"
ENUM = "enum"
SET = "set"
JSON = "json"
GEOMETRY = "geometry"

_INT_ARROW = {  # (signed, unsigned)
    "tinyint": (pa.int8(), pa.int16()),
    "smallint": (pa.int16(), pa.int32()),
    "mediumint": (pa.int32(), pa.int32()),
    "int": (pa.int32(), pa.int64()),
    "integer": (pa.int32(), pa.int64()),
    "bigint": (pa.int64(), None),
}
_TEXT = {"char", "varchar", "tinytext", "text", "mediumtext", "longtext"}
_BLOB = {"binary", "varbinary", "tinyblob", "blob", "mediumblob", "longblob"}
_GEOMETRY = {"geometry", "point", "linestring", "polygon", "multipoint", "multilinestring",
             "multipolygon", "geometrycollection", "geomcollection"}


@dataclass(frozen=True)
class MySQLType:
    """A parsed column type: what the column holds and how it looks canonically."""

    base: str  # the bare type name, lower case: "bigint", "decimal", "enum"...
    kind: str  # the canonical family (module constants above)
    arrow_type: pa.DataType
    unsigned: bool = False
    precision: int | None = None  # DECIMAL
    scale: int | None = None  # DECIMAL
    length: int | None = None  # CHAR/BINARY length in characters/bytes, BIT width
    fsp: int = 0  # TIME/DATETIME/TIMESTAMP fractional digits
    members: tuple[str, ...] = ()  # ENUM/SET members in definition order

    @property
    def nbytes(self) -> int:
        """BIT(n): the bytes MySQL uses, ceil(n / 8)."""
        return ((self.length or 1) + 7) // 8

    @property
    def zero_to_null(self) -> bool:
        """True for types whose MySQL "zero" value becomes null (see docs/types.md)."""
        return self.kind in (DATE, DATETIME, TIMESTAMP)

    # -- library values --------------------------------------------------------------------

    def from_library(self, v: Any, none_source: str | None = None) -> Any:
        """Canonical value from what python-mysql-replication's own decoder returns.

        That decoder cannot tell an empty SET from NULL except through ``none_sources``
        (pass it as ``none_source``), reads YEAR 0000 as 1900, and mis-decodes negative TIME
        values that have a fraction; sparkcdc's default binlog decoder reads the bytes itself
        for those reasons. This function exists for callers that already hold library rows.
        """
        if v is None:
            return "" if self.kind == SET and none_source == "empty set" else None
        k = self.kind
        if k == INT:
            return int(v)
        if k == UINT64:
            return Decimal(int(v))
        if k in (DECIMAL, DECIMAL_TEXT):
            return self.decimal(Decimal(v))
        if k in (FLOAT32, FLOAT64):
            return float(v)
        if k in (BIT1, BITS):
            n = int(v, 2) if isinstance(v, str) else int(v)
            return bool(n) if k == BIT1 else n.to_bytes(self.nbytes, "big")
        if k in (STRING, ENUM, JSON):
            if k == JSON and not isinstance(v, (str, bytes)):
                return json_text(v)
            return v.decode("utf-8", "surrogateescape") if isinstance(v, bytes) else str(v)
        if k == BINARY:
            b = v.encode("latin-1") if isinstance(v, str) else bytes(v)
            return self.pad_binary(b)
        if k == SET:
            return ",".join(m for m in self.members if m in v)
        if k == DATE:
            return v
        if k == TIME:
            return v
        if k == DATETIME:
            return v
        if k == TIMESTAMP:
            return None if v == _dt.datetime(1970, 1, 1) else v.replace(tzinfo=UTC)
        if k == YEAR:
            return 0 if v == 1900 else int(v)  # the library adds 1900 to the stored 0
        if k == GEOMETRY:
            return ewkb(bytes(v))
        raise DecodeError(f"no canonical form for {self.base}")  # pragma: no cover

    # -- helpers shared by both paths -------------------------------------------------------

    def decimal(self, d: Decimal) -> Decimal | str:
        """A DECIMAL value: ``Decimal`` at the column's scale, or its plain text if p > 38."""
        scale = self.scale or 0
        if self.kind == DECIMAL_TEXT:
            return format(d, f".{scale}f")
        if d.as_tuple().exponent == -scale:
            return d
        return d.quantize(Decimal(1).scaleb(-scale), context=_WIDE)

    def pad_binary(self, b: bytes) -> bytes:
        """BINARY(n) as MySQL returns it: right-padded with zero bytes (the binlog strips them)."""
        if self.base == "binary" and self.length and len(b) < self.length:
            return b + b"\0" * (self.length - len(b))
        return b


def _split_args(args: str) -> list[str]:
    """The quoted members of ENUM/SET (``''`` inside a member is one quote)."""
    out, i, n = [], 0, len(args)
    while i < n:
        if args[i] == "'":
            j, buf = i + 1, []
            while j < n:
                if args[j] == "'" and j + 1 < n and args[j + 1] == "'":
                    buf.append("'")
                    j += 2
                elif args[j] == "'":
                    break
                elif args[j] == "\\" and j + 1 < n:  # MySQL 5.x shows backslash escapes
                    buf.append(args[j + 1])
                    j += 2
                else:
                    buf.append(args[j])
                    j += 1
            out.append("".join(buf))
            i = j + 1
        else:
            i += 1
    return out


@functools.lru_cache(maxsize=4096)
def parse_column_type(column_type: str) -> MySQLType:
    """Parse information_schema ``COLUMN_TYPE`` (``bigint(20) unsigned``, ``enum('a','b')``)."""
    text = column_type.strip()
    if "(" in text:
        base, rest = text.split("(", 1)
        args, _, mods = rest.rpartition(")")
    else:
        base, args, mods = text, None, ""
    words = base.lower().split()
    if not words:
        raise SchemaError(f"cannot parse the column type {column_type!r}")
    base = " ".join(w for w in words if w not in ("unsigned", "signed", "zerofill"))
    unsigned = "unsigned" in words or "unsigned" in mods.lower().split()
    if base == "double precision" or base == "real":
        base = "double"
    nums = [int(x) for x in re.findall(r"\d+", args or "")] if base not in ("enum", "set") else []

    def t(kind: str, arrow: pa.DataType, **kw: Any) -> MySQLType:
        return MySQLType(base=base, kind=kind, arrow_type=arrow, unsigned=unsigned, **kw)

    if base in ("bool", "boolean"):
        return t(INT, pa.int8())
    if base in _INT_ARROW:
        signed_t, unsigned_t = _INT_ARROW[base]
        if base == "bigint" and unsigned:
            return t(UINT64, pa.decimal128(20, 0), precision=20, scale=0)
        return t(INT, unsigned_t if unsigned else signed_t)
    if base in ("decimal", "numeric", "dec", "fixed"):
        p = nums[0] if nums else 10
        s = nums[1] if len(nums) > 1 else 0
        if p <= 38:
            return t(DECIMAL, pa.decimal128(p, s), precision=p, scale=s)
        return t(DECIMAL_TEXT, pa.string(), precision=p, scale=s)
    if base == "float":
        return t(FLOAT32, pa.float32())
    if base == "double":
        return t(FLOAT64, pa.float64())
    if base == "bit":
        n = nums[0] if nums else 1
        return t(BIT1, pa.bool_(), length=1) if n == 1 else t(BITS, pa.binary(), length=n)
    if base in _TEXT:
        return t(STRING, pa.string(), length=nums[0] if nums else None)
    if base in _BLOB:
        return t(BINARY, pa.binary(), length=nums[0] if nums else None)
    if base == "date":
        return t(DATE, pa.date32())
    if base == "time":
        return t(TIME, pa.duration("us"), fsp=nums[0] if nums else 0)
    if base == "datetime":
        return t(DATETIME, pa.timestamp("us"), fsp=nums[0] if nums else 0)
    if base == "timestamp":
        return t(TIMESTAMP, pa.timestamp("us", tz="UTC"), fsp=nums[0] if nums else 0)
    if base == "year":
        return t(YEAR, pa.int16())
    if base == "enum":
        return t(ENUM, pa.string(), members=tuple(_split_args(args or "")))
    if base == "set":
        return t(SET, pa.string(), members=tuple(_split_args(args or "")))
    if base == "json":
        return t(JSON, pa.string())
    if base in _GEOMETRY:
        return t(GEOMETRY, pa.binary())
    raise SchemaError(f"the column type {column_type!r} is not supported",
                      fix="exclude the column or the table from capture, or cast it in a view")


def mysql_type(column: Column) -> MySQLType:
    return parse_column_type(column.column_type)


def arrow_schema(schema: TableSchema) -> pa.Schema:
    """The canonical Arrow schema of a table; each field keeps its MySQL type as metadata.

    Date/time fields are nullable even for NOT NULL columns: zero dates become null.
    """
    fields = []
    for c in schema.columns:
        t = mysql_type(c)
        fields.append(pa.field(c.name, t.arrow_type, nullable=c.nullable or t.zero_to_null,
                               metadata={"mysql_type": c.column_type}))
    return pa.schema(fields)


def canonical_row(schema: TableSchema, values: Mapping[str, Any],
                  none_sources: Mapping[str, str] | None = None) -> dict[str, Any]:
    """Canonical values from a row dict as python-mysql-replication decodes it.

    Columns come in table order, keyed by name (needs ``binlog_row_metadata=FULL``, else the
    library names them ``UNKNOWN_COL<i>``; then positions are used).
    """
    none_sources = none_sources or {}
    names = list(values)
    out: dict[str, Any] = {}
    for i, c in enumerate(schema.columns):
        key = c.name if c.name in values else (names[i] if i < len(names) else None)
        if key is None:
            raise DecodeError(f"the binlog row of {schema.table_id} has no column {c.name!r}",
                              fix="the table changed shape; restart from a fresh snapshot")
        out[c.name] = mysql_type(c).from_library(values[key], none_sources.get(key))
    return out


def json_text(v: Any) -> str:
    """MySQL's text form of a JSON value parsed from MySQL's binary JSON.

    MySQL prints ``", "`` and ``": "`` separators, keys in stored order, non-ASCII as is.
    """
    def norm(x: Any) -> Any:
        if isinstance(x, bytes):
            return x.decode("utf-8", "surrogateescape")
        if isinstance(x, dict):
            return {norm(k): norm(val) for k, val in x.items()}
        if isinstance(x, (list, tuple)):
            return [norm(val) for val in x]
        return x

    return json.dumps(norm(v), ensure_ascii=False)


def epoch_micros_to_utc(us: int) -> _dt.datetime:
    return EPOCH + _dt.timedelta(microseconds=us)


_EPOCHS = {DATE: _dt.date(1970, 1, 1), DATETIME: _dt.datetime(1970, 1, 1), TIMESTAMP: EPOCH}


def zero_date_epochs(schema: TableSchema) -> dict[str, Any]:
    """For ``zero-dates.not-null: epoch``: the NOT NULL date and time columns of ``schema``
    and the epoch each holds instead of a zero date (Debezium's choice: a NOT NULL column
    never reads as null). Nullable columns keep null: there a zero date and a null read the
    same either way."""
    out = {}
    for c in schema.columns:
        if not c.nullable:
            kind = mysql_type(c).kind
            if kind in _EPOCHS:
                out[c.name] = _EPOCHS[kind]
    return out


def epoch_for_zero_dates(table: pa.Table, epochs: Mapping[str, Any]) -> pa.Table:
    """A snapshot chunk with the zero dates (read as null) of ``epochs``' columns set."""
    import pyarrow.compute as pc

    for name, value in epochs.items():
        i = table.schema.get_field_index(name)
        col = table.column(i)
        if col.null_count:
            table = table.set_column(i, table.field(i),
                                     pc.fill_null(col, pa.scalar(value, col.type)))
    return table


__all__ = [
    "UTC",
    "MySQLType",
    "arrow_schema",
    "canonical_row",
    "epoch_for_zero_dates",
    "json_text",
    "mysql_type",
    "parse_column_type",
    "zero_date_epochs",
]
