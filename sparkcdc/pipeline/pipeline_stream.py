"""The pipeline's stream: one Spark streaming query over every table of the pipeline,
whatever their number and whatever the sink.

Its tables are listed, with their generations and schemas, in a members file the source
reads before every batch (``scan.tables.file``), so tables join, leave and are taken again
without the query restarting. Each micro-batch is split by table; a table's schema changes
and TRUNCATEs in it are applied between its rows (``stream_schema.py``); the targets are
written at once, from the driver or from Spark tasks (``write.on``), each with its own batch
id in the same commit as its rows. A change the stream cannot make itself is handed to the
runner's loop (``HandedToLoop``). ``Runner`` takes these methods as a mixin: they share its
state (tables, runs, checkpoint, locks).
"""

from __future__ import annotations

import logging
import os

import pyarrow as pa

from sparkcdc.apply import apply_arrow
from sparkcdc.core.offsets import BinlogOffset
from sparkcdc.core.records import DDL, TRUNCATE
from sparkcdc.core.schema import TableId, TableSchema
from sparkcdc.errors import SchemaChangeStop, SparkCDCError
from sparkcdc.mysql import online_schema
from sparkcdc.mysql.binlog.reader import load_table_schema
from sparkcdc.mysql.ddl import table_fate
from sparkcdc.mysql.discovery import filled_by_server
from sparkcdc.mysql.offsets import current_offset
from sparkcdc.mysql.snapshot import read_table
from sparkcdc.mysql.types import arrow_schema
from sparkcdc.pipeline import schema_change as sc
from sparkcdc.pipeline import targets as _targets
from sparkcdc.pipeline.checkpoint import CaptureStatus, Gone, Start, TableState, write_json
from sparkcdc.pipeline.routing import Shaper
from sparkcdc.pipeline.stream_schema import add_renames, conform
from sparkcdc.pipeline.table_run import TableRun, note_emit_lag
from sparkcdc.spark import offset_view as ov
from sparkcdc.spark.arrow_batches import decode_tables, from_ipc, to_ipc

log = logging.getLogger("sparkcdc.pipeline")


DONE, LOOP, REKEY = "done", "loop", "rekeyed"  # what became of a schema change in the stream


class HandedToLoop(Exception):
    """Fails a micro-batch of the pipeline's stream whose change the loop must make
    (``Runner._defer``)."""


