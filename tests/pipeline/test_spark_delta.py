"""A pipeline into Delta written by Spark's own Delta (the sink's ``writer: spark``;
sinks/delta/spark_writer.py, pipeline/run/task_frames.py): delta-spark appends the
snapshot's rows and MERGEs the changes, with deletion vectors, each batch's id as Delta's
app transaction.

It needs Delta Lake in the pipeline's Spark session: delta-spark 4.4 runs on PySpark 4.2
and no release on 4.3, so the test carries the marker ``spark_delta`` and runs in
``make test-compat``'s PySpark 4.2 cell, with the jars scripts/fetch_jars.sh fetched into
.jars/delta. ``sparkcdc run`` runs as a user runs it, in a process of its own (its Spark
session given Delta in the YAML's ``spark`` section).

Two tables are snapshotted while a writer inserts, updates, deletes, re-inserts and
re-keys rows; then more of those changes, and a column added between them. Each target equals its source row by row, read
by delta-rs (DataFusion, which applies deletion vectors) and by another Spark process
with delta-spark; every commit after the table's creation was Spark's, the MERGEs marked
rows in deletion vectors, and no row went through sparkcdc's own writers. A micro-batch
replayed after its commit (its record in Spark's checkpoint removed) commits nothing."""

from __future__ import annotations

import glob
import os
from pathlib import Path

import pytest
from pipeline_support import source_yaml
from reread_support import ROWS, Writer
from server_support import seq
from sink_support import read_delta
from spark_delta_support import DELTA_JARS, NO_JARS, commits, run, spark_read, spark_yaml

pytestmark = pytest.mark.spark_delta


def write_yaml(path: Path, mariadb, db: str, lake: Path, ckpt: Path) -> None:
    path.write_text(source_yaml(mariadb, db + ".\\.*", 3) + f"""\
  scan.incremental.snapshot.chunk.size: 500
sink:
  type: delta
  path: {lake}
  writer: spark
pipeline:
  name: sparkdelta
  parallelism: 2
  max-rows-per-batch: 600
  checkpoint.location: {ckpt}
{spark_yaml()}""")


def source_rows(mariadb, db: str, t: str) -> dict:
    return {r[0]: (r[1], r[2]) for r in mariadb.query(f"SELECT id, v, s FROM `{db}`.`{t}`")}


def by_key(rows: list[dict]) -> dict:
    out = {int(r["id"]): (r["v"], r["s"]) for r in rows}
    assert len(out) == len(rows), "a key is held twice"
    return out


def spark_rows(tmp: Path, *paths: Path) -> list[dict]:
    """The tables as another Spark process with delta-spark reads them."""
    return [by_key(rows) for rows in spark_read(tmp, *paths)]


