"""Changes written into an Iceberg table by key slices, merge-on-read
(``sparkcdc/sinks/iceberg/changes.py``, ``commit.py``): new rows plus position delete
files. Read back by pyiceberg and by iceberg-rust (tests/support/iceberg_support.py), each judged
against a plain dict of what the table must hold.

No Spark here: the slices are written one after another as the tasks would (through the
sink's ``write_changes``), and committed as the driver does (``commit_changes``);
tests/pipeline/test_task_changes_iceberg.py runs them in Spark tasks."""

from __future__ import annotations

import json
import random

import pyarrow as pa
import pyarrow.compute as pc
import pytest
from iceberg_support import by_iceberg_rust, by_pyiceberg, orphans, rows

from sparkcdc import sinks
from sparkcdc.sinks.iceberg import files
from sparkcdc.sinks.iceberg.commit import CommitConflict

SCHEMA = pa.schema([("id", pa.int64()), ("v", pa.int64()), ("s", pa.string())])


def make(tmp_path, n: int, files_of: int, **options):
    """A table of ``n`` rows in files of ``files_of`` rows (batch 0, from tasks' files)."""
    sink = sinks.create("iceberg", {"warehouse": str(tmp_path / "wh"), "table": "db.t",
                                    "app-id": "app", "compact-every": "0", **options})
    sink.ready_for_files(SCHEMA)
    written = []
    for start in range(0, n, files_of):
        ids = list(range(start, min(n, start + files_of)))
        written += sink.write_files(pa.table({"id": ids, "v": ids, "s": ["init"] * len(ids)},
                                             schema=SCHEMA), 0)
    sink.commit_files(written, SCHEMA, 0)
    return sink, {i: (i, "init") for i in range(n)}


def read(sink) -> dict:
    t = sink._table()
    a, b = by_pyiceberg(t), by_iceberg_rust(t)
    assert rows(a, SCHEMA.names) == rows(b, SCHEMA.names), "the readers disagree"
    got = a.to_pylist()
    assert len(got) == len({r["id"] for r in got}), "a key is held twice"
    return {r["id"]: (r["v"], r["s"]) for r in got}


def apply(sink, upserts, deletes, batch: int, slices: int, dead: bool = False):
    """One batch: planned, each slice written (``dead``: once more by an attempt whose
    files no commit takes, as a task killed and run again leaves), committed."""
    plan = sink.plan_changes(("id",), SCHEMA, slices)
    up = pa.table({"id": [u[0] for u in upserts], "v": [u[1] for u in upserts],
                   "s": [u[2] for u in upserts]}, schema=SCHEMA)
    keys = pa.table({"id": pa.array([u[0] for u in upserts] + deletes, pa.int64())})
    written, left = [], []
    for i in range(plan.count):
        mine_up = up.filter(pc.equal(plan.slice_of(up["id"]), i))
        mine_keys = keys.filter(pc.equal(plan.slice_of(keys["id"]), i))
        if dead:
            d = sink.write_changes(plan, i, mine_up, mine_keys, batch)
            left += [f["path"] for f in d["data"] + d["deletes"]]
        w = sink.write_changes(plan, i, mine_up, mine_keys, batch)
        written.append(json.loads(json.dumps(w)))  # as it reaches the driver
    result = sink.commit_changes(plan, written, batch)
    assert not any(files.local(p).exists() for p in left), "a dead attempt's files stay"
    return plan, result


