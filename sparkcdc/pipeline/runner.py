"""The pipeline runner: the tables of a pipeline read by one Spark stream, applied to their
routed targets.

One stream for all: every table whose changes take the Arrow path (a merge sink, no
transform: ``_arrow_path``) is read by the *pipeline's stream*, one streaming query with one
binlog reader and one assigner for all of them. Each micro-batch carries Arrow record
batches of any of its tables; ``_group_batch_fn`` splits it by table and writes the targets
at once, each recording its own batch id (``TableState.batch_base`` + the stream's batch id)
in the same commit as its rows. A table that joins later (created on the source, or taken
again after its target was emptied) makes the runner restart the query from its checkpoint
with the new list; the source plans the table's chunks inside it while the others stream
on (``SplitAssigner.reconcile``). Tables with a transform, or a test's ``on_batch`` hook,
keep a stream of their own, as does a table that goes on from its own binlog position after
a schema change (until schema changes travel in the stream: docs/design.md).

The loop, on the driver:

1. discover the matched tables; start the pipeline's stream and each own stream
   (``TableState`` in ``pipeline.json`` says which generation, from where, with which
   schema);
2. every second: look at every query once (progress per table for the display and
   ``live/``; a failed query is examined at once);
3. every ``discovery.interval``: re-discover; a new matching table joins (snapshot first), a
   dropped one leaves, a changed schema follows ``schema.change.behavior``.

Schema changes (docs/pipelines.md has the table of what each behavior does): the stream
reading the table is stopped; where the target stands is read from the sink (its last
applied batch id) and Spark's offset log; the rows between there and the DDL are applied with
the old schema (``read_gap``); the table goes on in a stream of its own right after the DDL
with the new schema, its rows conformed to the target (columns added to the target, dropped
ones kept as null, or new ones left out); the pipeline's stream restarts without it. A
change during the table's snapshot takes the table again (in the pipeline's stream).
"""

from __future__ import annotations

import logging
import os
import secrets
import signal
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import pyarrow as pa

from sparkcdc.core.schema import TableSchema
from sparkcdc.errors import BinlogUnavailable, ConfigError, SchemaError, SparkCDCError
from sparkcdc.pipeline import schema_change as sc
from sparkcdc.pipeline import targets
from sparkcdc.pipeline.checkpoint import Checkpoint, TableState, read_json, write_json
from sparkcdc.pipeline.column_evolution import evolve_target
from sparkcdc.pipeline.definition import PipelineDef
from sparkcdc.pipeline.routing import META, Shaper, shaper_for, target_of
from sparkcdc.spark import offset_view as ov

log = logging.getLogger("sparkcdc.pipeline")


class SchemaChangeStop(SparkCDCError):
    """schema.change.behavior is ``exception`` and a captured table changed."""


class PipelineFailed(SparkCDCError):
    """A table's stream failed for a reason other than a schema change."""


def _spark_type(json_schema: list) -> Any:
    from pyspark.sql.types import StructType

    return StructType.fromJson({"type": "struct", "fields": json_schema})


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
    arrow: bool = False  # micro-batches carry Arrow record batches (Runner._arrow_path)
    change_rows: dict = field(default_factory=dict)  # batch id -> change rows (arrow runs)
    rows_schema: Any = None  # the Arrow schema of its change rows (arrow runs)
    emit_lag: float | None = None  # seconds from its newest change's commit to its write
    active: bool = False  # its query was active at the last look (``_poll``)
    live: tuple = ()  # what ``live/`` last got, and when


class HandedToLoop(Exception):
    """Fails a micro-batch of the pipeline's stream whose change the loop must make
    (``Runner._defer``)."""


