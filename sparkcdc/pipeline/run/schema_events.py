"""Schema changes, TRUNCATEs, drops and renames met inside a micro-batch of the pipeline's
stream, in binlog order between a table's rows (pipeline/run/schema/in_stream.py): the target
evolved between them, the rows shaped like it afterwards. What the stream cannot make
itself (a change during the snapshot, a new key no row followed, the behavior
``exception``) is handed to the loop (``LoopRequests``); a drop, a rename or a new key
becomes the table's ``Gone`` once the rows before it are written, for the loop to follow.
"""

from __future__ import annotations

import logging
from typing import Any

import pyarrow as pa

from sparkcdc.core.schema import TableId, TableSchema
from sparkcdc.core.table_events import (
    Ddl,
    NewSchema,
    SchemaChanged,
    TableDropped,
    TableEvent,
    TableRenamed,
    TablesSwapped,
    TableTruncated,
)
from sparkcdc.errors import SchemaChangeStop, SchemaError, SparkCDCError
from sparkcdc.mysql.port import arrow_schema
from sparkcdc.pipeline.run.checkpoint import Gone, TableState
from sparkcdc.pipeline.run.schema import diff as sc
from sparkcdc.pipeline.run.schema.in_stream import add_renames, after_seq, before_seq, conform
from sparkcdc.pipeline.run.shapes import Shapes
from sparkcdc.pipeline.run.state import RunState, StopRun, TakeAgain, schema_of
from sparkcdc.pipeline.run.table_run import TableRun

log = logging.getLogger("sparkcdc.pipeline")


DONE, LOOP, REKEY = "done", "loop", "rekeyed"  # what became of a schema change in the stream


