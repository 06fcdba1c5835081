"""Chunked checksums of MySQL tables, and the same row hash on Arrow values: what
``sparkcdc verify`` (pipeline/commands/verify.py) compares a target with its source by.

A row's hash is the first 16 hex digits of ``SHA2(..., 256)`` of its columns, each rendered
as text with its length (``sql_render`` in MySQL's SQL, ``arrow_render`` its twin on the
values a target stores), as an unsigned 64-bit integer. SHA2 because both servers have it:
MySQL 9 removed ``MD5()`` and ``SHA1()`` (MariaDB still has them), and SHA-256 of the same
text is the same on MySQL, MariaDB and in Python, so both servers give the same answer. A range of a table sums up as ``COUNT(*)``
and the ``BIT_XOR`` of its rows' hashes, computed by the server. FLOAT, DOUBLE and spatial
columns are left out (their text forms differ between the server and Python).
"""

from __future__ import annotations

import hashlib
import math
from dataclasses import dataclass

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from sparkcdc.core.schema import Column, TableSchema, quote_ident
from sparkcdc.mysql.connection import ConnectionOptions
from sparkcdc.mysql.snapshot import time_microseconds

_INTS = ("tinyint", "smallint", "mediumint", "int", "integer", "bigint")
_TEXT = ("char", "varchar", "tinytext", "text", "mediumtext", "longtext", "enum", "set", "json")
_BINARY = ("binary", "varbinary", "tinyblob", "blob", "mediumblob", "longblob")
_SKIPPED = ("float", "double", "real", "geometry", "point", "linestring", "polygon",
            "multipoint", "multilinestring", "multipolygon", "geometrycollection")
_ZERO = "(YEAR({c}) = 0 OR MONTH({c}) = 0 OR DAYOFMONTH({c}) = 0)"


def _base(c: Column) -> str:
    return c.data_type.lower()


def integral_key(c: Column) -> bool:
    """Whether the column is an integer one, whose key space is cut into even ranges."""
    return _base(c) in _INTS


def hashed_columns(schema: TableSchema, wanted: list[str] | None = None) -> list[Column]:
    cols = [c for c in schema.columns if _base(c) not in _SKIPPED]
    if wanted is not None:
        cols = [c for c in cols if c.name in wanted]
    return cols


def sql_render(c: Column, zero_epoch: bool = False) -> str:
    """The column as text, in SQL; ``arrow_render`` is its twin on the target's values.
    ``zero_epoch``: a NOT NULL date column's zero dates read as the epoch (the source's
    ``zero-dates.not-null: epoch``), else as null."""
    q = quote_ident(c.name)
    t = _base(c)
    zero = "NULL"
    if zero_epoch and not c.nullable:
        zero = "'1970-01-01'" if t == "date" else "'1970-01-01 00:00:00.000000'"
    if t in _INTS or t == "year":
        return f"CAST({q} + 0 AS CHAR)"
    if t == "decimal" or t == "numeric":
        return f"CAST({q} AS CHAR)"
    if t == "bit":
        n = _bit_width(c)
        if n == 1:
            return f"CAST({q} + 0 AS CHAR)"
        return f"LPAD(HEX({q}), {2 * math.ceil(n / 8)}, '0')"
    if t in _TEXT:
        return f"CONVERT({q} USING utf8mb4)"
    if t in _BINARY:
        return f"HEX({q})"
    if t == "date":
        return f"IF({_ZERO.format(c=q)}, {zero}, DATE_FORMAT({q}, '%Y-%m-%d'))"
    if t in ("datetime", "timestamp"):
        return f"IF({_ZERO.format(c=q)}, {zero}, DATE_FORMAT({q}, '%Y-%m-%d %H:%i:%s.%f'))"
    if t == "time":
        return f"CAST({time_microseconds(q)} AS SIGNED)"
    return f"CONVERT({q} USING utf8mb4)"


def _bit_width(c: Column) -> int:
    import re

    m = re.search(r"\((\d+)\)", c.column_type)
    return int(m.group(1)) if m else 1


def sql_row_hash(cols: list[Column], zero_epoch: bool = False) -> str:
    parts = [f"IFNULL(CONCAT(CHAR_LENGTH({r}), ':', {r}), '~')"
             for r in (sql_render(c, zero_epoch) for c in cols)]
    row = f"CONCAT_WS('|', {', '.join(parts)})" if parts else "''"
    return f"CAST(CONV(LEFT(SHA2({row}, 256), 16), 16, 10) AS UNSIGNED)"


def arrow_render(arr: pa.ChunkedArray, c: Column) -> pa.ChunkedArray | pa.Array:
    t = _base(c)
    typ = arr.type
    if pa.types.is_boolean(typ):
        return pc.cast(pc.cast(arr, pa.int8()), pa.string())
    if t in ("datetime", "timestamp") and pa.types.is_timestamp(typ):
        if typ.unit != "us":
            arr = pc.cast(arr, pa.timestamp("us", typ.tz))
        return pc.strftime(arr, format="%Y-%m-%d %H:%M:%S")
    if pa.types.is_date(typ):
        return pc.strftime(pc.cast(arr, pa.timestamp("s")), format="%Y-%m-%d")
    if pa.types.is_duration(typ):
        return pc.cast(pc.cast(pc.cast(arr, pa.duration("us")), pa.int64()), pa.string())
    if pa.types.is_binary(typ) or pa.types.is_large_binary(typ) or pa.types.is_fixed_size_binary(
            typ):
        return pa.array([None if v is None else v.hex().upper() for v in arr.to_pylist()],
                        pa.string())
    if pa.types.is_decimal(typ):
        return pa.array([None if v is None else format(v, "f") for v in arr.to_pylist()],
                        pa.string())
    return pc.cast(arr, pa.string())


