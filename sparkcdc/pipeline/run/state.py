"""The state of one run, which every part of it is given (``RunState``), and the changes
the pipeline's stream hands to the loop (``LoopRequests``).

``RunState`` holds what the parts share: the pipeline's definition and checkpoint, every
table's ``TableState`` (saved in ``pipeline.json``), the running tables (``TableRun``),
the locks of the targets, the generation of the pipeline's stream and the server's binlog
position at the last look. Its methods answer questions of that state only; they never
start, stop or write anything but the state file.

A micro-batch meets changes it cannot make itself (a change during a table's snapshot, a
new key no row followed, the behavior ``exception``): it hands them to the loop as typed
requests (``TakeAgain``, ``StopRun``) and fails (``HandedToLoop``), so Spark commits none
of it; the loop makes them and replays the batch (``Runner._failed``).
"""

from __future__ import annotations

import contextlib
import logging
import threading
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from typing import NoReturn

from sparkcdc.core.offsets import BinlogOffset
from sparkcdc.core.schema import TableId, TableSchema
from sparkcdc.core.table_events import Ddl
from sparkcdc.mysql.port import MySQLSource, SourceConfig, ddl_of
from sparkcdc.pipeline.definition import PipelineDef
from sparkcdc.pipeline.definition import targets as _targets
from sparkcdc.pipeline.definition.routing import transform_of
from sparkcdc.pipeline.run.checkpoint import CaptureStatus, Checkpoint, TableState
from sparkcdc.pipeline.run.table_run import TableRun
from sparkcdc.sinks import Capabilities, SinkKind, sink_class

log = logging.getLogger("sparkcdc.pipeline")


class HandedToLoop(Exception):
    """Fails a micro-batch of the pipeline's stream whose change the loop must make
    (``LoopRequests.hand``)."""


@dataclass(frozen=True)
class TakeAgain:
    """The table is taken again with its schema of now (``TableLifecycle.retake``): a
    change or a TRUNCATE during its snapshot, a new key no row followed. ``what``: why."""

    st: TableState
    what: str


@dataclass(frozen=True)
class StopRun:
    """The run stops with ``error`` (the behavior ``exception``)."""

    st: TableState
    what: str
    error: Exception


LoopRequest = TakeAgain | StopRun


class LoopRequests:
    """What micro-batches handed to the loop, per table, oldest first. Written from the
    stream's threads, taken by the loop's."""

    def __init__(self) -> None:
        self._by_table: dict[str, LoopRequest] = {}

    def hand(self, request: LoopRequest) -> NoReturn:
        """Hand ``request`` to the loop and fail the micro-batch: Spark commits none of it;
        the loop makes the change, then restarts the stream, which replays the batch.
        Targets that wrote the batch already skip it then, by its batch id."""
        log.info("%s: the pipeline hands the change to its loop", request.what)
        self._by_table[request.st.table] = request
        raise HandedToLoop(request.what)

    def __contains__(self, table: object) -> bool:
        return table in self._by_table

    def __bool__(self) -> bool:
        return bool(self._by_table)

    def pop(self) -> LoopRequest | None:
        """The oldest request, taken out; None when none waits."""
        for table in self._by_table:
            return self._by_table.pop(table)
        return None


def schema_of(st: TableState) -> TableSchema:
    """The schema the table's generation reads (``TableState.schema``)."""
    assert st.schema is not None, st.table
    return TableSchema.from_dict(st.schema)


