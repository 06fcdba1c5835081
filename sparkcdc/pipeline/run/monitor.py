"""Watching the pipeline's stream: each table's progress from the query's reports, the
``live.json`` file ``status`` reads, and a verdict on a failed query (``Failure``: what failed
and whether it is transient). The monitor says; the loop decides (``Runner._failed``)."""

from __future__ import annotations

import json
import logging
import os
import time
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

from sparkcdc.pipeline.run.state import RunState
from sparkcdc.pipeline.run.stream import PipelineStream
from sparkcdc.pipeline.run.table_run import TableRun
from sparkcdc.spark.offset_view import OffsetView, lag_bytes

log = logging.getLogger("sparkcdc.pipeline")

# A query whose execution thread died while Spark handled a failure (seen: a
# StackOverflowError in java.util.regex on a long error text after a torn connection) stays
# "active" with no exception, and would hang the pipeline: it is restarted like a transient
# failure (the checkpoint makes the restart exactly once).
THREAD_DIED = ("the stream's execution thread died without reporting an error "
               "(see the Spark log above)")

# CommitConflict: a Delta commit of changes from the tasks met another writer's commit
# since its slices were cut (sinks/delta/changes.py); the batch, replayed, is cut anew
_TRANSIENT = ("Python worker failed to connect back", "ConnectionFailed",
              "Lost connection to MySQL server", "Connection refused", "CommitConflict",
              THREAD_DIED)


@dataclass(frozen=True)
class Failure:
    """A failed query, as the monitor saw it: a table it wrote (``run``), the query's
    error and whether a restart may help (``transient``)."""

    run: TableRun
    message: str

    @property
    def transient(self) -> bool:
        return any(t in self.message for t in _TRANSIENT)

    @property
    def first_error(self) -> str:
        for line in self.message.splitlines():
            if "sparkcdc.errors." in line or "Error:" in line:
                return line.strip()[:600]
        return self.message.splitlines()[0][:600] if self.message else "unknown error"


