"""Watermark normalization (docs/algorithm.md, "Reading a chunk without a lock"), as pure functions.

A chunk ``[s, e)`` was selected at some instant between the low watermark LW and the high
watermark HW. Replaying, in binlog order, every change of the window ``[LW, HW)`` whose key
lies in the chunk brings each touched key to its state at HW (row images are full); keys the
window does not touch did not change, so their selected row already is their state at HW.

The patch is computed from the events alone (``compute_patch``) and then applied to the
selected rows (``apply_patch``, on Arrow). Keeping the two apart lets the Spark source apply
one window's patch to rows staged by an earlier batch.

Chunk membership is decided by ``in_chunk``, a callable the dialect supplies: integer keys
compare in Python, string keys in the server's collation (never in Python).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from typing import Any

from sparkcdc.core.records import ChangeRecord
from sparkcdc.core.schema import TableSchema

InChunk = Callable[[Sequence[Any]], Sequence[bool]]
"""Given chunk-key values, say for each whether it lies in the chunk being normalized."""


@dataclass
class ChunkPatch:
    """What the window does to a chunk: ``final[key]`` is the row at HW, or None if the key
    no longer exists (deleted, or moved out of the chunk by a key change). Keys not in
    ``final`` are untouched: their selected row stands."""

    final: dict[tuple, dict[str, Any] | None] = field(default_factory=dict)
    events_applied: int = 0

    @property
    def empty(self) -> bool:
        return not self.final


def _located(events: Iterable[ChangeRecord], schema: TableSchema,
             in_chunk: InChunk) -> list[tuple[ChangeRecord, bool, bool]]:
    """The table's events, each with whether its before- and after-image lie in the chunk
    (one ``in_chunk`` call for the whole window: one server query for text keys)."""
    mine = [ev for ev in events if ev.table_id == schema.table_id]
    ck = schema.chunk_key
    probe = [img[ck] for ev in mine for img in (ev.before, ev.after) if img is not None]
    verdicts = iter(in_chunk(probe)) if probe else iter(())
    return [(ev, next(verdicts) if ev.before is not None else False,
             next(verdicts) if ev.after is not None else False) for ev in mine]


def compute_patch(events: Iterable[ChangeRecord], schema: TableSchema,
                  in_chunk: InChunk) -> ChunkPatch:
    """Replay the window's events of ``schema``'s table onto an empty patch, in order."""
    patch = ChunkPatch()
    key_cols = schema.row_key
    for ev, before_in, after_in in _located(events, schema, in_chunk):
        touched = False
        before, after = ev.before, ev.after  # an image is in the chunk only if it exists
        if before_in and before is not None:  # delete, or the old side of an update
            k = tuple(before[c] for c in key_cols)
            patch.final.pop(k, None)  # re-insertion order follows the binlog
            patch.final[k] = None
            touched = True
        if after_in and after is not None:  # insert, or the new side of an update
            k = tuple(after[c] for c in key_cols)
            patch.final.pop(k, None)
            patch.final[k] = after
            touched = True
        patch.events_applied += touched
    return patch


def compute_rollback(events: Iterable[ChangeRecord], schema: TableSchema,
                     in_chunk: InChunk) -> ChunkPatch:
    """The patch that takes a chunk selected inside the window ``[LW, HW)`` back to LW.

    The mirror image of ``compute_patch``, used by the Spark source (docs/spark-source.md):
    the driver fixes LW before any executor reads, so "the chunk as of LW" is the same on
    every replay, however late the replay selects. With full row images the state of a
    touched key at LW is known exactly: the before-image of the first event of the window
    that names it with its old key, or absent if the first event names it as a new key
    (an insert, or the new side of a key change). Keys the window does not touch did not
    change, so the select saw their state at LW.
    """
    patch = ChunkPatch()
    key_cols = schema.row_key
    for ev, before_in, after_in in _located(events, schema, in_chunk):
        before, after = ev.before, ev.after  # an image is in the chunk only if it exists
        if before_in and before is not None:
            k = tuple(before[c] for c in key_cols)
            if k not in patch.final:  # only the first event of a key tells its state at LW
                patch.final[k] = before
                patch.events_applied += 1
        if after_in and after is not None:
            k = tuple(after[c] for c in key_cols)
            if k not in patch.final:
                patch.final[k] = None
                patch.events_applied += 1
    return patch


def apply_patch_rows(rows: Iterable[dict[str, Any]], patch: ChunkPatch,
                     schema: TableSchema) -> list[dict[str, Any]]:
    """The chunk at HW, for rows held as dicts (used by tests and small tables)."""
    key_cols = schema.row_key
    out = [r for r in rows if tuple(r[c] for c in key_cols) not in patch.final]
    out.extend(r for r in patch.final.values() if r is not None)
    return out


def apply_patch(table, patch: ChunkPatch, schema: TableSchema):
    """The chunk at HW, for a ``pyarrow.Table`` of canonical values.

    Untouched rows are kept by one vectorized filter; only the touched keys are rebuilt
    from Python values, so the cost is proportional to the window, not to the chunk.
    """
    import pyarrow as pa

    if patch.empty:
        return table
    key_cols = schema.row_key
    keys = zip(*(table.column(c).to_pylist() for c in key_cols))
    keep = pa.array([k not in patch.final for k in keys], type=pa.bool_())
    kept = table.filter(keep)
    new_rows = [r for r in patch.final.values() if r is not None]
    if not new_rows:
        return kept
    added = pa.Table.from_pylist([{c: r.get(c) for c in table.schema.names} for r in new_rows],
                                 schema=table.schema)
    return pa.concat_tables([kept, added])
