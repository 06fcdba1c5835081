"""Whether an Iceberg table may hold a row whose integer key lies in a range, from its
manifests, each manifest read once per process.

A Spark task asks it of every snapshot chunk it writes as files (``IcebergSink.new_rows``:
rows new to the target are appended, the rest merged). pyiceberg's scan planning opens every
manifest of the snapshot at each ask; a snapshot's table gains a manifest or two per batch,
and its workers spent 9% of their time there in a snapshot of 2,000,000 rows
(docs/benchmarks.md, "Iceberg's purge in its tasks"). A manifest never changes once written
(the spec's "Manifests": a new snapshot writes new ones), so its live data files' key bounds
are kept by path, and a worker reads only the manifest list and the manifests committed
since it last asked.

Only integer keys (``int``/``long``): their bounds read back exactly. Any other type, or a
file without bounds for the key, answers "may hold", as a scan would plan it.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

MAX_KEPT = 20_000  # manifests whose bounds a process keeps; beyond, it starts again

# (manifest path, key field id) -> (lower, upper) of each live data file (None: unknown)
_kept: dict[tuple[str, int], tuple[tuple[int, int] | None, ...]] = {}

Span = tuple[int | None, int | None]  # [lo, hi], None: unbounded on that side


def integer_key(table, key: str) -> Any:
    """The key's field when it is an integer column of ``table``, else None."""
    from pyiceberg.types import IntegerType, LongType

    field = table.schema().find_field(key)
    return field if isinstance(field.field_type, (IntegerType, LongType)) else None


def int_bounds(f: Any, field: Any) -> tuple[int, int] | None:
    """A data file's lower and upper bound of ``field`` (an integer column), or None when
    it lacks either."""
    from pyiceberg.conversions import from_bytes

    lo = (f.lower_bounds or {}).get(field.field_id)
    hi = (f.upper_bounds or {}).get(field.field_id)
    if lo is None or hi is None:
        return None
    return int(from_bytes(field.field_type, lo)), int(from_bytes(field.field_type, hi))


def may_hold(table, field: Any, spans: Iterable[Span]) -> bool:
    """Whether a live data file of ``table``'s current snapshot may hold a row whose
    ``field`` (an integer key column, ``integer_key``) lies in one of ``spans``; the
    snapshot's manifest list read once for all of them."""
    from pyiceberg.manifest import ManifestContent

    snap = table.current_snapshot()
    spans = list(spans)
    if snap is None or not spans:
        return False
    for m in snap.manifests(table.io):
        if m.content != ManifestContent.DATA or not (m.has_added_files()
                                                     or m.has_existing_files()):
            continue
        for b in _bounds(table, m, field):
            if b is None or any((hi is None or b[0] <= hi) and (lo is None or b[1] >= lo)
                                for lo, hi in spans):
                return True
    return False


def _bounds(table, manifest: Any, field: Any) -> tuple[tuple[int, int] | None, ...]:
    key = (manifest.manifest_path, field.field_id)
    kept = _kept.get(key)
    if kept is None:
        kept = tuple(int_bounds(e.data_file, field)
                     for e in manifest.fetch_manifest_entry(table.io, discard_deleted=True))
        if len(_kept) >= MAX_KEPT:
            _kept.clear()
        _kept[key] = kept
    return kept
