"""A table's prepared rows of one micro-batch into its target(s): where the micro-batch's
writes happen (``TargetWriter``), from the driver or from Spark tasks (``write_target``).
Each target records its batch id (the table's ``batch_base`` + the stream's batch id) in
the same commit as its rows, so a batch replayed after a crash is skipped by the targets
that have it."""

from __future__ import annotations

import json
import logging
import os
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import pyarrow as pa

from sparkcdc.apply import DEL_MARK, TRUNC_MARK, apply_arrow, reduce_changes
from sparkcdc.pipeline.definition import targets
from sparkcdc.pipeline.run import task_changes, task_frames
from sparkcdc.pipeline.run.life import RunLife
from sparkcdc.pipeline.run.schema.in_stream import conform
from sparkcdc.pipeline.run.shapes import Shapes
from sparkcdc.pipeline.run.state import RunState
from sparkcdc.pipeline.run.table_run import TableRun, note_emit_lag
from sparkcdc.pipeline.run.task_changes import ChangePlan, SliceJob, SliceOutcome
from sparkcdc.pipeline.run.task_files import TaskOutput
from sparkcdc.sinks import SinkKind
from sparkcdc.sinks.base import KeyRange
from sparkcdc.spark.arrow_batches import from_ipc, to_ipc

log = logging.getLogger("sparkcdc.pipeline")

# write tasks of a batch's changes per core (task_changes.task_count): one wave of tasks,
# a large table's slices (as many as the cores) each in a task of its own, and a thousand
# small tables' slices not paying a task each
WRITE_TASKS_PER_CORE = 1
# key slices a core for a batch of at least LARGE_WINDOW bytes of binlog (``plan_slices``)
SLICES_PER_CORE_LARGE = 3
LARGE_WINDOW = 8 * 1024**2


@dataclass
class Prepared:
    """A table's rows of a micro-batch, shaped like its target (events applied, transform
    run); ``empty_first``: a TRUNCATE came before them, the target is emptied first;
    ``replaces``: the ranges of its chunks read again in the batch, whose other rows go
    (``ChangeSet.replaces``, ``run/replaces.py``)."""

    run: TableRun
    rows: pa.Table
    empty_first: bool = False
    replaces: tuple[KeyRange, ...] = ()