def arrow_row_hashes(table: pa.Table, cols: list[Column]) -> np.ndarray:
    """The SQL hash of every row of ``table`` (as stored in the target), as uint64."""
    n = table.num_rows
    if n == 0:
        return np.zeros(0, dtype=np.uint64)
    parts = []
    for c in cols:
        r = arrow_render(table.column(c.name), c)
        length = pc.cast(pc.utf8_length(r), pa.string())
        parts.append(pc.fill_null(pc.binary_join_element_wise(length, r, ":"), "~"))
    row = pc.binary_join_element_wise(*parts, "|") if parts else pa.array([""] * n)
    out = np.empty(n, dtype=np.uint64)
    for i, s in enumerate(row.to_pylist()):
        out[i] = int(hashlib.sha256(s.encode("utf-8")).hexdigest()[:16], 16)
    return out


# -- ranges ---------------------------------------------------------------------------------------

@dataclass(frozen=True)
class KeyRange:
    index: int
    lo: int | None  # inclusive; None: unbounded
    hi: int | None  # exclusive; None: unbounded

    def sql(self, key: str) -> str:
        q = quote_ident(key)
        conds = []
        if self.lo is not None:
            conds.append(f"{q} >= {int(self.lo)}")
        if self.hi is not None:
            conds.append(f"{q} < {int(self.hi)}")
        return " AND ".join(conds) or "1=1"

    def describe(self, key: str | None) -> str:
        if key is None or (self.lo is None and self.hi is None):
            return "all rows"
        lo = "-inf" if self.lo is None else str(self.lo)
        hi = "+inf" if self.hi is None else str(self.hi)
        return f"{key} in [{lo}, {hi})"


def plan_ranges(lo: int | None, hi: int | None, count: int, rows_per_range: int
                ) -> list[KeyRange]:
    if lo is None or hi is None or count <= rows_per_range:
        return [KeyRange(0, None, None)]
    n = max(1, math.ceil(count / rows_per_range))
    step = max(1, math.ceil((hi - lo + 1) / n))
    bounds = list(range(lo + step, hi + 1, step))
    edges = [None] + bounds + [None]
    return [KeyRange(i, edges[i], edges[i + 1]) for i in range(len(edges) - 1)]


# -- on the server --------------------------------------------------------------------------

def _connect(conn: ConnectionOptions):
    c = conn.connect()
    with c.cursor() as cur:
        cur.execute("SET time_zone = '+00:00'")
        cur.execute("SET NAMES utf8mb4")
    return c


def key_bounds(conn: ConnectionOptions, schemas: list[TableSchema], key: str
               ) -> tuple[int | None, int | None, int]:
    """The smallest and largest ``key`` over the tables, and their rows (for ``plan_ranges``)."""
    lo = hi = None
    count = 0
    with _connect(conn) as c, c.cursor() as cur:
        for s in schemas:
            q = quote_ident(key)
            cur.execute(f"SELECT MIN({q}), MAX({q}), COUNT(*) FROM {s.table_id.quoted()}")
            a, b, n = cur.fetchone()
            count += int(n)
            if a is not None:
                lo = int(a) if lo is None else min(lo, int(a))
                hi = int(b) if hi is None else max(hi, int(b))
    return lo, hi, count


def range_sums(conn: ConnectionOptions, schemas: list[TableSchema], cols: list[Column],
               ranges: list[KeyRange], key: str | None,
               zero_epoch: bool = False) -> dict[int, tuple[int, int]]:
    """Per range: the rows and the XOR of their hashes, over all the tables (shards merged
    into one target add up)."""
    h = sql_row_hash(cols, zero_epoch)
    out = {r.index: (0, 0) for r in ranges}
    with _connect(conn) as c, c.cursor() as cur:
        for s in schemas:
            for r in ranges:
                where = r.sql(key) if key else "1=1"
                cur.execute(f"SELECT COUNT(*), COALESCE(BIT_XOR({h}), 0) FROM "
                            f"{s.table_id.quoted()} WHERE {where}")
                n, x = cur.fetchone()
                cn, cx = out[r.index]
                out[r.index] = (cn + int(n), cx ^ int(x))
    return out


def row_hashes(conn: ConnectionOptions, schemas: list[TableSchema], cols: list[Column],
               keys: list[str], ranges: list[KeyRange], key: str | None,
               zero_epoch: bool = False) -> dict:
    """Every row's hash in the ranges, by its key tuple (to name the keys that differ)."""
    h = sql_row_hash(cols, zero_epoch)
    kq = ", ".join(quote_ident(k) for k in keys)
    out: dict = {}
    with _connect(conn) as c, c.cursor() as cur:
        for s in schemas:
            for r in ranges:
                where = r.sql(key) if key else "1=1"
                cur.execute(f"SELECT {kq}, {h} FROM {s.table_id.quoted()} WHERE {where}")
                for row in cur.fetchall():
                    out[tuple(row[:-1])] = int(row[-1])
    return out
