"""The ``mysql-cdc`` Python data source for Spark (docs/spark-source.md).

How a micro-batch stays exactly-once (the reasoning is in docs/spark-source.md):

* The driver decides everything in ``latestOffset``: the binlog position ``P_N`` of batch
  ``N`` (read from the server there), and the chunks ``C_N`` the batch reads. Both go into
  the offset, which Spark writes to its offset log before any task runs.
* Batch ``N`` = ``partitions(O_{N-1}, O_N)`` emits (a) the binlog window
  ``[P_{N-1}, P_N)``, filtered to keys whose chunks were finished in earlier batches, and
  (b) the chunks ``C_N``, each selected on an executor and rolled back to ``P_N`` with the
  binlog between ``P_N`` and its own high watermark. Both depend only on the two offsets, so
  a replayed batch yields the same rows, however late it runs.
* A chunk emitted in batch ``N`` is finished at ``P_N``; every change of its keys from
  ``P_N`` on arrives through the windows of later batches.

Executors never send anything back: Spark's model has no channel for it.
"""

from __future__ import annotations

import functools
import logging
import time
import uuid
from dataclasses import dataclass, field
from typing import Any

import pyarrow as pa

from sparkcdc.spark.versions import require_pyspark

require_pyspark()  # before the imports an older PySpark lacks: one clear error, not theirs

from pyspark.sql.datasource import (
    DataSource,
    DataSourceReader,
    DataSourceStreamReader,
)
from pyspark.sql.streaming.datasource import (
    ReadAllAvailable,
    ReadLimit,
    ReadMaxRows,
    SupportsTriggerAvailableNow,
)

from sparkcdc.core.assigner import Phase, SplitAssigner
from sparkcdc.core.batch_size import BatchSizer
from sparkcdc.core.chunking import SnapshotSplit
from sparkcdc.core.offsets import BinlogOffset
from sparkcdc.core.records import META_COLUMNS
from sparkcdc.core.schema import TableId, TableSchema
from sparkcdc.errors import (
    BinlogUnavailable,
    ConfigError,
    ConnectionFailed,
    OffsetError,
    SchemaError,
)
from sparkcdc.mysql.options import SourceConfig
from sparkcdc.mysql.port import MySQLSource
from sparkcdc.mysql.types import arrow_schema
from sparkcdc.spark.members import Members
from sparkcdc.spark.read import (
    ChunkItem,
    ReadContext,
    WindowItem,
    WorkPartition,
    chunks_in_one_task,
    read_partition,
    spread,
)
from sparkcdc.spark.rows import (
    COLUMNS,
    TABLES,
    output_schema,
)

log = logging.getLogger(__name__)

OFFSET_VERSION = 1


# -- driver-side helpers -------------------------------------------------------------------------

def _discover_tables(config: SourceConfig, known: dict[TableId, TableSchema] | None = None
                     ) -> tuple[dict[TableId, TableSchema], str]:
    """The server checked ready, the captured tables (sorted) and the server's flavor,
    through the source's port (``MySQLSource.discover``), the same door the pipeline uses."""
    return MySQLSource(config).discover(known)


def _members_with_schemas(config: SourceConfig) -> dict[TableId, TableSchema] | None:
    """The tables of ``scan.tables.file`` with the schemas it gives, when it gives every
    one; else None (the source discovers its tables itself)."""
    if not config.tables_file:
        return None
    try:
        with open(config.tables_file, encoding="utf-8") as f:
            m = Members.parse(f.read())
    except (OSError, ValueError, KeyError, TypeError, AttributeError):
        return None
    gens, schemas = m.generations, m.schemas
    if not gens or any(t not in schemas for t in gens):
        return None
    return {t: schemas[t] for t in sorted(gens)}


def _data_schema(tables: dict[TableId, TableSchema]) -> pa.Schema | None:
    """The shared Arrow schema of the tables, or None when they differ (envelope shape)."""

    schemas = [arrow_schema(s) for s in tables.values()]
    first = schemas[0]
    if all(s.equals(first) for s in schemas[1:]):
        clash = [n for n in first.names if n in META_COLUMNS]
        if clash:
            raise SchemaError(f"table column(s) {clash} clash with the source's metadata columns",
                              fix="rename the column(s) or capture the table in its own "
                                  "stream with an envelope shape")
        return first
    return None


