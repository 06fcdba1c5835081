"""A long snapshot under steady writes reads the binlog about once, not once per chunk since
the run began (docs/spark-source.md, availableNow).

A table of 40 chunks is read two chunks a batch while a writer updates 200 random rows
every ~10 ms. The server's own count of the bytes it sent (``Bytes_sent``), less one read of
the table, is compared with what one read of the binlog it wrote meanwhile costs it to send
(measured the same way after the run: MariaDB sends about 0.8 bytes per byte its binlog grew,
MySQL about 1.0): a bound checked by a count, not a timer. Held at the query's starting
position (before), each batch's chunks were rolled back to it and so replayed everything
written since the query began: 13 times the binlog's growth in the issue's run. Through the
Spark source with ``availableNow`` and through ``sparkcdc run --until-caught-up``."""

from __future__ import annotations

import random
import threading

import pytest
from pipeline_support import source_yaml
from server_support import seq

import sparkcdc
from sparkcdc.core.schema import TableId
from sparkcdc.mysql.binlog.reader import BinlogReader
from sparkcdc.mysql.binlog.server_lookups import load_table_schema
from sparkcdc.mysql.connection import ConnectionOptions
from sparkcdc.mysql.offsets import current_offset
from sparkcdc.pipeline.definition import parse_pipeline
from sparkcdc.pipeline.run.loop import Runner

ROWS, CHUNK = 20_000, 500  # 40 chunks
# in reads of the binlog (the target): the stream's windows once, plus one roll-back
# read per batch, from its position to its last select (docs/spark-source.md, "One rollback
# read per batch"). Measured 0.94-1.09 (availableNow) and 1.33 (--until-caught-up) on MariaDB,
# 0.97 and 1.47 on MySQL. It was 2.06-2.15 when each chunk task of a batch read that stretch
# again, about 16 held at the query's start. The roll-back stretch is the time from a batch's
# planning to its last select, so it grows with the machine's load: 1.65 was seen here with
# three other Spark suites running (load 11). The bound leaves that margin; the 1.5
# is held by bench/binlog_once.py (docs/benchmarks.md), which states its load.
BOUND = 1.8
# Rows each update statement changes. The count also holds what is not the binlog: each
# batch's offset reads (about 2 KB each on MySQL, its commit wait's polls included), plans and
# status queries. They do not grow with the writes, so on a machine slow enough to run a
# third of the statements they weighed three times as much: CI saw 1.81 on MySQL, where one
# read of the binlog cost 1.06 MB (3.8 MB here) with 50 rows a statement. With 200 the binlog
# is the count's bulk on a slow machine too: 0.99 and 1.33 here, 0.93 and 1.25 beside three
# busy loops (2026-11-28, MySQL 9.7).
PER_STATEMENT = 200


@pytest.fixture(scope="module", autouse=True)
def _register(spark):
    sparkcdc.register(spark)


class Updater(threading.Thread):
    """``PER_STATEMENT`` random rows updated every ~10 ms, one statement each, until stopped."""

    def __init__(self, mariadb, db):
        super().__init__(daemon=True)
        self.conn = mariadb.admin_connection(db)
        self.halt, self.statements, self.error = threading.Event(), 0, None
        self.rnd = random.Random(7)

    def run(self):
        try:
            with self.conn.cursor() as cur:
                while not self.halt.wait(0.01):
                    keys = ",".join(str(self.rnd.randint(1, ROWS))
                                    for _ in range(PER_STATEMENT))
                    cur.execute(f"UPDATE t SET v = v + 1, s = 'upd' WHERE id IN ({keys})")
                    self.statements += 1
        except Exception as e:  # noqa: BLE001 - surfaced by the test
            self.error = e

    def stop(self):
        self.halt.set()
        self.join(30)
        self.conn.close()
        assert self.error is None, self.error


def bytes_sent(mariadb) -> int:
    return int(mariadb.query("SHOW GLOBAL STATUS LIKE 'Bytes_sent'")[0][1])


def binlog_bytes(mariadb) -> int:
    return sum(int(r[1]) for r in mariadb.query("SHOW BINARY LOGS"))


def table_read_bytes(mariadb, db) -> int:
    """What one plain read of the whole table costs the server to send."""
    before = bytes_sent(mariadb)
    mariadb.query(f"SELECT * FROM `{db}`.t")
    return bytes_sent(mariadb) - before


