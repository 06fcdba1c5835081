"""Spark's own writers against sparkcdc's driver-side writers, per sink, from one DataFrame.

    .venv/bin/python bench/writers.py [--rows 200000] [--tables 100] [--table-rows 10]
        [--rounds 3] [--writers delta,jdbc-postgres-merge,...] [--jars-dir .jars]
        [--json results.json] [--docs docs/benchmarks.md] [--no-write-docs]

Every writer gets the same cached Spark DataFrame of change rows and reduces it the same way
(``sparkcdc.apply.plan_changes``: the last change per key, a window over the key); only the
write differs:

* driver writers: the sparkcdc sinks through ``apply_changes`` (the reduced rows are
  collected to the driver as Arrow and written from Python: delta-rs, pyiceberg, psycopg
  COPY, PyMySQL multi-row INSERT);
* Spark writers: the reduced DataFrame written by Spark itself: delta-spark ``MERGE``,
  Iceberg's ``MERGE INTO`` (merge-on-read), Spark JDBC into a staging table followed by one
  upsert statement from the driver (the atomic way to apply changes over JDBC), and, as
  insert-only lower bounds, Spark's plain appends (delta-spark, JDBC);
* references: the reduction alone into Spark's ``noop`` sink, and reduced and collected to
  the driver without a write.

Workloads: *insert*, ``--rows`` new rows into an empty table; *update*, ``--rows``/2 rows
updating distinct keys of that table; *small tables*, ``--tables`` tables of
``--table-rows`` rows, one call per table: the first write (creates the table) and the next
(updates every row). Rounds are interleaved (each writer once per round), medians reported.
Every result is checked (row count and sum of ``qty``) outside the timing.

Writers are first tried on a few rows; one that fails (missing jars, a jar built for another
Spark) is reported with its error and left out. The jars come from scripts/fetch_jars.sh
(``.jars/``). A throwaway MariaDB and PostgreSQL are started here. The report goes to
docs/benchmarks.md between the ``writers`` markers.
"""

from __future__ import annotations

import argparse
import datetime as dt
import json
import os
import platform
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from decimal import Decimal
from pathlib import Path

import numpy as np
import pyarrow as pa

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "bench"))

from throughput import LOG, cpu_and_memory, load, replace_section, say

from sparkcdc import sinks
from sparkcdc.apply import ApplySpec, apply_changes, collect_changes, plan_changes
from sparkcdc.sinks.base import DELETE, OP, UPSERT
from sparkcdc.sinks.delta.sink import read_table
from sparkcdc.sinks.mysql.sink import mysql_type
from sparkcdc.sinks.postgres.sink import pg_type

BEGIN, END = "<!-- writers:begin -->", "<!-- writers:end -->"
KEYS = ("id",)
SPEC = ApplySpec(keys=KEYS)
APP_ID = "sparkcdc-bench"


def short_error(e: BaseException) -> str:
    """The line that says what went wrong: a Java exception's own line for Py4J errors."""
    lines = [ln.strip() for ln in str(e).splitlines() if ln.strip()]
    for ln in lines:
        if ln.startswith(": "):
            return ln[2:][:500]
    return f"{type(e).__name__}: {lines[0] if lines else ''}"[:500]


# -- data ------------------------------------------------------------------------------------


def change_rows(ids: np.ndarray, kind: str, seq0: int, rng, table: str) -> pa.Table:
    m = len(ids)
    return pa.table({
        "id": pa.array(ids, pa.int64()),
        "name": pa.array([f"customer-{i % 9973} ü" for i in ids], pa.string()),
        "qty": pa.array(rng.integers(0, 10_000, m), pa.int32()),
        "price": pa.array([Decimal(int(x)) / 100 for x in rng.integers(0, 10**9, m)],
                          pa.decimal128(12, 2)),
        "ts": pa.array(np.datetime64("2024-01-01") + rng.integers(0, 10**12, m)
                       .astype("timedelta64[us]"), pa.timestamp("us", tz="UTC")),
        "note": pa.array([None if i % 3 else "note " * 4 for i in ids], pa.string()),
        "_change_type": pa.array([kind] * m, pa.string()),
        "_database": pa.array(["bench"] * m, pa.string()),
        "_table": pa.array([table] * m, pa.string()),
        "_op_ts": pa.nulls(m, pa.timestamp("us", tz="UTC")),
        "_seq": pa.array([Decimal(seq0 + i) for i in range(m)], pa.decimal128(38, 0)),
    })


class Workload:
    """An insert batch of new keys and an update batch of some of them, as Arrow and as
    cached Spark DataFrames, with the (row count, sum of qty) each leaves in the target."""

    def __init__(self, spark, rows: int, updates: int, seed: int, table: str):
        rng = np.random.default_rng(seed)
        ids = np.arange(1, rows + 1, dtype=np.int64)
        self.insert = change_rows(ids, "insert", 1, rng, table)
        upd = np.sort(rng.choice(ids, size=updates, replace=False))
        self.update = change_rows(upd, "update_postimage", 10 * rows + 1, rng, table)
        qty = self.insert["qty"].to_numpy().astype(np.int64)
        before = int(qty.sum())
        changed = before - int(qty[upd - 1].sum()) + int(
            self.update["qty"].to_numpy().astype(np.int64).sum())
        self.after_insert = (rows, before)
        self.after_update = (rows, changed)
        self.insert_df = spark.createDataFrame(self.insert).persist()
        self.update_df = spark.createDataFrame(self.update).persist()
        self.insert_df.count()
        self.update_df.count()

    @property
    def target_schema(self) -> pa.Schema:
        names = [n for n in self.insert.column_names if not n.startswith("_")]
        return pa.schema([self.insert.schema.field(n) for n in names])


