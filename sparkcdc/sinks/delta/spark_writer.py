"""Spark's own Delta writer for a Delta target: delta-spark's MERGE with deletion vectors.

Where the pipeline's Spark session has Delta Lake (delta-spark built for its Spark, or
Databricks, whose runtime has Delta built in), users expect the table to be written by
Delta itself: column mapping, catalogs, the features and the history its tools read.
With ``writer: spark`` (or ``auto`` in such a session) the pipeline hands the sink each
micro-batch's changes of the table as a Spark DataFrame, reduced to one change per key in
binlog order on the executors (``pipeline/run/task_frames.py``), and Spark writes it:

* rows new to the target (a snapshot's chunks; ``__new``, when the table holds no row in
  their key range) are appended, with Delta's idempotent write options
  (``txnAppId``/``txnVersion``);
* the rest is one ``MERGE INTO`` whose clauses match on the planned ``__op``, its condition
  narrowed to the rows' key range; with ``delta.enableDeletionVectors`` on the table
  (every table it creates gets it) Delta marks the replaced rows in deletion vectors
  rather than rewriting their files. The MERGE is made idempotent by Delta's session
  settings ``spark.databricks.delta.write.txnAppId``/``txnVersion``.

Both record the batch id as the same app transaction the sink's other writers record
(``<app-id>``, and ``<app-id>#files`` for the new rows appended before the batch's other
changes), so ``last_batch_id``, replays and ``status`` read the same, and a target can
switch writer between runs. No row of the batch goes through the driver; the driver reads
only counts and key bounds (one small aggregation).
"""

from __future__ import annotations

import functools
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import pyarrow as pa

from sparkcdc.errors import ConfigError, SchemaError
from sparkcdc.sinks.base import (
    AMEND,
    CLOSE,
    DELETE,
    END_AT,
    NEW,
    OP,
    PATCH,
    START_AT,
    UPSERT,
    VERSION,
    KeyRange,
    WriteResult,
    log,
)
from sparkcdc.sinks.base import backtick as _q
from sparkcdc.sinks.delta.config import DeltaConfig, DeltaWriter
from sparkcdc.sinks.delta.files import files_app_id
from sparkcdc.sinks.delta.predicates import in_range, literal

NAME = "spark (delta-spark MERGE)"  # what ``sparkcdc status`` shows
EXTENSION = "io.delta.sql.DeltaSparkSessionExtension"
TXN_APP_ID = "spark.databricks.delta.write.txnAppId"
TXN_VERSION = "spark.databricks.delta.write.txnVersion"
DELTA_FOR_SPARK = (
    "give the pipeline's Spark session Delta Lake built for its Spark version, in the YAML's "
    "spark section: spark.jars (or spark.jars.packages) with delta-spark, "
    "spark.sql.extensions: io.delta.sql.DeltaSparkSessionExtension and "
    "spark.sql.catalog.spark_catalog: org.apache.spark.sql.delta.catalog.DeltaCatalog "
    "(delta-spark 4.4 runs on PySpark 4.0.1 to 4.2; no release runs on 4.3 yet); or set "
    "the sink's writer: sparkcdc")
# the session's settings carry one MERGE's app transaction at a time
_txn_lock = threading.Lock()


@functools.cache
def lacks_delta(spark: Any) -> str | None:
    """What the session lacks to write Delta itself, or None when it has it: Delta's SQL
    extension configured (Databricks needs none) and its classes loadable. Two lookups,
    no Spark job, once per session (both are fixed when it starts; every table's sink
    asks, a thousand of them at a run's start)."""
    conf = spark.conf
    databricks = conf.get("spark.databricks.clusterUsageTags.clusterId", None)
    if not databricks and EXTENSION not in (conf.get("spark.sql.extensions", None) or ""):
        return f"spark.sql.extensions does not name {EXTENSION}"
    jvm = getattr(spark, "_jvm", None)
    if jvm is None:  # Spark Connect: the server's classes cannot be looked up from here
        return None
    try:
        found = type(jvm.io.delta.tables.DeltaTable).__name__ == "JavaClass"
    except Exception:  # noqa: BLE001 - a gateway that cannot answer: not usable either
        found = False
    return None if found else "delta-spark's classes are not on its class path (spark.jars)"


