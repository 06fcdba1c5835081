"""The split assigner: an explicit state machine whose whole state round-trips JSON."""

from __future__ import annotations

import bisect
import itertools
import json

import pytest

from sparkcdc.core.assigner import IllegalTransition, Phase, SplitAssigner, TablePhase
from sparkcdc.core.chunking import ChunkEnd, ChunkingOptions, ChunkPlanner
from sparkcdc.core.offsets import BinlogOffset
from sparkcdc.core.schema import TableId


class ListProbe:
    """A KeyProbe over a sorted Python list of ints (ints compare like the server's)."""

    def __init__(self, keys):
        self.keys = sorted(keys)

    def min_max(self):
        return (self.keys[0], self.keys[-1]) if self.keys else None

    def row_count(self):
        return len(self.keys)

    def next_chunk_end(self, start, chunk_size):
        i = 0 if start is None else bisect.bisect_left(self.keys, start)
        j = i + chunk_size
        if j >= len(self.keys):
            return None
        return ChunkEnd(self.keys[j], start is None or self.keys[j] > start)

    def next_key_after(self, value):
        i = bisect.bisect_right(self.keys, value)
        return self.keys[i] if i < len(self.keys) else None

    def sample(self, after, every, limit):
        i = 0 if after is None else bisect.bisect_right(self.keys, after)
        return self.keys[i + every - 1::every][:limit]


A, B = TableId("db", "a"), TableId("db", "b")
DATA = {A: list(range(1, 1001)), B: [1, 5, 10**6, 10**9]}
OPTS = ChunkingOptions(chunk_size=100)


def factory(t):
    return ChunkPlanner(t, integral_key=True, options=OPTS), ListProbe(DATA[t])


def new_assigner():
    return SplitAssigner.for_snapshot(factory(t)[0] for t in (B, A))


def roundtrip(a: SplitAssigner) -> SplitAssigner:
    text = json.dumps(a.to_dict())
    again = SplitAssigner.from_dict(json.loads(text))
    assert json.dumps(again.to_dict()) == text
    return again


def test_assigns_in_key_order_and_reaches_streaming():
    a = new_assigner()
    assert a.phase == Phase.SNAPSHOTTING and list(a.tables) == [A, B]
    seen = []
    while a.phase == Phase.SNAPSHOTTING:
        a = roundtrip(a)
        chunks = a.assign(3, factory)
        assert chunks
        for c in chunks:
            a.finish(c)
            seen.append(c)
    per_table = {t: [c for c in seen if c.table_id == t] for t in (A, B)}
    for t, chunks in per_table.items():
        assert chunks[0].start is None and chunks[-1].end is None
        for prev, nxt in itertools.pairwise(chunks):
            assert prev.end == nxt.start  # contiguous: the covered part is a prefix
        assert a.tables[t].phase == TablePhase.DONE
    assert a.phase == Phase.STREAMING
    with pytest.raises(IllegalTransition):
        a.assign(1, factory)


def test_covered_prefix_drives_the_filter_view():
    a = new_assigner()
    first = a.assign(2, factory)
    assert a.covered(A) == (False, False, None)
    a.finish(first[0])
    started, complete, end = a.covered(A)
    assert started and not complete and end == first[0].end
    view = a.finished_view(BinlogOffset("binlog.000001", 100))
    splits, complete = view[A]
    assert (splits[0].start, splits[0].end, complete) == (None, first[0].end, False)
    assert view[B] == ([], False)


def test_finishing_out_of_order_is_illegal():
    a = new_assigner()
    c1, c2 = a.assign(2, factory)
    with pytest.raises(IllegalTransition):
        a.finish(c2)
    a.finish(c1)
    a.finish(c2)
    with pytest.raises(IllegalTransition):
        a.finish(c2)


def test_streaming_only_covers_everything():
    a = SplitAssigner.streaming_only([A, B])
    assert a.phase == Phase.STREAMING and a.covered(A) == (True, True, None)
    assert roundtrip(a).to_dict() == a.to_dict()


def test_state_stays_small():
    a = new_assigner()
    while a.phase == Phase.SNAPSHOTTING:
        for c in a.assign(8, factory):
            a.finish(c)
    assert len(json.dumps(a.to_dict())) < 1000


def _finish_all(a: SplitAssigner) -> None:
    while a.phase == Phase.SNAPSHOTTING:
        for c in a.assign(8, factory):
            a.finish(c)


def planner_of(t):
    return factory(t)[0]


def test_reconcile_adds_a_table_to_a_streaming_assigner():
    """A table new to a running stream is planned and snapshotted while the others stream:
    until its first chunk finishes nothing of it is covered, then its prefix is."""
    a = SplitAssigner.for_snapshot([planner_of(A)])
    _finish_all(a)
    assert a.phase == Phase.STREAMING
    assert a.reconcile({A: 0, B: 0}, planner_of, snapshot=True)
    a = roundtrip(a)
    assert a.phase == Phase.SNAPSHOTTING and a.tables[B].phase == TablePhase.PLANNING
    assert a.covered(A) == (True, True, None) and a.covered(B) == (False, False, None)
    chunks = a.assign(8, factory)
    assert {c.table_id for c in chunks} == {B}  # A is done: only B has chunks
    for c in chunks:
        a.finish(c)
    _finish_all(a)
    assert a.phase == Phase.STREAMING and a.covered(B) == (True, True, None)
    assert not a.reconcile({A: 0, B: 0}, planner_of, snapshot=True)  # nothing changed