# -- Spark bookkeeping -------------------------------------------------------------------------


class Tracker:
    """Spark jobs and tasks of one call, through job groups and the status tracker."""

    def __init__(self, spark):
        self.sc = spark.sparkContext
        self.status = self.sc.statusTracker()
        self.n = 0
        self.current = "bench-setup"

    def begin(self) -> str:
        self.n += 1
        self.current = f"bench-{self.n}"
        self.sc.setJobGroup(self.current, self.current)
        return self.current

    def sub(self, suffix: str) -> None:
        self.sc.setJobGroup(f"{self.current}/{suffix}", suffix)

    def back(self) -> None:
        self.sc.setJobGroup(self.current, self.current)

    def jobs(self, group: str) -> tuple[int, int]:
        """(jobs, completed tasks) of a job group."""
        stages = self.stages(group)
        return len({j for j, _, _, _ in stages}), sum(t for _, _, _, t in stages)

    def stages(self, group: str) -> list[tuple[int, int, str, int]]:
        """(job, stage, name, completed tasks) of every stage a job group ran."""
        out = []
        for j in sorted(self.status.getJobIdsForGroup(group)):
            info = self.status.getJobInfo(j)
            for s in sorted(info.stageIds if info else []):
                si = self.status.getStageInfo(s)
                if si is not None and si.numCompletedTasks:
                    out.append((j, s, si.name, si.numCompletedTasks))
        return out

    def idle(self) -> None:
        self.current = "bench-setup"
        self.sc.setJobGroup(self.current, self.current)


# -- writers ---------------------------------------------------------------------------------


def _q_pg(name: str) -> str:
    return '"' + name.replace('"', '""') + '"'


def _q_my(name: str) -> str:
    return "`" + name.replace("`", "``") + "`"


class Writer:
    """One way of writing a batch of change rows. ``write`` is the timed call; ``driver_s``
    is the part of it spent writing on the driver outside Spark jobs (None: not separable)."""

    key = ""
    label = ""
    where = ""
    family = "driver"
    jar_groups: tuple[str, ...] = ()
    insert_only = False
    servers: tuple[str, ...] = ()

    def __init__(self, bench: Bench):
        self.b = bench
        self.driver_s: float | None = None

    def prepare(self) -> None:
        pass

    def open(self, name: str):
        return name

    def write(self, handle, df, batch_id: int) -> None:
        raise NotImplementedError

    def check(self, handle) -> tuple[int, int] | None:
        return None

    def close(self, handle) -> None:
        pass

    def shutdown(self) -> None:
        pass


class SinkWriter(Writer):
    """A sparkcdc sink through ``apply_changes``; the sink's write is timed on its own and
    run under its own job group, so any Spark job it started would show."""

    family = "driver"
    where = "the driver (Python), after the reduced rows are collected as Arrow"

    def __init__(self, bench, sink_type: str, label: str, servers=()):
        super().__init__(bench)
        self.sink_type = sink_type
        self.key = sink_type
        self.label = label
        self.servers = servers
        self.write_jobs = 0

    def options(self, name: str) -> dict:
        b = self.b
        if self.sink_type == "delta":
            return {"type": "delta", "path": str(b.tmp / "delta-rs" / name)}
        if self.sink_type == "iceberg":
            return {"type": "iceberg", "warehouse": str(b.tmp / "pyiceberg"),
                    "table": f"bench.{name}"}
        if self.sink_type == "postgres":
            return {"type": "postgres", **b.pg.info.sink_options(name), "schema": "sink"}
        i = b.maria.info
        return {"type": "mysql", "hostname": i.host, "port": str(i.port),
                "username": i.admin_user, "password": i.admin_password,
                "database": "bench_sink", "table": name}

    def open(self, name: str):
        sink = sinks.create(self.options(name))
        orig = sink.write
        tracker = self.b.tracker

        def timed(changes, batch_id, _orig=orig):
            tracker.sub("write")
            t0 = time.perf_counter()
            try:
                return _orig(changes, batch_id)
            finally:
                self.driver_s += time.perf_counter() - t0
                tracker.back()
        sink.write = timed
        sink.bench_name = name
        return sink

    def write(self, sink, df, batch_id: int) -> None:
        self.driver_s = 0.0
        group = self.b.tracker.current
        apply_changes(df, batch_id, sink, keys=list(KEYS))
        self.write_jobs += self.b.tracker.jobs(f"{group}/write")[0]

    def check(self, sink):
        name = sink.bench_name
        if self.sink_type == "delta":
            from deltalake import DeltaTable

            t = read_table(DeltaTable(str(self.b.tmp / "delta-rs" / name))).select(["qty"])
            return t.num_rows, _sum(t["qty"])
        if self.sink_type == "iceberg":
            t = sink.read()
            return t.num_rows, _sum(t["qty"])
        if self.sink_type == "postgres":
            return self.b.pg_count("sink", name)
        return self.b.maria_count("bench_sink", name)

    def close(self, sink) -> None:
        sink.close()


def _sum(col) -> int:
    import pyarrow.compute as pc

    return int(pc.sum(col).as_py() or 0)


