"""How row values become JSON text and come back, shared by every format.

Spark's JSON writer does most of it (decimals as JSON numbers with every digit, binary as
base64, dates ISO); three choices are ours: timestamps keep microseconds
(``2024-01-01T00:00:00.123456Z``; DATETIME without the ``Z``), MySQL TIME (Spark
``interval day to second``) travels as a number of microseconds (Debezium's MicroTime, as
in the source's envelope), and nulls are written, not dropped.
"""

from __future__ import annotations

from pyspark.sql import Column
from pyspark.sql import functions as F
from pyspark.sql.types import DayTimeIntervalType, LongType, StructField, StructType

JSON_OPTIONS = {"timestampFormat": "yyyy-MM-dd'T'HH:mm:ss.SSSSSSXXX",
                "timestampNTZFormat": "yyyy-MM-dd'T'HH:mm:ss.SSSSSS",
                "ignoreNullFields": "false"}
READ_OPTIONS = {k: v for k, v in JSON_OPTIONS.items() if k != "ignoreNullFields"}


def _wire(field: StructField, col: Column) -> Column:
    if isinstance(field.dataType, DayTimeIntervalType):
        return _interval_micros(col)
    return col


def _interval_micros(col: Column) -> Column:
    secs = F.extract(F.lit("SECOND"), col)  # decimal(8,6), signed
    return ((F.extract(F.lit("DAY"), col).cast("long") * 86_400_000_000)
            + (F.extract(F.lit("HOUR"), col).cast("long") * 3_600_000_000)
            + (F.extract(F.lit("MINUTE"), col).cast("long") * 60_000_000)
            + (secs * 1_000_000).cast("long"))


def row_struct(schema: StructType, prefix: str | None = None) -> Column:
    """The data columns as one struct, with wire types (see module doc)."""
    cols = []
    for f in schema.fields:
        c = F.col(f"{prefix}.`{f.name}`") if prefix else F.col(f"`{f.name}`")
        cols.append(_wire(f, c).alias(f.name))
    return F.struct(*cols)


def to_json(col: Column) -> Column:
    return F.to_json(col, JSON_OPTIONS)


def wire_schema(schema: StructType) -> StructType:
    """The schema JSON is parsed with: intervals arrive as longs."""
    return StructType([StructField(f.name, LongType() if isinstance(f.dataType, DayTimeIntervalType)
                                   else f.dataType, True) for f in schema.fields])


def from_wire(struct_col: str, schema: StructType) -> list[Column]:
    """Typed data columns from a parsed wire struct."""
    out = []
    for f in schema.fields:
        c = F.col(f"{struct_col}.`{f.name}`")
        if isinstance(f.dataType, DayTimeIntervalType):
            secs = (c.cast("decimal(18,0)") / F.lit(1_000_000)).cast("decimal(18,6)")
            c = F.make_dt_interval(F.lit(0), F.lit(0), F.lit(0), secs).cast(f.dataType)
        out.append(c.alias(f.name))
    return out


def tombstoned(value: Column, is_delete: Column) -> Column:
    """``value``, and after each delete a null one (a tombstone: Kafka's log compaction
    then drops every message of the key), as a generator column for ``select``."""
    return F.explode(F.when(is_delete, F.array(value, F.lit(None).cast("string")))
                      .otherwise(F.array(value)))


def as_schema(spark, schema) -> StructType:
    if isinstance(schema, StructType):
        return schema
    return spark.createDataFrame([], schema).schema
