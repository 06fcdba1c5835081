"""A pipeline into PostgreSQL whose rows the tasks load into staging tables
(sinks/postgres/staging.py), SIGKILLed (the whole process group: CLI, JVM, Python workers)
at seeded random moments during the snapshot and under steady writes, then run again: the
target ends equal to the source row by row, and no staging table is left. A kill lands in a
task loading a staging table, between the tasks' loads and the driver's transaction, or
after it and before Spark's checkpoint (the batch is then replayed and skipped by its batch
id, its new staging tables dropped), wherever the moment falls."""

from __future__ import annotations

import os
import random
import signal
import time

import pytest
from cli_support import wait_for
from faults_support import SEED
from reread_support import KillableRun, Target, Writer, make_tables, source_rows


@pytest.mark.faults
@pytest.mark.timeout(1800)
def test_staging_tables_killed_at_random_points_end_equal_to_source(mariadb, db, tmp_path,
                                                                    request):
    rnd = random.Random(SEED + 131)
    make_tables(mariadb, db)
    target = Target("postgres", request, tmp_path, db)
    run = KillableRun(mariadb, db, target, tmp_path, extra_args=("-v",))  # the batches' lines
    start = run.start

    def staging_left() -> list:
        return target.pg.execute("SELECT tablename FROM pg_tables WHERE schemaname = %s "
                                 "AND tablename LIKE 'sc\\_%%'", (target.out,))

    p = start(0)
    writer = Writer(mariadb, db, seed=rnd.randint(0, 10**6))
    try:
        wait_for(lambda: target.rows("a") != {}, 240, "the first batch")
        writer.start()  # the snapshot goes on under writes
        for k in range(1, 6):  # five kills, in the snapshot and while the changes stream in
            # once the run writes batches (its start-up takes longer than most moments)
            wait_for(lambda k=k: "sparkcdc.pipeline: batch" in
                     (tmp_path / f"run-{k - 1}.log").read_text(), 180, f"run {k - 1}'s batches")
            time.sleep(rnd.uniform(0.2, 5.0))
            os.killpg(p.pid, signal.SIGKILL)
            p.wait()
            p = start(k)
        time.sleep(5)
        writer.finish()
        for t in "ab":
            wait_for(lambda t=t: target.rows(t) == source_rows(mariadb, db, t), 300,
                     f"{t} equal to its source")
        wait_for(lambda: not staging_left(), 60, "no staging table left")
    finally:
        writer.stop()
        if p.poll() is None:
            os.killpg(p.pid, signal.SIGKILL)
            p.wait()
    assert writer.ops.get("delete", 0) > 20, writer.ops
    logs = "".join((tmp_path / f"run-{k}.log").read_text() for k in range(6))
    assert "written by the tasks" in logs, "no snapshot rows went through the tasks"
    assert "'staging tables'" in logs, "no changes were committed from staging tables"
