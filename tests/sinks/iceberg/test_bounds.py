"""``sinks/iceberg/bounds.py``: whether a table may hold an integer key range, from its
manifests' bounds, each manifest read once per process; judged against pyiceberg's own scan
planning (``merge.may_hold``) over tables of several snapshots, after deletes, a purge and
a compaction."""

from __future__ import annotations

import random

import pyarrow as pa

from sparkcdc import sinks
from sparkcdc.sinks.iceberg import bounds
from sparkcdc.sinks.iceberg.merge import between, may_hold

SCHEMA = pa.schema([("id", pa.int64()), ("v", pa.int64())])


def _sink(tmp_path, **options):
    sink = sinks.create("iceberg", {"warehouse": str(tmp_path / "wh"), "table": "db.t",
                                    "app-id": "app", "compact-every": "0", **options})
    sink.ready_for_files(SCHEMA)
    return sink


def _append(sink, ids: list[int], batch: int) -> None:
    written = sink.write_files(pa.table({"id": ids, "v": ids}, schema=SCHEMA), batch)
    sink.commit_files(written, SCHEMA, batch)


def _agree(table, probes) -> int:
    field = bounds.integer_key(table, "id")
    held = 0
    for lo, hi in probes:
        got = bounds.may_hold(table, field, [(lo, hi)])
        assert got == may_hold(table, between("id", lo, hi)), (lo, hi)
        held += got
    return held


def test_the_manifests_bounds_answer_as_the_scan_does_and_each_manifest_is_read_once(
        tmp_path, monkeypatch):
    sink = _sink(tmp_path, **{"purge-deleted-share": "0.5"})
    table = sink._table()
    assert not bounds.may_hold(table, bounds.integer_key(table, "id"), [(0, 10)])  # no snapshot
    for b, start in enumerate(range(0, 5000, 1000)):  # five snapshots, ranges apart
        _append(sink, list(range(start, start + 1000, 2)), b)
    probes = [(x, x) for x in (-1, 0, 1, 998, 999, 4998, 4999, 5000)] + [
        (-10, -1), (5000, 6000), (3000, 3000), (-5, 0), (4998, 9000)]
    rng = random.Random(3)
    probes += [(a, a + rng.randrange(0, 50)) for a in rng.sample(range(-100, 5100), 40)]
    assert 0 < _agree(sink._table(), probes) < len(probes)
    # the same table asked again: no manifest opened again (only the snapshot's list)
    opened = []
    from pyiceberg.manifest import ManifestFile

    fetch = ManifestFile.fetch_manifest_entry

    def counting(self, *a, **k):
        opened.append(self.manifest_path)
        return fetch(self, *a, **k)

    monkeypatch.setattr(ManifestFile, "fetch_manifest_entry", counting)
    field = bounds.integer_key(sink._table(), "id")
    for lo, hi in probes:
        bounds.may_hold(sink._table(), field, [(lo, hi)])
    assert opened == []
    monkeypatch.undo()
    # deletes, then a batch that purges the first file: a new manifest, the old file gone
    plan = sink.plan_changes(("id",), SCHEMA, 1)
    gone = pa.table({"id": pa.array(list(range(0, 1000, 2)), pa.int64())})
    w = sink.write_changes(plan, 0, SCHEMA.empty_table(), gone, 5)
    sink.commit_changes(plan, [w], 5)
    assert not bounds.may_hold(sink._table(), field, [(0, 998)])  # the whole first file purged
    _agree(sink._table(), probes)
    sink.compact(6)
    _agree(sink._table(), probes)


def test_a_key_that_is_not_an_integer_is_left_to_the_scan(tmp_path):
    sink = sinks.create("iceberg", {"warehouse": str(tmp_path / "wh"), "table": "db.s",
                                    "app-id": "app"})
    schema = pa.schema([("k", pa.string()), ("v", pa.int64())])
    sink.ready_for_files(schema)
    assert bounds.integer_key(sink._table(), "k") is None