class SparkWriter(Writer):
    family = "spark"

    def planned(self, df):
        return plan_changes(df, SPEC)

    def cols(self) -> list[str]:
        return self.b.target_schema.names

    def spark_ddl(self) -> str:
        from pyspark.sql.pandas.types import from_arrow_type

        return ", ".join(f"`{f.name}` {from_arrow_type(f.type).simpleString()}"
                         + (" NOT NULL" if f.name in KEYS else "")
                         for f in self.b.target_schema)

    def merge_sql(self, target: str, view: str) -> str:
        cols = self.cols()
        on = " AND ".join(f"t.`{k}` = s.`{k}`" for k in KEYS)
        sets = ", ".join(f"t.`{c}` = s.`{c}`" for c in cols if c not in KEYS)
        return (f"MERGE INTO {target} t USING {view} s ON {on} "
                f"WHEN MATCHED AND s.`{OP}` = '{DELETE}' THEN DELETE "
                f"WHEN MATCHED AND s.`{OP}` = '{UPSERT}' THEN UPDATE SET {sets} "
                f"WHEN NOT MATCHED AND s.`{OP}` = '{UPSERT}' THEN INSERT "
                f"({', '.join(f'`{c}`' for c in cols)}) "
                f"VALUES ({', '.join(f's.`{c}`' for c in cols)})")


class DeltaSparkMerge(SparkWriter):
    key = "delta-spark-merge"
    label = "delta-spark MERGE"
    where = "executor tasks (MERGE), the commit on the driver"
    jar_groups = ("delta",)

    def open(self, name):
        return self.b.tmp / self.key / name

    def write(self, path, df, batch_id):
        spark = self.b.spark
        self.driver_s = None
        if not (path / "_delta_log").exists():
            spark.sql(f"CREATE TABLE IF NOT EXISTS delta.`{path}` ({self.spark_ddl()}) "
                      "USING delta")
        view = f"bench_src_{self.b.tracker.n}"
        self.planned(df).createOrReplaceTempView(view)
        # the batch id in the commit, as Spark's Delta writer records it (idempotent writes)
        spark.conf.set("spark.databricks.delta.write.txnAppId", APP_ID)
        spark.conf.set("spark.databricks.delta.write.txnVersion", str(batch_id))
        try:
            spark.sql(self.merge_sql(f"delta.`{path}`", view))
        finally:
            spark.conf.unset("spark.databricks.delta.write.txnAppId")
            spark.conf.unset("spark.databricks.delta.write.txnVersion")
            spark.catalog.dropTempView(view)

    def check(self, path):
        from deltalake import DeltaTable

        t = read_table(DeltaTable(str(path))).select(["qty"])
        return t.num_rows, _sum(t["qty"])


class DeltaSparkAppend(DeltaSparkMerge):
    key = "delta-spark-append"
    label = "delta-spark blind append (insert only, no batch id)"
    where = "executor tasks (Parquet files), the commit on the driver"
    insert_only = True

    def write(self, path, df, batch_id):
        from pyspark.sql import functions as F

        self.driver_s = None
        (self.planned(df).filter(F.col(OP) == UPSERT).select(*self.cols())
         .write.format("delta").mode("append").save(str(path)))


class IcebergSparkMerge(SparkWriter):
    key = "iceberg-spark-merge"
    label = "Iceberg Spark runtime MERGE INTO (merge-on-read)"
    where = "executor tasks (MERGE, position deletes), the commit on the driver"
    jar_groups = ("iceberg",)

    def prepare(self):
        self.b.spark.sql("CREATE NAMESPACE IF NOT EXISTS ice.bench")

    def open(self, name):
        return f"ice.bench.{name}"

    def write(self, table, df, batch_id):
        spark = self.b.spark
        self.driver_s = None
        spark.sql(f"CREATE TABLE IF NOT EXISTS {table} ({self.spark_ddl()}) USING iceberg "
                  "TBLPROPERTIES ('format-version'='2', 'write.merge.mode'='merge-on-read', "
                  "'write.update.mode'='merge-on-read', 'write.delete.mode'='merge-on-read')")
        view = f"bench_src_{self.b.tracker.n}"
        self.planned(df).createOrReplaceTempView(view)
        try:
            spark.sql(self.merge_sql(table, view))
        finally:
            spark.catalog.dropTempView(view)

    def check(self, table):
        from pyspark.sql import functions as F

        r = self.b.spark.table(table).agg(F.count("*"), F.sum("qty")).collect()[0]
        return int(r[0]), int(r[1] or 0)