def chosen(config: DeltaConfig, spark: Any) -> bool:
    """Whether the target is written by Spark's Delta, as its ``writer`` option says, in the
    session ``spark``; ``writer: spark`` in a session without Delta is a ``ConfigError``."""
    if config.writer is DeltaWriter.SPARKCDC:
        return False
    missing = lacks_delta(spark)
    if missing is None:
        return True
    if config.writer is DeltaWriter.SPARK:
        raise ConfigError(f"the delta sink's writer: spark needs Delta Lake in the pipeline's "
                          f"Spark session, and it has none ({missing}; target {config.path})",
                          fix=DELTA_FOR_SPARK, key="writer")
    return False


def session(sink: Any) -> Any:
    """The Spark session a sink writes with: the pipeline's, else the active one."""
    if sink.spark is not None:
        return sink.spark
    from pyspark.sql import SparkSession

    spark = SparkSession.getActiveSession()
    if spark is None:
        raise ConfigError("the delta sink's writer: spark writes with a Spark session, and "
                          "none is active", fix="create the SparkSession (with Delta Lake) "
                          "before writing, or set writer: sparkcdc", key="writer")
    return spark


def ident(path: str) -> str:
    """The table by its path in Spark's SQL."""
    return "delta.`" + path.replace("`", "``") + "`"


def _spark_literal(value: Any, t: pa.DataType) -> str | None:
    """A literal Spark's SQL reads back as ``value`` (strings: Spark escapes with
    backslashes, and two quoted strings side by side are joined, not an escaped quote)."""
    if pa.types.is_string(t) or pa.types.is_large_string(t):
        return "'" + str(value).replace("\\", "\\\\").replace("'", "\\'") + "'"
    return literal(value, t)


@contextmanager
def _spark_errors(path: str) -> Iterator[None]:
    """A delta-spark built for another Spark fails deep in the JVM (``NoSuchMethodError``
    on its first read or MERGE): one error naming the mismatch instead."""
    try:
        yield
    except Exception as e:
        text = str(e)
        if any(k in text for k in ("NoSuchMethodError", "IncompatibleClassChangeError",
                                   "NoClassDefFoundError", "AbstractMethodError")):
            raise ConfigError(f"Spark's Delta could not write {path}: the session's "
                              "delta-spark is not built for its Spark version "
                              f"({text.strip().splitlines()[0][:300]})",
                              fix=DELTA_FOR_SPARK, key="writer") from e
        raise


def ensure_table(sink: Any, spark: Any, schema: Any) -> None:
    """The table made by Spark if it is not there (``schema``: a Spark ``StructType`` of
    its columns), with its partition columns and table properties, and deletion vectors
    on when the sink's ``deletion-vectors`` is (``delta.enableDeletionVectors``: Delta's
    DELETE, UPDATE and MERGE then mark rows instead of rewriting files). A table that has
    the feature but not the property (made by sparkcdc's own writer) gets the property."""
    cfg: DeltaConfig = sink.config
    props = dict(cfg.table_properties)
    if cfg.deletion_vectors:
        props.setdefault("delta.enableDeletionVectors", "true")
    table = sink._table()
    if table is not None:
        have = table.metadata().configuration or {}
        if (cfg.deletion_vectors and has_feature(table)
                and have.get("delta.enableDeletionVectors") != "true"):
            with _spark_errors(cfg.path):
                spark.sql(f"ALTER TABLE {ident(cfg.path)} SET TBLPROPERTIES "
                          "('delta.enableDeletionVectors' = 'true')")
        return
    bad = [c for c in cfg.partition_by if c not in schema.names]
    if bad:
        raise SchemaError(f"partition columns {bad} are not target columns of {cfg.path}",
                          fix=f"partition-by takes some of: {', '.join(schema.names)}")
    cols = ", ".join(f"{_q(f.name)} {f.dataType.simpleString()}" for f in schema.fields)
    parts = (" PARTITIONED BY (" + ", ".join(_q(c) for c in cfg.partition_by) + ")"
             if cfg.partition_by else "")
    tbl = (" TBLPROPERTIES (" + ", ".join(f"{_str(k)} = {_str(v)}" for k, v in
                                          sorted(props.items())) + ")") if props else ""
    log.info("creating Delta table %s with Spark's Delta", cfg.path)
    with _spark_errors(cfg.path):
        spark.sql(f"CREATE TABLE IF NOT EXISTS {ident(cfg.path)} ({cols}) USING delta"
                  f"{parts}{tbl}")


