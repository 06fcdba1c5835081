"""From MariaDB through the real ``mysql-cdc`` source into every sink.

1. A table under concurrent writers (inserts, updates, deletes, key changes) is streamed with
   ``trigger(availableNow=True)`` while the writers run, then caught up from the same
   checkpoint; every sink's table must equal the source table.
2. The engine's all-types table (tests/mysql/test_types.py) is snapshotted, changed through the
   binlog (update, delete, key change), and must read back from every sink with the values
   the engine reads.
"""

from __future__ import annotations

import datetime as dt
import random
import threading

import pyarrow as pa
import pytest
from server_support import seq
from sink_support import SINK_IDS, TargetFactory, table_rows
from types_support import COLUMNS, expected_all_types, insert_all_types

import sparkcdc
from sparkcdc.apply import apply_changes

pytestmark = pytest.mark.slow


class Writer(threading.Thread):
    """A bounded number of random changes, so the run's length does not depend on how fast
    this machine is."""

    def __init__(self, mariadb, db, rows, seed, max_ops=800):
        super().__init__(daemon=True)
        self.max_ops = max_ops
        self.mariadb, self.db, self.rows = mariadb, db, rows
        self.rnd = random.Random(seed)
        self.next_id = rows + 1 + seed * 1_000_000
        self.stop_event = threading.Event()
        self.ops, self.error = 0, None

    def run(self):
        conn = self.mariadb.admin_connection(self.db)
        try:
            with conn.cursor() as cur:
                while self.ops < self.max_ops and not self.stop_event.wait(0.002):
                    p, n = self.rnd.random(), self.rnd.randint(1, self.rows)
                    if p < 0.3:
                        cur.execute("INSERT IGNORE INTO t VALUES (%s, 0, 'new ü')", (self.next_id,))
                        self.next_id += 1
                    elif p < 0.65:
                        cur.execute("UPDATE t SET v = v + 1, s = NULL WHERE id = %s", (n,))
                    elif p < 0.8:
                        cur.execute("DELETE FROM t WHERE id = %s", (n,))
                    else:
                        cur.execute("UPDATE IGNORE t SET id = %s WHERE id = %s",
                                    (self.rnd.randint(1, self.rows * 3), n))
                    self.ops += 1
        except Exception as e:  # noqa: BLE001 - the writer thread's error, surfaced by stop()
            self.error = e
        finally:
            conn.close()

    def stop(self, wait: bool = False):
        if not wait:
            self.stop_event.set()
        self.join()
        assert self.error is None, self.error


def _source_options(mariadb, db, table, **extra):
    base = random.randint(100_000, 4_000_000_000)
    return mariadb.source_options(**{"database-name": db, "table-name": f"{db}\\.{table}",
                                     "server-id": f"{base}-{base + 3}", **extra})


def _stream(spark, opts, ckpt, appliers):
    def fan_out(df, batch_id):
        df = df.persist()
        try:
            for a in appliers:
                a(df, batch_id)
        finally:
            df.unpersist()

    q = (spark.readStream.format("mysql-cdc").options(**opts).load()
         .writeStream.foreachBatch(fan_out).option("checkpointLocation", ckpt)
         .trigger(availableNow=True).start())
    q.awaitTermination(600)
    assert q.exception() is None, q.exception()
    return q


def _targets(request, tmp_path, prefix):
    factories = [TargetFactory(s, request, tmp_path) for s in SINK_IDS]
    return factories, [f(f"{prefix}_{f.sink_id.replace('-', '_')}") for f in factories]


def _data_schema(spark, opts) -> pa.Schema:
    df = spark.read.format("mysql-cdc").options(**opts).load()
    fields = [f for f in df.schema.fields if not f.name.startswith("_")]
    from pyspark.sql.types import StructType

    return spark.createDataFrame([], StructType(fields)).toArrow().schema


@pytest.mark.long
def test_concurrent_writers_into_every_sink(spark, mariadb, db, request, tmp_path):
    sparkcdc.register(spark)
    rows = 3000
    mariadb.execute("CREATE TABLE t (id INT PRIMARY KEY, v INT, s VARCHAR(40))",
                    "INSERT INTO t SELECT seq, seq % 13, CONCAT('r', seq) "
                    f"FROM {seq(mariadb, rows)}",
                    database=db)
    opts = _source_options(mariadb, db, "t", **{"scan.incremental.snapshot.chunk.size": "750",
                                                 "maxRowsPerBatch": "1500"})
    factories, targets = _targets(request, tmp_path, "t")
    appliers = [apply_changes(t, keys=["id"]) for t in targets]
    writers = [Writer(mariadb, db, rows, seed) for seed in range(2)]
    ckpt = str(tmp_path / "ckpt")
    try:
        for w in writers:
            w.start()
        try:
            _stream(spark, opts, ckpt, appliers)  # the snapshot, under writes
        finally:
            for w in writers:
                w.stop(wait=True)
        assert sum(w.ops for w in writers) == 1600
        _stream(spark, opts, ckpt, appliers)  # catch up from the same checkpoint
        source = [{"id": i, "v": v, "s": s} for i, v, s in
                  mariadb.query("SELECT id, v, s FROM t ORDER BY id", database=db)]
        schema = _data_schema(spark, opts)
        for a in appliers:
            assert len(a.results) >= 3 and not any(r.skipped for r in a.results)
        for t in targets:
            assert table_rows(t, spark, ["id"], schema=schema) == source, t.type
    finally:
        for f in factories:
            f.close()


@pytest.mark.long
def test_engine_all_types_table_survives_every_sink(spark, mariadb, db, request, tmp_path):
    sparkcdc.register(spark)
    insert_all_types(mariadb, db)
    opts = _source_options(mariadb, db, "all_types")
    factories, targets = _targets(request, tmp_path, "types")
    appliers = [apply_changes(t, keys=["id"]) for t in targets]
    ckpt = str(tmp_path / "ckpt")
    try:
        _stream(spark, opts, ckpt, appliers)  # snapshot
        mariadb.execute("SET SESSION time_zone = '+00:00'",
                        "UPDATE all_types SET tx = 'changed 😀', tm = '-00:00:07', "
                        "tm6 = '-00:00:00.000001' WHERE id = 1",
                        "DELETE FROM all_types WHERE id = 2",
                        "UPDATE all_types SET id = 5 WHERE id = 4", database=db)
        _stream(spark, opts, ckpt, appliers)  # the binlog

        want = {r["id"]: r for r in expected_all_types()}
        want[1] = {**want[1], "tx": "changed 😀", "tm": -dt.timedelta(seconds=7),
                   "tm6": -dt.timedelta(microseconds=1)}
        del want[2]
        want[5] = {**want.pop(4), "id": 5}
        expected = [want[k] for k in sorted(want)]
        schema = _data_schema(spark, opts)
        assert schema.names == COLUMNS
        for t in targets:
            got = table_rows(t, spark, ["id"], schema=schema)
            assert [g["id"] for g in got] == [1, 3, 5], t.type
            for g, w in zip(got, expected):
                for k in COLUMNS:
                    assert g[k] == w[k] and type(g[k]) is type(w[k]), (
                        f"{t.type}: row {w['id']} column {k}: got {g[k]!r}, want {w[k]!r}")
    finally:
        for f in factories:
            f.close()
