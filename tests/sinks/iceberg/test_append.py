"""The Iceberg sink's append path (issue 15): rows of keys new to the source are appended
without a lookup when no data file's statistics overlap their key range; the rest is merged
copy-on-write over the files that hold a touched key only.

Real pyiceberg on the embedded SQLite catalog, as tests/sinks/test_sinks.py uses. Which path a
batch took is read from the snapshots its commit added (operation, added and deleted files
and records), so an append path that is not taken, or taken when it must not be, fails.
Except the first test (through ``apply_changes`` and Spark, so ``__new`` comes from the real
planner), batches are hand-made ``ChangeSet``s: the tests choose which rows are new.
"""

from __future__ import annotations

import datetime as dt
import decimal
import logging

import pyarrow as pa
import pytest
from sink_support import UTC, changes_df

from sparkcdc import sinks
from sparkcdc.apply import apply_changes
from sparkcdc.sinks.base import DELETE, NEW, OP, UPSERT, ChangeSet

COLS = ("id", "name", "qty")
SCHEMA = pa.schema([("id", pa.int64()), ("name", pa.string()), ("qty", pa.int32())])


def _sink(tmp_path, name="t"):
    return sinks.create("iceberg", {"warehouse": str(tmp_path / "wh"), "table": f"db.{name}"})


def _changes(rows, new, schema=SCHEMA) -> ChangeSet:
    """A SCD1 ChangeSet from (key, name, qty, op) rows; ``new`` marks them all (or, a list,
    each) as keys the source did not hold before the batch."""
    cols = list(zip(*rows)) if rows else [[] for _ in range(4)]
    flags = new if isinstance(new, list) else [new] * len(rows)
    t = pa.Table.from_arrays([pa.array(c, f.type) for c, f in zip(cols[:3], schema)]
                             + [pa.array(cols[3], pa.string()), pa.array(flags, pa.bool_())],
                             schema=schema.append(pa.field(OP, pa.string()))
                             .append(pa.field(NEW, pa.bool_())))
    return ChangeSet(t, (schema.names[0],), tuple(schema.names))


def _snapshot_ids(sink) -> set[int]:
    t = sink._table()
    return set() if t is None else {s.snapshot_id for s in t.snapshots()}


def _write(sink, changes, batch_id):
    """Write one batch; return (result, the snapshots its commit added, as (operation,
    summary properties))."""
    before = _snapshot_ids(sink)
    result = sink.write(changes, batch_id)
    t = sink._table()
    added = [(s.summary.operation.value, dict(s.summary.additional_properties))
             for s in t.snapshots() if s.snapshot_id not in before]
    return result, added


def _live_files(sink) -> set[str]:
    return {task.file.file_path for task in sink._table().scan().plan_files()}


def _rows(sink, key="id"):
    return sink.read().sort_by(key).to_pylist()


def _is_append_only(added, n_records):
    """The commit only appended ``n_records`` rows: nothing was read back or rewritten."""
    return (len(added) == 1 and added[0][0] == "append"
            and "deleted-data-files" not in added[0][1]
            and added[0][1]["added-records"] == str(n_records))


