"""``debezium-json``: Debezium's change event envelope.

    {"before": {...} | null, "after": {...} | null,
     "source": {"version", "connector": "mysql", "name", "ts_ms", "snapshot", "db", "table",
                "seq", "seq_before"},
     "op": "r" | "c" | "u" | "d", "ts_ms": ...}

Snapshot rows (``insert`` with a null ``_op_ts``) are ``r``; an ``update_preimage`` and its
``update_postimage`` become one ``u`` event with ``before`` and ``after``. ``source.seq``
(and ``seq_before`` for updates) carry ``_seq`` as text, so a decoder restores apply order.
The message key is the JSON of the key columns, as Debezium keys its messages.
"""

from __future__ import annotations

from collections.abc import Sequence

from pyspark.sql import DataFrame, Window
from pyspark.sql import functions as F
from pyspark.sql.types import LongType, StringType, StructField, StructType

from sparkcdc import __version__
from sparkcdc.core.records import META_COLUMNS
from sparkcdc.formats.values import (
    READ_OPTIONS,
    as_schema,
    from_wire,
    row_struct,
    to_json,
    tombstoned,
    wire_schema,
)

META = META_COLUMNS


def data_schema(df: DataFrame) -> StructType:
    return StructType([f for f in df.schema.fields if f.name not in META])


def key_json(df: DataFrame, keys: Sequence[str]):
    schema = StructType([df.schema[k] for k in keys])
    return to_json(row_struct(schema))


def paired(df: DataFrame, keys: Sequence[str], *, pairs: bool = True) -> DataFrame:
    """Change rows without pre-images; each post-image carries its pre-image (``__prev_*``).

    ``pairs=False`` is for a caller that knows the rows hold no ``update_preimage`` (a
    snapshot's batch, inserts and deletes only): the same rows and columns, every
    ``__prev_*`` null, without the window over the key that pairs images (a shuffle and a
    sort, a large share of encoding such a batch), and in the input's order."""
    if not pairs:
        x = df.withColumn("__row", row_struct(data_schema(df)))
        return (x.withColumn("__prev_type", F.lit(None).cast("string"))
                 .withColumn("__prev_row", F.when(F.lit(False), F.col("__row")))
                 .withColumn("__prev_seq", F.lit(None).cast(df.schema["_seq"].dataType)))
    w = Window.partitionBy(*[F.col(f"`{k}`") for k in keys]).orderBy("_seq")
    x = (df.withColumn("__row", row_struct(data_schema(df)))
           .withColumn("__prev_type", F.lag("_change_type").over(w))
           .withColumn("__prev_row", F.lag("__row").over(w))
           .withColumn("__prev_seq", F.lag("_seq").over(w)))
    pre = (F.col("_change_type") == "update_postimage") & (F.col("__prev_type") == "update_preimage")
    return (x.filter(F.col("_change_type") != "update_preimage")
             .withColumn("__prev_row", F.when(pre, F.col("__prev_row")))
             .withColumn("__prev_seq", F.when(pre, F.col("__prev_seq"))))


def encode(df: DataFrame, keys: Sequence[str], *, name: str = "sparkcdc",
           tombstones: bool = False, pairs: bool = True) -> DataFrame:
    """Change rows -> ``key``, ``value`` (JSON text), ready for Spark's Kafka sink.
    ``pairs=False``: the rows hold no pre-image to pair (``paired``)."""
    x = paired(df, keys, pairs=pairs)
    ct = F.col("_change_type")
    op = (F.when((ct == "insert") & F.col("_op_ts").isNull(), F.lit("r"))
           .when(ct == "insert", F.lit("c")).when(ct == "delete", F.lit("d")).otherwise(F.lit("u")))
    x = x.withColumn("__op", op)
    ts_ms = F.floor(F.unix_micros("_op_ts") / 1000).cast("long")
    source = F.struct(
        F.lit(__version__).alias("version"), F.lit("mysql").alias("connector"),
        F.lit(name).alias("name"), ts_ms.alias("ts_ms"),
        F.when(F.col("__op") == "r", F.lit("true")).otherwise(F.lit("false")).alias("snapshot"),
        F.col("_database").alias("db"), F.col("_table").alias("table"),
        F.col("_seq").cast("string").alias("seq"),
        F.col("__prev_seq").cast("string").alias("seq_before"))
    before = (F.when(F.col("__op") == "d", F.col("__row"))
               .when(F.col("__op") == "u", F.col("__prev_row")))
    after = F.when(F.col("__op") != "d", F.col("__row"))
    value = to_json(F.struct(before.alias("before"), after.alias("after"), source.alias("source"),
                             F.col("__op").alias("op"), ts_ms.alias("ts_ms")))
    if tombstones:  # a null value after each delete lets Kafka compaction drop the key
        value = tombstoned(value, F.col("__op") == "d")
    return x.select(key_json(df, keys).alias("key"), value.alias("value"))


def decode(df: DataFrame, schema) -> DataFrame:
    """``value`` (JSON text or bytes) -> change rows of ``schema`` (a StructType or DDL).
    Tombstones (null values) are dropped; other input columns (e.g. Kafka's ``offset``) are
    kept after the change rows' columns."""
    schema = as_schema(df.sparkSession, schema)
    wire = wire_schema(schema)
    src = StructType([StructField("db", StringType()), StructField("table", StringType()),
                      StructField("ts_ms", LongType()), StructField("seq", StringType()),
                      StructField("seq_before", StringType())])
    env = StructType([StructField("before", wire), StructField("after", wire),
                      StructField("source", src), StructField("op", StringType()),
                      StructField("ts_ms", LongType())])
    keep = [c for c in df.columns if c not in ("key", "value") and c not in schema.names]
    e = F.col("__e")
    rec = lambda kind, row, seq: F.struct(F.lit(kind).alias("kind"), row.alias("row"),
                                          seq.alias("seq"))
    recs = (F.when(e.op.isin("c", "r"), F.array(rec("insert", e.after, e.source.seq)))
             .when(e.op == "u", F.array(rec("update_preimage", e.before, e.source.seq_before),
                                        rec("update_postimage", e.after, e.source.seq)))
             .when(e.op == "d", F.array(rec("delete", e.before, e.source.seq))))
    x = (df.filter(F.col("value").isNotNull())
           .withColumn("__e", F.from_json(F.col("value").cast("string"), env, READ_OPTIONS))
           .withColumn("__r", F.explode(F.filter(recs, lambda r: r.row.isNotNull()))))
    return x.select(*from_wire("__r.row", schema),
                    F.col("__r.kind").alias("_change_type"), e.source.db.alias("_database"),
                    e.source.table.alias("_table"),
                    F.timestamp_millis(e.source.ts_ms).alias("_op_ts"),
                    F.col("__r.seq").cast("decimal(38,0)").alias("_seq"), *keep)
