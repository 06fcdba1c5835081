"""The Iceberg sink's copy-on-write merge, the driver's path for changes (``IcebergSink.write``):
the data files whose first-key bounds hold a touched key read once (their delete files
applied), dropped, and their untouched rows written back with the new and patched ones
(SCD2: closed versions) in one ``overwrite`` snapshot (``plan_merge``, then pyiceberg's
``overwrite``, or the sink's own commit when a dropped file has delete files, which go with
it); and the key-range questions the append path asks of file
statistics. In a pipeline, tasks write changes merge-on-read instead (``changes.py``)."""

from __future__ import annotations

import bisect
import datetime as dt
from dataclasses import dataclass
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

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
    holds_any,
)
from sparkcdc.sinks.iceberg.storage import storage_table


@dataclass(frozen=True)
class Rewrite:
    """A copy-on-write merge, planned: the scan ``tasks`` of the files it drops (each with
    the delete files that apply to it), the ``rows`` written in their place (their
    untouched rows and the new and patched ones), and ``span``, the rows it changes (what a
    retried commit is validated against)."""

    tasks: list
    rows: pa.Table
    span: Any

    def drops_deletes(self) -> bool:
        """Whether a dropped file has delete files: pyiceberg's overwrite cannot drop them
        with it (``commit.py``), so the sink commits this merge itself."""
        return any(t.delete_files for t in self.tasks)


def plan_merge(table, changes: ChangeSet, arrow_schema: pa.Schema) -> Rewrite | None:
    """Copy-on-write of the files holding the changes' keys, planned (None: nothing to do,
    deletes of keys the target does not hold).

    The candidate files are those whose statistics overlap the touched keys' range (pyiceberg
    prunes by manifest and file statistics), kept only if a touched key lies within the
    file's own bounds of the first key column: a batch touching the first and last keys of a
    table of key-sorted files rewrites two files, not all of them. Each file is read once
    (``Transaction.delete`` would read a file straddling the range a second time to rewrite
    its rows outside it), with its delete files applied, and dropped; its untouched rows go
    back with the new ones. The rows in the ranges of chunks read again
    (``ChangeSet.replaces``) do not go back: the batch's rows hold those ranges anew."""
    keys = list(changes.keys)
    ops = (CLOSE, AMEND) if changes.scd_type == 2 else (UPSERT, PATCH, DELETE)
    key_schema = pa.schema([arrow_schema.field(k) for k in keys])
    touched = _distinct(storage_table(changes.key_rows(*ops)).select(keys).cast(key_schema),
                        keys)
    span = key_range(touched, keys[0]) if touched.num_rows else None
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
        return None
    assert span is not None  # (tasks or rows: something was touched or replaced)
    return Rewrite(tasks, rows, span)


def overwrite(table, tx, rewrite: Rewrite, summary: dict[str, str]) -> None:
    """A planned merge whose files have no delete files, as one pyiceberg ``overwrite``
    snapshot of ``tx``."""
    from pyiceberg.io.pyarrow import _dataframe_to_data_files

    with tx.update_snapshot(snapshot_properties=summary).overwrite() as snapshot:
        # the predicate deletes nothing by itself (the files are named); it is what pyiceberg
        # validates a retried commit against, so a concurrent writer that changed this range
        # (another run of the same batch) fails the commit instead of being merged twice
        snapshot.delete_by_predicate(rewrite.span)
        for task in rewrite.tasks:
            snapshot.delete_data_file(task.file)
        if rewrite.rows.num_rows:
            # the writer pyiceberg's own append and delete use: added files in this snapshot
            for data_file in _dataframe_to_data_files(table_metadata=tx.table_metadata,
                                                      df=rewrite.rows, io=table.io,
                                                      write_uuid=snapshot.commit_uuid):
                snapshot.append_data_file(data_file)


def may_hold(table, span) -> bool:
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
        BooleanExpression,
        GreaterThanOrEqual,
        IsNull,
        LessThan,
        Or,
    )

    def value(v):
        return v.isoformat() if isinstance(v, dt.date) else v

    # (pyiceberg's predicates take a column name and a value positionally; their pydantic
    # signatures, which mypy reads, name a bound term and keywords only: hence the ignores)
    out: BooleanExpression | None = None
    for r in replaces:
        cond: BooleanExpression = AlwaysTrue()
        if r.start is not None:
            cond = GreaterThanOrEqual(r.column, value(r.start))  # type: ignore[call-arg, arg-type]
        if r.end is not None:
            below = LessThan(r.column, value(r.end))  # type: ignore[call-arg, arg-type]
            cond = (And(cond, below) if r.start is not None
                    else Or(below, IsNull(r.column)))  # type: ignore[call-arg, arg-type]
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


def between(key: str, lo, hi):
    """Rows whose ``key`` lies in ``[lo, hi]`` (dates and timestamps as ISO text)."""
    from pyiceberg.expressions import And, GreaterThanOrEqual, LessThanOrEqual

    if isinstance(lo, dt.date):
        lo, hi = lo.isoformat(), hi.isoformat()
    return And(GreaterThanOrEqual(key, lo),  # type: ignore[call-arg, arg-type]
               LessThanOrEqual(key, hi))  # type: ignore[call-arg, arg-type]


def key_range(touched: pa.Table, key: str):
    """Rows whose first key column lies between the touched keys' least and greatest (a
    filter of two literals; one literal per key makes pyiceberg's expression binding the
    bottleneck)."""
    from pyiceberg.expressions import AlwaysTrue

    col = touched[key]
    if pa.types.is_boolean(col.type) or pa.types.is_binary(col.type):
        return AlwaysTrue()
    return between(key, pc.min(col).as_py(), pc.max(col).as_py())


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