class JdbcMerge(SparkWriter):
    """Spark JDBC into a staging table (executor tasks, batched INSERTs), then one
    transaction from the driver: lock the batch-id row, DELETE the deleted keys, upsert the
    rest from the staging table, record the batch id. Spark's JDBC writer commits each
    partition on its own, so writing the target directly would not be atomic."""

    jar_groups = ("jdbc",)
    append = False

    def __init__(self, bench, dialect: str):
        super().__init__(bench)
        self.dialect = dialect
        mode = "append" if self.append else "merge"
        self.key = f"jdbc-{'postgres' if dialect == 'postgres' else 'mariadb'}-{mode}"
        self.servers = ("postgres",) if dialect == "postgres" else ("mariadb",)
        db = "PostgreSQL" if dialect == "postgres" else "MariaDB"
        self.label = (f"Spark JDBC ({db}) plain append (insert only, not atomic)" if self.append
                      else f"Spark JDBC ({db}) → staging table, one upsert from the driver")
        self.where = ("executor tasks (batched INSERTs)" if self.append else
                      "executor tasks (batched INSERTs into staging), then one statement on "
                      "the driver")
        self.space = "jdbc_append" if self.append else "jdbc"
        self.conn = None

    # connections on the driver for DDL and the upsert
    def prepare(self):
        b = self.b
        if self.dialect == "postgres":
            import psycopg

            i = b.pg.info
            self.conn = psycopg.connect(host=i.host, port=i.port, user=i.user,
                                        password=i.password, dbname=i.database,
                                        options="-c TimeZone=UTC")
            with self.conn.transaction():
                self.conn.execute(f"CREATE SCHEMA IF NOT EXISTS {self.space}")
                self.conn.execute(f"CREATE TABLE IF NOT EXISTS {self.space}._bench_batches "
                                  "(app_id text NOT NULL, target text NOT NULL, batch_id bigint "
                                  "NOT NULL, PRIMARY KEY (app_id, target))")
            self.url = (f"jdbc:postgresql://{i.host}:{i.port}/{i.database}"
                        "?reWriteBatchedInserts=true")
            self.driver_class, self.user, self.password = "org.postgresql.Driver", i.user, i.password
        else:
            import pymysql

            i = b.maria.info
            self.conn = pymysql.connect(host=i.host, port=i.port, user=i.admin_user,
                                        password=i.admin_password, charset="utf8mb4",
                                        autocommit=False, init_command="SET time_zone = '+00:00'")
            with self.conn.cursor() as cur:
                cur.execute(f"CREATE DATABASE IF NOT EXISTS {self.space}")
            # a multi-table DELETE with aliases needs a default database
            self.conn.select_db(self.space)
            with self.conn.cursor() as cur:
                cur.execute(f"CREATE TABLE IF NOT EXISTS {self.space}._bench_batches "
                            "(app_id VARCHAR(255) NOT NULL, target VARCHAR(255) NOT NULL, "
                            "batch_id BIGINT NOT NULL, PRIMARY KEY (app_id, target)) "
                            "ENGINE=InnoDB")
            self.conn.commit()
            # Spark picks its MySQL dialect by the URL's scheme; the MariaDB driver takes
            # jdbc:mysql: with permitMysqlScheme
            self.url = f"jdbc:mysql://{i.host}:{i.port}/{self.space}?permitMysqlScheme"
            self.driver_class = "org.mariadb.jdbc.Driver"
            self.user, self.password = i.admin_user, i.admin_password

    def shutdown(self):
        if self.conn is not None:
            self.conn.close()

    def _ddl(self, name: str) -> list[str]:
        schema = self.b.target_schema
        if self.dialect == "postgres":
            cols = ", ".join(f"{_q_pg(f.name)} {pg_type(f.type)}" for f in schema)
            stage = f"{self.space}.{_q_pg(name + '__stage')}"
            out = [(f"CREATE TABLE IF NOT EXISTS {self.space}.{_q_pg(name)} ({cols}, "
                    f"PRIMARY KEY ({', '.join(map(_q_pg, KEYS))}))")]
            if not self.append:
                out += [f"CREATE UNLOGGED TABLE IF NOT EXISTS {stage} ({cols}, {_q_pg(OP)} text)",
                        f"TRUNCATE {stage}"]
            return out
        cols = ", ".join(f"{_q_my(f.name)} {mysql_type(f.type, f.name in KEYS)}"
                         + (" NOT NULL" if f.name in KEYS else "") for f in schema)
        tail = " ENGINE=InnoDB DEFAULT CHARSET=utf8mb4 COLLATE=utf8mb4_bin"
        stage = f"{self.space}.{_q_my(name + '__stage')}"
        out = [(f"CREATE TABLE IF NOT EXISTS {self.space}.{_q_my(name)} ({cols}, PRIMARY KEY "
                f"({', '.join(map(_q_my, KEYS))})){tail}")]
        if not self.append:
            out += [f"CREATE TABLE IF NOT EXISTS {stage} ({cols}, {_q_my(OP)} VARCHAR(16)){tail}",
                    f"TRUNCATE TABLE {stage}"]
        return out

    def _run(self, statements: list[str]) -> None:
        if self.dialect == "postgres":
            with self.conn.transaction():
                for s in statements:
                    self.conn.execute(s)
        else:
            with self.conn.cursor() as cur:
                for s in statements:
                    cur.execute(s)
            self.conn.commit()

    def _last_batch(self, name: str) -> int | None:
        sql = (f"SELECT batch_id FROM {self.space}._bench_batches WHERE app_id = %s AND "
               "target = %s")
        if self.dialect == "postgres":
            with self.conn.transaction():
                row = self.conn.execute(sql, (APP_ID, name)).fetchone()
        else:
            with self.conn.cursor() as cur:
                cur.execute(sql, (APP_ID, name))
                row = cur.fetchone()
            self.conn.commit()
        return None if row is None else row[0]

    def _spark_write(self, df, table: str) -> None:
        (df.write.format("jdbc").option("url", self.url).option("driver", self.driver_class)
         .option("dbtable", table).option("user", self.user).option("password", self.password)
         .option("batchsize", "10000").mode("append").save())

    def _upsert(self, name: str, batch_id: int) -> None:
        cols = self.cols()
        values = [c for c in cols if c not in KEYS]
        if self.dialect == "postgres":
            t, s = f"{self.space}.{_q_pg(name)}", f"{self.space}.{_q_pg(name + '__stage')}"
            on = " AND ".join(f"t.{_q_pg(k)} = s.{_q_pg(k)}" for k in KEYS)
            col_list = ", ".join(map(_q_pg, cols))
            with self.conn.transaction():
                c = self.conn
                c.execute(f"INSERT INTO {self.space}._bench_batches VALUES (%s, %s, -1) "
                          "ON CONFLICT DO NOTHING", (APP_ID, name))
                last = c.execute(f"SELECT batch_id FROM {self.space}._bench_batches WHERE "
                                 "app_id = %s AND target = %s FOR UPDATE",
                                 (APP_ID, name)).fetchone()[0]
                if batch_id <= last:
                    return
                c.execute(f"DELETE FROM {t} t USING {s} s WHERE {on} AND s.{_q_pg(OP)} = "
                          f"'{DELETE}'")
                c.execute(f"INSERT INTO {t} AS t ({col_list}) SELECT {col_list} FROM {s} "
                          f"WHERE {_q_pg(OP)} = '{UPSERT}' ON CONFLICT "
                          f"({', '.join(map(_q_pg, KEYS))}) DO UPDATE SET "
                          + ", ".join(f"{_q_pg(v)} = EXCLUDED.{_q_pg(v)}" for v in values))
                c.execute(f"UPDATE {self.space}._bench_batches SET batch_id = %s WHERE "
                          "app_id = %s AND target = %s", (batch_id, APP_ID, name))
            return
        t, s = f"{self.space}.{_q_my(name)}", f"{self.space}.{_q_my(name + '__stage')}"
        on = " AND ".join(f"t.{_q_my(k)} = s.{_q_my(k)}" for k in KEYS)
        col_list = ", ".join(map(_q_my, cols))
        try:
            with self.conn.cursor() as cur:
                self.conn.begin()
                cur.execute(f"INSERT IGNORE INTO {self.space}._bench_batches VALUES (%s, %s, -1)",
                            (APP_ID, name))
                cur.execute(f"SELECT batch_id FROM {self.space}._bench_batches WHERE app_id = %s "
                            "AND target = %s FOR UPDATE", (APP_ID, name))
                if batch_id <= cur.fetchone()[0]:
                    self.conn.rollback()
                    return
                cur.execute(f"DELETE t FROM {t} t JOIN {s} s ON {on} WHERE s.{_q_my(OP)} = "
                            f"'{DELETE}'")
                cur.execute(f"INSERT INTO {t} ({col_list}) SELECT {col_list} FROM {s} "
                            f"WHERE {_q_my(OP)} = '{UPSERT}' ON DUPLICATE KEY UPDATE "
                            + ", ".join(f"{_q_my(v)} = VALUES({_q_my(v)})" for v in values))
                cur.execute(f"UPDATE {self.space}._bench_batches SET batch_id = %s WHERE "
                            "app_id = %s AND target = %s", (batch_id, APP_ID, name))
            self.conn.commit()
        except BaseException:
            self.conn.rollback()
            raise

    def write(self, name, df, batch_id):
        from pyspark.sql import functions as F

        self.driver_s = 0.0
        t0 = time.perf_counter()
        if not self.append:
            last = self._last_batch(name)  # as apply_changes: skip a batch already applied
            if last is not None and batch_id <= last:
                self.driver_s += time.perf_counter() - t0
                return
        self._run(self._ddl(name))
        self.driver_s += time.perf_counter() - t0
        planned = self.planned(df)
        if self.append:
            self._spark_write(planned.filter(F.col(OP) == UPSERT).select(*self.cols()),
                              f"{self.space}.{name}")
            return
        self._spark_write(planned.filter(F.col(OP).isin(UPSERT, DELETE))
                          .select(*self.cols(), OP), f"{self.space}.{name}__stage")
        t1 = time.perf_counter()
        self._upsert(name, batch_id)
        self.driver_s += time.perf_counter() - t1

    def check(self, name):
        if self.dialect == "postgres":
            return self.b.pg_count(self.space, name)
        return self.b.maria_count(self.space, name)


