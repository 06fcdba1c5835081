"""What every sink shares: the planned changes it receives, its interface, and option parsing.

This module imports neither Spark nor a database driver. A sink receives a ``ChangeSet``:
one Arrow table of *net* changes for one micro-batch, already reduced by
``sparkcdc.apply`` (last change per key for SCD type 1, ordered versions for type 2). The
sink writes it atomically together with the batch id, so a replayed batch changes nothing.
"""

from __future__ import annotations

import dataclasses
import importlib
import logging
from abc import ABC, abstractmethod
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any, ClassVar

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from sparkcdc.errors import ConfigError, SchemaError
from sparkcdc.sinks.evolution import Change, pending
from sparkcdc.sinks.slices import KeySlices, stable_hash

__all__ = ["KeySlices", "stable_hash"]  # (their home: sinks/slices.py)

log = logging.getLogger("sparkcdc.sinks")

OP = "__op"  # the planned operation of a row (see ChangeSet)
NEW = "__new"  # an upsert of a key the source did not hold before the batch (see split_new)
START_AT, END_AT = "__START_AT", "__END_AT"  # SCD type 2 history columns (Databricks' names)
UPSERT, DELETE, PATCH, VERSION, CLOSE = "upsert", "delete", "patch", "version", "close"
AMEND = "amend"  # SCD type 2: the key's open version takes the row's values and __END_AT
BATCHES_TABLE = "_sparkcdc_batches"  # side table for the last applied batch id (SQL targets)


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

    def rows(self, *ops: str) -> pa.Table:
        """Rows with the given ops, in target-schema column order, without ``__op``."""
        if self.table.num_rows == 0:
            return self.table.select(self.target_schema.names).slice(0, 0)
        mask = pc.is_in(self.table[OP], value_set=pa.array(ops, pa.string()))
        return self.table.filter(mask).select(self.target_schema.names)

    def key_rows(self, *ops: str) -> pa.Table:
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