def open_dialect(config: SourceConfig, flavor: str, tables, server_id: int | None = None):
    """A dialect for ``tables`` with the source's chunking (``MySQLSource.dialect``);
    ``server_id`` names the binlog reader (one per concurrent reader)."""
    return MySQLSource(config).dialect(flavor, tables, server_id)


# -- offsets ------------------------------------------------------------------------------------

@dataclass
class SourceOffset:
    """What Spark checkpoints for this source: a small JSON dict with a fixed key order."""

    run: str
    pos: BinlogOffset
    assigner: SplitAssigner
    chunks: list[SnapshotSplit] = field(default_factory=list)  # read in the batch ending here
    min_ts_ms: int | None = None  # timestamp startup: changes before this are skipped

    def to_dict(self) -> dict[str, Any]:
        done = sum(t.chunks_done for t in self.assigner.tables.values())
        return {
            "v": OFFSET_VERSION,
            "run": self.run,
            "pos": self.pos.to_dict(),
            "phase": self.assigner.phase.value,
            "chunks_done": done,
            "tables_done": sum(t.phase.value == "done" for t in self.assigner.tables.values()),
            "tables": len(self.assigner.tables),
            "min_ts_ms": self.min_ts_ms,
            "batch_chunks": [c.to_dict() for c in self.chunks],
            "assigner": self.assigner.to_dict(),
        }

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> SourceOffset:
        if d.get("v") != OFFSET_VERSION:
            raise OffsetError(f"checkpointed offset version {d.get('v')!r} is not supported",
                              fix="start the query with a new checkpoint location")
        return cls(d["run"], BinlogOffset.from_dict(d["pos"]),
                   SplitAssigner.from_dict(d["assigner"]),
                   [SnapshotSplit.from_dict(c) for c in d["batch_chunks"]], d.get("min_ts_ms"))


# -- the data source ----------------------------------------------------------------------------

class MySQLCDCDataSource(DataSource):
    """``spark.readStream.format("mysql-cdc")`` and ``spark.read.format("mysql-cdc")``."""

    # Spark's DataSource.__init__ is not to be overridden: the options are parsed on first
    # use, and the tables looked up once
    _tables: dict[TableId, TableSchema] | None = None
    _flavor = "mariadb"

    @functools.cached_property
    def config(self) -> SourceConfig:
        return SourceConfig.parse(dict(self.options))

    @classmethod
    def name(cls) -> str:
        return "mysql-cdc"

    def _load(self) -> dict[TableId, TableSchema]:
        if self._tables is None:
            given = _members_with_schemas(self.config)
            if given is not None:  # the runner discovered them: no second look needed
                from sparkcdc.mysql.validation import validate_server

                info = validate_server(self.config.connection, list(self.config.server_ids))
                self._tables, self._flavor = given, info.flavor
            else:
                self._tables, self._flavor = _discover_tables(self.config)
        return self._tables

    def _context(self) -> ReadContext:
        from sparkcdc.spark.rows import ENVELOPE

        tables = self._load()
        data = _data_schema(tables)
        if (data is None or self.config.table_events) and self.config.arrow_batches:
            # each table in its own batches (a table's schema may change in the stream)
            return ReadContext(self.config, self._flavor, tables, output_schema(None), TABLES)
        return ReadContext(self.config, self._flavor, tables, output_schema(data),
                           COLUMNS if data is not None else ENVELOPE)

    def schema(self):
        from pyspark.sql.pandas.types import from_arrow_schema

        if self.config.arrow_batches:
            from sparkcdc.spark.arrow_batches import SCHEMA

            return from_arrow_schema(SCHEMA)
        return from_arrow_schema(self._context().out_schema, prefer_timestamp_ntz=True)

    def reader(self, schema) -> SnapshotReader:
        return SnapshotReader(self._context())

    def streamReader(self, schema) -> CDCStreamReader:
        return CDCStreamReader(self._context())


