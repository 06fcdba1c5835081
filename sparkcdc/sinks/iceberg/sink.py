"""Apache Iceberg through pyiceberg: one transaction (one catalog commit) per batch.

Per batch, in one pyiceberg transaction:

* rows of keys the source did not hold before the batch (``ChangeSet.split_new``: snapshot
  rows, new inserts) are appended as they are when no data file's statistics overlap their
  key range: no data read, no rewrite, an ``append`` snapshot;
* the other rows are merged copy-on-write, narrowed to the data files whose key statistics
  hold a touched key: those files are read once, dropped, and their untouched rows written
  back with the new and patched ones (SCD2: closed versions), one ``overwrite`` snapshot;
* the table property ``sparkcdc.batch-id.<app-id>`` is set,

so data and batch id commit together. pyiceberg (0.12) writes no delete files, so there is no
merge-on-read: ``Transaction.delete`` warns "Merge on read is not yet supported, falling back
to copy-on-write" under ``write.delete.mode=merge-on-read``, its manifest writers only write
data manifests (``ManifestWriterV2.content()`` is ``DATA``), and its scans refuse equality
deletes. A position-delete file written by another engine is applied when the sink reads.

Iceberg has no 8/16-bit integers (stored as ``int``) and no interval type: MySQL TIME
(Spark ``interval day to second``) is stored as a ``long`` of microseconds.
"""

from __future__ import annotations

import bisect
import datetime as dt
import threading
from collections.abc import Mapping
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from sparkcdc.errors import SchemaError
from sparkcdc.sinks import require
from sparkcdc.sinks.base import (
    AMEND,
    CLOSE,
    DELETE,
    END_AT,
    PATCH,
    START_AT,
    UPSERT,
    VERSION,
    ChangeSet,
    KeyRange,
    Sink,
    WriteResult,
    check_key_not_null,
    holds_any,
    log,
    micros,
)
from sparkcdc.sinks.iceberg.config import IcebergConfig


def storage_table(t: pa.Table) -> pa.Table:
    """Arrow columns as Iceberg stores them: small ints widened, durations as microseconds,
    every field nullable (Iceberg refuses optional data for required columns)."""
    cols, fields = [], []
    for f, c in zip(t.schema, t.columns):
        if pa.types.is_duration(f.type):
            c, typ = micros(c), pa.int64()
        elif pa.types.is_int8(f.type) or pa.types.is_int16(f.type):
            c, typ = pc.cast(c, pa.int32()), pa.int32()
        else:
            typ = f.type
        cols.append(c)
        fields.append(pa.field(f.name, typ, nullable=True))
    return pa.Table.from_arrays(cols, schema=pa.schema(fields))


_CATALOG_LOCK = threading.Lock()

