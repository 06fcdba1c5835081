"""The paths of Spark's own Delta writer (the delta sink's ``writer: spark``;
sinks/delta/spark_writer.py) that tests/pipeline/test_spark_delta.py does not take: columns
dropped, renamed and retyped (with column mapping and without) and a TRUNCATE; SCD type 2
and tracked history; a table read again, whose chunks replace their key ranges; an empty
batch. Each target is judged against its source table's rows, read by delta-rs and by
another Spark process with delta-spark, and every commit after the table's creation must
be Spark's.

Marker ``spark_delta``: ``make test-compat``'s PySpark 4.2 cell, where delta-spark runs
(tests/support/spark_delta_support.py)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from decimal import Decimal
from itertools import pairwise
from pathlib import Path

import deltalake
import pytest
from cli_support import cli, run_tail, running, wait_for
from pipeline_support import source_yaml
from reread_support import Writer, mark, read_again
from server_support import seq
from spark_delta_support import (
    DELTA_CONF,
    DELTA_JARS,
    NO_JARS,
    engines,
    env_of,
    operations,
    rs_read,
    run,
    spark_read,
    spark_yaml,
)

pytestmark = pytest.mark.spark_delta


def pipeline_yaml(mariadb, db: str, tmp: Path, extra: str = "", chunk: int = 500,
                  trigger: str = "") -> str:
    return source_yaml(mariadb, db + ".\\.*", 10) + f"""\
  scan.incremental.snapshot.chunk.size: {chunk}
sink:
  type: delta
  path: {tmp}/lake
  writer: spark
{extra}pipeline:
  name: sparkdelta
  parallelism: 1
  checkpoint.location: {tmp}/ckpt
  schema.change.behavior: evolve
{trigger}{spark_yaml()}"""


def source_table(mariadb, db: str, table: str) -> dict:
    """The source table by its ``id``: each row as a dict of its columns."""
    cols = [r[0] for r in mariadb.query(
        "SELECT column_name FROM information_schema.columns WHERE table_schema = %s AND "
        "table_name = %s ORDER BY ordinal_position", (db, table))]
    return {r[0]: dict(zip(cols, r)) for r in mariadb.query(f"SELECT * FROM `{db}`.`{table}`")}


def by_id(rows: list[dict], columns=None) -> dict:
    out = {int(r["id"]): ({k: r[k] for k in columns} if columns else r) for r in rows}
    assert len(out) == len(rows), "a key is held twice"
    return out


def both_readers(tmp: Path, roots: dict[str, Path]) -> dict[str, tuple[list[dict], list[dict]]]:
    """Each target's rows as delta-rs and as delta-spark read them."""
    names = sorted(roots)
    by_spark = spark_read(tmp, *(roots[n] for n in names))
    return {n: (rs_read(roots[n]), by_spark[i]) for i, n in enumerate(names)}


def equal_to_source(got: dict[str, tuple[list[dict], list[dict]]], mariadb, db: str) -> None:
    """Each target, by both readers, holds its source table's rows, column for column."""
    for table, (rs, sp) in got.items():
        want = source_table(mariadb, db, table)
        assert by_id(rs) == want, (table, "delta-rs")
        assert by_id(sp) == want, (table, "delta-spark")


# -- columns dropped, renamed, retyped; a TRUNCATE ----------------------------------------

