"""Reading one chunk of a table straight into Arrow, in canonical types.

connectorx reads MySQL's binary protocol into Arrow without Python objects, which is what
makes snapshots fast; but it loses or panics on several types (every DECIMAL becomes
decimal128(38, 10), wide DECIMALs and negative TIMEs panic, GEOMETRY is not implemented,
zero dates panic, TIMESTAMPs come back in the session time zone). So each column is selected
through an SQL expression that connectorx reads exactly, and the result is cast to the
canonical schema of ``sparkcdc.mysql.types`` with vectorized pyarrow compute.

connectorx takes no query parameters, so chunk bounds are inlined with ``select_literal``:
numbers as numbers, strings as ``_utf8mb4 X'<hex>'`` so that the column's collation (not
Python) decides membership, dates and times as typed literals.
"""

from __future__ import annotations

import datetime as _dt
import math
import re
from collections.abc import Callable, Iterator
from decimal import Decimal
from typing import Any
from urllib.parse import quote

import pyarrow as pa
import pyarrow.compute as pc

from sparkcdc.core.chunking import ChunkingOptions, ChunkPlanner, is_integral_column
from sparkcdc.core.schema import Column, TableSchema, quote_ident
from sparkcdc.errors import ConfigError, ConnectionFailed, DecodeError, TLSError
from sparkcdc.mysql import types as T
from sparkcdc.mysql.connection import ConnectionOptions

_NUMERIC = {T.INT, T.UINT64, T.DECIMAL, T.DECIMAL_TEXT, T.FLOAT32, T.FLOAT64, T.BIT1, T.BITS,
            T.YEAR}
_TEXTUAL = {T.STRING, T.ENUM, T.SET, T.JSON}
_NUMBER_RE = re.compile(r"^[+-]?(\d+(\.\d*)?|\.\d+)([eE][+-]?\d+)?$")


# -- bounds ---------------------------------------------------------------------------------

def select_literal(value: Any, column: Column) -> str:
    """An SQL literal for ``value`` compared with ``column``, safe to inline in a query.

    The column's type decides the form, so a DECIMAL(65, 0) bound held as text is still
    inlined as a number and a string bound is compared under the column's collation.
    """
    t = T.mysql_type(column)
    if value is None:
        raise ConfigError(f"a null bound for {column.name!r} cannot be inlined",
                          fix="omit the bound instead (null means unbounded)")
    if isinstance(value, bool):
        value = int(value)
    k = t.kind
    if k in _NUMERIC:
        if isinstance(value, int):
            return str(value)
        if isinstance(value, Decimal):
            if not value.is_finite():
                raise ConfigError(f"bound {value} for {column.name!r} is not finite")
            return format(value, "f")
        if isinstance(value, float):
            if not math.isfinite(value):
                raise ConfigError(f"bound {value} for {column.name!r} is not finite")
            return repr(value)
        if isinstance(value, str) and _NUMBER_RE.match(value.strip()):
            return value.strip()
        if isinstance(value, (bytes, bytearray)) and k in (T.BITS, T.BIT1):
            return str(int.from_bytes(value, "big"))
    elif k in _TEXTUAL:
        if isinstance(value, str):
            return "_utf8mb4 X'" + value.encode("utf-8").hex() + "'"
        if isinstance(value, (bytes, bytearray)):
            return "_utf8mb4 X'" + bytes(value).hex() + "'"
    elif k in (T.BINARY, T.GEOMETRY):
        if isinstance(value, (bytes, bytearray)):
            return "X'" + bytes(value).hex() + "'"
        if isinstance(value, str):
            return "X'" + value.encode("utf-8").hex() + "'"
    elif k == T.DATE:
        if isinstance(value, _dt.date) and not isinstance(value, _dt.datetime):
            return f"DATE'{value.isoformat()}'"
    elif k == T.DATETIME:
        if isinstance(value, _dt.datetime) and value.tzinfo is None:
            return f"TIMESTAMP'{value.isoformat(sep=' ', timespec='microseconds')}'"
        if isinstance(value, _dt.date) and not isinstance(value, _dt.datetime):
            return f"TIMESTAMP'{value.isoformat()} 00:00:00'"
    elif k == T.TIMESTAMP:
        if isinstance(value, _dt.datetime) and value.tzinfo is not None:
            us = (value - T.EPOCH) // _dt.timedelta(microseconds=1)
            sec, frac = divmod(us, 1_000_000)
            return f"FROM_UNIXTIME({sec}.{frac:06d})"
    elif k == T.TIME and isinstance(value, _dt.timedelta):
        us = value // _dt.timedelta(microseconds=1)
        sign, us = ("-" if us < 0 else ""), abs(us)
        sec, frac = divmod(us, 1_000_000)
        return (f"CAST('{sign}{sec // 3600}:{sec // 60 % 60:02d}:{sec % 60:02d}.{frac:06d}'"
                f" AS TIME(6))")
    raise ConfigError(f"cannot compare {column.name!r} ({column.column_type}) with "
                      f"{type(value).__name__} {value!r}",
                      fix="chunk bounds must be canonical values of the chunk key column")


