"""``changelog-json``: Flink's changelog JSON, one record per change row.

    {"data": {...}, "op": "+I" | "-U" | "+U" | "-D", "seq": "...", "db": ..., "table": ...,
     "ts_ms": ...}

``data`` and ``op`` are Flink's format; ``seq``, ``db``, ``table`` and ``ts_ms`` are extra
fields (Flink's reader ignores them) that let ``decode`` restore the metadata columns.
"""

from __future__ import annotations

from collections.abc import Sequence

from pyspark.sql import DataFrame
from pyspark.sql import functions as F
from pyspark.sql.types import LongType, StringType, StructField, StructType

from sparkcdc.formats.debezium import data_schema, key_json
from sparkcdc.formats.values import (
    READ_OPTIONS,
    as_schema,
    from_wire,
    row_struct,
    to_json,
    tombstoned,
    wire_schema,
)

OPS = {"insert": "+I", "update_preimage": "-U", "update_postimage": "+U", "delete": "-D"}


def encode(df: DataFrame, keys: Sequence[str] | None = None, *,
           tombstones: bool = False) -> DataFrame:
    """Change rows -> ``key`` (JSON of the keys, or null without keys), ``value``
    (``tombstones``: a null one after each delete)."""
    op = F.coalesce(*[F.when(F.col("_change_type") == k, F.lit(v)) for k, v in OPS.items()])
    value = to_json(F.struct(
        row_struct(data_schema(df)).alias("data"), op.alias("op"),
        F.col("_seq").cast("string").alias("seq"), F.col("_database").alias("db"),
        F.col("_table").alias("table"),
        F.floor(F.unix_micros("_op_ts") / 1000).cast("long").alias("ts_ms")))
    key = key_json(df, keys) if keys else F.lit(None).cast("string")
    if tombstones:
        value = tombstoned(value, F.col("_change_type") == "delete")
    return df.select(key.alias("key"), value.alias("value"))


def decode(df: DataFrame, schema) -> DataFrame:
    schema = as_schema(df.sparkSession, schema)
    env = StructType([StructField("data", wire_schema(schema)), StructField("op", StringType()),
                      StructField("seq", StringType()), StructField("db", StringType()),
                      StructField("table", StringType()), StructField("ts_ms", LongType())])
    keep = [c for c in df.columns if c not in ("key", "value") and c not in schema.names]
    kind = F.coalesce(*[F.when(F.col("__e.op") == v, F.lit(k)) for k, v in OPS.items()])
    x = (df.filter(F.col("value").isNotNull())
           .withColumn("__e", F.from_json(F.col("value").cast("string"), env, READ_OPTIONS)))
    return x.select(*from_wire("__e.data", schema), kind.alias("_change_type"),
                    F.col("__e.db").alias("_database"), F.col("__e.table").alias("_table"),
                    F.timestamp_millis("__e.ts_ms").alias("_op_ts"),
                    F.col("__e.seq").cast("decimal(38,0)").alias("_seq"), *keep)
