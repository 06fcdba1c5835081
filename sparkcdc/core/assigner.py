"""The split assigner: which chunks are read next, and what the stream may emit.

An explicit state machine. The source as a whole is in one phase:

    SNAPSHOTTING --(every table's last chunk finished)--> STREAMING

and each table in one of its own:

    PLANNING --(planner returned the last chunk)--> SNAPSHOTTING --(all finished)--> DONE

Chunks are planned and finished in key order, so the finished part of a table is always a
prefix of its key space, ``[-inf, covered_end)``; a DONE table is covered entirely. That
keeps the whole state small (one cursor per table, not one entry per chunk) and it is what
the stream filter needs: a change is emitted when its key is covered and it happened after
the chunk holding it was finished (``FinishedSplit``).

A DONE table may also be read again in part while it streams (a *reread*: the operator's
``sparkcdc snapshot --where``): its chunks are planned and handed out like a snapshot's, each
carrying the condition, but finishing them moves nothing the stream filter reads: the
table stays covered, its changes keep flowing, and the reread rows, as of their batch's
position, merge over the target.

Every transition is a method; an illegal one raises ``IllegalTransition``. ``to_dict`` /
``from_dict`` round-trip the whole state through JSON with a fixed key order.
"""

from __future__ import annotations

import enum
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from typing import Any

from sparkcdc.core.chunking import ChunkPlanner, KeyProbe, SnapshotSplit, decode_value, encode_value
from sparkcdc.core.offsets import BinlogOffset
from sparkcdc.core.schema import TableId
from sparkcdc.core.stream_filter import FinishedSplit
from sparkcdc.errors import SparkCDCError


class IllegalTransition(SparkCDCError):
    """A caller asked the assigner for a step its phase does not allow (a bug, not input)."""


class Phase(str, enum.Enum):
    SNAPSHOTTING = "snapshotting"
    STREAMING = "streaming"


class TablePhase(str, enum.Enum):
    PLANNING = "planning"
    SNAPSHOTTING = "snapshotting"
    DONE = "done"


@dataclass
class TableSplits:
    """One table as the assigner holds it: its planner's state, the key prefix its finished
    chunks cover, the chunks handed out and not finished, its generation. (The pipeline's
    ``TableState`` is another thing: a table's place in a pipeline run.)"""

    table_id: TableId
    phase: TablePhase
    planner: dict[str, Any] | None  # ChunkPlanner.to_dict(); None once DONE
    covered_end: Any = None  # finished prefix is [-inf, covered_end); meaningless when DONE
    chunks_done: int = 0
    rows_done: int = 0
    started: bool = False  # at least one chunk finished (else nothing is covered)
    inflight: list[SnapshotSplit] = field(default_factory=list)  # assigned, not finished
    generation: int = 0  # bumped by the caller to take the table again (``reconcile``)
    # joined streaming from this binlog offset (a dict; a table renamed to its name there):
    # the batch it joins in reads its changes from there on (``reconcile``)
    since: dict[str, Any] | None = None
    # a reread of the DONE table in progress: {"id", "where", "planner", "inflight"}; and
    # the id of the last one taken on (``reconcile`` takes each id once)
    reread: dict[str, Any] | None = None
    reread_id: int = 0

    def to_dict(self) -> dict[str, Any]:
        d = {"table": str(self.table_id), "database": self.table_id.database,
             "name": self.table_id.table, "phase": self.phase.value,
             "planner": self.planner, "covered_end": encode_value(self.covered_end),
             "started": self.started, "chunks_done": self.chunks_done,
             "rows_done": self.rows_done,
             "inflight": [s.to_dict() for s in self.inflight],
             "generation": self.generation}
        if self.since is not None:  # (only then: offsets are compared as JSON text)
            d["since"] = self.since
        if self.reread_id:
            d["reread_id"] = self.reread_id
        if self.reread is not None:
            d["reread"] = self.reread
        return d

    def reread_planning(self) -> bool:
        return self.reread is not None and self.reread["planner"] is not None

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> TableSplits:
        return cls(TableId(d["database"], d["name"]), TablePhase(d["phase"]), d["planner"],
                   decode_value(d["covered_end"]), int(d["chunks_done"]), int(d["rows_done"]),
                   bool(d["started"]), [SnapshotSplit.from_dict(s) for s in d["inflight"]],
                   int(d.get("generation", 0)), d.get("since"), d.get("reread"),
                   int(d.get("reread_id", 0)))


PlannerFactory = Callable[[TableId], tuple[ChunkPlanner, KeyProbe]]
"""Builds a table's planner and a probe for it (the probe talks to the database)."""


