"""MySQL's SQL text for Arrow data: the column type of each Arrow kind, each value as a
literal (built column-wise with Arrow compute, no per-row Python formatting for the common
types), rows as ``(v1,v2,...)`` tuples, and runs of them in statements of a bounded size.

``NO_BACKSLASH_ESCAPES`` is assumed (the sink's connections set it), so a string literal
needs only its quotes doubled.
"""

from __future__ import annotations

from collections.abc import Iterator

import pyarrow as pa
import pyarrow.compute as pc

from sparkcdc.errors import SchemaError
from sparkcdc.sinks.base import backtick as q
from sparkcdc.sinks.sql import column_kind, plain_text, sql_type

__all__ = ["chunks", "literals", "mysql_type", "q", "row_tuples"]

# the column type of each Arrow kind (sparkcdc.sinks.sql.arrow_kind); in keys, text and
# binary need a length
MYSQL_TYPES = {
    "int8": "TINYINT", "int16": "SMALLINT", "int32": "INT", "int64": "BIGINT",
    "decimal": "DECIMAL({precision},{scale})", "float32": "FLOAT", "float64": "DOUBLE",
    "boolean": "BOOLEAN", "binary": "LONGBLOB", "string": "LONGTEXT", "date": "DATE",
    "duration": "TIME(6)", "timestamp": "DATETIME(6)", "timestamptz": "DATETIME(6)",
}
MYSQL_KEY_TYPES = {**MYSQL_TYPES, "binary": "VARBINARY(255)", "string": "VARCHAR(255)"}


def mysql_type(t: pa.DataType, key: bool = False) -> str:
    return sql_type(t, MYSQL_KEY_TYPES if key else MYSQL_TYPES, "mysql")


def _quoted(strings: pa.Array) -> pa.Array:
    return pc.binary_join_element_wise("'", pc.replace_substring(strings, "'", "''"), "'", "")


def literals(col: pa.ChunkedArray | pa.Array) -> pa.Array:
    """One column as SQL literals (strings), NULL for nulls; NO_BACKSLASH_ESCAPES assumed."""
    col, kind = column_kind(col, "mysql")
    if kind in ("float32", "float64"):
        finite = pc.is_finite(col)
        if pc.any(pc.invert(pc.fill_null(finite, True))).as_py():
            raise SchemaError("MySQL cannot store NaN or infinite floats",
                              fix="filter or null them before the mysql sink")
    if kind == "boolean":
        out = pc.if_else(col, "TRUE", "FALSE")
    elif kind == "binary":
        out = pc.binary_join_element_wise("X'", plain_text(col, kind), "'", "")
    elif kind in ("string", "date", "timestamp", "timestamptz", "duration"):
        out = _quoted(plain_text(col, kind))
    else:  # numbers
        out = plain_text(col, kind)
    return pc.fill_null(out, "NULL")


def row_tuples(table: pa.Table) -> pa.Array:
    """'(v1,v2,...)' per row."""
    cols = [literals(c) for c in table.columns]
    inner = pc.binary_join_element_wise(*cols, ",") if len(cols) > 1 else cols[0]
    return pc.binary_join_element_wise("(", inner, ")", "")


def chunks(tuples: pa.Array, max_bytes: int) -> Iterator[str]:
    """Comma-joined runs of tuples, each under about max_bytes."""
    rows = tuples.to_pylist()
    start, size = 0, 0
    for i, r in enumerate(rows):
        size += len(r) + 1
        if size >= max_bytes:
            yield ",".join(rows[start:i + 1])
            start, size = i + 1, 0
    if start < len(rows):
        yield ",".join(rows[start:])
