"""The planned changes a sink receives for one micro-batch: a ``ChangeSet`` of rows, each
with its ``RowOp``, and the key ranges a batch replaces (``KeyRange``); and what a sink says
it did with them (``WriteResult``).

Planned by ``sparkcdc.apply``, handed to ``Sink.write`` (``base.py``); neither Spark nor a
database driver is needed to read them.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from sparkcdc.errors import SchemaError
from sparkcdc.sinks.kinds import Word

OP = "__op"  # the planned operation of a row (see ChangeSet)
NEW = "__new"  # an upsert of a key the source did not hold before the batch (see split_new)
START_AT, END_AT = "__START_AT", "__END_AT"  # SCD type 2 history columns (Databricks' names)


class RowOp(Word):
    """A row's planned operation in a ``ChangeSet`` (its ``__op`` column holds the word)."""

    UPSERT = "upsert"  # SCD1: replace the row
    DELETE = "delete"  # SCD1: delete the key
    PATCH = "patch"  # SCD1: update; a null keeps the target's value (ignore_null_updates)
    VERSION = "version"  # SCD2: a new history row
    CLOSE = "close"  # SCD2: set the open version's __END_AT
    AMEND = "amend"  # SCD2: the key's open version takes the row's values and __END_AT


UPSERT, DELETE, PATCH = RowOp.UPSERT, RowOp.DELETE, RowOp.PATCH
VERSION, CLOSE, AMEND = RowOp.VERSION, RowOp.CLOSE, RowOp.AMEND


@dataclass(frozen=True)
class KeyRange:
    """The rows of a target whose ``column`` lies in ``[start, end)``: the range of a chunk
    read again (``ChangeSet.replaces``). ``None`` is unbounded; the range with no start
    also holds the rows whose ``column`` is NULL, as the first chunk does
    (``core/chunking.py``). The bounds are the chunk's, as the source reads them: ints,
    Decimals or dates, the types whose order every target shares with the source (a
    string's order is its collation's, which no target knows)."""

    column: str
    start: Any = None
    end: Any = None

    def holds(self, values: pa.Array | pa.ChunkedArray) -> pa.Array:
        """Whether each of ``values`` (the column's) lies in the range; never null."""
        n = len(values)
        inside = pa.array(np.ones(n, bool))
        if self.start is not None:
            inside = pc.and_(inside, pc.fill_null(
                pc.greater_equal(values, pa.scalar(self.start, values.type)), False))
        if self.end is not None:
            inside = pc.and_(inside, pc.fill_null(
                pc.less(values, pa.scalar(self.end, values.type)), False))
            if self.start is None:
                inside = pc.or_(inside, pc.is_null(values))
        return inside.combine_chunks() if isinstance(inside, pa.ChunkedArray) else inside

    def meets(self, lo: Any, hi: Any, nulls: bool = False) -> bool:
        """Whether a file whose ``column`` lies in ``[lo, hi]`` (``nulls``: it also holds
        nulls) may hold a row of the range."""
        if nulls and self.start is None:
            return True
        return ((self.start is None or hi >= self.start)
                and (self.end is None or lo < self.end))


def holds_any(ranges: tuple[KeyRange, ...], rows: pa.Table) -> pa.Array:
    """Whether each row of ``rows`` lies in one of ``ranges`` (each by its own column)."""
    out = pa.array(np.zeros(rows.num_rows, bool))
    for r in ranges:
        out = pc.or_(out, r.holds(rows.column(r.column)))
    return out


