"""The batch's first stage with key slices to cut (``task_files.write_snapshot_files`` with a
``Router``): a routed table's record batches become pieces for their write tasks and one
``changes`` row per task; a record batch of several tables is cut by table, so a routed
table among them keeps the tasks' path; rows a plan cannot convert are handed back and
name their table (it takes the driver's path whole); every row out names a write task.
And ``hand_back``, the batch read again for some tables: theirs only, in order."""

from __future__ import annotations

from collections.abc import Iterator

import pyarrow as pa

from sparkcdc.pipeline.run.task_files import (
    CHANGES,
    NAMES,
    PIECES,
    ROWS,
    TaskOutput,
    hand_back,
    write_snapshot_files,
)
from sparkcdc.spark.arrow_batches import from_ipc, to_ipc


class FakeRouter:
    """Cuts a table's rows into one piece per row, to write task ``id % tasks``; a table
    named ``db.bad`` does not convert."""

    def __init__(self, tables: set[str], tasks: int = 3):
        self.tables = frozenset(tables)
        self.tasks = tasks

    def pieces(self, table: str, rows: pa.Table) -> Iterator[tuple[int, int, int, bytes]]:
        if table == "db.bad":
            raise ValueError("not of the plan's shape")
        for i, key in enumerate(rows.column("id").to_pylist()):
            yield key % self.tasks, 0, i, to_ipc(rows.slice(i, 1)).to_pybytes()


def changes(*rows: tuple[str, int]) -> bytes:
    """A record batch of change rows ``(table, id)`` (a commit time: not a chunk's)."""
    return to_ipc(pa.table({
        "_database": ["db"] * len(rows), "_table": [t for t, _ in rows],
        "_op_ts": pa.array([1] * len(rows), pa.int64()),
        "id": pa.array([k for _, k in rows], pa.int64())})).to_pybytes()


def run(router: FakeRouter, *ipcs: bytes) -> list[dict]:
    batch = pa.RecordBatch.from_arrays([pa.array(list(ipcs), pa.binary())], names=["_batch"])
    return [r for b in write_snapshot_files([batch], {}, "delta", {}, None, router=router)
            for r in b.to_pylist()]


def test_routed_rows_become_pieces_and_the_rest_comes_back():
    out = run(FakeRouter({"db.a"}), changes(("a", 1), ("a", 2)), changes(("b", 5)),
              changes(("a", 4)))
    pieces = [r for r in out if r["kind"] == PIECES]
    assert sorted(r["part"] for r in pieces) == [1, 1, 2]  # id % 3 for ids 1, 2, 4
    assert sorted(from_ipc(r["payload"])["id"][0].as_py() for r in pieces) == [1, 2, 4]
    assert [r["tbl"] for r in out if r["kind"] == CHANGES] == ["db.a"]  # once a task
    back = [r for r in out if r["kind"] == ROWS]
    assert [from_ipc(r["payload"])["_table"].to_pylist() for r in back] == [["b"]]
    assert not [r for r in out if r["kind"] == NAMES]
    assert all(r["part"] is not None for r in out), "a row with no write task"


def test_a_record_batch_of_several_tables_is_cut_by_table():
    out = run(FakeRouter({"db.a"}), changes(("a", 1), ("b", 7), ("a", 3), ("b", 8)))
    pieces = [from_ipc(r["payload"]) for r in out if r["kind"] == PIECES]
    assert sorted(p["id"][0].as_py() for p in pieces) == [1, 3]
    back = [from_ipc(r["payload"]) for r in out if r["kind"] == ROWS]
    assert [(t["_table"].to_pylist(), t["id"].to_pylist()) for t in back] == [
        (["b", "b"], [7, 8])]
    assert not [r for r in out if r["kind"] == NAMES], "the routed table lost its path"


def test_rows_a_plan_cannot_convert_are_handed_back_and_name_their_table():
    out = run(FakeRouter({"db.a", "db.bad"}), changes(("bad", 1)), changes(("a", 2)))
    got = TaskOutput.of(r for r in out if r["kind"] != PIECES)  # (the write tasks' own)
    assert got.kept == {"db.a"} and got.named == {"db.bad"}
    assert [from_ipc(p)["_table"].to_pylist() for p in got.rows.values()] == [["bad"]]


def test_a_batch_read_again_hands_back_only_the_tables_asked_in_order():
    ipcs = [changes(("a", 1), ("b", 2)), changes(("b", 3)), changes(("a", 4)),
            changes(("c", 5))]
    batch = pa.RecordBatch.from_arrays([pa.array(ipcs, pa.binary())], names=["_batch"])
    got = TaskOutput.of(r for b in hand_back([batch], frozenset({"db.a"}))
                        for r in b.to_pylist())
    rows = [from_ipc(got.rows[k]) for k in sorted(got.rows)]
    assert [(t["_table"].to_pylist(), t["id"].to_pylist()) for t in rows] == [
        (["a"], [1]), (["a"], [4])]


def test_a_record_batch_is_cut_by_slice_once_in_its_order():
    """``_by_slice``: every row in the piece of its slice, each piece in the record batch's
    order (one stable sort and one take, not a filter per slice), a batch of one slice
    whole."""
    from sparkcdc.pipeline.run.task_changes import _by_slice

    rows = pa.table({"id": [5, 1, 9, 3, 7, 2, 8], "seq": list(range(7))})
    where = pa.array([2, 0, 2, 1, 0, 0, 2], pa.int32())
    got = {s: t.to_pydict() for s, t in _by_slice(rows, where)}
    assert got == {0: {"id": [1, 7, 2], "seq": [1, 4, 5]}, 1: {"id": [3], "seq": [3]},
                   2: {"id": [5, 9, 8], "seq": [0, 2, 6]}}
    one = list(_by_slice(rows, pa.array([4] * 7, pa.int32())))
    assert len(one) == 1 and one[0][0] == 4 and one[0][1] is rows
    assert list(_by_slice(rows.slice(0, 0), pa.array([], pa.int32()))) == []
