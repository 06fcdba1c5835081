"""Changes written into a Delta table by key slices with deletion vectors
(``sparkcdc/sinks/delta/changes.py``, ``deletion_vectors.py``), read back by delta-rs'
own scan (DataFusion, which applies deletion vectors), and judged against a plain dict of
what the table must hold.

No Spark here: the slices are written one after another as the tasks would, and committed
as the driver does; tests/pipeline/test_task_changes.py runs them in Spark tasks."""

from __future__ import annotations

import json
import random
import struct

import deltalake as dl
import pyarrow as pa
import pytest

from sparkcdc.sinks.delta import changes as ch
from sparkcdc.sinks.delta import deletion_vectors as dv
from sparkcdc.sinks.delta import files
from sparkcdc.sinks.delta.log import DeltaLog

SCHEMA = pa.schema([("id", pa.int64()), ("v", pa.int64()), ("s", pa.string())])


def read(path) -> dict:
    """The table as delta-rs' DataFusion scan reads it (deletion vectors applied)."""
    t = dl.QueryBuilder().register("t", dl.DeltaTable(str(path))).execute(
        "SELECT * FROM t").read_all()
    rows = pa.table(t).to_pylist()
    assert len(rows) == len({r["id"] for r in rows}), "a key is held twice"
    return {r["id"]: (r["v"], r["s"]) for r in rows}


def make(path, n: int, files_of: int) -> dict:
    dt = dl.DeltaTable.create(str(path), SCHEMA)
    dt.alter.add_feature(dl.TableFeatures.DeletionVectors, allow_protocol_versions_increase=True)
    want = {}
    for start in range(0, n, files_of):
        ids = list(range(start, min(n, start + files_of)))
        dl.write_deltalake(str(path), pa.table({"id": ids, "v": ids, "s": ["init"] * len(ids)},
                                               schema=SCHEMA), mode="append")
        want.update({i: (i, "init") for i in ids})
    return want


def apply(path, upserts: list[tuple[int, int, str]], deletes: list[int], batch: int,
          slices: int):
    """One batch: planned, each slice written, committed, as the pipeline does."""
    log = DeltaLog(path).refresh()
    plan = ch.plan_slices(log, "id", pa.int64(), slices)
    up = pa.table({"id": [u[0] for u in upserts], "v": [u[1] for u in upserts],
                   "s": [u[2] for u in upserts]}, schema=SCHEMA)
    keys = pa.table({"id": pa.array([u[0] for u in upserts] + deletes, pa.int64())})
    results = []
    for i in range(plan.count):
        mine_up = up.filter(pa.compute.equal(plan.slice_of(up["id"]), i))
        mine_keys = keys.filter(pa.compute.equal(plan.slice_of(keys["id"]), i))
        results.append(ch.write_slice(str(path), plan.parts[i], mine_up, mine_keys, "app",
                                      batch))
    ch.commit_changes(str(path), log, plan.version, results, "app", batch, [("app", batch)])
    return plan


def test_deletion_vector_bytes_round_trip_and_readers_apply_them(tmp_path):
    positions = [0, 5, 70_000, 2**32 + 3]
    data = dv.serialize(positions)
    assert struct.unpack_from("<i", data)[0] == dv.MAGIC
    assert dv.deserialize(data).tolist() == positions
    assert dv.z85_decode(dv.z85_encode(b"\x86\x4f\xd2\x6f\xb5\x59\xf7\x5b")) == \
        b"\x86\x4f\xd2\x6f\xb5\x59\xf7\x5b"
    assert dv.z85_encode(b"\x86\x4f\xd2\x6f\xb5\x59\xf7\x5b") == "HelloWorld"  # the Z85 spec's
    (d,) = dv.write_file(tmp_path, [positions])
    assert dv.read(tmp_path, d).tolist() == positions
    raw = bytearray(d.file(tmp_path).read_bytes())
    raw[-5] ^= 0xFF  # a damaged vector is named, never applied
    d.file(tmp_path).write_bytes(bytes(raw))
    with pytest.raises(dv.DeletionVectorError, match="checksum"):
        dv.read(tmp_path, d)


