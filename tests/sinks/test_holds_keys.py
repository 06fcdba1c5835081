"""``Sink.holds_keys_in``: whether a target may hold rows in spans of keys, from its
metadata alone, as the driver asks before a snapshot's batch (``MicroBatch._quiet``): Delta
from its files' statistics, Iceberg from its manifests' bounds; a side left open (None) is
unbounded, and a span the statistics cannot compare may hold."""

from __future__ import annotations

import pyarrow as pa
import pytest

from sparkcdc import sinks

SCHEMA = pa.schema([("id", pa.int64()), ("v", pa.string())])


def _sink(kind: str, tmp_path):
    options = ({"path": str(tmp_path / "d")} if kind == "delta" else
               {"warehouse": str(tmp_path / "wh"), "table": "db.t"})
    return sinks.create(kind, {**options, "app-id": "app"})


@pytest.mark.parametrize("kind", ["delta", "iceberg"])
def test_a_targets_metadata_says_which_spans_it_may_hold(tmp_path, kind):
    sink = _sink(kind, tmp_path)
    assert not sink.holds_keys_in("id", [(None, None)])  # no table yet: holds nothing
    sink.ready_for_files(SCHEMA)
    assert not sink.holds_keys_in("id", [(1, 10)])  # an empty table
    for batch, lo in enumerate((100, 300)):  # two files: ids 100-199 and 300-399
        ids = list(range(lo, lo + 100))
        written = sink.write_files(pa.table({"id": ids, "v": ["x"] * 100}, schema=SCHEMA),
                                   batch)
        sink.commit_files(written, SCHEMA, batch)
    held = {(None, 50): False, (None, 100): True, (150, 160): True, (200, 299): False,
            (250, None): True, (400, None): False, (None, None): True, (399, 399): True,
            (0, 99): False}
    assert {span: bool(sink.holds_keys_in("id", [span])) for span in held} == held
    # several spans at once: whether any of them may be held
    assert sink.holds_keys_in("id", [(None, 50), (200, 299), (150, 160)])
    assert not sink.holds_keys_in("id", [(None, 50), (200, 299), (400, None)])
    if kind == "delta":  # a span its statistics cannot compare with: may hold
        assert sink.holds_keys_in("id", [("a", "b")]) is True
    else:  # not integers: the tasks tell, from their rows
        assert sink.holds_keys_in("id", [("a", "b")]) is None
