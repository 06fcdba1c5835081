"""A chunk read again replaces its range in a merge target (``ChangeSet.replaces``,
docs/algorithm.md "Reading a table again"): after the batch, the target's rows whose chunk
column lies in the chunk's range are the batch's upserts there and no other, in the same
commit as the batch id; rows outside the ranges only take the batch's own changes.

Each merge sink, through the driver's ``write`` and, where it takes them, through the
tasks' ``write_changes`` (every slice, rows or none) and the driver's ``commit_changes``.
The table has a composite key ``(id, k2)`` and is cut along ``c``, a nullable column that
is not its key; ranges: the first chunk (no start: NULLs too), a middle one, the last (no
end) with no rows of its own, and a key moved by the window from one range into another.
The target is read back from its storage and judged against a dict the test builds
itself."""

from __future__ import annotations

import pyarrow as pa
import pyarrow.compute as pc
import pytest
from sink_support import TargetFactory, change_rows

from sparkcdc.apply import ApplySpec, apply_arrow
from sparkcdc.sinks.base import DELETE, NEW, OP, UPSERT, ChangeSet, KeyRange, holds_any
from sparkcdc.sinks.sql import range_condition

SCHEMA = pa.schema([("id", pa.int64()), ("k2", pa.string()), ("c", pa.int64()),
                    ("v", pa.int64())])
KEYS = ("id", "k2")


def _c(i: int) -> int | None:
    return None if i <= 3 else i  # rows 1..3: a NULL chunk key (the first chunk's)


def _changes(upserts: dict[int, tuple], deletes: list[int], replaces=(), new=False):
    ids = list(upserts) + deletes
    n_up = len(upserts)
    t = pa.table({"id": pa.array(ids, pa.int64()),
                  "k2": pa.array(["x"] * len(ids), pa.string()),
                  "c": pa.array([u[0] for u in upserts.values()] + [None] * len(deletes),
                                pa.int64()),
                  "v": pa.array([u[1] for u in upserts.values()] + [None] * len(deletes),
                                pa.int64()),
                  OP: pa.array([UPSERT] * n_up + [DELETE] * len(deletes), pa.string()),
                  NEW: pa.array([new] * len(ids), pa.bool_())})
    return ChangeSet(t, KEYS, tuple(SCHEMA.names), replaces=tuple(replaces))


def _rows(sink) -> dict:
    t = sink.read()
    got = t.to_pylist() if t.num_rows else []
    assert len(got) == len({r["id"] for r in got}), "a key is held twice"
    return {r["id"]: (r["c"], r["v"]) for r in got}


def _expected(before: dict, ranges, upserts: dict, deletes: list[int]) -> dict:
    """The batch as the algorithm says, written out plainly."""
    def inside(c):
        for r in ranges:
            if c is None:
                if r.start is None:
                    return True
            elif (r.start is None or c >= r.start) and (r.end is None or c < r.end):
                return True
        return False

    out = {i: row for i, row in before.items() if not inside(row[0]) or i in upserts}
    for i in deletes:
        out.pop(i, None)
    out.update(upserts)
    return out


# the source at the batch's end, in the ranges read again: the first chunk [NULL, 10) has
# rows 2 (c NULL), 5 and 7; the middle one [20, 30) rows 21..29 but 24, and row 22 moved
# out to c = 50, into the last chunk [35, +inf), which holds nothing else
RANGES = (KeyRange("c", None, 10), KeyRange("c", 20, 30), KeyRange("c", 35, None))
UPSERTS = {2: (None, 2), 5: (5, 2), 7: (7, 2), 16: (16, 3), 22: (50, 2),
           **{i: (i, 2) for i in range(21, 30) if i not in (22, 24)}}
DELETES = [15]  # a change of the window outside the ranges
# batch 3: a chunk read again with no rows at all (all its rows deleted on the source)
EMPTY = (KeyRange("c", 10, 15),)


def _write(sink, changes: ChangeSet, batch: int, tasks: bool) -> None:
    if not tasks:
        assert not sink.write(changes, batch).skipped
        return
    slices = sink.plan_changes(KEYS, SCHEMA, 3)
    key_rows = changes.key_rows(UPSERT, DELETE)
    ups = changes.rows(UPSERT)
    written = []
    for s in range(slices.count):  # each slice as its task writes it, rows or none
        mine = pc.equal(slices.slice_of(ups["id"]), s)
        keys_mine = pc.equal(slices.slice_of(key_rows["id"]), s)
        written.append(sink.write_changes(slices, s, ups.filter(mine),
                                          key_rows.filter(keys_mine), batch, changes.replaces))
    assert not sink.commit_changes(slices, written, batch, changes.replaces).skipped


