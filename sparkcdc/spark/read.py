"""The executor side of the ``mysql-cdc`` source: the partitions a batch is cut into (a
binlog window, snapshot chunks; pickled to the executors) and their reading there. A
window is read and filtered by the chunks finished before the batch; chunks are selected and
rolled back to the batch's position (``core/watermark.py``), all of a batch's in one task
and one roll-back read when the binlog moves (docs/spark-source.md). The driver's side, which
decides every offset, is ``source.py``.
"""

from __future__ import annotations

import contextlib
import gc
import json
import logging
import os
import uuid
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field, replace

import pyarrow as pa

from sparkcdc.spark.versions import require_pyspark

require_pyspark()  # before the imports an older PySpark lacks: one clear error, not theirs

from pyspark.sql.datasource import (
    InputPartition,
)

from sparkcdc.core.assigner import SplitAssigner
from sparkcdc.core.chunking import SnapshotSplit
from sparkcdc.core.offsets import BinlogOffset
from sparkcdc.core.records import ChangeRecord
from sparkcdc.core.schema import TableId, TableSchema
from sparkcdc.core.stream_filter import StreamFilter, TableProgress
from sparkcdc.core.table_events import NewSchema, TableEvent
from sparkcdc.core.watermark import RollbackLog, SplitRead, read_splits_as_of
from sparkcdc.mysql.options import SourceConfig
from sparkcdc.mysql.port import MySQLSource
from sparkcdc.spark.arrow_batches import encode
from sparkcdc.spark.rows import (
    COLUMNS,
    TABLES,
    RowBuilder,
    TableBuilders,
    event_batch,
    in_key_order,
    output_schema,
    snapshot_batches,
)
from sparkcdc.spark.task_cpu import accounted

log = logging.getLogger(__name__)

ROWS_PER_ARROW_BATCH = 8192
# a window's batch is also cut at about this many bytes of long values (TEXT, BLOB, JSON,
# GEOMETRY), so rows of 16 MB values never pile up 8192 deep (tests/faults/test_huge.py)
BYTES_PER_ARROW_BATCH = 32 * 1024 * 1024
_WIDE_TYPES = frozenset({"text", "mediumtext", "longtext", "blob", "mediumblob", "longblob",
                         "json", "geometry", "linestring", "polygon", "multipoint",
                         "multilinestring", "multipolygon", "geometrycollection"})
PROFILE_ENV = "SPARKCDC_PROFILE_DIR"  # set: each task writes a cProfile of its reading there


# -- partitions (pickled to executors) ---------------------------------------------------------

@dataclass
class WindowItem:
    """The binlog window ``[start, end)``, filtered by what ``assigner`` had covered.

    A large window is read as several items (``split_window``): each reads its own
    ``[start, end)`` and filters as the whole window would, from ``view_at`` (the whole
    window's start)."""

    start: dict
    end: dict
    assigner: dict
    min_ts_ms: int | None
    view_at: dict | None = None


@dataclass
class ChunkItem:
    """One chunk, rolled back to ``as_of`` (the batch's binlog position)."""

    split: dict
    as_of: dict


@dataclass
class WorkPartition(InputPartition):
    """One Spark task: items run in order under one binlog ``server_id``, because two
    binlog readers with the same id would evict each other on the server."""

    server_id: int
    items: list
    # tables taken again with a new schema since the reader was pickled: ``db.table`` ->
    # ``TableSchema.to_dict()`` (``CDCStreamReader._read_members``)
    schemas: dict = field(default_factory=dict)
    # chunks selected at once (threads): a task that holds a whole batch's chunks selects
    # them side by side and rolls them back from one binlog read (``chunks_in_one_task``)
    selects: int = 1


def spread(items: list, server_ids: tuple[int, ...],
           schemas: dict | None = None) -> list[WorkPartition]:
    """``items`` over the reader ids, one task each (none left empty), in runs that follow
    their order: a task's chunks are neighbours, so the file it writes of them holds one
    stretch of keys. Dealt round-robin, every task's file spanned the batch's whole range,
    the files of a batch all overlapped, and a target's keys could not be cut into slices
    finer than a batch (``KeySlices.by_ranges``): one write task did most of a catch-up's
    changes (docs/benchmarks.md, "The write stage's slices")."""
    n = max(1, min(len(server_ids), len(items)))
    size, extra = divmod(len(items), n)
    out, start = [], 0
    for i in range(n):
        end = start + size + (1 if i < extra else 0)
        out.append(WorkPartition(server_ids[i], items[start:end], dict(schemas or {})))
        start = end
    return [w for w in out if w.items]