@pytest.mark.timeout(1800)  # five runs of `sparkcdc run`, each its own JVM
def test_spark_delta_appends_the_snapshot_and_merges_the_changes(mariadb, db, tmp_path):
    assert DELTA_JARS, NO_JARS
    for t in "ab":
        mariadb.execute(f"CREATE TABLE {t} (id INT PRIMARY KEY, v INT, s VARCHAR(10))",
                        f"INSERT INTO {t} SELECT seq, seq, 'init' FROM {seq(mariadb, ROWS)}",
                        database=db)
    yaml_path, lake = tmp_path / "p.yaml", tmp_path / "lake"
    write_yaml(yaml_path, mariadb, db, lake, tmp_path / "ckpt")
    roots = {t: lake / db / t for t in "ab"}

    # the snapshots under writes, then the writes' last changes
    writer = Writer(mariadb, db, seed=50)
    writer.start()
    try:
        logged = run(yaml_path, mariadb, tmp_path)
    finally:
        writer.finish()
    logged += run(yaml_path, mariadb, tmp_path)
    assert by_key(read_delta(roots["b"], ["id", "v", "s"]).to_pylist()) == \
        source_rows(mariadb, db, "b")
    assert len(read_delta(roots["a"]).to_pylist()) == len(source_rows(mariadb, db, "a"))
    versions = {t: len(commits(roots[t])) for t in "ab"}

    # updates, deletes, re-inserts and key-changing updates: MERGEd
    writer = Writer(mariadb, db, seed=51)
    writer.next_key = 100_000
    writer.start()
    try:
        writer.join(4)
    finally:
        writer.finish()
    assert writer.ops.get("delete", 0) > 5 and writer.ops.get("update", 0) > 10, writer.ops
    assert writer.ops.get("rekey", 0) > 0, writer.ops
    logged += run(yaml_path, mariadb, tmp_path)

    by_spark = dict(zip("ab", spark_rows(tmp_path, roots["a"], roots["b"])))
    for t in "ab":
        want = source_rows(mariadb, db, t)
        assert by_key(read_delta(roots[t], ["id", "v", "s"]).to_pylist()) == want, t
        assert by_spark[t] == want, t  # readers agree
        log = commits(roots[t])
        engines = {a["commitInfo"].get("engineInfo", "") for c in log[1:] for a in c
                   if "commitInfo" in a}
        assert engines and all(e.startswith("Apache-Spark") for e in engines), engines
        ops = [a["commitInfo"]["operation"] for c in log for a in c if "commitInfo" in a]
        assert "MERGE" in ops and "WRITE" in ops, ops  # appends and merges
        props = next(a["metaData"]["configuration"] for c in log for a in c if "metaData" in a)
        assert props.get("delta.enableDeletionVectors") == "true", props
        marked = [a["add"] for c in log[versions[t]:] for a in c
                  if "add" in a and a["add"].get("deletionVector")]
        assert marked, f"{t}: the MERGEs marked no row in a deletion vector"
        txns = [a["txn"] for c in log for a in c if "txn" in a]
        # one app id, the one sparkcdc's own writers record (and #files for appends that
        # came before the rest of their batch): last_batch_id and status read it
        assert len({x["appId"].removesuffix("#files") for x in txns}) == 1, txns
    assert "by Spark's writer" in logged
    assert "written by the tasks" not in logged  # not sparkcdc's own Delta writers
    assert " task(s): " not in logged  # nor the key slices

    # a micro-batch replayed after its commit: skipped, nothing committed again
    done = sorted(glob.glob(str(tmp_path / "ckpt" / "**" / "commits" / "*"), recursive=True),
                  key=lambda p: (os.path.dirname(p), int(os.path.basename(p))
                                 if os.path.basename(p).isdigit() else -1))
    last = [p for p in done if os.path.basename(p).isdigit()][-1]
    os.remove(last)  # and its checksum, or Spark cannot write the commit again
    os.remove(os.path.join(os.path.dirname(last), f".{os.path.basename(last)}.crc"))
    before = {t: len(commits(roots[t])) for t in "ab"}
    replayed = run(yaml_path, mariadb, tmp_path)
    assert "skipped (has the batch)" in replayed, replayed[-3000:]
    assert {t: len(commits(roots[t])) for t in "ab"} == before
    for t in "ab":
        assert by_key(read_delta(roots[t], ["id", "v", "s"]).to_pylist()) == \
            source_rows(mariadb, db, t), t

    # a column added between changes: that batch of a takes the driver's path, and Spark
    # adds the column (ALTER TABLE) and merges the rows, back-filled ones too
    mariadb.execute("UPDATE a SET v = v + 1 WHERE id % 50 = 0",
                    "ALTER TABLE a ADD COLUMN d INT NOT NULL DEFAULT 7",
                    "UPDATE a SET d = 8 WHERE id % 40 = 0", "DELETE FROM a WHERE id % 45 = 0",
                    database=db)
    run(yaml_path, mariadb, tmp_path)
    got = read_delta(roots["a"], ["id", "v", "s", "d"]).to_pylist()
    assert {r["id"]: (r["v"], r["s"], r["d"]) for r in got} == {
        r[0]: tuple(r[1:]) for r in mariadb.query(f"SELECT id, v, s, d FROM `{db}`.a")}
    added = [a["commitInfo"]["operation"] for c in commits(roots["a"]) for a in c
             if "commitInfo" in a]
    assert "ADD COLUMNS" in added, added
