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

from sparkcdc.core.normalize import apply_patch, compute_patch
from sparkcdc.core.offsets import BinlogOffset
from sparkcdc.core.records import ChangeRecord
from sparkcdc.core.schema import TableSchema

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
    rows = dialect.read_chunk(schema, start, end)
    log.debug("%s step 2: selected %d rows", split_id, rows.num_rows)
    if hooks.after_select:
        hooks.after_select()

    # 3. high watermark: the binlog position after the select
    high = dialect.current_offset()
    log.debug("%s step 3: high watermark %s", split_id, high)
    if hooks.after_high_watermark:
        hooks.after_high_watermark()

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