def test_reconcile_takes_a_table_again_under_a_new_generation_and_forgets_the_gone():
    a = new_assigner()
    _finish_all(a)
    before = a.to_dict()
    assert a.reconcile({A: 1}, planner_of, snapshot=True)  # A again; B gone
    assert list(a.tables) == [A] and a.tables[A].generation == 1
    assert a.tables[A].phase == TablePhase.PLANNING and a.phase == Phase.SNAPSHOTTING
    # the window between the two offsets passes on neither: A is taken again, B is gone
    old = SplitAssigner.from_dict(before)
    assert old.still_in(a).tables == {}
    assert old.still_in(old) is old
    # without a snapshot (a stream started at a binlog position) a new table streams at once
    s = SplitAssigner.streaming_only([A])
    assert s.reconcile({A: 0, B: 0}, planner_of, snapshot=False)
    assert s.phase == Phase.STREAMING and s.covered(B) == (True, True, None)


def test_a_table_joins_from_a_binlog_offset_without_a_snapshot():
    """A table given an offset (one renamed to its name there) is streamed at once, with no
    chunk to read, and is reported as joining from that offset in the batch it joins in
    only: the window of that batch passes none of it, so its changes from the offset are
    read apart (``joined_since``), once."""
    a = SplitAssigner.for_snapshot([planner_of(A)])
    _finish_all(a)
    before = SplitAssigner.from_dict(a.to_dict())
    at = BinlogOffset("mysql-bin.000003", 1234).to_dict()
    assert a.reconcile({A: 0, B: 0}, planner_of, snapshot=True, since={B: at})
    a = roundtrip(a)
    assert a.phase == Phase.STREAMING and a.tables[B].since == at
    assert a.covered(B) == (True, True, None)  # nothing to read: no snapshot
    assert list(a.joined_since(before)) == [B]
    assert B not in before.still_in(a).tables  # the join batch's window: none of B
    assert a.joined_since(roundtrip(a)) == {}  # the next batch: B is an ordinary member
    assert not a.reconcile({A: 0, B: 0}, planner_of, snapshot=True, since={B: at})
    # taken again under a new generation from an offset: joins again
    later = BinlogOffset("mysql-bin.000004", 4).to_dict()
    prev = roundtrip(a)
    assert a.reconcile({A: 0, B: 1}, planner_of, snapshot=True, since={B: later})
    assert a.joined_since(prev) == {B: a.tables[B]} and a.tables[B].since == later
    assert "since" not in roundtrip(a).to_dict()["tables"][0]  # A: the key only where set


def test_a_streaming_table_is_read_again_in_part_while_its_changes_keep_flowing():
    """A reread (``sparkcdc snapshot --where``) of a DONE table: its chunks carry the
    condition and come in key order like a snapshot's, the stream filter's view of the
    table never moves (every key stays covered, so no change is held back), each reread id
    is taken once, and the assigner streams again after the last chunk."""
    a = new_assigner()
    _finish_all(a)
    view = a.finished_view(BinlogOffset("b.000001", 4))
    assert a.reconcile({A: 0, B: 0}, planner_of, snapshot=True, rereads={A: (1, "id < 300")})
    a = roundtrip(a)
    assert a.phase == Phase.SNAPSHOTTING and a.tables[A].phase == TablePhase.DONE
    got = []
    while a.phase == Phase.SNAPSHOTTING:
        chunks = a.assign(3, factory)
        assert chunks and all(c.where == "id < 300" and c.table_id == A for c in chunks)
        assert a.covered(A) == (True, True, None)  # the stream filter passes all of A
        for c in chunks:
            a.finish(c)
            got.append(c)
        a = roundtrip(a)
    assert got[0].start is None and got[-1].end is None
    assert all(x.end == y.start for x, y in itertools.pairwise(got))  # the whole key space, once
    assert a.finished_view(BinlogOffset("b.000001", 4)) == view
    assert not a.reconcile({A: 0, B: 0}, planner_of, snapshot=True,
                           rereads={A: (1, "id < 300")})  # taken once
    assert a.reconcile({A: 0, B: 0}, planner_of, snapshot=True, rereads={A: (2, "id > 5")})
    with pytest.raises(IllegalTransition):  # a reread chunk out of order
        _c1, c2 = a.assign(2, factory)
        a.finish(c2)


def test_a_reread_of_a_table_in_its_snapshot_waits_for_nothing():
    """A table still in its snapshot reads every row anyway: a reread is not taken while it
    lasts."""
    a = new_assigner()
    a.assign(1, factory)
    assert not a.reconcile({A: 0, B: 0}, planner_of, snapshot=True, rereads={A: (1, "1=1")})
    assert a.tables[A].reread is None