@pytest.mark.timeout(1200)
def test_schema_changes_are_made_by_spark_with_and_without_column_mapping(
        mariadb, db, tmp_path):
    """Table ``t``'s target has no column mapping: a drop or rename rewrites it (one
    overwrite replacing its schema); ``m``'s has column mapping (``name``): a drop and a
    rename are metadata. A retype rewrites both. A TRUNCATE empties ``tr``'s target by
    Spark's DELETE. ``e`` is empty: its target is made all the same, as sparkcdc's own
    writers make it."""
    assert DELTA_JARS, NO_JARS
    for t in ("t", "m"):
        mariadb.execute(f"CREATE TABLE {t} (id INT PRIMARY KEY, a INT, b VARCHAR(10), c INT, "
                        "d INT)",
                        f"INSERT INTO {t} SELECT seq, seq, CONCAT('b', seq), seq, seq "
                        f"FROM {seq(mariadb, 30)}", database=db)
    mariadb.execute("CREATE TABLE tr (id INT PRIMARY KEY, v INT)",
                    f"INSERT INTO tr SELECT seq, seq FROM {seq(mariadb, 5)}",
                    "CREATE TABLE e (id INT PRIMARY KEY, v VARCHAR(10))", database=db)
    transform = (f"transform:\n  - source-table: {db}.m\n"
                 "    table-options: delta.columnMapping.mode=name\n")
    yaml_path = tmp_path / "p.yaml"
    yaml_path.write_text(pipeline_yaml(mariadb, db, tmp_path, transform))
    roots = {t: tmp_path / "lake" / db / t for t in ("t", "m", "tr", "e")}
    run(yaml_path, mariadb, tmp_path)
    got = both_readers(tmp_path, roots)  # e's target: made, with its columns, and empty
    equal_to_source(got, mariadb, db)
    assert got["e"] == ([], [])
    assert [f.name for f in deltalake.DeltaTable(str(roots["e"])).schema().fields] == ["id", "v"]

    for t in ("t", "m"):
        mariadb.execute(f"UPDATE {t} SET a = 101 WHERE id = 1",
                        f"ALTER TABLE {t} RENAME COLUMN a TO a2, DROP COLUMN c, "
                        "ADD COLUMN e VARCHAR(10)",
                        f"INSERT INTO {t} VALUES (31, 31, 'b31', 31, 'e31')",
                        f"UPDATE {t} SET e = 'e2', a2 = 202 WHERE id = 2",
                        f"DELETE FROM {t} WHERE id = 3",
                        f"ALTER TABLE {t} MODIFY d BIGINT",
                        f"UPDATE {t} SET d = 5000000000 WHERE id = 4",
                        f"INSERT INTO {t} VALUES (32, 32, 'b32', 6000000000, NULL)",
                        database=db)
    mariadb.execute("UPDATE tr SET v = 50 WHERE id = 5", "TRUNCATE TABLE tr",
                    "INSERT INTO tr VALUES (9, 9)", "INSERT INTO e VALUES (1, 'x')", database=db)
    run(yaml_path, mariadb, tmp_path)

    got = both_readers(tmp_path, roots)
    equal_to_source(got, mariadb, db)
    for t in ("t", "m"):
        assert set(got[t][0][0]) == {"id", "a2", "b", "d", "e"}, t
        assert by_id(got[t][0])[4]["d"] == 5_000_000_000
        assert engines(roots[t]) and all(e.startswith("Apache-Spark") for e in engines(roots[t]))
    assert sorted(by_id(got["tr"][0])) == [9]
    ops = {t: operations(roots[t]) for t in roots}
    # column mapping: dropped and renamed in the table's metadata, not by a rewrite
    assert "DROP COLUMNS" in ops["m"] and "RENAME COLUMN" in ops["m"], ops["m"]
    assert "DROP COLUMNS" not in ops["t"] and "RENAME COLUMN" not in ops["t"], ops["t"]
    assert "ADD COLUMNS" in ops["t"] and "ADD COLUMNS" in ops["m"]
    assert "DELETE" in ops["tr"], ops["tr"]


# -- SCD type 2 and tracked history ------------------------------------------------------

def history(rows: list[dict]) -> dict[int, list[dict]]:
    """Each key's versions in ``__START_AT`` order, with the values besides the key."""
    out: dict[int, list[dict]] = {}
    for r in sorted(rows, key=lambda r: (int(r["id"]), Decimal(str(r["__START_AT"])))):
        out.setdefault(int(r["id"]), []).append(r)
    return out


def check_history(rows: list[dict], mariadb, db: str, table: str,
                  versions: dict[int, list[tuple[str, int]]]) -> None:
    """The target's open versions are the source's rows; each closed version ends where
    the next begins; ``versions``: the (name, n) of the keys whose history is checked."""
    got = history(rows)
    open_ = {k: {"id": k, "name": v[-1]["name"], "n": v[-1]["n"]}
             for k, v in got.items() if v[-1]["__END_AT"] is None}
    assert open_ == source_table(mariadb, db, table), table
    for k, vs in got.items():
        assert all(v["__END_AT"] is not None for v in vs[:-1]), (table, k, vs)
        for a, b in pairwise(vs):
            assert Decimal(str(a["__END_AT"])) == Decimal(str(b["__START_AT"])), (table, k)
    for k, want in versions.items():
        assert [(v["name"], v["n"]) for v in got.get(k, [])] == want, (table, k, got.get(k))


