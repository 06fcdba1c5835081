"""The pipeline runner: the tables of a pipeline read by one Spark stream, applied to their
routed targets. Its parts, one idea each:

* here, the loop and the table states: discovery, reconciling what it found with
  ``pipeline.json``, starting each table's capture (``_start``), watching the query;
* ``pipeline_stream.py``: the pipeline's stream, one query over every table (a members
  file the source follows, micro-batches split by table, schema changes, TRUNCATEs, drops
  and renames met in binlog order, writes from the driver or from tasks);
* ``source_changes.py``: what the loop does when the stream hands a change over (a table
  taken again, a new key, a rename into the same target, a drop) and a binlog purged while
  the pipeline was stopped;
* ``table_run.py``: what the runner keeps about a running table.

The loop, on the driver:

1. discover the matched tables (the columns of new ones: a table whose changes the
   pipeline's stream carries keeps its schema); start the pipeline's stream
   (``TableState`` in ``pipeline.json`` says which generation, from where, with which
   schema; a table a stream of its own read, in a checkpoint from before, joins it);
2. every second: look at the query (progress per table for the display and ``live/``;
   a failed batch is examined at once, a change handed over by the stream made first),
   and act on the drops, renames and new keys the stream has written up to;
3. every ``discovery.interval``: re-discover; a new matching table joins (snapshot first,
   inside the running query).
"""

from __future__ import annotations

import contextlib
import logging
import os
import secrets
import threading
import time
from collections.abc import Callable
from typing import Any

from sparkcdc.apply import DEFAULT_DELETES, DEL_MARK, TRUNC_MARK, apply_arrow
from sparkcdc.core.schema import TableId, TableSchema
from sparkcdc.errors import (
    ConfigError,
    PipelineFailed,
    SchemaChangeStop,
    SparkCDCError,
)
from sparkcdc.mysql.options import SourceConfig, parse_server_ids
from sparkcdc.pipeline import cluster, control, conversions, targets
from sparkcdc.pipeline import schema_change as sc
from sparkcdc.pipeline.checkpoint import (
    CaptureStatus,
    Checkpoint,
    TableState,
    read_json,
    write_json,
)
from sparkcdc.pipeline.definition import PipelineDef
from sparkcdc.pipeline.operator import OperatorRequests
from sparkcdc.pipeline.pipeline_stream import PipelineStream
from sparkcdc.pipeline.routing import META, Shaper, shaper_for, targets_of, transform_of
from sparkcdc.pipeline.session import OwnSession, PendingSession, build_session
from sparkcdc.pipeline.signals import stop_on_signals
from sparkcdc.pipeline.source_changes import SourceChanges
from sparkcdc.pipeline.stream_schema import conform, target_arrow_schema
from sparkcdc.pipeline.table_run import TableRun, note_emit_lag
from sparkcdc.sinks import sink_class
from sparkcdc.spark import offset_view as ov
from sparkcdc.spark.arrow_batches import spark_arrow_schema

log = logging.getLogger("sparkcdc.pipeline")