class JdbcAppend(JdbcMerge):
    append = True
    insert_only = True


class ReduceNoop(SparkWriter):
    key = "reduce-noop"
    label = "reference: reduction only, into Spark's noop sink"
    where = "nobody (noop)"

    def write(self, name, df, batch_id):
        self.driver_s = None
        self.planned(df).write.format("noop").mode("overwrite").save()


class ReduceCollect(SparkWriter):
    key = "reduce-collect"
    label = "reference: reduction collected to the driver as Arrow, no write"
    where = "nobody (collected)"
    family = "driver"

    def write(self, name, df, batch_id):
        self.driver_s = None
        collect_changes(df, SPEC)


def all_writers(b: Bench) -> list[Writer]:
    return [
        SinkWriter(b, "delta", "sparkcdc delta sink (delta-rs)"),
        DeltaSparkMerge(b),
        DeltaSparkAppend(b),
        SinkWriter(b, "iceberg", "sparkcdc iceberg sink (pyiceberg)"),
        IcebergSparkMerge(b),
        SinkWriter(b, "postgres", "sparkcdc postgres sink (psycopg COPY)", ("postgres",)),
        JdbcMerge(b, "postgres"),
        JdbcAppend(b, "postgres"),
        SinkWriter(b, "mysql", "sparkcdc mysql sink on MariaDB (PyMySQL multi-row INSERT)",
                   ("mariadb",)),
        JdbcMerge(b, "mariadb"),
        JdbcAppend(b, "mariadb"),
        ReduceNoop(b),
        ReduceCollect(b),
    ]


# -- the bench -------------------------------------------------------------------------------