@pytest.mark.parametrize("slices", [1, 3])
def test_random_batches_through_slices_equal_the_expected_table(tmp_path, slices):
    # six files, ranges apart: up to six slices; no purge (its own test below)
    sink, want = make(tmp_path, 3000, 500, **{"purge-deleted-share": "1"})
    rng = random.Random(slices)
    next_key = 10_000
    for batch in range(1, 7):
        keys = rng.sample(sorted(want), 150)
        deletes, upserts = keys[:50], [(k, rng.randint(0, 10**6), "upd") for k in keys[50:]]
        for _ in range(30):  # keys new to the table, some between ranges, some past them
            next_key += rng.choice([1, 1, 977])
            upserts.append((next_key, next_key, "new"))
        plan, result = apply(sink, upserts, deletes, batch, slices, dead=batch == 3)
        for k in deletes:
            del want[k]
        want.update({k: (v, s) for k, v, s in upserts})
        assert read(sink) == want, batch
        assert result.counts["marked deleted"] == 150 and plan.count == min(slices, 6)
        (snap,) = [s for s in sink._table().snapshots()
                   if s.summary.get("sparkcdc.batch") == str(batch)]
        assert snap.summary.operation.value == "overwrite"
        assert int(snap.summary["added-position-deletes"]) == 150
        assert "deleted-data-files" not in snap.summary.additional_properties  # no rewrite
    assert sink.last_batch_id() == 6
    # the six first files are still live, marked by delete files, not rewritten
    tasks = list(sink._table().scan().plan_files())
    first = [t for t in tasks if t.file.record_count == 500]
    assert len(first) == 6 and all(t.delete_files for t in first)
    # a batch Spark runs again after its commit changes nothing, and its files go
    again = sink.plan_changes(("id",), SCHEMA, slices)
    w = sink.write_changes(again, 0, pa.table({"id": [1], "v": [1], "s": ["x"]},
                                              schema=SCHEMA), pa.table({"id": [1]}), 6)
    assert sink.commit_changes(again, [w], 6).skipped
    assert not files.local(w["data"][0]["path"]).exists()
    # compaction applies the deletes: the same rows, no delete file left
    assert sink.compact(7) == len(tasks)
    assert read(sink) == want
    after = list(sink._table().scan().plan_files())
    assert not any(t.delete_files for t in after)
    assert sink._table().current_snapshot().summary.operation.value == "replace"


def test_many_small_batches_keep_few_manifests_and_compaction_leaves_only_live_ones(tmp_path):
    """A scan is planned by opening every manifest of the snapshot: 40 batches (each adding
    a data and a delete manifest) keep the small manifests merged at MERGE_AT, and the
    compaction that removes every file writes its DELETED entries into one manifest per
    kind, not one per manifest it touched. Both readers read the expected rows throughout
    (the merged entries keep their sequence numbers: a delete file still applies to the
    rows written before it, not to a key's new row written after it)."""
    from sparkcdc.sinks.iceberg.commit import MERGE_AT

    sink, want = make(tmp_path, 2000, 500, **{"purge-deleted-share": "1"})
    rng = random.Random(5)
    counts = []
    for batch in range(1, 41):
        keys = rng.sample(sorted(want), 20)
        upserts = [(k, batch, "upd") for k in keys[5:]] + [(5000 + batch, batch, "new")]
        apply(sink, upserts, keys[:5], batch, 2)
        for k in keys[:5]:
            del want[k]
        want.update({k: (v, st) for k, v, st in upserts})
        counts.append(len(sink._table().current_snapshot().manifests(sink._table().io)))
        if batch % 10 == 0:
            assert read(sink) == want, batch
    assert max(counts) <= 2 * MERGE_AT + 4, counts  # not one or two more at every batch
    assert min(counts[MERGE_AT:]) < max(counts), counts  # merged now and then
    sink.compact(41)
    table = sink._table()
    # the compaction's snapshot records what it removed as DELETED entries, one manifest a
    # kind; the snapshot after it, of the same rows, leaves those manifests out of its list
    compacted = table.snapshot_by_id(table.current_snapshot().parent_snapshot_id)
    kept = compacted.manifests(table.io)
    assert len(kept) <= 3 and sum(m.deleted_files_count for m in kept) > 0
    assert compacted.summary["sparkcdc.compaction"] == "41"
    live = table.current_snapshot().manifests(table.io)
    assert live and all(m.has_added_files() or m.has_existing_files() for m in live)
    assert {m.manifest_path for m in live} < {m.manifest_path for m in kept}
    assert table.current_snapshot().summary.operation.value == "replace"
    assert read(sink) == want
    assert not any(t.delete_files for t in table.scan().plan_files())
    # the next batch commits after it as after any snapshot
    apply(sink, [(9999, 42, "after")], [], 42, 2)
    want[9999] = (42, "after")
    assert read(sink) == want


