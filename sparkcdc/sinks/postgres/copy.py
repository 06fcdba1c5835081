"""PostgreSQL's text for Arrow data: the column type of each Arrow kind, and a table as
``COPY FROM STDIN`` text, built column-wise with Arrow compute (no per-row Python
formatting for the common types)."""

from __future__ import annotations

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from sparkcdc.sinks.sql import column_kind, plain_text, sql_type

# the column type of each Arrow kind (sparkcdc.sinks.sql.arrow_kind)
PG_TYPES = {
    "int8": "smallint", "int16": "smallint", "int32": "integer", "int64": "bigint",
    "decimal": "numeric({precision},{scale})", "float32": "real",
    "float64": "double precision", "boolean": "boolean", "binary": "bytea", "string": "text",
    "date": "date", "duration": "interval", "timestamp": "timestamp",
    "timestamptz": "timestamptz",
}


def pg_type(t: pa.DataType) -> str:
    return sql_type(t, PG_TYPES, "postgres")


def _escaped(strings: pa.Array) -> pa.Array:
    """COPY text escaping: backslash first, then the separators."""
    for raw, esc in (("\\", "\\\\"), ("\t", "\\t"), ("\n", "\\n"), ("\r", "\\r")):
        strings = pc.replace_substring(strings, raw, esc)
    return strings


def copy_field(col: pa.ChunkedArray | pa.Array) -> pa.Array:
    """One column in COPY's text format (NULL as \\N), built with Arrow compute."""
    col, kind = column_kind(col, "postgres")
    out = plain_text(col, kind) if kind != "boolean" else pc.if_else(col, "t", "f")
    if kind in ("float32", "float64"):
        out = pc.replace_substring(pc.replace_substring(out, "inf", "Infinity"), "nan", "NaN")
    elif kind == "string":
        out = _escaped(out)
    elif kind == "binary":  # bytea's hex form, its backslash escaped for COPY
        out = pc.binary_join_element_wise("\\\\x", out, "")
    elif kind == "timestamptz":
        out = pc.binary_join_element_wise(out, "+00", "")
    return pc.fill_null(out, "\\N")


def copy_text(table: pa.Table) -> bytes:
    """A table as COPY FROM STDIN text: tab-separated fields, one line per row."""
    if table.num_rows == 0:
        return b""
    fields = [copy_field(c) for c in table.columns]
    lines = pc.binary_join_element_wise(*fields, "\t") if len(fields) > 1 else fields[0]
    lines = pc.binary_join_element_wise(lines, "", "\n")  # each line ends with a newline
    # the string array's data buffer is all lines back to back: take it without a copy
    lines = lines.combine_chunks() if isinstance(lines, pa.ChunkedArray) else lines
    offsets = np.frombuffer(lines.buffers()[1], dtype=np.int32)
    start, end = offsets[lines.offset], offsets[lines.offset + len(lines)]
    return lines.buffers()[2].to_pybytes()[start:end]
