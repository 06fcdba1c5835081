"""A new primary key during a table's snapshot takes the table again from an emptied
target (docs/algorithm.md "Reading a table again"), while a writer deletes, re-inserts,
updates and re-keys rows all over both tables: once the writer stops, each target equals
its source, compared row by row.

The pipeline runs as a user runs it (``sparkcdc run``, its own process), its snapshot
slowed to 100 rows a batch; the key of ``a`` becomes ``(id, s)`` while ``a`` is in its
snapshot, so the writer's updates (which set ``s``) change keys from then on. The table's
next generation proves the change met its snapshot (after the snapshot, a new key reads
nothing again). The Kafka target is "emptied" by a truncate event, which its replay
honours; before, the kafka sink stopped the run (a changelog cannot be emptied). Before
too, the running stream kept reading the table by its old key (its members file gave the
new schema only to tables new to it), so an update of ``s`` reached the targets as an
update of one key, and the old row stayed: "a key is held twice".

On PostgreSQL, before, the target kept the old key's constraint and the first merge by the
new key failed (ON CONFLICT had no matching unique constraint); its primary key now follows
the new key (tests/sinks/test_sql_rekey.py)."""

from __future__ import annotations

import os
import sys

import pytest
from cli_support import run_tail, running, wait_for
from pipeline_support import source_yaml
from reread_support import ROWS, Target, Writer, make_tables, mark, pipeline_yaml, source_rows


@pytest.mark.long
@pytest.mark.parametrize("kind", ["kafka", pytest.param("delta", marks=pytest.mark.faults),
                                  pytest.param("postgres", marks=pytest.mark.faults)])
def test_a_new_primary_key_during_the_snapshot_retakes_the_table_under_writes(
        kind, mariadb, db, tmp_path, request):
    make_tables(mariadb, db)
    target = Target(kind, request, tmp_path, db)
    ckpt, yaml_path = tmp_path / "ckpt", tmp_path / "p.yaml"
    yaml_path.write_text(pipeline_yaml(source_yaml(mariadb, db + ".\\.*", 10), target, ckpt)
                         + "  max-rows-per-batch: 100\n")
    env = {**os.environ, "TEST_PW": mariadb.info.cdc_password, "PYSPARK_PYTHON": sys.executable}
    a = f"{db}.a"
    writer = Writer(mariadb, db, seed=11 + len(kind))
    try:
        with running(yaml_path, env, tmp_path / "run.log", ckpt) as log:
            writer.start()
            wait_for(lambda: len(target.rows("a")) >= 200, 240,
                     f"part of a's snapshot\n{run_tail(log, ckpt)}")
            assert len(target.rows("a")) < ROWS  # in its snapshot
            mariadb.execute("ALTER TABLE a DROP PRIMARY KEY, ADD PRIMARY KEY (id, s)",
                            database=db)
            wait_for(lambda: mark(ckpt, a)[0] >= 1 and mark(ckpt, a)[2], 300,
                     f"a taken again\n{run_tail(log, ckpt)}")
            writer.finish()
            assert writer.ops.get("delete", 0) > 10 and writer.ops.get("rekey", 0) > 5, \
                writer.ops
            for t in "ab":
                wait_for(lambda t=t: target.rows(t) == source_rows(mariadb, db, t), 120,
                         f"{t} equal to its source\n{run_tail(log, ckpt)}")
    finally:
        writer.stop()
    for t in "ab":  # once more, the run stopped
        got, want = target.rows(t), source_rows(mariadb, db, t)
        assert got == want, (t, sorted(set(got.items()) ^ set(want.items()))[:20])
    assert mark(ckpt, f"{db}.b")[0] == 0  # the other table was not taken again
    if kind == "kafka":
        assert target.truncates("a") >= 1 and target.truncates("b") == 0
