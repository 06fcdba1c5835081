"""One micro-batch of the pipeline's stream (``MicroBatch.run``, the query's
``foreachBatch``):

1. decode: the batch's Arrow record batches split by table (``decode_tables``), the
   tables the stream writes kept (not one whose change waits for the loop, nor one whose
   drop or rename was met: its rows after that are not its own);
2. prepare each table's rows: none of a batch planned before the table was taken again
   (an older generation in the batch's offset); its schema changes, TRUNCATEs, drops and
   renames applied between its rows (``SchemaInStream``), or its rows through its
   transform; shaped like its target (``Prepared``);
   Before that, the snapshot rows of tables whose targets take files are written by the
   tasks that read them (``task_files``: the batch is not collected; only the files'
   descriptions and the other rows come back), and their files committed first; the
   change rows of tables whose targets take changes are cut by key slice in those tasks
   and written, in the same Spark job, by tasks that each own slices
   (``task_changes``), one commit per target for its changes and new files. Spark's own
   writers (``task_frames``) take a second job over the first stage, persisted;
3. write: ``TargetWriter`` writes each table's rows to its target(s), from the driver (the
   targets at once, one thread each) or from Spark tasks (``write.on``);
4. a drop, rename or new key the batch carried goes into the table's state, for the loop.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from typing import Any

from sparkcdc.pipeline.definition import PipelineDef, targets
from sparkcdc.pipeline.launch.session import SessionHints
from sparkcdc.pipeline.run import task_changes, task_files, task_frames
from sparkcdc.pipeline.run.life import RunLife
from sparkcdc.pipeline.run.replaces import replaced
from sparkcdc.pipeline.run.schema_events import SchemaInStream
from sparkcdc.pipeline.run.shapes import Shapes
from sparkcdc.pipeline.run.shipped import Shipped
from sparkcdc.pipeline.run.state import RunState
from sparkcdc.pipeline.run.table_run import TableRun
from sparkcdc.pipeline.run.task_changes import ChangePlan
from sparkcdc.pipeline.run.task_files import (
    CHANGES,
    OUT_SCHEMA,
    ROWS,
    FilePlan,
    TargetWrite,
    TaskOutput,
    hand_back,
    plannable,
    write_snapshot_files,
)
from sparkcdc.pipeline.run.write import LARGE_WINDOW, Prepared, TargetWriter
from sparkcdc.sinks import SinkKind, sink_class
from sparkcdc.sinks.base import KeyRange
from sparkcdc.spark.arrow_batches import TableChanges, decode_tables
from sparkcdc.spark.offset_view import OffsetView

log = logging.getLogger("sparkcdc.pipeline")

# the batch's stages that run in Spark tasks (the source's own modules aside)
TASK_STAGES = tuple(m.__name__ for m in (task_files, task_changes, task_frames))


def session_hints(defn: PipelineDef) -> SessionHints:
    """What the batches of ``defn`` will ask of the session (``SessionHints``): the
    modules their tasks import beyond the source's, its task stages and the sink's
    writers (each worker imported them at its first write, a few tenths of a CPU-second
    apiece in every short run)."""
    return SessionHints(task_modules=(*TASK_STAGES, *sink_class(defn.sink.type).task_modules()))


class MicroBatch:
    """What each micro-batch of the pipeline's stream does."""

    def __init__(self, state: RunState, life: RunLife, shapes: Shapes,
                 schema: SchemaInStream, writer: TargetWriter):
        self.state = state
        self.life = life
        self.shapes = shapes
        self.schema = schema
        self.writer = writer
        self._workers = max(1, min(8, 2 * state.settings.parallelism))
        self._replacing: dict[str, tuple[KeyRange, ...]] = {}  # the batch's, per table

    def run(self, df: Any, batch_id: int) -> None:
        """Split the batch by table, prepare each table's rows and write the targets at
        once. Each target records its own batch id (its base + the stream's batch id) in
        the same commit as its rows, so a batch replayed after a crash skips the targets
        that have it."""
        batch_id = int(batch_id)
        state = self.state
        members = state.members
        self._replacing = self._replaced(batch_id)
        plans = self._file_plans(batch_id)
        framing = self._frame_plans(batch_id)
        # one sink type a pipeline: Spark's own writer (frames) or sparkcdc's (changes)
        changing = {} if framing or self._quiet(batch_id) else self._change_plans(batch_id)
        if changing:
            plans = self._apart_from_changes(plans, changing, batch_id)
        out, staged = None, None
        try:
            if plans or changing or framing:
                self.writer.ready_for_files(sorted(set(plans) | set(changing)
                                                   | self._read_in(batch_id, framing)))
                if changing:
                    out, decoded = self._in_one_job(df, plans, changing, batch_id)
                else:
                    out, staged = self._in_tasks(df, plans, framing)
                    # a kept table with schema events in the batch takes the driver's path
                    if out.evented:
                        self._hand_back(out, staged, out.evented)
                    decoded = decode_tables(out.handed_back())
                    framed = _kept(framing, out.kept, out.evented)
                    self.writer.commit_files(out, batch_id, set(decoded) | set(framed))
                    if framed:
                        self.writer.write_frames(staged, framed, batch_id)
            else:
                decoded = decode_tables(df.toArrow())
        finally:
            if staged is not None:
                staged.unpersist()
        for t in self._replacing:  # no rows, but a range to clear: written all the same
            if t not in decoded and t not in changing and t not in framing:
                decoded[t] = TableChanges()
        work = [(members[t], ch) for t, ch in decoded.items()
                if t in members and t not in state.handed
                and members[t].state.gone is None]  # (its rows after that: not its own)
        if self._on_executors():
            ready = [p for run, ch in work
                     if (p := self._prepare(run, ch, batch_id)) is not None]
            self.writer.write_on_executors(ready, batch_id)
            for p in ready:
                self.schema.note_gone(p.run)
            return
        if len(work) <= 1:
            for run, ch in work:
                self._write(run, ch, batch_id)
            return
        with ThreadPoolExecutor(min(self._workers, len(work))) as pool:
            for f in [pool.submit(self._write, run, ch, batch_id) for run, ch in work]:
                f.result()  # the first failure fails the batch (Spark replays it)

    def _in_one_job(self, df: Any, plans: dict[str, FilePlan],
                    changing: dict[str, ChangePlan], batch_id: int
                    ) -> tuple[TaskOutput, dict[str, TableChanges]]:
        """The batch as one Spark job (``task_changes``): the slices cut first, then the
        first stage writes snapshot files and cuts the planned tables' change rows into
        the slices' pieces, and the write tasks write them; one collect. Then the
        commits: the files of the tables without changes planned, the planned tables'
        changes (with their new files). A planned table whose batch turned out to carry a
        schema event (or rows its plan cannot convert) loses what the job wrote of it and
        is read again for the driver's path. Returns what came back and the rows for the
        driver's path, by table."""
        defn = self.state.defn
        jobs = self.writer.plan_slices(changing, self._large(batch_id))
        router = task_changes.Router.of(changing, jobs, self.writer.write_tasks(jobs),
                                        defn.source.extras)
        log.info("batch %d: %d slice(s) of %d target(s), %d write task(s)", batch_id,
                 sum(j.slices.count for j in jobs), len(jobs), router.tasks)
        sink_type, options = defn.sink.type, dict(defn.sink.options)
        shipped = Shipped((plans, router))  # once per process, not per task

        def first(batches):
            plans, router = shipped.get()
            return write_snapshot_files(batches, plans, sink_type, options, router.extras,
                                        router=router)

        out = TaskOutput.of(task_changes.write_batch(df.mapInArrow(first, OUT_SCHEMA), router,
                                                     sink_type, options).to_pylist())
        evented = out.evented
        decoded = decode_tables(out.handed_back())
        if evented:  # (rare: a batch with DDL) the driver's path, whole, for these
            log.info("batch %d: %s carry a schema change: read again for the driver's path",
                     batch_id, ", ".join(sorted(evented)))
            self.writer.drop_uncommitted(evented, batch_id)
            for t in evented:
                decoded.pop(t, None)
            decoded.update(decode_tables(self._read_again(df, evented).handed_back()))
        with_files = {t for t, _target in out.files}
        done = {t: p for t, p in changing.items()
                if t not in evented and (t in out.kept or p.replaces or t in with_files)}
        self.writer.commit_files(out, batch_id, set(decoded), set(changing))
        if done:
            self.writer.commit_changes(done, jobs, out, batch_id)
        return out, decoded

    @staticmethod
    def _read_again(df: Any, tables: set[str]) -> TaskOutput:
        """The batch read again for ``tables`` alone, their record batches handed back as
        they came (``task_files.hand_back``)."""
        wanted = frozenset(tables)

        def back(batches):
            return hand_back(batches, wanted)

        return TaskOutput.of(df.mapInArrow(back, OUT_SCHEMA).toArrow().to_pylist())

    def _quiet(self, batch_id: int) -> bool:
        """Whether the batch can hold no change row: its binlog window is empty (it ends
        where the batch before it ended: a snapshot's batch with nothing written since)
        and no chunk of it is read again. Such a batch is one stage, its chunks' rows
        written as files where they were read, with no cut into key slices and no
        shuffle to write tasks (each batch of a snapshot paid for them: docs/benchmarks.md,
        "One job a batch"). Nor may a target hold rows in its chunks' spans (a new
        checkpoint into a table with rows: ``_targets_may_hold``): those would come back for
        the driver's path, the whole table through one process; the slices' tasks write
        them instead."""
        ends = None if self._replacing else self._window(batch_id)
        if ends is None:
            return False
        before, now = ends
        return (now.position_dict == before.position_dict and not now.reads_again
                and not self._targets_may_hold(now))

    def _targets_may_hold(self, now: OffsetView) -> bool:
        """Whether a target of a table the batch reads chunks of may hold rows in one of
        their spans, by its metadata (``Sink.holds_keys_in``; one that cannot tell leaves
        it to the tasks). Asked only where the chunks are cut along the first key column:
        along another, a row of the chunk may be stored with another value of it."""
        members = self.state.members
        for t in now.tables_read:
            run = members.get(t)
            if run is None or not run.keys or run.schema.chunk_key != run.keys[0]:
                continue
            spans = now.chunk_spans(t)
            with self.state.locks(run.state):
                for sink in targets.each_sink(run.sink):
                    if sink.holds_keys_in(run.keys[0], spans):
                        return True
        return False

    def _large(self, batch_id: int) -> bool:
        """Whether the batch's binlog window holds at least ``LARGE_WINDOW`` bytes (or
        crosses a binlog file, which two positions cannot measure): a backlog's batch,
        whose slices are cut finer (``TargetWriter.plan_slices``)."""
        ends = self._window(batch_id)
        if ends is None:
            return False
        a, b = ends[0].position_dict or {}, ends[1].position_dict or {}  # (both known)
        return a.get("file") != b.get("file") or int(b["pos"]) - int(a["pos"]) >= LARGE_WINDOW

    def _window(self, batch_id: int) -> tuple[OffsetView, OffsetView] | None:
        """The stream's offsets at the end of the batch before this one and of this one
        (its binlog window lies between their positions), or None when either is not
        known or has no position (the first batch, an empty stream)."""
        if batch_id == 0 or not self.state.members:
            return None
        st = next(iter(self.state.members.values())).state
        before, now = (self.state.ckpt.offset(st, batch_id - 1),
                       self.state.ckpt.offset(st, batch_id))
        if before is None or now is None or not before.position_dict or not now.position_dict:
            return None
        return before, now

    def _replaced(self, batch_id: int) -> dict[str, tuple[KeyRange, ...]]:
        """Per table of the batch's generation, the ranges of its chunks read again whole
        that its targets replace (``run/replaces.py``)."""
        state = self.state
        out: dict[str, tuple[KeyRange, ...]] = {}
        for t, run in state.members.items():
            st = run.state
            off = state.ckpt.offset(st, batch_id)
            if (t in state.handed or st.gone is not None or off is None
                    or off.table(t).generation != st.generation):
                continue
            ranges = replaced(state, run, off)
            if ranges:
                out[t] = ranges
        return out

    def _file_plans(self, batch_id: int) -> dict[str, FilePlan]:
        """The tables whose snapshot rows in this batch the tasks that read them may write
        as files of their targets (``task_files``): a merge sink whose every target takes
        files, no transform, no rule but the default delete, no schema change waiting, of
        the batch's generation and with chunks in the batch (in its snapshot, or read
        again in part; a chunk read again whole replaces its range, which a file of new
        rows cannot: ``run/replaces.py``).
        None with an ``on_batch`` hook, which watches every row on the driver."""
        state = self.state
        if (self.writer.on_batch is not None or state.sink_kind() is not SinkKind.MERGE
                or not state.settings.snapshot_from_tasks):
            return {}
        plans: dict[str, FilePlan] = {}
        read: set[str] | None = None
        for t, run in state.members.items():
            st = run.state
            if (t in state.handed or st.gone is not None or st.pending_ddl
                    or run.shaper.active or t in self._replacing or not self._takes_files(run)):
                continue
            spec = run.shaper.spec(run.keys)
            off = state.ckpt.offset(st, batch_id)
            if not plannable(spec) or off is None:
                continue
            if read is None:
                read = off.tables_read
            if t not in read or off.table(t).generation != st.generation:
                continue
            creation = tuple(sorted(state.creation(t).items()))
            plans[t] = FilePlan(t, run.schema, run.rows_schema, spec, tuple(
                TargetWrite(target, st.app_id, st.batch_base + batch_id, creation)
                for target in state.targets(st)))
        return plans

    def _apart_from_changes(self, plans: dict[str, FilePlan], changing: dict[str, ChangePlan],
                            batch_id: int) -> dict[str, FilePlan]:
        """``plans`` but the tables whose changes the tasks write and whose chunks the
        batch reads again. Such a table stays covered while read again, so a key written
        just before the batch is both a change of its window and a row of its chunk; a
        chunk row new to the target by its statistics went out as a file of the first
        stage, which the key's write task could not mark (the slices are cut before that
        file exists), and the target held the key twice. Its chunks' rows go to the slices
        with its changes instead, reduced with them by key."""
        state = self.state
        out: dict[str, FilePlan] = {}
        for t, p in plans.items():
            off = state.ckpt.offset(state.members[t].state, batch_id) if t in changing else None
            if off is None or t not in off.tables_read_again:
                out[t] = p
        return out

    def _change_plans(self, batch_id: int) -> dict[str, ChangePlan]:
        """The tables whose changes in this batch the tasks may write, each task a slice of
        the keys (``task_changes``): as ``_file_plans`` says, and every target takes
        changes (``Sink.takes_changes``) and is the table's own (a shared target's slices
        would be cut twice in one batch)."""
        state = self.state
        if (self.writer.on_batch is not None or state.sink_kind() is not SinkKind.MERGE
                or not state.settings.changes_from_tasks):
            return {}
        shared = state.shared_tables()  # once a batch: asked per table, it was O(tables²)
        return self._keyed_plans(batch_id, lambda run: run.state.table not in shared
                                 and self._takes_changes(run))

    def _frame_plans(self, batch_id: int) -> dict[str, ChangePlan]:
        """The tables whose changes in this batch Spark's own writer of their targets
        writes from a DataFrame (``task_frames``, ``Sink.takes_frames``): as
        ``_change_plans`` says, for targets that every one takes frames."""
        state = self.state
        if self.writer.on_batch is not None or state.sink_kind() is not SinkKind.MERGE:
            return {}
        return self._keyed_plans(batch_id, self._takes_frames)

    def _read_in(self, batch_id: int, tables: dict[str, ChangePlan]) -> set[str]:
        """Those of ``tables`` with chunks read in this batch: their targets are made
        before anything is written, rows or none (an empty table's chunk has no row to
        write), as the tasks' files path makes them (``ready_for_files``)."""
        state = self.state
        out: set[str] = set()
        for t in tables:
            off = state.ckpt.offset(state.members[t].state, batch_id)
            if off is not None and t in off.tables_read:
                out.add(t)
        return out

    def _keyed_plans(self, batch_id: int, takes: Callable[[TableRun], bool]
                     ) -> dict[str, ChangePlan]:
        """A ``ChangePlan`` for each table of the stream that ``takes`` says its targets
        take, whose changes this batch can plan by key: not handed back, gone, waiting
        for its schema or transformed, and read in the batch under its generation."""
        state = self.state
        plans: dict[str, ChangePlan] = {}
        for t, run in state.members.items():
            st = run.state
            if (t in state.handed or st.gone is not None or st.pending_ddl
                    or run.shaper.active or not takes(run)):
                continue
            spec = run.shaper.spec(run.keys)
            off = state.ckpt.offset(st, batch_id)
            if not plannable(spec) or off is None or off.table(t).generation != st.generation:
                continue
            creation = tuple(sorted(state.creation(t).items()))
            plans[t] = ChangePlan(t, run.schema, run.rows_schema, spec, run.keys, tuple(
                TargetWrite(target, st.app_id, st.batch_base + batch_id, creation)
                for target in state.targets(st)), self._replacing.get(t, ()))
        return plans

    @staticmethod
    def _takes_frames(run: TableRun) -> bool:
        if run.takes_frames is None:
            run.takes_frames = all(s.takes_frames(run.keys)
                                   for s in targets.each_sink(run.sink))
        return run.takes_frames

    @staticmethod
    def _takes_files(run: TableRun) -> bool:
        if run.takes_files is None:
            run.takes_files = all(s.takes_files() for s in targets.each_sink(run.sink))
        return run.takes_files

    @staticmethod
    def _takes_changes(run: TableRun) -> bool:
        if run.takes_changes is None:
            run.takes_changes = all(s.takes_changes(run.keys)
                                    for s in targets.each_sink(run.sink))
        return run.takes_changes

    def _in_tasks(self, df: Any, plans: dict[str, FilePlan],
                  framing: dict[str, ChangePlan]) -> tuple[TaskOutput, Any]:
        """The batch's record batches run through ``write_snapshot_files`` in the tasks
        that hold them: the snapshot rows of ``plans``' tables written as files there, the
        record batches of ``framing``'s tables kept there (for Spark's own writers), the
        rest handed back. With tables to keep, the stage is persisted for the jobs after
        it (returned; else None) and the kept rows' payloads are not collected."""
        from pyspark.sql import functions as F

        defn = self.state.defn
        sink_type, options = defn.sink.type, dict(defn.sink.options)
        extras = defn.source.extras
        keep = frozenset(framing)
        shipped = Shipped((plans, extras, keep))  # once per process, not per task

        def write(batches):
            plans, extras, keep = shipped.get()
            return write_snapshot_files(batches, plans, sink_type, options, extras, keep)

        staged = df.mapInArrow(write, OUT_SCHEMA)
        if not keep:
            return TaskOutput.of(staged.toArrow().to_pylist()), None
        staged = staged.persist()
        kept = F.col("kind") == CHANGES
        light = staged.select("kind", "tbl", "target", "ord",
                              F.when(kept, F.lit(None)).otherwise(F.col("payload"))
                              .alias("payload"))
        return TaskOutput.of(light.toArrow().to_pylist()), staged

    @staticmethod
    def _hand_back(out: TaskOutput, staged: Any, tables: set[str]) -> None:
        """The kept record batches of ``tables`` collected after all, for the driver's
        path, each in its place in the batch."""
        from pyspark.sql import functions as F

        rows = staged.filter((F.col("kind") == CHANGES) & F.col("tbl").isin(sorted(tables)))
        out.add(r | {"kind": ROWS} for r in rows.toArrow().to_pylist())

    def _prepare(self, run: TableRun, changes: Any, batch_id: int) -> Prepared | None:
        """The table's rows of the batch shaped like its target (events applied, transform
        run); None: the batch was planned before the table was taken again."""
        off = self.state.ckpt.offset(run.state, batch_id)
        if off is not None and off.table(run.state.table).generation != run.state.generation:
            return None
        ranges = self._replacing.get(run.state.table, ())
        if changes.events or run.state.pending_ddl:
            return Prepared(run, *self.schema.apply_events(run, changes, batch_id),
                            replaces=ranges)
        rows = changes.rows() if changes.parts else run.rows_schema.empty_table()
        return Prepared(run, self.shapes.transformed(run, rows), replaces=ranges)

    def _write(self, run: TableRun, changes: Any, batch_id: int) -> None:
        p = self._prepare(run, changes, batch_id)
        if p is not None:
            self.writer.write(p, batch_id)
            self.schema.note_gone(run)

    def _on_executors(self) -> bool:
        """``write.on``: ``auto`` writes from the executors when the master is a cluster
        (not ``local``), else from the driver (docs/benchmarks.md, Writers: on one machine
        the driver's writers are the fastest)."""
        if self.state.sink_kind() is not SinkKind.MERGE:
            return False  # a changelog is written by Spark's own writer, from the driver
        if any(self._takes_frames(r) for r in self.state.members.values()):
            return False  # Spark's own writer writes with the driver's session
        how = self.state.settings.write_on
        if how != "auto":
            return how == "executors"
        return not str(self.life.spark.sparkContext.master).startswith("local")


def _kept(plans: dict[str, ChangePlan], kept: set[str], evented: set[str]
          ) -> dict[str, ChangePlan]:
    """The planned tables whose rows the tasks kept, or whose chunks read again clear
    their ranges (rows or none), less those with schema events (the driver's path)."""
    return {t: plans[t] for t in ((kept & set(plans)) | {t for t in plans if plans[t].replaces})
            - evented}
