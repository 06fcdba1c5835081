"""A pipeline into Iceberg written by Spark tasks (pipeline/run/task_files.py,
task_changes.py; sinks/iceberg/changes.py, commit.py): the snapshots as data files of the
tasks that read them, then changes by key slices, merge-on-read: new rows plus position
delete files, no stored file rewritten.

Two tables are snapshotted under a writer, then the writer updates, deletes, re-inserts
and re-keys rows all over them, and a column is added to one of them between its changes
(that batch takes the driver's path). Each target equals its source row by row, read by
pyiceberg and by iceberg-rust (tests/support/iceberg_support.py); the change snapshots came from
the tasks and added delete files, not rewrites, and wrote a small part of the table; after
compaction (deletes applied, delete files dropped) both readers still read the source.

Four runs of a pipeline (minutes): it runs in make test-faults, as the SQL staging tables'
pipeline test does (make test's budget); tests/pipeline/test_ddl.py runs Iceberg pipelines
through this path in make test, and tests/sinks/iceberg/ its parts."""

from __future__ import annotations

import logging
import re

import pytest
from iceberg_support import by_iceberg_rust, by_pyiceberg, rows
from pipeline_support import source_yaml
from reread_support import Writer
from server_support import seq

from sparkcdc import sinks
from sparkcdc.pipeline.definition import parse_pipeline
from sparkcdc.pipeline.run.loop import Runner
from sparkcdc.sinks.iceberg import files

ROWS = 1500  # per table, as reread_support's writer expects


def source_rows(mariadb, db, table, cols=("v", "s")) -> dict:
    return {r[0]: tuple(r[1:]) for r in mariadb.query(
        f"SELECT id, {', '.join(cols)} FROM `{db}`.`{table}`")}


def target_rows(sink, cols=("v", "s")) -> dict:
    t = sink._table()
    names = ["id", *cols]
    a, b = by_pyiceberg(t), by_iceberg_rust(t)
    assert rows(a, names) == rows(b, names), "pyiceberg and iceberg-rust disagree"
    got = a.to_pylist()
    assert len(got) == len({r["id"] for r in got}), "a key is held twice"
    return {r["id"]: tuple(r[c] for c in cols) for r in got}


