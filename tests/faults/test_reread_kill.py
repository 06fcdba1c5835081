"""A table read again under writes (``sparkcdc snapshot``), its pipeline SIGKILLed (the whole
process group: CLI, JVM, Python workers) at seeded random moments of the re-read, then run
again: the target ends equal to the source, row by row, on merge sinks (Delta; Iceberg,
written by the tasks, read by pyiceberg and iceberg-rust, no file left that its metadata
does not name) and on a changelog sink (Kafka, read ``read_committed`` and replayed). The kill lands in a chunk's
task, a sink's write or between the write and Spark's commit, wherever the moment falls;
the request waits in the checkpoint, so the next run goes on with the re-read. Keys the
source never had, put into the merge target before, are gone with it."""

from __future__ import annotations

import os
import random
import signal
import time

import pytest
from cli_support import cli, wait_for
from faults_support import SEED
from iceberg_support import orphans
from reread_support import (
    STRAYS,
    KillableRun,
    Target,
    Writer,
    make_tables,
    mark,
    read_again,
    source_rows,
)


@pytest.mark.faults
@pytest.mark.timeout(1800)
@pytest.mark.parametrize("kind", ["delta", "iceberg", "kafka"])
def test_reread_killed_at_random_points_ends_equal_to_source(kind, mariadb, db, tmp_path,
                                                             request):
    rnd = random.Random(SEED + ["delta", "kafka", "iceberg"].index(kind))
    make_tables(mariadb, db)
    target = Target(kind, request, tmp_path, db)
    run = KillableRun(mariadb, db, target, tmp_path)
    ckpt, yaml_path, env, start = run.ckpt, run.yaml_path, run.env, run.start
    a = f"{db}.a"

    p = start(0)
    writer = Writer(mariadb, db, seed=rnd.randint(0, 10**6))
    try:
        wait_for(lambda: all(target.rows(t) == source_rows(mariadb, db, t) for t in "ab"), 240,
                 "the first snapshot")
        writer.start()
        if kind != "kafka":
            for k in STRAYS:  # each gone with its chunk's range, whichever run reads it
                target.add_stray("a", k)
        m = mark(ckpt, a)
        r = cli("snapshot", str(yaml_path), "--tables", f"{db}\\.a", env=env)
        assert r.returncode == 0, r.stdout + r.stderr
        for k in range(1, 4):  # three kills, each somewhere in the re-read
            time.sleep(rnd.uniform(0.5, 4.0))
            os.killpg(p.pid, signal.SIGKILL)
            p.wait()
            p = start(k)
        wait_for(lambda: read_again(ckpt, a, m), 600, "the table read again after the kills")
        writer.finish()
        for t in "ab":
            wait_for(lambda t=t: target.rows(t) == source_rows(mariadb, db, t), 180,
                     f"{t} equal to its source")
        p.send_signal(signal.SIGTERM)  # a clean stop: no attempt of a batch in flight
        p.wait(120)
    finally:
        writer.stop()
        if p.poll() is None:
            os.killpg(p.pid, signal.SIGKILL)
            p.wait()
    if kind == "iceberg":
        for t in "ab":
            assert orphans(target.iceberg(t)._table()) == [], f"{t}: files no snapshot names"
