"""A table whose binlog was purged while the pipeline was stopped is taken again from an
emptied target (``binlog.purged.behavior: resnapshot``) while a writer deletes, re-inserts,
updates and re-keys rows all over both tables: once the writer stops, each target equals
its source, compared row by row (docs/algorithm.md "Reading a table again").

A dedicated MariaDB (PURGE BINARY LOGS must not pull the binlog from under other tests'
checkpoints). The pipeline runs as a user runs it (``sparkcdc run``, its own process): it
snapshots both tables and stops; rows are deleted and changed, the binlog moves to a new
file and the file the checkpoint stands in is purged; the pipeline starts again with the
writer going on. The Kafka target is "emptied" by a truncate event per table, which its
replay honours; before, the kafka sink stopped the run (a changelog cannot be emptied)."""

from __future__ import annotations

import os
import sys

import pytest
from cli_support import run_tail, running, wait_for
from pipeline_support import source_yaml
from reread_support import (
    Target,
    Writer,
    binlog_files,
    make_tables,
    mark,
    pipeline_yaml,
    purge_to,
    source_rows,
)

from sparkcdc.pipeline.run.checkpoint import Checkpoint
from sparkcdc.testing.mariadb import MariaDBSandbox


@pytest.fixture(scope="module")
def server():
    with MariaDBSandbox(name="purge-reread") as sb:
        yield sb


@pytest.mark.faults  # a MariaDB of its own and two runs: make test-faults
@pytest.mark.parametrize("kind", ["delta", "postgres", "kafka"])
def test_a_purged_binlog_resnapshots_under_writes_to_target_equal_to_source(
        kind, server, tmp_path, request):
    db = f"purged_{kind}"
    server.execute(f"DROP DATABASE IF EXISTS {db}", f"CREATE DATABASE {db}")
    make_tables(server, db)
    target = Target(kind, request, tmp_path, db)
    ckpt, yaml_path = tmp_path / "ckpt", tmp_path / "p.yaml"
    yaml_path.write_text(pipeline_yaml(source_yaml(server, db + ".\\.*", 10), target, ckpt)
                         + "  binlog.purged.behavior: resnapshot\n")
    env = {**os.environ, "TEST_PW": server.info.cdc_password, "PYSPARK_PYTHON": sys.executable}
    with running(yaml_path, env, tmp_path / "run-1.log", ckpt) as log:
        for t in "ab":
            wait_for(lambda t=t: target.rows(t) == source_rows(server, db, t), 240,
                     f"the snapshot of {t}\n{run_tail(log, ckpt)}")
    before = {t: mark(ckpt, f"{db}.{t}") for t in "ab"}

    # stopped: changes the pipeline will never read (their binlog file is purged)
    server.execute("DELETE FROM a WHERE id <= 40", "UPDATE a SET v = -v WHERE id % 9 = 0",
                   "DELETE FROM b WHERE id % 11 = 0", database=db)
    first = binlog_files(server)[0]
    server.execute("FLUSH BINARY LOGS")
    purge_to(server, binlog_files(server)[-1])
    assert first not in binlog_files(server)

    def taken_again(t: str) -> bool:
        m = mark(ckpt, f"{db}.{t}")
        return m[0] > before[t][0] and m[2]

    writer = Writer(server, db, seed=7)
    writer.start()  # before the run starts: all through the new snapshots
    try:
        with running(yaml_path, env, tmp_path / "run-2.log", ckpt) as log:
            for t in "ab":
                wait_for(lambda t=t: taken_again(t), 240,
                         f"{t} taken again\n{run_tail(log, ckpt)}")
            writer.finish()
            assert writer.ops.get("delete", 0) > 10 and writer.ops.get("rekey", 0) > 5, \
                writer.ops
            for t in "ab":
                wait_for(lambda t=t: target.rows(t) == source_rows(server, db, t), 120,
                         f"{t} equal to its source\n{run_tail(log, ckpt)}")
    finally:
        writer.stop()
    for t in "ab":  # once more, the run stopped
        got, want = target.rows(t), source_rows(server, db, t)
        assert got == want, (t, sorted(set(got.items()) ^ set(want.items()))[:20])
    states = Checkpoint(ckpt).load_tables()
    assert {states[f"{db}.{t}"].note for t in "ab"} == {"resnapshot: binlog purged"}
    if kind == "kafka":
        assert target.truncates("a") >= 1 and target.truncates("b") >= 1