@pytest.mark.faults
def test_iceberg_snapshot_files_and_changes_from_tasks(spark, mariadb, db, tmp_path, caplog):
    for t in "ab":
        mariadb.execute(f"CREATE TABLE {t} (id INT PRIMARY KEY, v INT, s VARCHAR(10))",
                        f"INSERT INTO {t} SELECT seq, seq, 'init' FROM {seq(mariadb, ROWS)}",
                        database=db)
    source = source_yaml(mariadb, db + ".\\.*", 3)
    defn = parse_pipeline(f"""
{source}  scan.incremental.snapshot.chunk.size: 750
sink:
  type: iceberg
  warehouse: {tmp_path}/lake
pipeline:
  name: slices
  parallelism: 2
  max-rows-per-batch: 750
  checkpoint.location: {tmp_path}/ckpt
""", "slices.yaml", env={"TEST_PW": mariadb.info.cdc_password})
    targets = {t: sinks.create("iceberg", {"warehouse": f"{tmp_path}/lake",
                                           "table": f"{db}.{t}"}) for t in "ab"}
    writer = Writer(mariadb, db, seed=40)
    writer.start()
    caplog.set_level(logging.INFO, logger="sparkcdc.pipeline")
    try:
        Runner(defn, spark, until_caught_up=True).run()
    finally:
        writer.finish()
    sent = [tuple(map(int, m.groups())) for m in
            (re.search(r"(\d+) row\(s\) written by the tasks as \d+ file\(s\), (\d+) bytes "
                       r"to the driver", r.getMessage()) for r in caplog.records) if m]
    written = sum(x[0] for x in sent)
    assert written >= 2 * ROWS * 0.9, sent  # the snapshots, as files of the tasks
    assert sum(x[1] for x in sent) < 2 * written, sent  # a file's description per 750 rows
    Runner(defn, spark, until_caught_up=True).run()
    for t in "ab":
        assert target_rows(targets[t]) == source_rows(mariadb, db, t)
    before = {t: {s.snapshot_id for s in targets[t]._table().snapshots()} for t in "ab"}
    sizes = {t: sum(f.stat().st_size for f in
                    files.local(targets[t]._table().location()).rglob("*.parquet"))
             for t in "ab"}

    writer = Writer(mariadb, db, seed=41)
    writer.next_key = 100_000  # past the first writer's new keys
    writer.start()
    caplog.clear()
    try:
        writer.join(4)  # about 200 changes over both tables
    finally:
        writer.finish()
    assert writer.ops.get("delete", 0) > 5 and writer.ops.get("update", 0) > 10, writer.ops
    Runner(defn, spark, until_caught_up=True).run()
    for t in "ab":
        assert target_rows(targets[t]) == source_rows(mariadb, db, t)
        new = [s for s in targets[t]._table().snapshots() if s.snapshot_id not in before[t]]
        by_tasks = [s for s in new if s.summary.get("sparkcdc.written-by") == "tasks"]
        assert by_tasks, f"no snapshot of {t}'s changes came from the tasks"
        # (pyiceberg's Summary.get takes no default: a snapshot without the key gives None)
        assert sum(int(s.summary.get("added-position-deletes") or 0) for s in by_tasks), \
            "no stored row was marked by a position delete"
        # a data file is removed only when the batch left purge-deleted-share (0.2) of it
        # deleted: its task wrote the rest into the slice's new files (the batch's changes
        # and the positions deleted before are at least a fifth of its rows), not a
        # copy-on-write of every file a change touched
        for snap in by_tasks:
            for n, dead_before in _removed_files(targets[t]._table(), snap):
                assert dead_before + sum(writer.ops.values()) >= 0.2 * n, (
                    n, dead_before, writer.ops)
        grown = sum(f.stat().st_size for f in files.local(
            targets[t]._table().location()).rglob("*.parquet")) - sizes[t]
        assert grown < sizes[t], (grown, sizes[t])  # the change, not the table again
    assert [r for r in caplog.records if re.search(r"-> .* from \d+ task\(s\)", r.getMessage())]

    # a column added between changes: that batch of a takes the driver's path whole
    mariadb.execute("UPDATE a SET v = v + 1 WHERE id % 50 = 0",
                    "ALTER TABLE a ADD COLUMN d INT NOT NULL DEFAULT 7",
                    "UPDATE a SET d = 8 WHERE id % 40 = 0", "DELETE FROM a WHERE id % 45 = 0",
                    "UPDATE b SET v = -v WHERE id % 30 = 0", database=db)
    Runner(defn, spark, until_caught_up=True).run()
    assert target_rows(targets["a"], ("v", "s", "d")) == source_rows(mariadb, db, "a",
                                                                      ("v", "s", "d"))
    assert target_rows(targets["b"]) == source_rows(mariadb, db, "b")
    # compaction as the pipeline runs it (every compact-every batches): deletes applied
    had = {t: sum(len(x.delete_files) for x in targets[t]._table().scan().plan_files())
           for t in "ab"}
    assert any(had.values()), "no delete file left for compaction to apply"
    for t in "ab":
        n = targets[t].compact(10**6)
        assert n > 0 or not had[t], (t, had)
        assert not any(x.delete_files for x in targets[t]._table().scan().plan_files())
    assert target_rows(targets["a"], ("v", "s", "d")) == source_rows(mariadb, db, "a",
                                                                      ("v", "s", "d"))
    assert target_rows(targets["b"]) == source_rows(mariadb, db, "b")


def _removed_files(table, snap) -> list[tuple[int, int]]:
    """The data files ``snap`` removed: each one's rows and how many of them the delete
    files it removed with it (file-scoped: its own) had deleted before."""
    from pyiceberg.manifest import ManifestContent, ManifestEntryStatus

    data, dead = {}, {}
    for m in snap.manifests(table.io):
        for e in m.fetch_manifest_entry(table.io, discard_deleted=False):
            if e.status != ManifestEntryStatus.DELETED or e.snapshot_id != snap.snapshot_id:
                continue
            f = e.data_file
            if m.content == ManifestContent.DATA:
                data[f.file_path] = f.record_count
            else:
                of = (f.lower_bounds or {}).get(2147483546, b"").decode()
                dead[of] = dead.get(of, 0) + f.record_count
    return [(n, dead.get(p, 0)) for p, n in data.items()]

