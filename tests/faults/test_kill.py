"""Fault injection: the driver SIGKILLed at seeded random points, snapshot and stream phases.

The source runs in its own process (tests/support/spark_child.py: Spark's parquet file sink and a
foreachBatch sink that keeps every attempt of every batch), with processing-time triggers,
under concurrent writers. The parent kills the whole process group (driver, JVM, Python
workers) at a random moment after a random number of batches -- inside a task, between the
offset log and the commit log, while a sink writes -- and starts it again, which resumes from
the checkpoints. After the last kill a final run catches up; then both sinks must hold every
change exactly once and describe the source table as it is.

``make test-faults`` (marker ``faults``) runs two kill points, then 20; ``make test`` kills the
pipeline itself (tests/pipeline/test_kill.py).
The points are chosen by ``random.Random(SPARKCDC_FAULT_SEED)`` (default 8).
"""

from __future__ import annotations

import random
import time

import pytest
from faults_support import (
    SEED,
    Writers,
    check_changelog,
    file_sink_rows,
    foreach_batches,
    last_offset,
    make_table,
    run_child,
    source_options,
    spark_child,
    table_state,
)

CHUNK = 400
PER_BATCH = 2  # chunks per snapshot batch


def _kill_loop(mariadb, db, tmp_path, kills: int, seed: int) -> list[dict]:
    """Runs the child again and again, killing it at ``kills`` points: the first half while
    the snapshot runs, the rest once it streams. Returns what each kill hit."""
    rnd = random.Random(seed)
    snapshot_kills = kills // 2
    # a snapshot cycle finishes at most 3 batches: the first half of the kills fall inside it
    rows = CHUNK * PER_BATCH * (3 * max(1, snapshot_kills) + 1)
    make_table(mariadb, db, rows)
    opts = source_options(mariadb, db, **{"scan.incremental.snapshot.chunk.size": str(CHUNK),
                                          "maxRowsPerBatch": str(CHUNK * PER_BATCH)})
    out = tmp_path / "out"
    args = {"options": opts, "out": str(out), "continuous": True}
    hits = []
    writers = Writers(mariadb, db, rows, n=2, pause=0.05)
    with writers:
        for i in range(kills):
            want = "snapshot" if i < snapshot_kills else "streaming"
            after, delay = rnd.randint(1, 3), rnd.uniform(0.0, 2.0)
            began = time.monotonic()
            child = spark_child(args, tmp_path / f"child-{i}.log")
            try:
                seen = 0
                while True:
                    line = child.wait_line("BATCH", 300)
                    assert line is not None, f"child {i} exited: see {tmp_path}/child-{i}.log"
                    phase = (last_offset(out / "ckpt-foreach") or {}).get("phase")
                    if want == "streaming" and phase != "streaming":
                        continue  # let the snapshot finish first
                    seen += 1
                    if seen >= after:
                        break
                time.sleep(delay)
            finally:
                child.kill()
            off = last_offset(out / "ckpt-foreach")
            hits.append({"kill": i, "phase": off["phase"], "chunks_done": off["chunks_done"],
                         "after_batches": after, "delay": round(delay, 2), "line": line.strip(),
                         "seconds": round(time.monotonic() - began)})
    # the writers stopped; the final run catches up to the server's position, then exits
    done = run_child({"options": opts, "out": str(out)})
    assert done.returncode == 0, done.stderr[-3000:]
    final = table_state(mariadb, db)
    assert writers.total() > 50
    files = check_changelog(file_sink_rows(out / "files"), final, "file sink")
    each_rows, replayed = foreach_batches(out)
    each = check_changelog(each_rows, final, "foreachBatch sink")
    # (the two queries cut their batches at different positions, so a change one of them
    # took with a chunk may be a streamed change in the other: the counts may differ)
    for counts in (files, each):
        assert counts["update_preimage"] > 0 and counts["delete"] > 0, counts
    phases = [h["phase"] for h in hits]
    assert phases.count("streaming") >= 1 and len(phases) - phases.count("streaming") >= 1, hits
    hits.append({"replays_identical": replayed})  # kills between a batch's write and commit
    return hits


@pytest.mark.faults  # about 2 minutes: make test keeps tests/pipeline/test_kill.py's kills
@pytest.mark.timeout(1200)  # three JVM starts; minutes each on a loaded machine
def test_sigkill_at_random_points_fast(mariadb, db, tmp_path):
    """Two kills, one in each phase: the quick check of the loop below."""
    hits = _kill_loop(mariadb, db, tmp_path, kills=2, seed=SEED)
    print("kill points:", *hits, sep="\n  ")


@pytest.mark.faults
@pytest.mark.timeout(3600)  # 21 JVM starts: ~12 min on an idle 2-core machine, more if loaded
def test_sigkill_at_20_random_points(mariadb, db, tmp_path):
    hits = _kill_loop(mariadb, db, tmp_path, kills=20, seed=SEED + 1)
    print("kill points:", *hits, sep="\n  ")


@pytest.mark.faults
@pytest.mark.timeout(1200)  # four JVM starts
def test_sigkill_inside_the_sink_at_chosen_batches(mariadb, db, tmp_path):
    """The driver killed at two chosen points, from inside the foreachBatch sink after it
    wrote the batch and before Spark logged the batch as committed: a snapshot batch, then
    the first stream batch. Each rerun must replay the killed batch byte for byte (the
    foreachBatch sink keeps every attempt), and both sinks must hold every change once."""
    rows = 12_000
    make_table(mariadb, db, rows)
    opts = source_options(mariadb, db, **{"scan.incremental.snapshot.chunk.size": "1500",
                                          "maxRowsPerBatch": "3000"})
    out = tmp_path / "out"
    args = {"options": opts, "out": str(out)}
    with Writers(mariadb, db, rows, n=1, pause=0.02):
        r1 = run_child({**args, "crash_batch": 2})  # inside the snapshot
        assert r1.returncode == -9, r1.stderr[-3000:]
        r2 = run_child(args)  # finishes the snapshot, replays batch 2
        assert r2.returncode == 0, r2.stderr[-3000:]
        # the next batch id: the first batch after the snapshot, a stream batch
        batches_done = len(list((out / "foreach").glob("batch=*")))
        r3 = run_child({**args, "crash_batch": batches_done})
        assert r3.returncode == -9, r3.stderr[-3000:]
    r4 = run_child(args)  # writers stopped: catch up to the final position
    assert r4.returncode == 0, r4.stderr[-3000:]
    final = table_state(mariadb, db)
    check_changelog(file_sink_rows(out / "files"), final, "file sink")
    each, replayed = foreach_batches(out)
    assert replayed >= 2, replayed  # one replay in the snapshot phase, one in the stream phase
    check_changelog(each, final, "foreachBatch sink")