@pytest.mark.parametrize("slices", [1, 3])
def test_random_batches_through_slices_equal_the_expected_table(tmp_path, slices):
    path = tmp_path / "t"
    want = make(path, 3000, 500)  # six files, ranges apart: up to six slices
    rng = random.Random(slices)
    next_key = 10_000
    for batch in range(8):
        keys = rng.sample(sorted(want), 150)
        deletes, upserts = keys[:50], [(k, rng.randint(0, 10**6), "upd") for k in keys[50:]]
        for _ in range(30):  # keys new to the table, some between ranges, some past them
            next_key += rng.choice([1, 1, 977])
            upserts.append((next_key, next_key, "new"))
        plan = apply(path, upserts, deletes, batch, slices)
        for k in deletes:
            del want[k]
        want.update({k: (v, s) for k, v, s in upserts})
        assert read(path) == want, batch
        assert plan.count == min(slices, 6)
    # each touched file was kept and marked, not rewritten: the six first files are live
    live = DeltaLog(path).refresh().files
    assert sum(1 for p in live if p.startswith("part-")) == 6
    assert all(live[p].get("deletionVector") for p in live if p.startswith("part-"))
    assert dl.DeltaTable(str(path)).transaction_version("app") == 7
    # compaction (delta-rs) applies the vectors: the same rows after it
    dl.DeltaTable(str(path)).optimize.compact()
    assert read(path) == want


def test_a_small_batch_writes_the_change_not_the_table(tmp_path):
    path = tmp_path / "t"
    want = make(path, 200_000, 50_000)
    before = sum(f.stat().st_size for f in path.rglob("*") if f.is_file())
    keys = random.Random(7).sample(sorted(want), 200)
    apply(path, [(k, -k, "upd") for k in keys], [], 0, 2)
    written = sum(f.stat().st_size for f in path.rglob("*") if f.is_file()) - before
    assert written / len(keys) < 2000, written  # the target of issue 31; a rewrite: ~10x more
    got = read(path)
    assert all(got[k] == (-k, "upd") for k in keys) and len(got) == 200_000


def test_a_batch_reads_only_the_row_groups_its_keys_can_lie_in(tmp_path, monkeypatch):
    """Files of many row groups (as compaction writes them): a batch of a few keys reads
    the key column of the row groups whose statistics may hold them, not the whole file,
    and the rows it deletes are the right ones at their positions in the file."""
    import pyarrow.parquet as pq

    dt = dl.DeltaTable.create(str(tmp_path), SCHEMA)
    dt.alter.add_feature(dl.TableFeatures.DeletionVectors, allow_protocol_versions_increase=True)
    ids = list(range(100_000))
    dl.write_deltalake(str(tmp_path), pa.table({"id": ids, "v": ids, "s": ["init"] * len(ids)},
                                               schema=SCHEMA), mode="append",
                       writer_properties=dl.WriterProperties(max_row_group_size=10_000))
    want = {i: (i, "init") for i in ids}
    (add,) = DeltaLog(tmp_path).refresh().files.values()
    assert pq.ParquetFile(tmp_path / add["path"]).metadata.num_row_groups == 10
    read_groups: list[list[int]] = []
    real = pq.ParquetFile.read_row_groups

    def spy(self, groups, *a, **kw):
        read_groups.append(list(groups))
        return real(self, groups, *a, **kw)

    monkeypatch.setattr(pq.ParquetFile, "read_row_groups", spy)
    apply(tmp_path, [(15_001, -1, "upd"), (87_654, -2, "upd")], [42_000], 1, 1)
    want.update({15_001: (-1, "upd"), 87_654: (-2, "upd")})
    del want[42_000]
    assert read_groups == [[1, 4, 8]]
    assert read(tmp_path) == want
    # a key in no row group's range: the file is not touched at all
    read_groups.clear()
    apply(tmp_path, [(200_000, 7, "new")], [], 2, 1)
    want[200_000] = (7, "new")
    assert read_groups == [] and read(tmp_path) == want


def test_a_commit_after_another_writers_fails_and_leftovers_go(tmp_path):
    path = tmp_path / "t"
    make(path, 1000, 500)
    log = DeltaLog(path).refresh()
    plan = ch.plan_slices(log, "id", pa.int64(), 2)
    res = [ch.write_slice(str(path), plan.parts[0], pa.table(
        {"id": [1], "v": [1], "s": ["x"]}, schema=SCHEMA), pa.table({"id": [1]}), "app", 0)]
    dl.write_deltalake(str(path), pa.table({"id": [5000], "v": [1], "s": ["other"]},
                                           schema=SCHEMA), mode="append")
    with pytest.raises(files.CommitConflict, match="another writer"):
        ch.commit_changes(str(path), log, plan.version, res, "app", 0, [("app", 0)])
    assert files.remove_leftovers(str(path), "app", 0) == 1  # its staging folder
    assert not list(path.glob("sc-*"))
    assert read(path)[1] == (1, "init")