# -- per-column expressions and casts -------------------------------------------------------

def _native_decimal(t: T.MySQLType) -> bool:
    # connectorx goes through rust_decimal (28 digits) into decimal128(38, 10)
    return (t.precision or 0) <= 28 and (t.scale or 0) <= 10


def _select_expr(column: Column) -> str:
    t = T.mysql_type(column)
    q = quote_ident(column.name)
    k = t.kind
    if k == T.DECIMAL and _native_decimal(t):
        return q
    if k in (T.DECIMAL, T.DECIMAL_TEXT):
        return f"CAST({q} AS CHAR)"
    if k == T.BIT1:
        return f"({q} + 0)"
    if k in (T.DATE, T.DATETIME):
        # zero dates and dates with a zero part become NULL (connectorx panics on them):
        # TO_DAYS is NULL for a zero month or day and below 366 in year 0, so this one call
        # is "YEAR = 0 OR MONTH = 0 OR DAYOFMONTH = 0" at about half the server's CPU
        return f"IF(TO_DAYS({q}) >= 366, {q}, NULL)"
    if k == T.TIME:
        return f"CAST({time_microseconds(q)} AS SIGNED)"
    if k == T.TIMESTAMP:
        # the stored UTC instant, whatever the session time zone; 0 is the zero timestamp
        return f"NULLIF(CAST(UNIX_TIMESTAMP({q}) * 1000000 AS SIGNED), 0)"
    if k == T.GEOMETRY:
        return f"CAST({q} AS BINARY)"  # as stored: the SRID, then WKB (types.ewkb)
    if k == T.JSON:
        # MySQL's own text of the document: connectorx reads a bare JSON column by parsing
        # and printing it again (keys re-ordered, DECIMAL scales dropped, doubles changed).
        # MariaDB's JSON is a LONGTEXT, never of this kind (and the CAST is its text as is).
        return f"CAST({q} AS CHAR CHARACTER SET utf8mb4)"
    return q


def time_microseconds(q: str) -> str:
    """A TIME column ``q`` as signed microseconds, exact on both servers: MySQL's
    TIME_TO_SEC drops the fraction (``-00:00:01.5`` gives -1), MariaDB's keeps it."""
    return (f"IF({q} < TIME'00:00:00', -1, 1) * ((HOUR({q}) * 3600 + MINUTE({q}) * 60 + "
            f"SECOND({q})) * 1000000 + MICROSECOND({q}))")


def _cast(arr: pa.ChunkedArray, t: T.MySQLType) -> pa.ChunkedArray:
    target = t.arrow_type
    if t.kind == T.GEOMETRY:  # as stored (SRID, WKB): WKB or EWKB, as the binlog reads it
        return pa.chunked_array([pa.array([None if v is None else T.ewkb(v)
                                           for v in pc.cast(arr, pa.binary()).to_pylist()],
                                          pa.binary())], pa.binary())
    if arr.type == target:
        return arr
    if pa.types.is_large_string(arr.type) and pa.types.is_string(target):
        return arr.cast(target)
    return pc.cast(arr, target)


def select_list(schema: TableSchema) -> str:
    return ", ".join(f"{_select_expr(c)} AS `c{i}`" for i, c in enumerate(schema.columns))


def chunk_query(schema: TableSchema, start: Any, end: Any, *,
                chunk_key: str | None = None, where: str | None = None) -> str:
    """``SELECT <canonical exprs> FROM t WHERE k >= start AND k < end`` (null bounds omitted),
    and ``AND (where)`` for a condition of the operator's. The first chunk (no start) also
    holds the rows whose key is NULL (a configured, nullable chunk key): the stream filter
    and the rollback place a NULL there (``mysql/locate.py``), so its select must too."""
    key = schema.column(chunk_key or schema.chunk_key)
    conds = []
    if start is not None:
        conds.append(f"{quote_ident(key.name)} >= {select_literal(start, key)}")
    if end is not None:
        below = f"{quote_ident(key.name)} < {select_literal(end, key)}"
        if start is None and key.nullable:
            below = f"({below} OR {quote_ident(key.name)} IS NULL)"
        conds.append(below)
    if where:
        conds.append(f"({where})")
    sql = f"SELECT {select_list(schema)} FROM {schema.table_id.quoted()}"
    if conds:
        sql += " WHERE " + " AND ".join(conds)
    return sql