class SnapshotReader(DataSourceReader):
    """A batch read: every chunk, in parallel, each rolled back to one binlog position read
    on the driver before any task, so the result is one consistent snapshot at that position
    (its ``_seq`` encodes it; ``sparkcdc.read_snapshot`` returns it)."""

    def __init__(self, ctx: ReadContext):
        self.ctx = ctx

    def partitions(self):
        cfg = self.ctx.config
        with open_dialect(cfg, self.ctx.flavor, self.ctx.tables) as d:
            as_of = _as_of_option(cfg) or d.current_offset()
            assigner = SplitAssigner.for_snapshot(
                d.planner(t)[0] for t in self.ctx.tables)
            splits = []
            while assigner.phase == Phase.SNAPSHOTTING:
                got = assigner.assign(1024, d.planner)
                for s in got:
                    assigner.finish(s)
                splits.extend(got)
        items = [ChunkItem(s.to_dict(), as_of.to_dict()) for s in splits]
        return spread(items, cfg.server_ids) or [WorkPartition(cfg.server_ids[0], [])]

    def read(self, partition: WorkPartition):  # type: ignore[override]  # Spark hands back ours
        return read_partition(self.ctx, partition)


def _as_of_option(cfg: SourceConfig) -> BinlogOffset | None:
    v = cfg.raw.get("scan.snapshot.as-of")
    return BinlogOffset.from_json(v) if v else None