class Sink(ABC):
    """A target for change batches. Subclasses live in ``sparkcdc/sinks/<type>/``.

    ``kind`` is ``"merge"`` (receives a ``ChangeSet`` through ``write``) or ``"changelog"``
    (receives the raw change rows as a Spark DataFrame through ``write_changelog``, with the
    key columns: a message bus keys its messages by them; or, where ``takes_arrow``, as the
    Arrow table the pipeline holds on the driver).
    Connections open lazily on first use, never in ``__init__``.
    """

    type: ClassVar[str]
    kind: ClassVar[str] = "merge"
    writer: ClassVar[str] = ""  # the library that writes the target (``sparkcdc status``)
    # how Spark tasks write the target's rows where it takes them (``takes_files``,
    # ``takes_changes``), as ``sparkcdc status`` names it
    tasks_writer: ClassVar[str] = ""
    # a changelog sink that also takes the batch's change rows as an Arrow table (the
    # pipeline holds them so on the driver): it is spared the trip through Spark
    takes_arrow: ClassVar[bool] = False
    # ``empty()`` writes an event naming the table (the kafka sink's truncate) rather than
    # deleting rows: it empties the table for a changelog's reader and touches no other
    # table's rows, so a target other tables share may be emptied for one of them
    empties_by_event: ClassVar[bool] = False

    @classmethod
    @abstractmethod
    def from_options(cls, options: Mapping[str, Any]) -> Sink:
        """The sink of one target table, from the options its target gives
        (``pipeline/definition/targets.py``); a bad option is a ``ConfigError`` naming it."""

    @abstractmethod
    def last_batch_id(self) -> int | None:
        """The last batch id applied to the target, or None."""

    # -- rows written by the tasks that hold them, committed once by the driver ----------

    def last_batch_seen(self) -> int | None:
        """The highest batch id the target holds any part of: ``last_batch_id``, or a
        later one whose files were committed before the rest of its batch (which then
        failed). A table taken again numbers its batches after it."""
        return self.last_batch_id()

    @classmethod
    def may_take_files(cls, options: Mapping[str, Any]) -> bool:
        """Whether a target of these options can take files from tasks (``takes_files``),
        told without opening it (``sparkcdc status``)."""
        return False

    def takes_files(self) -> bool:
        """Whether Spark tasks can write this target's new rows as files of their own
        (``write_files``; a SQL target's "files" are staging tables), which the driver then
        commits once (``commit_files``): no row goes through the driver. Where not, the
        driver writes them (``write``)."""
        return False

    def new_rows(self, changes: ChangeSet) -> pa.Table | None:
        """In a Spark task: the rows to write as files when every change of ``changes`` is
        a row new to the target (none of its stored rows can have their key); None when
        any may not be, and the changes go to the driver's ``write``."""
        return None

    def ready_for_files(self, schema: pa.Schema) -> None:
        """On the driver, before tasks write files into the target: the target made, with
        the columns of ``schema`` (the rows as the driver's ``write`` would store them), if
        it is not there yet; a reader then never finds its folder without a table."""

    def write_files(self, rows: pa.Table, batch_id: int) -> list[dict[str, Any]]:
        """In a Spark task: ``rows``, new to the target and shaped as it stores them,
        written as files nothing has committed yet; what the driver's commit needs about
        each (a few hundred bytes a file, whatever its rows)."""
        raise NotImplementedError(f"the {self.type} sink does not take files from tasks")

    def commit_files(self, files: list[dict[str, Any]], schema: pa.Schema,
                     batch_id: int, final: bool = True) -> WriteResult:
        """On the driver: every task's files of a batch in one commit, with the batch id
        (a target that has the files of the batch already commits nothing); the files of
        attempts that died are removed. Not ``final``: the batch's other changes of the
        table follow in the driver's ``write``, which records the batch id as applied."""
        raise NotImplementedError(f"the {self.type} sink does not take files from tasks")

    @classmethod
    def may_take_changes(cls, options: Mapping[str, Any]) -> bool:
        """Whether a target of these options can take changes from tasks
        (``takes_changes``), told without opening it (``sparkcdc status``): a table that
        exists without the feature it needs may still say no."""
        return False

    def takes_changes(self, keys: tuple[str, ...]) -> bool:
        """Whether Spark tasks can write this target's changes, each task a slice of the
        keys (``plan_changes``, ``write_changes``, ``commit_changes``): no row goes through
        the driver, and an update or delete marks the stored row deleted instead of
        rewriting what holds it. Where not, the driver writes them (``write``)."""
        return False

    def plan_changes(self, keys: tuple[str, ...], schema: pa.Schema,
                     slices: int) -> KeySlices:
        """On the driver, before the tasks write a batch's changes: the target's keys cut
        into at most ``slices`` slices (``KeySlices``); ``schema``: the rows as stored."""
        raise NotImplementedError(f"the {self.type} sink does not take changes from tasks")

    def write_changes(self, slices: KeySlices, index: int, upserts: pa.Table,
                      changed_keys: pa.Table, batch_id: int,
                      replaces: tuple[KeyRange, ...] = ()) -> dict[str, Any]:
        """In a Spark task: slice ``index``'s planned changes, uncommitted: ``upserts``
        (rows to hold, shaped as the target stores them) and ``changed_keys`` (the key
        columns of every upserted or deleted key); ``replaces``: the batch's ranges whose
        other rows go (``ChangeSet.replaces``; a sink may leave them to ``commit_changes``).
        Called for every slice when there are ranges, rows or none. What the driver's
        commit needs about them (a few hundred bytes a file, whatever its rows)."""
        raise NotImplementedError(f"the {self.type} sink does not take changes from tasks")

    def commit_changes(self, slices: KeySlices, written: list[dict[str, Any]],
                       batch_id: int, replaces: tuple[KeyRange, ...] = ()) -> WriteResult:
        """On the driver: every slice's changes of a batch in one commit with the batch id
        (a target that has the batch commits nothing); what attempts that died left is
        removed. ``replaces``: as ``write_changes`` got them."""
        raise NotImplementedError(f"the {self.type} sink does not take changes from tasks")

    # -- rows written by Spark itself, from the micro-batch's DataFrame -------------------

    @classmethod
    def writer_for(cls, options: Mapping[str, Any], spark_conf: Mapping[str, str]) -> str:
        """The writer ``sparkcdc status`` names for a target of these options in a session
        of ``spark_conf`` (the pipeline's ``spark`` section) when Spark's own writer takes
        it (``takes_frames``); "" otherwise."""
        return ""

    def takes_frames(self, keys: tuple[str, ...]) -> bool:
        """Whether Spark's own writer for the target's format writes it (Spark's Delta:
        ``sinks/delta/spark_writer.py``), from the batch's changes as a Spark DataFrame
        reduced on the executors (``write_frame``): no row goes through the driver, and
        the target is written as that platform's tools expect. Decided by the sink's
        options and the session it was published in (``publish``)."""
        return False

    def frame_rows(self, rows: pa.Table) -> pa.Table:
        """In a Spark task: rows shaped like the target (``conform``), as it stores them
        (Delta: durations as microseconds), for the DataFrame ``write_frame`` gets."""
        return rows

    def write_frame(self, frame: Any, keys: tuple[str, ...], batch_id: int,
                    replaces: tuple[KeyRange, ...] = ()) -> WriteResult:
        """On the driver: one batch's planned changes of the target (``frame``: a Spark
        DataFrame of its stored columns, ``__op`` and ``__new``, one row per key) written
        by Spark with the batch id (a target that has the batch writes nothing)."""
        raise NotImplementedError(f"the {self.type} sink is not written by Spark itself")

    def write(self, changes: ChangeSet, batch_id: int) -> WriteResult:
        raise NotImplementedError(f"the {self.type} sink takes change rows, not a ChangeSet")

    def write_changelog(self, df: Any, batch_id: int, keys: tuple[str, ...] = ()) -> WriteResult:
        raise NotImplementedError(f"the {self.type} sink takes a ChangeSet, not change rows")

    @abstractmethod
    def read(self) -> pa.Table:
        """The whole target table as stored (for tests, debugging and benchmarks)."""

    def warm(self) -> None:
        """Open ahead what the first write needs (a connection, a topic, a transactional
        producer), so that it is ready when the first batch arrives. The runner calls it
        in the background while its stream starts; a failure here is left for that write
        to meet and report."""

    # -- schema evolution (sinks/evolution.py; each sink's own in sinks/<type>/) ----------

    def _evolution(self) -> Any:
        """The sink's own schema evolution, ``sinks/<type>/evolution.py`` (None: it has
        none, or overrides these methods itself): ``stored_columns(sink)``,
        ``evolve(sink, changes, keys)``, ``empty(sink)`` and, where a target cannot make
        every change, ``can_change(change, current)``."""
        name = f"sparkcdc.sinks.{self.type}.evolution"
        try:
            return importlib.import_module(name)
        except ModuleNotFoundError as e:
            if e.name != name:
                raise
            return None

    def stored_columns(self) -> pa.Schema | None:
        """The target's stored columns, or None when it does not exist yet (or has no
        schema of its own)."""
        m = self._evolution()
        return m.stored_columns(self) if m is not None else None

    def can_change(self, change: Change, current: pa.DataType | None = None) -> bool:
        """Whether the target can make ``change`` (``current``: the column's stored type,
        for a retype)."""
        m = self._evolution()
        if m is None:
            return False
        check = getattr(m, "can_change", None)
        return check(change, current) if check is not None else True

    def refusal(self, change: Change) -> str:
        """Why the target cannot make ``change``, in words for the user."""
        m = self._evolution()
        note = getattr(m, "refusal_note", None) if m is not None else None
        extra = note(change) if note is not None else ""
        return f"the {self.type} target cannot {change.describe()}" + (
            f" ({extra})" if extra else "")

    def evolve(self, changes: list[Change], keys: tuple[str, ...] = ()) -> None:
        """Make ``changes`` to the target table. Idempotent: a change the target already
        shows is skipped, so a run that stopped half way can do it again. A target that
        does not exist yet is left alone: its first write creates it with the new
        columns. A change the sink cannot make raises ``SchemaError``."""
        bad = [c for c in changes if not self.can_change(c)]
        if bad:
            raise SchemaError(self.refusal(bad[0]),
                              fix="use schema.change.behavior: try_evolve or lenient")
        have = self.stored_columns()
        if not changes or have is None:
            return
        todo = pending(changes, set(have.names))
        if todo:
            self._evolve(todo, tuple(keys))

    def _evolve(self, changes: list[Change], keys: tuple[str, ...]) -> None:
        """Make ``changes``, which the target does not show yet (``evolve`` filtered)."""
        m = self._evolution()
        if m is None:
            raise NotImplementedError(f"the {self.type} sink evolves no schema")
        m.evolve(self, changes, keys)

    def announce(self, schema: Any, statements: tuple[str, ...], columns: tuple[str, ...],
                 diff: Mapping[str, tuple[str, ...]]) -> None:
        """After the target changed for its source table's new ``schema`` (a
        ``core.schema.TableSchema``; ``statements``: the DDL the stream carried, ``diff``:
        the column names ``added``, ``dropped`` and ``modified``; the target now has
        ``columns``): a sink whose readers learn of schema changes from the data itself
        writes the announcement there (the kafka sink, as its format does). Tables keep
        their schema where readers look, so the others do nothing."""
    def empty(self) -> None:
        """Delete every row of the target (a table taken again from its snapshot); its
        schema and its record of applied batches stay."""
        m = self._evolution()
        if m is not None:
            m.empty(self)
            return
        raise SchemaError(f"the {self.type} target cannot be emptied by the pipeline",
                          fix="empty the target table and restart, or use "
                              "schema.change.behavior: ignore")

    def publish(self, spark: Any) -> bool:
        """On the driver, with the pipeline's Spark session: name the target where readers
        look it up, if the sink does so (a Delta table in a Spark catalog,
        ``sinks/delta/catalog.py``). Called when the table joins, where a wrong entry fails
        before anything is written, and after its first write until it returns True."""
        return True

    def close(self) -> None:
        """Release connections; the sink reopens them if used again."""

    def __enter__(self):
        return self

    def __exit__(self, *exc) -> None:
        self.close()


