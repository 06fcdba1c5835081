"""One micro-batch of the pipeline's stream (``MicroBatch.run``, the query's
``foreachBatch``):

1. decode: the batch's Arrow record batches split by table (``decode_tables``), the
   tables the stream writes kept (not one whose change waits for the loop, nor one whose
   drop or rename was met: its rows after that are not its own);
2. prepare each table's rows: none of a batch planned before the table was taken again
   (an older generation in the batch's offset); its schema changes, TRUNCATEs, drops and
   renames applied between its rows (``SchemaInStream``), or its rows through its
   transform; shaped like its target (``Prepared``);
3. write: ``TargetWriter`` writes each table's rows to its target(s), from the driver (the
   targets at once, one thread each) or from Spark tasks (``write.on``);
4. a drop, rename or new key the batch carried goes into the table's state, for the loop.
"""

from __future__ import annotations

import logging
from concurrent.futures import ThreadPoolExecutor
from typing import Any

from sparkcdc.pipeline.run.life import RunLife
from sparkcdc.pipeline.run.schema import SchemaInStream
from sparkcdc.pipeline.run.shapes import Shapes
from sparkcdc.pipeline.run.state import RunState
from sparkcdc.pipeline.run.table_run import TableRun
from sparkcdc.pipeline.run.write import Prepared, TargetWriter
from sparkcdc.spark import offset_view as ov
from sparkcdc.spark.arrow_batches import decode_tables

log = logging.getLogger("sparkcdc.pipeline")


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

    def run(self, df: Any, batch_id: int) -> None:
        """Split the batch by table, prepare each table's rows and write the targets at
        once. Each target records its own batch id (its base + the stream's batch id) in
        the same commit as its rows, so a batch replayed after a crash skips the targets
        that have it."""
        batch_id = int(batch_id)
        state = self.state
        members = state.members
        work = [(members[t], ch) for t, ch in decode_tables(df.toArrow()).items()
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

    def _prepare(self, run: TableRun, changes: Any, batch_id: int) -> Prepared | None:
        """The table's rows of the batch shaped like its target (events applied, transform
        run); None: the batch was planned before the table was taken again."""
        off = self.state.ckpt.offset(run.state, batch_id)
        if off is not None and int(ov.table_entry(off, run.state.table).get(
                "generation", 0)) != run.state.generation:
            return None
        if changes.events or run.state.pending_ddl:
            return Prepared(run, *self.schema.apply(run, changes, batch_id))
        return Prepared(run, self.shapes.transformed(run, changes.rows()))

    def _write(self, run: TableRun, changes: Any, batch_id: int) -> None:
        p = self._prepare(run, changes, batch_id)
        if p is not None:
            self.writer.write(p, batch_id)
            self.schema.note_gone(run)

    def _on_executors(self) -> bool:
        """``write.on``: ``auto`` writes from the executors when the master is a cluster
        (not ``local``), else from the driver (docs/benchmarks.md, Writers: on one machine
        the driver's writers are the fastest)."""
        if self.state.sink_kind() != "merge":
            return False  # a changelog is written by Spark's own writer, from the driver
        how = self.state.settings.write_on
        if how != "auto":
            return how == "executors"
        return not str(self.life.spark.sparkContext.master).startswith("local")
