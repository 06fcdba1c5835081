"""Reading one chunk without locks: the watermark algorithm (docs/algorithm.md, "Reading a chunk without a lock").

``read_split`` is the whole algorithm, one numbered, logged step at a time. Everything that
touches the database goes through a ``SnapshotDialect``; ``WatermarkHooks`` let a test run
statements on the real server between the steps (for example, between the low watermark
and the select) and so check the backfill where it matters.
"""

from __future__ import annotations

import functools
import logging
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Protocol

from sparkcdc.core.normalize import (
    ChunkPatch,
    InChunk,
    apply_patch,
    compute_patch,
    compute_rollback,
)
from sparkcdc.core.offsets import BinlogOffset
from sparkcdc.core.records import ChangeRecord
from sparkcdc.core.schema import TableSchema
from sparkcdc.errors import OffsetError

log = logging.getLogger(__name__)


class SnapshotDialect(Protocol):
    """The database side of the algorithm (``sparkcdc.mysql.dialect`` implements it)."""

    def current_offset(self) -> BinlogOffset: ...

    def read_chunk(self, schema: TableSchema, start: Any, end: Any,
                   where: str | None = None): ...  # -> pyarrow.Table

    def read_window(self, schema: TableSchema | None, start: BinlogOffset,
                    end: BinlogOffset) -> Iterable[ChangeRecord]: ...

    def in_chunk(self, schema: TableSchema, start: Any, end: Any,
                 values: Sequence[Any]) -> Sequence[bool]: ...


@dataclass
class WatermarkHooks:
    """Test seams: called with no arguments right after the named step."""

    after_low_watermark: Callable[[], None] | None = None
    after_select: Callable[[], None] | None = None
    after_high_watermark: Callable[[], None] | None = None


@dataclass
class SplitResult:
    rows: Any  # pyarrow.Table of the chunk as of ``hw``
    low: BinlogOffset
    hw: BinlogOffset
    events_in_window: int
    events_applied: int


def _select_then_high_watermark(dialect: SnapshotDialect, schema: TableSchema, split_id: str,
                                start: Any, end: Any, hooks: WatermarkHooks,
                                where: str | None = None):
    """Steps 2 and 3, shared by both directions of normalization."""
    rows = (dialect.read_chunk(schema, start, end, where) if where is not None
            else dialect.read_chunk(schema, start, end))
    log.debug("%s step 2: selected %d rows", split_id, rows.num_rows)
    if hooks.after_select:
        hooks.after_select()
    high = dialect.current_offset()
    log.debug("%s step 3: high watermark %s", split_id, high)
    if hooks.after_high_watermark:
        hooks.after_high_watermark()
    return rows, high


def read_split(dialect: SnapshotDialect, schema: TableSchema, split_id: str, start: Any,
               end: Any, *, hooks: WatermarkHooks | None = None,
               backfill: bool = True) -> SplitResult:
    """Select chunk ``[start, end)`` and normalize it to its high watermark.

    With ``backfill=False`` (Flink's ``scan.incremental.snapshot.backfill.skip``) step 5 is
    skipped: the rows are as selected, and the stream (which must then start at the low
    watermark) replays the window instead; that gives at-least-once, not exactly-once.
    """
    hooks = hooks or WatermarkHooks()

    # 1. low watermark: the binlog position before the select
    low = dialect.current_offset()
    log.debug("%s step 1: low watermark %s", split_id, low)
    if hooks.after_low_watermark:
        hooks.after_low_watermark()

    # 2. one consistent select of the chunk (InnoDB: one statement, one read view)
    # 3. high watermark: the binlog position after the select
    rows, high = _select_then_high_watermark(dialect, schema, split_id, start, end, hooks)

    # 4. nothing moved between the watermarks: the rows are exact as of HW
    if high == low or not backfill:
        log.debug("%s step 4: %s", split_id,
                  "no change between watermarks" if high == low else "backfill skipped")
        return SplitResult(rows, low, high, 0, 0)

    # 5. replay the window [LW, HW) onto the rows: the chunk as of HW
    events = list(dialect.read_window(schema, low, high))
    patch = compute_patch(events, schema,
                          lambda values: dialect.in_chunk(schema, start, end, values))
    log.debug("%s step 5: window of %d events, %d touched the chunk", split_id,
              len(events), patch.events_applied)
    return SplitResult(apply_patch(rows, patch, schema), low, high, len(events),
                       patch.events_applied)


