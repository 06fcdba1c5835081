"""``canal-json``: Alibaba Canal's flat message, one row per message.

    {"data": [{...}], "old": [{changed columns' old values}] | null,
     "type": "INSERT" | "UPDATE" | "DELETE", "database", "table", "pkNames": [...],
     "isDdl": false, "es": ..., "ts": ..., "seq": "...", "seq_before": "..."}

As in Canal, ``old`` holds only the columns an update changed (with explicit nulls), and
an update's pre-image is ``data`` overlaid with ``old``. Canal sends a primary-key change as
one UPDATE whose ``old`` holds the old key: ``decode`` makes it a delete of the old key and
an insert of the new one, so a keyed target drops the old row. Values are typed JSON (Flink's
canal-json reads both typed values and Canal's strings). ``seq``/``seq_before`` are extra
fields carrying ``_seq``.
"""

from __future__ import annotations

from collections.abc import Sequence

from pyspark.sql import DataFrame
from pyspark.sql import functions as F
from pyspark.sql.types import (
    ArrayType,
    LongType,
    MapType,
    StringType,
    StructField,
    StructType,
)

from sparkcdc.formats.debezium import data_schema, key_json, paired
from sparkcdc.formats.values import (
    READ_OPTIONS,
    as_schema,
    from_wire,
    to_json,
    tombstoned,
    wire_schema,
)


def encode(df: DataFrame, keys: Sequence[str], *, tombstones: bool = False,
           pairs: bool = True) -> DataFrame:
    """``pairs=False``: the rows hold no pre-image to pair (``debezium.paired``)."""
    x = paired(df, keys, pairs=pairs)
    schema = data_schema(df)
    ct = F.col("_change_type")
    typ = (F.when(ct == "insert", F.lit("INSERT")).when(ct == "delete", F.lit("DELETE"))
            .otherwise(F.lit("UPDATE")))
    pieces = []
    for f in schema.fields:
        old, new = F.col(f"__prev_row.`{f.name}`"), F.col(f"__row.`{f.name}`")
        one = to_json(F.struct(old.alias(f.name)))  # '{"c":value}' -> '"c":value'
        pieces.append(F.when(~old.eqNullSafe(new), F.regexp_extract(one, r"^\{(.*)\}$", 1)))
    old_json = F.concat(F.lit("[{"), F.concat_ws(",", *pieces), F.lit("}]"))
    ts_ms = F.floor(F.unix_micros("_op_ts") / 1000).cast("long")
    body = to_json(F.struct(
        F.array(F.col("__row")).alias("data"), F.lit("__sparkcdc_old_7f3a__").alias("old"),
        typ.alias("type"), F.col("_database").alias("database"), F.col("_table").alias("table"),
        F.array(*[F.lit(k) for k in keys]).alias("pkNames"), F.lit(False).alias("isDdl"),
        ts_ms.alias("es"), ts_ms.alias("ts"), F.col("_seq").cast("string").alias("seq"),
        F.col("__prev_seq").cast("string").alias("seq_before")))
    # splice the raw 'old' JSON in (to_json would quote it as a string)
    old_value = F.when(F.col("__prev_row").isNotNull(), old_json).otherwise(F.lit("null"))
    value = F.concat(F.substring_index(body, '"__sparkcdc_old_7f3a__"', 1), old_value,
                     F.substring_index(body, '"__sparkcdc_old_7f3a__"', -1))
    if tombstones:
        value = tombstoned(value, ct == "delete")
    return x.select(key_json(df, keys).alias("key"), value.alias("value"))


def decode(df: DataFrame, schema) -> DataFrame:
    schema = as_schema(df.sparkSession, schema)
    wire = wire_schema(schema)
    env = StructType([StructField("data", ArrayType(wire)), StructField("old", ArrayType(wire)),
                      StructField("type", StringType()), StructField("database", StringType()),
                      StructField("table", StringType()), StructField("es", LongType()),
                      StructField("pkNames", ArrayType(StringType())),
                      StructField("seq", StringType()), StructField("seq_before", StringType())])
    present = StructType([StructField("old", ArrayType(MapType(StringType(), StringType())))])
    keep = [c for c in df.columns if c not in ("key", "value") and c not in schema.names]
    text = F.col("value").cast("string")
    x = (df.filter(F.col("value").isNotNull())
           .withColumn("__e", F.from_json(text, env, READ_OPTIONS))
           .withColumn("__p", F.from_json(text, present))
           .select("*", F.posexplode("__e.data").alias("__i", "__data")))
    old = F.col("__e.old")[F.col("__i")]
    has = F.col("__p.old")[F.col("__i")]
    before = F.struct(*[
        F.when(F.coalesce(F.map_contains_key(has, f.name), F.lit(False)), old[f.name])
         .otherwise(F.col(f"__data.`{f.name}`")).alias(f.name) for f in wire.fields])
    rec = lambda kind, row, seq: F.struct(F.lit(kind).alias("kind"), row.alias("row"),
                                          seq.alias("seq"))
    t, e = F.col("__e.type"), F.col("__e")
    rekeyed = F.coalesce(F.exists(e.pkNames, lambda k: F.coalesce(F.map_contains_key(has, k),
                                                                  F.lit(False))), F.lit(False))
    recs = (F.when(t == "INSERT", F.array(rec("insert", F.col("__data"), e.seq)))
             .when((t == "UPDATE") & rekeyed,
                   F.array(rec("delete", before, e.seq_before),
                           rec("insert", F.col("__data"), e.seq)))
             .when(t == "UPDATE", F.array(rec("update_preimage", before, e.seq_before),
                                          rec("update_postimage", F.col("__data"), e.seq)))
             .when(t == "DELETE", F.array(rec("delete", F.col("__data"), e.seq))))
    x = x.withColumn("__r", F.explode(recs))
    return x.select(*from_wire("__r.row", schema), F.col("__r.kind").alias("_change_type"),
                    e.database.alias("_database"), e.table.alias("_table"),
                    F.timestamp_millis(e.es).alias("_op_ts"),
                    F.col("__r.seq").cast("decimal(38,0)").alias("_seq"), *keep)