@dataclass(frozen=True)
class ChangeSet:
    """The net changes of one micro-batch for one target table.

    ``table`` holds the target's columns (``columns``; for SCD type 2 followed by
    ``__START_AT`` and ``__END_AT``) and ``__op``:

    * SCD type 1: ``upsert`` (replace the row), ``patch`` (update; a null keeps the target's
      value; only with ``ignore_null_updates``) or ``delete`` (only the key columns matter).
      At most one row per key.
    * SCD type 2: ``close`` (set ``__END_AT`` of the key's open version to the row's
      ``__END_AT``), ``amend`` (set every column of the key's open version but
      ``__START_AT`` to the row's: a change of columns whose history is not tracked, and
      ``__END_AT`` when a later change ends it; its ``__START_AT`` is null) and ``version``
      (a new history row to insert). At most one ``close`` or ``amend`` per key.

    An SCD type 1 table may also carry ``__new`` (bool): the upsert's key was first
    *inserted* in this batch, so the source did not hold it before. Snapshot rows are all
    new. A sink may append such rows without looking up their keys, which is what makes a
    snapshot an append rather than a merge over the whole target; ``split_new`` says which
    rows it may append.

    ``replaces`` (SCD type 1 only): ranges of chunks read again in this batch
    (docs/algorithm.md, "Reading a table again"). Their rows are the source's whole state
    there as of the batch's end, so after the batch the target holds in each range only
    keys the batch upserts: any other row there (a row the source deleted before its chunk
    was read, a key written into the target behind the pipeline) is deleted in the same
    commit. A sink may delete every row of the ranges first and then apply the batch,
    which comes to the same.
    """

    table: pa.Table
    keys: tuple[str, ...]
    columns: tuple[str, ...]
    scd_type: int = 1
    replaces: tuple[KeyRange, ...] = ()

    def __post_init__(self):
        missing = [k for k in self.keys if k not in self.columns]
        if missing:
            raise SchemaError(f"key columns {missing} are not among the target columns",
                              fix="include the keys in column_list")
        outside = [r.column for r in self.replaces if r.column not in self.columns]
        if outside or (self.replaces and self.scd_type != 1):
            raise SchemaError(f"ranges to replace by {outside or 'a history table'}: only a "
                              "target column of an SCD type 1 table can bound them",
                              fix="a bug: the pipeline gives ranges only to such tables")

    @property
    def target_schema(self) -> pa.Schema:
        """The target table's schema: its columns, then the SCD2 history columns."""
        names = list(self.columns) + ([START_AT, END_AT] if self.scd_type == 2 else [])
        return pa.schema([self.table.schema.field(n) for n in names])

    @property
    def num_rows(self) -> int:
        return self.table.num_rows

    def rows(self, *ops: RowOp) -> pa.Table:
        """Rows with the given ops, in target-schema column order, without ``__op``."""
        if self.table.num_rows == 0:
            return self.table.select(self.target_schema.names).slice(0, 0)
        words = [RowOp(o).value for o in ops]
        mask = pc.is_in(self.table[OP], value_set=pa.array(words, pa.string()))
        return self.table.filter(mask).select(self.target_schema.names)

    def key_rows(self, *ops: RowOp) -> pa.Table:
        t = self.rows(*ops)
        extra = [END_AT] if self.scd_type == 2 and CLOSE in ops else []
        return t.select(list(self.keys) + extra)

    def split_new(self, may_hold: Callable[[Any, Any], bool], *,
                  server_compares: bool = False) -> tuple[pa.Table, ChangeSet]:
        """``(rows to append, the rest)``. The new rows (``__new``) are appendable when the
        target holds no row whose first key column lies in their ``[min, max]``:
        ``may_hold(lo, hi)`` asks the target (file statistics, an index range). A target
        out of step with the source (a re-snapshot not cleared, a user's own rows) answers
        yes, and then every row stays in the rest, to be merged as before.

        ``server_compares=True`` is for targets that compare keys their own way (SQL
        servers: collations, time zones): bounds Arrow computes need not bound the keys
        there, so only an integer, decimal or date first key is checked; any other keeps
        every row in the rest."""
        none = self.table.schema.empty_table().select(self.target_schema.names)
        if self.scd_type != 1 or NEW not in self.table.column_names or not self.num_rows:
            return none, self
        bounds_type = self.table.schema.field(self.keys[0]).type
        if not _orderable(bounds_type, server_compares):
            return none, self
        is_new = pc.fill_null(self.table[NEW], False)
        if not pc.any(is_new).as_py():
            return none, self
        new = self.table.filter(is_new)
        if may_hold(*_bounds(new[self.keys[0]])):
            return none, self
        rest = self.table.filter(pc.invert(is_new))
        return (new.select(self.target_schema.names), dataclasses.replace(self, table=rest))

    def key_bounds(self) -> tuple[Any, Any] | None:
        """``(min, max)`` of the first key column over every row, or None if empty."""
        return _bounds(self.table[self.keys[0]]) if self.num_rows else None

    def counts(self, appended: int = 0) -> dict[str, int]:
        """Rows per op; ``appended``: how many of the upserts a sink appended
        (``split_new``), reported as ``appended`` when there were any."""
        if self.table.num_rows == 0:
            return {}
        vc = pc.value_counts(self.table[OP]).to_pylist()
        out = {d["values"]: d["counts"] for d in vc}
        if appended:
            out["appended"] = appended
        return out


def _bounds(column: pa.ChunkedArray) -> tuple[Any, Any]:
    mm = pc.min_max(column)
    return mm["min"].as_py(), mm["max"].as_py()


def _orderable(t: pa.DataType, server_compares: bool) -> bool:
    """A first key column whose Arrow min/max bound its keys in the target's own order."""
    if pa.types.is_integer(t) or pa.types.is_decimal(t) or pa.types.is_date(t):
        return True
    return not server_compares and (pa.types.is_timestamp(t) or pa.types.is_string(t)
                                    or pa.types.is_large_string(t))


@dataclass(frozen=True)
class WriteResult:
    """What a sink did with one batch."""

    batch_id: int
    skipped: bool = False  # the batch id was already applied: nothing changed
    counts: Mapping[str, int] | None = None