# -- option helpers the sinks share (the options themselves: sparkcdc/options.py) -------------

def table_name_parts(sink_type: str, key: str, value: str, parts: int) -> tuple[str, ...]:
    """Split 'a.b' into parts; names with dots are not supported (say so clearly)."""
    got = tuple(value.split("."))
    if len(got) != parts or not all(got):
        want = ".".join(["name"] * parts)
        raise ConfigError(f"option '{key}' of the {sink_type} sink is malformed: {value!r}",
                          fix=f"give it as '{want}'", key=key)
    return got


# -- a pipeline's destination: one target table per routed name ``db.table`` ----------------

def set_per_target(sink_type: str, options: Mapping[str, str], *names: str) -> None:
    """Refuse options a pipeline sets for each target table itself."""
    for name in names:
        if name in options:
            raise ConfigError(f"option '{name}' of the {sink_type} sink is set by the pipeline "
                              "for each target table",
                              fix="name targets with 'route' (sink-table: db.table)", key=name)


def backtick(name: str) -> str:
    """An identifier quoted with backticks, as MySQL's and delta-rs' SQL take it."""
    return "`" + name.replace("`", "``") + "`"


def sub_path(sink_type: str, options: Mapping[str, str], db: str, table: str) -> str:
    """A target's folder under the destination's base ``path``: ``<path>/<db>/<table>``."""
    base = options.get("path")
    if not base:
        raise ConfigError(f"the {sink_type} sink needs the option 'path'",
                          fix="the base directory; each table goes to path/<db>/<table>",
                          key="path")
    base = str(base)
    if "://" in base:
        return f"{base.rstrip('/')}/{db}/{table}"
    import os

    return os.path.join(base, db, table)


# -- type helpers shared by the SQL sinks --------------------------------------------------------

def micros(duration: pa.ChunkedArray | pa.Array) -> pa.Array:
    """A duration column as int64 microseconds (Debezium's MicroTime), for targets without
    an interval type."""
    return pc.cast(pc.cast(duration, pa.duration("us")), pa.int64())


def check_key_not_null(changes: ChangeSet) -> None:
    for k in changes.keys:
        if changes.table.num_rows and changes.table[k].null_count:
            raise SchemaError(f"key column '{k}' has null values in the batch",
                              fix="apply_changes needs non-null keys; filter or fill them")
