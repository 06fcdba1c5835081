"""A pipeline into Iceberg written by Spark tasks (snapshot files, changes by key slices with
position delete files, the driver's own commit, compaction), each table fanned out to two
Iceberg targets, killed at each point of its writes in turn, under steady writes, then run
again: every target ends equal to its source row by row (read by pyiceberg and by
iceberg-rust, which must agree), and no file is left in a table's folders that its
metadata does not name.

The kills come from inside the run (tests/support/task_kill_points.py: the whole session, the CLI,
the JVM, Spark's daemon and workers, SIGKILLed by the process that reaches the point), in
this order:

1. ``task-files``: a task wrote a snapshot chunk's rows as data files, the driver never
   heard of them;
2. ``commit-files``: every task wrote its files, the driver not yet committed them;

then a run takes the snapshots to their end under writes (stopped cleanly), and:

3. ``task-changes``: a slice's task wrote its new rows and position delete files;
4. ``commit-changes``: every slice written, nothing committed;
5. ``committed:1``: a target committed a batch, the fan-out's other target and Spark's
   checkpoint not: the replay is skipped by the first and applied by the second;
6. ``compaction``: a compaction wrote its files, not its commit (compact-every 3
   batches);
7. ``committed:2``: both targets of the first table committed the batch: a batch replayed
   after its commit."""

from __future__ import annotations

import os
import random
import signal
import subprocess
import time

import pytest
import task_kill_points
from cli_support import wait_for
from faults_support import SEED
from iceberg_support import orphans
from reread_support import KillableRun, Target, Writer, make_tables, mark, source_rows

SNAPSHOT_POINTS = ("task-files", "commit-files")
CHANGE_POINTS = ("task-changes", "commit-changes", "committed:1", "compaction", "committed:2")


@pytest.mark.faults
@pytest.mark.timeout(2400)
def test_iceberg_killed_at_each_point_of_its_writes_ends_equal_to_source(mariadb, db,
                                                                          tmp_path, request):
    rnd = random.Random(SEED + 231)
    make_tables(mariadb, db)
    target = Target("iceberg", request, tmp_path, db, fan_out=True,
                    sink_options={"compact-every": "3"})
    run = KillableRun(mariadb, db, target, tmp_path, extra_args=("-v",))
    writer = Writer(mariadb, db, seed=rnd.randint(0, 10**6))
    hits = []
    p = None
    k = 0

    def killed_at(point: str) -> None:
        nonlocal p, k
        flag = tmp_path / f"kill-{k}"
        p = run.start(k, env=task_kill_points.env(point, flag))
        try:
            p.wait(400)
        except subprocess.TimeoutExpired:
            raise AssertionError(f"run {k} never reached {point}:\n{run.log(k)}") from None
        assert flag.exists(), f"run {k} ended before {point}:\n{run.log(k)}"
        hits.append(flag.read_text().strip())
        k += 1

    try:
        for point in SNAPSHOT_POINTS:
            killed_at(point)
        writer.start()
        # the snapshots go on under writes to their end, so that the kills below meet
        # changes of both tables
        p = run.start(k)
        wait_for(lambda: all(mark(run.ckpt, f"{db}.{t}")[2] for t in "ab"), 600,
                 "the snapshots done")
        p.send_signal(signal.SIGTERM)
        p.wait(120)
        k += 1
        for point in CHANGE_POINTS:
            killed_at(point)
        p = run.start(k)
        time.sleep(10)
        writer.finish()
        for out in target.outs:
            for t in "ab":
                wait_for(lambda t=t, out=out: target.rows(t, out=out) ==
                         source_rows(mariadb, db, t), 300, f"{out}.{t} equal to its source")
        p.send_signal(signal.SIGTERM)  # a clean stop: no attempt of a batch in flight
        p.wait(120)
    finally:
        writer.stop()
        if p is not None and p.poll() is None:
            os.killpg(p.pid, signal.SIGKILL)
            p.wait()
    print("\n".join(hits))
    assert writer.ops.get("delete", 0) > 20, writer.ops
    for out in target.outs:
        for t in "ab":
            table = target.iceberg(t, out)._table()
            assert orphans(table) == [], f"{out}.{t}: files no snapshot names"
            snaps = table.snapshots()
            assert any(int(s.summary.get("added-position-deletes") or 0) for s in snaps
                       if s.summary.get("sparkcdc.written-by") == "tasks"), \
                f"{out}.{t}: no change was marked by a position delete"
    logs = "".join(run.log(i, 10**9) for i in range(k + 1))
    assert "written by the tasks" in logs, "no snapshot rows went through the tasks"