class Monitor:
    """Looks at the query once a second (``look``)."""

    def __init__(self, state: RunState, stream: PipelineStream):
        self.state = state
        self.stream = stream
        self.last_batch_seconds: float | None = None  # the last micro-batch's duration
        self._seen_batch: dict[Any, int] = {}  # per query: the last progress report looked at
        self._live: tuple[dict | None, float] = (None, 0.0)  # live.json's tables, when written

    def look(self) -> list[Failure]:
        """One look at every query (the pipeline's stream once, however many tables it
        reads): progress for each table, ``live.json``; the failures found."""
        failed: dict[int, TableRun] = {}
        looks: dict[int, tuple] = {}  # per query: (progress, active, failed)
        # per (query, batch): the offsets, parsed once
        parsed: dict[tuple, tuple[OffsetView | None, OffsetView | None]] = {}
        for run in list(self.state.runs.values()):
            q = run.query
            if q is None:
                continue
            look = looks.get(id(q))
            if look is None:
                active = q.isActive
                look = looks[id(q)] = (self._new_progress(q), active,
                                       (not active and q.exception() is not None)
                                       or _thread_died(q))
            progress, run.active, broken = look
            for p in progress:
                if p["batchId"] > run.seen_batch:
                    run.seen_batch = p["batchId"]
                    n = int(p.get("numInputRows") or 0)
                    rate = float(p.get("processedRowsPerSecond") or 0.0)
                    ms = (p.get("durationMs") or {}).get("triggerExecution")
                    if ms is not None:
                        self.last_batch_seconds = ms / 1000
                    if run.arrow:  # Spark counted record batches; the fn counted rows
                        n = run.change_rows.pop(p["batchId"], 0)
                        rate = n * 1000 / ms if ms else 0.0
                    run.rows += n
                    if n:
                        run.batches += 1
                    key = (id(q), p["batchId"])
                    if key not in parsed:
                        parsed[key] = _offsets(p)
                    self._progress(run, p, *parsed[key], rate)
                    run.restarts = 0  # a completed batch: only failures in a row count
                    self.stream.restarts = 0
            if run.error is None and broken:
                failed.setdefault(id(q), run)
        self.write_live(self.state.runs.values())
        return [Failure(run, _message(run.query)) for run in failed.values()]

    def write_live(self, runs: Iterable[TableRun], stopping: bool = False) -> None:
        """``live.json`` for ``status``, every table in one file: written when a table
        stopped or started running, else when something changed (at most every 5 s), and
        every 30 s (``status`` calls a run alive for 120 s after the last write); at once,
        each table not running, when the run stops."""
        tables = {run.state.table: {
            "target": run.state.target, "generation": run.state.generation,
            "running": run.active and not stopping, "rows": run.rows, "batches": run.batches,
            "rate": run.rate, "lag_bytes": run.lag_bytes, "error": run.error}
            for run in runs}
        now = time.time()
        last, at = self._live
        if last is not None and not stopping and all(
                last.get(t, {}).get("running") == e["running"] for t, e in tables.items()) \
                and (now - at < 5 or last == tables and now - at < 30):
            return
        self.state.ckpt.write_live(os.getpid(), now, tables)
        self._live = (tables, now)

    def _new_progress(self, q: Any) -> list[dict]:
        """The query's progress reports of batches not seen yet. Each report holds the
        source's offsets, which list every table of the pipeline's stream (a 1,000-table
        stream's report is megabytes of JSON, parsed and written again by PySpark): the
        newest batch's id is asked of the JVM first, the newest report is read only when it
        is new, and the recent list (up to 100 reports) only when batches were missed."""
        seen = self._seen_batch.get(q, -1)  # (keyed by the object: an id() may be reused)
        newest = _newest_batch_id(q)
        if newest is not None and newest <= seen:
            return []
        last = q.lastProgress
        if last is None or last["batchId"] <= seen:
            return []
        self._seen_batch[q] = last["batchId"]
        if last["batchId"] == seen + 1:
            return [last]
        return [p for p in (q.recentProgress or []) if p["batchId"] > seen] or [last]

    def _progress(self, run: TableRun, p: dict, off: OffsetView | None,
                  latest: OffsetView | None, rate: float) -> None:
        log.debug("batch %s of %s: %s rows, durations %s", p.get("batchId"), run.state.table,
                  p.get("numInputRows"), p.get("durationMs"))
        if not off:
            return
        table = run.state.table
        run.pos = off.position_dict
        phase = off.table(table).phase or off.phase
        if phase in ("planning", "snapshotting") and run.snapshot_started is None:
            run.snapshot_started = time.monotonic()
        run.phase = ("streaming" if off.phase == "streaming" or phase == "done"
                     else "snapshot")
        run.chunks_done = off.table(table).chunks_done
        run.chunks_total = off.table(table).chunks_total(run.chunks_done)
        run.rate = rate
        if latest:
            run.lag_bytes = lag_bytes(run.pos, latest.position_dict)


def _message(q: Any) -> str:
    exc = q.exception()
    return str(exc) if exc is not None else THREAD_DIED


def _offsets(p: dict) -> tuple[OffsetView | None, OffsetView | None]:
    """A progress report's end offset of our source and its latest one (the server's
    position), typed."""
    src = (p.get("sources") or [{}])[0]

    def load(v: Any) -> OffsetView | None:  # (Spark may say "null": none yet)
        d = json.loads(v) if isinstance(v, str) else v
        return OffsetView.from_dict(d) if isinstance(d, dict) and d else None

    return load(src.get("endOffset")), load(src.get("latestOffset"))


def _thread_died(q: Any) -> bool:
    """True when Spark says the query is active but its execution thread is gone."""
    if not q.isActive:
        return False
    try:
        return not q._jsq.streamingQuery().queryExecutionThread().isAlive()
    except Exception:  # noqa: BLE001 - a probe of Spark's internals: any error, no verdict
        return False


def _newest_batch_id(q: Any) -> int | None:
    """The id of the query's newest progress report, asked of the JVM (no report parsed);
    None when there is none yet or the query cannot say (then the report is read)."""
    try:
        p = q._jsq.lastProgress()
        return None if p is None else int(p.batchId())
    except Exception:  # noqa: BLE001 - any failure: read the report as before
        return None