class Runner:
    """Runs a pipeline. ``run()`` blocks until stopped (``stop()``, Ctrl-C, SIGTERM) or, with
    ``until_caught_up``, until every table reached the binlog position of its start."""

    def __init__(self, defn: PipelineDef, spark=None, *, master: str | None = None,
                 until_caught_up: bool = False, display=None,
                 on_batch: Callable[[str, Any, int], None] | None = None):
        self.defn = defn
        self.settings = defn.pipeline
        self._spark = spark
        self._own_spark = spark is None
        self.master = master
        self.until_caught_up = until_caught_up
        self.display = display
        self.on_batch = on_batch
        self.ckpt = Checkpoint(defn.checkpoint_dir)
        self.runs: dict[str, TableRun] = {}
        self.states: dict[str, TableState] = {}
        self._stop = threading.Event()
        self._target_locks: dict[str, threading.Lock] = {}
        self._ids_used = 0
        self._discovery_failures = 0  # periodic table discovery, failures in a row
        self._flavor = "mariadb"
        self._config = None
        self._scan_from = None
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

    @property
    def spark(self):
        if self._spark is None:
            from sparkcdc.pipeline import cluster
            from sparkcdc.pipeline.session import build_session

            self._spark = build_session(self.settings, self.master)
            if not cluster.is_local(self.master):
                try:
                    cluster.probe_executors(self._spark)
                except BaseException:
                    self.close()
                    raise
        return self._spark

    def _source_config(self):
        from sparkcdc.mysql.options import SourceConfig

        if self._config is None:
            self._config = SourceConfig.parse(self.defn.source.options_for())
        return self._config

    def discover(self, fresh: bool = False) -> dict[str, TableSchema]:
        """The captured tables and their schemas. A table whose schema changes reach its
        target through the pipeline's stream (``_carried_by_stream``) keeps the schema the
        pipeline holds: only the list of tables and the new tables' columns are read
        (``fresh``: every table's columns)."""
        from sparkcdc.core.schema import TableId
        from sparkcdc.spark.source import discover_tables

        memo: dict = {}
        known = None if fresh else {
            TableId.parse(t): TableSchema.from_dict(st.schema) for t, st in self.states.items()
            if st.status == "active" and st.schema and self._carried_by_stream(st, memo)}
        tables, self._flavor = discover_tables(self._source_config(), known)
        return {str(t): s for t, s in tables.items()}

    def _server_ids(self) -> str:
        n = self.settings.parallelism + 1  # one id for the binlog window, the rest for chunks
        pool = self.defn.source.options.get("server-id")
        if pool:
            from sparkcdc.mysql.options import parse_server_ids

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
        from sparkcdc.sinks import sink_class

        return sink_class(self.defn.sink.type).kind

    def _app_id(self, table: str) -> str:
        return f"{self.settings.name}.{table}"

    # -- the loop --------------------------------------------------------------------------

    def run(self) -> int:
        import sparkcdc

        old_term = None
        lock = self._lock_checkpoint()
        if threading.current_thread() is threading.main_thread():
            old_term = signal.signal(signal.SIGTERM, lambda *_: self.stop())
        try:
            self.states = self.ckpt.load_tables()
            self.group_gen = self.ckpt.load_group()
            found = self.discover()
            self._check_purged()
            self._check_truncates(self._committed_floor())
            if self.until_caught_up and self._caught_up_already(found):
                log.info("every table is caught up at %s: nothing to do", self._scan_from)
                self.nothing_to_do = True
                return 0
            sparkcdc.register(self.spark)
            self._reconcile(found, starting=True)
            self._sync_group()
            self._save()
            last_discovery = time.monotonic()
            while not self._stop.is_set():
                self._poll()
                if self.until_caught_up and self._all_ended():
                    self._poll()  # the last batches' progress; a failure examined
                    if self._all_ended():  # (not restarted by that examination)
                        break
                if not self.runs and self.until_caught_up:
                    break
                if (not self.until_caught_up and
                        time.monotonic() - last_discovery >= self.settings.discovery_interval):
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
                if old_term is not None:
                    signal.signal(signal.SIGTERM, old_term)
        return 0

    def _all_ended(self) -> bool:
        return bool(self.runs) and all(r.query is not None and not r.query.isActive
                                       for r in self.runs.values())

    def _caught_up_already(self, found: dict[str, TableSchema]) -> bool:
        """A run ``--until-caught-up`` with nothing to do need not start Spark (seconds of
        JVM and session): every captured table is known with its schema, its stream
        committed every batch it planned, its snapshot is done, and the server's binlog
        has not moved since that batch's end. Any doubt means there is work."""
        now = self._scan_from
        if now is None or set(found) != {t for t, st in self.states.items()
                                         if st.status == "active"}:
            return False
        for table, st in self.states.items():
            if st.status != "active":
                continue
            if st.gap or sc.diff(TableSchema.from_dict(st.schema), found[table]):
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

    def _rediscover(self) -> None:
        """The periodic look for new, changed and truncated tables. The server being away
        for a moment (a cut connection, a restart) must not stop streams that ride it out
        themselves: a retryable failure is logged and the look is taken again at the next
        interval; only ``_MAX_IN_A_ROW`` failures in a row stop the pipeline."""
        try:
            self._reconcile(self.discover())
            self._check_truncates(self._scan_from)
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

    def close(self) -> None:
        """Stop the SparkSession if this runner created it."""
        if self._own_spark and self._spark is not None:
            self._spark.stop()
            self._spark = None

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
                if st.status != "active":
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
        for table, st in list(self.states.items()):
            if st.status == "active" and table not in found:
                self._renamed(st, found)
        for table, schema in found.items():
            st = self.states.get(table)
            if st is None or st.status == "dropped" and table not in self.runs:
                if st is not None:  # dropped and created again: a fresh start
                    st = TableState(table, st.target, st.generation + 1,
                                    batch_base=self._next_base(st), app_id=st.app_id)
                else:
                    st = TableState(table, target_of(self.defn, table), app_id=self._app_id(table))
                    if not starting:
                        log.info("new table %s: capturing it into %s", table, st.target)
                st.schema = schema.to_dict()
                st.status = "active"
                self.states[table] = st
                self._start(st, schema)  # saves the state before any stream starts
                continue
            if st.status == "failed":
                continue
            old = TableSchema.from_dict(st.schema)
            d = sc.diff(old, schema)
            if d and self._carried_by_stream(st):
                if table not in self.runs:
                    self._start(st, schema)
            elif d:
                self._schema_changed(st, old, schema, d)
            elif table not in self.runs:
                if st.gap:
                    self._apply_gap(st)
                self._start(st, schema)
        for table, st in self.states.items():
            if table not in found and st.status == "active":
                self._dropped(st)

    def _carried_by_stream(self, st: TableState, memo: dict | None = None) -> bool:
        """Whether the table's schema changes and TRUNCATEs reach its target through the
        pipeline's stream (``stream_schema.py``): it is in it, past its snapshot (a change
        during the snapshot takes it again), and no change of it waits for the loop.
        ``memo`` keeps the stream's last committed offset for a look over many tables."""
        if st.group is None or st.table in self._deferred:
            return False
        memo = {} if memo is None else memo
        if st.group not in memo:
            b = self.ckpt.last_committed(st)
            memo[st.group] = self.ckpt.offset(st, b) if b is not None else None
        off = memo[st.group]
        return off is not None and ov.table_phase(off, st.table) == "done"

    # -- TRUNCATE TABLE (no row events: found in the binlog's statements) ------------------

    def _committed_floor(self):
        """The smallest binlog position any active table has committed (None: none has)."""
        floor = None
        for table, st in self.states.items():
            if st.status != "active":
                continue
            b = self.ckpt.last_committed(st)
            off = self.ckpt.offset(st, b) if b is not None else None
            if off is None:
                continue
            pos = ov.position(off)
            floor = pos if floor is None or pos < floor else floor
        return floor

    def _check_truncates(self, after) -> None:
        from sparkcdc.mysql.connection import retry_lost
        from sparkcdc.mysql.offsets import current_offset

        conn = self._source_config().connection

        def read_now():
            with conn.connect() as c:
                return current_offset(c)

        now = retry_lost(conn, "reading the binlog position", read_now)
        if after is not None:
            # the pipeline's stream carries the TRUNCATEs of its tables itself
            memo: dict = {}
            active = {t for t, st in self.states.items()
                      if st.status == "active" and not self._carried_by_stream(st, memo)}
            # find_truncates retries a lost connection itself (schema_change._scan)
            found = sc.find_truncates(conn, after, active, self._flavor) if active else []
            for table, ddl in found:
                st = self.states[table]
                if st.ddl_seen and not (_offset_of(st.ddl_seen) < ddl.end):
                    continue
                self._truncated(st, ddl)
        self._scan_from = now

    def _truncated(self, st: TableState, ddl) -> None:
        behavior = self.settings.schema_change_behavior
        what = f"table {st.table} was truncated ({ddl.statement.strip()[:120]})"
        if behavior == "exception":
            raise SchemaChangeStop(what, fix="schema.change.behavior is 'exception': choose "
                                             "evolve or try_evolve to empty the target too, "
                                             "or lenient or ignore to keep its rows")
        st.ddl_seen = ddl.end.to_dict()
        if behavior in ("lenient", "ignore"):
            log.warning("%s: the target keeps its rows (%s)", what, behavior)
            self._save()
            return
        log.warning("%s: emptying %s and taking the table again", what, st.target)
        if self._shared(st):
            raise SchemaError(f"{what}, and its target {st.target} is shared with other tables",
                              fix="use schema.change.behavior: lenient to keep the rows, or "
                                  "empty the target yourself and restart")
        run = self._stop_run(st)
        sink = self._sink_for(st)
        last = sink.last_batch_id()
        sink.empty()
        sink.close()
        st.group = None  # joins the pipeline's stream again as a table to take from the start
        st.generation += 1
        st.batch_base = (last + 1) if last is not None else st.batch_base
        st.start = {"mode": "initial"}
        st.note = f"{behavior}: truncated"
        self._save()
        if run is not None:
            self._start(st, run.schema)

    # -- binlog purged while the pipeline was stopped --------------------------------------

    def _resume_position(self, st: TableState):
        """The earliest binlog position the table's stream needs to go on: its last committed
        offset (Spark replays from there), else its planned first batch, else its start."""
        b = self.ckpt.last_committed(st)
        if b is None:
            b = 0 if self.ckpt.last_planned(st) is not None else None
        off = self.ckpt.offset(st, b) if b is not None else None
        if off is not None:
            return ov.position(off)
        if st.start.get("mode") == "specific-offset":
            return _offset_of(st.start["offset"])
        return None  # a snapshot not begun: nothing to resume

    def _check_purged(self) -> None:
        """Before anything starts: a table whose position is in a binlog file the server
        purged fails with one message (``binlog.purged.behavior: fail``) or is taken again
        (``resnapshot``): its target emptied and reloaded, the other tables untouched."""
        files = None
        for table, st in list(self.states.items()):
            if st.status != "active":
                continue
            pos = self._resume_position(st)
            if pos is None:
                continue
            if files is None:
                with self._source_config().connection.connect() as c, c.cursor() as cur:
                    cur.execute("SHOW BINARY LOGS")
                    files = [r[0] for r in cur.fetchall()]
            if pos.file in files:
                continue
            have = f"{files[0]} .. {files[-1]}" if files else "no binlog files"
            what = (f"table {table} resumes from binlog file {pos.file!r} (position {pos.pos}), "
                    f"which the server no longer has (it has {have}): it was purged while the "
                    f"pipeline was stopped, and the changes in it are lost")
            if self.settings.binlog_purged_behavior != "resnapshot":
                raise BinlogUnavailable(
                    what, fix="set pipeline option 'binlog.purged.behavior: resnapshot' to take "
                              "the affected tables again (their targets are emptied and "
                              "reloaded; the other tables resume), or start over with a new "
                              "checkpoint.location; keep binlogs longer than the pipeline is "
                              "ever stopped (binlog_expire_logs_seconds / expire_logs_days, "
                              "docs/operations.md)")
            if st.group is not None and st.group == self.group_gen:
                # the pipeline's stream cannot go on from a purged file: a new one starts,
                # and every table it read is taken again in it (each fails above first)
                self.group_gen += 1
            self._resnapshot(st, what)

    def _resnapshot(self, st: TableState, what: str) -> None:
        if self._shared(st):
            raise BinlogUnavailable(
                f"{what}; its target {st.target} is shared with other tables, so it cannot be "
                "emptied and reloaded alone",
                fix="empty the target and start over with a new checkpoint.location")
        log.warning("%s: emptying %s and taking the table again (binlog.purged.behavior: "
                    "resnapshot)", what, st.target)
        sink = self._sink_for(st)
        try:
            last = sink.last_batch_id()
            sink.empty()
        finally:
            sink.close()
        st.generation += 1  # a new Spark checkpoint: the stream starts with a snapshot
        st.batch_base = (last + 1) if last is not None else st.batch_base
        st.start = {"mode": "initial"}
        st.gap = None  # old-schema rows from the lost binlog cannot be read any more
        st.group = None  # (re)joins the pipeline's stream as a table to take from the start
        st.note = "resnapshot: binlog purged"
        self._save()

    def _next_base(self, st: TableState) -> int:
        last = self._sink_for(st).last_batch_id()
        return (last + 1) if last is not None else st.batch_base

    def _renamed(self, st: TableState, found: dict[str, TableSchema]) -> None:
        """A captured table gone from the source: if a RENAME TABLE took it to a name that
        ``tables`` matches and that routes to the same target, the table goes on under its
        new name from the RENAME on (the old name's rows before it applied first), without
        taking it again. Otherwise nothing happens here: the old name is dropped
        (``_dropped``) and the new name, if matched, is a new table."""
        behavior = self.settings.schema_change_behavior
        if behavior == "exception":
            return  # _dropped stops the pipeline
        sink, last, offset, snapshot_done = self._halt(st)
        try:
            if offset is not None:
                after = ov.position(offset)
            elif st.start.get("mode") == "specific-offset":
                after = _offset_of(st.start["offset"])
            else:
                after = self._scan_from
            found_rename = (sc.find_table_rename(self._source_config().connection, after,
                                                 st.table, self._flavor)
                            if after is not None else None)
            if found_rename is None:
                return
            new_name, ddl = found_rename
            st.note = f"renamed to {new_name}"
            other = self.states.get(new_name)
            if (new_name not in found or target_of(self.defn, new_name) != st.target
                    or (other is not None and other.status == "active")):
                log.warning("table %s was renamed to %s: %s", st.table, new_name,
                            "captured as a new table" if new_name in found
                            else "not matched by source.tables")
                return
            new_schema = found[new_name]
            old_schema = TableSchema.from_dict(st.schema)
            nst = TableState(new_name, st.target, app_id=self._app_id(new_name))
            if other is not None:  # the name was captured before: its next generation
                nst = TableState(new_name, st.target, other.generation + 1,
                                 batch_base=self._next_base(other), app_id=other.app_id)
            nst.columns = st.columns
            if snapshot_done and after < ddl.start:
                self._apply_gap(st, {
                    "from": after.to_dict(), "to": ddl.start.to_dict(), "schema": st.schema,
                    "batch": (last + 1) if last is not None else st.batch_base,
                    "assigner": offset["assigner"] if offset else None,
                    "generation": st.generation, "columns": st.columns}, save=False)
            d = sc.diff(old_schema, new_schema)
            if any((d.added, d.dropped, d.modified)):
                nst.columns = self._evolve_columns(nst, old_schema, new_schema, d, sink,
                                                   behavior)
            if snapshot_done:
                nst.start = {"mode": "specific-offset", "offset": ddl.end.to_dict()}
                how = "from the RENAME on"
            else:
                self._empty_for_retake(st, sink, last, f"table {st.table} renamed")
                how = "taken again (renamed during its snapshot)"
            nst.schema = new_schema.to_dict()
            nst.note = f"renamed from {st.table}"
            log.warning("table %s was renamed to %s: it goes on into %s, %s", st.table,
                        new_name, st.target, how)
            st.status = "dropped"
            st.group = None
            self.states[new_name] = nst
            self._save()
            self._start(nst, new_schema)
        finally:
            sink.close()

    def _dropped(self, st: TableState) -> None:
        if self.settings.schema_change_behavior == "exception":
            raise SchemaChangeStop(
                f"table {st.table} was dropped (or renamed) on the source",
                fix="schema.change.behavior is 'exception': restore the table, or choose "
                    "another behavior (the target is then kept as it is)")
        log.warning("table %s is gone from the source: its stream stops, target %s is kept",
                    st.table, st.target)
        self._stop_run(st)  # the pipeline's stream goes on without it
        st.group = None
        st.status = "dropped"
        st.note = "dropped on the source"
        self._save()

    # -- streams -----------------------------------------------------------------------------

    def _sink_for(self, st: TableState):
        return targets.create_sink(self.defn.sink.type, self.defn.sink.options, st.target,
                                   st.app_id)

    def _lock(self, target: str) -> threading.Lock:
        return self._target_locks.setdefault(target, threading.Lock())

    def _start(self, st: TableState, schema: TableSchema) -> None:
        """Capture the table: in the pipeline's stream when it can (``_joins_group``), else
        in a stream of its own."""
        shaper = shaper_for(self.defn, st.table)
        keys = shaper.keys(schema.primary_key)
        if not keys:
            raise ConfigError(
                f"table {st.table} has no primary key, so its target has no key to apply "
                "changes by",
                fix=f"add a transform for {st.table} with primary-keys: the columns that "
                    "identify a row (or add a primary key to the table)")
        rows_schema = self._arrow_path(st, schema, shaper)
        if rows_schema is not None and self._joins_group(st):
            self._join_group(st, schema, shaper, tuple(keys), rows_schema)
            return
        if st.group is not None:
            self._leave_group(st)
        extra = {"server-id": self._server_ids()}
        start = st.start
        if start["mode"] == "specific-offset":
            off = start["offset"]
            extra.update({"scan.startup.mode": "specific-offset",
                          "scan.startup.specific-offset.file": off["file"],
                          "scan.startup.specific-offset.pos": str(off["pos"]),
                          "scan.startup.specific-offset.skip-events": str(off.get("events", 0)),
                          "scan.startup.specific-offset.skip-rows": str(off.get("rows", 0))})
        elif start["mode"] == "initial":
            if st.generation > 0:
                extra["scan.startup.mode"] = "initial"
        extra.update(self._upsert_only())
        opts = self.defn.source.options_for(st.table, **extra)
        if rows_schema is not None:
            opts["arrow-batches"] = "true"
        df = self.spark.readStream.format("mysql-cdc").options(**opts).load()
        if rows_schema is not None:
            shaped, columns = df, rows_schema.names
        else:
            shaped = shaper.apply(df)
            data_cols = [f for f in shaped.schema.fields if f.name not in META]
            if st.columns is None:
                st.columns = [f.jsonValue() for f in data_cols]
            shaped = self._conform(st, shaped)
            columns = shaped.columns
        missing = [k for k in keys if k not in columns]
        if missing:
            raise ConfigError(f"key column(s) {missing} of {st.table} are not in its rows "
                              f"after the transform",
                              fix="keep the key in the projection, or set primary-keys in the "
                                  "table's transform")
        self._save()  # the table's state is on disk before its stream writes
        sink = self._sink_for(st)
        run = self._new_run(st, schema, sink, shaper, tuple(keys))
        fn = (self._batch_fn(run) if rows_schema is None
              else self._arrow_batch_fn(run, rows_schema))
        writer = (shaped.writeStream.foreachBatch(fn)
                  .option("checkpointLocation", str(self.ckpt.stream_dir(st)))
                  .queryName(f"{self.settings.name}:{st.table}:g{st.generation}"))
        run.query = self._trigger(writer).start()
        self.runs[st.table] = run
        log.info("stream %s g%d -> %s (%s)", st.table, st.generation, st.target,
                 start["mode"])

    def _upsert_only(self) -> dict[str, str]:
        if (self.on_batch is None and self._sink_kind() == "merge"
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

    # -- the pipeline's stream: every table that can, in one query -----------------------

    def _joins_group(self, st: TableState) -> bool:
        """A table is read by the pipeline's stream when its changes take the Arrow path and
        it is in it already, or it starts from its beginning (a new table, or one taken
        again). A table that goes on from a binlog position of its own (after a schema
        change, or from a checkpoint of a stream of its own) keeps its own stream."""
        if st.group is not None:
            return True
        return st.start.get("mode") == "initial" and self.ckpt.last_planned(st) is None

    def _leave_group(self, st: TableState) -> None:
        """A table of the pipeline's stream that can no longer take it (a transform added
        to the definition since, a sink of another kind) goes on in a stream of its own:
        from the end of its target's last batch when its snapshot was done there (the
        stream's later batches had no rows of it), else taken again from the start."""
        sink = self._sink_for(st)
        try:
            last = sink.last_batch_id()
            applied = last is not None and last >= st.batch_base
            off = self.ckpt.offset(st, last - st.batch_base) if applied else None
            if off is not None and ov.table_phase(off, st.table) == "done":
                st.start = {"mode": "specific-offset", "offset": ov.position(off).to_dict()}
            else:
                if last is not None:
                    self._empty_for_retake(st, sink, last, f"table {st.table} leaves the "
                                                           "pipeline's stream in its snapshot")
                st.start = {"mode": "initial"}
        finally:
            sink.close()
        log.warning("table %s leaves the pipeline's stream for a stream of its own (%s)",
                    st.table, st.start["mode"])
        st.group = None
        st.generation += 1
        st.batch_base = (last + 1) if last is not None else max(0, st.batch_base)
        self._group_dirty = True
        self._save()

    def _join_group(self, st: TableState, schema: TableSchema, shaper: Shaper,
                    keys: tuple[str, ...], rows_schema) -> None:
        sink = self._sink_for(st)
        if st.group != self.group_gen:
            # its target's batch ids go on after its last one: the stream's next batch, the
            # first that can carry its rows, maps to the next id of its target
            last = sink.last_batch_id()
            nxt = st.batch_base if last is None else max(last + 1, st.batch_base)
            planned = self.ckpt.group_last_planned(self.group_gen)
            st.batch_base = nxt - (planned + 1 if planned is not None else 0)
            st.group = self.group_gen  # saved before the stream starts (_sync_group)
        run = self._new_run(st, schema, sink, shaper, keys)
        run.arrow, run.rows_schema = True, rows_schema
        run.query = self.group_query
        self.runs[st.table] = run
        self._group_dirty = True

    def _sync_group(self) -> None:
        """Fit the pipeline's stream to its tables: the running query follows its members
        file (the source's ``scan.tables.file``, read before every batch), where a new
        table, or one taken again under a new generation, is planned and snapshotted while
        the others stream on (``SplitAssigner.reconcile``), and a table gone from it is
        forgotten. The query is (re)started only when none runs (the first look, after a
        failure) or its generation moved on (a purged binlog)."""
        if not self._group_dirty:
            return
        self._group_dirty = False
        q = self.group_query
        running = q is not None and q.isActive
        members = {t: r for t, r in self.runs.items() if r.state.group is not None}
        self._group_members = members
        if not members:
            if running:
                q.stop()
            self.group_query = None
            return
        self._save()  # every table's state is on disk before the stream reads it
        members_file = self.ckpt.group_members_path(self.group_gen)
        write_json(members_file, {
            "generations": {t: r.state.generation for t, r in sorted(members.items())},
            # as discovered (the source takes them instead of a discovery of its own)
            "schemas": {t: r.schema.to_dict() for t, r in sorted(members.items())}})
        if running and self._group_query_gen == self.group_gen:
            for r in members.values():
                r.query = q
            log.info("the pipeline's stream g%d goes on with %d table(s)", self.group_gen,
                     len(members))
            return
        if running:
            q.stop()
        if self._group_ids is None:
            self._group_ids = self._server_ids()
        opts = self.defn.source.options_for_tables(
            list(members), **{"server-id": self._group_ids, "arrow-batches": "true",
                              "scan.tables.file": str(members_file),
                              "scan.schema-changes.in-stream": "true",
                              **self._upsert_only()})
        df = self.spark.readStream.format("mysql-cdc").options(**opts).load()
        writer = (df.writeStream.foreachBatch(self._group_batch_fn())
                  .option("checkpointLocation", str(self.ckpt.group_dir(self.group_gen)))
                  .queryName(f"{self.settings.name}:tables:g{self.group_gen}"))
        self.group_query = self._trigger(writer).start()
        self._group_query_gen = self.group_gen
        for r in members.values():
            r.query = self.group_query
        log.info("the pipeline's stream g%d: %d table(s)", self.group_gen, len(members))

    def _group_batch_fn(self):
        """Each micro-batch of the pipeline's stream: split by table, each table's rows
        planned in Arrow and written to its target, the targets at once. Each target
        records its own batch id (its base + the stream's batch id) in the same commit as
        its rows, so a batch replayed after a crash skips the targets that have it. A
        table's schema changes and TRUNCATEs in the batch are applied between its rows
        (``_in_stream_changes``). Rows of a table from a batch planned before it was taken
        again (its generation in the batch's offset is an older one) are not written."""
        from concurrent.futures import ThreadPoolExecutor

        from sparkcdc.apply import ApplySpec
        from sparkcdc.spark.arrow_batches import decode_tables

        workers = max(1, min(8, 2 * self.settings.parallelism))

        def prepare(run: TableRun, changes, batch_id: int) -> tuple | None:
            """The table's rows of the batch shaped like its target (events applied,
            transform run), and whether a TRUNCATE empties the target first."""
            off = self.ckpt.offset(run.state, batch_id)
            if off is not None and int(ov.table_entry(off, run.state.table).get(
                    "generation", 0)) != run.state.generation:
                return None
            if changes.events or run.state.pending_ddl:
                return self._in_stream_changes(run, changes, batch_id)  # None: to the loop
            return self._transformed(run, changes.rows()), False

        def write(run: TableRun, changes, batch_id: int) -> None:
            planned = prepare(run, changes, batch_id)
            if planned is not None:
                rows, empty_first = planned
                self._write_rows(run, rows, batch_id, ApplySpec(keys=run.keys), empty_first)

        def fn(df, batch_id):
            batch_id = int(batch_id)
            members = self._group_members
            work = [(members[t], ch) for t, ch in decode_tables(df.toArrow()).items()
                    if t in members and t not in self._deferred]
            if self._writes_on_executors():
                ready = [(run, *p) for run, ch in work
                         if (p := prepare(run, ch, batch_id)) is not None]
                self._write_on_executors(ready, batch_id)
                return
            if len(work) <= 1:
                for run, ch in work:
                    write(run, ch, batch_id)
                return
            with ThreadPoolExecutor(min(workers, len(work))) as pool:
                for f in [pool.submit(write, run, ch, batch_id) for run, ch in work]:
                    f.result()  # the first failure fails the batch (Spark replays it)
        return fn

    def _writes_on_executors(self) -> bool:
        """``write.on``: ``auto`` writes from the executors when the master is a cluster
        (not ``local``), else from the driver (docs/benchmarks.md, Writers: on one machine
        the driver's writers are the fastest)."""
        how = self.settings.write_on
        if how != "auto":
            return how == "executors"
        return not str(self.spark.sparkContext.master).startswith("local")

    def _write_on_executors(self, ready: list, batch_id: int) -> None:
        """Spark tasks write the batch's targets (up to ``2 x parallelism`` tasks, each a
        share of the targets), each table's rows with its batch id in the same commit
        (``write_target``): the driver only planned them (events, transforms, the target's
        shape). A target's tables go to one task, one after another, so nothing writes a
        target twice at once."""
        from sparkcdc.pipeline.stream_schema import conform

        by_target: dict[str, list] = {}
        runs: dict[str, list] = {}
        for run, rows, empty_first in ready:
            if self.runs.get(run.state.table) is not run:
                continue
            rows = conform(rows, run.rows_schema)
            by_target.setdefault(run.state.target, []).append(
                (run.state.app_id, _ipc(rows), run.state.batch_base + batch_id,
                 tuple(run.keys), empty_first))
            runs.setdefault(run.state.target, []).append((run, rows))
        if not by_target:
            return
        sink_type, options = self.defn.sink.type, dict(self.defn.sink.options)
        jobs = sorted(by_target.items())
        tasks = max(1, min(len(jobs), 2 * self.settings.parallelism))  # a task: some targets
        done = (self.spark.sparkContext.parallelize(jobs, tasks)
                .map(lambda job: write_target(sink_type, options, *job)).collect())
        where = sorted({w for _t, w in done})
        log.info("batch %d: %d target(s) written on the executors (%s)", batch_id, len(done),
                 ", ".join(where))
        for target, _where in done:
            for run, rows in runs[target]:
                run.change_rows[batch_id] = rows.num_rows
                _note_emit_lag(run, rows)

    def _in_stream_changes(self, run: TableRun, changes, batch_id: int):
        """A table's events in a micro-batch of the pipeline's stream, applied in binlog
        order (pipeline/stream_schema.py): its rows shaped like the target afterwards and
        whether a TRUNCATE empties the target first; None when the change is one the loop
        must make (a new key, a change during the snapshot, the behavior ``exception``)."""
        from sparkcdc.core.records import DDL, TRUNCATE
        from sparkcdc.pipeline.stream_schema import after_seq, conform

        st = run.state
        behavior = self.settings.schema_change_behavior
        statements = list(st.pending_ddl or [])
        formerly: dict[str, list[str]] = {}
        cut = None
        for ev in sorted(changes.events, key=lambda e: int(e["seq"])):
            if ev["kind"] == DDL:
                statements.append(ev["statement"])
            elif ev["kind"] == TRUNCATE:
                what = f"table {st.table} was truncated ({ev['statement'].strip()[:120]})"
                if behavior == "exception" or (behavior in ("evolve", "try_evolve")
                                               and self._shared(st)):
                    return self._defer(st, what, truncate=True)
                if behavior in ("lenient", "ignore"):
                    log.warning("%s: the target keeps its rows (%s)", what, behavior)
                    continue
                log.warning("%s: emptying %s; the rows after it follow", what, st.target)
                cut, st.note = int(ev["seq"]), f"{behavior}: truncated"
            else:
                new = TableSchema.from_dict(ev["schema"])
                if not self._evolve_in_stream(run, new, statements, formerly, batch_id):
                    return self._defer(st, f"table {st.table} changed")
                statements = []
        if statements:
            now = self._settled_schema(st, batch_id)
            if now is not None:
                if not self._evolve_in_stream(run, now, statements, formerly, batch_id):
                    return self._defer(st, f"table {st.table} changed")
                statements = []
        if (statements or None) != st.pending_ddl:
            st.pending_ddl = statements or None
            self._save()
        parts = [conform(self._transformed(run, p), run.rows_schema, formerly)
                 for p in changes.parts]
        rows = (pa.concat_tables(parts) if parts else run.rows_schema.empty_table())
        if cut is not None:
            rows = after_seq(rows, cut)
        return rows, cut is not None

    def _evolve_in_stream(self, run: TableRun, new: TableSchema, statements: list[str],
                          formerly: dict, batch_id: int) -> bool:
        """The target changed for the table's new schema, as ``schema.change.behavior``
        says; False when the loop must do it (``_schema_changed``)."""
        from sparkcdc.pipeline.stream_schema import add_renames, target_arrow_schema
        from sparkcdc.spark.rows import META_FIELDS

        st = run.state
        old = TableSchema.from_dict(st.schema)
        d = sc.diff(old, new)
        if not d:
            return True
        d = d.with_renames(statements)
        behavior = self.settings.schema_change_behavior
        if d.key_changed or behavior == "exception" or not self._streaming_at(st, batch_id):
            return False
        log.warning("table %s changed: %s (%s)", st.table, d.describe(), behavior)
        with self._lock(st.target):
            if self.runs.get(st.table) is not run:
                return True  # stopped meanwhile: its rows are not written either
            st.columns = self._evolve_columns(st, old, new, d, run.sink, behavior)
        add_renames(formerly, d.renamed)
        st.schema, run.schema = new.to_dict(), new
        st.note = f"{behavior}: {d.describe()}"
        large = self.spark.conf.get("spark.sql.execution.arrow.useLargeVarTypes",
                                    "false") == "true"
        run.rows_schema = target_arrow_schema(st.columns, pa.schema(META_FIELDS), large)
        self._save()
        return True

    def _streaming_at(self, st: TableState, batch_id: int) -> bool:
        """Whether the table's snapshot was done when the stream's batch began."""
        off = self.ckpt.offset(st, batch_id - 1) if batch_id > 0 else None
        return off is not None and ov.table_phase(off, st.table) == "done"

    def _settled_schema(self, st: TableState, batch_id: int) -> TableSchema | None:
        """The table's schema at the end of the batch, for DDL that no row of the batch
        followed: information_schema's, when the binlog has not moved past the batch's end
        while it was read (so no later DDL is in it); None otherwise (the statements wait
        for the table's next rows, which carry their schema)."""
        from sparkcdc.core.schema import TableId
        from sparkcdc.mysql.binlog import load_table_schema
        from sparkcdc.mysql.offsets import current_offset

        off = self.ckpt.offset(st, batch_id)
        if off is None:
            return None
        end = ov.position(off)
        conn = self._source_config().connection
        try:
            with conn.connect() as c:
                before = current_offset(c)
                schema = load_table_schema(conn, TableId.parse(st.table))
                after = current_offset(c)
        except SparkCDCError:
            return None  # gone (renamed or dropped: discovery sees it), or the server away
        if (before.file, before.pos) == (after.file, after.pos) == (end.file, end.pos):
            return schema
        return None

    def _defer(self, st: TableState, what: str, truncate: bool = False) -> None:
        """Hand the table's change to the loop: the micro-batch fails (``HandedToLoop``),
        so Spark commits none of it; the loop (``_examine_failure``) has
        ``_schema_changed`` deal with the change (or stops, for ``exception`` and a
        TRUNCATE it must not apply), then restarts the stream, which replays the batch.
        Targets that wrote the batch already skip it then, by its batch id."""
        behavior = self.settings.schema_change_behavior

        def later() -> None:
            if truncate and behavior == "exception":
                raise SchemaChangeStop(what, fix="schema.change.behavior is 'exception': "
                                                 "choose evolve or try_evolve to empty the "
                                                 "target too, or lenient or ignore to keep "
                                                 "its rows")
            if truncate:
                raise SchemaError(f"{what}, and its target {st.target} is shared with "
                                  "other tables",
                                  fix="use schema.change.behavior: lenient to keep the rows, "
                                      "or empty the target yourself and restart")
            found = self.discover(fresh=True)
            if st.table not in found:
                self._reconcile(found)
                return
            old = TableSchema.from_dict(st.schema)
            self._schema_changed(st, old, found[st.table], sc.diff(old, found[st.table]))

        log.info("%s: the pipeline hands the change to its loop", what)
        self._deferred[st.table] = later
        raise HandedToLoop(what)

    def _run_deferred(self) -> bool:
        """Make the changes micro-batches handed to the loop; whether there were any."""
        if not self._deferred:
            return False
        for table in list(self._deferred):
            later = self._deferred.pop(table)
            later()
            self._save()
        return True

    def _arrow_path(self, st: TableState, schema: TableSchema, shaper: Shaper):
        """The Arrow schema of the target's rows when the table's micro-batches can skip
        Spark's rows (``arrow-batches``: decoded and planned on the driver, see
        spark/arrow_batches.py), else None. That is the case for a merge sink with the
        default apply: everything the Spark plan would do to the rows is then the plan
        ``reduce_changes`` does in Arrow; shaping them like the target (a column kept for a
        dropped one, a type kept) is ``stream_schema.conform``, and a transform runs on
        each batch's rows of the table (``_transformed``)."""
        from pyspark.sql.pandas.types import from_arrow_schema

        from sparkcdc.mysql.types import arrow_schema
        from sparkcdc.pipeline.stream_schema import target_arrow_schema
        from sparkcdc.spark.rows import META_FIELDS, output_schema

        if self.on_batch is not None or self._sink_kind() != "merge":
            return None
        source = output_schema(arrow_schema(schema))
        spark_schema = from_arrow_schema(source, prefer_timestamp_ntz=True)
        if shaper.transform is not None:  # the transform's own columns (checked here once)
            spark_schema = shaper.apply(self.spark.createDataFrame([], spark_schema)).schema
        data = [f.jsonValue() for f in spark_schema.fields if f.name not in META]
        if st.columns is None:
            st.columns = data
        keys = shaper.keys(schema.primary_key)
        missing = [k for k in keys if k not in {c["name"] for c in data}]
        if missing:
            raise ConfigError(f"key column(s) {missing} of {st.table} are not in its rows "
                              f"after the transform",
                              fix="keep the key in the projection, or set primary-keys in the "
                                  "table's transform")
        large = self.spark.conf.get("spark.sql.execution.arrow.useLargeVarTypes",
                                    "false") == "true"
        return target_arrow_schema(st.columns, pa.schema(META_FIELDS), large)

    def _transformed(self, run: TableRun, rows):
        """A table's change rows through its transform (projection, filter: Spark SQL, so
        the same expressions as a stream of its own), on the driver: a local DataFrame of
        the batch's rows, planned and collected back as Arrow."""
        if run.shaper.transform is None or not rows.num_rows:
            return rows
        from sparkcdc.spark.arrow_batches import spark_arrow_schema

        from pyspark.sql.pandas.types import from_arrow_schema

        rows = rows.cast(spark_arrow_schema(_plain_schema(rows.schema), self.spark))
        df = self.spark.createDataFrame(  # naive timestamps stay DATETIME (no time zone)
            rows, schema=from_arrow_schema(rows.schema, prefer_timestamp_ntz=True))
        return run.shaper.apply(df).toArrow()

    def _arrow_batch_fn(self, run: TableRun, rows_schema):
        from sparkcdc.apply import ApplySpec
        from sparkcdc.pipeline.stream_schema import conform
        from sparkcdc.spark.arrow_batches import decode

        spec = ApplySpec(keys=run.keys)
        run.arrow, run.rows_schema = True, rows_schema

        def fn(df, batch_id):
            batch = df.toArrow()
            rows = (conform(self._transformed(run, decode(batch)), rows_schema)
                    if batch.num_rows else rows_schema.empty_table())
            self._write_rows(run, rows, int(batch_id), spec)
        return fn

    def _write_rows(self, run: TableRun, rows, batch_id: int, spec,
                    empty_first: bool = False) -> None:
        """A table's change rows of one micro-batch (Arrow) shaped like its target, planned
        and written to it under the target's lock with the target's batch id; what the
        loop and the metrics show of it noted. ``empty_first``: a TRUNCATE came before
        them, the target is emptied first (unless it has the batch already)."""
        from sparkcdc.apply import apply_arrow
        from sparkcdc.pipeline.stream_schema import conform

        rows = conform(rows, run.rows_schema)
        target_batch = run.state.batch_base + batch_id
        with self._lock(run.state.target):
            if self.runs.get(run.state.table) is not run:
                return  # stopped meanwhile (dropped, taken again, left the stream)
            if empty_first:
                last = run.sink.last_batch_id()
                if last is not None and last >= target_batch:
                    return
                run.sink.empty()
            apply_arrow(run.sink, rows, target_batch, spec)
        run.change_rows[batch_id] = rows.num_rows
        _note_emit_lag(run, rows)

    def _conform(self, st: TableState, df):
        """The rows shaped like the target: columns the target has but the table no longer
        has are null; new columns are kept or left out (``st.columns`` is the target's)."""
        from pyspark.sql import functions as F

        want = _spark_type(st.columns)
        have = {f.name: f.dataType for f in df.schema.fields}
        cols = []
        for f in want.fields:
            if f.name in have:
                c = F.col(f"`{f.name}`")
                cols.append(c if have[f.name] == f.dataType else c.cast(f.dataType).alias(f.name))
            else:
                cols.append(F.lit(None).cast(f.dataType).alias(f.name))
        return df.select(*cols, *[F.col(m) for m in META])

    def _batch_fn(self, run: TableRun):
        from sparkcdc.apply import apply_changes

        apply = apply_changes(run.sink, keys=list(run.keys))
        lock = self._lock(run.state.target)
        base = run.state.batch_base
        hook = self.on_batch
        table = run.state.table

        def fn(df, batch_id):
            if hook is not None:
                df = df.persist()
            try:
                with lock:
                    apply.apply(df, base + int(batch_id))
                if hook is not None:
                    hook(table, df, int(batch_id))
            finally:
                if hook is not None:
                    df.unpersist()
        return fn

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

    # -- schema changes --------------------------------------------------------------------

    def _schema_changed(self, st: TableState, old: TableSchema, new: TableSchema,
                        d: sc.Diff) -> None:
        behavior = self.settings.schema_change_behavior
        what = f"table {st.table} changed: {d.describe()}"
        if behavior == "exception":
            raise SchemaChangeStop(what, fix="schema.change.behavior is 'exception': revert the "
                                             "change, or choose evolve, try_evolve, lenient or "
                                             "ignore and run again")
        sink, last, offset, snapshot_done = self._halt(st)
        conn = self._source_config().connection
        retake = not snapshot_done
        new_base = (last + 1) if last is not None else st.batch_base
        gap, resume = None, None
        if snapshot_done:
            after = (ov.position(offset) if offset is not None
                     else _offset_of(st.start["offset"]))
            ddls = sc.find_ddls(conn, after, new.table_id.database, new.table_id.table,
                                self._flavor)
            if ddls:
                # the schema as of now: a DDL after the discovery is in ``ddls`` too
                new = self.discover(fresh=True).get(st.table, new)
                d = sc.diff(old, new).with_renames([x.statement for x in ddls])
                what = f"table {st.table} changed: {d.describe()}"
            if any(x.rows_before for x in ddls):
                # rows written between two DDLs have a schema that is neither the old one
                # nor the current one: take the table again rather than guess it
                log.warning("%s: %d DDLs with rows between them; taking the table again",
                            st.table, len(ddls))
                retake = True
            else:
                resume = after
                if ddls:
                    first, final = ddls[0], ddls[-1]
                    if after < first.start:
                        gap = {"from": after.to_dict(), "to": first.start.to_dict(),
                               "schema": st.schema, "batch": new_base,
                               "assigner": offset["assigner"] if offset else None,
                               "generation": st.generation, "columns": st.columns}
                        new_base += 1
                    resume = max(after, final.end)
                    for x in ddls:
                        log.info("%s at %s: %s", st.table, x.start, x.statement[:200])
        log.warning("%s (%s)", what, behavior)
        if gap is not None:
            # the old schema's rows first, into the target as it still is. Nothing is saved
            # before the target changed: a run stopped in between finds the change again
            # (the gap batch is idempotent, each target change too; with the gap applied but
            # the state not saved, the table is taken again)
            self._apply_gap(st, gap, save=False)
        st.columns = self._evolve_columns(st, old, new, d, sink, behavior)
        if retake:
            self._empty_for_retake(st, sink, last, what)
            st.start = {"mode": "initial"}
        else:
            st.start = {"mode": "specific-offset", "offset": resume.to_dict()}
        sink.close()
        st.group = None  # a retake joins the pipeline's stream again; a resume has its own
        st.generation += 1
        st.batch_base = new_base
        st.schema = new.to_dict()
        st.note = f"{behavior}: {d.describe()}" + (" (taken again)" if retake else "")
        self._save()
        self._start(st, new)

    def _halt(self, st: TableState):
        """Stop the table's stream; the target's sink, its last batch id, the source offset
        that batch ended at (None: nothing applied in this generation) and whether the
        table's snapshot was done by then."""
        self._stop_run(st)
        sink = self._sink_for(st)
        last = sink.last_batch_id()
        applied = last is not None and last >= st.batch_base
        offset = self.ckpt.offset(st, last - st.batch_base) if applied else None
        snapshot_done = (offset is not None and ov.table_phase(offset, st.table) == "done") or (
            not applied and st.start["mode"] == "specific-offset")
        return sink, last, offset, snapshot_done

    def _stop_run(self, st: TableState) -> TableRun | None:
        """Stop what writes the table's target: its own stream, or the pipeline's stream
        (restarted without or with it at the next look, ``_sync_group``)."""
        run = self.runs.get(st.table)
        if run is None:
            return None
        if st.group is not None and run.query is self.group_query:
            # the pipeline's stream goes on without it: a write of it in flight finishes
            # first (under the target's lock), the next ones find it gone
            with self._lock(st.target):
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

    def _empty_for_retake(self, st: TableState, sink, last, what: str) -> None:
        if last is None:
            return
        if self._shared(st):
            raise SchemaError(
                f"{what}, and the table must be taken again (a change during its snapshot, "
                f"or several changes with rows between them), but its target {st.target} "
                "is shared with other tables",
                fix="empty the target, then start the pipeline again with a new checkpoint "
                    "location")
        sink.empty()

    def _shared(self, st: TableState) -> bool:
        return any(o.target == st.target and o.table != st.table and o.status == "active"
                   for o in self.states.values())

    def _evolve_columns(self, st: TableState, old: TableSchema, new: TableSchema,
                        d: sc.Diff, sink, behavior: str) -> list:
        """Change the target as ``behavior`` says; the target's columns afterwards
        (``column_evolution.evolve_target``)."""
        transformed = shaper_for(self.defn, st.table).transform is not None
        return evolve_target(st.table, st.target, st.columns, new, d, sink, behavior,
                             transformed)

    def _apply_gap(self, st: TableState, gap: dict | None = None, save: bool = True) -> None:
        """Apply the old schema's rows between the last applied batch and the DDL, as one
        more batch of the old generation (idempotent through the sink's batch id)."""
        from pyspark.sql.pandas.types import from_arrow_schema

        from sparkcdc.apply import apply_changes

        gap = gap or st.gap
        old = TableSchema.from_dict(gap["schema"])
        sink = self._sink_for(st)
        last = sink.last_batch_id()
        if last is None or last < gap["batch"]:
            assigner = gap["assigner"] or _done_assigner(old)
            rows = sc.read_gap(self._source_config(), self._flavor, old,
                               _offset_of(gap["from"]), _offset_of(gap["to"]), assigner)
            log.info("%s: %d change rows before the DDL, applied as batch %d", st.table,
                     rows.num_rows, gap["batch"])
            df = self.spark.createDataFrame(rows, schema=from_arrow_schema(
                rows.schema, prefer_timestamp_ntz=True))
            shaper = shaper_for(self.defn, st.table)
            keys = shaper.keys(old.primary_key)
            saved = st.columns
            st.columns = gap["columns"] or saved
            shaped = self._conform(st, shaper.apply(df))
            st.columns = saved
            with self._lock(st.target):
                apply_changes(shaped, gap["batch"], sink, keys=list(keys))
        sink.close()
        st.gap = None
        if save:
            self._save()


def write_target(sink_type: str, options: dict, target: str, items: list) -> tuple[str, str]:
    """In a Spark task: write one target's tables of a batch, each item ``(app id, rows as
    Arrow IPC, batch id, keys, empty first)`` with its batch id in the same commit (a
    target that has the batch already skips it, as on the driver). Returns the target and
    where it ran (the task's working directory: the executor's)."""
    from sparkcdc.apply import ApplySpec, apply_arrow
    from sparkcdc.pipeline import targets as _targets

    for app_id, ipc, batch, keys, empty_first in items:
        rows = pa.ipc.open_stream(ipc).read_all()
        with _targets.create_sink(sink_type, options, target, app_id) as sink:
            last = sink.last_batch_id()
            if last is not None and last >= batch:
                continue
            if empty_first:
                sink.empty()
            apply_arrow(sink, rows, batch, ApplySpec(keys=keys))
    return target, os.getcwd()


def _ipc(rows) -> bytes:
    sink = pa.BufferOutputStream()
    with pa.ipc.new_stream(sink, rows.schema) as w:
        w.write_table(rows)
    return sink.getvalue().to_pybytes()


def _plain_schema(schema):
    """An Arrow schema as the source builds it, for ``spark_arrow_schema`` (no metadata)."""
    return schema.remove_metadata() if schema.metadata else schema


def _offset_of(d: dict):
    from sparkcdc.core.offsets import BinlogOffset

    return BinlogOffset.from_dict(d)


def _done_assigner(schema: TableSchema) -> dict:
    from sparkcdc.core.assigner import SplitAssigner

    return SplitAssigner.streaming_only([schema.table_id]).to_dict()


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


def _note_emit_lag(run: TableRun, rows) -> None:
    """The table's emit lag after a write: now minus the commit time of the newest change
    written (snapshot rows carry none; the binlog's commit times have 1 s resolution)."""
    import pyarrow.compute as pc

    if rows.num_rows and "_op_ts" in rows.column_names:
        newest = pc.max(rows["_op_ts"])
        if newest.is_valid:
            run.emit_lag = max(0.0, time.time() - newest.value / 1e6)


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