class IcebergSink(Sink):
    type = "iceberg"
    writer = "pyiceberg"

    def __init__(self, config: IcebergConfig):
        self.config = config
        require("pyiceberg", "iceberg")
        self._catalog = None

    @classmethod
    def from_options(cls, options: Mapping[str, Any]) -> IcebergSink:
        return cls(IcebergConfig.parse(options))

    def catalog(self):
        if self._catalog is None:
            from pyiceberg.catalog import load_catalog

            # A pipeline runs one stream per table, each with its own sink, in one process:
            # a SQL catalog creates its tables on first load, and two first loads at once
            # race ("table iceberg_tables already exists"). Load one at a time.
            with _CATALOG_LOCK:
                self._catalog = load_catalog(self.config.catalog_name,
                                             **self.config.catalog_properties)
        return self._catalog

    def _table(self):
        from pyiceberg.exceptions import NoSuchTableError

        try:
            return self.catalog().load_table(self.config.identifier)
        except NoSuchTableError:
            return None

    def last_batch_id(self) -> int | None:
        t = self._table()
        v = None if t is None else t.properties.get(self.config.batch_property)
        return None if v is None else int(v)

    def _create(self, schema: pa.Schema):
        cat = self.catalog()
        log.info("creating Iceberg table %s", ".".join(self.config.identifier))
        # two streams of one pipeline creating tables in one namespace at once race in the
        # SQL catalog's "if not exists" (UNIQUE constraint on the namespace's properties):
        # creation takes the same lock as loading the catalog
        bad = [c for c in self.config.partition_by if c not in schema.names]
        if bad:
            raise SchemaError(f"partition columns {bad} are not target columns of "
                              f"{'.'.join(self.config.identifier)}",
                              fix=f"partition-by takes some of: {', '.join(schema.names)}")
        with _CATALOG_LOCK:
            cat.create_namespace_if_not_exists(self.config.namespace)
            table = cat.create_table_if_not_exists(
                self.config.identifier, schema=schema,
                properties=dict(self.config.table_properties))
        if self.config.partition_by and table.spec().is_unpartitioned():
            with table.update_spec() as spec:
                for column in self.config.partition_by:
                    spec.add_identity(column)
            table = self._table()
        return table

    def write(self, changes: ChangeSet, batch_id: int) -> WriteResult:
        check_key_not_null(changes)
        schema = storage_table(changes.rows()).schema
        table = self._table() or self._create(schema)
        last = table.properties.get(self.config.batch_property)
        if last is not None and batch_id <= int(last):
            return WriteResult(batch_id, skipped=True)
        key = changes.keys[0]
        appendable, rest = changes.split_new(
            lambda lo, hi: bool(changes.replaces) or _may_hold(table, _between(key, lo, hi)))
        arrow_schema = table.schema().as_arrow()
        with table.transaction() as tx:
            new_rows = storage_table(appendable).cast(arrow_schema)
            if new_rows.num_rows:
                # first, while the transaction's view is the table split_new asked about
                _claim_range(tx, _key_range(new_rows, key))
            if rest.num_rows or changes.replaces:
                _merge(table, tx, rest, arrow_schema)
            if new_rows.num_rows:
                tx.append(new_rows)
            tx.set_properties({self.config.batch_property: str(batch_id)})
        counts = changes.counts(appended=appendable.num_rows)
        # by batch id, as the delta sink does: short runs compact like a long stream
        every = self.config.compact_every
        if every and (batch_id + 1) % every == 0:
            n = _compact(self._table())
            if n:
                log.info("compacted %d small data files of %s", n,
                         ".".join(self.config.identifier))
        return WriteResult(batch_id, counts=counts)

    def read(self) -> pa.Table:
        t = self._table()
        return pa.table({}) if t is None else t.scan().to_arrow()


