"""The life of a table in the pipeline's stream: started (it joins the stream), stopped
(it leaves it), taken again (a change or a TRUNCATE during its snapshot, a new key no row
followed, a binlog purged while the pipeline was stopped: its target emptied, a new
generation snapshotted), re-keyed (a new primary key: a new generation from the change
on), renamed into the same target or dropped. Every one of them is known from the stream,
in binlog order, or from discovery; nothing reads the binlog's statements.
"""

from __future__ import annotations

import logging
from typing import Any

from sparkcdc.core.offsets import BinlogOffset
from sparkcdc.core.schema import TableSchema
from sparkcdc.core.table_events import Ddl
from sparkcdc.errors import BinlogUnavailable, ConfigError, SchemaChangeStop, SchemaError
from sparkcdc.pipeline.definition.routing import shaper_for, targets_of
from sparkcdc.pipeline.run.checkpoint import CaptureStatus, Start, TableState
from sparkcdc.pipeline.run.schema import diff as sc
from sparkcdc.pipeline.run.shapes import Shapes
from sparkcdc.pipeline.run.state import RunState, schema_of
from sparkcdc.pipeline.run.stream import PipelineStream
from sparkcdc.pipeline.run.table_run import TableRun
from sparkcdc.spark.offset_view import OffsetView

log = logging.getLogger("sparkcdc.pipeline")