class PipelineStream:
    """The pipeline's stream, as ``Runner`` runs it (a mixin of the runner)."""

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

    # -- the pipeline's stream: every table that can, in one query -----------------------

    def _from_own_stream(self, st: TableState) -> None:
        """A table a stream of its own read (a checkpoint from before every table took the
        pipeline's stream) joins it: from the binlog offset its target's last batch ended
        at when its snapshot was done there (the stream then reads its changes from there,
        and carries the schema changes since), else taken again from the start. A DDL
        whose old-schema rows were still to apply (``gap``) is read again the same way,
        from where they start."""
        sink, last, offset, snapshot_done = self._halt(st)
        try:
            if st.gap:
                since = st.gap["from"]
                st.schema, st.columns = st.gap["schema"], st.gap["columns"] or st.columns
                st.gap = None
            else:
                since = self._target_position(st, offset, snapshot_done)
            if since is None:
                self._empty_for_retake(st, sink, last, f"table {st.table} joins the "
                                       "pipeline's stream in its snapshot")
        finally:
            sink.close()
        st.start = Start(since, joins=True) if since is not None else Start()
        log.warning("table %s leaves its stream of its own for the pipeline's stream (%s)",
                    st.table, f"from {since['file']}:{since['pos']}" if since else
                    "taken again")
        st.generation += 1
        st.batch_base = (last + 1) if last is not None else max(0, st.batch_base)

    def _has_own_stream(self, st: TableState) -> bool:
        """Whether a stream of its own read the table (a checkpoint from before every table
        took the pipeline's stream): it joins the pipeline's stream at its next start."""
        return st.group is None and self.ckpt.last_planned(st) is not None

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
        run.published = sink.publish(self.spark)  # a wrong catalog entry fails here
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
            "schemas": {t: r.schema.to_dict() for t, r in sorted(members.items())},
            # tables that join from a binlog offset, without a snapshot
            "since": {t: r.state.start.offset for t, r in sorted(members.items())
                      if r.state.start.joins},
            # tables read again in part while they stream (``sparkcdc snapshot --where``)
            "rereads": {t: r.state.reread for t, r in sorted(members.items())
                        if r.state.reread}})
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
                self._write_rows(run, rows, batch_id, run.shaper.spec(run.keys), empty_first)
                self._note_gone(run)

        def fn(df, batch_id):
            batch_id = int(batch_id)
            members = self._group_members
            work = [(members[t], ch) for t, ch in decode_tables(df.toArrow()).items()
                    if t in members and t not in self._deferred
                    and members[t].state.gone is None]  # (its rows after that: not its own)
            if self._writes_on_executors():
                ready = [(run, *p) for run, ch in work
                         if (p := prepare(run, ch, batch_id)) is not None]
                self._write_on_executors(ready, batch_id)
                for run, _rows, _empty in ready:
                    self._note_gone(run)
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
        if self._sink_kind() != "merge":
            return False  # a changelog is written by Spark's own writer, from the driver
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

        by_target: dict[str, list] = {}
        runs: dict[str, list] = {}
        for run, rows, empty_first in ready:
            if self.runs.get(run.state.table) is not run:
                continue
            rows = conform(rows, run.rows_schema)
            ipc = to_ipc(rows).to_pybytes()
            for target in self._targets(run.state):  # each target of a fanned-out table
                by_target.setdefault(target, []).append(
                    (run.state.app_id, ipc, run.state.batch_base + batch_id,
                     run.shaper.spec(run.keys), empty_first, self._creation(run.state.table)))
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
            for run, rows in runs.get(target, ()):
                run.change_rows[batch_id] = rows.num_rows
                note_emit_lag(run, rows)
                self._after_batch(run, rows, run.state.batch_base + batch_id)

    def _in_stream_changes(self, run: TableRun, changes, batch_id: int):
        """A table's events in a micro-batch of the pipeline's stream, applied in binlog
        order (pipeline/stream_schema.py): its rows shaped like the target afterwards and
        whether a TRUNCATE empties the target first; None when the change is one the loop
        must make (a new key, a change during the snapshot, the behavior ``exception``)."""
        from sparkcdc.pipeline.stream_schema import after_seq, before_seq, conform

        st = run.state
        run.gone = None
        self._from_start(run, batch_id)
        behavior = self.settings.schema_change_behavior
        statements = list(st.pending_ddl or [])
        formerly: dict[str, list[str]] = {}
        cut = None
        fill: set[str] = set()  # columns added with values the server gave its rows
        for ev in sorted(changes.events, key=lambda e: int(e["seq"])):
            if ev["kind"] == DDL:
                fate = table_fate(ev["statement"], ev.get("use"), st.table)
                if fate is not None and self._swapped(st, ev["statement"], ev.get("use")):
                    fate = None  # an online schema change tool's swap: an ALTER of the table
                if fate is not None:  # dropped or renamed: the rows before it are its last
                    run.gone = self._gone_in_stream(run, fate, ev, batch_id)
                    statements = []
                    break
                statements.append(ev["statement"])
            elif ev["kind"] == TRUNCATE:
                what = f"table {st.table} was truncated ({ev['statement'].strip()[:120]})"
                stop = self._truncate_stop(st, what)
                if stop is not None:
                    return self._defer(st, what, stop)
                if behavior in ("lenient", "ignore"):
                    log.warning("%s: the target keeps its rows (%s)", what, behavior)
                    continue
                if "t" in self.defn.source.extras.skipped_operations:
                    log.warning("%s: the target keeps its rows (debezium.skipped.operations "
                                "has t)", what)
                    continue
                if not self._streaming_at(st, batch_id):  # its chunks are of before it
                    return self._defer(st, what)
                log.warning("%s: emptying %s; the rows after it follow", what, st.target)
                cut, st.note = int(ev["seq"]), f"{behavior}: truncated"
            else:
                new = TableSchema.from_dict(ev["schema"])
                how = self._evolve_in_stream(run, new, statements, formerly, batch_id, fill)
                if how == REKEY:  # the rows before it are written; the loop goes on from it
                    run.gone = Gone(REKEY, ev["offset"], int(ev["seq"]), schema=ev["schema"],
                                    statements=tuple(statements))
                    statements = []
                    break
                if how == LOOP:
                    return self._defer(st, f"table {st.table} changed")
                statements = []
        if statements and run.gone is None:
            now = self._settled_schema(st, batch_id)
            if now is not None:
                how = self._evolve_in_stream(run, now, statements, formerly, batch_id, fill)
                if how != DONE:  # (a new key with no row after it: taken again)
                    return self._defer(st, f"table {st.table} changed")
                statements = []
        if (statements or None) != st.pending_ddl:
            st.pending_ddl = statements or None
            self._save()
        parts = [conform(self._transformed(run, p), run.rows_schema, formerly)
                 for p in changes.parts]
        fill &= {c["name"] for c in st.columns}  # those the target took
        if fill:
            parts.append(self._filled_rows(run, sorted(fill)))
        rows = (pa.concat_tables(parts) if parts else run.rows_schema.empty_table())
        if cut is not None:
            rows = after_seq(rows, cut)
        if run.gone is not None:
            rows = before_seq(rows, run.gone.seq)
        return rows, cut is not None

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
            run.schema = TableSchema.from_dict(st.schema)
            run.rows_schema = self._rows_schema(st, run.shaper)
            log.info("table %s: batch %d again, from the schema it began with", st.table,
                     at[1])
            return
        st.batch_start = {"at": at, "schema": st.schema, "columns": st.columns,
                          "pending_ddl": st.pending_ddl}

    def _gone_in_stream(self, run: TableRun, fate: tuple, ev: dict, batch_id: int) -> Gone:
        """A DDL in the stream dropped or renamed the table: what the loop is to do
        (``_follow_gone``) once the rows before it are written (a table renamed during its
        snapshot is taken again under its new name), or, under ``exception``, the stop."""
        st = run.state
        kind, new_name = fate
        what = (f"table {st.table} was renamed to {new_name}" if kind == "renamed"
                else f"table {st.table} was dropped")
        if self.settings.schema_change_behavior == "exception":
            self._defer(st, what, SchemaChangeStop(
                f"{what} on the source",
                fix="schema.change.behavior is 'exception': restore the table, or choose "
                    "another behavior (the target is then kept as it is)"))
        return Gone(kind, ev["offset"], int(ev["seq"]), to=new_name,
                    streaming=self._streaming_at(st, batch_id))

    def _note_gone(self, run: TableRun) -> None:
        """After the table's last rows are written: the drop or rename the batch carried
        goes into its state, for the loop (``_follow_gone``). The batch commits only after
        this, so a crash before it replays the batch, and with it the DDL."""
        if run.gone is not None and run.state.gone is None:
            run.state.gone = run.gone
            self._save()

    def _follow_gone(self, found: dict | None = None, reconcile: bool = True) -> None:
        """Tables the pipeline's stream saw dropped, renamed or given a new key: a table
        renamed to a name ``tables`` matches and routes to the same target goes on under it
        from the RENAME (``_go_on_as``; nothing read again); a table with a new key goes on
        from the change with it (``_rekeyed``); otherwise its stream stops and its target
        is kept. Then the tables are looked up again: a new name, or the name created
        again, is a new table."""
        gone = [st for st in self.states.values() if st.status == CaptureStatus.ACTIVE and st.gone]
        if not gone:
            return

        found = self.discover(fresh=True) if found is None else found
        for st in gone:
            g, st.gone = st.gone, None
            if g.kind == REKEY:
                assert g.schema is not None
                self._rekeyed(st, TableSchema.from_dict(g.schema), list(g.statements),
                              BinlogOffset.from_dict(g.at))
                continue
            if g.kind == "renamed" and g.to is not None:
                st.note = f"renamed to {g.to}"
                if self._may_go_on_as(st, g.to, found):
                    sink, last, _offset, _done = self._halt(st)
                    try:
                        self._go_on_as(st, g.to, found[g.to], sink, last, g.streaming,
                                       BinlogOffset.from_dict(g.at))
                    finally:
                        sink.close()
                    continue
            self._dropped(st, st.note if g.kind == "renamed" else "")
        self._save()
        if reconcile:
            self._reconcile(found)

    def _evolve_in_stream(self, run: TableRun, new: TableSchema, statements: list[str],
                          formerly: dict, batch_id: int, fill: set[str]) -> str:
        """The target changed for the table's new schema, as ``schema.change.behavior``
        says (``DONE``). ``REKEY``: a new primary key, which the loop makes after the rows
        before it (``_rekeyed``); ``LOOP``: the loop must deal with it now (the behavior
        ``exception``, a change during the snapshot: ``_defer``). Added columns whose
        values the server gave the rows it held go into ``fill``."""

        st = run.state
        old = TableSchema.from_dict(st.schema)
        d = sc.diff(old, new)
        if not d:
            return DONE
        d = d.with_renames(statements)
        behavior = self.settings.schema_change_behavior
        if behavior == "exception" or not self._streaming_at(st, batch_id):
            return LOOP
        if d.key_changed:
            return REKEY
        log.warning("table %s changed: %s (%s)", st.table, d.describe(), behavior)
        with self._locks(st):
            if self.runs.get(st.table) is not run:
                return DONE  # stopped meanwhile: its rows are not written either
            st.columns = self._evolve_columns(st, old, new, d, run.sink, behavior, statements)
        add_renames(formerly, d.renamed)
        if any(self._swapped(st, s) for s in statements):
            # the swapped-in table is the tool's copy, every value of it possibly new
            fill.update(c["name"] for c in st.columns)
        elif d.added:
            fill.update(filled_by_server(self._source_config().connection, new.table_id,
                                         list(d.added)))
        st.schema, run.schema = new.to_dict(), new
        st.note = f"{behavior}: {d.describe()}"
        run.rows_schema = self._rows_schema(st, run.shaper)
        self._save()
        return DONE

    def _swapped(self, st: TableState, statement: str, use: str | None = None) -> bool:
        """Whether a DDL statement (run in database ``use``) is an online schema change
        tool's swap of the table, read as an ALTER of it
        (``scan.parse.online.schema.changes.enabled``)."""
        return (self._source_config().online_schema_changes
                and online_schema.swap(statement, use, st.table))

    def _filled_rows(self, run: TableRun, columns: list[str]) -> pa.Table:
        """The table's current rows, read from the source, as changes that come after
        every row of the batch: the back-fill of ``columns``, added with a default (or NOT
        NULL, or generated) that the server gave the rows it held without a row event.
        Written in the batch's own commit, so a crash before it redoes both. The binlog's
        later changes carry whole rows, so the target converges on the source as after a
        snapshot: a row changed since is overwritten by its change, one deleted since is
        deleted by it. The whole table passes through the driver's memory once."""
        from sparkcdc.pipeline.stream_schema import conform
        from sparkcdc.spark.rows import COLUMNS, POST, output_schema, snapshot_batches

        st = run.state
        conn = self._source_config().connection
        schema = load_table_schema(conn, run.schema.table_id)  # as it is now
        with conn.connect() as c:
            now = current_offset(c)  # after the batch's end: these rows sort after its rows
        out = output_schema(arrow_schema(schema))
        parts = []
        for chunk in read_table(conn, schema):
            rows = pa.Table.from_batches(  # updates: keys the target holds, not new ones
                list(snapshot_batches(chunk, schema, now, out, COLUMNS, kind=POST)), out)
            parts.append(conform(self._transformed(run, rows), run.rows_schema))
        n = sum(p.num_rows for p in parts)
        log.warning("table %s: %s added with values for the rows it held; %d current row(s) "
                    "read from the source to fill them in %s", st.table, ", ".join(columns), n,
                    st.target)
        return pa.concat_tables(parts) if parts else run.rows_schema.empty_table()

    def _streaming_at(self, st: TableState, batch_id: int) -> bool:
        """Whether the table's snapshot was done when the stream's batch began, or it
        joins in this batch from a binlog offset (it has no snapshot)."""
        off = self.ckpt.offset(st, batch_id - 1) if batch_id > 0 else None
        if off is not None and ov.table_phase(off, st.table) == "done":
            return True
        now = self.ckpt.offset(st, batch_id)
        return now is not None and ov.table_entry(now, st.table).get("since") is not None

    def _settled_schema(self, st: TableState, batch_id: int) -> TableSchema | None:
        """The table's schema at the end of the batch, for DDL that no row of the batch
        followed: information_schema's, when the binlog has not moved past the batch's end
        while it was read (so no later DDL is in it); None otherwise (the statements wait
        for the table's next rows, which carry their schema)."""
        from sparkcdc.mysql.binlog.reader import load_table_schema
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

    def _defer(self, st: TableState, what: str, stop: Exception | None = None) -> None:
        """Hand the table's change to the loop: the micro-batch fails (``HandedToLoop``),
        so Spark commits none of it; the loop (``_examine_failure``) takes the table again
        (``_retake``: a change during its snapshot, a new key no row followed) or raises
        ``stop`` (the behavior ``exception``), then restarts the stream, which replays the
        batch. Targets that wrote the batch already skip it then, by its batch id."""

        def later() -> None:
            if stop is not None:
                raise stop
            found = self.discover(fresh=True)
            if st.table not in found:
                self._reconcile(found)
                return
            self._retake(st, found[st.table], what)

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


def write_target(sink_type: str, options: dict, target: str, items: list) -> tuple[str, str]:
    """In a Spark task: write one target's tables of a batch, each item ``(app id, rows as
    Arrow IPC, batch id, apply spec, empty first, creation options)`` with its batch id in
    the same commit (a target that has the batch already skips it, as on the driver).
    Returns the target and where it ran (the task's working directory: the executor's)."""

    for app_id, ipc, batch, spec, empty_first, creation in items:
        with _targets.create_sink(sink_type, {**options, **creation}, target, app_id) as sink:
            apply_arrow(sink, from_ipc(ipc), batch, spec, empty_first)
    return target, os.getcwd()