class SchemaInStream:
    """A table's events in a micro-batch, applied to its target in binlog order."""

    def __init__(self, state: RunState, shapes: Shapes):
        self.state = state
        self.shapes = shapes

    def apply_events(self, run: TableRun, changes: Any,
                     batch_id: int) -> tuple[pa.Table, bool]:
        """A table's events in a micro-batch of the pipeline's stream, applied in binlog
        order: its rows shaped like the target afterwards and whether a TRUNCATE empties
        the target first. A change the loop must make (a new key no row followed, a change
        during the snapshot, the behavior ``exception``) is handed to it (this raises
        ``HandedToLoop``)."""
        st = run.state
        settings = self.state.settings
        run.gone = None
        self._from_start(run, batch_id)
        behavior = settings.schema_change_behavior
        ddls = self.state.kept_ddl(st, st.pending_ddl or [])  # waiting for their schema
        formerly: dict[str, list[str]] = {}
        cut = None
        fill: set[str] = set()  # columns added with values the server gave its rows
        for ev in sorted(changes.events, key=lambda e: e.seq):
            if isinstance(ev, TablesSwapped) and self._online_swaps():
                ddls.append(ev.ddl)  # an online schema change tool's swap: an ALTER of it
            elif isinstance(ev, (TableDropped, TableRenamed, TablesSwapped)):
                run.gone = self._gone_in_stream(run, ev, batch_id)  # its rows before: its last
                ddls = []
                break
            elif isinstance(ev, SchemaChanged):
                ddls.append(ev.ddl)
            elif isinstance(ev, TableTruncated):
                what = f"table {st.table} was truncated ({ev.statement.strip()[:120]})"
                stop = self._truncate_stop(st, what)
                if stop is not None:
                    self.state.handed.hand(StopRun(st, what, stop))
                if behavior in ("lenient", "ignore"):
                    log.warning("%s: the target keeps its rows (%s)", what, behavior)
                    continue
                if "t" in self.state.defn.source.extras.skipped_operations:
                    log.warning("%s: the target keeps its rows (debezium.skipped.operations "
                                "has t)", what)
                    continue
                if not self.state.streaming_at(st, batch_id):  # its chunks are of before it
                    self.state.handed.hand(TakeAgain(st, what))
                log.warning("%s: emptying %s; the rows after it follow", what, st.target)
                cut, st.note = ev.seq, f"{behavior}: truncated"
            elif isinstance(ev, NewSchema):
                how = self._evolve(run, ev.schema, ddls, formerly, batch_id, fill)
                if how == REKEY:  # the rows before it are written; the loop goes on from it
                    run.gone = Gone(REKEY, ev.offset.to_dict(), ev.seq,
                                    schema=ev.schema.to_dict(),
                                    statements=tuple(d.statement for d in ddls))
                    ddls = []
                    break
                if how == LOOP:
                    self.state.handed.hand(TakeAgain(st, f"table {st.table} changed"))
                ddls = []
        if ddls and run.gone is None:
            now = self._settled_schema(st, batch_id)
            if now is not None:
                how = self._evolve(run, now, ddls, formerly, batch_id, fill)
                if how != DONE:  # (a new key with no row after it: taken again)
                    self.state.handed.hand(TakeAgain(st, f"table {st.table} changed"))
                ddls = []
        kept = [d.statement for d in ddls] or None
        if kept != st.pending_ddl:
            st.pending_ddl = kept
            self.state.save()
        parts = [conform(self.shapes.transformed(run, p), run.rows_schema, formerly)
                 for p in changes.parts]
        fill &= {c["name"] for c in st.columns or []}  # those the target took
        if fill:
            parts.append(self._filled_rows(run, sorted(fill)))
        rows = (pa.concat_tables(parts) if parts else run.rows_schema.empty_table())
        if cut is not None:
            rows = after_seq(rows, cut)
        if run.gone is not None:
            rows = before_seq(rows, run.gone.seq)
        return rows, cut is not None

    def note_gone(self, run: TableRun) -> None:
        """After the table's last rows are written: the drop or rename the batch carried
        goes into its state, for the loop (``Runner._follow_gone``). The batch commits only
        after this, so a crash before it replays the batch, and with it the DDL."""
        if run.gone is not None and run.state.gone is None:
            run.state.gone = run.gone
            self.state.save()

    def _from_start(self, run: TableRun, batch_id: int) -> None:
        """Make a batch's schema changes start from the table's schema as the batch began.
        A batch that changed them and is replayed (its target committed it, Spark's commit
        was lost to a crash) finds the state its first attempt saved, the schema at the
        batch's end: its first rows would read as the change undone (a column added by the
        batch, dropped, then added again empty, while the target skips the rows that filled
        it, by batch id). So the state keeps the fields as the batch began
        (``TableState.batch_start``, saved with the first change the batch makes) and a
        replay goes back to them; the target's own changes are idempotent
        (sinks/evolution.py)."""
        st = run.state
        at = [st.generation, st.batch_base + batch_id]
        b = st.batch_start
        if b is not None and b["at"] == at:  # a replay: as its first attempt began
            st.schema, st.columns, st.pending_ddl = b["schema"], b["columns"], b["pending_ddl"]
            run.schema = schema_of(st)
            run.rows_schema = self.shapes.rows_schema(st, run.shaper)
            log.info("table %s: batch %d again, from the schema it began with", st.table,
                     at[1])
            return
        st.batch_start = {"at": at, "schema": st.schema, "columns": st.columns,
                          "pending_ddl": st.pending_ddl}

    def _gone_in_stream(self, run: TableRun, ev: TableEvent, batch_id: int) -> Gone:
        """A DDL in the stream dropped or renamed the table (a tool's swap read as the
        rename it also is): what the loop is to do (``Runner._follow_gone``) once the rows
        before it are written (a table renamed during its snapshot is taken again under its
        new name), or, under ``exception``, the stop."""
        st = run.state
        new_name = str(ev.to) if isinstance(ev, (TableRenamed, TablesSwapped)) else None
        kind = "dropped" if new_name is None else "renamed"
        what = (f"table {st.table} was renamed to {new_name}" if new_name is not None
                else f"table {st.table} was dropped")
        if self.state.settings.schema_change_behavior == "exception":
            self.state.handed.hand(StopRun(st, what, SchemaChangeStop(
                f"{what} on the source",
                fix="schema.change.behavior is 'exception': restore the table, or choose "
                    "another behavior (the target is then kept as it is)")))
        return Gone(kind, ev.offset.to_dict(), ev.seq, to=new_name,
                    streaming=self.state.streaming_at(st, batch_id))

    def _truncate_stop(self, st: TableState, what: str) -> SparkCDCError | None:
        """Why a TRUNCATE of the table stops the pipeline instead of reaching its target:
        the behavior is ``exception``, or the target would have to be emptied and other
        tables write into it too. None when it may go on."""
        behavior = self.state.settings.schema_change_behavior
        if behavior == "exception":
            return SchemaChangeStop(what, fix="schema.change.behavior is 'exception': choose "
                                              "evolve or try_evolve to empty the target too, "
                                              "or lenient or ignore to keep its rows")
        if behavior in ("evolve", "try_evolve") and self.state.emptying_hits_others(st):
            return SchemaError(f"{what}, and its target {st.target} is shared with other "
                               "tables",
                               fix="use schema.change.behavior: lenient to keep the rows, or "
                                   "empty the target yourself and restart")
        return None

    def _evolve(self, run: TableRun, new: TableSchema, ddls: list[Ddl],
                formerly: dict, batch_id: int, fill: set[str]) -> str:
        """The target changed for the table's new schema, as ``schema.change.behavior``
        says (``DONE``). ``REKEY``: a new primary key, which the loop makes after the rows
        before it (``TableLifecycle.go_on_rekeyed``); ``LOOP``: the loop must deal with it now
        (the behavior ``exception``, a change during the snapshot). Added columns whose
        values the server gave the rows it held go into ``fill``."""
        state = self.state
        st = run.state
        old = schema_of(st)
        d = sc.diff(old, new)
        if not d:
            return DONE
        d = d.with_renames(r for ddl in ddls for r in ddl.renames)
        behavior = state.settings.schema_change_behavior
        if behavior == "exception" or not state.streaming_at(st, batch_id):
            return LOOP
        if d.key_changed:
            return REKEY
        log.warning("table %s changed: %s (%s)", st.table, d.describe(), behavior)
        with state.locks(st):
            if not state.running(run):
                return DONE  # stopped meanwhile: its rows are not written either
            st.columns = self.shapes.evolve_columns(st, old, new, d, run.sink, behavior,
                                                    tuple(ddl.statement for ddl in ddls))
        add_renames(formerly, d.renamed)
        if self._online_swaps() and any(ddl.swap for ddl in ddls):
            # the swapped-in table is the tool's copy, every value of it possibly new
            fill.update(c["name"] for c in st.columns)
        elif d.added:
            fill.update(state.source().filled_by_server(new.table_id, list(d.added)))
        st.schema, run.schema = new.to_dict(), new
        st.note = f"{behavior}: {d.describe()}"
        run.rows_schema = self.shapes.rows_schema(st, run.shaper)
        state.save()
        return DONE

    def _online_swaps(self) -> bool:
        """Whether an online schema change tool's swap of a table is read as an ALTER of
        it (``scan.parse.online.schema.changes.enabled``), not as the rename it also is."""
        return bool(self.state.source_config().online_schema_changes)

    def _filled_rows(self, run: TableRun, columns: list[str]) -> pa.Table:
        """The table's current rows, read from the source, as changes that come after
        every row of the batch: the back-fill of ``columns``, added with a default (or NOT
        NULL, or generated) that the server gave the rows it held without a row event.
        Written in the batch's own commit, so a crash before it redoes both. The binlog's
        later changes carry whole rows, so the target converges on the source as after a
        snapshot: a row changed since is overwritten by its change, one deleted since is
        deleted by it. The whole table passes through the driver's memory once."""
        from sparkcdc.spark.rows import COLUMNS, POST, output_schema, snapshot_batches

        st = run.state
        source = self.state.source()
        schema = source.schema_now(run.schema.table_id)
        now = source.position_now()  # after the batch's end: these rows sort after its rows
        out = output_schema(arrow_schema(schema))
        parts = []
        for chunk in source.current_rows(schema):
            rows = pa.Table.from_batches(  # updates: keys the target holds, not new ones
                list(snapshot_batches(chunk, schema, now, out, COLUMNS, kind=POST)), out)
            parts.append(conform(self.shapes.transformed(run, rows), run.rows_schema))
        n = sum(p.num_rows for p in parts)
        log.warning("table %s: %s added with values for the rows it held; %d current row(s) "
                    "read from the source to fill them in %s", st.table, ", ".join(columns), n,
                    st.target)
        return pa.concat_tables(parts) if parts else run.rows_schema.empty_table()

    def _settled_schema(self, st: TableState, batch_id: int) -> TableSchema | None:
        """The table's schema at the end of the batch, for DDL that no row of the batch
        followed: information_schema's, when the binlog has not moved past the batch's end
        while it was read (so no later DDL is in it); None otherwise (the statements wait
        for the table's next rows, which carry their schema)."""
        off = self.state.ckpt.offset(st, batch_id)
        if off is None:
            return None
        end = off.position
        try:
            before, schema, after = self.state.source().schema_between_positions(
                TableId.parse(st.table))
        except SparkCDCError:
            return None  # gone (renamed or dropped: discovery sees it), or the server away
        if (before.file, before.pos) == (after.file, after.pos) == (end.file, end.pos):
            return schema
        return None