def test_log_replay_reads_checkpoints_and_the_commits_after(tmp_path):
    path = tmp_path / "t"
    make(path, 1000, 250)
    apply(path, [(3, 33, "u")], [600], 0, 2)
    dl.DeltaTable(str(path)).create_checkpoint()
    apply(path, [(4, 44, "u")], [601], 1, 2)
    log = DeltaLog(path).refresh()
    assert log.has_feature("deletionVectors")
    vecs = {p: a.get("deletionVector") for p, a in log.files.items()}
    touched = [p for p, v in vecs.items() if v]
    assert len(touched) == 2  # the files of keys 3/4 and 600/601, each with both marks
    assert sorted(a["deletionVector"]["cardinality"] for p, a in log.files.items()
                  if a.get("deletionVector")) == [2, 2]
    assert json.loads(log.files[touched[0]]["stats"])["tightBounds"] is False


SPARK_READER = """\
import json, sys
from pyspark.sql import SparkSession
jars, path = sys.argv[1], sys.argv[2]
spark = (SparkSession.builder.master("local[1]").config("spark.ui.enabled", "false")
         .config("spark.jars", jars)
         .config("spark.sql.extensions", "io.delta.sql.DeltaSparkSessionExtension")
         .config("spark.sql.catalog.spark_catalog",
                 "org.apache.spark.sql.delta.catalog.DeltaCatalog").getOrCreate())
rows = [r.asDict() for r in spark.read.format("delta").load(path).collect()]
print("RESULT " + json.dumps(rows))
"""


@pytest.mark.spark_delta
def test_spark_delta_reads_what_the_slices_wrote(tmp_path):
    """A second, independent reader: delta-spark (make test-compat's PySpark 4.2 cell) reads
    the table the slices marked, equal to the expected rows and to delta-rs' scan."""
    import glob
    import os
    import subprocess
    import sys
    from pathlib import Path

    jars = sorted(glob.glob(str(Path(__file__).resolve().parents[3] / ".jars" / "delta"
                                / "*.jar")))
    assert jars, "scripts/fetch_jars.sh fetches delta-spark's jars into .jars/delta"
    path = tmp_path / "t"
    want = make(path, 3000, 500)
    rng = random.Random(5)
    for batch in range(3):
        keys = rng.sample(sorted(want), 120)
        deletes, upserts = keys[:40], [(k, -k, "upd") for k in keys[40:]]
        apply(path, upserts, deletes, batch, 3)
        for k in deletes:
            del want[k]
        want.update({k: (v, s) for k, v, s in upserts})
    script = tmp_path / "reader.py"
    script.write_text(SPARK_READER)
    p = subprocess.run([sys.executable, str(script), ",".join(jars), str(path)],
                       capture_output=True, text=True, timeout=300, check=False,
                       env={**os.environ, "PYSPARK_PYTHON": sys.executable})
    assert p.returncode == 0, p.stderr[-3000:]
    line = [ln for ln in p.stdout.splitlines() if ln.startswith("RESULT ")][-1]
    rows = json.loads(line[len("RESULT "):])
    got = {r["id"]: (r["v"], r["s"]) for r in rows}
    assert len(got) == len(rows) and got == want == read(path)


def test_files_mostly_deleted_are_rewritten_without_their_dead_rows(tmp_path):
    """delta-rs' compaction leaves a lone file with its deletion vector; ``purge`` rewrites
    the files whose vectors delete at least the share asked, in one commit, and the table
    reads the same before and after, by delta-rs and by the log read on its own."""
    from sink_support import delta_log_rows

    path = tmp_path / "t"
    want = make(path, 2000, 1000)  # two files
    apply(path, [], list(range(300)), 0, 1)  # 30% of the first file
    apply(path, [], list(range(1000, 1050)), 1, 1)  # 5% of the second
    for k in list(range(300)) + list(range(1000, 1050)):
        del want[k]
    assert ch.purge(str(path), 0.2, "app") == 1
    live = DeltaLog(path).refresh().files
    marked = [a for a in live.values() if a.get("deletionVector")]
    assert len(marked) == 1 and marked[0]["deletionVector"]["cardinality"] == 50
    assert read(path) == want
    assert {r["id"]: (r["v"], r["s"]) for r in delta_log_rows(path, ["id", "v", "s"])} == want
    assert ch.purge(str(path), 0.2, "app") == 0  # nothing left to purge