class RollbackLog:
    """The binlog after ``as_of``, reduced to what rolling chunks back to ``as_of`` needs,
    shared by every chunk a task reads as of the same position.

    The state of a key at ``as_of`` is told by the first change after ``as_of`` that names
    it: its before-image, or "absent" when that change creates the key. That holds whatever
    the window's end, as long as the end is at or after the chunk's high watermark: a key
    first changed after the chunk's select was untouched when the chunk was selected, so the
    select saw its state at ``as_of``, which is also that later change's before-image (and a
    key first created after the select is absent from both). So one window
    ``[as_of, W)``, read once and extended as later chunks' high watermarks move ``W``,
    rolls back every chunk; reading ``[as_of, HW)`` again for each chunk (one binlog
    connection each, the window growing with every chunk) is not needed.

    Only the first image of each (row key, chunk-key value) is kept, with its place in the
    window: a chunk's patch takes, per row key, the earliest of those whose chunk-key value
    lies in the chunk, which is exactly what ``compute_rollback`` takes from the full event
    list (an update may move a row between chunks when the chunk key is not the row key).
    Memory is one entry per key touched in the window, not one per event.
    """

    def __init__(self, dialect: SnapshotDialect, as_of: BinlogOffset,
                 tables: Mapping[Any, TableSchema]):
        self.dialect = dialect
        self.tables = tables  # the captured tables: read_window(None, ...) reads them all
        self.as_of = as_of
        self.end = as_of
        self.events = 0  # change events read so far
        self.reads = 0  # binlog windows opened
        self._first: dict[Any, dict[tuple, tuple[int, Any, dict[str, Any] | None]]] = {}

    def advance(self, high: BinlogOffset) -> None:
        """Extend the window to ``high`` (a chunk's high watermark)."""
        if not high > self.end:
            return
        n = self.events
        self.reads += 1
        for ev in self.dialect.read_window(None, self.end, high):
            self._note(ev, n)
            n += 1
        self.events = n
        self.end = high

    def _note(self, ev: ChangeRecord, n: int) -> None:
        tid = ev.table_id
        schema = self.tables.get(tid)
        if schema is None:
            return
        first = self._first.setdefault(tid, {})
        key_cols, ck = schema.row_key, schema.chunk_key
        if ev.before is not None:
            k = (tuple(ev.before[c] for c in key_cols), ev.before[ck])
            if k not in first:
                first[k] = (2 * n, ev.before[ck], ev.before)
        if ev.after is not None:
            k = (tuple(ev.after[c] for c in key_cols), ev.after[ck])
            if k not in first:
                first[k] = (2 * n + 1, ev.after[ck], None)

    def patch(self, schema: TableSchema, in_chunk: InChunk) -> ChunkPatch:
        """The rollback patch of a chunk of ``schema``'s table selected before ``self.end``."""
        first = self._first.get(schema.table_id)
        patch = ChunkPatch()
        if not first:
            return patch
        entries = list(first.items())
        verdicts = in_chunk([v[1] for _, v in entries])
        best: dict[tuple, tuple[int, dict[str, Any] | None]] = {}
        for ((rk, _ck), (order, _v, image)), inside in zip(entries, verdicts):
            if inside and (rk not in best or order < best[rk][0]):
                best[rk] = (order, image)
        for rk, (_order, image) in sorted(best.items(), key=lambda kv: kv[1][0]):
            patch.final[rk] = image
            patch.events_applied += 1
        return patch


@dataclass(frozen=True)
class SplitRead:
    """One chunk of ``read_splits_as_of``: ``[start, end)`` of ``schema``'s table, narrowed
    by ``where`` when the table is read again in part."""

    schema: TableSchema
    split_id: str
    start: Any
    end: Any
    where: str | None = None


