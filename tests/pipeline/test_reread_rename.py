"""A table renamed during its snapshot, under writes, into a name routed to the same target:
the table is taken again under its new name from an emptied target (docs/algorithm.md
"Reading a table again"), and once the writer stops its target equals the renamed table,
compared row by row.

The pipeline runs as a user runs it (``sparkcdc run``, its own process), its snapshot
slowed to 100 rows a batch; ``a`` and ``a2`` route to one target; ``a`` is renamed to
``a2`` while in its snapshot, while a writer deletes, re-inserts, updates and re-keys rows
of both tables (``a``'s under its name of the moment). Before, a chunk of ``a`` read after
the RENAME failed the batch (1146, the table does not exist); the loop then saw ``a`` gone
and ``a2`` new, marked ``a`` dropped and snapshotted ``a2`` as a new table into the same
target without emptying it, so rows the writer deleted meanwhile stayed there."""

from __future__ import annotations

import os
import sys

import pytest
from cli_support import run_tail, running, wait_for
from pipeline_support import source_yaml
from reread_support import ROWS, Target, Writer, make_tables, mark, source_rows

pytestmark = pytest.mark.faults  # minutes of a run under writes: make test-faults


@pytest.mark.parametrize("kind", ["delta", "postgres", "kafka"])
def test_a_rename_during_the_snapshot_takes_the_table_again_under_writes(
        kind, mariadb, db, tmp_path, request):
    make_tables(mariadb, db)
    target = Target(kind, request, tmp_path, db)
    ckpt, yaml_path = tmp_path / "ckpt", tmp_path / "p.yaml"
    yaml_path.write_text(
        source_yaml(mariadb, db + ".\\.*", 10)
        + "  scan.incremental.snapshot.chunk.size: 50\n"
        + "sink:\n" + target.yaml()
        + f"""route:
  - source-table: {db}.a2?
    sink-table: {target.out}.a
  - source-table: {db}.b
    sink-table: {target.out}.b
pipeline:
  name: rename
  parallelism: 1
  checkpoint.location: {ckpt}
  trigger.interval: 1s
  max-rows-per-batch: 100
""")
    env = {**os.environ, "TEST_PW": mariadb.info.cdc_password, "PYSPARK_PYTHON": sys.executable}
    writer = Writer(mariadb, db, seed=23)
    try:
        with running(yaml_path, env, tmp_path / "run.log", ckpt) as log:
            writer.start()
            wait_for(lambda: len(target.rows("a")) >= 200, 240,
                     f"part of a's snapshot\n{run_tail(log, ckpt)}")
            assert len(target.rows("a")) < ROWS  # in its snapshot
            with writer.lock:
                mariadb.execute("RENAME TABLE a TO a2", database=db)
                writer.names["a"] = "a2"
            wait_for(lambda: mark(ckpt, f"{db}.a2")[2], 300,
                     f"a2's snapshot done\n{run_tail(log, ckpt)}")
            writer.finish()
            assert writer.ops.get("delete", 0) > 10 and writer.ops.get("rekey", 0) > 5, \
                writer.ops
            for t, source in (("a", "a2"), ("b", "b")):
                wait_for(lambda t=t, s=source: target.rows(t) == source_rows(mariadb, db, s),
                         120, f"{t} equal to its source\n{run_tail(log, ckpt)}")
            log.seek(0)
            assert "taken again (renamed during its snapshot)" in log.read(), \
                run_tail(log, ckpt)
    finally:
        writer.stop()
    for t, source in (("a", "a2"), ("b", "b")):  # once more, the run stopped
        got, want = target.rows(t), source_rows(mariadb, db, source)
        assert got == want, (t, sorted(set(got.items()) ^ set(want.items()))[:20])
    assert mark(ckpt, f"{db}.b")[0] == 0  # the other table was not taken again
    if kind == "kafka":  # emptied: a truncate event of the table, before a2's rows
        assert target.truncates("a") >= 1 and target.truncates("b") == 0
