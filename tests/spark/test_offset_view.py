"""What a checkpointed offset says about the chunks a batch reads again
(``spark/offset_view.py``, read by the pipeline without Spark): the ranges of the chunks
read again whole, which their targets replace (docs/algorithm.md, "A chunk read again
replaces its range"), and none of a chunk read again in part or of a first snapshot."""

from __future__ import annotations

import datetime as dt
import json

from sparkcdc.core.chunking import SnapshotSplit
from sparkcdc.core.schema import TableId
from sparkcdc.spark.offset_view import reread_ranges

A, B = TableId("db", "a"), TableId("db", "b")


def test_the_ranges_of_chunks_read_again_whole_come_back_typed_and_in_order():
    chunks = [SnapshotSplit(A, 0, None, 10, ""), SnapshotSplit(A, 1, 10, 20, ""),
              SnapshotSplit(A, 2, 20, None, "id % 3 = 0"),  # --where: replaces nothing
              SnapshotSplit(B, 0, None, dt.date(2024, 1, 1), ""),
              SnapshotSplit(B, 1, dt.date(2024, 1, 1), None)]  # a first snapshot's
    # as Spark's offset log holds it: JSON text
    off = json.loads(json.dumps({"batch_chunks": [c.to_dict() for c in chunks]}))
    assert reread_ranges(off, "db.a") == [(None, 10), (10, 20)]
    assert reread_ranges(off, "db.b") == [(None, dt.date(2024, 1, 1))]
    assert reread_ranges(off, "db.c") == []
    assert reread_ranges({"batch_chunks": []}, "db.a") == []
