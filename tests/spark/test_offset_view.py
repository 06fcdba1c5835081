"""What a checkpointed offset says, typed (``spark/offset_view.py``, read by the pipeline
without Spark): the ranges of the chunks a batch reads again whole, which their targets
replace (docs/algorithm.md, "A chunk read again replaces its range"), and none of a chunk
read again in part or of a first snapshot; a table's part of the assigner state."""

from __future__ import annotations

import datetime as dt
import json

from sparkcdc.core.chunking import SnapshotSplit
from sparkcdc.core.schema import TableId
from sparkcdc.spark.offset_view import OffsetView, TableOffset, read_offset

A, B = TableId("db", "a"), TableId("db", "b")


def test_the_ranges_of_chunks_read_again_whole_come_back_typed_and_in_order():
    chunks = [SnapshotSplit(A, 0, None, 10, ""), SnapshotSplit(A, 1, 10, 20, ""),
              SnapshotSplit(A, 2, 20, None, "id % 3 = 0"),  # --where: replaces nothing
              SnapshotSplit(B, 0, None, dt.date(2024, 1, 1), ""),
              SnapshotSplit(B, 1, dt.date(2024, 1, 1), None)]  # a first snapshot's
    # as Spark's offset log holds it: JSON text
    off = OffsetView.from_dict(json.loads(json.dumps(
        {"batch_chunks": [c.to_dict() for c in chunks]})))
    assert off.reread_ranges("db.a") == [(None, 10), (10, 20)]
    assert off.reread_ranges("db.b") == [(None, dt.date(2024, 1, 1))]
    assert off.reread_ranges("db.c") == []
    assert OffsetView.from_dict({"batch_chunks": []}).reread_ranges("db.a") == []
    assert off.tables_read == {"db.a", "db.b"} and off.chunk_count == 5


def test_an_offset_read_from_the_log_answers_typed_and_keeps_its_json(tmp_path):
    """Spark's offset log: a version line, its metadata, then one JSON line per source;
    ours holds the assigner. Its dict comes back untouched (no key added by the view)."""
    d = {"pos": {"file": "mysql-bin.000002", "pos": 900, "events": 0, "rows": 0,
                 "gtid": None, "flavor": "mysql"},
         "assigner": {"tables": [
             {"table": "db.a", "phase": "done", "chunks_done": 7, "generation": 2,
              "since": None, "reread_id": 3, "reread": None},
             {"table": "db.b", "phase": "snapshotting", "chunks_done": 2, "generation": 0,
              "since": {"file": "mysql-bin.000002", "pos": 400}, "reread": {"id": 1},
              "planner": {"strategy": "even", "min": {"int": 1}, "max": {"int": 100},
                          "step": 10}}]}}
    text = json.dumps(d)
    (tmp_path / "offsets").mkdir()
    (tmp_path / "offsets" / "4").write_text(f"v1\n{{}}\n{text}\n")
    off = read_offset(tmp_path, 4)
    assert off is not None and read_offset(tmp_path, 5) is None
    assert (off.position.file, off.position.pos) == ("mysql-bin.000002", 900)
    a, b = off.table("db.a"), off.table("db.b")
    assert (a.phase, a.chunks_done, a.generation, a.reread_id, a.rereading) == (
        "done", 7, 2, 3, False)
    assert a.chunks_total(5) == 7 and b.chunks_total(2) == 10
    assert b.since == {"file": "mysql-bin.000002", "pos": 400} and b.rereading
    assert off.table("db.c") == TableOffset() and off.table("db.c").chunks_total(0) is None
    assert json.dumps(off.to_dict()) == text
