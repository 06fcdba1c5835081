"""The pipeline's stream: one Spark streaming query over every table of the pipeline,
whatever their number and whatever the sink.

Its tables are listed, with their generations and schemas, in a members file the source
reads before every batch (``scan.tables.file``), so tables join, leave and are taken again
without the query restarting. What each micro-batch does is ``MicroBatch`` (batch.py), which
the loop hands to this part as the query's ``foreachBatch`` function.
"""

from __future__ import annotations

import logging
import secrets
from collections.abc import Callable
from typing import Any

from sparkcdc.core.offsets import BinlogOffset
from sparkcdc.core.schema import TableId, TableSchema
from sparkcdc.errors import ConfigError
from sparkcdc.mysql.port import parse_server_ids
from sparkcdc.pipeline.definition.routing import Shaper
from sparkcdc.pipeline.run.checkpoint import Live, TableState, write_json
from sparkcdc.pipeline.run.life import RunLife
from sparkcdc.pipeline.run.state import RunState
from sparkcdc.pipeline.run.table_run import TableRun
from sparkcdc.sinks import SinkKind
from sparkcdc.spark.members import Members, Reread

log = logging.getLogger("sparkcdc.pipeline")


class PipelineStream:
    """The query and its members file. ``foreach_batch`` is what each micro-batch runs;
    ``watched``: a caller watches every batch's rows (``Runner``'s ``on_batch``)."""

    def __init__(self, state: RunState, life: RunLife,
                 foreach_batch: Callable[[Any, int], None], *, until_caught_up: bool,
                 watched: bool):
        self.state = state
        self.life = life
        self.foreach_batch = foreach_batch
        self.until_caught_up = until_caught_up
        self.watched = watched
        self.query: Any = None
        self.dirty = False  # its tables changed: the members file is written at the next look
        self.restarts = 0  # transient failures in a row
        self._query_gen: int | None = None  # the generation its running query reads
        self._ids: str | None = None
        self._ids_used = 0
        self._live: Live | None = None  # live.json as the run found it (the counts so far)

    def join(self, st: TableState, schema: TableSchema, shaper: Shaper,
             keys: tuple[str, ...], rows_schema: Any) -> None:
        """The table joins the stream (at the next ``sync``): a running table of it."""
        state = self.state
        sink = state.sink_for(st)
        if st.stream_generation != state.generation:
            # its target's batch ids go on after its last one: the stream's next batch, the
            # first that can carry its rows, maps to the next id of its target
            last = sink.last_batch_id()
            nxt = st.batch_base if last is None else max(last + 1, st.batch_base)
            planned = state.ckpt.stream_last_planned(state.generation)
            st.batch_base = nxt - (planned + 1 if planned is not None else 0)
            st.stream_generation = state.generation  # saved before the stream starts (sync)
        run = TableRun(st, schema, sink, shaper, keys)
        if self._live is None:  # read once: a thousand tables join one after another
            self._live = state.ckpt.read_live()
        live = self._live.entry(st.table)
        if live.get("generation") == st.generation:  # counts go on across runs
            run.rows, run.batches = int(live.get("rows") or 0), int(live.get("batches") or 0)
        run.published = sink.publish(self.life.spark)  # a wrong catalog entry fails here
        run.arrow, run.rows_schema = True, rows_schema
        run.query = self.query
        state.runs[st.table] = run
        self.dirty = True

    def sync(self) -> None:
        """Fit the stream to its tables: the running query follows its members file (the
        source's ``scan.tables.file``, read before every batch), where a new table, or one
        taken again under a new generation, is planned and snapshotted while the others
        stream on (``SplitAssigner.reconcile``), and a table gone from it is forgotten. The
        query is (re)started only when none runs (the first look, after a failure) or its
        generation moved on (a purged binlog)."""
        if not self.dirty:
            return
        self.dirty = False
        state = self.state
        q = self.query
        running = q is not None and q.isActive
        members = {t: r for t, r in state.runs.items() if r.state.stream_generation is not None}
        state.members = members
        if not members:
            if running:
                q.stop()
            self.query = None
            return
        state.save()  # every table's state is on disk before the stream reads it
        gen = state.generation
        members_file = state.ckpt.members_path(gen)
        runs = {TableId.parse(t): r for t, r in members.items()}
        write_json(members_file, Members(
            {t: r.state.generation for t, r in runs.items()},
            # as discovered (the source takes them instead of a discovery of its own)
            {t: r.schema for t, r in runs.items()},
            # tables that join from a binlog offset, without a snapshot
            {t: BinlogOffset.from_dict(r.state.start.offset) for t, r in runs.items()
             if r.state.start.joins and r.state.start.offset is not None},
            # tables read again in part while they stream (``sparkcdc snapshot --where``)
            {t: Reread.from_dict(r.state.reread) for t, r in runs.items()
             if r.state.reread}).to_dict())
        if running and self._query_gen == gen:
            for r in members.values():
                r.query = q
            log.info("the pipeline's stream g%d goes on with %d table(s)", gen, len(members))
            return
        if running:
            q.stop()
        if self._ids is None:
            self._ids = self._server_ids()
        opts = state.defn.source.options_for_tables(
            list(members), **{"server-id": self._ids, "arrow-batches": "true",
                              "scan.tables.file": str(members_file),
                              "scan.schema-changes.in-stream": "true",
                              **self._upsert_only()})
        df = self.life.spark.readStream.format("mysql-cdc").options(**opts).load()
        writer = (df.writeStream.foreachBatch(self.foreach_batch)
                  .option("checkpointLocation", str(state.ckpt.pipeline_stream_dir(gen)))
                  .queryName(f"{state.settings.name}:tables:g{gen}"))
        self.query = self._trigger(writer).start()
        self._query_gen = gen
        for r in members.values():
            r.query = self.query
        log.info("the pipeline's stream g%d: %d table(s)", gen, len(members))

    def leave(self, run: TableRun) -> None:
        """The table stops writing its target: the stream goes on without it (its members
        file rewritten at the next look); a write of it in flight finishes first (under
        the target's lock), the next ones find it gone."""
        with self.state.locks(run.state):
            self.state.runs.pop(run.state.table, None)
            run.sink.close()
        self.dirty = True

    def _server_ids(self) -> str:
        settings = self.state.settings
        n = settings.parallelism + 1  # one id for the binlog window, the rest for chunks
        pool = self.state.defn.source.options.get("server-id")
        if pool:
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

    def _upsert_only(self) -> dict[str, str]:
        defn = self.state.defn
        tracked = any(t.track_history is not None or t.track_history_except is not None
                      for t in defn.transforms)  # history is tracked by pre-images
        if (not self.watched and self.state.sink_kind() is SinkKind.MERGE and not tracked
                and "changelog-mode" not in defn.source.options):
            # apply_changes drops update preimages at once: not reading them halves the
            # rows an update batch moves through Spark
            return {"changelog-mode": "upsert"}
        return {}

    def _trigger(self, writer: Any) -> Any:
        if self.until_caught_up:
            return writer.trigger(availableNow=True)
        interval = self.state.settings.trigger_interval
        if interval > 0:
            return writer.trigger(processingTime=f"{interval} seconds")
        return writer