def binlog_read_bytes(mariadb, db, start, end) -> int:
    """What one plain read of the binlog from ``start`` to ``end`` costs the server to send."""
    i = mariadb.info
    conn = ConnectionOptions(hostname=i.host, port=i.port, username=i.cdc_user,
                             password=i.cdc_password)
    schema = load_table_schema(conn, TableId(db, "t"))
    before = bytes_sent(mariadb)
    records = sum(1 for _ in BinlogReader(conn, random.randint(10_000, 99_999),
                                          {schema.table_id: schema}).read_window(start, end))
    assert records > 0
    return bytes_sent(mariadb) - before


def measured(mariadb, db, run) -> tuple[float, int, int]:
    """(times the binlog went over the wire, bytes sent less one table read, bytes of one
    read of the binlog written meanwhile) for ``run()``, made while the updater writes."""
    i = mariadb.info
    conn = ConnectionOptions(hostname=i.host, port=i.port, username=i.admin_user,
                             password=i.admin_password)
    table = table_read_bytes(mariadb, db)
    start = current_offset(conn)
    sent0, log0 = bytes_sent(mariadb), binlog_bytes(mariadb)
    w = Updater(mariadb, db)
    w.start()
    try:
        run()
    finally:
        w.stop()
    sent = bytes_sent(mariadb) - sent0 - table
    grown = binlog_bytes(mariadb) - log0
    assert w.statements > 100 and grown > 1_000_000, (w.statements, grown)
    once = binlog_read_bytes(mariadb, db, start, current_offset(conn))
    print(f"binlog reads: {sent / once:.2f} ({sent:,} bytes sent, one read {once:,})")
    return sent / once, sent, once


def make_table(mariadb, db):
    mariadb.execute("CREATE TABLE t (id INT PRIMARY KEY, v INT, s VARCHAR(40))",
                    "INSERT INTO t SELECT seq, seq % 13, CONCAT('r', seq) "
                    f"FROM {seq(mariadb, ROWS)}",
                    database=db)


@pytest.mark.long
def test_available_now_snapshot_under_writes_reads_the_binlog_once(spark, mariadb, db,
                                                                    tmp_path):
    make_table(mariadb, db)
    base = random.randint(100_000, 4_000_000_000)
    opts = mariadb.source_options(**{
        "database-name": db, "table-name": f"{db}\\.t", "server-id": f"{base}-{base + 2}",
        "scan.incremental.snapshot.chunk.size": str(CHUNK), "maxRowsPerBatch": str(2 * CHUNK),
        "changelog-mode": "upsert"})
    progress = []

    def run():
        q = (spark.readStream.format("mysql-cdc").options(**opts).load()
             .writeStream.format("noop").option("checkpointLocation", str(tmp_path / "ckpt"))
             .trigger(availableNow=True).start())
        q.awaitTermination(900)
        assert q.exception() is None, q.exception()
        progress.extend(q.recentProgress)

    times, sent, once = measured(mariadb, db, run)
    assert len(progress) >= 15, len(progress)  # a long snapshot: many batches
    assert times <= BOUND, (f"the server sent {sent:,} bytes beyond one read of the table "
                            f"while one read of its binlog costs {once:,}: {times:.2f} times")


@pytest.mark.long
def test_until_caught_up_snapshot_under_writes_reads_the_binlog_once(spark, mariadb, db,
                                                                     tmp_path):
    make_table(mariadb, db)
    defn = parse_pipeline(f"""
{source_yaml(mariadb, db + ".t", 3)}  scan.incremental.snapshot.chunk.size: {CHUNK}
sink:
  type: delta
  path: {tmp_path}/lake
pipeline:
  name: once
  parallelism: 1
  max-rows-per-batch: {2 * CHUNK}
  checkpoint.location: {tmp_path}/ckpt
""", "once.yaml", env={"TEST_PW": mariadb.info.cdc_password})

    times, sent, once = measured(
        mariadb, db, lambda: Runner(defn, spark, until_caught_up=True).run())
    assert times <= BOUND, (f"the server sent {sent:,} bytes beyond one read of the table "
                            f"while one read of its binlog costs {once:,}: {times:.2f} times")