class CDCStreamReader(DataSourceStreamReader, SupportsTriggerAvailableNow):
    def __init__(self, ctx: ReadContext):
        self.ctx = ctx
        self._dialect = None
        self._target: BinlogOffset | None = None
        self._sizer: BatchSizer | None = None
        self._planned = False  # this reader planned a batch: Spark's Python workers run
        self._members_text: str | None = None  # scan.tables.file as last read
        self._members: dict[TableId, int] | None = None
        self._since: dict[TableId, dict] = {}  # members joining from a binlog offset
        self._rereads: dict[TableId, tuple[int, str]] = {}  # members read again in part
        # members taken again with a schema other than the one the reader was pickled with:
        # the partitions carry it to the tasks (``_with_new_tables``)
        self._retaken: dict[TableId, TableSchema] = {}
        self._out_of_reach_since: float | None = None  # the server, at planning

    def _d(self):
        if self._dialect is None:
            self._dialect = open_dialect(self.ctx.config, self.ctx.flavor, self.ctx.tables)
        return self._dialect

    # -- offsets ---------------------------------------------------------------------------

    def initialOffset(self) -> dict:
        cfg = self.ctx.config
        mode = cfg.startup_mode
        d = self._d()
        self._read_members()
        tables = list(self._generations())
        min_ts = None
        if mode in ("initial", "snapshot"):
            pos = d.current_offset()
            assigner = SplitAssigner.for_snapshot(d.planner(t)[0] for t in tables)
        else:
            assigner = SplitAssigner.streaming_only(tables)
            if mode == "latest-offset":
                pos = d.current_offset()
            elif mode == "earliest-offset":
                pos = d.earliest_offset()
            elif mode == "specific-offset":
                pos = d.specific_offset(cfg.startup)
            else:  # timestamp
                pos = d.offset_for_timestamp(cfg.startup.timestamp_ms)
                min_ts = cfg.startup.timestamp_ms
        gens = self._generations()
        for t, ts in assigner.tables.items():
            ts.generation = gens[t]
        return SourceOffset(uuid.uuid4().hex, pos, assigner, [], min_ts).to_dict()

    def _generations(self) -> dict[TableId, int]:
        """Each captured table's generation (``scan.tables.file`` when set, else
        ``scan.table-generations``; 0 when unset)."""
        if self._members is not None:
            return dict(self._members)
        gens = self.ctx.config.table_generations
        return {t: gens.get(str(t), 0) for t in self.ctx.tables}

    def _read_members(self) -> None:
        """``scan.tables.file`` again: a table new to it is looked up (its schema joins the
        driver's and goes to the readers with the items that need it, ``read_partition``)
        and joins the stream at the next reconcile; a table gone from it leaves. A file not
        there (yet) or half written keeps the last members."""
        path = self.ctx.config.tables_file
        if not path:
            return
        try:
            with open(path, encoding="utf-8") as f:
                text = f.read()
            if text == self._members_text:
                return
            m = Members.parse(text)
        except (OSError, ValueError, AttributeError, KeyError, TypeError):
            return
        wanted, schemas = m.generations, m.schemas
        new = [t for t in wanted if t not in self.ctx.tables]
        if new:
            found = {t: schemas[t] for t in new if t in schemas}
            missing = [t for t in new if t not in found]
            if missing:
                found.update(MySQLSource(self.ctx.config).schemas_of(missing))
            self.ctx.tables.update(found)
            self._d().tables.update(found)
        # a member taken again under a newer generation with a new schema (a new key or
        # columns during its snapshot): its next chunks and windows read it in that schema
        # (the row key that tells an update from a key change, above all)
        before = self._members or {}
        retaken = {t: schemas[t] for t, g in wanted.items()
                   if t in before and g > before[t] and t in schemas
                   and schemas[t] != self.ctx.tables.get(t)}
        if retaken:
            self.ctx.tables.update(retaken)
            self._d().tables.update(retaken)
            self._retaken.update(retaken)
        self._members_text = text
        self._members = {t: g for t, g in wanted.items() if t in self.ctx.tables}
        self._since = {t: o.to_dict() for t, o in m.since.items() if t in self._members}
        self._rereads = {t: (r.id, r.where) for t, r in m.rereads.items()
                         if t in self._members}

    def getDefaultReadLimit(self) -> ReadLimit:
        n = self.ctx.config.max_rows_per_batch
        return ReadMaxRows(n) if n else ReadAllAvailable()

    def prepareForTriggerAvailableNow(self) -> None:
        self._target = self._d().current_offset()

    def _chunks_per_batch(self, limit: ReadLimit, now: float) -> int:
        """Sized by the pace of the last batches (core/batch_size.py); the chunks are
        spread over the readers, one server id each, and a reader takes several in turn."""
        if self._sizer is None:
            cfg = self.ctx.config
            readers = max(1, len(cfg.server_ids) - 1)  # one id stays free for the binlog
            cap = limit.max_rows if isinstance(limit, ReadMaxRows) else None
            self._sizer = BatchSizer.for_chunks(readers, cfg.chunk_size, cap)
        return self._sizer.next(now)

    def latestOffset(self, start: dict, limit: ReadLimit) -> dict:
        try:
            end = self._latest(start, limit)
        except ConnectionFailed as e:
            if not self._wait_out(e):
                raise
            return start
        self._out_of_reach_since = None
        return end

    def _wait_out(self, e: ConnectionFailed) -> bool:
        """Whether a trigger that could not reach the server plans no batch instead of
        stopping the query: while the address is dark (a failover moves it to a promoted
        replica, a restart; the connection's own retries span a second or two), for up to
        ``connect.timeout`` in all. Then the error stops the query, as it does at once
        for ``availableNow`` (a trigger with nothing new would end it as caught up)."""
        now = time.monotonic()
        if self._out_of_reach_since is None:
            self._out_of_reach_since = now
        waited = now - self._out_of_reach_since
        if self._target is not None or waited >= self.ctx.config.connection.connect_timeout:
            return False
        log.warning("the server is out of reach (%.0f s so far, up to connect.timeout): no "
                    "batch at this trigger, the next one tries again: %s", waited, e.message)
        return True

    def _latest(self, start: dict, limit: ReadLimit) -> dict:
        prev = SourceOffset.from_dict(start)
        cfg = self.ctx.config
        d = self._d()
        pos = d.current_offset()
        # where the last batch ended, in the binlog of the server behind the address now: a
        # failover finds the same point again by its GTID state, or says why it cannot
        here = prev.pos if prev.pos.same_server(pos) else d.rebase(prev.pos, str(pos.server))
        if pos < here:
            raise OffsetError(
                f"the server's binlog position {pos} is behind the checkpoint's {prev.pos}",
                fix="the server was reset or failed over to a replica with another binlog; "
                    "start the query with a new checkpoint location")
        if pos.file != here.file and here.file not in d.binlog_files():
            raise BinlogUnavailable(
                f"binlog file {prev.pos.file!r}, where this query stopped ({prev.pos}), has "
                f"been purged from the server {self.ctx.config.connection}; the changes "
                f"since then are lost to it",
                fix="start the query with a new checkpoint location (scan.startup.mode "
                    "'initial' takes a new snapshot), and keep binlogs longer than the "
                    "longest pause of the query (binlog_expire_logs_seconds)")
        assigner = prev.assigner
        chunks: list[SnapshotSplit] = []
        snapshotting = cfg.startup_mode in ("initial", "snapshot")
        self._read_members()
        # the tables captured now (a restarted query may capture more, fewer, or take one
        # again under a new generation): the assigner follows, between two batches
        wanted = self._generations()
        # a table that joins now from a binlog offset has changes to read even where the
        # server's position has not moved (``partitions``: ``_joined_since``)
        joins = any(t in self._since and (t not in assigner.tables
                                          or assigner.tables[t].generation != g)
                    for t, g in wanted.items())
        assigner.reconcile(wanted, lambda t: d.planner(t)[0], snapshotting, self._since,
                           self._rereads)
        # the first batch a reader plans starts Spark's Python workers (seconds, cold): its
        # chunks' selects would come that long after the batch's position, and the binlog
        # written meanwhile would be read twice (their roll-back, the next window). So while
        # the binlog moves, a query's first batch reads no chunks, only its window (nothing
        # at all before a table has a finished chunk)
        warm_up = False
        if (not self._planned and cfg.startup_mode == "initial"
                and assigner.phase == Phase.SNAPSHOTTING):
            if pos == prev.pos:  # moving? (a query's start read it a moment ago)
                time.sleep(0.1)
                pos = d.current_offset()
            warm_up = prev.pos < pos
        self._planned = True
        if snapshotting and assigner.phase == Phase.SNAPSHOTTING and not warm_up:
            now = time.monotonic()
            chunks = assigner.assign(self._chunks_per_batch(limit, now), d.planner)
            for c in chunks:
                assigner.finish(c)
            assert self._sizer is not None  # made by _chunks_per_batch
            self._sizer.admitted(len(chunks), now)
        if cfg.startup_mode == "snapshot" and not chunks:
            return start  # snapshot only: nothing after the last chunk
        if self._target is not None and not chunks and not warm_up:
            # availableNow: the binlog is read up to the position at the query's start, and
            # no further. A batch with chunks goes to the server's position of now instead:
            # its chunks are rolled back to it with the binlog from there to their own read,
            # so a batch held at the start's position would have every chunk replay all
            # that was written since the query began (quadratic in a long snapshot under
            # writes). The snapshot has finitely many chunks, so the query still ends (and
            # a reader warms up once).
            pos = max(prev.pos, min(pos, self._target))
        if not chunks and prev.pos < pos:
            # a backlog is read in batches of bounded size (the driver collects each); a
            # batch with chunks keeps its position, to which they are rolled back
            pos = d.bound_window(here, pos, cfg.binlog_batch_bytes)
        if not chunks and pos == prev.pos and not joins:
            return start
        return SourceOffset(prev.run, pos, assigner, chunks, prev.min_ts_ms).to_dict()

    def reportLatestOffset(self):
        try:
            return {"pos": self._d().current_offset().to_dict()}
        except Exception:  # noqa: BLE001 - progress reporting must never fail the query
            return None

    def partitions(self, start: dict, end: dict):
        s, e = SourceOffset.from_dict(start), SourceOffset.from_dict(end)
        cfg = self.ctx.config
        ids = cfg.server_ids
        gone = self._taken_again_since(e)
        chunks = [ChunkItem(c.to_dict(), e.pos.to_dict()) for c in e.chunks
                  if c.table_id not in gone]
        # the binlog moves (it did since the last batch): every task that reads chunks reads
        # it from the batch's position to its last select, so the batch's chunks share one
        # task and that read (``chunks_in_one_task``); on a quiet server nothing is read back and the
        # chunks spread over the readers
        shared = bool(chunks) and s.pos != e.pos and len(ids) > 1
        windows: list = []
        if cfg.startup_mode != "snapshot" and s.pos < e.pos:
            # a backlog is decoded by several tasks at once, each with its own server id;
            # the sub-windows partition [s.pos, e.pos) exactly, and _seq restores the order
            parts = self._d().split_window(s.pos, e.pos, cfg.binlog_split_bytes,
                                           len(ids) - 1 if shared else len(ids))
            view_at = s.pos.to_dict() if len(parts) > 1 else None
            covered = s.assigner.still_in(e.assigner).to_dict()
            windows.extend(WindowItem(a.to_dict(), b.to_dict(), covered, s.min_ts_ms, view_at)
                           for a, b in parts)
        windows.extend(self._joined_since(s, e))
        retaken = {str(t): x.to_dict() for t, x in self._retaken.items()}
        if (not e.chunks and e.assigner.phase == Phase.SNAPSHOTTING
                and cfg.startup_mode == "initial"):
            # a warm-up batch (``latestOffset``): a task per reader id, so that every Python
            # worker the next batches use is started by it
            parts = spread(windows, ids, retaken)
            return parts + [WorkPartition(i, [], retaken) for i in ids[len(parts):]]
        if shared:
            return chunks_in_one_task(chunks, windows, ids, retaken)
        # chunks first: their tasks start first, so their selects come soon after the
        # batch's position
        return spread(chunks + windows, ids, retaken)

    def _taken_again_since(self, e: SourceOffset) -> set[TableId]:
        """Tables whose chunks in a batch planned at ``e`` are no longer wanted: taken again
        under a newer generation since (or gone) by the time the batch is read, which is
        the case when it is replayed after the change that made the loop take the table
        again (a schema change during its snapshot). Their rows would not be written (the
        apply side writes no older generation), and the binlog around them may no longer
        decode with the table's schema of today."""
        if not self.ctx.config.tables_file:
            return set()
        self._read_members()  # a replay after a restart: no latestOffset came first
        wanted = self._generations()
        return {t for t, ts in e.assigner.tables.items()
                if t not in wanted or wanted[t] != ts.generation}

    def _joined_since(self, s: SourceOffset, e: SourceOffset) -> list[WindowItem]:
        """For each table that joins in this batch from a binlog offset of its own (a table
        renamed to its name there, ``SplitAssigner.joined_since``): its changes from that
        offset to the batch's end, read apart (the batch's window passes none of them)."""
        items: list[WindowItem] = []
        cfg = self.ctx.config
        for t, ts in sorted(e.assigner.joined_since(s.assigner).items()):
            assert ts.since is not None  # joined_since gives the tables that have one
            since = BinlogOffset.from_dict(ts.since)
            if not since < e.pos:
                continue
            alone = SplitAssigner({t: ts}, Phase.STREAMING).to_dict()
            windows = self._d().split_window(since, e.pos, cfg.binlog_split_bytes,
                                             len(cfg.server_ids))
            view_at = since.to_dict() if len(windows) > 1 else None
            items.extend(WindowItem(a.to_dict(), b.to_dict(), alone, s.min_ts_ms, view_at)
                         for a, b in windows)
        return items

    def read(self, partition: WorkPartition):  # type: ignore[override]  # Spark hands back ours
        return read_partition(self.ctx, partition)

    def commit(self, end: dict) -> None:
        pass  # nothing is staged: every batch is rebuilt from its two offsets

    def stop(self) -> None:
        if self._dialect is not None:
            self._dialect.close()
            self._dialect = None


def register(spark) -> None:
    """Register the ``mysql-cdc`` data source with ``spark``."""
    spark.dataSource.register(MySQLCDCDataSource)


__all__ = ["ConfigError", "MySQLCDCDataSource", "SourceOffset", "register"]
