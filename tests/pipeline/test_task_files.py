"""A snapshot's rows written as Delta files by the tasks that read them, committed once per
batch by the driver: no snapshot row goes through the driver (pipeline/run/task_files.py).

A pipeline runs into Delta while a writer inserts, updates and deletes rows of the table
being snapshotted. The target equals the source, read by delta-rs and by the Delta log
read on its own; the batches that carried chunks were committed from the tasks' files
(their commits say so), and what the tasks sent the driver for them is under a byte per
row written."""

from __future__ import annotations

import logging
import re
import threading
import time
from pathlib import Path

import deltalake
import pytest
from pipeline_support import source_yaml
from server_support import seq
from sink_support import delta_log_rows, read_delta

from sparkcdc.pipeline.definition import parse_pipeline
from sparkcdc.pipeline.run.loop import Runner

ROWS = 30_000


def source_rows(mariadb, db) -> dict:
    return {r[0]: (r[1], r[2]) for r in mariadb.query(f"SELECT id, v, s FROM `{db}`.t")}


def log_rows(root: Path) -> dict:
    """The target as its log says (adds less removes, less the rows deletion vectors
    delete), the files read by pyarrow."""
    out: dict = {}
    for r in delta_log_rows(root, ["id", "v", "s"]):
        assert r["id"] not in out, f"key {r['id']} held twice"
        out[r["id"]] = (r["v"], r["s"])
    return out


@pytest.mark.faults  # make test: tests/pipeline/test_task_changes.py writes the same way
def test_snapshot_rows_are_written_by_the_tasks_that_read_them(spark, mariadb, db, tmp_path,
                                                                caplog):
    mariadb.execute("CREATE TABLE t (id INT PRIMARY KEY, v INT, s VARCHAR(20))",
                    f"INSERT INTO t SELECT seq, seq, 'init' FROM {seq(mariadb, ROWS)}", database=db)
    defn = parse_pipeline(f"""
{source_yaml(mariadb, db + ".t", 3)}  scan.incremental.snapshot.chunk.size: 2000
sink:
  type: delta
  path: {tmp_path}/lake
pipeline:
  name: files
  parallelism: 2
  max-rows-per-batch: 8000
  checkpoint.location: {tmp_path}/ckpt
""", "files.yaml", env={"TEST_PW": mariadb.info.cdc_password})
    # updates of read and unread chunks, deletes, new keys
    writes = [f"UPDATE t SET v = -v, s = 'upd' WHERE id % 997 = {i}" for i in range(5)]
    writes += [f"DELETE FROM t WHERE id % 1009 = {i}" for i in range(3)]
    writes += [f"INSERT INTO t VALUES ({ROWS + i}, {i}, 'new')" for i in range(1, 200)]

    def write():
        conn = mariadb.admin_connection(db)
        try:
            with conn.cursor() as cur:
                for w in writes:
                    cur.execute(w)
                    time.sleep(0.02)
        finally:
            conn.close()

    caplog.set_level(logging.INFO, logger="sparkcdc.pipeline")
    writer = threading.Thread(target=write, daemon=True)
    writer.start()  # changes while it snapshots
    Runner(defn, spark, until_caught_up=True).run()
    writer.join(60)
    Runner(defn, spark, until_caught_up=True).run()  # the changes after the snapshot

    root = tmp_path / "lake" / db / "t"
    want = source_rows(mariadb, db)
    got = {r["id"]: (r["v"], r["s"]) for r in read_delta(root, ["id", "v", "s"]).to_pylist()}
    assert got == want
    assert log_rows(root) == want

    by_tasks = [h for h in deltalake.DeltaTable(str(root)).history()
                if h.get("sparkcdc.written-by") == "tasks"]
    assert len(by_tasks) >= 3, deltalake.DeltaTable(str(root)).history()
    sent = [tuple(map(int, m.groups())) for m in
            (re.search(r"(\d+) row\(s\) written by the tasks as \d+ file\(s\), (\d+) bytes "
                       r"to the driver", r.getMessage()) for r in caplog.records) if m]
    rows, bytes_ = sum(s[0] for s in sent), sum(s[1] for s in sent)
    assert rows >= ROWS * 0.9, sent
    assert bytes_ < rows, (bytes_, rows)  # under a byte per row written


def test_status_names_who_writes_each_target(tmp_path):
    from sparkcdc.pipeline.commands.status import writer_of

    def defn(sink: str, extra: str = "", pipeline: str = ""):
        return parse_pipeline(f"""
source:
  type: mysql
  hostname: 127.0.0.1
  port: 3306
  username: u
  tables: shop.\\.*
sink:
{sink}{extra}
pipeline:
  name: w
  checkpoint.location: {tmp_path}/ckpt
{pipeline}""", "w.yaml")

    local = f"  type: delta\n  path: {tmp_path}/lake\n"
    tasks = "tasks (changes: key slices, deletion vectors)"
    assert writer_of(defn(local), "shop.a") == tasks
    assert writer_of(defn(local + "  deletion-vectors: false\n"), "shop.a") == \
        "snapshot: tasks; changes: driver (delta-rs)"
    assert writer_of(defn(local, pipeline="  write.changes-from-tasks: false\n"),
                     "shop.a") == "snapshot: tasks; changes: driver (delta-rs)"
    assert writer_of(defn("  type: delta\n  path: s3://b/lake\n"), "shop.a") == \
        "driver (delta-rs)"
    transform = "transform:\n  - source-table: shop.a\n    projection: \\*\n"
    assert writer_of(defn(local, transform), "shop.a") == "driver (delta-rs)"
    assert writer_of(defn(local, transform), "shop.b") == tasks
    assert writer_of(defn(local, pipeline="  write.snapshot-from-tasks: false\n"),
                     "shop.a") == "driver (delta-rs)"
    iceberg = f"  type: iceberg\n  warehouse: {tmp_path}/wh\n"
    assert writer_of(defn(iceberg), "shop.a") == "tasks (changes: key slices, position deletes)"
    assert writer_of(defn(iceberg, pipeline="  write.changes-from-tasks: false\n"),
                     "shop.a") == "snapshot: tasks; changes: driver (pyiceberg)"
    assert writer_of(defn(iceberg + "  table-property.format-version: '1'\n"), "shop.a") == \
        "driver (pyiceberg)"
    assert writer_of(defn("  type: iceberg\n  warehouse: s3://b/wh\n"
                          "  catalog.uri: sqlite:///c.db\n"), "shop.a") == "driver (pyiceberg)"
    pg = "  type: postgres\n  user: u\n  database: d\n"
    assert writer_of(defn(pg), "shop.a") == "tasks (changes: hash slices, staging tables)"
    assert writer_of(defn(pg, pipeline="  write.changes-from-tasks: false\n"), "shop.a") == \
        "snapshot: tasks; changes: driver (psycopg)"
    assert writer_of(defn(pg, transform), "shop.a") == "driver (psycopg)"
    my = "  type: mysql\n  hostname: h\n  username: u\n"
    assert writer_of(defn(my), "shop.a") == "tasks (changes: hash slices, staging tables)"
    assert writer_of(defn(my, pipeline="  write.snapshot-from-tasks: false\n"), "shop.a") == \
        "driver (pymysql)"
