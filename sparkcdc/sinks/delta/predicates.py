"""SQL predicates over a Delta target (alias ``t``), as delta-rs' and Spark's SQL both
take them: a key range's bounds and a chunk's range read again. Values become literals
only for the types whose text is unambiguous in both."""

from __future__ import annotations

from typing import Any

import pyarrow as pa

from sparkcdc.errors import SchemaError
from sparkcdc.sinks.base import KeyRange
from sparkcdc.sinks.base import backtick as _q


def literal(value: Any, t: pa.DataType) -> str | None:
    """A SQL literal for delta-rs' predicate, for the types whose text is unambiguous;
    None for others (the merge is then not narrowed by that column, which is only slower)."""
    if pa.types.is_integer(t):
        return str(int(value))
    if pa.types.is_string(t) or pa.types.is_large_string(t):
        return "'" + str(value).replace("'", "''") + "'"
    if pa.types.is_date32(t):
        return f"CAST('{value.isoformat()}' AS DATE)"
    return None


def in_range(r: KeyRange, t: pa.DataType) -> str:
    """``r`` as delta-rs' SQL over the target (alias ``t``)."""
    col = f"t.{_q(r.column)}"

    def lit(v: Any) -> str:
        if pa.types.is_decimal(t):
            return f"CAST('{v:f}' AS DECIMAL({t.precision}, {t.scale}))"
        text = literal(v, t)
        if text is None:
            raise SchemaError(f"a chunk read again bounds {r.column} ({t}), which the delta "
                              "sink cannot compare", fix="a bug: the pipeline gives ranges "
                              "of integer, decimal and date columns only")
        return text

    conds = [f"{col} {op} {lit(v)}" for op, v in ((">=", r.start), ("<", r.end))
             if v is not None]
    if r.start is None and r.end is not None:
        return f"({conds[0]} OR {col} IS NULL)"
    return "(" + (" AND ".join(conds) or "TRUE") + ")"