class TableLifecycle:
    """Starts, stops and takes tables again in the pipeline's stream."""

    def __init__(self, state: RunState, shapes: Shapes, stream: PipelineStream):
        self.state = state
        self.shapes = shapes
        self.stream = stream

    def start(self, st: TableState, schema: TableSchema) -> None:
        """Capture the table in the pipeline's stream."""
        shaper = shaper_for(self.state.defn, st.table)
        keys = shaper.keys(schema.primary_key)
        if not keys:
            raise ConfigError(
                f"table {st.table} has no primary key, so its target has no key to apply "
                "changes by",
                fix=f"add a transform for {st.table} with primary-keys: the columns that "
                    "identify a row (or add a primary key to the table)")
        if self.state.has_own_stream(st):
            self._from_own_stream(st)
            schema = schema_of(st)
        rows_schema = self.shapes.arrow_path(st, schema, shaper)
        self.stream.join(st, schema, shaper, tuple(keys), rows_schema)

    def stop(self, st: TableState) -> TableRun | None:
        """Stop writing the table's target: the pipeline's stream goes on without it."""
        run = self.state.runs.get(st.table)
        if run is not None:
            self.stream.leave(run)
        return run

    def halt(self, st: TableState) -> tuple[Any, int | None, OffsetView | None, bool]:
        """Stop the table's stream; the target's sink, its last batch id, the source offset
        that batch ended at (None: nothing applied in this generation) and whether the
        table's snapshot was done by then."""
        self.stop(st)
        sink = self.state.sink_for(st)
        last = sink.last_batch_id()
        applied = last is not None and last >= st.batch_base
        offset = self.state.ckpt.offset(st, last - st.batch_base) if applied else None
        snapshot_done = (offset is not None and offset.table(st.table).phase == "done") or (
            not applied and st.start.offset is not None)
        return sink, last, offset, snapshot_done

    @staticmethod
    def target_position(st: TableState, offset: OffsetView | None,
                        snapshot_done: bool) -> dict | None:
        """From ``halt``'s answer: the binlog offset the table's target stands at, from
        which the table can go on without a snapshot (its last batch's end, or its start
        when nothing was applied since); None when its snapshot was not done there."""
        if not snapshot_done:
            return None
        return offset.position.to_dict() if offset is not None else st.start.offset

    def next_generation(self, st: TableState, last: int | None, start: Start, note: str,
                        schema: TableSchema | None = None) -> None:
        """The table's next generation, saved: it (re)joins the pipeline's stream from
        ``start``, its target's batch ids going on after ``last`` (the last one it has),
        with ``schema`` when it changed; nothing of the one before waits for it."""
        st.start = start
        st.stream_generation = None  # joins the pipeline's stream again, under the new generation
        st.generation += 1
        # past every batch id the target holds any part of: a batch that failed after its
        # snapshot files were committed (Delta's ``<app-id>#files``) must not be reused,
        # or the new generation's files under that id would be taken as committed
        seen = [x for x in (last, self._last_seen(st)) if x is not None]
        st.batch_base = (max(seen) + 1) if seen else st.batch_base
        if schema is not None:
            st.schema = schema.to_dict()
        st.pending_ddl = None
        st.gap = None
        st.reread = None  # the new generation reads every row
        st.note = note
        self.state.save()

    def next_base(self, st: TableState) -> int:
        seen = [x for x in (self.state.sink_for(st).last_batch_id(), self._last_seen(st))
                if x is not None]
        return (max(seen) + 1) if seen else st.batch_base

    def _last_seen(self, st: TableState) -> int | None:
        sink = self.state.sink_for(st)
        try:
            return sink.last_batch_seen()
        finally:
            sink.close()

    def empty_for_retake(self, st: TableState, sink: Any, last: int | None,
                         what: str) -> None:
        if last is None:
            return
        if self.state.emptying_hits_others(st):
            raise SchemaError(
                f"{what}, and the table must be taken again (a change during its snapshot, "
                f"or several changes with rows between them), but its target {st.target} "
                "is shared with other tables",
                fix="empty the target, then start the pipeline again with a new checkpoint "
                    "location")
        sink.empty()

    # -- schema changes --------------------------------------------------------------------

    def retake(self, st: TableState, new: TableSchema, what: str) -> None:
        """Take the table again with its schema of now: its target changed for it (as
        ``schema.change.behavior`` says), emptied, and snapshotted inside the pipeline's
        stream under a new generation. For a change or a TRUNCATE during its snapshot (its
        chunks were read before it), and a new key no row followed."""
        behavior = self.state.settings.schema_change_behavior
        old = schema_of(st)
        d = sc.diff(old, new)
        if behavior == "exception":
            raise SchemaChangeStop(
                f"table {st.table} changed: {d.describe()}" if d else what,
                fix="schema.change.behavior is 'exception': revert the change, or choose "
                    "evolve, try_evolve, lenient or ignore and run again")
        sink, last, _offset, _done = self.halt(st)
        try:
            if d:
                st.columns = self.shapes.evolve_columns(st, old, new, d, sink, behavior)
            self.empty_for_retake(st, sink, last, what)
        finally:
            sink.close()
        log.warning("%s: emptying %s and taking the table again", what, st.target)
        self.next_generation(st, last, Start(),
                             f"{behavior}: {d.describe() or what} (taken again)", new)
        self.start(st, new)

    def go_on_rekeyed(self, st: TableState, new: TableSchema, ddls: list[Ddl],
                at: BinlogOffset) -> None:
        """A new primary key, met by the pipeline's stream at ``at`` after the table's
        snapshot: every row before it is in the target, which changes its columns for the
        new schema; the table goes on from ``at`` under a new generation, its changes
        applied by the new key (the target's rows are not rewritten)."""
        behavior = self.state.settings.schema_change_behavior
        old = schema_of(st)
        d = sc.diff(old, new).with_renames(r for ddl in ddls for r in ddl.renames)
        sink, last, _offset, _done = self.halt(st)
        try:
            st.columns = self.shapes.evolve_columns(st, old, new, d, sink, behavior,
                                                    tuple(ddl.statement for ddl in ddls))
        finally:
            sink.close()
        log.warning("table %s changed: %s (%s); it goes on from %s", st.table, d.describe(),
                    behavior, at)
        self.next_generation(st, last, Start(at.to_dict(), joins=True),
                             f"{behavior}: {d.describe()}", new)
        self.start(st, new)

    # -- renamed, dropped ------------------------------------------------------------------

    def may_go_on_as(self, st: TableState, new_name: str,
                     found: dict[str, TableSchema]) -> bool:
        """Whether a table renamed to ``new_name`` goes on under it: ``tables`` matches the
        new name, it routes to the same target, and no active table has that name."""
        other = self.state.states.get(new_name)
        if (new_name not in found
                or targets_of(self.state.defn, new_name) != self.state.targets(st)
                or (other is not None and other.status == CaptureStatus.ACTIVE)):
            log.warning("table %s was renamed to %s: %s", st.table, new_name,
                        "captured as a new table" if new_name in found
                        else "not matched by source.tables")
            return False
        return True

    def go_on_as(self, st: TableState, new_name: str, new_schema: TableSchema,
                 snapshot_done: bool, start: BinlogOffset | None) -> None:
        """The renamed table goes on into its target under ``new_name``, from ``start`` (a
        binlog offset at or after the RENAME; every row of the old name before it is in
        the target), with its target's columns changed for the new name's schema. Renamed
        during its snapshot, it is taken again instead, from an emptied target (``start``
        unused: None when the RENAME is known from discovery, ``Runner._reconcile``)."""
        sink, last, _offset, _done = self.halt(st)
        try:
            self._go_on_as(st, new_name, new_schema, sink, last, snapshot_done, start)
        finally:
            sink.close()

    def _go_on_as(self, st: TableState, new_name: str, new_schema: TableSchema, sink: Any,
                  last: int | None, snapshot_done: bool, start: BinlogOffset | None) -> None:
        state = self.state
        behavior = state.settings.schema_change_behavior
        other = state.states.get(new_name)
        old_schema = schema_of(st)
        nst = TableState(new_name, st.target, app_id=state.app_id(new_name),
                         targets=st.targets)
        if other is not None:  # the name was captured before: its next generation
            nst = TableState(new_name, st.target, other.generation + 1,
                             batch_base=self.next_base(other), app_id=other.app_id,
                             targets=st.targets)
        nst.columns = st.columns
        d = sc.diff(old_schema, new_schema)
        if any((d.added, d.dropped, d.modified)):
            nst.columns = self.shapes.evolve_columns(nst, old_schema, new_schema, d, sink,
                                                     behavior)
        if snapshot_done:
            assert start is not None  # (a RENAME the stream met after the snapshot)
            # it joins the pipeline's stream from there (the members file's ``since``)
            nst.start = Start(start.to_dict(), joins=True)
            how = "from the RENAME on"
        else:
            self.empty_for_retake(st, sink, last, f"table {st.table} renamed")
            how = "taken again (renamed during its snapshot)"
        nst.schema = new_schema.to_dict()
        nst.note = f"renamed from {st.table}"
        log.warning("table %s was renamed to %s: it goes on into %s, %s", st.table,
                    new_name, st.target, how)
        st.status = CaptureStatus.DROPPED
        st.stream_generation = None
        state.states[new_name] = nst
        state.save()
        self.start(nst, new_schema)

    def dropped(self, st: TableState, note: str = "") -> None:
        if self.state.settings.schema_change_behavior == "exception":
            raise SchemaChangeStop(
                f"table {st.table} was dropped (or renamed) on the source",
                fix="schema.change.behavior is 'exception': restore the table, or choose "
                    "another behavior (the target is then kept as it is)")
        log.warning("table %s is gone from the source: its stream stops, target %s is kept",
                    st.table, st.target)
        self.stop(st)  # the pipeline's stream goes on without it
        st.stream_generation = None
        st.status = CaptureStatus.DROPPED
        st.note = note or "dropped on the source"
        self.state.save()

    # -- checkpoints of before ------------------------------------------------------------

    def _from_own_stream(self, st: TableState) -> None:
        """A table a stream of its own read (a checkpoint from before every table took the
        pipeline's stream) joins it: from the binlog offset its target's last batch ended
        at when its snapshot was done there (the stream then reads its changes from there,
        and carries the schema changes since), else taken again from the start. A DDL
        whose old-schema rows were still to apply (``gap``) is read again the same way,
        from where they start."""
        sink, last, offset, snapshot_done = self.halt(st)
        try:
            if st.gap:
                since = st.gap["from"]
                st.schema, st.columns = st.gap["schema"], st.gap["columns"] or st.columns
                st.gap = None
            else:
                since = self.target_position(st, offset, snapshot_done)
            if since is None:
                self.empty_for_retake(st, sink, last, f"table {st.table} joins the "
                                      "pipeline's stream in its snapshot")
        finally:
            sink.close()
        st.start = Start(since, joins=True) if since is not None else Start()
        log.warning("table %s leaves its stream of its own for the pipeline's stream (%s)",
                    st.table, f"from {since['file']}:{since['pos']}" if since else
                    "taken again")
        st.generation += 1
        st.batch_base = (last + 1) if last is not None else max(0, st.batch_base)

    # -- binlog purged while the pipeline was stopped --------------------------------------

    def check_purged(self) -> None:
        """Before anything starts: a table whose position is in a binlog file the server
        purged fails with one message (``binlog.purged.behavior: fail``) or is taken again
        (``resnapshot``): its target emptied and reloaded, the other tables untouched."""
        state = self.state
        files = None
        for table, st in list(state.states.items()):
            if st.status != CaptureStatus.ACTIVE:
                continue
            pos = self._resume_position(st)
            if pos is None:
                continue
            if files is None:
                files = state.source().binlog_files()
            if pos.file in files:
                continue
            have = f"{files[0]} .. {files[-1]}" if files else "no binlog files"
            what = (f"table {table} resumes from binlog file {pos.file!r} (position {pos.pos}), "
                    f"which the server no longer has (it has {have}): it was purged while the "
                    f"pipeline was stopped, and the changes in it are lost")
            if state.settings.binlog_purged_behavior != "resnapshot":
                raise BinlogUnavailable(
                    what, fix="set pipeline option 'binlog.purged.behavior: resnapshot' to take "
                              "the affected tables again (their targets are emptied and "
                              "reloaded; the other tables resume), or start over with a new "
                              "checkpoint.location; keep binlogs longer than the pipeline is "
                              "ever stopped (binlog_expire_logs_seconds / expire_logs_days, "
                              "docs/operations.md)")
            if st.stream_generation is not None and st.stream_generation == state.generation:
                # the pipeline's stream cannot go on from a purged file: a new one starts,
                # and every table it read is taken again in it (each fails above first)
                state.generation += 1
            self._retake_purged(st, what)

    def _resume_position(self, st: TableState) -> BinlogOffset | None:
        """The earliest binlog position the table's stream needs to go on: its last committed
        offset (Spark replays from there), else its planned first batch, else its start."""
        ckpt = self.state.ckpt
        b = ckpt.last_committed(st)
        if b is None:
            b = 0 if ckpt.last_planned(st) is not None else None
        off = ckpt.offset(st, b) if b is not None else None
        if off is not None:
            return off.position
        if st.start.offset is not None:
            return BinlogOffset.from_dict(st.start.offset)
        return None  # a snapshot not begun: nothing to resume

    def _retake_purged(self, st: TableState, what: str) -> None:
        """The table taken again because its binlog was purged (``binlog.purged.behavior:
        resnapshot``): its target emptied, a snapshot from the start."""
        if self.state.emptying_hits_others(st):
            raise BinlogUnavailable(
                f"{what}; its target {st.target} is shared with other tables, so it cannot be "
                "emptied and reloaded alone",
                fix="empty the target and start over with a new checkpoint.location")
        log.warning("%s: emptying %s and taking the table again (binlog.purged.behavior: "
                    "resnapshot)", what, st.target)
        sink = self.state.sink_for(st)
        try:
            last = sink.last_batch_id()
            sink.empty()
        finally:
            sink.close()
        # taken from the start (old-schema rows from the lost binlog cannot be read any more)
        self.next_generation(st, last, Start(), "resnapshot: binlog purged")
