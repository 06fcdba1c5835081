"""A batch's changes written into Delta by Spark tasks that each own a slice of the keys,
with deletion vectors (pipeline/run/task_changes.py, sinks/delta/changes.py): no change row
through the driver, and the files that held changed rows are marked, not rewritten.

Two tables are snapshotted into Delta, then a writer updates, deletes, re-inserts and
re-keys rows all over them, and a column is added to one of them between its changes (that
batch takes the driver's path). Each target equals its source, read by delta-rs' scan and
by the log read here on its own (the deletion vectors decoded from the protocol's text);
the change commits came from the tasks, mark rows in files the snapshot wrote and wrote a
small part of the table."""

from __future__ import annotations

import json
import logging
import re
from pathlib import Path

import pytest
from pipeline_support import source_yaml
from reread_support import Writer
from server_support import seq
from sink_support import delta_log_rows, read_delta

from sparkcdc.pipeline.definition import parse_pipeline
from sparkcdc.pipeline.run.loop import Runner

ROWS = 1500  # per table, as reread_support's writer expects


def source_rows(mariadb, db, table, cols=("v", "s")) -> dict:
    return {r[0]: tuple(r[1:]) for r in mariadb.query(
        f"SELECT id, {', '.join(cols)} FROM `{db}`.`{table}`")}


def target_rows(root: Path, cols=("v", "s")) -> dict:
    got = read_delta(root, ["id", *cols]).to_pylist()
    assert len(got) == len({r["id"] for r in got}), "a key is held twice"
    out = {r["id"]: tuple(r[c] for c in cols) for r in got}
    by_log = {r["id"]: tuple(r[c] for c in cols) for r in delta_log_rows(root, ["id", *cols])}
    assert by_log == out, "the log read on its own disagrees with delta-rs"
    return out


def commits(root: Path) -> list[list[dict]]:
    return [[json.loads(line) for line in f.read_text().splitlines()]
            for f in sorted((root / "_delta_log").glob("*.json"))]