def chunks_in_one_task(chunks: list, windows: list, server_ids: tuple[int, ...],
                       schemas: dict | None = None) -> list[WorkPartition]:
    """A batch's chunks in one task, first, which selects them side by side (one thread per
    reader id) and rolls them all back from one read of the binlog after the batch's
    position; its windows in the other tasks. Spread over several tasks, each chunk task
    read that stretch again (docs/spark-source.md, "One rollback read per batch")."""
    readers = max(1, len(server_ids) - 1)
    if len(server_ids) == 1 or not windows:
        return [WorkPartition(server_ids[0], chunks + windows, dict(schemas or {}), readers)]
    return ([WorkPartition(server_ids[-1], chunks, dict(schemas or {}), readers)]
            + spread(windows, server_ids[:-1], schemas))


# -- executor-side reading -----------------------------------------------------------------------

@dataclass
class ReadContext:
    """Everything a task needs, picklable (the password travels inside ConnectionOptions,
    never into logs: its ``repr`` hides it)."""

    config: SourceConfig
    flavor: str
    tables: dict[TableId, TableSchema]
    out_schema: pa.Schema
    shape: str


def read_partition(ctx: ReadContext, part: WorkPartition) -> Iterator[pa.RecordBatch]:
    prof_dir = os.environ.get(PROFILE_ENV)
    if prof_dir:  # where a task's time goes (docs/benchmarks.md): one pstats file per task
        batches = profiled(prof_dir, _read_partition(ctx, part))
    else:
        batches = _read_partition(ctx, part)
    if ctx.config.arrow_batches:
        yield from accounted((encode(b) for b in batches), "read")
    else:
        yield from accounted(batches, "read")


def profiled(prof_dir: str, it: Iterator[pa.RecordBatch], what: str = "task"
             ) -> Iterator[pa.RecordBatch]:
    """``it``, with the time spent in it profiled (not the consumer's), written to
    ``prof_dir`` as one pstats file when it ends: where a task's time goes."""
    import cProfile

    prof = cProfile.Profile()
    try:
        while True:
            prof.enable()
            try:
                batch = next(it)
            except StopIteration:
                return
            finally:
                prof.disable()
            yield batch
    finally:
        os.makedirs(prof_dir, exist_ok=True)
        prof.dump_stats(os.path.join(prof_dir, f"{what}-{os.getpid()}-{uuid.uuid4().hex[:8]}"
                                                ".pstats"))


def _with_new_tables(ctx: ReadContext, part: WorkPartition) -> ReadContext:
    """The context with the schemas of tables that joined the stream after the reader was
    pickled (``scan.tables.file``), looked up once per process (``_JOINED``), and those of
    tables taken again with a new schema since, which the partition carries."""
    if part.schemas:
        given = {TableId.parse(t): TableSchema.from_dict(d) for t, d in part.schemas.items()}
        ctx = replace(ctx, tables={**ctx.tables, **given})
    need: set[TableId] = set()
    for item in part.items:
        if isinstance(item, ChunkItem):
            need.add(SnapshotSplit.from_dict(item.split).table_id)
        else:
            need.update(TableId.parse(t["table"]) for t in item.assigner.get("tables", ()))
    missing = [t for t in need if t not in ctx.tables]
    if not missing:
        return ctx
    todo = [t for t in missing if t not in _JOINED]
    if todo:
        _JOINED.update(MySQLSource(ctx.config).schemas_of(todo))
    extra = {t: _JOINED[t] for t in missing if t in _JOINED}
    return replace(ctx, tables={**ctx.tables, **extra}) if extra else ctx


_JOINED: dict[TableId, TableSchema] = {}  # per executor process: schemas of joined tables


def _read_partition(ctx: ReadContext, part: WorkPartition) -> Iterator[pa.RecordBatch]:
    ctx = _with_new_tables(ctx, part)
    dialect = MySQLSource(ctx.config).dialect(ctx.flavor, ctx.tables, part.server_id)
    logs: dict[str, RollbackLog] = {}  # chunks rolled back to one position share its binlog
    pool = (ThreadPoolExecutor(part.selects, thread_name_prefix="chunk-select")
            if part.selects > 1 else None)
    try:
        items = part.items
        i = 0
        while i < len(items):
            item = items[i]
            if not isinstance(item, ChunkItem):
                yield from accounted(read_window(ctx, dialect, item), "window")
                i += 1
                continue
            # the chunks after it as of the same position, a round of selects at once
            j = i + 1
            while (j < len(items) and j - i < part.selects
                   and isinstance(items[j], ChunkItem) and items[j].as_of == item.as_of):
                j += 1
            key = json.dumps(item.as_of, sort_keys=True)
            if key not in logs:
                logs[key] = RollbackLog(dialect, BinlogOffset.from_dict(item.as_of),
                                        ctx.tables)
            yield from _read_chunks(ctx, dialect, items[i:j], logs[key], pool)
            i = j
    finally:
        if pool is not None:
            pool.shutdown(wait=True)
        dialect.close()


