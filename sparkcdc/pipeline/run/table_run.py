"""What the runner keeps about a table it captures while it runs: its stream, its sink, and
what the display, ``live.json`` and the metrics show of it."""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from typing import Any

from sparkcdc.core.schema import TableSchema
from sparkcdc.pipeline.definition.routing import Shaper
from sparkcdc.pipeline.run.checkpoint import TableState


@dataclass
class TableRun:
    """A running table stream and what the display shows about it."""

    state: TableState
    schema: TableSchema
    sink: Any
    shaper: Shaper
    keys: tuple[str, ...]
    query: Any = None
    rows: int = 0
    batches: int = 0
    seen_batch: int = -1
    phase: str = "starting"
    chunks_done: int = 0
    chunks_total: int | None = None
    rate: float = 0.0
    lag_bytes: int | None = None
    pos: dict | None = None
    started: float = field(default_factory=time.monotonic)
    snapshot_started: float | None = None
    error: str | None = None
    restarts: int = 0
    arrow: bool = False  # micro-batches carry Arrow record batches (``Shapes.arrow_path``)
    change_rows: dict = field(default_factory=dict)  # batch id -> change rows (arrow runs)
    rows_schema: Any = None  # the Arrow schema of its change rows (arrow runs)
    published: bool = False  # its target is named where readers look (Sink.publish)
    takes_files: bool | None = None  # every target takes files from tasks (Sink.takes_files)
    takes_changes: bool | None = None  # every target takes changes (Sink.takes_changes)
    takes_frames: bool | None = None  # Spark's own writer writes every target (takes_frames)
    ready_for_files: bool = False  # its targets exist for tasks' files (Sink.ready_for_files)
    gone: Any = None  # a Gone: a drop, rename or new key met in the batch being written (its state's
    #                           ``gone`` once the rows before it are)
    emit_lag: float | None = None  # seconds from its newest change's commit to its write
    active: bool = False  # its query was active at the last look (``Monitor.look``)


def note_emit_lag(run: TableRun, rows) -> None:
    """The table's emit lag after a write: now minus the commit time of the newest change
    written (snapshot rows carry none; the binlog's commit times have 1 s resolution)."""
    import pyarrow.compute as pc

    if rows.num_rows and "_op_ts" in rows.column_names:
        newest = pc.max(rows["_op_ts"])
        if newest.is_valid:
            run.emit_lag = max(0.0, time.time() - newest.value / 1e6)