def _merge(table, tx, changes: ChangeSet, arrow_schema: pa.Schema) -> None:
    """Copy-on-write of the files holding the changes' keys, as one ``overwrite`` snapshot.

    The candidate files are those whose statistics overlap the touched keys' range (pyiceberg
    prunes by manifest and file statistics), kept only if a touched key lies within the
    file's own bounds of the first key column: a batch touching the first and last keys of a
    table of key-sorted files rewrites two files, not all of them. Each file is read once
    (``Transaction.delete`` would read a file straddling the range a second time to rewrite
    its rows outside it) and dropped; its untouched rows go back with the new ones. The
    rows in the ranges of chunks read again (``ChangeSet.replaces``) do not go back: the
    batch's rows hold those ranges anew."""
    keys = list(changes.keys)
    ops = (CLOSE, AMEND) if changes.scd_type == 2 else (UPSERT, PATCH, DELETE)
    key_schema = pa.schema([arrow_schema.field(k) for k in keys])
    touched = _distinct(storage_table(changes.key_rows(*ops)).select(keys).cast(key_schema),
                        keys)
    span = _key_range(touched, keys[0]) if touched.num_rows else None
    tasks = (_tasks_holding(table, span, keys[0], touched[keys[0]])
             if table.current_snapshot() and span is not None else [])
    if changes.replaces and table.current_snapshot():
        from pyiceberg.expressions import Or

        ranged = _ranges(changes.replaces)
        span = ranged if span is None else Or(span, ranged)
        have = {t.file.file_path for t in tasks}
        tasks += [t for t in table.scan(row_filter=ranged).plan_files()
                  if t.file.file_path not in have]
    current = arrow_schema.empty_table()
    if tasks:
        from pyiceberg.expressions import AlwaysTrue
        from pyiceberg.io.pyarrow import ArrowScan

        current = ArrowScan(table.metadata, table.io, table.schema(), AlwaysTrue()).to_table(
            tasks).cast(arrow_schema)
    is_touched = _touched_mask(current, touched, keys)
    gone = pc.or_(is_touched, holds_any(changes.replaces, current)) if changes.replaces \
        else is_touched
    keep, hit = current.filter(pc.invert(gone)), current.filter(is_touched)
    if changes.scd_type == 1:
        new_rows = [storage_table(changes.rows(UPSERT)).cast(arrow_schema),
                    _patched(storage_table(changes.rows(PATCH)).cast(arrow_schema), hit, keys)]
    else:
        is_open = pc.is_null(hit[END_AT])
        closes = storage_table(changes.key_rows(CLOSE)).cast(
            pa.schema([arrow_schema.field(n) for n in keys + [END_AT]]))
        new_rows = [hit.filter(pc.invert(is_open)),
                    _closed(hit.filter(is_open), closes, keys),
                    _amended(hit.filter(is_open),
                             storage_table(changes.rows(AMEND)).cast(arrow_schema), keys),
                    storage_table(changes.rows(VERSION)).cast(arrow_schema)]
    rows = pa.concat_tables([keep.select(arrow_schema.names)]
                            + [r.select(arrow_schema.names) for r in new_rows])
    if not tasks and not rows.num_rows:
        return  # deletes of keys the target does not hold
    assert span is not None  # (tasks or rows: something was touched or replaced)
    from pyiceberg.io.pyarrow import _dataframe_to_data_files

    with tx.update_snapshot().overwrite() as overwrite:
        # the predicate deletes nothing by itself (the files are named); it is what pyiceberg
        # validates a retried commit against, so a concurrent writer that changed this range
        # (another run of the same batch) fails the commit instead of being merged twice
        overwrite.delete_by_predicate(span)
        for task in tasks:
            overwrite.delete_data_file(task.file)
        if rows.num_rows:
            # the writer pyiceberg's own append and delete use: added files in this snapshot
            for data_file in _dataframe_to_data_files(table_metadata=tx.table_metadata, df=rows,
                                                      io=table.io,
                                                      write_uuid=overwrite.commit_uuid):
                overwrite.append_data_file(data_file)


SMALL_FILE_BYTES = 32 * 1024**2  # a data file below this is rewritten by compaction


def _compact(table) -> int:
    """Rewrites the table's small data files into as few as the writer makes, in one
    ``overwrite`` snapshot that names the files it drops; the rows are the same, so a crash
    before or after it changes nothing. pyiceberg (0.12) has no compaction of its own. Files
    with delete files (written by another engine) are left alone. Returns the files
    rewritten (0: fewer than two were small)."""
    from pyiceberg.expressions import AlwaysTrue
    from pyiceberg.io.pyarrow import ArrowScan, _dataframe_to_data_files

    if table is None or table.current_snapshot() is None:
        return 0
    tasks = [t for t in table.scan().plan_files()
             if not t.delete_files and t.file.file_size_in_bytes < SMALL_FILE_BYTES]
    if len(tasks) < 2:
        return 0
    schema = table.schema().as_arrow()
    rows = ArrowScan(table.metadata, table.io, table.schema(), AlwaysTrue()).to_table(
        tasks).cast(schema)
    with table.transaction() as tx, tx.update_snapshot().overwrite() as overwrite:
        for task in tasks:
            overwrite.delete_data_file(task.file)
        for data_file in _dataframe_to_data_files(table_metadata=tx.table_metadata, df=rows,
                                                  io=table.io,
                                                  write_uuid=overwrite.commit_uuid):
            overwrite.append_data_file(data_file)
    return len(tasks)