def test_new_rows_append_then_updates_merge(spark, tmp_path):
    """(a) Through apply_changes: a snapshot batch into an empty target, then new rows beyond
    the target's keys with updates and a delete, then updates only: the target equals the
    source after each, and the new rows took the append path."""
    sink = _sink(tmp_path)
    ddl = "id long, name string, qty int"

    def apply(rows, batch_id):
        before = _snapshot_ids(sink)
        apply_changes(changes_df(spark, ddl, rows), batch_id, sink, keys=["id"])
        return [(s.summary.operation.value, dict(s.summary.additional_properties))
                for s in sink._table().snapshots() if s.snapshot_id not in before]

    source = {i: (f"n{i}", i) for i in range(1, 21)}
    added = apply([(i, n, q, "insert", 10) for i, (n, q) in source.items()], 0)
    assert _is_append_only(added, 20), added
    assert _rows(sink) == [{"id": i, "name": n, "qty": q} for i, (n, q) in source.items()]

    # batch 1: keys 21..25 are inserted (new, beyond the target's 1..20), key 3 is updated and
    # key 7 deleted: the new rows are one append of 5 rows, the others one overwrite
    b1 = ([(i, f"n{i}", i, "insert", 100 + i) for i in range(21, 26)]
          + [(3, "n3", 3, "update_preimage", 130), (3, "three", 33, "update_postimage", 131),
             (7, "n7", 7, "delete", 170)])
    added = apply(b1, 1)
    source.update({i: (f"n{i}", i) for i in range(21, 26)})
    source[3] = ("three", 33)
    del source[7]
    ops = sorted(op for op, _ in added)
    assert ops == ["append", "overwrite"], added
    appended = next(p for op, p in added if op == "append")
    assert appended["added-records"] == "5" and "deleted-data-files" not in appended
    assert _rows(sink) == [{"id": i, "name": n, "qty": q} for i, (n, q) in sorted(source.items())]

    # batch 2: updates only (keys the target holds): no append path, exact rows
    added = apply([(5, "five", 55, "update_postimage", 200),
                   (24, "twenty-four", 240, "update_postimage", 201)], 2)
    source[5], source[24] = ("five", 55), ("twenty-four", 240)
    assert [op for op, _ in added] == ["overwrite"], added
    assert _rows(sink) == [{"id": i, "name": n, "qty": q} for i, (n, q) in sorted(source.items())]
    assert sink.last_batch_id() == 2


def test_merge_rewrites_only_files_holding_touched_keys(tmp_path):
    """Three appended batches make three files of disjoint key ranges; a batch touching the
    first and last keys (and appending new ones beyond them) rewrites the two files that hold
    them and leaves the middle one in place, although the touched keys' range spans it."""
    sink = _sink(tmp_path)
    for b in range(3):
        _, added = _write(sink, _changes([(i, f"n{i}", i, UPSERT)
                                          for i in range(10 * b + 1, 10 * b + 11)], True), b)
        assert _is_append_only(added, 10), added
    files = _live_files(sink)
    assert len(files) == 3
    middle = {f for f in files if f in _files_with(sink, 11)}
    assert len(middle) == 1
    batch = _changes([(2, "two", 2, UPSERT), (29, None, None, DELETE),
                      (31, "n31", 31, UPSERT), (32, "n32", 32, UPSERT)], [False, False, True, True])
    result, added = _write(sink, batch, 3)
    assert result.counts == {"upsert": 3, "delete": 1, "appended": 2}
    overwrite = next(p for op, p in added if op == "overwrite")
    assert overwrite["deleted-data-files"] == "2" and overwrite["deleted-records"] == "20"
    assert overwrite["added-records"] == "19"  # 9 + 9 untouched, the updated key 2
    append = next(p for op, p in added if op == "append")
    assert append["added-records"] == "2"
    assert middle <= _live_files(sink)
    expected = {i: (f"n{i}", i) for i in range(1, 33) if i != 29}
    expected[2] = ("two", 2)
    assert _rows(sink) == [{"id": i, "name": n, "qty": q} for i, (n, q) in sorted(expected.items())]


def _files_with(sink, key: int) -> set[str]:
    from pyiceberg.expressions import EqualTo

    return {t.file.file_path for t in sink._table().scan(row_filter=EqualTo("id", key)).plan_files()}