def test_a_small_batch_writes_the_change_not_the_table(tmp_path):
    sink, want = make(tmp_path, 200_000, 50_000)
    root = files.local(sink._table().location())
    before = sum(f.stat().st_size for f in root.rglob("*") if f.is_file())
    keys = random.Random(7).sample(sorted(want), 200)
    apply(sink, [(k, -k, "upd") for k in keys], [], 1, 2)
    written = sum(f.stat().st_size for f in root.rglob("*") if f.is_file()) - before
    assert written / len(keys) < 2000, written  # the target of issue 31 (metadata included)
    got = read(sink)
    assert all(got[k] == (-k, "upd") for k in keys) and len(got) == 200_000


def test_a_file_mostly_deleted_is_rewritten_and_a_conflict_fails_the_batch(tmp_path):
    sink, want = make(tmp_path, 1000, 250, **{"purge-deleted-share": "0.5"})
    doomed = list(range(200))  # 80% of the first file
    apply(sink, [], doomed, 1, 2)
    for k in doomed:
        del want[k]
    assert read(sink) == want
    tasks = list(sink._table().scan().plan_files())
    assert not any(t.delete_files for t in tasks)  # purged by the batch's task
    assert sum(t.file.record_count for t in tasks) == 800
    # another writer commits between the plan and the commit: the batch fails, nothing of
    # it is committed, and run again it applies
    plan = sink.plan_changes(("id",), SCHEMA, 2)
    w = [sink.write_changes(plan, i, SCHEMA.empty_table(), pa.table({"id": [500]}), 3)
         for i in range(plan.count)]
    apply(sink, [(900, 0, "other")], [], 2, 1)
    with pytest.raises(CommitConflict):
        sink.commit_changes(plan, w, 3)
    assert sink.last_batch_id() == 2
    apply(sink, [], [500], 3, 2)
    left = [d["path"] for x in w for d in x["deletes"]]
    assert left and not any(files.local(p).exists() for p in left)  # the failed run's
    want[900] = (0, "other")
    del want[500]
    assert read(sink) == want


@pytest.mark.parametrize("partitioned", [False, True])
def test_a_file_a_batch_leaves_mostly_deleted_is_rewritten_by_its_task_in_the_batch(
        tmp_path, partitioned):
    """The purge in the task (``write_slice``'s ``purge_share``): the file's live rows are
    written again with the slice's upserts, as the table's schema now is (a column added
    since the file was written), and the batch's one snapshot removes the file and its own
    delete file; both readers agree with the expected rows."""
    from pyiceberg.types import LongType

    sink, want = make(tmp_path, 1000, 250, **{"purge-deleted-share": "0.5"},
                      **({"partition-by": "s"} if partitioned else {}))
    apply(sink, [], list(range(100)), 1, 2)  # 40% of the first file: a delete file
    for k in range(100):
        del want[k]
    first = [t for t in sink._table().scan().plan_files() if t.delete_files]
    assert len(first) == 1 and len(first[0].delete_files) == 1
    old_file, old_delete = first[0].file.file_path, first[0].delete_files.pop().file_path
    table = sink._table()
    with table.update_schema() as u:
        u.add_column("w", LongType())
    wide = pa.schema([*SCHEMA, ("w", pa.int64())])
    snapshots = len(sink._table().snapshots())
    plan = sink.plan_changes(("id",), wide, 2)
    up = pa.table({"id": list(range(100, 130)), "v": [-1] * 30, "s": ["upd"] * 30,
                   "w": list(range(100, 130))}, schema=wide)
    keys = up.select(["id"])
    written = []
    for i in range(plan.count):
        mine = pc.equal(plan.slice_of(up["id"]), i)
        written.append(json.loads(json.dumps(sink.write_changes(
            plan, i, up.filter(mine), keys.filter(mine), 2))))
    result = sink.commit_changes(plan, written, 2)
    assert result.counts["files purged"] == 1, result.counts  # 130 of 250 deleted
    assert result.counts["delete files"] == 0
    table = sink._table()
    assert len(table.snapshots()) == snapshots + 1  # the batch's one commit
    tasks = list(table.scan().plan_files())
    assert not any(t.delete_files for t in tasks)
    held = {t.file.file_path for t in tasks}
    assert old_file not in held
    from pyiceberg.manifest import ManifestContent
    live = {e.data_file.file_path for m in table.current_snapshot().manifests(table.io)
            if m.content == ManifestContent.DELETES
            for e in m.fetch_manifest_entry(table.io, discard_deleted=True)}
    assert old_delete not in live
    for k in range(100, 130):
        want[k] = (-1, "upd")
    assert read(sink) == want
    w = {r["id"]: r["w"] for r in by_pyiceberg(table).to_pylist()}
    assert all(w[k] == k for k in range(100, 130))
    assert all(w[k] is None for k in range(130, 1000))
    if partitioned:  # the rows written again went to their own partition's files
        parts = {str(t.file.partition[0]) for t in tasks if t.file.file_path not in
                 {x.file.file_path for x in first}}
        assert parts == {"init", "upd"}, parts