def _claim_range(tx, span) -> None:
    """Make a retried commit fail if another writer added rows in ``span`` meanwhile.

    pyiceberg retries a commit that lost a race (``commit.retry.num-retries``) by replaying
    the transaction's snapshot producers on the new head; the batch-id check ran against the
    old head, and a fast append validates nothing, so two runs of one batch would both
    append. A delete by ``span`` registers the range for that validation (serializable
    isolation: no data added in it since our base). The target holds nothing in ``span``
    (``split_new`` asked), so the delete removes nothing and writes no snapshot."""
    with tx.update_snapshot().delete() as claim:
        claim.delete_by_predicate(span)
    if claim.files_affected or claim.rewrites_needed:
        raise RuntimeError(f"iceberg sink: the range {span} was to hold no rows, but holds some")


def _may_hold(table, span) -> bool:
    """Whether the table may hold rows in ``span``, from metadata alone: the files a scan
    would plan after pruning by partition and column statistics (min/max per file). A table
    without a snapshot holds nothing."""
    if table.current_snapshot() is None:
        return False
    return next(iter(table.scan(row_filter=span).plan_files()), None) is not None


def _tasks_holding(table, span, key: str, values: pa.ChunkedArray) -> list:
    """Scan tasks of the files that may hold one of ``values`` (the touched keys' first
    column ``key``): planned by ``span``, then kept only if one of the values lies within the
    file's lower and upper bound of ``key``. A file without bounds is kept; so is every
    planned file when the key is not an integer, decimal, string, date or timestamp."""
    from pyiceberg.conversions import from_bytes

    tasks = list(table.scan(row_filter=span).plan_files())
    field = table.schema().find_field(key)
    ordered = _as_bound_values(values, field.field_type)
    if ordered is None or not tasks:
        return tasks
    held = []
    for task in tasks:
        lower = (task.file.lower_bounds or {}).get(field.field_id)
        upper = (task.file.upper_bounds or {}).get(field.field_id)
        if lower is not None and upper is not None:
            lo, hi = from_bytes(field.field_type, lower), from_bytes(field.field_type, upper)
            i = bisect.bisect_left(ordered, lo)
            if i == len(ordered) or ordered[i] > hi:
                continue  # no touched key between this file's bounds
        held.append(task)
    return held


def _as_bound_values(values: pa.ChunkedArray, iceberg_type) -> list | None:
    """The values sorted, as Python values of the kind ``from_bytes`` decodes bounds to
    (ints for integers, days for dates, microseconds for timestamps; decimals, strings, which
    compare as Iceberg's UTF-8 byte order does), or None for other types."""
    from pyiceberg.types import (
        DateType,
        DecimalType,
        IntegerType,
        LongType,
        StringType,
        TimestampType,
        TimestamptzType,
    )

    if isinstance(iceberg_type, DateType):
        values = pc.cast(values, pa.int32())
    elif isinstance(iceberg_type, (TimestampType, TimestamptzType)):
        values = pc.cast(pc.cast(values, pa.timestamp("us", values.type.tz)), pa.int64())
    elif not isinstance(iceberg_type, (IntegerType, LongType, DecimalType, StringType)):
        return None
    return values.take(pc.sort_indices(values)).to_pylist()