def test_purge_streams_the_live_rows_a_row_group_at_a_time(tmp_path, monkeypatch):
    """The purge's rows go from the old files to the new ones a row group at a time: the
    first rows are handed on before the second file is opened, and no batch is larger than
    a row group. It held every purged file at once before, hundreds of MB of the driver
    after a catch-up that marked half a large table deleted (docs/benchmarks.md)."""
    import pyarrow.parquet as pq

    path = tmp_path / "t"
    want = make(path, 3000, 1000)  # three files
    apply(path, [], [k for k in range(3000) if k % 2], 0, 1)  # half of every file
    want = {k: v for k, v in want.items() if not k % 2}
    opened: list[str] = []
    real = pq.ParquetFile

    class Watched(real):
        def __init__(self, source, *a, **kw):
            opened.append(str(source))
            super().__init__(source, *a, **kw)

    monkeypatch.setattr(pq, "ParquetFile", Watched)
    log = DeltaLog(path).refresh()
    victims = [(a, dv.Descriptor.from_action(a["deletionVector"]))
               for a in log.files.values()]
    reader = ch._live_rows(path, log, victims)
    first = reader.read_next_batch()
    assert len(opened) == 1 and first.num_rows == 500
    rest = reader.read_all()
    assert len(opened) == 3 and first.num_rows + rest.num_rows == 1500
    monkeypatch.undo()
    assert ch.purge(str(path), 0.2, "app") == 3
    assert read(path) == want


def test_purge_of_a_partitioned_table_with_a_file_wholly_deleted_and_a_column_added(tmp_path):
    """Partition values come back as their column (they are not in the files), a file whose
    every row is deleted leaves nothing, and a file written before a column was added reads
    it as null, as the table did before the purge."""
    path = tmp_path / "t"
    schema = pa.schema([("id", pa.int64()), ("p", pa.int32()), ("s", pa.string())])
    dt = dl.DeltaTable.create(str(path), schema, partition_by=["p"])
    dt.alter.add_feature(dl.TableFeatures.DeletionVectors, allow_protocol_versions_increase=True)
    dl.write_deltalake(str(path), pa.table({"id": list(range(100)), "p": [1] * 100,
                                            "s": ["a"] * 100}, schema=schema), mode="append")
    dl.write_deltalake(str(path), pa.table({"id": list(range(100, 200)), "p": [2] * 100,
                                            "s": ["b"] * 100}, schema=schema), mode="append")
    wide = schema.append(pa.field("x", pa.int64()))
    dl.write_deltalake(str(path), pa.table({"id": list(range(200, 300)), "p": [3] * 100,
                                            "s": ["c"] * 100, "x": list(range(100))},
                                           schema=wide), mode="append", schema_mode="merge")
    keys = [k for k in range(100) if k % 4] + list(range(100, 200)) + list(range(200, 250))
    log = DeltaLog(path).refresh()
    plan = ch.plan_slices(log, "id", pa.int64(), 1)
    res = ch.write_slice(str(path), plan.parts[0], pa.table({"id": pa.array([], pa.int64()),
                                                             "p": pa.array([], pa.int32()),
                                                             "s": pa.array([], pa.string()),
                                                             "x": pa.array([], pa.int64())}),
                         pa.table({"id": pa.array(keys, pa.int64())}), "app", 0, ("p",))
    ch.commit_changes(str(path), log, plan.version, [res], "app", 0, [("app", 0)])
    before = sorted(pa.table(dl.QueryBuilder().register("t", dl.DeltaTable(str(path))).execute(
        "SELECT id, p, s, x FROM t").read_all()).to_pylist(), key=lambda r: r["id"])
    assert len(before) == 25 + 50
    assert ch.purge(str(path), 0.2, "app", ("p",)) == 3
    after = sorted(pa.table(dl.QueryBuilder().register("t", dl.DeltaTable(str(path))).execute(
        "SELECT id, p, s, x FROM t").read_all()).to_pylist(), key=lambda r: r["id"])
    assert after == before
    live = DeltaLog(path).refresh().files
    assert not any(a.get("deletionVector") for a in live.values())
    assert {a["partitionValues"]["p"] for a in live.values()} == {"1", "3"}