def live_deletes(table) -> dict[str, str]:
    """Every position delete file of the table's current snapshot, to the data file its
    ``file_path`` bounds name (file-scoped, as the tasks write them)."""
    from pyiceberg.manifest import ManifestContent

    from sparkcdc.sinks.iceberg.changes import PATH_ID

    out = {}
    for m in table.current_snapshot().manifests(table.io):
        if m.content != ManifestContent.DELETES:
            continue
        for e in m.fetch_manifest_entry(table.io, discard_deleted=True):
            out[e.data_file.file_path] = e.data_file.lower_bounds[PATH_ID].decode()
    return out


def driver_batch(sink, upserts: list, new: list, batch: int):
    """A batch written by the driver's path (a batch with a schema change, say): upserts
    of (key, v, s), ``new`` telling which keys the source did not hold."""
    from sparkcdc.sinks.base import NEW, OP, UPSERT, ChangeSet

    rows = pa.table({"id": [u[0] for u in upserts], "v": [u[1] for u in upserts],
                     "s": [u[2] for u in upserts], OP: [UPSERT] * len(upserts), NEW: new},
                    schema=SCHEMA.append(pa.field(OP, pa.string())).append(
                        pa.field(NEW, pa.bool_())))
    return sink.write(ChangeSet(rows, ("id",), tuple(SCHEMA.names)), batch)


def test_the_drivers_rewrite_of_a_file_drops_its_delete_files(tmp_path):
    sink, want = make(tmp_path, 1000, 250)
    apply(sink, [(10, -1, "upd")], [20, 30], 1, 2)  # the first file: one delete file
    (held,) = set(live_deletes(sink._table()).values())
    # the driver's path updates a key of that file: copy-on-write, the file and its delete
    # file dropped in one snapshot
    batch = [(40, -2, "drv"), (5000, 5000, "new")]
    assert not driver_batch(sink, batch, [False, True], 2).skipped
    for k in (20, 30):
        del want[k]
    want.update({10: (-1, "upd"), 40: (-2, "drv"), 5000: (5000, "new")})
    assert read(sink) == want
    table = sink._table()
    live = {t.file.file_path for t in table.scan().plan_files()}
    assert held not in live
    assert all(d in live for d in live_deletes(table).values()), "a delete file outlived its file"
    snap = table.current_snapshot()
    assert snap.summary["sparkcdc.batch"] == "2" and sink.last_batch_id() == 2
    assert int(snap.summary["removed-position-delete-files"]) >= 1
    assert driver_batch(sink, batch, [False, True], 2).skipped