def test_new_rows_overlapping_held_keys_are_merged(tmp_path):
    """(b) A target out of step: rows written into the table directly (not by the sink)
    hold keys 5..8 with stale values. A batch of new rows 1..10 overlaps them, so it must not
    be appended: the commit is an overwrite, the result has each key once, with the batch's
    values. Rows held directly outside a later batch's range stay, and that batch appends."""
    sink = _sink(tmp_path)
    cat = sink.catalog()
    cat.create_namespace_if_not_exists("db")
    direct = cat.create_table(("db", "t"), schema=SCHEMA)
    direct.append(pa.table({"id": pa.array([5, 6, 7, 8], pa.int64()),
                            "name": ["stale"] * 4, "qty": pa.array([0] * 4, pa.int32())},
                           schema=SCHEMA))
    result, added = _write(sink, _changes([(i, f"n{i}", i, UPSERT) for i in range(1, 11)],
                                          True), 0)
    assert "appended" not in result.counts
    assert "append" not in [op for op, _ in added], added
    assert [op for op, _ in added] == ["overwrite"]
    assert added[0][1]["deleted-records"] == "4" and added[0][1]["added-records"] == "10"
    assert _rows(sink) == [{"id": i, "name": f"n{i}", "qty": i} for i in range(1, 11)]

    direct = cat.load_table(("db", "t"))
    direct.append(pa.table({"id": pa.array([100, 101], pa.int64()), "name": ["own", "own"],
                            "qty": pa.array([1, 1], pa.int32())}, schema=SCHEMA))
    _, added = _write(sink, _changes([(i, f"n{i}", i, UPSERT) for i in range(11, 16)], True), 1)
    assert _is_append_only(added, 5), added
    assert _rows(sink) == ([{"id": i, "name": f"n{i}", "qty": i} for i in range(1, 16)]
                           + [{"id": 100, "name": "own", "qty": 1},
                              {"id": 101, "name": "own", "qty": 1}])


def test_replayed_batch_changes_nothing(tmp_path):
    """(c) Spark re-runs a batch after a crash with the same id (here through a new sink
    object, as a restarted driver would), or an older one: the table keeps its rows and no
    snapshot is added."""
    sink = _sink(tmp_path)
    b0 = _changes([(i, f"n{i}", i, UPSERT) for i in range(1, 6)], True)
    b1 = _changes([(6, "n6", 6, UPSERT), (2, "two", 2, UPSERT)], [True, False])
    assert not sink.write(b0, 0).skipped
    assert not sink.write(b1, 1).skipped
    expected = _rows(sink)
    assert len(expected) == 6
    snapshots = _snapshot_ids(sink)
    restarted = _sink(tmp_path)
    for batch, batch_id in ((b1, 1), (b0, 0), (b1, 0)):
        result, added = _write(restarted, batch, batch_id)
        assert result.skipped and added == []
    assert _snapshot_ids(sink) == snapshots
    assert _rows(restarted) == expected
    assert restarted.last_batch_id() == 1


def test_a_second_writer_of_the_same_batch_fails_its_commit(tmp_path, monkeypatch, caplog):
    """Two runs of one batch at once (a zombie driver and its restart): the second checked
    the batch id before the first committed. pyiceberg retries a commit that lost the race
    on the new head; the range the batch claimed makes that retry fail validation instead of
    appending the rows a second time. Same for a merged (overwrite) batch."""
    from pyiceberg.exceptions import CommitFailedException, ValidationException

    first, second = _sink(tmp_path), _sink(tmp_path)
    first.write(_changes([(1, "n1", 1, UPSERT)], True), 0)
    for batch in (_changes([(i, f"n{i}", i, UPSERT) for i in range(2, 6)], True),
                  _changes([(1, "one", 1, UPSERT), (3, "three", 3, UPSERT)], False)):
        batch_id = first.last_batch_id() + 1
        stale = second._table()  # the second writer's view: before the first commits
        monkeypatch.setattr(second, "_table", lambda stale=stale: stale)
        first.write(batch, batch_id)
        expected = _rows(first)
        with pytest.raises((ValidationException, CommitFailedException)):
            second.write(batch, batch_id)
        monkeypatch.undo()
        assert _rows(first) == expected
        assert first.last_batch_id() == batch_id
    assert [r["id"] for r in _rows(first)] == [1, 2, 3, 4, 5]

    # the claim is the batch's key range only: a stream with another app-id writing other
    # keys into the same table at the same time still gets pyiceberg's retry, and both land
    other = sinks.create("iceberg", {"warehouse": str(tmp_path / "wh"), "table": "db.t",
                                     "app-id": "other"})
    stale = other._table()
    monkeypatch.setattr(other, "_table", lambda: stale)
    first.write(_changes([(6, "n6", 6, UPSERT)], True), 3)
    caplog.clear()
    with caplog.at_level(logging.WARNING, logger="pyiceberg"):
        other.write(_changes([(100, "x", 0, UPSERT)], True), 0)
    monkeypatch.undo()
    assert "retrying" in caplog.text  # the race was lost and retried, not avoided
    assert [r["id"] for r in _rows(first)] == [1, 2, 3, 4, 5, 6, 100]
    assert (first.last_batch_id(), other.last_batch_id()) == (3, 0)