@pytest.mark.timeout(1200)
def test_scd_type_2_and_tracked_history_by_spark(mariadb, db, tmp_path):
    """``h`` keeps every version; ``k`` tracks ``name`` only: a change of ``n`` updates
    the open version in place (in the batch, and in the target: op ``amend``)."""
    assert DELTA_JARS, NO_JARS
    for t in ("h", "k"):
        mariadb.execute(f"CREATE TABLE {t} (id INT PRIMARY KEY, name VARCHAR(10), n INT)",
                        f"INSERT INTO {t} SELECT seq, CONCAT('n', seq), seq "
                        f"FROM {seq(mariadb, 10)}", database=db)
    transform = (f"transform:\n  - source-table: {db}.h\n    stored-as-scd-type: 2\n"
                 f"  - source-table: {db}.k\n    stored-as-scd-type: 2\n"
                 "    track-history-column-list: name\n")
    yaml_path = tmp_path / "p.yaml"
    yaml_path.write_text(pipeline_yaml(mariadb, db, tmp_path, transform))
    roots = {t: tmp_path / "lake" / db / t for t in ("h", "k")}
    run(yaml_path, mariadb, tmp_path)

    for t in ("h", "k"):
        mariadb.execute(f"UPDATE {t} SET name = 'x' WHERE id = 1",
                        f"UPDATE {t} SET n = 100 WHERE id = 1",
                        f"DELETE FROM {t} WHERE id = 2",
                        f"INSERT INTO {t} VALUES (11, 'new', 11)",
                        f"UPDATE {t} SET n = 30 WHERE id = 3", database=db)
    run(yaml_path, mariadb, tmp_path)
    for t in ("h", "k"):  # the key's first change in the batch: k's amends the target
        mariadb.execute(f"UPDATE {t} SET n = 300 WHERE id = 1",
                        f"UPDATE {t} SET n = 50 WHERE id = 5",
                        f"UPDATE {t} SET name = 'y' WHERE id = 6",
                        f"DELETE FROM {t} WHERE id = 11", database=db)
    run(yaml_path, mariadb, tmp_path)

    got = both_readers(tmp_path, roots)
    for t, (rs, sp) in got.items():
        assert history(sp) == history([{**r, "__START_AT": str(r["__START_AT"]),
                                        "__END_AT": None if r["__END_AT"] is None
                                        else str(r["__END_AT"])} for r in rs]), t
    check_history(got["h"][0], mariadb, db, "h", {
        1: [("n1", 1), ("x", 1), ("x", 100), ("x", 300)], 2: [("n2", 2)],
        3: [("n3", 3), ("n3", 30)], 5: [("n5", 5), ("n5", 50)], 6: [("n6", 6), ("y", 6)],
        11: [("new", 11)], 4: [("n4", 4)]})
    check_history(got["k"][0], mariadb, db, "k", {
        1: [("n1", 1), ("x", 300)], 2: [("n2", 2)], 3: [("n3", 30)], 5: [("n5", 50)],
        6: [("n6", 6), ("y", 6)], 11: [("new", 11)], 4: [("n4", 4)]})
    assert all(e.startswith("Apache-Spark") for t in roots for e in engines(roots[t]))
    assert "MERGE" in operations(roots["k"])


# -- a table read again: each chunk replaces its key range ---------------------------------

DAMAGE = """\
import json, sys
from pyspark.sql import SparkSession
conf, path = json.loads(sys.argv[1]), sys.argv[2]
b = SparkSession.builder.master("local[1]").config("spark.ui.enabled", "false")
for k, v in conf.items():
    b = b.config(k, v)
spark = b.getOrCreate()
t = "delta.`" + path + "`"
spark.sql(f"DELETE FROM {t} WHERE id <= 5")
spark.sql(f"UPDATE {t} SET v = -1 WHERE id > 5 AND id <= 10")
spark.sql(f"INSERT INTO {t} VALUES (-7, 1, 'stray'), (170, 1, 'stray'), (1000001, 1, 'stray')")
"""


