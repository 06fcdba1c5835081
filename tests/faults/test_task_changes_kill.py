"""Changes written by key-slice tasks, into Delta with deletion vectors and into Iceberg with
position delete files, the pipeline SIGKILLed (the whole process group: CLI, JVM, Python
workers) at seeded random moments under steady writes, then run again: the target ends
equal to the source row by row (Delta read by delta-rs and by the log read on its own;
Iceberg by pyiceberg and by iceberg-rust, which must agree), nothing a dead attempt wrote
is left (Delta: every staging folder left is one the log names; Iceberg: every file in the
table's folders is one its metadata names), and the changes were marked in deletion
vectors or position deletes. A kill lands in a task routing or writing a slice, between
the tasks' writes and the driver's commit, or after the commit and before Spark's
checkpoint (the batch is then replayed and skipped by its batch id), wherever the moment
falls; tests/faults/test_iceberg_tasks_kill.py kills at each of these points in turn."""

from __future__ import annotations

import json
import os
import random
import re
import signal
import time

import pytest
from cli_support import wait_for
from faults_support import SEED
from iceberg_support import orphans
from reread_support import KillableRun, Target, Writer, make_tables, source_rows

COMMITTED = re.compile(r"-> .* from \d+ task\(s\): \{")  # a target's changes committed


@pytest.mark.faults
@pytest.mark.timeout(1800)
@pytest.mark.parametrize("kind", ["delta", "iceberg"])
def test_changes_by_slices_killed_at_random_points_end_equal_to_source(kind, mariadb, db,
                                                                       tmp_path, request):
    rnd = random.Random(SEED + 31 + (kind == "iceberg"))
    make_tables(mariadb, db)
    target = Target(kind, request, tmp_path, db)
    run = KillableRun(mariadb, db, target, tmp_path, extra_args=("-v",))  # the batches' lines
    start = run.start

    p = start(0)
    writer = Writer(mariadb, db, seed=rnd.randint(0, 10**6))
    try:
        wait_for(lambda: all(target.rows(t) == source_rows(mariadb, db, t) for t in "ab"), 240,
                 "the first snapshot")
        writer.start()
        for k in range(1, 6):  # five kills while the changes stream in
            # once the run committed changes from the tasks (its start-up and the replay
            # of the batch the last kill cut take longer than most moments)
            wait_for(lambda k=k: COMMITTED.search(run.log(k - 1, 10**9)), 300,
                     f"run {k - 1}'s changes")
            time.sleep(rnd.uniform(0.0, 5.0))
            os.killpg(p.pid, signal.SIGKILL)
            p.wait()
            p = start(k)
        time.sleep(5)
        writer.finish()
        for t in "ab":
            wait_for(lambda t=t: target.rows(t) == source_rows(mariadb, db, t), 300,
                     f"{t} equal to its source")
        p.send_signal(signal.SIGTERM)  # a clean stop: no attempt of a batch in flight
        p.wait(120)
    finally:
        writer.stop()
        if p.poll() is None:
            os.killpg(p.pid, signal.SIGKILL)
            p.wait()
    assert writer.ops.get("delete", 0) > 20, writer.ops
    logs = "".join(run.log(k, 10**9) for k in range(6))
    assert COMMITTED.search(logs), "no changes committed from the tasks"
    for t in "ab":
        if kind == "delta":
            _delta_checks(tmp_path / "lake" / target.out / t)
        else:
            table = target.iceberg(t)._table()
            assert orphans(table) == [], f"{t}: files no snapshot names"
            by_tasks = [s for s in table.snapshots()
                        if s.summary.get("sparkcdc.written-by") == "tasks"]
            assert any(int(s.summary.get("added-position-deletes") or 0) for s in by_tasks), \
                "no change was marked by a position delete from the tasks"


def _delta_checks(root) -> None:
    # every folder any commit ever named (files a later purge or compaction removed stay
    # until VACUUM); the others are attempts that died, which must be gone
    named = set()
    vectors = 0
    for f in (root / "_delta_log").glob("*.json"):
        for line in f.read_text().splitlines():
            a = json.loads(line).get("add")
            if a:
                named.add(a["path"].split("/", 1)[0])
                vec = a.get("deletionVector") or {}
                vectors += bool(vec)
                if vec.get("storageType") == "u":
                    named.add(vec["pathOrInlineDv"][:-20].rstrip("/"))
    left = {d.name for d in root.iterdir() if d.name.startswith("sc-")} - named
    # a folder of a batch still to commit may remain only for the last batch's attempt
    assert len(left) <= 1, left
    # (in the log's history: a compaction near the end leaves no live file with one)
    assert vectors, "no change was marked in a deletion vector"
    engines = [json.loads(line).get("commitInfo", {}).get("engineInfo")
               for f in (root / "_delta_log").glob("*.json")
               for line in f.read_text().splitlines()]
    assert "sparkcdc" in engines, "no commit of changes came from the tasks"
