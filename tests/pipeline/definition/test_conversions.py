"""Flink's source conversions the pipeline makes on the change rows (no servers needed):
TINYINT(1) as boolean, MySQL JSON in Flink's legacy compact text."""

from __future__ import annotations

import pyarrow as pa

from sparkcdc.core.schema import Column, TableId, TableSchema
from sparkcdc.pipeline.definition.conversions import arrow_schema, compact_json, convert_rows
from sparkcdc.pipeline.definition.flink_keys import SourceExtras

SCHEMA = TableSchema(TableId("db", "t"), (
    Column("id", "int(11)", False), Column("b", "tinyint(1)"), Column("u", "tinyint(1) unsigned"),
    Column("n", "tinyint(4)"), Column("j", "json")), ("id",), "id")


def test_compact_json_keeps_strings():
    assert compact_json('{"a": 1, "b": [true, null], "c": "x, y: z \\" q"}') == \
        '{"a":1,"b":[true,null],"c":"x, y: z \\" q"}'
    assert compact_json("[]") == "[]"


def test_rows_and_schema_converted_only_when_asked():
    rows = pa.table({"id": pa.array([1, 2, 3], pa.int32()), "b": pa.array([0, 1, 7], pa.int8()),
                     "u": pa.array([1, 1, 0], pa.int16()), "n": pa.array([1, 0, 2], pa.int8()),
                     "j": pa.array(['{"k": "v", "n": [1, 2]}', None, "null"])})
    assert convert_rows(rows, SCHEMA, SourceExtras()) is rows
    out = convert_rows(rows, SCHEMA, SourceExtras(tinyint1_as_boolean=True, compact_json=True))
    assert out.column("b").to_pylist() == [False, True, True]
    assert out.column("u").to_pylist() == [1, 1, 0]  # unsigned: not Connector/J's bit
    assert out.column("n").to_pylist() == [1, 0, 2]
    assert out.column("j").to_pylist() == ['{"k":"v","n":[1,2]}', None, "null"]
    types = {f.name: f.type for f in arrow_schema(SCHEMA, SourceExtras(tinyint1_as_boolean=True))}
    assert types["b"] == pa.bool_() and types["n"] == pa.int8()
    assert arrow_schema(SCHEMA).field("b").type == pa.int8()