@pytest.mark.timeout(1800)
def test_a_table_read_again_replaces_its_ranges_by_spark(mariadb, db, tmp_path):
    """The target damaged behind the pipeline and given keys the source never had (before
    the first chunk, in a range the source emptied, past the last key), then read again
    under writes: each chunk's MERGE deletes the rows of its range the chunk does not hold
    (``WHEN NOT MATCHED BY SOURCE``), so the target equals the source."""
    assert DELTA_JARS, NO_JARS
    for t in "ab":
        mariadb.execute(f"CREATE TABLE {t} (id INT PRIMARY KEY, v INT, s VARCHAR(10))",
                        f"INSERT INTO {t} SELECT seq, seq, 'init' FROM {seq(mariadb, 400)}",
                        database=db)
    mariadb.execute("DELETE FROM a WHERE id > 150 AND id <= 200", database=db)
    yaml_path, ckpt = tmp_path / "p.yaml", tmp_path / "ckpt"
    yaml_path.write_text(pipeline_yaml(mariadb, db, tmp_path, chunk=50,
                                       trigger="  trigger.interval: 1s\n"))
    roots = {t: tmp_path / "lake" / db / t for t in "ab"}
    run(yaml_path, mariadb, tmp_path)
    equal_to_source(both_readers(tmp_path, roots), mariadb, db)
    script = tmp_path / "damage.py"
    script.write_text(DAMAGE)
    p = subprocess.run([sys.executable, str(script), json.dumps(DELTA_CONF), str(roots["a"])],
                       capture_output=True, text=True, cwd=tmp_path, timeout=600, check=False)
    assert p.returncode == 0, p.stderr[-3000:]
    assert {-7, 170, 1000001} <= set(by_id(rs_read(roots["a"])))

    env, a = env_of(mariadb), f"{db}.a"
    writer = Writer(mariadb, db, seed=61)
    writer.next_key = 10_000
    with running(yaml_path, env, tmp_path / "run.log", ckpt) as log:
        try:
            writer.start()
            m = mark(ckpt, a)
            p = cli("snapshot", str(yaml_path), "--tables", f"{db}\\.a", env=env)
            assert p.returncode == 0 and f"{a}: snapshotted again" in p.stdout, \
                p.stdout + p.stderr
            writer.join(8)  # writes while its first chunks are read again, then none:
            writer.finish()  # a MERGE per table and batch takes seconds on two cores
            assert writer.ops.get("delete", 0) > 3, writer.ops
            wait_for(lambda: read_again(ckpt, a, m), 600,
                     f"the table read again\n{run_tail(log, ckpt)}")
            wait_for(lambda: by_id(rs_read(roots["a"])) == source_table(mariadb, db, "a")
                     and by_id(rs_read(roots["b"])) == source_table(mariadb, db, "b"), 120,
                     f"the targets equal to their sources\n{run_tail(log, ckpt)}")
        finally:
            writer.stop()
    equal_to_source(both_readers(tmp_path, roots), mariadb, db)
    assert "MERGE" in operations(roots["a"])
    assert all(e.startswith("Apache-Spark") for e in engines(roots["a"]))


# -- an empty batch (the library's apply_changes, Spark's writer) ------------------------

APPLY = """\
import json, sys
from decimal import Decimal
from itertools import pairwise
from pyspark.sql import SparkSession
from sparkcdc.apply import apply_changes
from sparkcdc import sinks
conf, path = json.loads(sys.argv[1]), sys.argv[2]
b = SparkSession.builder.master("local[1]").config("spark.ui.enabled", "false")
for k, v in conf.items():
    b = b.config(k, v)
spark = b.getOrCreate()
schema = "id INT, v STRING, _change_type STRING, _seq DECIMAL(38,0)"
def batch(rows):
    return spark.createDataFrame([(i, v, c, Decimal(s)) for i, v, c, s in rows], schema)
sink = sinks.create("delta", {"path": path, "writer": "spark"})
out = []
def apply(rows, batch_id):
    r = apply_changes(batch(rows), batch_id, sink, keys=["id"])
    out.append([r.batch_id, r.skipped, sink.last_batch_id()])
apply([(1, "a", "insert", 1), (2, "b", "insert", 2), (3, "c", "insert", 3)], 0)
apply([], 1)
apply([(2, "B", "update_postimage", 4), (3, None, "delete", 5)], 2)
apply([], 3)
apply([], 2)
apply([(4, "d", "insert", 6)], 3)
print("RESULT " + json.dumps(out))
"""


def test_an_empty_batch_records_its_id_and_changes_nothing(tmp_path):
    """``apply_changes`` with a batch of no rows: Spark commits the batch id alone, so a
    replay of it, and of the batch before, is skipped; the rows are the changes applied."""
    assert DELTA_JARS, NO_JARS
    script, path = tmp_path / "apply.py", tmp_path / "t"
    script.write_text(APPLY)
    p = subprocess.run([sys.executable, str(script), json.dumps(DELTA_CONF), str(path)],
                       capture_output=True, text=True, cwd=tmp_path, timeout=600, check=False,
                       env={**os.environ, "PYSPARK_PYTHON": sys.executable})
    assert p.returncode == 0, p.stderr[-3000:]
    line = [ln for ln in p.stdout.splitlines() if ln.startswith("RESULT ")][-1]
    steps = json.loads(line[len("RESULT "):])
    assert steps == [[0, False, 0], [1, False, 1], [2, False, 2], [3, False, 3],
                     [2, True, 3], [3, True, 3]], steps
    want = {1: "a", 2: "B"}
    (sp,) = spark_read(tmp_path, path)
    assert {r["id"]: r["v"] for r in rs_read(path)} == want
    assert {r["id"]: r["v"] for r in sp} == want
    assert all(e.startswith("Apache-Spark") for e in engines(path))