def test_a_killed_compactions_files_go_and_what_the_metadata_names_stays(tmp_path,
                                                                         monkeypatch):
    from sparkcdc.sinks.iceberg import changes

    sink, want = make(tmp_path, 1000, 250)
    apply(sink, [(10, -1, "upd")], [20], 1, 2)
    assert sink.compact(2) > 0  # the first compaction: its files are live
    first = sink._table().current_snapshot().snapshot_id
    apply(sink, [(11, -1, "upd")], [21], 3, 2)
    kept = sink._table().current_snapshot().snapshot_id  # holds the first compaction's files
    # the driver's path rewrites them: not live any more, still named by `kept`, and the
    # snapshot that added them expired
    driver_batch(sink, [(12, -1, "upd")], [False], 4)
    with sink._table().maintenance.expire_snapshots() as expire:
        expire.by_ids(sorted(_ancestors_to(sink._table(), first)))
    assert first not in {s.snapshot_id for s in sink._table().snapshots()}

    class Killed(BaseException):
        pass

    def die(*_a, **_k):
        raise Killed

    def killed_compaction(s, batch: int) -> list:
        """A compaction of ``s`` killed between its files and its commit; its files."""
        apply(s, [(batch, -1, "upd")], [batch + 100], batch, 2)
        with monkeypatch.context() as m:
            m.setattr(changes, "commit", die)
            with pytest.raises(Killed):
                s.compact(batch + 1)
        want.pop(batch + 100)
        want[batch] = (-1, "upd")
        named = files.referenced(s._table())
        dead = [p for p in files.on_disk(s._table().location(), prefix) if str(p) not in named]
        assert dead, "the killed compaction wrote no file"
        return dead

    prefix = files.write_prefix("app", 0, files.COMPACTION)[:11]
    # the next compaction removes them, and nothing a snapshot names (`kept`'s files: the
    # snapshot that added them is expired)
    dead = killed_compaction(sink, 5)
    assert sink.compact(7) > 0
    assert not any(p.exists() for p in dead)
    assert all(files.local(p).exists() for p in files.referenced(sink._table()))
    # and so does the next run's first commit, without waiting for a compaction
    dead = killed_compaction(sink, 8)
    again = sinks.create("iceberg", {"warehouse": str(tmp_path / "wh"), "table": "db.t",
                                     "app-id": "app", "compact-every": "0"})
    apply(again, [(13, -1, "upd")], [23], 10, 2)
    assert not any(p.exists() for p in dead)
    assert all(files.local(p).exists() for p in files.referenced(again._table()))
    for k in (20, 21, 23):
        del want[k]
    want.update({k: (-1, "upd") for k in (10, 11, 12, 13)})
    assert read(again) == want
    old = again._table().scan(snapshot_id=kept).to_arrow()  # time travel still reads
    assert old.num_rows == 998


def _ancestors_to(table, snapshot_id: int) -> set[int]:
    """``snapshot_id`` and the snapshots before it."""
    out, s = set(), table.snapshot_by_id(snapshot_id)
    while s is not None:
        out.add(s.snapshot_id)
        s = table.snapshot_by_id(s.parent_snapshot_id) if s.parent_snapshot_id else None
    return out


def test_a_commit_killed_in_the_catalog_leaves_nothing_once_the_batch_commits(tmp_path,
                                                                             monkeypatch):
    sink, want = make(tmp_path, 1000, 250)

    class Killed(BaseException):
        pass

    def die(*_a, **_k):
        raise Killed

    plan = sink.plan_changes(("id",), SCHEMA, 2)
    w = [sink.write_changes(plan, i, SCHEMA.empty_table(), pa.table({"id": [300, 600]}), 1)
         for i in range(plan.count)]
    with monkeypatch.context() as m:  # the manifests written, the catalog never told
        m.setattr(type(sink._table()), "_do_commit", die)
        with pytest.raises(Killed):
            sink.commit_changes(plan, w, 1)
    assert orphans(sink._table()), "the killed commit left nothing to remove"
    apply(sink, [], [300, 600], 1, 2)  # the batch run again
    del want[300], want[600]
    assert read(sink) == want
    assert orphans(sink._table()) == []