def read_splits_as_of(dialect: SnapshotDialect, splits: Sequence[SplitRead],
                      as_of: BinlogOffset, log_: RollbackLog, *,
                      select_all: Callable[[Callable[[SplitRead], Any], Sequence[SplitRead]],
                                           Iterable[Any]] = map,
                      hooks: WatermarkHooks | None = None,
                      backfill: bool = True) -> list[SplitResult]:
    """Select several chunks, then read one high watermark for them all, and roll each back
    to ``as_of`` from one window: the binlog between ``as_of`` and the last select is read
    once, whatever the number of chunks (docs/spark-source.md, "One rollback read per
    batch"). ``select_all(f, splits)`` runs the selects, concurrently when it is a thread
    pool's ``map``: each select is one statement, one consistent read, and the high
    watermark is read after the last of them returns, so it is at or after every one.
    """
    hooks = hooks or WatermarkHooks()
    if log_.as_of != as_of:
        raise ValueError(f"a rollback log at {log_.as_of} cannot roll back to {as_of}")

    # 1. low watermark: given; it was read on the driver before this task was planned
    low = as_of
    log.debug("%d chunks step 1: low watermark %s (fixed by the planner)", len(splits), low)
    if hooks.after_low_watermark:
        hooks.after_low_watermark()

    # 2. one consistent select per chunk
    def select(s: SplitRead):
        return (dialect.read_chunk(s.schema, s.start, s.end, s.where) if s.where is not None
                else dialect.read_chunk(s.schema, s.start, s.end))

    selected = list(select_all(select, splits))
    log.debug("%d chunks step 2: selected %s rows", len(splits),
              [r.num_rows for r in selected])
    if hooks.after_select:
        hooks.after_select()

    # 3. one high watermark, after every select
    high = dialect.current_offset()
    log.debug("%d chunks step 3: high watermark %s", len(splits), high)
    if hooks.after_high_watermark:
        hooks.after_high_watermark()
    if high < low:
        raise OffsetError(f"{splits[0].split_id if splits else 'chunks'}: the binlog position "
                          f"{high} is behind the planned low watermark {low}",
                          fix="the server's binlog was reset or the source failed over; "
                              "restart the query from a new checkpoint location")

    # 4. nothing moved since the low watermark: the rows are exact as of it
    if high == low or not backfill:
        log.debug("%d chunks step 4: %s", len(splits),
                  "no change since the low watermark" if high == low else "backfill skipped")
        return [SplitResult(rows, low, low, 0, 0) for rows in selected]

    # 5. undo the window [LW, HW) on each chunk, from the one shared window
    log_.advance(high)
    out = []
    for s, rows in zip(splits, selected):
        patch = log_.patch(s.schema, functools.partial(dialect.in_chunk, s.schema, s.start,
                                                       s.end))
        log.debug("%s step 5: shared window to %s (%d events), %d keys rolled back",
                  s.split_id, log_.end, log_.events, patch.events_applied)
        out.append(SplitResult(apply_patch(rows, patch, s.schema), low, low, log_.events,
                               patch.events_applied))
    return out


def read_split_as_of(dialect: SnapshotDialect, schema: TableSchema, split_id: str, start: Any,
                     end: Any, as_of: BinlogOffset, *, hooks: WatermarkHooks | None = None,
                     backfill: bool = True, log_: RollbackLog | None = None,
                     where: str | None = None) -> SplitResult:
    """Select chunk ``[start, end)`` and roll it back to ``as_of``, a low watermark fixed
    before this call (by the Spark driver, docs/spark-source.md), so that every replay of
    the same ``as_of`` returns the same rows however late it runs. ``where`` narrows the
    select (a table read again in part); the rollback still covers the chunk's key range,
    so a row the condition left out but a change after ``as_of`` names comes back as it
    was at ``as_of``: a current row, never a wrong one.

    ``log_`` (a ``RollbackLog`` at ``as_of``) is shared by the chunks one task reads: the
    binlog after ``as_of`` is then read once for all of them.
    """
    hooks = hooks or WatermarkHooks()

    # 1. low watermark: given; it was read on the driver before this task was planned
    low = as_of
    log.debug("%s step 1: low watermark %s (fixed by the planner)", split_id, low)
    if hooks.after_low_watermark:
        hooks.after_low_watermark()

    # 2. one consistent select of the chunk
    # 3. high watermark
    rows, high = _select_then_high_watermark(dialect, schema, split_id, start, end, hooks,
                                             where)
    if high < low:
        raise OffsetError(f"{split_id}: the binlog position {high} is behind the planned "
                          f"low watermark {low}",
                          fix="the server's binlog was reset or the source failed over; "
                              "restart the query from a new checkpoint location")

    # 4. nothing moved since the low watermark: the rows are exact as of it
    if high == low or not backfill:
        log.debug("%s step 4: %s", split_id,
                  "no change since the low watermark" if high == low else "backfill skipped")
        return SplitResult(rows, low, low, 0, 0)

    # 5. undo the window [LW, HW) on the rows: the chunk as of LW
    if log_ is not None:
        if log_.as_of != low:
            raise ValueError(f"{split_id}: a rollback log at {log_.as_of} cannot roll back "
                             f"to {low}")
        log_.advance(high)
        patch = log_.patch(schema, lambda values: dialect.in_chunk(schema, start, end, values))
        log.debug("%s step 5: shared window to %s (%d events), %d keys rolled back",
                  split_id, log_.end, log_.events, patch.events_applied)
        return SplitResult(apply_patch(rows, patch, schema), low, low, log_.events,
                           patch.events_applied)
    events = list(dialect.read_window(schema, low, high))
    patch = compute_rollback(events, schema,
                             lambda values: dialect.in_chunk(schema, start, end, values))
    log.debug("%s step 5: window of %d events, %d keys rolled back", split_id, len(events),
              patch.events_applied)
    return SplitResult(apply_patch(rows, patch, schema), low, low, len(events),
                       patch.events_applied)