def create(sink: Any, schema: pa.Schema) -> None:
    """The table made by Spark with the columns of ``schema`` (as the table stores them),
    before any row is written: a table whose snapshot holds no row has a target too."""
    from pyspark.sql.pandas.types import from_arrow_schema

    ensure_table(sink, session(sink), from_arrow_schema(schema, prefer_timestamp_ntz=True))


def has_feature(table: Any) -> bool:
    return "deletionVectors" in (table.protocol().reader_features or ())


def _str(s: str) -> str:
    return "'" + s.replace("\\", "\\\\").replace("'", "\\'") + "'"


def write_frame(sink: Any, frame: Any, keys: tuple[str, ...], batch_id: int,
                replaces: tuple[KeyRange, ...] = (), scd_type: int = 1) -> WriteResult:
    """One batch's planned changes of the target (``frame``: its columns, ``__op`` and,
    SCD type 1, ``__new``), written by Spark with the batch id: the new rows appended when
    the table holds none of their key range, the rest merged (module docstring). A batch
    the table has is skipped before any Spark job."""
    from pyspark.sql import functions as F

    cfg: DeltaConfig = sink.config
    last = sink.last_batch_id()
    if last is not None and batch_id <= last:
        return WriteResult(batch_id, skipped=True)
    spark = frame.sparkSession
    names = [c for c in frame.columns if c not in (OP, NEW)]
    ensure_table(sink, spark, frame.select(*names).schema)
    key = keys[0]
    is_new = (F.coalesce(F.col(NEW), F.lit(False)) if NEW in frame.columns and scd_type == 1
              else F.lit(False))
    stats = (frame.groupBy(is_new.alias("new"))
             .agg(F.count(F.lit(1)).alias("n"), F.min(key).alias("lo"),
                  F.max(key).alias("hi")).collect())
    got = {bool(r["new"]): r for r in stats}
    new, rest = got.get(True), got.get(False)
    append = (new is not None and not replaces
              and not _holds(spark, cfg.path, key, new["lo"], new["hi"]))
    counts: dict[str, int] = {}
    bounds: tuple[Any, Any] | None
    with _spark_errors(cfg.path):
        if append and new is not None:
            only = rest is None
            (frame.filter(is_new).select(*names).write.format("delta").mode("append")
             .option("txnAppId", cfg.app_id if only else files_app_id(cfg.app_id))
             .option("txnVersion", str(batch_id)).save(cfg.path))
            counts["appended"] = counts[UPSERT] = int(new["n"])
            if rest is None:
                _after(sink, spark, batch_id)
                return WriteResult(batch_id, counts=counts)
            source, bounds = frame.filter(~is_new), (rest["lo"], rest["hi"])
        elif new is None and rest is None and not replaces:  # nothing: the batch id alone
            (frame.select(*names).limit(0).write.format("delta").mode("append")
             .option("txnAppId", cfg.app_id).option("txnVersion", str(batch_id))
             .save(cfg.path))
            _after(sink, spark, batch_id)
            return WriteResult(batch_id)
        else:
            source = frame
            seen = [r for r in (new, rest) if r is not None]
            bounds = ((min(r["lo"] for r in seen), max(r["hi"] for r in seen))
                      if seen else None)
        merged = _merge(sink, spark, source, names, keys, bounds, replaces, scd_type,
                        batch_id)
    for k, v in merged.items():
        counts[k] = counts.get(k, 0) + v
    _after(sink, spark, batch_id)
    return WriteResult(batch_id, counts=counts)


def _holds(spark: Any, path: str, key: str, lo: Any, hi: Any) -> bool:
    """Whether the table holds a row whose ``key`` lies in ``[lo, hi]``. Delta skips every
    file whose statistics exclude the range, so a snapshot into a table in step with the
    source reads no file at all."""
    from pyspark.sql import functions as F

    with _spark_errors(path):
        t = spark.read.format("delta").load(path)
        return bool(t.where((F.col(key) >= F.lit(lo)) & (F.col(key) <= F.lit(hi)))
                    .select(key).limit(1).collect())


