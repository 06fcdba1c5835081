"""A Delta target gets a checkpoint every 100 versions whichever commit reaches the mark.

The changes path commits its own JSON (``changes.commit_changes``, ``changes.purge``), which
takes no checkpoint of itself; the sink took one only when a change's commit landed on a
multiple of 100, so a stream whose purges took those versions went hundreds of versions
without one, every batch reading the whole log again (docs/benchmarks.md, "The 30-minute
soak")."""

from __future__ import annotations

import pyarrow as pa
from deltalake import DeltaTable, write_deltalake

from sparkcdc.sinks.delta.log import last_checkpoint
from sparkcdc.sinks.delta.sink import DeltaSink


def _table_at(path, versions: int) -> None:
    for i in range(versions):
        write_deltalake(str(path), pa.table({"id": [i]}), mode="append", configuration={
            "delta.checkpointInterval": "100000"} if i == 0 else None)


def test_a_mark_passed_by_another_commit_still_takes_a_checkpoint(tmp_path):
    path = tmp_path / "t"
    _table_at(path, 103)  # versions 0..102; delta-rs' own checkpoints are kept off
    assert last_checkpoint(path) is None
    sink = DeltaSink.from_options({"path": str(path)})
    sink._checkpoint_if_due(DeltaTable(str(path)))  # at 102: the mark 100 went to others
    assert last_checkpoint(path) == 102
    # the next mark is 200: nothing until then, whatever commits come
    for i in range(5):
        write_deltalake(str(path), pa.table({"id": [1000 + i]}), mode="append")
    sink._checkpoint_if_due(DeltaTable(str(path)))
    assert last_checkpoint(path) == 102


def test_a_young_table_takes_none(tmp_path):
    path = tmp_path / "t"
    _table_at(path, 5)
    DeltaSink.from_options({"path": str(path)})._checkpoint_if_due(DeltaTable(str(path)))
    assert last_checkpoint(path) is None