class Bench:
    def __init__(self, args):
        self.args = args
        self.tmp = Path(tempfile.mkdtemp(prefix="sparkcdc-bench-writers-"))
        self.jars_dir = Path(args.jars_dir)
        self.pg = self.maria = None
        self.spark = None
        self.writers = all_writers(self)
        if args.writers:
            wanted = [w.strip() for w in args.writers.split(",") if w.strip()]
            unknown = sorted(set(wanted) - {w.key for w in self.writers})
            if unknown:
                raise SystemExit(f"unknown writers {unknown}; known: "
                                 + ", ".join(w.key for w in self.writers))
            self.writers = [w for w in self.writers if w.key in wanted]
        self.failed: dict[str, str] = {}
        self.results: dict = {}

    def jars(self, group: str) -> list[Path]:
        return sorted((self.jars_dir / group).glob("*.jar"))

    def start(self) -> None:
        needed = {g for w in self.writers for g in w.jar_groups}
        for w in list(self.writers):
            missing = [g for g in w.jar_groups if not self.jars(g)]
            if missing:
                self.failed[w.key] = (f"no jars in {self.jars_dir}/{missing[0]} "
                                      "(run scripts/fetch_jars.sh)")
        jars = [str(j) for g in sorted(needed) for j in self.jars(g)]
        os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
        from pyspark.sql import SparkSession

        b = (SparkSession.builder.master("local[2]").appName("sparkcdc-bench-writers")
             .config("spark.ui.enabled", "false").config("spark.sql.shuffle.partitions", "2")
             .config("spark.sql.session.timeZone", "UTC").config("spark.driver.memory", "4g")
             .config("spark.driver.extraJavaOptions", "-Duser.timezone=UTC")
             .config("spark.sql.execution.arrow.pyspark.enabled", "true")
             .config("spark.ui.showConsoleProgress", "false"))
        for kv in self.args.spark_conf:
            k, _, v = kv.partition("=")
            b = b.config(k.strip(), v.strip())
        if jars:
            b = b.config("spark.jars", ",".join(jars))
        ext = []
        if "delta" in needed and self.jars("delta"):
            ext.append("io.delta.sql.DeltaSparkSessionExtension")
            b = b.config("spark.sql.catalog.spark_catalog",
                         "org.apache.spark.sql.delta.catalog.DeltaCatalog")
        if "iceberg" in needed and self.jars("iceberg"):
            ext.append("org.apache.iceberg.spark.extensions.IcebergSparkSessionExtensions")
            b = (b.config("spark.sql.catalog.ice", "org.apache.iceberg.spark.SparkCatalog")
                 .config("spark.sql.catalog.ice.type", "hadoop")
                 .config("spark.sql.catalog.ice.warehouse", str(self.tmp / "iceberg-spark")))
        if ext:
            b = b.config("spark.sql.extensions", ",".join(ext))
        self.spark = b.getOrCreate()
        self.spark.sparkContext.setLogLevel("ERROR")
        self.tracker = Tracker(self.spark)
        self.tracker.idle()
        self.jar_names = {g: [j.name for j in self.jars(g)] for g in sorted(needed)}

        servers = {s for w in self.writers for s in w.servers}
        if "postgres" in servers:
            from sparkcdc.testing.postgres import PostgresSandbox

            self.pg = PostgresSandbox()
            self.pg.start()
            import psycopg

            i = self.pg.info
            self.pg_conn = psycopg.connect(host=i.host, port=i.port, user=i.user,
                                           password=i.password, dbname=i.database,
                                           autocommit=True)
            say(f"sandbox PostgreSQL on port {i.port}")
        if "mariadb" in servers:
            from sparkcdc.testing.mariadb import MariaDBSandbox

            self.maria = MariaDBSandbox(name="bench-writers", base_dir=self.tmp)
            self.maria.start()
            say(f"sandbox MariaDB on port {self.maria.info.port}")

        a = self.args
        self.big = Workload(self.spark, a.rows, max(1, a.rows // 2), seed=1, table="orders")
        self.small = Workload(self.spark, a.table_rows, a.table_rows, seed=2, table="small")
        self.target_schema = self.big.target_schema

    def stop(self) -> None:
        for w in self.writers:
            try:
                w.shutdown()
            except Exception as e:  # noqa: BLE001 - cleanup goes on
                say(f"shutting down {w.key}: {short_error(e)}")
        if self.spark is not None:
            self.spark.stop()
        if self.pg is not None:
            self.pg_conn.close()
            self.pg.stop()
        if self.maria is not None:
            self.maria.stop()
        shutil.rmtree(self.tmp, ignore_errors=True)

    # checks outside the timing
    def pg_count(self, schema: str, table: str) -> tuple[int, int]:
        r = self.pg_conn.execute(f"SELECT count(*), coalesce(sum(qty), 0) FROM "
                                 f"{_q_pg(schema)}.{_q_pg(table)}").fetchone()
        return int(r[0]), int(r[1])

    def maria_count(self, db: str, table: str) -> tuple[int, int]:
        r = self.maria.query(f"SELECT count(*), coalesce(sum(qty), 0) FROM "
                             f"{_q_my(db)}.{_q_my(table)}")[0]
        return int(r[0]), int(r[1])

    def call(self, w: Writer, handle, df, batch_id: int) -> dict:
        group = self.tracker.begin()
        t0 = time.perf_counter()
        try:
            w.write(handle, df, batch_id)
        finally:
            secs = time.perf_counter() - t0
            self.tracker.idle()
        stages = self.tracker.stages(group)
        return {"s": secs, "driver_s": w.driver_s, "jobs": len({x[0] for x in stages}),
                "tasks": sum(x[3] for x in stages),
                "stages": ", ".join(f"{_stage(name)} {tasks}" for _, _, name, tasks in stages)}

    @staticmethod
    def expect(w: Writer, handle, want: tuple[int, int], what: str) -> None:
        got = w.check(handle)
        if got is not None and tuple(got) != tuple(want):
            raise AssertionError(f"{what}: the target holds (rows, sum of qty) = {got}, "
                                 f"expected {want}")

    # -- the probe: every writer once on a few rows ------------------------------------------

    def probe(self) -> None:
        s = self.small
        for w in list(self.writers):
            if w.key in self.failed:
                say(f"probe {w.key}: not run: {self.failed[w.key]}")
                continue
            t0 = time.perf_counter()
            try:
                w.prepare()
                h = w.open("probe")
                self.call(w, h, s.insert_df, 0)
                self.expect(w, h, s.after_insert, "probe insert")
                if not w.insert_only:
                    self.call(w, h, s.update_df, 1)
                    self.expect(w, h, s.after_update, "probe update")
                w.close(h)
            except Exception as e:  # noqa: BLE001 - a writer that fails is reported
                self.failed[w.key] = short_error(e)
                say(f"probe {w.key}: FAILED {self.failed[w.key]}")
                continue
            say(f"probe {w.key}: ok in {time.perf_counter() - t0:.1f} s")

    # -- rounds ------------------------------------------------------------------------------

    def rounds(self) -> None:
        a, big, small = self.args, self.big, self.small
        live = [w for w in self.writers if w.key not in self.failed]
        res = {w.key: {"insert": [], "update": [], "first": [], "next": []} for w in live}
        for r in range(a.rounds):
            for w in live:
                out = res[w.key]
                before = load()
                h = None
                try:
                    h = w.open(f"r{r}_big")
                    c = self.call(w, h, big.insert_df, 0)
                    self.expect(w, h, big.after_insert, "insert")
                    out["insert"].append({**c, "load": before})
                    say(f"{w.key} round {r + 1} insert: {big.insert.num_rows:,} rows in "
                        f"{c['s']:.2f} s = {big.insert.num_rows / c['s']:,.0f}/s "
                        f"(driver write {_fmt(c['driver_s'])} s; Spark stages with tasks: "
                        f"{c['stages'] or 'none'})")
                    if not w.insert_only:
                        before = load()
                        c = self.call(w, h, big.update_df, 1)
                        self.expect(w, h, big.after_update, "update")
                        out["update"].append({**c, "load": before})
                        say(f"{w.key} round {r + 1} update: {big.update.num_rows:,} rows in "
                            f"{c['s']:.2f} s = {big.update.num_rows / c['s']:,.0f}/s "
                            f"(driver write {_fmt(c['driver_s'])} s; Spark stages with tasks: "
                            f"{c['stages'] or 'none'})")
                except Exception as e:  # noqa: BLE001 - reported, not hidden
                    say(f"{w.key} round {r + 1} insert/update: FAILED {short_error(e)}")
                finally:
                    if h is not None:
                        w.close(h)
                try:
                    before = load()
                    first, nxt = [], []
                    for i in range(a.tables):
                        h = w.open(f"r{r}_s{i}")
                        try:
                            first.append(self.call(w, h, small.insert_df, 0))
                            if not w.insert_only:
                                nxt.append(self.call(w, h, small.update_df, 1))
                            if i == a.tables - 1:
                                self.expect(w, h, small.after_insert if w.insert_only
                                            else small.after_update, "small tables")
                        finally:
                            w.close(h)
                    for name, calls in (("first", first), ("next", nxt)):
                        if not calls:
                            continue
                        total = sum(c["s"] for c in calls)
                        out[name].append({"s": total, "calls": len(calls), "load": before,
                                          "tasks": sum(c["tasks"] for c in calls) / len(calls),
                                          "jobs": sum(c["jobs"] for c in calls) / len(calls)})
                        say(f"{w.key} round {r + 1} small tables, {name} write: {len(calls)} "
                            f"calls in {total:.2f} s = {1000 * total / len(calls):.0f} ms/call "
                            f"({out[name][-1]['jobs']:.1f} Spark jobs, "
                            f"{out[name][-1]['tasks']:.1f} tasks per call)")
                except Exception as e:  # noqa: BLE001
                    say(f"{w.key} round {r + 1} small tables: FAILED {short_error(e)}")
        for w in live:
            if isinstance(w, SinkWriter):
                res[w.key]["jobs_in_sink_write"] = w.write_jobs
        self.results = res


def _stage(name: str) -> str:
    """A stage's call site, short: ``toArrow``, ``save``; AQE's shuffle stages run from a
    CompletableFuture."""
    head = name.split(" at ", 1)[0]
    return "shuffle map" if head.startswith("$anonfun") else head


def _fmt(x) -> str:
    return "-" if x is None else f"{x:.2f}"


def _rate(n: int, secs, missing: str) -> str:
    return f"{n / secs:,.0f}" if secs else missing


def _ms(secs, missing: str) -> str:
    return missing if secs is None else f"{1000 * secs:,.0f}"


def _per_call(runs: list[dict]):
    """Median seconds per call of the small-table rounds."""
    xs = [r["s"] / r["calls"] for r in runs]
    return statistics.median(xs) if xs else None


def _median(runs: list[dict], key: str = "s"):
    xs = [r[key] for r in runs if r.get(key) is not None]
    return statistics.median(xs) if xs else None


# -- the report ------------------------------------------------------------------------------


def machine() -> dict:
    cpu, mem = cpu_and_memory()
    versions = {"python": platform.python_version()}
    from importlib.metadata import PackageNotFoundError, version

    for dist in ("pyspark", "pyarrow", "deltalake", "pyiceberg", "psycopg", "PyMySQL"):
        try:
            versions[dist] = version(dist)
        except PackageNotFoundError:
            pass
    java = subprocess.run(["java", "-version"], capture_output=True, text=True, check=False).stderr
    versions["java"] = (java.splitlines() or ["?"])[0]
    return {"cpu": cpu, "cores": os.cpu_count(), "memory_gb": round(mem / 1024 / 1024),
            "kernel": platform.release(), "versions": versions}


def render(b: Bench, started: str, load0: float) -> str:
    a, m = b.args, machine()
    n_ins, n_upd = b.big.insert.num_rows, b.big.update.num_rows
    title = f"## Writers: Spark's own against sparkcdc's driver-side writers (run {started})"
    out = [BEGIN, "", title, ""]
    out.append(
        f"`bench/writers.py`, {a.rounds} round{'s' if a.rounds != 1 else ''}, writers "
        "interleaved within each round, "
        "medians. Every writer gets the same cached Spark DataFrame of change rows (id BIGINT "
        "key, name, qty INT, price DECIMAL(12,2), ts TIMESTAMP, note, and the change "
        "metadata) and reduces it with `plan_changes` (the last change per key: a window over "
        "the key, so a shuffle); then the driver writers are the sparkcdc sinks through "
        "`apply_changes` (the reduced rows collected to the driver as Arrow and written from "
        "Python), and the Spark writers write the reduced DataFrame with Spark. "
        f"*insert*: {n_ins:,} new rows into an empty table; *update*: {n_upd:,} rows "
        f"updating distinct keys of it; *small tables*: {a.tables} tables × {a.table_rows} "
        "rows, one call per table: the *first* write (creates the table; a sink opens its "
        "connection) and the *next* (updates every row). *Spark stages*: the stages the "
        "insert call ran, by call site, with their task counts (`shuffle map`: the "
        "reduction's shuffle; `toArrow`: the collect to the driver; `save`: a Spark write, "
        "whose tasks write the rows). *Driver write*: seconds of the call "
        "spent writing from the driver outside Spark jobs (a sink's `write`; the JDBC "
        "writers' DDL and upsert statement). Results are checked (rows, sum of qty). "
        f"Machine: {m['cpu']}, {m['cores']} cores, {m['memory_gb']} GB, Linux {m['kernel']}; "
        + ", ".join(f"{k} {v}" for k, v in m["versions"].items())
        + f"; Spark local[2], 2 shuffle partitions. Load average {load0} at start; *load* "
        "is the 1-minute load average when each insert round started.")
    out.append("")
    jars = "; ".join(f"{g}: " + ", ".join(f"`{n}`" for n in names)
                     for g, names in b.jar_names.items() if names)
    if jars:
        out += [f"Jars on `spark.jars` (scripts/fetch_jars.sh): {jars}.", ""]
    out += [("| writer | rows written by | insert rows/s | update rows/s | small tables: "
             "first write ms/call | next write ms/call | Spark stages of an insert call: tasks | "
             "driver write s "
             "(insert / update) | load |"),
            "|---|---|---:|---:|---:|---:|---|---|---|"]
    for w in b.writers:
        if w.key in b.failed:
            continue
        r = b.results.get(w.key, {})
        ins, upd = _median(r.get("insert", [])), _median(r.get("update", []))
        first, nxt = _per_call(r.get("first", [])), _per_call(r.get("next", []))
        tasks = r["insert"][0]["stages"] if r.get("insert") else "-"
        drv = " / ".join(_fmt(_median(r.get(k, []), "driver_s")) for k in ("insert", "update"))
        where = w.where
        if "jobs_in_sink_write" in r:
            where += f" ({r['jobs_in_sink_write']} Spark jobs during the sink's writes)"
        loads = ", ".join(str(x["load"]) for x in r.get("insert", []))
        na = "n/a" if w.insert_only else "failed"
        out.append(f"| {w.label} | {where} | {_rate(n_ins, ins, 'failed')} | "
                   f"{_rate(n_upd, upd, na)} | {_ms(first, 'failed')} | {_ms(nxt, na)} | "
                   f"{tasks} | {drv} | {loads} |")
    out.append("")
    if b.failed:
        out += ["Writers that did not run (tried once on a few rows first):", "",
                "| writer | jars | error |", "|---|---|---|"]
        for w in b.writers:
            if w.key in b.failed:
                names = ", ".join(f"`{n}`" for g in w.jar_groups for n in b.jar_names.get(g, [])
                                  if not n.startswith(("commons-", "jackson-", "javax.",
                                                       "shims-", "unitycatalog-")))
                err = b.failed[w.key].replace("|", "\\|")
                out.append(f"| {w.label} | {names or '-'} | `{err}` |")
        out.append("")
    out += ["Raw log of this run:", "", "```", *LOG, "```", "", END]
    return "\n".join(out)


def write_docs(path: Path, text: str) -> None:
    replace_section(path, BEGIN, END, text)
    print(f"wrote {path}")


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--rows", type=int, default=200_000,
                   help="rows of the insert batch; the update batch is half of it")
    p.add_argument("--tables", type=int, default=100, help="small tables, one call each")
    p.add_argument("--table-rows", type=int, default=10, help="rows per small-table call")
    p.add_argument("--rounds", type=int, default=3)
    p.add_argument("--writers", default="", help="comma-separated writer keys (default: all)")
    p.add_argument("--jars-dir", default=str(ROOT / ".jars"))
    p.add_argument("--spark-conf", action="append", default=[], metavar="KEY=VALUE",
                   help="extra Spark setting, repeatable (e.g. "
                        "spark.sql.adaptive.coalescePartitions.enabled=false)")
    p.add_argument("--json", help="also write the raw results here")
    p.add_argument("--docs", default=str(ROOT / "docs" / "benchmarks.md"))
    p.add_argument("--no-write-docs", action="store_true")
    args = p.parse_args()
    started = dt.datetime.now().strftime("%Y-%m-%d %H:%M")
    load0 = load()
    say(f"start, load average {load0}")
    b = Bench(args)
    try:
        b.start()
        b.probe()
        b.rounds()
    finally:
        b.stop()
    text = render(b, started, load0)
    if args.json:
        Path(args.json).write_text(json.dumps({"started": started, "load": load0,
                                               "failed": b.failed, "results": b.results,
                                               "jars": b.jar_names, "log": LOG}, indent=1,
                                              default=str))
    if not args.no_write_docs:
        write_docs(Path(args.docs), text)
    print(text)


if __name__ == "__main__":
    main()
