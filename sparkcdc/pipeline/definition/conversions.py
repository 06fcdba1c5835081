"""Column conversions Flink's MySQL pipeline source makes and sparkcdc's source does not,
asked for by its keys (pipeline/definition/flink_keys.py), made on the change rows before any
transform sees them:

* ``treat-tinyint1-as-boolean.enabled: true``: a ``TINYINT(1)`` column is a boolean (0 is
  false, any other value true), as Connector/J's ``tinyInt1isBit`` reads it;
* ``use.legacy.json.format: true``: a MySQL ``JSON`` column's text without the spaces
  after ``,`` and ``:`` (``{"k":"v"}``), as Flink's legacy format prints it. MariaDB's
  JSON is text, kept as stored (Flink keeps it so too).

The target's column types follow (``arrow_schema``), so a schema change does not take
them for a change of type.
"""

from __future__ import annotations

import re

import pyarrow as pa
import pyarrow.compute as pc

from sparkcdc.core.schema import TableSchema
from sparkcdc.mysql import port
from sparkcdc.pipeline.definition.flink_keys import SourceExtras

_TINYINT1 = re.compile(r"tinyint\(1\)")


def tinyint1_columns(schema: TableSchema) -> set[str]:
    return {c.name for c in schema.columns if _TINYINT1.fullmatch(c.column_type.strip().lower())}


def json_columns(schema: TableSchema) -> set[str]:
    return {c.name for c in schema.columns if c.data_type == "json"}


def arrow_schema(schema: TableSchema, extras: SourceExtras | None = None) -> pa.Schema:
    """The table's Arrow schema (``mysql.types.arrow_schema``) as the pipeline's rows have
    it after the conversions."""
    arrow = port.arrow_schema(schema)
    if extras is None or not extras.tinyint1_as_boolean:
        return arrow
    bools = tinyint1_columns(schema)
    return pa.schema([f.with_type(pa.bool_()) if f.name in bools else f for f in arrow],
                     metadata=arrow.metadata)


def convert_rows(rows: pa.Table, schema: TableSchema, extras: SourceExtras | None) -> pa.Table:
    """Change rows (Arrow) with the conversions made on their columns."""
    if extras is None or not (extras.tinyint1_as_boolean or extras.compact_json):
        return rows
    names = set(rows.column_names)
    if extras.tinyint1_as_boolean:
        for name in sorted(tinyint1_columns(schema) & names):
            i = rows.column_names.index(name)
            col = rows.column(i)
            if not pa.types.is_boolean(col.type):
                rows = rows.set_column(i, pa.field(name, pa.bool_()), pc.not_equal(col, 0))
    if extras.compact_json:
        for name in sorted(json_columns(schema) & names):
            i = rows.column_names.index(name)
            col = rows.column(i)
            values = [None if v is None else compact_json(v) for v in col.to_pylist()]
            rows = rows.set_column(i, rows.schema.field(i), pa.array(values, col.type))
    return rows


def compact_json(text: str) -> str:
    """JSON text without whitespace outside its strings."""
    out, in_string, escaped = [], False, False
    for ch in text:
        if in_string:
            out.append(ch)
            if escaped:
                escaped = False
            elif ch == "\\":
                escaped = True
            elif ch == '"':
                in_string = False
        elif ch == '"':
            in_string = True
            out.append(ch)
        elif ch not in " \t\n\r":
            out.append(ch)
    return "".join(out)