class SplitAssigner:
    def __init__(self, tables: dict[TableId, TableSplits], phase: Phase):
        self.tables = tables
        self.phase = phase

    # -- construction ----------------------------------------------------------------------

    @classmethod
    def for_snapshot(cls, planners: Iterable[ChunkPlanner]) -> SplitAssigner:
        tables = {p.table_id: TableSplits(p.table_id, TablePhase.PLANNING, p.to_dict())
                  for p in planners}
        phase = Phase.SNAPSHOTTING if tables else Phase.STREAMING
        return cls(dict(sorted(tables.items())), phase)

    @classmethod
    def streaming_only(cls, table_ids: Iterable[TableId]) -> SplitAssigner:
        """No snapshot (startup modes other than initial/snapshot): every key is covered."""
        tables = {t: TableSplits(t, TablePhase.DONE, None, started=True)
                  for t in sorted(table_ids)}
        return cls(tables, Phase.STREAMING)

    # -- transitions -----------------------------------------------------------------------

    def assign(self, n: int, factory: PlannerFactory,
               planner_options: Any = None) -> list[SnapshotSplit]:
        """Up to ``n`` next chunks, table by table in name order, planned lazily."""
        if self.phase != Phase.SNAPSHOTTING:
            raise IllegalTransition(f"cannot assign chunks while {self.phase.value}")
        out: list[SnapshotSplit] = []
        for ts in self.tables.values():
            if len(out) >= n:
                break
            if ts.reread_planning():
                out.extend(self._assign_reread(ts, n - len(out), factory))
                continue
            if ts.phase != TablePhase.PLANNING:
                continue
            planner, probe = factory(ts.table_id)
            if ts.planner is not None:
                planner = ChunkPlanner.from_dict(ts.planner, planner.options)
            chunks = planner.next_chunks(probe, n - len(out))
            ts.planner = planner.to_dict()
            ts.inflight.extend(chunks)
            out.extend(chunks)
            if planner.done:
                ts.phase = TablePhase.SNAPSHOTTING
        return out

    @staticmethod
    def _assign_reread(ts: TableSplits, n: int, factory: PlannerFactory) -> list[SnapshotSplit]:
        """The next chunks of a DONE table's reread, each with its condition."""
        rr = ts.reread
        assert rr is not None and rr["planner"] is not None
        planner, probe = factory(ts.table_id)
        planner = ChunkPlanner.from_dict(rr["planner"], planner.options)
        chunks = [SnapshotSplit(c.table_id, c.index, c.start, c.end, rr["where"])
                  for c in planner.next_chunks(probe, n)]
        rr["planner"] = None if planner.done else planner.to_dict()
        rr["inflight"].extend(c.to_dict() for c in chunks)
        return chunks

    def finish(self, split: SnapshotSplit, rows: int = 0) -> None:
        """``split`` was emitted, normalized; it joins its table's covered prefix."""
        ts = self.tables.get(split.table_id)
        if split.where is not None:
            self._finish_reread(ts, split)
            return
        if ts is None or not ts.inflight or ts.inflight[0] != split:
            raise IllegalTransition(f"{split} is not the next chunk in flight of its table")
        ts.inflight.pop(0)
        ts.covered_end = split.end
        ts.started = True
        ts.chunks_done += 1
        ts.rows_done += rows
        if split.end is None:
            if ts.phase != TablePhase.SNAPSHOTTING or ts.inflight:
                raise IllegalTransition(f"{split} is open-ended but its table is still planning")
            ts.phase = TablePhase.DONE
            ts.planner = None
        self._settle_phase()

    def _finish_reread(self, ts: TableSplits | None, split: SnapshotSplit) -> None:
        """A reread chunk was emitted: the stream filter's view of its table does not move
        (it is covered already); the reread ends with its open-ended chunk."""
        rr = ts.reread if ts is not None else None
        if rr is None or not rr["inflight"] or rr["inflight"][0] != split.to_dict():
            raise IllegalTransition(f"{split} is not the next reread chunk of its table")
        assert ts is not None
        rr["inflight"].pop(0)
        if split.end is None:
            if rr["planner"] is not None or rr["inflight"]:
                raise IllegalTransition(f"{split} is open-ended but its reread is planning")
            ts.reread = None
        self._settle_phase()

    def _settle_phase(self) -> None:
        """STREAMING once every table is DONE and no reread is under way."""
        if all(t.phase == TablePhase.DONE and t.reread is None for t in self.tables.values()):
            self.phase = Phase.STREAMING
        else:
            self.phase = Phase.SNAPSHOTTING

    def reconcile(self, wanted: dict[TableId, int], planner_of: Callable[[TableId], ChunkPlanner],
                  snapshot: bool, since: dict[TableId, dict[str, Any]] | None = None,
                  rereads: dict[TableId, tuple[int, str]] | None = None) -> bool:
        """Make the captured tables those of ``wanted`` (table -> generation), between two
        batches of a running stream. A table that is new, or whose generation moved on (its
        target was emptied: a TRUNCATE, a purged binlog, a change during its snapshot), is
        taken from the start: planned and snapshotted chunk by chunk while the binlog of the
        others keeps flowing, its changes passed on only for the keys its finished chunks
        cover (Flink CDC's newly added tables). Without ``snapshot`` (the stream started
        from a binlog position) it is streamed from here on. A table given a binlog offset
        in ``since`` (one renamed to its name there, whose every change before it is in its
        target) is streamed from that offset: no snapshot, and the batch it joins in reads
        its changes from ``since`` on. A table no longer wanted is forgotten. A DONE table
        given a reread ``(id, condition)`` it has not taken on yet is read again where the
        condition holds, while it streams. True when anything changed."""
        changed = False
        for t in [t for t in self.tables if t not in wanted]:
            del self.tables[t]
            changed = True
        for t, gen in wanted.items():
            ts = self.tables.get(t)
            if ts is not None and ts.generation == gen:
                continue
            if since and t in since:
                ts = TableSplits(t, TablePhase.DONE, None, started=True, generation=gen,
                                since=since[t])
            elif snapshot:
                ts = TableSplits(t, TablePhase.PLANNING, planner_of(t).to_dict(), generation=gen)
            else:
                ts = TableSplits(t, TablePhase.DONE, None, started=True, generation=gen)
            self.tables[t] = ts
            changed = True
        for t, (rid, where) in (rereads or {}).items():
            ts = self.tables.get(t)
            if ts is None or ts.phase != TablePhase.DONE or rid <= ts.reread_id:
                continue  # a table still in its snapshot reads every row anyway
            ts.reread = {"id": rid, "where": where, "planner": planner_of(t).to_dict(),
                         "inflight": []}
            ts.reread_id = rid
            changed = True
        if changed:
            self.tables = dict(sorted(self.tables.items()))
            self._settle_phase()
        return changed

    def joined_since(self, earlier: SplitAssigner) -> dict[TableId, TableSplits]:
        """The tables that joined after ``earlier`` streaming from a binlog offset of their
        own (``since``): their changes from there to this assigner's batch end are read
        apart, as the window of ``earlier`` to here passes none of them (``still_in``)."""
        return {t: ts for t, ts in self.tables.items()
                if ts.since is not None and (t not in earlier.tables
                                             or earlier.tables[t].generation != ts.generation)}

    def still_in(self, later: SplitAssigner) -> SplitAssigner:
        """This assigner without the tables ``later`` forgot or takes again: the window
        between two offsets passes on a table's changes only where both offsets hold the
        same generation of it. Rows of a table taken again must not reach its emptied
        target before the chunks that rebuild it (a row updated before a TRUNCATE would be
        upserted and never deleted)."""
        keep = {t: ts for t, ts in self.tables.items()
                if (o := later.tables.get(t)) is not None and o.generation == ts.generation}
        if len(keep) == len(self.tables):
            return self
        return SplitAssigner(keep, self.phase)

    # -- queries ---------------------------------------------------------------------------

    def covered(self, table_id: TableId) -> tuple[bool, bool, Any]:
        """(anything covered, everything covered, covered_end) for the stream filter."""
        ts = self.tables.get(table_id)
        if ts is None:
            return (False, False, None)
        return (ts.started, ts.phase == TablePhase.DONE, ts.covered_end)

    def finished_view(self, hw: BinlogOffset):
        """The covered prefixes as ``TableProgress`` for ``StreamFilter``, all finished at
        ``hw`` (a window that starts at ``hw`` sees every earlier chunk as finished)."""

        view: dict[TableId, tuple[list[FinishedSplit], bool]] = {}
        for t, ts in self.tables.items():
            if not ts.started:
                view[t] = ([], False)
            elif ts.phase == TablePhase.DONE:
                view[t] = ([FinishedSplit(t, None, None, hw)], True)
            else:
                view[t] = ([FinishedSplit(t, None, ts.covered_end, hw)], False)
        return view

    # -- JSON ------------------------------------------------------------------------------

    def to_dict(self) -> dict[str, Any]:
        return {"phase": self.phase.value,
                "tables": [ts.to_dict() for ts in self.tables.values()]}

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> SplitAssigner:
        tables = {}
        for td in d["tables"]:
            ts = TableSplits.from_dict(td)
            tables[ts.table_id] = ts
        return cls(tables, Phase(d["phase"]))