def _merge(sink: Any, spark: Any, source: Any, names: list[str], keys: tuple[str, ...],
           bounds: tuple[Any, Any] | None, replaces: tuple[KeyRange, ...], scd_type: int,
           batch_id: int) -> dict[str, int]:
    """One ``MERGE INTO`` of ``source`` with the batch id as its app transaction; the
    counts Delta reports."""
    from pyspark.sql.pandas.types import to_arrow_type

    cfg: DeltaConfig = sink.config
    types = {f.name: to_arrow_type(f.dataType) for f in source.schema.fields}
    on = " AND ".join(f"t.{_q(k)} = s.{_q(k)}" for k in keys)
    if bounds is not None and all(b is not None for b in bounds):
        lo, hi = (_spark_literal(b, types[keys[0]]) for b in bounds)
        if lo is not None and hi is not None:
            on += f" AND t.{_q(keys[0])} >= {lo} AND t.{_q(keys[0])} <= {hi}"
    op = f"s.{_q(OP)}"
    insert = (f"INSERT ({', '.join(_q(c) for c in names)}) "
              f"VALUES ({', '.join('s.' + _q(c) for c in names)})")
    if scd_type == 2:
        amend = ", ".join(f"t.{_q(c)} = s.{_q(c)}" for c in names
                          if c not in keys and c != START_AT)
        clauses = [f"WHEN MATCHED AND {op} = '{CLOSE}' THEN UPDATE SET t.{_q(END_AT)} = "
                   + f"s.{_q(END_AT)}",
                   f"WHEN MATCHED AND {op} = '{AMEND}' THEN UPDATE SET {amend}",
                   f"WHEN NOT MATCHED AND {op} = '{VERSION}' THEN {insert}"]
        on += f" AND t.{_q(END_AT)} IS NULL AND {op} IN ('{CLOSE}', '{AMEND}')"
    else:
        values = [c for c in names if c not in keys]
        clauses = [f"WHEN MATCHED AND {op} = '{DELETE}' THEN DELETE"]
        if values:
            clauses += [f"WHEN MATCHED AND {op} = '{UPSERT}' THEN UPDATE SET "
                        + ", ".join(f"t.{_q(c)} = s.{_q(c)}" for c in values),
                        f"WHEN MATCHED AND {op} = '{PATCH}' THEN UPDATE SET "
                        + ", ".join(f"t.{_q(c)} = coalesce(s.{_q(c)}, t.{_q(c)})"
                                    for c in values)]
        clauses.append(f"WHEN NOT MATCHED AND {op} <> '{DELETE}' THEN {insert}")
        if replaces:  # a chunk read again: its range holds its rows, no other
            clauses.append("WHEN NOT MATCHED BY SOURCE AND ("
                           + " OR ".join(in_range(r, types[r.column]) for r in replaces)
                           + ") THEN DELETE")
    view = f"sparkcdc_merge_{abs(hash((cfg.path, cfg.app_id))) % 10**12}_{batch_id}"
    source.createOrReplaceTempView(view)
    sql = f"MERGE INTO {ident(cfg.path)} t USING {view} s ON {on} " + " ".join(clauses)
    try:
        with _txn(spark, cfg.app_id, batch_id):
            got = spark.sql(sql).collect()
    finally:
        spark.catalog.dropTempView(view)
    metrics = got[0].asDict() if got else {}
    return {k.removeprefix("num_").removesuffix("_rows"): int(v)
            for k, v in metrics.items() if v and k != "num_affected_rows"}


@contextmanager
def _txn(spark: Any, app_id: str, batch_id: int) -> Iterator[None]:
    """Delta's idempotent DML: the next MERGE records ``(app_id, batch_id)`` in its commit,
    and is skipped by Delta itself if the table has that batch."""
    with _txn_lock:
        spark.conf.set(TXN_APP_ID, app_id)
        spark.conf.set(TXN_VERSION, str(batch_id))
        try:
            yield
        finally:
            spark.conf.unset(TXN_APP_ID)
            spark.conf.unset(TXN_VERSION)


