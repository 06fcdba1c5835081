"""A pipeline into PostgreSQL whose rows go through the Spark tasks, not the driver
(sinks/postgres/staging.py): the snapshot's new rows COPYed into staging tables by the
tasks that read them, the changes by tasks that each own a hash slice of the keys, each
batch applied by the driver in one transaction with its batch id.

Two tables are snapshotted under a writer (deletes, re-inserts, re-keys); each target equals its source row by row, the batches' bookkeeping shows the tasks'
commits (``<app-id>#files`` rows, the commits' logs), the driver's own write was never
called, and no staging table is left. One run, in the background, until the targets equal
their sources."""

from __future__ import annotations

import logging
import re
import threading
import time

from pipeline_support import source_yaml
from reread_support import Writer

from sparkcdc.pipeline.definition import parse_pipeline
from sparkcdc.pipeline.run.loop import Runner
from sparkcdc.sinks.postgres.sink import PostgresSink

ROWS = 1500  # per table, as reread_support's writer expects


def source_rows(mariadb, db, table) -> dict:
    return {r[0]: tuple(r[1:]) for r in mariadb.query(f"SELECT id, v, s FROM `{db}`.`{table}`")}


def target_rows(pg, db, table) -> dict:
    got = pg.execute(f'SELECT id, v, s FROM "{db}"."{table}"')
    assert len(got) == len({r[0] for r in got}), "a key is held twice"
    return {r[0]: tuple(r[1:]) for r in got}


def test_snapshot_and_changes_go_through_the_tasks_into_postgres(spark, mariadb, db, pg_server,
                                                                 tmp_path, caplog,
                                                                 monkeypatch):
    pg = pg_server.info
    for t in "ab":
        mariadb.execute(f"CREATE TABLE {t} (id INT PRIMARY KEY, v INT, s VARCHAR(10))",
                        f"INSERT INTO {t} SELECT seq, seq, 'init' FROM seq_1_to_{ROWS}",
                        database=db)
    source = source_yaml(mariadb, db + ".\\.*", 3)
    defn = parse_pipeline(f"""
{source}  scan.incremental.snapshot.chunk.size: 500
sink:
  type: postgres
  host: {pg.host}
  port: {pg.port}
  user: {pg.user}
  password: ${{PG_PW}}
  database: {pg.database}
pipeline:
  name: pgtasks
  parallelism: 2
  max-rows-per-batch: 600
  checkpoint.location: {tmp_path}/ckpt
""", "pgtasks.yaml", env={"TEST_PW": mariadb.info.cdc_password, "PG_PW": pg.password})
    driver_writes: list[int] = []
    real_write = PostgresSink.write

    def watched(self, changes, batch_id):  # the driver's own path (tasks' are elsewhere)
        driver_writes.append(changes.num_rows)
        return real_write(self, changes, batch_id)

    monkeypatch.setattr(PostgresSink, "write", watched)
    caplog.set_level(logging.INFO, logger="sparkcdc")

    # one run: the snapshots under a writer, then its last changes, until the targets
    # equal the sources
    runner = Runner(defn, spark)
    thread = threading.Thread(target=runner.run, daemon=True)
    writer = Writer(mariadb, db, seed=40)
    thread.start()
    try:
        deadline = time.monotonic() + 240
        while _target_or_none(pg_server, db, "a") is None:  # the first batch's commit
            assert thread.is_alive() and time.monotonic() < deadline, "no batch was written"
            time.sleep(0.5)
        writer.start()  # during the snapshot, and after it
        writer.join(8)
    finally:
        writer.finish()
    assert writer.ops.get("delete", 0) > 5 and writer.ops.get("update", 0) > 10, writer.ops
    assert writer.ops.get("rekey", 0) + writer.ops.get("reinsert", 0) > 0, writer.ops
    want = {t: source_rows(mariadb, db, t) for t in "ab"}
    try:
        deadline = time.monotonic() + 240
        while any(_target_or_none(pg_server, db, t) != want[t] for t in "ab"):
            assert thread.is_alive(), "the run ended"
            assert time.monotonic() < deadline, "the targets did not reach their sources"
            time.sleep(1)
        left = pg_server.execute("SELECT tablename FROM pg_tables "
                                 "WHERE tablename LIKE 'sc\\_%'")
    finally:
        runner.stop()
        thread.join(120)
    assert not left, f"staging tables were left: {left}"
    for t in "ab":
        assert target_rows(pg_server, db, t) == source_rows(mariadb, db, t)
    logged = [r.getMessage() for r in caplog.records]
    files = [int(m.group(1)) for m in (re.search(r"batch \d+: (\d+) row\(s\) written by the "
                                                 r"tasks", x) for x in logged) if m]
    assert sum(files) >= 2 * ROWS, f"the snapshot's rows did not go through the tasks: {files}"
    booked = dict(pg_server.execute(f'SELECT app_id, batch_id FROM "{db}"."_sparkcdc_batches"'))
    assert [a for a in booked if a.endswith("#files")], booked
    done = [x for x in logged if re.search(r"-> .* from \d+ task\(s\): .*staging tables", x)]
    assert done, "no batch's changes were committed from the tasks' staging tables"
    assert not driver_writes, f"the driver wrote rows itself: {driver_writes}"


def _target_or_none(pg, db, table):
    try:
        return target_rows(pg, db, table)
    except Exception:  # noqa: BLE001 - not created yet
        return None
