"""Reading one chunk without locks: the watermark algorithm (ALGORITHM.md section 5).

``read_split`` is the whole algorithm, one numbered, logged step at a time. Everything that
touches the database goes through a ``SnapshotDialect``; ``WatermarkHooks`` let a test run
statements on the real server between the steps (for example, between the low watermark
and the select) and so check the backfill where it matters.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from typing import Any, Protocol

from sparkcdc.core.normalize import apply_patch, compute_patch, compute_rollback
from sparkcdc.core.offsets import BinlogOffset
from sparkcdc.core.records import ChangeRecord
from sparkcdc.core.schema import TableSchema
from sparkcdc.errors import OffsetError

log = logging.getLogger(__name__)


class SnapshotDialect(Protocol):
    """The database side of the algorithm (``sparkcdc.mysql.dialect`` implements it)."""

    def current_offset(self) -> BinlogOffset: ...

    def read_chunk(self, schema: TableSchema, start: Any, end: Any): ...  # -> pyarrow.Table

    def read_window(self, schema: TableSchema, start: BinlogOffset,
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
                                start: Any, end: Any, hooks: WatermarkHooks):
    """Steps 2 and 3, shared by both directions of normalization."""
    rows = dialect.read_chunk(schema, start, end)
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


def read_split_as_of(dialect: SnapshotDialect, schema: TableSchema, split_id: str, start: Any,
                     end: Any, as_of: BinlogOffset, *, hooks: WatermarkHooks | None = None,
                     backfill: bool = True) -> SplitResult:
    """Select chunk ``[start, end)`` and roll it back to ``as_of``, a low watermark fixed
    before this call (by the Spark driver, docs/spark-source.md), so that every replay of
    the same ``as_of`` returns the same rows however late it runs.
    """
    hooks = hooks or WatermarkHooks()

    # 1. low watermark: given; it was read on the driver before this task was planned
    low = as_of
    log.debug("%s step 1: low watermark %s (fixed by the planner)", split_id, low)
    if hooks.after_low_watermark:
        hooks.after_low_watermark()

    # 2. one consistent select of the chunk
    # 3. high watermark
    rows, high = _select_then_high_watermark(dialect, schema, split_id, start, end, hooks)
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
    events = list(dialect.read_window(schema, low, high))
    patch = compute_rollback(events, schema,
                             lambda values: dialect.in_chunk(schema, start, end, values))
    log.debug("%s step 5: window of %d events, %d keys rolled back", split_id, len(events),
              patch.events_applied)
    return SplitResult(apply_patch(rows, patch, schema), low, low, len(events),
                       patch.events_applied)