class Runner(PipelineStream, SourceChanges, OperatorRequests):
    """Runs a pipeline. ``run()`` blocks until stopped (``stop()``, Ctrl-C, SIGTERM) or, with
    ``until_caught_up``, until every table reached the binlog position of its start."""

    def __init__(self, defn: PipelineDef, spark=None, *, master: str | None = None,
                 until_caught_up: bool = False, display=None,
                 on_batch: Callable[[str, Any, int], None] | None = None,
                 spark_log_to_console: bool = False):
        self.defn = defn
        self.settings = defn.pipeline
        self._spark = spark
        self._session: OwnSession | None = None  # the session this runner started
        self._pending: PendingSession | None = None  # ... while it starts (_begin_session)
        self.master = master
        # Flink's execution.runtime-mode BATCH: the run ends once caught up
        self.until_caught_up = until_caught_up or defn.pipeline.batch
        self.display = display
        self.on_batch = on_batch
        self.spark_log_to_console = spark_log_to_console
        self.ckpt = Checkpoint(defn.checkpoint_dir)
        self.runs: dict[str, TableRun] = {}
        self.states: dict[str, TableState] = {}
        self._stop = threading.Event()
        self._target_locks: dict[str, threading.Lock] = {}
        self._ids_used = 0
        self._discovery_failures = 0  # periodic table discovery, failures in a row
        self._flavor = "mariadb"
        self._config = None
        self._now = None  # the server's binlog position at the last look (_read_now)
        self.nothing_to_do = False  # run() found every table caught up and started nothing
        self.group_gen = 0  # the generation of the pipeline's stream (``_sync_group``)
        self.group_query = None
        self._group_dirty = False  # its tables changed: restart it at the next look
        self._group_ids: str | None = None
        self._group_restarts = 0  # transient failures in a row
        self._group_members: dict[str, TableRun] = {}  # what its micro-batches write
        self._group_query_gen: int | None = None  # the generation its running query reads
        self._seen_batch: dict[Any, int] = {}  # per query: the last progress report looked at
        self.last_batch_seconds: float | None = None  # the last micro-batch's duration
        # what a micro-batch of the pipeline's stream hands to the loop (per table, done
        # in _poll): schema changes the stream cannot apply by itself (stream_schema.py)
        self._deferred: dict[str, Callable[[], None]] = {}
        self._state_lock = threading.RLock()

    # -- setup -----------------------------------------------------------------------------

    def _begin_session(self) -> None:
        """Start this runner's Spark session in the background (``PendingSession``)."""
        if self._spark is None and self._pending is None:
            self._pending = PendingSession(lambda: build_session(
                self.settings, self.master, str(self.ckpt.spark_log),
                self.spark_log_to_console))

    @property
    def spark(self):
        if self._spark is None:
            self._begin_session()
            assert self._pending is not None
            pending, self._pending = self._pending, None
            self._session = pending.result()
            self._spark = self._session.spark
            if not cluster.is_local(self.master):
                try:
                    cluster.probe_executors(self._spark)
                except BaseException:
                    self.close()
                    raise
        return self._spark

    def _source_config(self):
        if self._config is None:
            self._config = SourceConfig.parse(self.defn.source.options_for())
        return self._config

    def discover(self, fresh: bool = False) -> dict[str, TableSchema]:
        """The captured tables and their schemas. A table whose schema changes reach its
        target through the pipeline's stream (``_carried_by_stream``) keeps the schema the
        pipeline holds: only the list of tables and the new tables' columns are read
        (``fresh``: every table's columns)."""
        from sparkcdc.spark.source import discover_tables

        memo: dict = {}
        known = None if fresh else {
            TableId.parse(t): TableSchema.from_dict(st.schema) for t, st in self.states.items()
            if st.status == CaptureStatus.ACTIVE and st.schema and self._carried_by_stream(st, memo)}
        tables, self._flavor = discover_tables(self._source_config(), known)
        return {str(t): s for t, s in tables.items()}

    def _server_ids(self) -> str:
        n = self.settings.parallelism + 1  # one id for the binlog window, the rest for chunks
        pool = self.defn.source.options.get("server-id")
        if pool:
            ids = parse_server_ids(pool)
            lo = self._ids_used * n
            if lo + n > len(ids):
                raise ConfigError(
                    f"source.server-id {pool!r} has {len(ids)} ids; the pipeline needs "
                    f"{n} per stream (parallelism + 1) and has {self._ids_used + 1} "
                    "streams so far",
                    fix=f"widen the range to at least {n * (self._ids_used + 1)} ids, or "
                        "remove server-id to use random ids")
            self._ids_used += 1
            return f"{ids[lo]}-{ids[lo + n - 1]}"
        base = 1_000_000_000 + secrets.randbelow(2_000_000_000)
        return f"{base}-{base + n - 1}"

    def _sink_kind(self) -> str:
        return sink_class(self.defn.sink.type).kind

    def _app_id(self, table: str) -> str:
        return f"{self.settings.name}.{table}"

    # -- the loop --------------------------------------------------------------------------

    def run(self) -> int:
        import sparkcdc

        lock = self._lock_checkpoint()
        with stop_on_signals(self.stop):  # Ctrl-C, SIGTERM: the loop ends at its step
            try:
                self.states = self.ckpt.load_tables()
                self.group_gen = self.ckpt.load_group()
                if self._work_waits():
                    self._begin_session()  # its JVM starts while the tables are discovered
                found = self.discover()
                self._check_purged()
                self._read_now()
                if self.until_caught_up and self._caught_up_already(found):
                    log.info("every table is caught up at %s: nothing to do", self._now)
                    self.nothing_to_do = True
                    return 0
                if self._stop.is_set():  # Ctrl-C while it started: no stream to start
                    return 0
                sparkcdc.register(self.spark)
                self._follow_gone(found, reconcile=False)  # seen by the last run's stream
                self._reconcile(found, starting=True)
                self._warm_sinks()
                self._take_requests()  # made while no pipeline ran
                self._sync_group()
                self._save()
                last_discovery = time.monotonic()
                while not self._stop.is_set():
                    self._poll()
                    self._follow_gone()
                    self._take_requests()
                    if self.until_caught_up and self._all_ended():
                        self._poll()  # the last batches' progress; a failure examined
                        self._follow_gone()
                        if self._all_ended():  # (not restarted by that examination)
                            break
                    if not self.runs and self.until_caught_up:
                        break
                    if (not self.until_caught_up and time.monotonic() - last_discovery
                            >= self.settings.discovery_interval):
                        self._rediscover()
                        last_discovery = time.monotonic()
                    self._stop.wait(1.0)
            except KeyboardInterrupt:
                log.info("interrupted: stopping the streams")
            finally:
                try:
                    self._stop_all()
                finally:
                    lock.close()  # releases the flock
        return 0

    def _warm_sinks(self) -> None:
        """The targets open their connections while the stream starts (seconds of Python
        workers and planning before its first batch), not inside that batch."""
        sinks = [r.sink for r in self.runs.values()]
        if sinks:
            threading.Thread(target=lambda: [s.warm() for s in sinks], daemon=True,
                             name="sparkcdc-warm-sinks").start()

    def _all_ended(self) -> bool:
        if self._group_dirty:  # the pipeline's stream has members to take on
            return False
        return bool(self.runs) and all(r.query is not None and not r.query.isActive
                                       for r in self.runs.values())

    def _work_waits(self) -> bool:
        """Whether this run will surely start Spark, told before its tables are discovered:
        it runs on when caught up, or one of its tables has work for its stream. A run
        ``--until-caught-up`` that may have nothing to do waits for ``_caught_up_already``
        rather than start a JVM it may not need."""
        if not self.until_caught_up or not self.states:
            return True  # a first run has its snapshots to take
        self._read_now()
        return not self._committed_at_now()

    def _committed_at_now(self) -> bool:
        """Every captured table's stream committed every batch it planned, its snapshot is
        done, and the server's binlog has not moved since that batch's end (no operator's
        request waits either)."""
        now = self._now
        if now is None or control.pending(self.ckpt.root):
            return False  # an operator's request waits
        for table, st in self.states.items():
            if st.status != CaptureStatus.ACTIVE:
                continue
            if st.gap:
                return False
            b = self.ckpt.last_committed(st)
            if b is None or self.ckpt.last_planned(st) != b:
                return False
            off = self.ckpt.offset(st, b)
            if off is None or ov.table_phase(off, table) != "done":
                return False
            pos = ov.position(off)
            if (pos.file, pos.pos) != (now.file, now.pos):
                return False
        return True

    def _caught_up_already(self, found: dict[str, TableSchema]) -> bool:
        """A run ``--until-caught-up`` with nothing to do need not start Spark (seconds of
        JVM and session): every captured table is known with its schema, its stream
        committed every batch it planned, its snapshot is done, and the server's binlog
        has not moved since that batch's end. Any doubt means there is work."""
        if set(found) - self._paused() != {
                t for t, st in self.states.items() if st.status == CaptureStatus.ACTIVE}:
            return False
        return self._committed_at_now() and not any(
            sc.diff(TableSchema.from_dict(st.schema), found[t])
            for t, st in self.states.items() if st.status == CaptureStatus.ACTIVE)

    def _paused(self) -> set[str]:
        return {t for t, st in self.states.items() if st.status == CaptureStatus.PAUSED}

    def _rediscover(self) -> None:
        """The periodic look for new, changed and truncated tables. The server being away
        for a moment (a cut connection, a restart) must not stop streams that ride it out
        themselves: a retryable failure is logged and the look is taken again at the next
        interval; only ``_MAX_IN_A_ROW`` failures in a row stop the pipeline."""
        try:
            self._reconcile(self.discover())
            self._save()
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

    def _lock_checkpoint(self):
        """One runner per checkpoint: a second one would corrupt Spark's logs."""
        import fcntl

        self.ckpt.root.mkdir(parents=True, exist_ok=True)
        f = open(self.ckpt.root / ".lock", "a+")
        try:
            fcntl.flock(f, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            f.seek(0)
            holder = f.read().strip() or "another process"
            f.close()
            raise ConfigError(f"the pipeline is already running with checkpoint "
                              f"{self.ckpt.root} (pid {holder})",
                              fix="stop that run first (Ctrl-C), or give this one another "
                                  "checkpoint.location") from None
        f.seek(0)
        f.truncate()
        f.write(str(os.getpid()))
        f.flush()
        return f

    def stop(self) -> None:
        self._stop.set()

    @property
    def interrupted(self) -> bool:
        """Whether the run was asked to stop (Ctrl-C, SIGTERM, ``stop``): a run
        ``--until-caught-up`` that was may have stopped before it caught up."""
        return self._stop.is_set()

    def close(self) -> None:
        """Stop the SparkSession if this runner created it."""
        if self._pending is not None:  # started, never used
            pending, self._pending = self._pending, None
            pending.stop()
        if self._session is not None:
            self._session.stop()
            self._session = self._spark = None

    def _save(self) -> None:
        with self._state_lock:
            self.ckpt.save_tables(self.settings.name, self.states, self.group_gen)

    def _stop_all(self) -> None:
        for run in self.runs.values():
            if run.query is not None and run.query.isActive:
                try:
                    run.query.stop()
                except Exception as e:  # stopping must not hide the reason we stop
                    log.warning("stopping the stream of %s: %s", run.state.table, e)
        for run in self.runs.values():
            self._write_live(run, running=False)
            run.sink.close()
        if self.display is not None:
            self.display.update(self)

    # -- reconciling discovered tables with the state -------------------------------------

    def _reconcile(self, found: dict[str, TableSchema], starting: bool = False) -> None:
        if self.settings.schema_change_behavior == "exception":  # before starting anything
            for table, st in self.states.items():
                if st.status != CaptureStatus.ACTIVE:
                    continue
                if table not in found:
                    self._dropped(st)  # raises: the behavior is exception
                    continue
                d = sc.diff(TableSchema.from_dict(st.schema), found[table])
                if d:
                    raise SchemaChangeStop(
                        f"table {table} changed: {d.describe()}",
                        fix="schema.change.behavior is 'exception': revert the change, or "
                            "choose evolve, try_evolve, lenient or ignore and run again")
        waits = self._gone_in_stream_ahead(found)
        # a new table routed where a table about to leave writes may be that table renamed
        held = {t for w in waits for t in self._targets(self.states[w])}
        memo: dict = {}
        for table, schema in found.items():
            st = self.states.get(table)
            if st is None and held & set(targets_of(self.defn, table)):
                continue  # until the stream has brought the other's DROP or RENAME
            if st is None or st.status == CaptureStatus.DROPPED and table not in self.runs:
                if st is not None:  # dropped and created again: a fresh start
                    st = TableState(table, st.target, st.generation + 1,
                                    batch_base=self._next_base(st), app_id=st.app_id,
                                    targets=st.targets)
                else:
                    routed = targets_of(self.defn, table)
                    st = TableState(table, routed[0], app_id=self._app_id(table),
                                    targets=list(routed) if len(routed) > 1 else None)
                    if not starting:
                        log.info("new table %s: capturing it into %s", table, st.target)
                st.schema = schema.to_dict()
                st.status = CaptureStatus.ACTIVE
                self.states[table] = st
                self._start(st, schema)  # saves the state before any stream starts
                continue
            if st.status in (CaptureStatus.FAILED, CaptureStatus.PAUSED):
                continue
            d = sc.diff(TableSchema.from_dict(st.schema), schema)
            if d and not self._stream_carries(st, memo):
                # its chunks were read with the old schema: taken again with the new one
                self._retake(st, schema, f"table {table} changed during its snapshot "
                                         f"({d.describe()})")
            elif table not in self.runs:
                self._start(st, schema)
        for table, st in self.states.items():
            if table not in found and st.status == CaptureStatus.ACTIVE and table not in waits:
                self._dropped(st)
        for table in sorted(waits - set(self.runs)):  # read on up to its DROP or RENAME
            st = self.states[table]
            self._start(st, TableSchema.from_dict(st.schema))

    def _stream_carries(self, st: TableState, memo: dict) -> bool:
        """Whether the table's schema changes reach its target through the pipeline's
        stream: past its snapshot there, joining it from a binlog offset, or coming from a
        stream of its own (it joins from where its target is, with the schema it was read
        with: ``_from_own_stream``)."""
        return (self._carried_by_stream(st, memo) or st.start.joins
                or self._has_own_stream(st))

    def _gone_in_stream_ahead(self, found: dict[str, TableSchema]) -> set[str]:
        """Tables gone from the source whose DROP or RENAME the pipeline's stream has yet
        to read: it brings the statement at its place, after the table's last rows
        (``_follow_gone``), so discovery leaves them to it. One the stream has read past
        where the server is now without meeting the statement is dropped (``_dropped``)."""
        memo: dict = {}
        ahead = {t for t, st in self.states.items()
                 if st.status == CaptureStatus.ACTIVE and t not in found and not st.gone
                 and self._carried_by_stream(st, memo)}
        if not ahead:
            return set()
        self._read_now()  # after the discovery that found them gone
        now = self._now
        waits = set()
        for t in ahead:
            st = self.states[t]
            off = self.ckpt.offset(st, self.ckpt.last_committed(st))
            if ov.position(off) < now:
                waits.add(t)
        return waits

    # -- streams -----------------------------------------------------------------------------

    def _sink_for(self, st: TableState):
        """The table's sink: its target's, or a ``FanOut`` of its targets' (routes that all
        match it), created with its transform's partition-keys and table-options."""
        return targets.create_sinks(self.defn.sink.type, self.defn.sink.options,
                                    self._targets(st), st.app_id, self._creation(st.table))

    @staticmethod
    def _targets(st: TableState) -> tuple[str, ...]:
        """Every target of the table (several when routes fan it out)."""
        return tuple(st.targets) if st.targets else (st.target,)

    def _creation(self, table: str) -> dict[str, str]:
        t = transform_of(self.defn, table)
        if t is None:
            return {}
        return targets.table_creation_options(self.defn.sink.type, t.partition_keys,
                                              t.table_options)

    def _lock(self, target: str) -> threading.Lock:
        return self._target_locks.setdefault(target, threading.Lock())

    @contextlib.contextmanager
    def _locks(self, st: TableState):
        """Every target of the table locked, in one order (a target another table shares
        is written by one of them at a time)."""
        with contextlib.ExitStack() as stack:
            for t in sorted(self._targets(st)):
                stack.enter_context(self._lock(t))
            yield

    def _rows_schema(self, st: TableState, shaper: Shaper):
        """The Arrow schema of the table's rows as written: the target's columns, the
        metadata columns, and the markers of its AUTO CDC rules (``mark_changes``)."""
        import pyarrow as pa

        schema = target_arrow_schema(st.columns, self.spark)
        spec = shaper.spec(("_",))
        if spec.apply_as_deletes != DEFAULT_DELETES:
            schema = schema.append(pa.field(DEL_MARK, pa.bool_()))
        if spec.apply_as_truncates:
            schema = schema.append(pa.field(TRUNC_MARK, pa.bool_()))
        return schema

    def _start(self, st: TableState, schema: TableSchema) -> None:
        """Capture the table in the pipeline's stream."""
        shaper = shaper_for(self.defn, st.table)
        keys = shaper.keys(schema.primary_key)
        if not keys:
            raise ConfigError(
                f"table {st.table} has no primary key, so its target has no key to apply "
                "changes by",
                fix=f"add a transform for {st.table} with primary-keys: the columns that "
                    "identify a row (or add a primary key to the table)")
        if self._has_own_stream(st):
            self._from_own_stream(st)
            schema = TableSchema.from_dict(st.schema)
        rows_schema = self._arrow_path(st, schema, shaper)
        self._join_group(st, schema, shaper, tuple(keys), rows_schema)

    def _upsert_only(self) -> dict[str, str]:
        tracked = any(t.track_history is not None or t.track_history_except is not None
                      for t in self.defn.transforms)  # history is tracked by pre-images
        if (self.on_batch is None and self._sink_kind() == "merge" and not tracked
                and "changelog-mode" not in self.defn.source.options):
            # apply_changes drops update preimages at once: not reading them halves the
            # rows an update batch moves through Spark
            return {"changelog-mode": "upsert"}
        return {}

    def _trigger(self, writer):
        if self.until_caught_up:
            return writer.trigger(availableNow=True)
        if self.settings.trigger_interval > 0:
            return writer.trigger(processingTime=f"{self.settings.trigger_interval} seconds")
        return writer

    def _new_run(self, st: TableState, schema: TableSchema, sink, shaper: Shaper,
                 keys: tuple[str, ...]) -> TableRun:
        run = TableRun(st, schema, sink, shaper, keys)
        live = read_json(self.ckpt.live_path(st.table)) or {}
        if live.get("generation") == st.generation:  # counts go on across runs
            run.rows, run.batches = int(live.get("rows") or 0), int(live.get("batches") or 0)
        return run

    def _arrow_path(self, st: TableState, schema: TableSchema, shaper: Shaper):
        """The Arrow schema of the target's rows: a table's micro-batches skip Spark's rows
        (``arrow-batches``: decoded and planned on the driver, see spark/arrow_batches.py).
        For a merge sink everything the Spark plan would do to the rows is the plan
        ``reduce_changes`` does in Arrow; a changelog sink appends the rows with Spark's
        writer. Shaping them like the target (a column kept for a dropped one, a type
        kept) is ``stream_schema.conform``, and a transform runs on each batch's rows of
        the table (``_transformed``)."""
        from pyspark.sql.pandas.types import from_arrow_schema

        from sparkcdc.spark.rows import output_schema

        source = output_schema(conversions.arrow_schema(schema, self.defn.source.extras))
        spark_schema = from_arrow_schema(source, prefer_timestamp_ntz=True)
        if shaper.active:  # the transform's own columns (checked here once)
            spark_schema = shaper.apply(self.spark.createDataFrame([], spark_schema)).schema
        data = [f.jsonValue() for f in spark_schema.fields
                if f.name not in META and f.name not in (DEL_MARK, TRUNC_MARK)]
        if st.columns is None:
            st.columns = data
        keys = shaper.keys(schema.primary_key)
        missing = [k for k in keys if k not in {c["name"] for c in data}]
        if missing:
            raise ConfigError(f"key column(s) {missing} of {st.table} are not in its rows "
                              f"after the transform",
                              fix="keep the key in the projection, or set primary-keys in the "
                                  "table's transform")
        shaper.spec(tuple(keys)).tracked_columns([c["name"] for c in data])  # names checked
        return self._rows_schema(st, shaper)

    def _transformed(self, run: TableRun, rows):
        """A table's change rows through its transform (projection, filter: Spark SQL, so
        the same expressions as a stream of its own), on the driver: a local DataFrame of
        the batch's rows, planned and collected back as Arrow. Flink's source conversions
        (``conversions.py``) come first."""
        rows = conversions.convert_rows(rows, run.schema, self.defn.source.extras)
        if not run.shaper.active or not rows.num_rows:
            return rows

        rows = rows.cast(spark_arrow_schema(_plain_schema(rows.schema), self.spark))
        return run.shaper.apply(self._local_frame(rows), run.keys).toArrow()

    def _write_rows(self, run: TableRun, rows, batch_id: int, spec,
                    empty_first: bool = False) -> None:
        """A table's change rows of one micro-batch (Arrow) shaped like its target, planned
        and written to it under the target's lock with the target's batch id; what the
        loop and the metrics show of it noted. ``empty_first``: a TRUNCATE came before
        them, the target is emptied first (unless it has the batch already)."""

        rows = conform(rows, run.rows_schema)
        target_batch = run.state.batch_base + batch_id
        df = None
        with self._locks(run.state):
            if self.runs.get(run.state.table) is not run:
                return  # stopped meanwhile (dropped, taken again, left the stream)
            if run.sink.kind == "changelog":  # every change row, appended by Spark's writer
                if empty_first:
                    run.sink.empty()  # a changelog cannot be: this fails with the fix
                marks = [c for c in (DEL_MARK, TRUNC_MARK) if c in rows.column_names]
                changes = rows.drop_columns(marks)
                if run.sink.takes_arrow:  # written from the driver's Arrow rows
                    run.sink.write_changelog(changes, target_batch, run.keys)
                else:
                    df = self._local_frame(changes)
                    run.sink.write_changelog(df, target_batch, run.keys)
            else:
                for sink in targets.each_sink(run.sink):  # each target skips what it has
                    apply_arrow(sink, rows, target_batch, spec, empty_first)
        run.change_rows[batch_id] = rows.num_rows
        note_emit_lag(run, rows)
        self._after_batch(run, rows, target_batch, df)

    def _after_batch(self, run: TableRun, rows, target_batch: int, df=None) -> None:
        """``on_batch(table, change rows as a Spark DataFrame, the target's batch id)``, the
        hook of ``Runner`` (tests and callers watch every applied batch with it). A target
        created by this batch is named in its catalog now (``Sink.publish``)."""
        if not run.published:
            run.published = run.sink.publish(self.spark)
        if self.on_batch is not None:
            self.on_batch(run.state.table, df if df is not None else self._local_frame(rows),
                          target_batch)

    def _local_frame(self, rows):
        """Arrow rows on the driver as a Spark DataFrame (naive timestamps stay DATETIME)."""
        from pyspark.sql.pandas.types import from_arrow_schema

        return self.spark.createDataFrame(
            rows, schema=from_arrow_schema(rows.schema, prefer_timestamp_ntz=True))

    # -- watching ----------------------------------------------------------------------------

    def _poll(self) -> None:
        """One look at every query (the pipeline's stream once, however many tables it
        reads): progress for each table, ``live/``, the display; a failure examined."""
        self._sync_group()
        failed: dict[int, TableRun] = {}
        looks: dict[int, tuple] = {}  # per query: (progress, active, failed)
        parsed: dict[tuple, tuple] = {}  # per (query, batch): the offsets, parsed once
        for table, run in list(self.runs.items()):
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
                    if run.state.group is not None:
                        self._group_restarts = 0
            if run.error is None and broken:
                failed.setdefault(id(q), run)
            self._write_live(run, running=run.active)
        if self.display is not None:
            self.display.update(self)
        for run in failed.values():
            self._examine_failure(run)

    def _new_progress(self, q) -> list[dict]:
        """The query's progress reports of batches not seen yet. Each report holds the
        source's offsets, which list every table of the pipeline's stream: the whole recent
        list (up to 100 reports) is fetched only when the last one is new."""
        last = q.lastProgress
        if last is None:
            return []
        seen = self._seen_batch.get(q, -1)  # (keyed by the object: an id() may be reused)
        if last["batchId"] <= seen:
            return []
        self._seen_batch[q] = last["batchId"]
        return [p for p in (q.recentProgress or []) if p["batchId"] > seen] or [last]

    def _progress(self, run: TableRun, p: dict, off: dict | None, latest: dict | None,
                  rate: float) -> None:
        log.debug("batch %s of %s: %s rows, durations %s", p.get("batchId"), run.state.table,
                  p.get("numInputRows"), p.get("durationMs"))
        if not off:
            return
        table = run.state.table
        run.pos = off.get("pos")
        phase = ov.table_phase(off, table) or off.get("phase", "")
        if phase in ("planning", "snapshotting") and run.snapshot_started is None:
            run.snapshot_started = time.monotonic()
        run.phase = ("streaming" if off.get("phase") == "streaming" or phase == "done"
                     else "snapshot")
        run.chunks_done = ov.table_chunks_done(off, table)
        run.chunks_total = ov.chunks_total(off, table, run.chunks_done)
        run.rate = rate
        if latest:
            run.lag_bytes = ov.lag_bytes(run.pos, latest.get("pos"))

    def _write_live(self, run: TableRun, running: bool) -> None:
        """``live/<table>.json`` for ``status``: written when it changed (at most every 5 s
        while it runs), and every 30 s (``status`` calls a run alive for 120 s after the
        last write)."""
        st = run.state
        data = {"table": st.table, "target": st.target, "generation": st.generation,
                "running": running, "pid": os.getpid(), "rows": run.rows,
                "batches": run.batches, "rate": run.rate, "lag_bytes": run.lag_bytes,
                "error": run.error}
        now = time.time()
        if run.live and running and run.live[0]["running"] and (
                now - run.live[1] < 5 or run.live[0] == data and now - run.live[1] < 30):
            return
        write_json(self.ckpt.live_path(st.table), {**data, "updated": now})
        run.live = (data, now)

    def _examine_failure(self, run: TableRun) -> None:
        st = run.state
        if st.group is not None and self._run_deferred():
            self._group_dirty = True  # the batch is replayed with the change made
            self._sync_group()
            return
        exc = run.query.exception()
        msg = str(exc) if exc is not None else _THREAD_DIED
        grouped = st.group is not None
        restarts = self._group_restarts if grouped else run.restarts
        what = "the pipeline's stream" if grouped else f"the stream of {st.table}"
        if _transient(msg) and restarts < _MAX_IN_A_ROW:
            restarts += 1
            log.warning("%s failed (%s): restarting it (%d of %d)", what, _first_error(msg),
                        restarts, _MAX_IN_A_ROW)
            self._stop.wait(2.0 * restarts)  # a loaded machine: give it a moment
            if grouped:
                self._group_restarts = restarts
                self._group_dirty = True
                self._sync_group()
                return
            self.runs.pop(st.table, None)
            run.sink.close()
            self._start(st, run.schema)
            self.runs[st.table].restarts = restarts
            return
        # a schema change or a dropped table fails a stream that reads it: reconciling
        # handles it (and restarts the pipeline's stream without or with the table)
        found = self.discover(fresh=True)
        tables = ([r.state.table for r in self.runs.values() if r.state.group is not None]
                  if grouped else [st.table])
        memo: dict = {}

        def changed(t: str) -> bool:  # a change the stream carries cannot have failed it
            st_ = self.states[t]
            return (sc.diff(TableSchema.from_dict(st_.schema), found[t])
                    and not self._carried_by_stream(st_, memo))

        if any(t not in found or changed(t) for t in tables):
            self._reconcile(found)
            if grouped:
                self._group_dirty = True
            self._sync_group()
            self._save()
            return
        run.error = msg.splitlines()[0][:500]
        raise PipelineFailed(f"{what} failed: {_first_error(msg)}",
                             fix="fix the cause and run again: the pipeline resumes from its "
                                 f"checkpoint ({self.ckpt.root})")

    def _stop_run(self, st: TableState) -> TableRun | None:
        """Stop writing the table's target: the pipeline's stream goes on without it (its
        members file rewritten at the next look, ``_sync_group``); a query of the table's
        own (none is started any more) is stopped."""
        run = self.runs.get(st.table)
        if run is None:
            return None
        if st.group is not None and run.query is self.group_query:
            # the pipeline's stream goes on without it: a write of it in flight finishes
            # first (under the target's lock), the next ones find it gone
            with self._locks(st):
                self.runs.pop(st.table, None)
                run.sink.close()
            self._group_dirty = True
            return run
        self.runs.pop(st.table, None)
        if run.query is not None and run.query.isActive:
            run.query.stop()
        if st.group is not None:
            self._group_dirty = True
        run.sink.close()
        return run


# A query whose execution thread died while Spark handled a failure (seen: a
# StackOverflowError in java.util.regex on a long error text after a torn connection) stays
# "active" with no exception, and would hang the pipeline: it is restarted like a transient
# failure (the checkpoint makes the restart exactly once).
_THREAD_DIED = ("the stream's execution thread died without reporting an error "
                "(see the Spark log above)")

# Transient failures (a stream's or the periodic discovery's) tolerated in a row before the
# pipeline stops with the error; a completed batch / a successful look resets the count.
_MAX_IN_A_ROW = 5

_TRANSIENT = ("Python worker failed to connect back", "ConnectionFailed",
              "Lost connection to MySQL server", "Connection refused", _THREAD_DIED)


def _plain_schema(schema):
    """An Arrow schema as the source builds it, for ``spark_arrow_schema`` (no metadata)."""
    return schema.remove_metadata() if schema.metadata else schema


def _offsets(p: dict) -> tuple[dict | None, dict | None]:
    """A progress report's end offset of our source and the server's latest position."""
    import json

    src = (p.get("sources") or [{}])[0]

    def load(v):
        return json.loads(v) if isinstance(v, str) else v

    end, latest = src.get("endOffset"), src.get("latestOffset")
    return (load(end) if end else None), (load(latest) if latest else None)


def _thread_died(q) -> bool:
    """True when Spark says the query is active but its execution thread is gone."""
    if not q.isActive:
        return False
    try:
        return not q._jsq.streamingQuery().queryExecutionThread().isAlive()
    except Exception:  # another Spark version or a gateway hiccup: no verdict
        return False


def _transient(msg: str) -> bool:
    return any(t in msg for t in _TRANSIENT)


def _first_error(msg: str) -> str:
    for line in msg.splitlines():
        if "sparkcdc.errors." in line or "Error:" in line:
            return line.strip()[:600]
    return msg.splitlines()[0][:600] if msg else "unknown error"