def test_purge_reads_files_written_with_other_string_types(tmp_path):
    """A file delta-rs rewrote (its own delete, a user's) holds string_view columns where
    the tasks' files hold string: the purge reads both as the table declares them."""
    path = tmp_path / "t"
    want = make(path, 2000, 1000)
    dl.DeltaTable(str(path)).delete("id = 1999")  # delta-rs rewrites the second file
    del want[1999]
    apply(path, [], list(range(1000, 1500)), 0, 1)
    apply(path, [], list(range(500)), 1, 1)
    for k in list(range(500)) + list(range(1000, 1500)):
        del want[k]
    assert ch.purge(str(path), 0.2, "app") == 2
    assert read(path) == want


def test_a_slice_rewrites_the_files_its_batch_leaves_mostly_deleted(tmp_path):
    """Told the share (``purge-deleted-share``), a slice's task writes the live rows of a
    file it would leave that much deleted into its own new files, and the commit removes
    the file: no vector, no second commit, no driver. The rows stay in the slice's stretch
    of keys, so the table's files still cut into as many slices (a purge on the driver
    wrote every victim into one file spanning them all). Partition values come back as
    their column, a file written before a column was added reads it as null, a file wholly
    deleted leaves nothing."""
    path = tmp_path / "t"
    schema = pa.schema([("id", pa.int64()), ("p", pa.int32()), ("s", pa.string())])
    dt = dl.DeltaTable.create(str(path), schema, partition_by=["p"])
    dt.alter.add_feature(dl.TableFeatures.DeletionVectors, allow_protocol_versions_increase=True)
    for lo, p in ((0, 1), (100, 1), (200, 2), (300, 2)):
        dl.write_deltalake(str(path), pa.table({"id": list(range(lo, lo + 100)), "p": [p] * 100,
                                                "s": [f"f{lo}"] * 100}, schema=schema),
                           mode="append")
    wide = schema.append(pa.field("x", pa.int64()))  # a column added since (evolution)
    dl.DeltaTable(str(path)).alter.add_columns(
        [f for f in dl.Schema.from_arrow(wide).fields if f.name == "x"])
    want = {k: (1 if k < 200 else 2, f"f{k // 100 * 100}", None) for k in range(400)}
    dl.DeltaTable(str(path)).delete("id = 98")  # delta-rs rewrites 0-99 (string_view)
    del want[98]
    log = DeltaLog(path).refresh()
    plan = ch.plan_slices(log, "id", pa.int64(), 2)
    assert plan.count == 2
    deletes = [k for k in range(100) if k % 2] + list(range(200, 300)) + [150, 350]
    up = pa.table({"id": pa.array([400, 50], pa.int64()), "p": pa.array([2, 1], pa.int32()),
                   "s": ["new", "upd"], "x": pa.array([1, 2], pa.int64())}, schema=wide)
    keys = pa.table({"id": pa.array(deletes + [400, 50], pa.int64())})
    results = []
    for i in range(plan.count):
        results.append(ch.write_slice(
            str(path), plan.parts[i], up.filter(pa.compute.equal(plan.slice_of(up["id"]), i)),
            keys.filter(pa.compute.equal(plan.slice_of(keys["id"]), i)), "app", 0, ("p",),
            purge_share=0.2))
    rewritten = [t for r in results for t in r.touched if t.vector is None]
    marked = [t for r in results for t in r.touched if t.vector is not None]
    assert len(rewritten) == 2 and len(marked) == 2  # 0-99 (half), 200-299 (all); 1%s
    ch.commit_changes(str(path), log, plan.version, results, "app", 0, [("app", 0)])
    for k in deletes:
        want.pop(k, None)
    want.update({400: (2, "new", 1), 50: (1, "upd", 2)})
    got = pa.table(dl.QueryBuilder().register("t", dl.DeltaTable(str(path))).execute(
        "SELECT id, p, s, x FROM t").read_all()).to_pylist()
    assert len(got) == len({r["id"] for r in got}), "a key is held twice"
    assert {r["id"]: (r["p"], r["s"], r["x"]) for r in got} == want
    live = DeltaLog(path).refresh()
    assert sum(1 for a in live.files.values() if a.get("deletionVector")) == 2
    assert ch.plan_slices(live, "id", pa.int64(), 2).count == 2  # still cut in two
