"""Changes of the source the runner's loop deals with, once the pipeline's stream has
written the rows before them or handed them over (``pipeline_stream.py``): a table taken
again (a change or a TRUNCATE during its snapshot, a new key with no row after it), a new
primary key, a table renamed into the same target or dropped, a binlog purged while the
pipeline was stopped. Every one of them is known from the stream, in binlog order, or from
discovery; nothing reads the binlog's statements. ``Runner`` takes these methods as a
mixin: they share its state.
"""

from __future__ import annotations

import logging

from sparkcdc.core.offsets import BinlogOffset
from sparkcdc.core.schema import TableSchema
from sparkcdc.errors import (
    BinlogUnavailable,
    SchemaChangeStop,
    SchemaError,
    SparkCDCError,
)
from sparkcdc.mysql.connection import retry_lost
from sparkcdc.mysql.offsets import current_offset
from sparkcdc.pipeline import schema_change as sc
from sparkcdc.pipeline.checkpoint import CaptureStatus, Start, TableState
from sparkcdc.pipeline.column_evolution import evolve_target
from sparkcdc.pipeline.routing import shaper_for, targets_of
from sparkcdc.spark import offset_view as ov

log = logging.getLogger("sparkcdc.pipeline")


class SourceChanges:
    """What the runner does when a table changed on the source (a mixin of the runner)."""

    def _read_now(self) -> None:
        """The server's binlog position now (``_now``): a run with nothing to do stops
        there, and a table gone from discovery is left to the stream until it has read
        that far."""

        conn = self._source_config().connection

        def read_now():
            with conn.connect() as c:
                return current_offset(c)

        self._now = retry_lost(conn, "reading the binlog position", read_now)

    def _truncate_stop(self, st: TableState, what: str) -> SparkCDCError | None:
        """Why a TRUNCATE of the table stops the pipeline instead of reaching its target:
        the behavior is ``exception``, or the target would have to be emptied and other
        tables write into it too. None when it may go on."""
        behavior = self.settings.schema_change_behavior
        if behavior == "exception":
            return SchemaChangeStop(what, fix="schema.change.behavior is 'exception': choose "
                                              "evolve or try_evolve to empty the target too, "
                                              "or lenient or ignore to keep its rows")
        if behavior in ("evolve", "try_evolve") and self._shared(st):
            return SchemaError(f"{what}, and its target {st.target} is shared with other "
                               "tables",
                               fix="use schema.change.behavior: lenient to keep the rows, or "
                                   "empty the target yourself and restart")
        return None

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
        if st.start.offset is not None:
            return BinlogOffset.from_dict(st.start.offset)
        return None  # a snapshot not begun: nothing to resume

    def _check_purged(self) -> None:
        """Before anything starts: a table whose position is in a binlog file the server
        purged fails with one message (``binlog.purged.behavior: fail``) or is taken again
        (``resnapshot``): its target emptied and reloaded, the other tables untouched."""
        files = None
        for table, st in list(self.states.items()):
            if st.status != CaptureStatus.ACTIVE:
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
        # taken from the start (old-schema rows from the lost binlog cannot be read any more)
        self._next_generation(st, last, Start(), "resnapshot: binlog purged")

    def _next_base(self, st: TableState) -> int:
        last = self._sink_for(st).last_batch_id()
        return (last + 1) if last is not None else st.batch_base

    def _may_go_on_as(self, st: TableState, new_name: str,
                      found: dict[str, TableSchema]) -> bool:
        """Whether a table renamed to ``new_name`` goes on under it: ``tables`` matches the
        new name, it routes to the same target, and no active table has that name."""
        other = self.states.get(new_name)
        if (new_name not in found or targets_of(self.defn, new_name) != self._targets(st)
                or (other is not None and other.status == CaptureStatus.ACTIVE)):
            log.warning("table %s was renamed to %s: %s", st.table, new_name,
                        "captured as a new table" if new_name in found
                        else "not matched by source.tables")
            return False
        return True

    def _go_on_as(self, st: TableState, new_name: str, new_schema: TableSchema, sink,
                  last: int | None, snapshot_done: bool, start) -> None:
        """The renamed table goes on into its target under ``new_name``, from ``start`` (a
        binlog offset at or after the RENAME; every row of the old name before it is in
        the target), with its target's columns changed for the new name's schema. Renamed
        during its snapshot, it is taken again instead."""
        behavior = self.settings.schema_change_behavior
        other = self.states.get(new_name)
        old_schema = TableSchema.from_dict(st.schema)
        nst = TableState(new_name, st.target, app_id=self._app_id(new_name),
                         targets=st.targets)
        if other is not None:  # the name was captured before: its next generation
            nst = TableState(new_name, st.target, other.generation + 1,
                             batch_base=self._next_base(other), app_id=other.app_id,
                             targets=st.targets)
        nst.columns = st.columns
        d = sc.diff(old_schema, new_schema)
        if any((d.added, d.dropped, d.modified)):
            nst.columns = self._evolve_columns(nst, old_schema, new_schema, d, sink, behavior)
        if snapshot_done:
            # it joins the pipeline's stream from there (the members file's ``since``)
            nst.start = Start(start.to_dict(), joins=True)
            how = "from the RENAME on"
        else:
            self._empty_for_retake(st, sink, last, f"table {st.table} renamed")
            how = "taken again (renamed during its snapshot)"
        nst.schema = new_schema.to_dict()
        nst.note = f"renamed from {st.table}"
        log.warning("table %s was renamed to %s: it goes on into %s, %s", st.table,
                    new_name, st.target, how)
        st.status = CaptureStatus.DROPPED
        st.group = None
        self.states[new_name] = nst
        self._save()
        self._start(nst, new_schema)

    def _dropped(self, st: TableState, note: str = "") -> None:
        if self.settings.schema_change_behavior == "exception":
            raise SchemaChangeStop(
                f"table {st.table} was dropped (or renamed) on the source",
                fix="schema.change.behavior is 'exception': restore the table, or choose "
                    "another behavior (the target is then kept as it is)")
        log.warning("table %s is gone from the source: its stream stops, target %s is kept",
                    st.table, st.target)
        self._stop_run(st)  # the pipeline's stream goes on without it
        st.group = None
        st.status = CaptureStatus.DROPPED
        st.note = note or "dropped on the source"
        self._save()

    # -- schema changes --------------------------------------------------------------------

    def _retake(self, st: TableState, new: TableSchema, what: str) -> None:
        """Take the table again with its schema of now: its target changed for it (as
        ``schema.change.behavior`` says), emptied, and snapshotted inside the pipeline's
        stream under a new generation. For a change or a TRUNCATE during its snapshot (its
        chunks were read before it), and a new key no row followed."""
        behavior = self.settings.schema_change_behavior
        old = TableSchema.from_dict(st.schema)
        d = sc.diff(old, new)
        if behavior == "exception":
            raise SchemaChangeStop(
                f"table {st.table} changed: {d.describe()}" if d else what,
                fix="schema.change.behavior is 'exception': revert the change, or choose "
                    "evolve, try_evolve, lenient or ignore and run again")
        sink, last, _offset, _done = self._halt(st)
        try:
            if d:
                st.columns = self._evolve_columns(st, old, new, d, sink, behavior)
            self._empty_for_retake(st, sink, last, what)
        finally:
            sink.close()
        log.warning("%s: emptying %s and taking the table again", what, st.target)
        self._next_generation(st, last, Start(),
                              f"{behavior}: {d.describe() or what} (taken again)", new)
        self._start(st, new)

    def _rekeyed(self, st: TableState, new: TableSchema, statements: list[str],
                 at) -> None:
        """A new primary key, met by the pipeline's stream at ``at`` after the table's
        snapshot: every row before it is in the target, which changes its columns for the
        new schema; the table goes on from ``at`` under a new generation, its changes
        applied by the new key (the target's rows are not rewritten)."""
        behavior = self.settings.schema_change_behavior
        old = TableSchema.from_dict(st.schema)
        d = sc.diff(old, new).with_renames(statements)
        sink, last, _offset, _done = self._halt(st)
        try:
            st.columns = self._evolve_columns(st, old, new, d, sink, behavior, statements)
        finally:
            sink.close()
        log.warning("table %s changed: %s (%s); it goes on from %s", st.table, d.describe(),
                    behavior, at)
        self._next_generation(st, last, Start(at.to_dict(), joins=True),
                              f"{behavior}: {d.describe()}", new)
        self._start(st, new)

    def _next_generation(self, st: TableState, last: int | None, start: Start, note: str,
                         schema: TableSchema | None = None) -> None:
        """The table's next generation, saved: it (re)joins the pipeline's stream from
        ``start``, its target's batch ids going on after ``last`` (the last one it has),
        with ``schema`` when it changed; nothing of the one before waits for it."""
        st.start = start
        st.group = None  # joins the pipeline's stream again, under the new generation
        st.generation += 1
        st.batch_base = (last + 1) if last is not None else st.batch_base
        if schema is not None:
            st.schema = schema.to_dict()
        st.pending_ddl = None
        st.gap = None
        st.reread = None  # the new generation reads every row
        st.note = note
        self._save()

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
            not applied and st.start.offset is not None)
        return sink, last, offset, snapshot_done

    @staticmethod
    def _target_position(st: TableState, offset, snapshot_done: bool) -> dict | None:
        """From ``_halt``'s answer: the binlog offset the table's target stands at, from
        which the table can go on without a snapshot (its last batch's end, or its start
        when nothing was applied since); None when its snapshot was not done there."""
        if not snapshot_done:
            return None
        return ov.position(offset).to_dict() if offset is not None else st.start.offset

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
        mine = set(self._targets(st))
        return any(mine & set(self._targets(o)) and o.table != st.table
                   and o.status == CaptureStatus.ACTIVE for o in self.states.values())

    def _evolve_columns(self, st: TableState, old: TableSchema, new: TableSchema,
                        d: sc.Diff, sink, behavior: str, statements=()) -> list:
        """Change the target as ``behavior`` says; the target's columns afterwards
        (``column_evolution.evolve_target``)."""
        t = shaper_for(self.defn, st.table).transform
        transformed = t is not None and t.shapes_rows
        return evolve_target(st.table, st.target, st.columns, new, d, sink, behavior,
                             transformed, self.defn.source.extras, tuple(statements))
