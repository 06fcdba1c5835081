"""The Delta sink's write paths: a batch of new rows is appended, not merged; a merge is
narrowed to the batch's key range (and key partitions) and still finds every stored row.

Each test reads the table's commit history, so it fails if the path taken is not the one
claimed, and reads the rows back, so it fails if the result is wrong."""

from __future__ import annotations

import deltalake as dl
import pyarrow as pa
import pytest
from sink_support import changes_df

from sparkcdc import sinks
from sparkcdc.apply import ApplySpec, apply_changes, collect_changes

DDL = "id int, region string, qty int"


def _sink(tmp_path, **opts):
    return sinks.create("delta", {"path": str(tmp_path / "t"), **opts})


def _apply(spark, sink, rows, batch_id, keys=("id",)):
    return apply_changes(changes_df(spark, DDL, rows), batch_id, sink, keys=list(keys))


def _ops(sink) -> list[str]:
    """The table's commit operations, oldest first."""
    hist = dl.DeltaTable(sink.config.path).history()
    return [h["operation"] for h in reversed(hist)]


def _rows(sink) -> list[tuple]:
    t = sink.read().sort_by("id")
    return list(zip(t["id"].to_pylist(), t["region"].to_pylist(), t["qty"].to_pylist()))


def test_planning_marks_keys_first_inserted_in_the_batch(spark):
    rows = [(1, "eu", 1, "insert", 1),                            # snapshot row
            (2, "eu", 1, "insert", 200), (2, "eu", 2, "update_postimage", 201),
            (3, "eu", 1, "update_postimage", 202),                # an old key
            (4, "eu", 1, "delete", 203), (4, "eu", 5, "insert", 204)]  # held before
    cs = collect_changes(changes_df(spark, DDL, rows), ApplySpec(keys=("id",)))
    new = dict(zip(cs.table["id"].to_pylist(), cs.table["__new"].to_pylist()))
    assert new == {1: True, 2: True, 3: False, 4: False}


def test_snapshot_batches_are_appended_then_changes_merged(spark, tmp_path):
    sink = _sink(tmp_path)
    _apply(spark, sink, [(i, "eu", i, "insert", 1) for i in range(1, 6)], 0)
    _apply(spark, sink, [(i, "us", i, "insert", 1) for i in range(6, 11)], 1)
    # a new key past the stored ones is appended too; then an update is merged
    _apply(spark, sink, [(11, "us", 11, "insert", 300)], 2)
    _apply(spark, sink, [(3, "eu", 30, "update_postimage", 301), (4, "eu", 4, "delete", 302)],
           3)
    # the table is created with deletion vectors (the tasks' path); the driver merges here
    assert _ops(sink) == ["CREATE TABLE", "ADD FEATURE", "WRITE", "WRITE", "WRITE", "MERGE"]
    want = [(i, "eu" if i < 6 else "us", 30 if i == 3 else i) for i in range(1, 12) if i != 4]
    assert _rows(sink) == want
    # a replayed append changes nothing
    assert _apply(spark, sink, [(i, "eu", i, "insert", 1) for i in range(1, 6)], 1).skipped
    assert _rows(sink) == want


def test_new_rows_in_a_stored_range_are_merged_not_doubled(spark, tmp_path):
    """A target out of step with the source (here: it already holds key 3, as after a
    re-snapshot that was not cleared) gets no duplicate: the files' statistics show the
    range is held, and the batch is merged."""
    sink = _sink(tmp_path)
    _apply(spark, sink, [(3, "eu", 0, "insert", 1), (9, "eu", 0, "insert", 1)], 0)
    _apply(spark, sink, [(i, "eu", i, "insert", 1) for i in range(1, 6)], 1)
    assert _ops(sink)[-1] == "MERGE"
    assert _rows(sink) == [(1, "eu", 1), (2, "eu", 2), (3, "eu", 3), (4, "eu", 4),
                           (5, "eu", 5), (9, "eu", 0)]


@pytest.mark.parametrize("keys", [("id",), ("region", "id")], ids=["key", "partition-in-key"])
def test_a_merge_whose_key_range_spans_two_partitions(spark, tmp_path, keys):
    """Partitioned by region; one batch updates and deletes rows in both partitions, moves a
    row from one partition to the other, and inserts into both. The merge's condition
    carries the key range (and the region values when region is part of the key)."""
    sink = _sink(tmp_path, **{"partition-by": "region"})
    _apply(spark, sink, [(i, "eu" if i % 2 else "us", i, "insert", 1) for i in range(1, 21)],
           0, keys)
    batch = [(3, "eu", 300, "update_postimage", 200),    # eu
             (4, "us", 400, "update_postimage", 201),    # us
             (5, "eu", 5, "delete", 202),                # eu
             (6, "us", 6, "delete", 203),                # us
             (21, "eu", 21, "insert", 204), (22, "us", 22, "insert", 205)]
    if keys == ("id",):  # with region outside the key, a row may move between partitions
        batch.append((7, "us", 700, "update_postimage", 206))
    _apply(spark, sink, batch, 1, keys)
    assert _ops(sink)[-1] == "MERGE"
    want = {i: ("eu" if i % 2 else "us", i) for i in range(1, 23) if i not in (5, 6)}
    want[3], want[4] = ("eu", 300), ("us", 400)
    if keys == ("id",):
        want[7] = ("us", 700)
    assert _rows(sink) == [(k, *v) for k, v in sorted(want.items())]
    t = dl.DeltaTable(sink.config.path)
    assert t.metadata().partition_columns == ["region"]


def test_merge_condition_carries_the_key_range(tmp_path):
    """What the narrowing adds to the MERGE condition, and what it leaves out."""
    from sparkcdc.sinks.base import ChangeSet
    from sparkcdc.sinks.delta.sink import _narrowing

    t = pa.table({"region": ["eu", "us", "eu"], "id": [7, 3, 12], "qty": [1, 2, 3],
                  "__op": ["upsert"] * 3})
    cs = ChangeSet(t, ("region", "id"), ("region", "id", "qty"))
    got = _narrowing(cs, ("region",))
    assert "t.`region` >= 'eu' AND t.`region` <= 'us'" in got
    cs = ChangeSet(t, ("id",), ("region", "id", "qty"))
    assert _narrowing(cs, ("region",)) == " AND t.`id` >= 3 AND t.`id` <= 12"


def test_the_table_read_before_is_brought_up_to_date_and_a_removed_one_is_seen(tmp_path):
    """The sink keeps the table it read and reads only the log's new entries next time
    (``_read_table``); a table removed or made again under it is read afresh, not taken
    for the one before."""
    import shutil

    sink = _sink(tmp_path)
    path = sink.config.path
    assert sink._table() is None
    dl.write_deltalake(path, pa.table({"id": [1, 2]}))
    first = sink._table()
    assert first.version() == 0
    dl.write_deltalake(path, pa.table({"id": [3]}), mode="append")
    again = sink._table()
    assert again is first and again.version() == 1  # the same object, brought up to date
    assert sorted(again.to_pyarrow_table()["id"].to_pylist()) == [1, 2, 3]
    shutil.rmtree(path)
    assert sink._table() is None
    dl.write_deltalake(path, pa.table({"id": [1, 2, 3]}), mode="append")
    dl.write_deltalake(path, pa.table({"id": [9]}), mode="overwrite")
    assert sink._table().version() == 1
    shutil.rmtree(path)
    dl.write_deltalake(path, pa.table({"id": [7]}))  # made again: version 0
    got = sink._table()
    assert got.version() == 0 and got.to_pyarrow_table()["id"].to_pylist() == [7]