class TargetWriter:
    """Writes prepared rows to their targets. ``on_batch(table, rows as a Spark DataFrame,
    the target's batch id)`` is told of every batch written (tests and callers watch with
    it)."""

    def __init__(self, state: RunState, life: RunLife, shapes: Shapes,
                 on_batch: Callable[[str, Any, int], None] | None):
        self.state = state
        self.life = life
        self.shapes = shapes
        self.on_batch = on_batch
        self._stored: dict[str, tuple[pa.Schema, Any, pa.Schema]] = {}  # _stored_schema's

    def write(self, p: Prepared, batch_id: int) -> None:
        """One table's rows, from the driver: planned and written to its target(s) under
        the targets' lock with the target's batch id; what the loop and the metrics show
        of it noted."""
        run = p.run
        rows = conform(p.rows, run.rows_schema)
        target_batch = run.state.batch_base + batch_id
        df = None
        with self.state.locks(run.state):
            if not self.state.running(run):
                return  # stopped meanwhile (dropped, taken again, left the stream)
            if run.sink.capabilities.kind is SinkKind.CHANGELOG:  # every change row, appended by Spark's writer
                if p.empty_first:  # a truncate event (kafka), unless a replay has the batch
                    for sink in targets.each_sink(run.sink):  # (files: refused, with the fix)
                        last = sink.last_batch_id()
                        if last is None or last < target_batch:
                            sink.empty()
                marks = [c for c in (DEL_MARK, TRUNC_MARK) if c in rows.column_names]
                changes = rows.drop_columns(marks)
                if run.sink.capabilities.takes_arrow:  # written from the driver's Arrow rows
                    run.sink.write_changelog(changes, target_batch, run.keys)
                else:
                    df = self.shapes.local_frame(changes)
                    run.sink.write_changelog(df, target_batch, run.keys)
            else:
                spec = run.shaper.spec(run.keys)
                for sink in targets.each_sink(run.sink):  # each target skips what it has
                    apply_arrow(sink, rows, target_batch, spec, p.empty_first, p.replaces)
        self._written(run, rows, batch_id, df)

    def write_on_executors(self, ready: list[Prepared], batch_id: int) -> None:
        """Spark tasks write the batch's targets (up to ``2 x parallelism`` tasks, each a
        share of the targets), each table's rows with its batch id in the same commit
        (``write_target``): the driver only planned them (events, transforms, the target's
        shape). A target's tables go to one task, one after another, so nothing writes a
        target twice at once."""
        state = self.state
        by_target: dict[str, list] = {}
        runs: dict[str, list] = {}
        for p in ready:
            run = p.run
            if not state.running(run):
                continue
            rows = conform(p.rows, run.rows_schema)
            ipc = to_ipc(rows).to_pybytes()
            for target in state.targets(run.state):  # each target of a fanned-out table
                by_target.setdefault(target, []).append(
                    (run.state.app_id, ipc, run.state.batch_base + batch_id,
                     run.shaper.spec(run.keys), p.empty_first,
                     state.creation(run.state.table), p.replaces))
            runs.setdefault(run.state.target, []).append((run, rows))
        if not by_target:
            return
        sink_type, options = state.defn.sink.type, dict(state.defn.sink.options)
        jobs = sorted(by_target.items())
        tasks = max(1, min(len(jobs), 2 * state.settings.parallelism))  # a task: some targets
        done = (self.life.spark.sparkContext.parallelize(jobs, tasks)
                .map(lambda job: write_target(sink_type, options, *job)).collect())
        where = sorted({w for _t, w in done})
        log.info("batch %d: %d target(s) written on the executors (%s)", batch_id, len(done),
                 ", ".join(where))
        for target, _where in done:
            for run, rows in runs.get(target, ()):
                self._written(run, rows, batch_id)

    def ready_for_files(self, tables: list[str]) -> None:
        """Each target of ``tables`` made, if not there yet, before tasks write files into
        it (``Sink.ready_for_files``), once per running table."""
        for table in tables:
            run = self.state.members[table]
            if run.ready_for_files:
                continue
            with self.state.locks(run.state):
                for sink in targets.each_sink(run.sink):
                    sink.ready_for_files(self._stored_schema(run))
            run.ready_for_files = True

    def commit_files(self, out: TaskOutput, batch_id: int, rest: set[str],
                     elsewhere: set[str] | None = None) -> None:
        """The files the tasks wrote, one commit per target, before anything else of the
        batch is written; with the batch id as applied when nothing else of the table is in
        the batch (``rest``: the tables with rows or events handed back). Not those of the
        tables ``elsewhere`` names: committed with their changes (``commit_changes``), or
        dropped (their batch takes the driver's path)."""
        state = self.state
        if not out.files:
            return  # (no table of the batch had its rows written as files)
        written: dict[str, int] = {}
        for (table, target), files in sorted(out.files.items()):
            run = state.members.get(table)
            if run is None or (elsewhere is not None and table in elsewhere):
                continue
            with state.locks(run.state):
                if not state.running(run):
                    continue
                sinks = dict(zip(state.targets(run.state), targets.each_sink(run.sink)))
                sinks[target].commit_files(files, self._stored_schema(run),
                                           run.state.batch_base + batch_id,
                                           final=table not in rest)
            written[table] = max(written.get(table, 0), sum(int(f["rows"]) for f in files))
        for table, n in written.items():
            run = state.members[table]
            run.change_rows[batch_id] = run.change_rows.get(batch_id, 0) + n
            if not run.published:
                run.published = run.sink.publish(self.life.spark)
        if written:
            log.info("batch %d: %d row(s) written by the tasks as %d file(s), %d bytes to "
                     "the driver", batch_id, sum(written.values()),
                     sum(len(f) for (t, _), f in out.files.items() if t in written),
                     out.file_bytes)

    def plan_slices(self, plans: dict[str, ChangePlan], large: bool = False) -> list[SliceJob]:
        """Before the batch's job: each target of ``plans``' tables cut into key slices
        (``Sink.plan_changes``; the last cut again while the target has not changed), the
        batch's slices numbered one after another. A ``large`` batch (a backlog) is cut
        ``SLICES_PER_CORE_LARGE`` times finer: its changes often lie in one stretch of
        keys (the recent rows, a job's run over an id range), and cut as coarsely as the
        cores that stretch was one slice, one write task doing most of the batch while the
        other cores waited (docs/benchmarks.md, "The write stage's slices"); finer slices
        are tasks Spark hands to whichever core is free. A small batch keeps one slice a
        core: each more task and file costs it more than it can spread."""
        state = self.state
        slices = self._slices() * (SLICES_PER_CORE_LARGE if large else 1)
        jobs: list[SliceJob] = []
        first = 0
        for table, plan in sorted(plans.items()):
            run = state.members[table]
            stored = self._stored_schema(run)
            with state.locks(run.state):
                for w, sink in zip(plan.writes, targets.each_sink(run.sink)):
                    cut = sink.plan_changes(run.keys, stored, slices)
                    jobs.append(SliceJob(table, w, cut, first))
                    first += cut.count
        return jobs

    def write_tasks(self, jobs: list[SliceJob]) -> int:
        """How many write tasks the batch's slices share (``task_changes.task_count``)."""
        return task_changes.task_count(jobs, at_least=WRITE_TASKS_PER_CORE * self._slices())

    def _slices(self) -> int:
        """At most how many slices a target's keys are cut into: Spark's parallelism."""
        return max(1, int(self.life.spark.sparkContext.defaultParallelism))

    def commit_changes(self, plans: dict[str, ChangePlan], jobs: list[SliceJob],
                       out: TaskOutput, batch_id: int) -> None:
        """What the write tasks of ``plans``' tables did, each target committed once with
        its batch id, the first stage's new files of the target in the same commit."""
        state = self.state
        by_job: dict[int, list[SliceOutcome]] = {}
        for d in out.outcomes:
            o = SliceOutcome(**d)
            by_job.setdefault(o.job, []).append(o)
        rows: dict[str, int] = {}
        newest: dict[str, int] = {}
        new: list[dict[str, Any]] = []  # the first stage's files committed with changes
        for i, job in enumerate(jobs):
            if job.table not in plans:
                continue
            got = by_job.get(i, [])
            member = state.members.get(job.table)
            if member is None:
                continue
            new_files = out.files.get((job.table, job.write.target), [])
            new.extend(new_files)
            with state.locks(member.state):
                if not state.running(member):
                    continue
                sinks = dict(zip(state.targets(member.state), targets.each_sink(member.sink)))
                result = sinks[job.write.target].commit_changes(
                    job.slices, [o.written for o in got if o.written is not None],
                    job.write.batch_id, plans[job.table].replaces, new_files=new_files,
                    schema=self._stored_schema(member))
            log.info("batch %d: %s -> %s from %d task(s): %s%s", batch_id, job.table,
                     job.write.target, len(got),
                     "skipped (has the batch)" if result.skipped else result.counts,
                     f" (with {len(new_files)} new file(s))" if new_files else "")
            n = sum(o.rows for o in got) + sum(int(f["rows"]) for f in new_files)
            rows[job.table] = max(rows.get(job.table, 0), n)
            ts = [o.newest_op_ts for o in got if o.newest_op_ts is not None]
            if ts:
                newest[job.table] = max(ts + [newest.get(job.table, 0)])
        if new:
            log.info("batch %d: %d row(s) written by the tasks as %d file(s), %d bytes to "
                     "the driver", batch_id, sum(int(f["rows"]) for f in new), len(new),
                     len(json.dumps(new)))
        for table, n in rows.items():
            run = state.members[table]
            run.change_rows[batch_id] = run.change_rows.get(batch_id, 0) + n
            if table in newest:
                run.emit_lag = max(0.0, time.time() - newest[table] / 1e6)
            if not run.published:
                run.published = run.sink.publish(self.life.spark)

    def drop_uncommitted(self, tables: set[str], batch_id: int) -> None:
        """What the batch's job wrote for ``tables`` removed uncommitted: their batch
        carries a schema change, and the driver's path writes them."""
        for table in sorted(tables):
            run = self.state.members.get(table)
            if run is None:
                continue
            with self.state.locks(run.state):
                for sink in targets.each_sink(run.sink):
                    sink.drop_uncommitted(run.state.batch_base + batch_id)

    def write_frames(self, staged: Any, plans: dict[str, ChangePlan], batch_id: int) -> None:
        """The changes of ``plans``' tables, kept on the executors by the batch's first
        stage (``staged``), reduced there into one DataFrame per table
        (``task_frames``) and written by Spark's own writer of each target
        (``Sink.write_frame``), each with its batch id. One table after another: a MERGE
        is one Spark job of its own, spread over the cluster."""
        state = self.state
        defn = state.defn
        parts = max(1, int(self.life.spark.sparkContext.defaultParallelism))
        for table, plan in sorted(plans.items()):
            run = state.members[table]
            frame = task_frames.reduced_frame(staged, plan, defn.sink.type,
                                              dict(defn.sink.options), defn.source.extras,
                                              parts).persist()
            written = 0
            try:
                with state.locks(run.state):
                    if not state.running(run):
                        continue
                    sinks = dict(zip(state.targets(run.state), targets.each_sink(run.sink)))
                    for w in plan.writes:
                        result = sinks[w.target].write_frame(frame, run.keys, w.batch_id,
                                                             plan.replaces)
                        log.info("batch %d: %s -> %s by Spark's writer: %s", batch_id, table,
                                 w.target, "skipped (has the batch)" if result.skipped
                                 else result.counts)
                        counts = result.counts or {}
                        written = max(written, sum(int(v) for k, v in counts.items()
                                                   if k != "appended"))
            finally:
                frame.unpersist()
            run.change_rows[batch_id] = run.change_rows.get(batch_id, 0) + written
            if not run.published:
                run.published = run.sink.publish(self.life.spark)

    def _stored_schema(self, run: TableRun) -> pa.Schema:
        """The target's columns as the driver's write would create the table with; kept
        per table while its rows' schema and spec stay (asked for every table of the
        stream before each batch, ``plan_slices``)."""
        spec = run.shaper.spec(run.keys)
        got = self._stored.get(run.state.table)
        if got is not None and got[0] is run.rows_schema and got[1] == spec:
            return got[2]
        rows = conform(run.rows_schema.empty_table(), run.rows_schema)
        stored = reduce_changes(rows, spec).rows().schema
        self._stored[run.state.table] = (run.rows_schema, spec, stored)
        return stored

    def _written(self, run: TableRun, rows: pa.Table, batch_id: int, df: Any = None) -> None:
        """What the loop and the metrics show of a table's batch; ``on_batch``. A target
        created by this batch is named in its catalog now (``Sink.publish``)."""
        run.change_rows[batch_id] = run.change_rows.get(batch_id, 0) + rows.num_rows
        note_emit_lag(run, rows)
        if not run.published:
            run.published = run.sink.publish(self.life.spark)
        if self.on_batch is not None:
            self.on_batch(run.state.table,
                          df if df is not None else self.shapes.local_frame(rows),
                          run.state.batch_base + batch_id)


def write_target(sink_type: str, options: dict, target: str, items: list) -> tuple[str, str]:
    """In a Spark task: write one target's tables of a batch, each item ``(app id, rows as
    Arrow IPC, batch id, apply spec, empty first, creation options, ranges replaced)``
    with its batch id in the same commit (a target that has the batch already skips it, as
    on the driver). Returns the target and where it ran (the task's working directory:
    the executor's)."""

    for app_id, ipc, batch, spec, empty_first, creation, replaces in items:
        with targets.create_sink(sink_type, {**options, **creation}, target, app_id) as sink:
            apply_arrow(sink, from_ipc(ipc), batch, spec, empty_first, replaces)
    return target, os.getcwd()
