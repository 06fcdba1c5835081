"""The pipeline runner's loop: the tables of a pipeline read by one Spark stream, applied to
their routed targets. ``Runner`` builds the parts of a run and wires them; each gets what
it uses in ``__init__`` and never calls back up (docs/design.md, "The run"):

* ``state``: what the parts share (tables, running tables, checkpoint, locks), and the
  changes a micro-batch hands to the loop (``LoopRequests``);
* ``life``: the run's lock, Spark session and stop (shared with the kafka source's runner);
* ``stream``: the pipeline's stream, its members file and query;
* ``batch``: one micro-batch (decode by table, prepare, ``write``: rows into targets);
* ``schema``: schema changes, TRUNCATEs, drops and renames inside a micro-batch;
* ``tables``: a table started, stopped, taken again, re-keyed, renamed, dropped;
* ``operator``: the operator's snapshot, pause and resume;
* ``monitor``: progress, ``live.json`` and the verdict on a failed query.

The loop, on the driver:

1. discover the matched tables (the columns of new ones: a table whose changes the
   pipeline's stream carries keeps its schema); start the pipeline's stream
   (``TableState`` in ``pipeline.json`` says which generation, from where, with which
   schema; a table a stream of its own read, in a checkpoint from before, joins it);
2. every second: look at the query (progress per table for the display and ``live.json``;
   a failed batch is decided on at once, a change handed over by the stream made first),
   and act on the drops, renames and new keys the stream has written up to;
3. every ``discovery.interval``: re-discover; a new matching table joins (snapshot first,
   inside the running query).
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable
from typing import IO, Any

from sparkcdc.core.offsets import BinlogOffset
from sparkcdc.core.schema import TableSchema
from sparkcdc.errors import PipelineFailed, SchemaChangeStop, SchemaError, SparkCDCError
from sparkcdc.pipeline.definition import PipelineDef
from sparkcdc.pipeline.definition.routing import targets_of
from sparkcdc.pipeline.run import control
from sparkcdc.pipeline.run.batch import MicroBatch, session_hints
from sparkcdc.pipeline.run.checkpoint import CaptureStatus, Checkpoint, TableState
from sparkcdc.pipeline.run.discovery import Discovery
from sparkcdc.pipeline.run.life import RunLife
from sparkcdc.pipeline.run.monitor import Failure, Monitor
from sparkcdc.pipeline.run.operator import OperatorRequests
from sparkcdc.pipeline.run.schema import diff as sc
from sparkcdc.pipeline.run.schema_events import REKEY, SchemaInStream
from sparkcdc.pipeline.run.shapes import Shapes
from sparkcdc.pipeline.run.signals import stop_on_signals
from sparkcdc.pipeline.run.state import LoopRequest, RunState, StopRun, schema_of
from sparkcdc.pipeline.run.stream import PipelineStream
from sparkcdc.pipeline.run.table_run import TableRun
from sparkcdc.pipeline.run.tables import TableLifecycle
from sparkcdc.pipeline.run.write import TargetWriter

log = logging.getLogger("sparkcdc.pipeline")

# Transient failures (the stream's or the periodic discovery's) tolerated in a row before
# the pipeline stops with the error; a completed batch / a successful look resets the count.
_MAX_IN_A_ROW = 5


class Runner:
    """Runs a pipeline. ``run()`` blocks until stopped (``stop()``, Ctrl-C, SIGTERM) or, with
    ``until_caught_up``, until every table reached the binlog position of its start."""

    def __init__(self, defn: PipelineDef, spark=None, *, master: str | None = None,
                 until_caught_up: bool = False, display=None,
                 on_batch: Callable[[str, Any, int], None] | None = None,
                 spark_log_to_console: bool = False):
        self.defn = defn
        self.settings = defn.pipeline
        self.master = master
        # Flink's execution.runtime-mode BATCH: the run ends once caught up
        self.until_caught_up = until_caught_up or defn.pipeline.batch
        self.display = display
        self.on_batch = on_batch
        self.ckpt = Checkpoint(defn.checkpoint_dir)
        self.nothing_to_do = False  # run() found every table caught up and started nothing
        self._discovery_failures = 0  # periodic table discovery, failures in a row
        # the parts, each given what it uses
        self.life = RunLife(self.ckpt, self.settings, spark, master=master,
                            spark_log_to_console=spark_log_to_console,
                            hints=session_hints(defn))
        self.state = RunState(defn, self.ckpt)
        self.discovery = Discovery(self.state)
        shapes = Shapes(self.state, self.life)
        self.schema = SchemaInStream(self.state, shapes)
        self.batch = MicroBatch(self.state, self.life, shapes, self.schema,
                                TargetWriter(self.state, self.life, shapes, on_batch))
        self.stream = PipelineStream(self.state, self.life, self.batch.run,
                                     until_caught_up=self.until_caught_up,
                                     watched=on_batch is not None)
        self.tables = TableLifecycle(self.state, shapes, self.stream)
        self.operator = OperatorRequests(self.state, self.discovery, self.tables, self.stream)
        self.monitor = Monitor(self.state, self.stream)

    # -- what callers see ----------------------------------------------------------------

    @property
    def spark(self):
        return self.life.spark

    @property
    def states(self) -> dict[str, TableState]:
        return self.state.states

    @states.setter
    def states(self, states: dict[str, TableState]) -> None:
        self.state.states = states

    @property
    def runs(self) -> dict[str, TableRun]:
        return self.state.runs

    @property
    def stream_query(self):
        """The pipeline stream's query (None before it starts)."""
        return self.stream.query

    @property
    def last_batch_seconds(self) -> float | None:
        return self.monitor.last_batch_seconds

    def discover(self, fresh: bool = False) -> dict[str, TableSchema]:
        return self.discovery.discover(fresh)

    def stop(self) -> None:
        self.life.stop()

    @property
    def interrupted(self) -> bool:
        """Whether the run was asked to stop (Ctrl-C, SIGTERM, ``stop``): a run
        ``--until-caught-up`` that was may have stopped before it caught up."""
        return self.life.interrupted

    def close(self) -> None:
        """Stop the SparkSession if this runner created it."""
        self.life.close()

    def _lock_checkpoint(self) -> IO[str]:
        return self.life.lock_checkpoint()

    # -- the loop --------------------------------------------------------------------------

    def run(self) -> int:
        import sparkcdc

        state, stopping = self.state, self.life.stopping
        lock = self.life.lock_checkpoint()
        with stop_on_signals(self.stop):  # Ctrl-C, SIGTERM: the loop ends at its step
            try:
                state.states = self.ckpt.load_tables()
                state.generation = self.ckpt.load_stream_generation()
                if self._work_waits():
                    self.life.begin_session()  # its JVM starts while tables are discovered
                found = self.discovery.discover()
                self.tables.check_purged()
                self.discovery.read_now()
                if self.until_caught_up and self._caught_up_already(found):
                    log.info("every table is caught up at %s: nothing to do", state.now)
                    self.nothing_to_do = True
                    return 0
                if stopping.is_set():  # Ctrl-C while it started: no stream to start
                    return 0
                sparkcdc.register(self.spark)
                self._follow_gone(found, reconcile=False)  # seen by the last run's stream
                self._reconcile(found, starting=True)
                self._warm_sinks()
                self.operator.take()  # requests made while no pipeline ran
                self.stream.sync()
                state.save()
                last_discovery = time.monotonic()
                while not stopping.is_set():
                    self._poll()
                    self._follow_gone()
                    self.operator.take()
                    if self.until_caught_up and self._all_ended():
                        self._poll()  # the last batches' progress; a failure decided on
                        self._follow_gone()
                        if self._all_ended():  # (not restarted by that decision)
                            break
                    if not state.runs and self.until_caught_up:
                        break
                    if (not self.until_caught_up and time.monotonic() - last_discovery
                            >= self.settings.discovery_interval):
                        self._rediscover()
                        last_discovery = time.monotonic()
                    stopping.wait(1.0)
            except KeyboardInterrupt:
                log.info("interrupted: stopping the streams")
            finally:
                try:
                    self._stop_all()
                finally:
                    lock.close()  # releases the flock
        return 0

    def _poll(self) -> None:
        """The stream fitted to its tables, one look at it (progress, ``live.json``), the
        display; a failure decided on."""
        self.stream.sync()
        failures = self.monitor.look()
        if self.display is not None:
            self.display.update(self)
        for failure in failures:
            self._failed(failure)

    def _failed(self, failure: Failure) -> None:
        """The stream failed: a change a micro-batch handed over is made and the batch
        replayed; a transient failure restarts the stream (``_MAX_IN_A_ROW`` in a row at
        most); a table dropped or changed on the source is reconciled; else the run stops."""
        stream = self.stream
        if self._make_handed():
            stream.dirty = True  # the batch is replayed with the change made
            stream.sync()
            return
        what = "the pipeline's stream"
        if failure.transient and stream.restarts < _MAX_IN_A_ROW:
            stream.restarts += 1
            log.warning("%s failed (%s): restarting it (%d of %d)", what, failure.first_error,
                        stream.restarts, _MAX_IN_A_ROW)
            self.life.stopping.wait(2.0 * stream.restarts)  # a loaded machine: a moment
            stream.dirty = True
            stream.sync()
            return
        # a schema change or a dropped table fails a stream that reads it: reconciling
        # handles it (and restarts the pipeline's stream without or with the table)
        found = self.discovery.discover(fresh=True)
        memo: dict = {}

        def changed(t: str) -> bool:  # a change the stream carries cannot have failed it
            st_ = self.state.states[t]
            return bool(sc.diff(schema_of(st_), found[t])
                        and not self.state.carried_by_stream(st_, memo))

        tables = [r.state.table for r in self.state.runs.values() if r.state.stream_generation is not None]
        if any(t not in found or changed(t) for t in tables):
            self._reconcile(found)
            stream.dirty = True
            stream.sync()
            self.state.save()
            return
        failure.run.error = failure.message.splitlines()[0][:500]
        raise PipelineFailed(f"{what} failed: {failure.first_error}",
                             fix="fix the cause and run again: the pipeline resumes from its "
                                 f"checkpoint ({self.ckpt.root})")

    def _make_handed(self) -> bool:
        """Make the changes micro-batches handed to the loop; whether there were any."""
        if not self.state.handed:
            return False
        while (request := self.state.handed.pop()) is not None:
            self._make(request)
            self.state.save()
        return True

    def _make(self, request: LoopRequest) -> None:
        if isinstance(request, StopRun):
            raise request.error
        st = request.st
        found = self.discovery.discover(fresh=True)
        if st.table not in found:
            self._reconcile(found)
            return
        self.tables.retake(st, found[st.table], request.what)

    def _follow_gone(self, found: dict | None = None, reconcile: bool = True) -> None:
        """Tables the pipeline's stream saw dropped, renamed or given a new key: a table
        renamed to a name ``tables`` matches and routes to the same target goes on under it
        from the RENAME (``go_on_as``; nothing read again); a table with a new key goes on
        from the change with it (``go_on_rekeyed``); otherwise its stream stops and its target
        is kept. Then the tables are looked up again: a new name, or the name created
        again, is a new table."""
        gone = [st for st in self.state.states.values()
                if st.status == CaptureStatus.ACTIVE and st.gone]
        if not gone:
            return
        found = self.discovery.discover(fresh=True) if found is None else found
        for st in gone:
            g, st.gone = st.gone, None
            assert g is not None
            if g.kind == REKEY:
                assert g.schema is not None
                self.tables.go_on_rekeyed(st, TableSchema.from_dict(g.schema),
                                          self.state.kept_ddl(st, g.statements),
                                          BinlogOffset.from_dict(g.at))
                continue
            if g.kind == "renamed" and g.to is not None:
                st.note = f"renamed to {g.to}"
                if self.tables.may_go_on_as(st, g.to, found):
                    self.tables.go_on_as(st, g.to, found[g.to], g.streaming,
                                         BinlogOffset.from_dict(g.at))
                    continue
            self.tables.dropped(st, st.note if g.kind == "renamed" else "")
        self.state.save()
        if reconcile:
            self._reconcile(found)

    def _warm_sinks(self) -> None:
        """The targets open their connections while the stream starts (seconds of Python
        workers and planning before its first batch), not inside that batch."""
        sinks = [r.sink for r in self.state.runs.values()]
        if sinks:
            threading.Thread(target=lambda: [s.warm() for s in sinks], daemon=True,
                             name="sparkcdc-warm-sinks").start()

    def _all_ended(self) -> bool:
        if self.stream.dirty:  # the pipeline's stream has members to take on
            return False
        runs = self.state.runs
        return bool(runs) and all(r.query is not None and not r.query.isActive
                                  for r in runs.values())

    def _work_waits(self) -> bool:
        """Whether this run will surely start Spark, told before its tables are discovered:
        it runs on when caught up, or one of its tables has work for its stream. A run
        ``--until-caught-up`` that may have nothing to do waits for ``_caught_up_already``
        rather than start a JVM it may not need."""
        if not self.until_caught_up or not self.state.states:
            return True  # a first run has its snapshots to take
        self.discovery.read_now()
        return not self._committed_at_now()

    def _committed_at_now(self) -> bool:
        """Every captured table's stream committed every batch it planned, its snapshot is
        done, and the server's binlog has not moved since that batch's end (no operator's
        request waits either)."""
        now = self.state.now
        if now is None or control.pending(self.ckpt.root):
            return False  # an operator's request waits
        for table, st in self.state.states.items():
            if st.status != CaptureStatus.ACTIVE:
                continue
            if st.gap:
                return False
            b = self.ckpt.last_committed(st)
            if b is None or self.ckpt.last_planned(st) != b:
                return False
            off = self.ckpt.offset(st, b)
            if off is None or off.table(table).phase != "done":
                return False
            pos = off.position
            if (pos.file, pos.pos) != (now.file, now.pos):
                return False
        return True

    def _caught_up_already(self, found: dict[str, TableSchema]) -> bool:
        """A run ``--until-caught-up`` with nothing to do need not start Spark (seconds of
        JVM and session): every captured table is known with its schema, its stream
        committed every batch it planned, its snapshot is done, and the server's binlog
        has not moved since that batch's end. Any doubt means there is work."""
        states = self.state.states
        paused = {t for t, st in states.items() if st.status == CaptureStatus.PAUSED}
        if set(found) - paused != {
                t for t, st in states.items() if st.status == CaptureStatus.ACTIVE}:
            return False
        return self._committed_at_now() and not any(
            sc.diff(schema_of(st), found[t])
            for t, st in states.items() if st.status == CaptureStatus.ACTIVE)

    def _rediscover(self) -> None:
        """The periodic look for new, changed and truncated tables. The server being away
        for a moment (a cut connection, a restart) must not stop streams that ride it out
        themselves: a retryable failure is logged and the look is taken again at the next
        interval; only ``_MAX_IN_A_ROW`` failures in a row stop the pipeline."""
        try:
            self._reconcile(self.discovery.discover())
            self.state.save()
        except SparkCDCError as e:
            if not e.retryable:
                raise
            self._discovery_failures += 1
            if self._discovery_failures >= _MAX_IN_A_ROW:
                raise
            log.warning("looking for table changes failed (%s): trying again in %gs "
                        "(%d of %d)", str(e).splitlines()[0], self.settings.discovery_interval,
                        self._discovery_failures, _MAX_IN_A_ROW)
            return
        self._discovery_failures = 0

    def _stop_all(self) -> None:
        runs = self.state.runs
        for run in runs.values():
            if run.query is not None and run.query.isActive:
                try:
                    run.query.stop()
                except Exception as e:  # noqa: BLE001 - must not hide the reason we stop
                    log.warning("stopping the stream of %s: %s", run.state.table, e)
        self.monitor.write_live(runs.values(), stopping=True)
        for run in runs.values():
            run.sink.close()
        if self.display is not None:
            self.display.update(self)

    # -- reconciling discovered tables with the state -------------------------------------

    def _reconcile(self, found: dict[str, TableSchema], starting: bool = False) -> None:
        state, tables = self.state, self.tables
        if self.settings.schema_change_behavior == "exception":  # before starting anything
            for table, st in state.states.items():
                if st.status != CaptureStatus.ACTIVE:
                    continue
                if table not in found:
                    tables.dropped(st)  # raises: the behavior is exception
                    continue
                d = sc.diff(schema_of(st), found[table])
                if d:
                    raise SchemaChangeStop(
                        f"table {table} changed: {d.describe()}",
                        fix="schema.change.behavior is 'exception': revert the change, or "
                            "choose evolve, try_evolve, lenient or ignore and run again")
        waits = self._gone_in_stream_ahead(found)
        # its DROP or RENAME noted by the stream's batch (a thread of its own) since
        # ``_follow_gone`` took its list: that call's next turn follows it, not this one
        noted = {t for t, st in state.states.items()
                 if st.status == CaptureStatus.ACTIVE and st.gone is not None}
        memo: dict = {}
        for old, new in self._renamed_in_snapshot(found, waits, memo):
            st = state.states[old]
            st.note = f"renamed to {new}"
            tables.go_on_as(st, new, found[new], False, None)
        # a new table routed where a table about to leave writes may be that table renamed
        held = {t for w in waits | noted for t in state.targets(state.states[w])}
        for table, schema in found.items():
            had = state.states.get(table)
            if had is None and held & set(targets_of(self.defn, table)):
                continue  # until the stream has brought the other's DROP or RENAME
            if had is None or had.status == CaptureStatus.DROPPED and table not in state.runs:
                if had is not None:  # dropped and created again: a fresh start
                    st = TableState(table, had.target, had.generation + 1,
                                    batch_base=tables.next_base(had), app_id=had.app_id,
                                    targets=had.targets)
                else:
                    routed = targets_of(self.defn, table)
                    st = TableState(table, routed[0], app_id=state.app_id(table),
                                    targets=list(routed) if len(routed) > 1 else None)
                    if not starting:
                        log.info("new table %s: capturing it into %s", table, st.target)
                st.schema = schema.to_dict()
                st.status = CaptureStatus.ACTIVE
                state.states[table] = st
                tables.start(st, schema)  # saves the state before any stream starts
                continue
            st = had
            if st.status in (CaptureStatus.FAILED, CaptureStatus.PAUSED):
                continue
            d = sc.diff(schema_of(st), schema)
            if d and not self._stream_carries(st, memo):
                # its chunks were read with the old schema: taken again with the new one
                tables.retake(st, schema, f"table {table} changed during its snapshot "
                                          f"({d.describe()})")
            elif table not in state.runs:
                tables.start(st, schema)
        for table, st in state.states.items():
            if (table not in found and st.status == CaptureStatus.ACTIVE
                    and table not in waits and table not in noted):
                tables.dropped(st)
        for table in sorted(waits - set(state.runs)):  # read on up to its DROP or RENAME
            st = state.states[table]
            tables.start(st, schema_of(st))

    def _renamed_in_snapshot(self, found: dict[str, TableSchema], waits: set[str],
                             memo: dict) -> list[tuple[str, str]]:
        """Tables gone from the source during their snapshot, each with the one new table
        that routes to exactly its targets: taken as renamed to it. The stream cannot bring
        such a RENAME at its place: a chunk of the old name read after it fails the batch
        (the table does not exist), so the loop learns of it from discovery, where a rename
        shows as a table gone and one new. The target holds part of the old name's rows and
        the changes of its unread chunks were dropped, so the new name is taken again from
        an emptied target (``go_on_as``), as a RENAME the stream met during the snapshot is.
        Not when emptying the target would take other tables' rows with it: then the run
        stops with the fix (``SchemaError``), as a table taken again into a shared target
        does, instead of keeping rows the source has not."""
        state = self.state
        gone = [st for t, st in state.states.items()
                if st.status == CaptureStatus.ACTIVE and t not in found and not st.gone
                and t not in waits and not state.carried_by_stream(st, memo)]
        if not gone:
            return []
        new = [t for t in found
               if (had := state.states.get(t)) is None
               or had.status == CaptureStatus.DROPPED and t not in state.runs]
        pairs = []
        for st in gone:
            routed = [t for t in new if targets_of(self.defn, t) == state.targets(st)]
            if len(routed) != 1 or sum(targets_of(self.defn, t) == targets_of(
                    self.defn, routed[0]) for t in new) != 1:
                continue  # none, or several: which one is it?
            if state.emptying_hits_others(st):
                # emptying would take the other tables' rows; capturing the new name over
                # the old one's partial snapshot would keep rows the source deleted
                raise SchemaError(
                    f"table {st.table} is gone during its snapshot and {routed[0]} is new in "
                    f"its target {st.target} (a rename): the new name must be taken again "
                    "from an emptied target, but other tables write into that target too",
                    fix="empty the target, then start the pipeline again with a new "
                        "checkpoint location; or rename tables once their snapshot is done")
            if self.tables.may_go_on_as(st, routed[0], found):
                log.warning("table %s is gone during its snapshot and %s is new in its target "
                            "%s: taken as renamed to it", st.table, routed[0], st.target)
                pairs.append((st.table, routed[0]))
                new.remove(routed[0])
        return pairs

    def _stream_carries(self, st: TableState, memo: dict) -> bool:
        """Whether the table's schema changes reach its target through the pipeline's
        stream: past its snapshot there, joining it from a binlog offset, or coming from a
        stream of its own (it joins from where its target is, with the schema it was read
        with: ``TableLifecycle._from_own_stream``)."""
        return (self.state.carried_by_stream(st, memo) or st.start.joins
                or self.state.has_own_stream(st))

    def _gone_in_stream_ahead(self, found: dict[str, TableSchema]) -> set[str]:
        """Tables gone from the source whose DROP or RENAME the pipeline's stream has yet
        to read: it brings the statement at its place, after the table's last rows
        (``_follow_gone``), so discovery leaves them to it. One the stream has read past
        where the server is now without meeting the statement is dropped."""
        state = self.state
        memo: dict = {}
        ahead = {t for t, st in state.states.items()
                 if st.status == CaptureStatus.ACTIVE and t not in found and not st.gone
                 and state.carried_by_stream(st, memo)}
        if not ahead:
            return set()
        self.discovery.read_now()  # after the discovery that found them gone
        now = state.now
        assert now is not None
        waits = set()
        for t in ahead:
            st = state.states[t]
            b = self.ckpt.last_committed(st)
            off = self.ckpt.offset(st, b) if b is not None else None
            assert off is not None  # (carried by the stream: it committed a batch)
            if off.position < now:
                waits.add(t)
        return waits