class RunState:
    """What the parts of one run share (``Runner`` builds it and hands it to each)."""

    def __init__(self, defn: PipelineDef, ckpt: Checkpoint):
        self.defn = defn
        self.settings = defn.pipeline
        self.ckpt = ckpt
        self.states: dict[str, TableState] = {}
        self.runs: dict[str, TableRun] = {}
        self.members: dict[str, TableRun] = {}  # what the stream's batches write (its sync)
        self.generation = 0  # the pipeline stream's (``PipelineStream.sync``)
        self.handed = LoopRequests()
        self.now: BinlogOffset | None = None  # the server's position at the last look
        self.flavor = "mariadb"
        self._config: SourceConfig | None = None
        self._target_locks: dict[str, threading.Lock] = {}
        self._save_lock = threading.RLock()

    def save(self) -> None:
        """Every table's state, and the stream's generation, to ``pipeline.json``."""
        with self._save_lock:
            self.ckpt.save_tables(self.settings.name, self.states, self.generation)

    def source_config(self) -> SourceConfig:
        if self._config is None:
            self._config = SourceConfig.parse(self.defn.source.options_for())
        return self._config

    def source(self) -> MySQLSource:
        """The source, through its port: what the run asks of the server."""
        return MySQLSource(self.source_config())

    def kept_ddl(self, st: TableState, statements: Iterable[str]) -> list[Ddl]:
        """The table's DDL statements the state keeps as text (``pending_ddl``, a
        ``Gone``'s), as the source reads them (``ddl_of``): the pipeline reads no SQL."""
        table = TableId.parse(st.table)
        return [ddl_of(s, table) for s in statements]

    def sink_capabilities(self) -> Capabilities:
        """What the pipeline's sink type can do, as its class declares it."""
        return sink_class(self.defn.sink.type).capabilities

    def sink_kind(self) -> SinkKind:
        return self.sink_capabilities().kind

    def can_empty(self) -> bool:
        """Whether the pipeline can empty a target to take a table again: a merge target
        deletes its rows; of the changelogs, only one that writes an event naming the
        table (the kafka sink's truncate; the files sink cannot)."""
        return self.sink_capabilities().can_empty

    def app_id(self, table: str) -> str:
        return f"{self.settings.name}.{table}"

    def running(self, run: TableRun) -> bool:
        """Whether ``run`` still writes its table (not stopped meanwhile: dropped, taken
        again, left the stream)."""
        return self.runs.get(run.state.table) is run

    # -- targets -------------------------------------------------------------------------

    @staticmethod
    def targets(st: TableState) -> tuple[str, ...]:
        """Every target of the table (several when routes fan it out)."""
        return tuple(st.targets) if st.targets else (st.target,)

    def creation(self, table: str) -> dict[str, str]:
        """The table's transform's partition-keys and table-options, as sink options."""
        t = transform_of(self.defn, table)
        if t is None:
            return {}
        return _targets.table_creation_options(self.defn.sink.type, t.partition_keys,
                                               t.table_options)

    def sink_for(self, st: TableState):
        """The table's sink: its target's, or a ``FanOut`` of its targets' (routes that all
        match it), created with its transform's partition-keys and table-options."""
        return _targets.create_sinks(self.defn.sink.type, self.defn.sink.options,
                                     self.targets(st), st.app_id, self.creation(st.table),
                                     source=st.table)

    @contextlib.contextmanager
    def locks(self, st: TableState) -> Iterator[None]:
        """Every target of the table locked, in one order (a target another table shares
        is written by one of them at a time)."""
        with contextlib.ExitStack() as stack:
            for t in sorted(self.targets(st)):
                stack.enter_context(self._target_locks.setdefault(t, threading.Lock()))
            yield

    def shared(self, st: TableState) -> bool:
        """Whether another active table writes into one of the table's targets."""
        mine = set(self.targets(st))
        return any(mine & set(self.targets(o)) and o.table != st.table
                   and o.status == CaptureStatus.ACTIVE for o in self.states.values())

    def shared_tables(self) -> set[str]:
        """The tables that ``shared`` says yes of, all at once: each target's active
        tables counted in one pass (a batch over 1,000 tables asked ``shared`` of each)."""
        writers: dict[str, set[str]] = {}
        for o in self.states.values():
            if o.status == CaptureStatus.ACTIVE:
                for t in self.targets(o):
                    writers.setdefault(t, set()).add(o.table)
        return {st.table for st in self.states.values()
                if any(writers.get(t, set()) - {st.table} for t in self.targets(st))}

    def emptying_hits_others(self, st: TableState) -> bool:
        """Whether emptying the table's target would take other tables' rows with it: the
        target is ``shared`` and the sink empties it whole (a truncate event, which names
        the table, empties it for that table alone)."""
        return self.shared(st) and not self.sink_capabilities().empties_by_event

    # -- where the pipeline's stream stands ------------------------------------------------

    def carried_by_stream(self, st: TableState, memo: dict | None = None) -> bool:
        """Whether the table's schema changes and TRUNCATEs reach its target through the
        pipeline's stream (``stream_schema.py``): it is in it, past its snapshot (a change
        during the snapshot takes it again), and no change of it waits for the loop.
        ``memo`` keeps the stream's last committed offset for a look over many tables."""
        if st.stream_generation is None or st.table in self.handed:
            return False
        memo = {} if memo is None else memo
        if st.stream_generation not in memo:
            b = self.ckpt.last_committed(st)
            memo[st.stream_generation] = self.ckpt.offset(st, b) if b is not None else None
        off = memo[st.stream_generation]
        return off is not None and off.table(st.table).phase == "done"

    def streaming_at(self, st: TableState, batch_id: int) -> bool:
        """Whether the table's snapshot was done when the stream's batch began, or it
        joins in this batch from a binlog offset (it has no snapshot)."""
        off = self.ckpt.offset(st, batch_id - 1) if batch_id > 0 else None
        if off is not None and off.table(st.table).phase == "done":
            return True
        now = self.ckpt.offset(st, batch_id)
        return now is not None and now.table(st.table).since is not None

    def streams(self, st: TableState) -> bool:
        """Whether the table's snapshot was done as of its last committed batch."""
        b = self.ckpt.last_committed(st)
        off = self.ckpt.offset(st, b) if b is not None else None
        return off is not None and off.table(st.table).phase == "done"

    def has_own_stream(self, st: TableState) -> bool:
        """Whether a stream of its own read the table (a checkpoint from before every table
        took the pipeline's stream): it joins the pipeline's stream at its next start."""
        return st.stream_generation is None and self.ckpt.last_planned(st) is not None
