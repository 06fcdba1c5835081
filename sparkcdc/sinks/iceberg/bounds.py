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

from typing import Any

MAX_KEPT = 20_000  # manifests whose bounds a process keeps; beyond, it starts again

# (manifest path, key field id) -> (lower, upper) of each live data file (None: unknown)
_kept: dict[tuple[str, int], tuple[tuple[int | None, int | None], ...]] = {}


def integer_key(table, key: str) -> Any:
    """The key's field when it is an integer column of ``table``, else None."""
    from pyiceberg.types import IntegerType, LongType

    field = table.schema().find_field(key)
    return field if isinstance(field.field_type, (IntegerType, LongType)) else None


def may_hold(table, field: Any, lo: int, hi: int) -> bool:
    """Whether a live data file of ``table``'s current snapshot may hold a row whose
    ``field`` (an integer key column, ``integer_key``) lies in ``[lo, hi]``."""
    from pyiceberg.manifest import ManifestContent

    snap = table.current_snapshot()
    if snap is None:
        return False
    for m in snap.manifests(table.io):
        if m.content != ManifestContent.DATA or not (m.has_added_files()
                                                     or m.has_existing_files()):
            continue
        for lower, upper in _bounds(table, m, field):
            if lower is None or upper is None or not (upper < lo or lower > hi):
                return True
    return False


def _bounds(table, manifest: Any, field: Any) -> tuple[tuple[int | None, int | None], ...]:
    from pyiceberg.conversions import from_bytes

    kept = _kept.get((manifest.manifest_path, field.field_id))
    if kept is not None:
        return kept
    fid, got = field.field_id, []
    for e in manifest.fetch_manifest_entry(table.io, discard_deleted=True):
        lo = (e.data_file.lower_bounds or {}).get(fid)
        hi = (e.data_file.upper_bounds or {}).get(fid)
        got.append((None if lo is None else int(from_bytes(field.field_type, lo)),
                    None if hi is None else int(from_bytes(field.field_type, hi))))
    if len(_kept) >= MAX_KEPT:
        _kept.clear()
    kept = _kept[(manifest.manifest_path, fid)] = tuple(got)
    return kept