def _ranges(replaces: tuple[KeyRange, ...]):
    """The rows of any of ``replaces`` as a pyiceberg filter (dates as ISO text)."""
    from pyiceberg.expressions import (
        AlwaysTrue,
        And,
        GreaterThanOrEqual,
        IsNull,
        LessThan,
        Or,
    )

    out = None
    for r in replaces:
        def value(v):
            return v.isoformat() if isinstance(v, dt.date) else v

        cond = AlwaysTrue()
        if r.start is not None:
            cond = GreaterThanOrEqual(r.column, value(r.start))
        if r.end is not None:
            below = LessThan(r.column, value(r.end))
            cond = And(cond, below) if r.start is not None else Or(below, IsNull(r.column))
        out = cond if out is None else Or(out, cond)
    return out


def _distinct(t: pa.Table, keys: list[str]) -> pa.Table:
    return t.group_by(keys, use_threads=False).aggregate([]).select(keys)


def _touched_mask(current: pa.Table, touched: pa.Table, keys: list[str]) -> pa.Array:
    """Which rows of ``current`` have one of the touched keys: a hash lookup for one key
    column; for several, a semi join of the key columns and row numbers only (a join that
    carries every column costs more than the rest of the batch)."""
    if current.num_rows == 0:
        return pa.array([], pa.bool_())
    if len(keys) == 1:
        return pc.is_in(current[keys[0]], value_set=touched[keys[0]].combine_chunks())
    rownum = pa.array(np.arange(current.num_rows, dtype=np.int64))
    probe = current.select(keys).append_column("__row", rownum)
    hits = probe.join(touched, keys, join_type="left semi")["__row"]
    return pc.is_in(rownum, value_set=hits.combine_chunks())


def _between(key: str, lo, hi):
    """Rows whose ``key`` lies in ``[lo, hi]`` (dates and timestamps as ISO text)."""
    from pyiceberg.expressions import And, GreaterThanOrEqual, LessThanOrEqual

    if isinstance(lo, dt.date):
        lo, hi = lo.isoformat(), hi.isoformat()
    return And(GreaterThanOrEqual(key, lo), LessThanOrEqual(key, hi))


def _key_range(touched: pa.Table, key: str):
    """Rows whose first key column lies between the touched keys' least and greatest (a
    filter of two literals; one literal per key makes pyiceberg's expression binding the
    bottleneck)."""
    from pyiceberg.expressions import AlwaysTrue

    col = touched[key]
    if pa.types.is_boolean(col.type) or pa.types.is_binary(col.type):
        return AlwaysTrue()
    return _between(key, pc.min(col).as_py(), pc.max(col).as_py())


def _patched(patches: pa.Table, current: pa.Table, keys: list[str]) -> pa.Table:
    """Patch rows with their nulls filled from the current rows (left join on the keys)."""
    if current.num_rows == 0 or patches.num_rows == 0:
        return patches
    values = [c for c in patches.column_names if c not in keys]
    cur = current.select(keys + values).rename_columns(keys + [f"__cur_{c}" for c in values])
    joined = patches.join(cur, keys, join_type="left outer")
    cols = [joined[c] if c in keys else pc.coalesce(joined[c], joined[f"__cur_{c}"])
            for c in patches.column_names]
    return pa.Table.from_arrays(cols, schema=patches.schema)


def _amended(current: pa.Table, amends: pa.Table, keys: list[str]) -> pa.Table:
    """The open versions of amended keys: the amend row's values, their own
    ``__START_AT``."""
    if current.num_rows == 0 or amends.num_rows == 0:
        return current.slice(0, 0)
    starts = current.select(keys + [START_AT])
    joined = amends.drop_columns([START_AT]).join(starts, keys, join_type="inner")
    return joined.select(current.column_names)


def _closed(current: pa.Table, closes: pa.Table, keys: list[str]) -> pa.Table:
    """The open versions with ``__END_AT`` set from the close rows."""
    if current.num_rows == 0:
        return current
    ends = closes.rename_columns(keys + ["__new_end"])
    joined = current.drop_columns([END_AT]).join(ends, keys, join_type="inner")
    joined = joined.rename_columns([END_AT if c == "__new_end" else c
                                    for c in joined.column_names])
    return joined.select(current.column_names)
