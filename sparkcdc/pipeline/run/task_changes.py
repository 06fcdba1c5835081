"""A micro-batch's changes written by Spark tasks that each own a slice of a table's keys:
no row through the driver, and a target that marks rows deleted (Delta's deletion
vectors) rewrites nothing it already holds. The whole batch is one Spark job.

Before the job, for each table whose targets take changes (``ChangePlan``), the driver
cuts each target's keys into slices (``Sink.plan_changes``: ``KeySlices`` by the first key
column, each slice owning the stored files its keys can lie in; the last cut again while
the target has not changed). Then one job of two stages:

1. **first stage** (a task per partition of the source's read, ``task_files``): snapshot
   rows new to the target written as files where they were read; each record batch of a
   planned table converted and shaped like its target (as the driver's path does:
   ``convert_rows``, ``conform``) and cut by slice (``Router.pieces``), one piece per
   target and slice; the rest (the files' descriptions, rows for the driver's path)
   tagged for a write task too;
2. **shuffle**: each piece goes to the partition of its (target, slice), named rather than
   hashed (``repartitionById``), so every change of a key, whichever binlog reader or chunk
   read it, meets in one task; a slice has one task, a task may have several slices
   (``task_count``: one per slice up to one per core, then slices dealt round);
3. **write** (a task's slices in turn): the slice's changes reduced to one per key in binlog
   order (``reduce_changes``, the driver's planner) and written by the target
   (``Sink.write_changes``): new rows as files, the replaced and deleted rows marked in
   deletion vectors. The task sends back a description of a few hundred bytes a file,
   and passes the first stage's other rows through.

One ``collect`` brings the driver the files' and slices' descriptions and the rows for
its own path. It then commits each target once, with the batch id, the first stage's new
files of the target in the same commit (``Sink.commit_changes``,
``TargetWriter.commit_changes``): the cut was made before them.

Why this is exact: a key's changes are all in one task and reduced in ``_seq`` order, as
on the driver; a key's stored row lies in a file its slice owns, and no other task marks
that file (the batch's new files hold other keys: a window passes changes only for keys
of chunks finished before it, and a table read again, which stays covered, writes no file
in the first stage: ``MicroBatch._apart_from_changes``); the commit is the target's only
change of the batch, and a batch replayed after it is skipped by its batch id. A table whose batch carries schema
events, or a transform, or a rule the planner reads on the driver, takes the driver's
path for the whole batch: a schema event is met only as the job runs, so what the job
wrote of such a table is removed uncommitted and its rows are read again for the driver
(``MicroBatch``; rare: a batch with DDL).
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc

from sparkcdc.apply import ApplySpec, reduce_changes
from sparkcdc.core.schema import TableSchema
from sparkcdc.pipeline.definition import targets
from sparkcdc.pipeline.definition.conversions import convert_rows
from sparkcdc.pipeline.definition.flink_keys import SourceExtras
from sparkcdc.pipeline.run.schema.in_stream import conform
from sparkcdc.pipeline.run.shipped import Shipped
from sparkcdc.pipeline.run.task_files import (
    OUT_ARROW,
    OUT_SCHEMA,
    OUTCOMES,
    PIECES,
    TargetWrite,
)
from sparkcdc.sinks.base import DELETE, UPSERT, KeyRange, KeySlices
from sparkcdc.spark.arrow_batches import from_ipc, to_ipc
from sparkcdc.spark.task_cpu import accounted


@dataclass(frozen=True)
class ChangePlan:
    """A table whose changes in this batch the tasks write, each task a slice of its keys."""

    table: str
    schema: TableSchema  # as the source reads it (for the conversions)
    rows_schema: pa.Schema  # the target's rows (stream_schema.conform)
    spec: ApplySpec
    keys: tuple[str, ...]
    writes: tuple[TargetWrite, ...]
    # chunks read again in the batch: their ranges hold their rows and no other
    # (``ChangeSet.replaces``); every slice's task runs then, rows or none
    replaces: tuple[KeyRange, ...] = ()


@dataclass(frozen=True)
class SliceJob:
    """One target of a planned table in this batch, cut into slices; its slices are the
    batch's slices ``first`` .. ``first + slices.count - 1`` (``task_of`` names the task
    that writes each)."""

    table: str
    write: TargetWrite
    slices: KeySlices
    first: int


def task_count(jobs: list[SliceJob], at_least: int) -> int:
    """How many write tasks a batch's slices share: one per slice up to ``at_least`` (or
    up to the largest job's slices, so a large table's slices still run side by side);
    past that several slices to a task. A task per slice cost each slice Spark's task
    overhead and a Python worker's turn: with a thousand small tables that was most of
    a batch (docs/benchmarks.md, "Whole databases")."""
    total = sum(j.slices.count for j in jobs)
    widest = max((j.slices.count for j in jobs), default=1)
    return max(1, min(total, max(at_least, widest)))


def task_of(slice_number: int, tasks: int) -> int:
    """The write task of the batch's slice ``slice_number``: slices dealt round, so one
    job's slices (a table's key ranges) go to different tasks, and a slice has one writer."""
    return slice_number % tasks


def slices_of(jobs: list[SliceJob], task: int, tasks: int) -> Iterator[tuple[int, int]]:
    """The (job, slice) pairs write task ``task`` of ``tasks`` owns (``task_of``)."""
    for i, job in enumerate(jobs):
        for s in range(job.slices.count):
            if task_of(job.first + s, tasks) == task:
                yield i, s


@dataclass(frozen=True)
class SliceOutcome:
    """What one slice's task did: the target's description of what it wrote (None: the
    target had the batch already), how many change rows it reduced, and the newest commit
    time among them (the emit lag)."""

    job: int
    written: dict[str, Any] | None
    rows: int
    newest_op_ts: int | None


@dataclass(frozen=True)
class Router:
    """The batch's key slices as its first stage cuts change rows by them (``Router.pieces``,
    ``task_files.Router``): the planned tables, their targets' slices (``jobs``) and the
    write tasks they are dealt to."""

    plans: dict[str, ChangePlan]
    jobs: tuple[SliceJob, ...]
    tasks: int
    extras: SourceExtras | None
    tables: frozenset[str] = frozenset()
    by_table: dict[str, tuple[int, ...]] = field(default_factory=dict)

    @classmethod
    def of(cls, plans: dict[str, ChangePlan], jobs: list[SliceJob], tasks: int,
           extras: SourceExtras | None) -> Router:
        by_table: dict[str, list[int]] = {}
        for i, j in enumerate(jobs):
            by_table.setdefault(j.table, []).append(i)
        return cls(plans, tuple(jobs), tasks, extras, frozenset(plans),
                   {t: tuple(ix) for t, ix in by_table.items()})

    def pieces(self, table: str, rows: pa.Table) -> Iterator[tuple[int, int, int, bytes]]:
        """In a task: one record batch of ``table`` converted and shaped like its target
        (as the driver's path does: ``convert_rows``, ``conform``) and cut into the pieces
        of each of its targets' slices: ``(write task, job, slice, rows as IPC)``."""
        plan = self.plans[table]
        shaped = conform(convert_rows(rows.replace_schema_metadata(None), plan.schema,
                                      self.extras), plan.rows_schema)
        if not shaped.num_rows:
            return
        for i in self.by_table.get(table, ()):
            job = self.jobs[i]
            where = job.slices.slice_of(shaped.column(job.slices.key))
            for s, piece in _by_slice(shaped, where):
                yield task_of(job.first + s, self.tasks), i, s, to_ipc(piece).to_pybytes()


def _by_slice(rows: pa.Table, where: pa.Array) -> Iterator[tuple[int, pa.Table]]:
    """``rows`` cut by their slice (``where``), each slice's rows in their order: one
    stable sort and one ``take``, then slices of the result. A filter per slice read the
    whole record batch once per slice, and range slices are cut finer than the cores
    (``sinks/slices.py``)."""
    import numpy as np

    w = where.to_numpy(zero_copy_only=False)
    if not len(w):
        return
    first = int(w[0])
    if (w == first).all():  # (a window's record batch often lies in one slice)
        yield first, rows
        return
    order = np.argsort(w, kind="stable")
    ordered = w[order]
    taken = rows.take(pa.array(order))
    bounds = np.flatnonzero(np.diff(ordered)) + 1
    starts = np.concatenate([[0], bounds])
    ends = np.concatenate([bounds, [len(ordered)]])
    for a, b in zip(starts.tolist(), ends.tolist()):
        yield int(ordered[a]), taken.slice(a, b - a)


def write_batch(first: Any, router: Router, sink_type: str, options: dict[str, str]) -> Any:
    """The batch's one Spark job (module docstring): ``first`` is its first stage (a
    DataFrame of ``task_files.OUT_SCHEMA`` whose every row names its write task,
    ``part``), shuffled to the write tasks, which write their slices' pieces and pass
    every other row through; returns what they all send back (an Arrow table).

    Both stages are DataFrame stages (``mapInArrow``) run by the same Python workers; the
    shuffle sends each row to the partition its ``part`` names (``repartitionById``), so a
    slice has one task and every task runs, rows or none. An RDD's ``flatMap`` and
    ``partitionBy`` here made the JVM pickle every piece and forked a second Python
    daemon with workers of its own for the batch."""
    from pyspark import TaskContext

    # every slice's task needs the plans: unpickled once per process (run/shipped.py)
    shipped = Shipped(router)

    def write(batches: Iterable[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
        return accounted(_write(batches), "slices")

    def _write(batches: Iterable[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
        router = shipped.get()
        ctx = TaskContext.get()
        index = ctx.partitionId() if ctx is not None else None
        items: list[tuple[int, tuple[int, int, bytes]]] = []
        for b in batches:
            piece = pc.equal(b.column("kind"), PIECES)
            rest = b.filter(pc.invert(piece))
            if rest.num_rows:  # the first stage's other rows, for the driver, as declared
                yield pa.RecordBatch.from_arrays(
                    [rest.column(f.name).cast(f.type) for f in OUT_ARROW], schema=OUT_ARROW)
            mine = b.filter(piece)
            items.extend((p, (i, s, ipc)) for p, i, s, ipc in zip(
                *(mine.column(k).to_pylist() for k in ("part", "job", "slice", "payload"))))
        done = [json.dumps(o.__dict__).encode() for o in write_slices(
            items, router.plans, list(router.jobs), sink_type, options, index, router.tasks)]
        if done:
            yield pa.RecordBatch.from_pylist(
                [{"kind": OUTCOMES, "payload": d} for d in done], schema=OUT_ARROW)

    return (first.repartitionById(router.tasks, "part")
            .mapInArrow(write, OUT_SCHEMA).toArrow())


def write_slices(items: Iterable[tuple[int, tuple[int, int, bytes]]],
                 plans: dict[str, ChangePlan], jobs: list[SliceJob], sink_type: str,
                 options: dict[str, str], partition: int | None = None, tasks: int = 1
                 ) -> Iterator[SliceOutcome]:
    """In a task: the slices of its shuffle partition (``partition`` of ``tasks``), each
    reduced to one change per key and written by its target; a slice of a table with
    ranges to replace is written with no rows too (its stored rows there go)."""
    pieces: dict[tuple[int, int], list[pa.Table]] = {}
    for _pid, (i, s, ipc) in items:
        pieces.setdefault((i, s), []).append(from_ipc(ipc))
    for i, s in () if partition is None else slices_of(jobs, partition, tasks):
        plan = plans[jobs[i].table]
        if plan.replaces:
            pieces.setdefault((i, s), [conform(plan.rows_schema.empty_table(),
                                               plan.rows_schema)])
    for (i, s), tables in sorted(pieces.items(), key=lambda kv: kv[0]):
        job = jobs[i]
        plan = plans[job.table]
        rows = pa.concat_tables(tables)
        newest = pc.max(rows["_op_ts"]) if "_op_ts" in rows.column_names else None
        newest_ts = newest.value if newest is not None and newest.is_valid else None
        w = job.write
        with targets.create_sink(sink_type, {**options, **dict(w.creation)}, w.target,
                                 w.app_id) as sink:
            last = sink.last_batch_id()
            if last is not None and w.batch_id <= last:
                yield SliceOutcome(i, None, rows.num_rows, newest_ts)
                continue
            changes = reduce_changes(rows, plan.spec)
            written = sink.write_changes(job.slices, s, changes.rows(UPSERT),
                                         changes.key_rows(UPSERT, DELETE), w.batch_id,
                                         plan.replaces)
        yield SliceOutcome(i, written, rows.num_rows, newest_ts)