KEY_TYPES = {
    "string": (pa.string(), lambda i: f"k{i:04d}"),
    "date": (pa.date32(), lambda i: dt.date(2024, 1, 1) + dt.timedelta(days=i)),
    "timestamp": (pa.timestamp("us", tz="UTC"),
                  lambda i: dt.datetime(2024, 1, 1, tzinfo=UTC) + dt.timedelta(microseconds=i)),
    "timestamp_ntz": (pa.timestamp("us"), lambda i: dt.datetime(2024, 1, 1, 0, 0, i)),
    "decimal": (pa.decimal128(20, 2), lambda i: decimal.Decimal(i) / 100),
}


@pytest.mark.parametrize("kind", list(KEY_TYPES))
def test_key_types_bound_the_append_and_the_rewrite(tmp_path, kind):
    """The key range goes to pyiceberg as a filter and file bounds are compared with the
    touched keys for every orderable first-key type: new keys beyond the held ones append,
    keys inside them merge, and only the file holding a touched key is rewritten."""
    arrow_type, key = KEY_TYPES[kind]
    schema = pa.schema([("k", arrow_type), ("name", pa.string()), ("qty", pa.int32())])
    sink = _sink(tmp_path, name=kind)

    def rows(ids, op=UPSERT, tag="n"):
        return [(key(i), f"{tag}{i}", i, op) for i in ids]

    for b, ids in enumerate((range(1, 6), range(6, 11))):
        _, added = _write(sink, _changes(rows(ids), True, schema), b)
        assert _is_append_only(added, 5), (kind, added)
    # out-of-step new rows inside the held range merge; the untouched file stays
    held = _live_files(sink)
    _, added = _write(sink, _changes(rows([7, 12], tag="x"), [True, True], schema), 2)
    assert [op for op, _ in added] == ["overwrite"], (kind, added)
    assert added[0][1]["deleted-data-files"] == "1", (kind, added)
    assert len(held & _live_files(sink)) == 1
    got = sink.read().sort_by("k")
    assert got["k"].to_pylist() == [key(i) for i in list(range(1, 11)) + [12]]
    assert got["name"].to_pylist() == [f"n{i}" for i in range(1, 7)] + ["x7", "n8", "n9",
                                                                       "n10", "x12"]


def test_periodic_compaction_bounds_the_file_count(tmp_path):
    """A stream of small insert batches appends a data file each; every compact-every
    batches the small files are rewritten into one, rows unchanged."""
    from sparkcdc import sinks
    from sparkcdc.sinks.base import ChangeSet

    sink = sinks.create("iceberg", {"warehouse": str(tmp_path / "wh"), "table": "db.small",
                                    "compact-every": "5"})
    files = []
    for b in range(12):
        ids = list(range(b * 10, b * 10 + 10))
        t = pa.table({"id": pa.array(ids, pa.int64()), "v": pa.array([str(i) for i in ids]),
                      "__op": pa.array(["upsert"] * 10), "__new": pa.array([True] * 10)})
        sink.write(ChangeSet(t, ("id",), ("id", "v")), b)
        files.append(len(list(sink._table().scan().plan_files())))
    assert files == [1, 2, 3, 4, 1, 2, 3, 4, 5, 1, 2, 3]
    got = sink.read().sort_by("id")
    assert got["id"].to_pylist() == list(range(120))
    assert got["v"].to_pylist() == [str(i) for i in range(120)]