@pytest.mark.long
def test_changes_are_written_by_key_slices_with_deletion_vectors(spark, mariadb, db,
                                                                 tmp_path, caplog):
    for t in "ab":
        mariadb.execute(f"CREATE TABLE {t} (id INT PRIMARY KEY, v INT, s VARCHAR(10))",
                        f"INSERT INTO {t} SELECT seq, seq, 'init' FROM {seq(mariadb, ROWS)}",
                        database=db)
    source = source_yaml(mariadb, db + ".\\.*", 3)
    defn = parse_pipeline(f"""
{source}  scan.incremental.snapshot.chunk.size: 750
sink:
  type: delta
  path: {tmp_path}/lake
pipeline:
  name: slices
  parallelism: 2
  max-rows-per-batch: 750
  checkpoint.location: {tmp_path}/ckpt
""", "slices.yaml", env={"TEST_PW": mariadb.info.cdc_password})
    # the snapshots, as files of the tasks, under writes: a batch carries a chunk's new rows
    # (files, committed first) and changes to chunks read before (the slices, after)
    writer = Writer(mariadb, db, seed=30)
    writer.start()
    caplog.set_level(logging.INFO, logger="sparkcdc.pipeline")
    try:
        Runner(defn, spark, until_caught_up=True).run()
    finally:
        writer.finish()
    sent = [tuple(map(int, m.groups())) for m in
            (re.search(r"(\d+) row\(s\) written by the tasks as \d+ file\(s\), (\d+) bytes "
                       r"to the driver", r.getMessage()) for r in caplog.records) if m]
    rows, bytes_ = sum(x[0] for x in sent), sum(x[1] for x in sent)
    assert rows >= 2 * ROWS * 0.9, sent  # the snapshots, as files of the tasks
    assert bytes_ < rows, (bytes_, rows)  # under a byte per row written
    caplog.clear()
    Runner(defn, spark, until_caught_up=True).run()
    roots = {t: tmp_path / "lake" / db / t for t in "ab"}
    together = 0  # batches that carried a chunk's new rows and changes: one commit each
    for t in "ab":
        txns = [[a["txn"] for a in c if "txn" in a] for c in commits(roots[t])]
        files_only = {x["version"] for c in txns if len(c) == 1
                      and c[0]["appId"].endswith("#files") for x in c}
        own = {x["version"] for c in txns for x in c if not x["appId"].endswith("#files")}
        assert files_only <= own, f"{t}: batches {sorted(files_only - own)} lost their rest"
        together += sum(1 for c in commits(roots[t])
                        if {a["txn"]["appId"].endswith("#files") for a in c if "txn" in a}
                        == {True, False} and any(
                            "add" in a and a["add"].get("deletionVector") for a in c))
        assert target_rows(roots[t]) == source_rows(mariadb, db, t)
    assert together, "no batch carried both a chunk's new rows and changes"
    for t in "ab":
        assert target_rows(roots[t]) == source_rows(mariadb, db, t)
    sizes = {t: sum(f.stat().st_size for f in roots[t].rglob("*.parquet")) for t in "ab"}
    versions = {t: len(commits(roots[t])) for t in "ab"}

    writer = Writer(mariadb, db, seed=31)
    writer.next_key = 100_000  # past the first writer's new keys
    writer.start()
    try:
        writer.join(4)  # about 200 changes over both tables
    finally:
        writer.finish()
    assert writer.ops.get("delete", 0) > 5 and writer.ops.get("update", 0) > 10, writer.ops
    Runner(defn, spark, until_caught_up=True).run()

    for t in "ab":
        assert target_rows(roots[t]) == source_rows(mariadb, db, t)
        new = commits(roots[t])[versions[t]:]
        by_tasks = [c for c in new if any(a.get("commitInfo", {}).get("engineInfo") == "sparkcdc"
                                          for a in c)]
        assert by_tasks, f"no commit of {t}'s changes came from the tasks"
        marked = [a["add"] for c in by_tasks for a in c
                  if "add" in a and a["add"].get("deletionVector")]
        assert marked, "no stored file was marked"
        # a file is removed whole only when the batch left purge-deleted-share (0.2) of it
        # deleted: its task wrote the rest into the slice's new files (the batch's changes
        # and the deletes marked before are at least a fifth of its rows)
        removed_whole = [a["remove"] for c in by_tasks for a in c
                         if "remove" in a and a["remove"]["dataChange"] and not any(
                             "add" in b and b["add"]["path"] == a["remove"]["path"] for b in c)]
        adds = {a["add"]["path"]: a["add"] for c in commits(roots[t]) for a in c if "add" in a}
        for r in removed_whole:
            n = json.loads(adds[r["path"]]["stats"])["numRecords"]
            before = (r.get("deletionVector") or {}).get("cardinality", 0)
            assert before + sum(writer.ops.values()) >= 0.2 * n, (r, n, writer.ops)
        written = sum(f.stat().st_size for f in roots[t].rglob("*")
                      if f.is_file() and f.suffix in (".parquet", ".bin")) - sizes[t]
        assert written < sizes[t], (written, sizes[t])  # the change, not the table again
    done = [m for m in (re.search(r"-> .* from (\d+) task\(s\)", r.getMessage())
                        for r in caplog.records) if m]
    assert done, "no batch's changes were written by the tasks"
    assert not [r for r in caplog.records if "-> delta sink:" in r.getMessage()], \
        "changes went through the driver's merge"

    # a column added between changes: that batch of a takes the driver's path whole
    mariadb.execute("UPDATE a SET v = v + 1 WHERE id % 50 = 0",
                    "ALTER TABLE a ADD COLUMN d INT NOT NULL DEFAULT 7",
                    "UPDATE a SET d = 8 WHERE id % 40 = 0", "DELETE FROM a WHERE id % 45 = 0",
                    "UPDATE b SET v = -v WHERE id % 30 = 0", database=db)
    Runner(defn, spark, until_caught_up=True).run()
    assert target_rows(roots["a"], ("v", "s", "d")) == source_rows(mariadb, db, "a",
                                                                   ("v", "s", "d"))
    assert target_rows(roots["b"]) == source_rows(mariadb, db, "b")