def _after(sink: Any, spark: Any, batch_id: int) -> None:
    """Every ``compact-every`` batches (by batch id, as the other writers): Delta's
    ``OPTIMIZE``, which also rewrites the files whose deletion vectors delete much of
    them (``optimize.maxDeletedRowsRatio``)."""
    n = sink.config.compact_every
    if n and (batch_id + 1) % n == 0:
        with _spark_errors(sink.config.path):
            spark.sql(f"OPTIMIZE {ident(sink.config.path)}").collect()
        log.info("compacted %s with Spark's OPTIMIZE", sink.config.path)


def write_changes(sink: Any, table: pa.Table, keys: tuple[str, ...], batch_id: int,
                  replaces: tuple[KeyRange, ...], scd_type: int) -> WriteResult:
    """The driver's path (a batch with a schema change, ``apply_changes``): planned rows
    held in Arrow, as a DataFrame, written as ``write_frame`` writes."""
    from pyspark.sql.pandas.types import from_arrow_schema

    spark = session(sink)
    frame = spark.createDataFrame(table, schema=from_arrow_schema(
        table.schema, prefer_timestamp_ntz=True))
    return write_frame(sink, frame, keys, batch_id, replaces, scd_type)


# -- schema evolution through Spark (sinks/delta/evolution.py hands it over) ----------------

def evolve(sink: Any, changes: list[Any]) -> None:
    """``changes`` (``sinks.evolution.Change``s the table does not show yet) made by Spark:
    an added column in the table's metadata (``ALTER TABLE ... ADD COLUMNS``); a drop or
    a rename as metadata too where the table has column mapping (``name`` mode), else, as
    a retype or a copy, by rewriting the table in one overwrite commit that replaces its
    schema (the batch ids, app transactions, stay in the log)."""
    from pyspark.sql import functions as F
    from pyspark.sql.pandas.types import from_arrow_type

    spark = session(sink)
    cfg: DeltaConfig = sink.config
    table = ident(cfg.path)
    mapped = ((sink._table().metadata().configuration or {}).get("delta.columnMapping.mode")
              == "name")

    def spark_type(t: pa.DataType) -> str:  # as the table stores it: TIME as microseconds
        stored = pa.int64() if pa.types.is_duration(t) else t
        return from_arrow_type(stored, prefer_timestamp_ntz=True).simpleString()

    with _spark_errors(cfg.path):
        adds = [c for c in changes if c.kind == "add"]
        if adds:
            spark.sql(f"ALTER TABLE {table} ADD COLUMNS ("
                      + ", ".join(f"{_q(c.name)} {spark_type(c.type)}" for c in adds) + ")")
        rest = [c for c in changes if c.kind != "add"]
        if mapped and all(c.kind in ("drop", "rename") for c in rest):
            for c in rest:
                spark.sql(f"ALTER TABLE {table} DROP COLUMN {_q(c.name)}" if c.kind == "drop"
                          else f"ALTER TABLE {table} RENAME COLUMN {_q(c.name)} TO "
                               f"{_q(c.new_name)}")
            return
        if not rest:
            return
        df = spark.read.format("delta").load(cfg.path)
        for c in rest:
            if c.kind == "drop":
                df = df.drop(c.name)
            elif c.kind == "rename":
                df = df.withColumnRenamed(c.name, c.new_name)
            elif c.kind == "retype":
                df = df.withColumn(c.name, F.col(c.name).cast(spark_type(c.type)))
            elif c.kind == "copy":
                df = df.withColumn(c.new_name, F.coalesce(F.col(c.new_name),
                                                          F.col(c.name).cast(
                                                              df.schema[c.new_name].dataType)))
        (df.write.format("delta").mode("overwrite").option("overwriteSchema", "true")
         .option("userMetadata", "sparkcdc.schema-change: "
                 + "; ".join(c.describe() for c in rest)).save(cfg.path))


def empty(sink: Any) -> None:
    """Every row deleted by Spark's ``DELETE`` (deletion vectors where the table has them)."""
    with _spark_errors(sink.config.path):
        session(sink).sql(f"DELETE FROM {ident(sink.config.path)}").collect()