def to_canonical(raw: pa.Table, schema: TableSchema) -> pa.Table:
    """Cast a connectorx result of ``select_list`` to the canonical Arrow schema."""
    target = T.arrow_schema(schema)
    if raw.num_columns != len(schema.columns):
        raise DecodeError(f"{schema.table_id}: expected {len(schema.columns)} columns, "
                          f"connectorx returned {raw.num_columns}")
    cols = []
    for i, c in enumerate(schema.columns):
        try:
            cols.append(_cast(raw.column(i), T.mysql_type(c)))
        except (pa.ArrowInvalid, pa.ArrowNotImplementedError) as e:
            raise DecodeError(f"{schema.table_id}.{c.name} ({c.column_type}): cannot convert "
                              f"{raw.column(i).type} to {target.field(i).type}: {e}") from None
    return pa.Table.from_arrays(cols, schema=target)


def read_chunk(conn: ConnectionOptions, schema: TableSchema, start: Any, end: Any, *,
               chunk_key: str | None = None,
               reader: Callable[[str, str], pa.Table] | None = None,
               where: str | None = None) -> pa.Table:
    """Read the rows of ``schema`` with ``start <= chunk_key < end`` as a canonical table.

    One statement is one consistent read (InnoDB), which the watermark algorithm needs.
    Memory is the chunk's rows once as connectorx's Arrow plus the cast columns.
    ``reader`` (url, sql) -> Arrow table is a seam for tests and other engines.
    """
    sql = chunk_query(schema, start, end, chunk_key=chunk_key, where=where)
    if reader is None and not conn.connectorx_supported:
        # connectorx cannot present a client certificate (ssl.cert): read through pymysql
        return to_canonical(_pymysql_read(conn, sql), schema)
    url = conn.connectorx_url()  # carries the same ssl.mode, ssl.ca and connect timeout
    try:
        raw = (reader or _connectorx_read)(url, sql)
    except BaseException as e:  # connectorx panics surface as pyo3 PanicException
        if isinstance(e, (KeyboardInterrupt, SystemExit, GeneratorExit)):
            raise
        msg = _scrub(str(e).splitlines()[0] if str(e) else type(e).__name__, conn)
        low = msg.lower()
        if "tlserror" in low or "certificate verify failed" in low:
            raise TLSError(f"reading {schema.table_id} from {conn}: TLS failed: {msg} "
                           f"(ssl.mode={conn.ssl_mode}, ssl.ca={conn.ssl_ca})",
                           fix="set ssl.ca to the CA that signed the server's certificate; "
                               "verify_identity also needs the hostname in the certificate"
                           ) from None
        if any(w in low for w in ("connection refused", "timed out", "can't connect",
                                  "broken pipe", "connection reset", "io error")):
            raise ConnectionFailed(f"reading {schema.table_id} from {conn}: {msg}") from None
        raise DecodeError(f"reading {schema.table_id} from {conn} failed: {msg}",
                          fix="if a column type is named, report it: it needs an SQL "
                              "expression in sparkcdc.mysql.snapshot") from None
    return to_canonical(raw, schema)


def _connectorx_read(url: str, sql: str) -> pa.Table:
    import connectorx as cx

    return cx.read_sql(url, sql, return_type="arrow")


def _pymysql_read(conn: ConnectionOptions, sql: str) -> pa.Table:
    """The same SELECT through pymysql (slower: Python objects): for TLS with a client
    certificate, which connectorx cannot present. Columns come back in the types
    ``to_canonical`` casts from (the select list makes every value castable)."""
    with conn.connect() as c, c.cursor() as cur:
        cur.execute(sql)
        names = [d[0] for d in cur.description]
        rows = cur.fetchall()
    columns = list(zip(*rows)) if rows else [() for _ in names]
    return pa.table([pa.array(list(col)) for col in columns], names=names)


def _scrub(text: str, conn: ConnectionOptions) -> str:
    """Never let a password reach a message (connectorx may echo its URL)."""
    if conn.password:
        for p in {conn.password, quote(conn.password, safe="")}:
            text = text.replace(p, "******")
    return text


__all__ = ["chunk_query", "read_chunk", "select_list", "select_literal", "to_canonical"]


def read_table(conn: ConnectionOptions, schema: TableSchema,
               chunk_size: int = 8096) -> Iterator[pa.Table]:
    """A table's current rows as canonical tables, one chunk of its key range at a time
    (the snapshot's planner and reader, without watermarks: what the rows are now, not at
    one binlog position). For a read that the binlog's later changes will correct, such as
    back-filling a column the server filled without a row event."""
    from sparkcdc.mysql.chunk_probe import MySQLKeyProbe

    planner = ChunkPlanner(schema.table_id,
                           integral_key=is_integral_column(schema.column(schema.chunk_key)),
                           options=ChunkingOptions(chunk_size=chunk_size))
    with MySQLKeyProbe.open(conn, schema) as probe:
        splits = list(planner.plan_all(probe))
    for split in splits:
        yield read_chunk(conn, schema, split.start, split.end)