def _read_chunks(ctx: ReadContext, dialect, items: list[ChunkItem], rollback: RollbackLog,
                 pool: ThreadPoolExecutor | None) -> Iterator[pa.RecordBatch]:
    """Chunks as of one position: selected (side by side with ``pool``), one high watermark
    after the last select, each rolled back to the position from the shared ``rollback``."""
    as_of = rollback.as_of
    wanted = []
    for item in items:
        split = SnapshotSplit.from_dict(item.split)
        schema = ctx.tables.get(split.table_id)
        if schema is not None:  # else a batch replayed after its table left the query
            wanted.append(SplitRead(schema, split.split_id, split.start, split.end,
                                    split.where))
    if not wanted:
        return
    results = read_splits_as_of(dialect, wanted, as_of, rollback,
                                select_all=pool.map if pool is not None else map,
                                backfill=not ctx.config.backfill_skip)
    for read, result in zip(wanted, results):
        schema = read.schema
        rows = in_key_order(result.rows, schema.row_key)  # a replay is byte-identical
        out, shape = ctx.out_schema, ctx.shape
        if shape == TABLES:  # the table's own columns, in batches of its own
            from sparkcdc.mysql.types import arrow_schema

            out, shape = output_schema(arrow_schema(schema)), COLUMNS
        yield from snapshot_batches(rows, schema, as_of, out, shape, ROWS_PER_ARROW_BATCH)


def read_window(ctx: ReadContext, dialect, item: WindowItem) -> Iterator[pa.RecordBatch]:
    start, end = BinlogOffset.from_dict(item.start), BinlogOffset.from_dict(item.end)
    assigner = SplitAssigner.from_dict(item.assigner)
    view = assigner.finished_view(BinlogOffset.from_dict(item.view_at) if item.view_at
                                  else start)
    # a table none of whose chunks is finished (or that the batch takes again) has nothing
    # to pass on: its events are skipped undecoded (they may be of another schema)
    progress = {t: TableProgress(ctx.tables[t], splits, complete)
                for t, (splits, complete) in view.items() if t in ctx.tables and splits}
    if not progress:
        return
    flt = StreamFilter(progress, dialect.locate, floor=start)
    tables = dict(ctx.tables)  # a table's schema changes here when the stream says so
    builder = (TableBuilders(tables, ctx.config.preimages) if ctx.shape == TABLES
               else RowBuilder(ctx.out_schema, ctx.shape, ctx.config.preimages))
    pending: list[ChangeRecord] = []
    wide = {t: wcols for t, s in ctx.tables.items()
            if (wcols := tuple(c.name for c in s.columns if c.data_type in _WIDE_TYPES))}
    held = 0  # bytes of long values in ``pending``
    events = ctx.config.table_events
    rekeyed: set = set()  # tables whose key changed: the runner takes them again

    def drain() -> list[pa.RecordBatch]:
        builder.add_changes(pending, flt.judge(pending), tables)
        pending.clear()
        return builder.batches()

    min_ts = item.min_ts_ms
    with _few_gc_passes():
        # without update preimages, an update's before image is wanted for its key alone
        for rec in dialect.read_window(None, start, end, only=progress, table_events=events,
                                       before_keys=not ctx.config.preimages):
            if events and rec.__class__ is not ChangeRecord:  # a TableEvent
                yield from drain()  # the rows before it, in the schema they had
                yield _table_event(builder, rec, tables, rekeyed)
                continue
            if min_ts is not None and rec.ts_ms < min_ts:
                continue
            if rekeyed and rec.table_id in rekeyed:
                continue
            pending.append(rec)
            if wide and (cols := wide.get(rec.table_id)):
                held += _wide_bytes(rec, cols)
            if len(pending) >= ROWS_PER_ARROW_BATCH or held >= BYTES_PER_ARROW_BATCH:
                held = 0
                yield from drain()
        yield from drain()


def _table_event(builder, ev: TableEvent, tables: dict, rekeyed: set) -> pa.RecordBatch:
    """The event's batch (``rows.event_batch``); after a ``schema`` event the table's rows
    are built in its new schema. A new row key makes the rest of its rows useless (the
    runner takes the table again), and the stream filter could not place them."""

    if isinstance(ev, NewSchema):
        old = tables[ev.table_id]
        tables[ev.table_id] = ev.schema
        builder.forget(ev.table_id)
        if tuple(ev.schema.row_key) != tuple(old.row_key):
            rekeyed.add(ev.table_id)
    return event_batch(ev, tables[ev.table_id])


def _wide_bytes(rec, cols: tuple[str, ...]) -> int:
    n = 0
    for row in (rec.before, rec.after):
        if row is not None:
            for c in cols:
                v = row.get(c)
                if v is not None:
                    n += len(v)
    return n


@contextlib.contextmanager
def _few_gc_passes(threshold: int = 50_000):
    """A window allocates a few objects per row change (records, row dicts), none of them
    cyclic; the collector's default young-generation threshold (700) made it scan them over
    and over (~10% of a window's time). Restored afterwards: the worker process is reused."""
    old = gc.get_threshold()
    gc.set_threshold(max(threshold, old[0]), *old[1:])
    try:
        yield
    finally:
        gc.set_threshold(*old)
