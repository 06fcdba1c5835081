"""Changes of the source the runner's loop deals with: a TRUNCATE, a rename or a drop of a
table found by discovery, a binlog purged while the pipeline was stopped, and schema changes
of a table in a stream of its own (found in the binlog with ``SHOW BINLOG EVENTS``, the old
schema's rows applied before the target changes: the gap). The pipeline's stream carries its
tables' schema changes and TRUNCATEs itself (``pipeline_stream.py``) and hands the rest here
(a change during a snapshot, a new key, ``exception``). ``Runner`` takes these methods as a
mixin: they share its state.
"""

from __future__ import annotations

import logging

from sparkcdc.core.schema import TableSchema
from sparkcdc.errors import (
    BinlogUnavailable,
    SchemaChangeStop,
    SchemaError,
    SparkCDCError,
)
from sparkcdc.pipeline import schema_change as sc
from sparkcdc.pipeline.checkpoint import TableState
from sparkcdc.pipeline.routing import shaper_for, target_of
from sparkcdc.spark import offset_view as ov

log = logging.getLogger("sparkcdc.pipeline")

from sparkcdc.pipeline.column_evolution import evolve_target


class SourceChanges:
    """What the runner does when a table changed on the source (a mixin of the runner)."""

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

    def _truncated(self, st: TableState, ddl) -> None:
        behavior = self.settings.schema_change_behavior
        what = f"table {st.table} was truncated ({ddl.statement.strip()[:120]})"
        stop = self._truncate_stop(st, what)
        if stop is not None:
            raise stop
        st.ddl_seen = ddl.end.to_dict()
        if behavior in ("lenient", "ignore"):
            log.warning("%s: the target keeps its rows (%s)", what, behavior)
            self._save()
            return
        log.warning("%s: emptying %s and taking the table again", what, st.target)
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
            if not self._may_go_on_as(st, new_name, found):
                return
            if snapshot_done and after < ddl.start:
                self._apply_gap(st, {
                    "from": after.to_dict(), "to": ddl.start.to_dict(), "schema": st.schema,
                    "batch": (last + 1) if last is not None else st.batch_base,
                    "assigner": offset["assigner"] if offset else None,
                    "generation": st.generation, "columns": st.columns}, save=False)
            self._go_on_as(st, new_name, found[new_name], sink, last, snapshot_done, ddl.end)
        finally:
            sink.close()

    def _may_go_on_as(self, st: TableState, new_name: str,
                      found: dict[str, TableSchema]) -> bool:
        """Whether a table renamed to ``new_name`` goes on under it: ``tables`` matches the
        new name, it routes to the same target, and no active table has that name."""
        other = self.states.get(new_name)
        if (new_name not in found or target_of(self.defn, new_name) != st.target
                or (other is not None and other.status == "active")):
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
        nst = TableState(new_name, st.target, app_id=self._app_id(new_name))
        if other is not None:  # the name was captured before: its next generation
            nst = TableState(new_name, st.target, other.generation + 1,
                             batch_base=self._next_base(other), app_id=other.app_id)
        nst.columns = st.columns
        d = sc.diff(old_schema, new_schema)
        if any((d.added, d.dropped, d.modified)):
            nst.columns = self._evolve_columns(nst, old_schema, new_schema, d, sink, behavior)
        if snapshot_done:
            # into the pipeline's stream when it can take the table (``_joins_group``)
            nst.start = {"mode": "specific-offset", "offset": start.to_dict(), "joins": True}
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
        st.status = "dropped"
        st.note = note or "dropped on the source"
        self._save()

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
