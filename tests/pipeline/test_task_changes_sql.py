"""A pipeline into PostgreSQL (and MySQL, in make test-faults) whose rows go through the
Spark tasks, not the driver (sinks/postgres/staging.py): the snapshot's new rows loaded
into staging tables by the tasks that read them, the changes by tasks that each own a hash slice of the keys, each
batch applied by the driver in one transaction with its batch id.

Two tables are snapshotted under a writer (deletes, re-inserts, re-keys); each target equals its source row by row, the commits' logs show the tasks' rows, the
driver's own write was never called, and no staging table is left. One run, in the background, until the targets equal
their sources."""

from __future__ import annotations

import logging
import re
import threading
import time

import pytest
from pipeline_support import source_yaml
from reread_support import Writer
from server_support import seq

from sparkcdc.pipeline.definition import parse_pipeline
from sparkcdc.pipeline.run.loop import Runner
from sparkcdc.sinks.mysql.sink import MySQLSink
from sparkcdc.sinks.postgres.sink import PostgresSink

ROWS = 1500  # per table, as reread_support's writer expects


def source_rows(mariadb, db, table) -> dict:
    return {r[0]: tuple(r[1:]) for r in mariadb.query(f"SELECT id, v, s FROM `{db}`.`{table}`")}


class SqlTarget:
    """The pipeline's targets, ``<db>_t.<table>``, on a PostgreSQL or MySQL server."""

    def __init__(self, kind: str, request, db: str):
        self.kind, self.out = kind, f"{db}_t"
        self.server = request.getfixturevalue("pg_server" if kind == "postgres" else "mariadb")

    def yaml(self) -> str:
        i = self.server.info
        if self.kind == "postgres":
            return (f"  type: postgres\n  host: {i.host}\n  port: {i.port}\n  user: {i.user}\n"
                    f"  password: ${{SINK_PW}}\n  database: {i.database}\n")
        return (f"  type: mysql\n  hostname: 127.0.0.1\n  port: {i.port}\n"
                f"  username: {i.admin_user}\n  password: ${{SINK_PW}}\n")

    @property
    def password(self) -> str:
        i = self.server.info
        return i.password if self.kind == "postgres" else i.admin_password

    def query(self, statement: str) -> list[tuple]:
        if self.kind == "postgres":
            return self.server.execute(statement)
        return [tuple(r) for r in self.server.query(statement)]

    def rows(self, table: str) -> dict | None:
        q = '"' if self.kind == "postgres" else "`"
        try:
            got = self.query(f"SELECT id, v, s FROM {q}{self.out}{q}.{q}{table}{q}")
        except Exception:  # noqa: BLE001 - not created yet
            return None
        assert len(got) == len({r[0] for r in got}), "a key is held twice"
        return {r[0]: tuple(r[1:]) for r in got}

    def stages(self) -> list:
        return self.query("SELECT table_name FROM information_schema.tables WHERE "
                          f"table_schema = '{self.out}' AND table_name LIKE 'sc\\_%'")


# make test-faults: make test's 25 minutes are spent; tests/sinks/test_sql_tasks.py runs the
# staging, commit, replay and leftovers on both databases in make test
@pytest.mark.faults
@pytest.mark.parametrize("kind", ["postgres", "mysql"])
def test_snapshot_and_changes_go_through_the_tasks(spark, mariadb, db, request, tmp_path,
                                                   caplog, monkeypatch, kind):
    target = SqlTarget(kind, request, db)
    for t in "ab":
        mariadb.execute(f"CREATE TABLE {t} (id INT PRIMARY KEY, v INT, s VARCHAR(10))",
                        f"INSERT INTO {t} SELECT seq, seq, 'init' FROM {seq(mariadb, ROWS)}",
                        database=db)
    source = source_yaml(mariadb, db + ".\\.*", 3)
    defn = parse_pipeline(f"""
{source}  scan.incremental.snapshot.chunk.size: 500
sink:
{target.yaml()}route:
  - source-table: {db}.(\\.*)
    sink-table: {db}_t.$1
pipeline:
  name: sqltasks
  parallelism: 2
  max-rows-per-batch: 600
  checkpoint.location: {tmp_path}/ckpt
""", "sqltasks.yaml", env={"TEST_PW": mariadb.info.cdc_password, "SINK_PW": target.password})
    sink_class = PostgresSink if kind == "postgres" else MySQLSink
    driver_writes: list[int] = []
    real_write = sink_class.write

    def watched(self, changes, batch_id):  # the driver's own path (tasks' are elsewhere)
        driver_writes.append(changes.num_rows)
        return real_write(self, changes, batch_id)

    monkeypatch.setattr(sink_class, "write", watched)
    caplog.set_level(logging.INFO, logger="sparkcdc")

    # one run: the snapshots under a writer, then its last changes, until the targets
    # equal the sources
    runner = Runner(defn, spark)
    thread = threading.Thread(target=runner.run, daemon=True)
    writer = Writer(mariadb, db, seed=40)
    thread.start()
    try:
        deadline = time.monotonic() + 240
        while target.rows("a") is None:  # the first batch's commit
            assert thread.is_alive() and time.monotonic() < deadline, "no batch was written"
            time.sleep(0.5)
        writer.start()  # during the snapshot, and after it
        writer.join(6)
    finally:
        writer.finish()
    assert writer.ops.get("delete", 0) > 5 and writer.ops.get("update", 0) > 10, writer.ops
    assert writer.ops.get("rekey", 0) + writer.ops.get("reinsert", 0) > 0, writer.ops
    want = {t: source_rows(mariadb, db, t) for t in "ab"}
    try:
        deadline = time.monotonic() + 240
        while any(target.rows(t) != want[t] for t in "ab"):
            assert thread.is_alive(), "the run ended"
            assert time.monotonic() < deadline, "the targets did not reach their sources"
            time.sleep(1)
        left = target.stages()
    finally:
        runner.stop()
        thread.join(120)
    assert not left, f"staging tables were left: {left}"
    for t in "ab":
        assert target.rows(t) == source_rows(mariadb, db, t)
    logged = [r.getMessage() for r in caplog.records]
    files = [int(m.group(1)) for m in (re.search(r"batch \d+: (\d+) row\(s\) written by the "
                                                 r"tasks", x) for x in logged) if m]
    assert sum(files) >= 2 * ROWS, f"the snapshot's rows did not go through the tasks: {files}"
    done = [x for x in logged if re.search(r"-> .* from \d+ task\(s\): .*staging tables", x)]
    assert done, "no batch's changes were committed from the tasks' staging tables"
    assert not driver_writes, f"the driver wrote rows itself: {driver_writes}"