@pytest.mark.parametrize("kind,tasks", [("delta", False), ("delta", True),
                                        ("iceberg", False), ("iceberg", True), ("postgres", False),
                                        ("postgres", True), ("mysql", False), ("mysql", True)])
def test_a_range_read_again_holds_its_chunk_rows_and_no_other(kind, tasks, request,
                                                               tmp_path):
    factory = TargetFactory(kind, request, tmp_path)
    sink = factory()
    try:
        before = {i: (_c(i), 1) for i in range(1, 41)}
        # rows the source never had, in the first, a middle and past the last chunk
        before.update({-4: (-4, 1), 24: (24, 1), 10**6: (10**6, 1)})
        assert not sink.write(_changes(before, [], new=True), 1).skipped
        assert _rows(sink) == before
        if tasks:
            assert sink.takes_changes(KEYS)

        _write(sink, _changes(UPSERTS, DELETES, RANGES), 2, tasks)
        want = _expected(before, RANGES, UPSERTS, DELETES)
        assert {-4, 1, 3, 20, 24, 35, 10**6} & set(want) == set()  # (the test's own sense)
        assert _rows(sink) == want
        assert sink.last_batch_id() == 2

        _write(sink, _changes({}, [], EMPTY), 3, tasks)
        want = _expected(want, EMPTY, {}, [])
        assert not {10, 11, 12, 13, 14} & set(want)
        assert _rows(sink) == want
        assert sink.last_batch_id() == 3
        # a batch replayed changes nothing, its ranges included
        assert sink.write(_changes({}, [], (KeyRange("c", None, None),)), 3).skipped
        assert _rows(sink) == want
    finally:
        factory.close()


def test_a_range_holds_its_values_and_nulls_only_when_it_has_no_start():
    col = pa.array([None, -1, 0, 9, 10, 29, 30, 10**9], pa.int64())
    assert KeyRange("c", None, 10).holds(col).to_pylist() == [True, True, True, True, False,
                                                              False, False, False]
    assert KeyRange("c", 10, 30).holds(col).to_pylist() == [False, False, False, False, True,
                                                            True, False, False]
    assert KeyRange("c", 30, None).holds(col).to_pylist() == [False] * 6 + [True, True]
    assert KeyRange("c").holds(col).to_pylist() == [True] * 8
    rows = pa.table({"c": col})
    assert holds_any((KeyRange("c", None, 0), KeyRange("c", 30, None)), rows).to_pylist() == \
        [True, True, False, False, False, False, True, True]
    assert KeyRange("c", 10, 30).meets(0, 10) and not KeyRange("c", 10, 30).meets(30, 40)
    assert KeyRange("c", None, 10).meets(50, 60, nulls=True)
    assert range_condition(KeyRange("c", None, 10), "`c`") == ("(`c` < %s OR `c` IS NULL)",
                                                               [10])
    assert range_condition(KeyRange("c", 5, 10), "c") == ("(c >= %s AND c < %s)", [5, 10])
    assert range_condition(KeyRange("c", 5), "c") == ("(c >= %s)", [5])
    assert range_condition(KeyRange("c"), "c") == ("(TRUE)", [])


def test_the_pipelines_driver_path_hands_its_ranges_to_the_sink(tmp_path, request):
    """``apply_arrow``, the pipeline's write from the driver: the change rows reduced, the
    ranges carried to the sink with them."""
    factory = TargetFactory("delta", request, tmp_path)
    sink = factory()
    try:
        apply_arrow(sink, change_rows(list(range(1, 11)), 1), 1, ApplySpec(keys=("id",)))
        apply_arrow(sink, change_rows([2, 3], 100), 2, ApplySpec(keys=("id",)),
                    replaces=(KeyRange("id", None, 5),))
        got = sink.read()
        assert sorted(got.column("id").to_pylist()) == [2, 3, 5, 6, 7, 8, 9, 10]
    finally:
        factory.close()
