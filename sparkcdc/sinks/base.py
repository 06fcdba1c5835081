"""The sink interface: the abstract ``Sink`` every target type implements, and the small
helpers the sinks share (option naming, a duration as microseconds).

This module imports neither Spark nor a database driver. A merge sink receives a ``ChangeSet``
(``change_set.py``): one Arrow table of *net* changes for one micro-batch, already reduced
by ``sparkcdc.apply``. The sink writes it atomically together with the batch id, so a
replayed batch changes nothing.

A sink is one class with every operation a method of ``Sink``: abstract where every sink
implements it, and otherwise behind a capability its class declares
(``capabilities.Capabilities``), which ``Sink.__init_subclass__`` checks against what the
class implements. The pipeline asks the declaration, never probes for a method, and finds
the class by its ``SinkType`` (``registry.py``).
"""

from __future__ import annotations

import logging
import os
from abc import ABC, abstractmethod
from collections.abc import Callable, Mapping, Sequence
from types import ModuleType
from typing import Any, ClassVar

import pyarrow as pa
import pyarrow.compute as pc

from sparkcdc.errors import ConfigError, SchemaError
from sparkcdc.options import Opt
from sparkcdc.sinks.capabilities import Capabilities
from sparkcdc.sinks.change_set import (
    AMEND,
    CLOSE,
    DELETE,
    END_AT,
    NEW,
    OP,
    PATCH,
    START_AT,
    UPSERT,
    VERSION,
    ChangeSet,
    KeyRange,
    RowOp,
    WriteResult,
    holds_any,
)
from sparkcdc.sinks.drivers import require
from sparkcdc.sinks.evolution import Change, pending
from sparkcdc.sinks.kinds import SinkKind, SinkType
from sparkcdc.sinks.slices import KeySlices, stable_hash

# (their homes: sinks/slices.py and sinks/change_set.py; imported from here as well)
__all__ = ["AMEND", "CLOSE", "DELETE", "END_AT", "NEW", "OP", "PATCH", "START_AT", "UPSERT",
           "VERSION", "ChangeSet", "KeyRange", "KeySlices", "RowOp", "WriteResult", "holds_any",
           "stable_hash"]

log = logging.getLogger("sparkcdc.sinks")

BATCHES_TABLE = "_sparkcdc_batches"  # side table for the last applied batch id (SQL targets)


class Sink(ABC):
    """A target for change batches. Subclasses live in ``sparkcdc/sinks/<type>/`` and are
    found by their ``type`` (``registry.py``).

    What a subclass declares: its ``type``; its ``capabilities`` (what it holds, which of
    the operations below it takes, how it evolves and empties); the Python modules it needs
    (``drivers``, loaded when it is made: ``load_drivers``); its options (``option_spec``,
    ``option_prefixes``, ``path_options``). What it implements: ``from_options``,
    ``target_options``, ``last_batch_id``, ``read``, and the operations of each capability
    it declares. A ``merge`` sink receives a ``ChangeSet`` through ``write``; a
    ``changelog`` sink receives the raw change rows as a Spark DataFrame through
    ``write_changelog`` (with the key columns: a message bus keys its messages by them; or,
    where ``takes_arrow``, as the Arrow table the pipeline holds on the driver).
    Connections open lazily on first use, never in ``__init__``.
    """

    type: SinkType
    capabilities: Capabilities
    drivers: ClassVar[tuple[str, ...]] = ()  # modules it needs (sinks/drivers.py)
    option_spec: ClassVar[Mapping[str, Opt]] = {}  # its options (sinks/<type>/config.py)
    option_prefixes: ClassVar[tuple[str, ...]] = ()  # groups of free-form option names
    # options that name a local path, which a pipeline YAML gives relative to itself
    path_options: ClassVar[tuple[str, ...]] = ()

    def __init_subclass__(cls, **kwargs: Any) -> None:
        super().__init_subclass__(**kwargs)
        if "capabilities" in cls.__dict__:  # a sink type declares them; bases and fan-outs not
            _check_declared(cls)

    @classmethod
    def load_drivers(cls) -> list[ModuleType]:
        """Every module the sink declares (``drivers``), imported; a missing one is a
        ``MissingPackage`` naming what to install."""
        return [require(m, cls.type) for m in cls.drivers]

    @classmethod
    def task_modules(cls) -> tuple[str, ...]:
        """What a Spark task that writes this sink imports: its drivers and the modules of
        its own package. A local run's warm interpreter imports them before it forks the
        task workers (pipeline/launch/warm_python.py): imported by each worker at its first
        write, they cost every short run a few tenths of a CPU-second per worker."""
        package = cls.__module__.rpartition(".")[0]
        return (*cls.drivers, package, cls.__module__)

    @classmethod
    @abstractmethod
    def from_options(cls, options: Mapping[str, Any]) -> Sink:
        """The sink of one target table, from the options its target gives
        (``pipeline/definition/targets.py``); a bad option is a ``ConfigError`` naming it."""

    @classmethod
    @abstractmethod
    def target_options(cls, options: Mapping[str, str], db: str, table: str) -> dict[str, str]:
        """A pipeline's destination options (its ``sink`` section) made the options of its
        one target table ``db.table`` (a folder under ``path``, a table in a namespace or
        a database): the sink's own naming of its targets."""

    @abstractmethod
    def last_batch_id(self) -> int | None:
        """The last batch id applied to the target, or None."""

    @abstractmethod
    def read(self) -> pa.Table:
        """The whole target table as stored (for tests, debugging and benchmarks)."""

    def last_batch_seen(self) -> int | None:
        """The highest batch id the target holds any part of: ``last_batch_id``, or a
        later one whose files were committed before the rest of its batch (which then
        failed). A table taken again numbers its batches after it."""
        return self.last_batch_id()

    # -- what the sink is handed: by its kind (capabilities.kind) -------------------------

    def write(self, changes: ChangeSet, batch_id: int) -> WriteResult:
        """A merge sink: one batch's planned changes, with the batch id in the same
        commit (a target that has the batch changes nothing)."""
        raise _undeclared(self, "takes change rows, not a ChangeSet")

    def write_changelog(self, df: Any, batch_id: int, keys: tuple[str, ...] = ()) -> WriteResult:
        """A changelog sink: one batch's change rows (a Spark DataFrame, or the Arrow table
        where ``takes_arrow``) appended with the batch id."""
        raise _undeclared(self, "takes a ChangeSet, not change rows")

    def warm(self) -> None:
        """Open ahead what the first write needs (a connection, a topic, a transactional
        producer), so that it is ready when the first batch arrives. The runner calls it
        in the background while its stream starts; a failure here is left for that write
        to meet and report."""

    # -- rows written by the tasks that hold them (capabilities.files_from_tasks) ----------

    def holds_keys_in(self, column: str, spans: Sequence[tuple[Any, Any]]) -> bool | None:
        """On the driver, before a batch: whether the target may hold a row whose
        ``column`` lies in one of ``spans`` (each ``[lo, hi]``, None: unbounded on that
        side; the table read once for all), from its metadata alone; None when it cannot
        tell without the rows (then the tasks find out, and
        what is not new to the target comes back for the driver's path). A snapshot's
        batch whose chunks' spans no target may hold is written as files where it was
        read (``MicroBatch._quiet``); one that a target may hold (a new checkpoint into a
        table with rows) goes to the slices' tasks instead."""
        return None

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

    _pinned = False  # ``pin``: the target's table read once, then kept (``_pinned_view``)
    _view: Any = None
    _viewed = False

    def pin(self) -> None:
        """In a Spark task: from here on the target is read once and that view kept for
        the sink's life. Nothing commits to a target while a batch's tasks run (the
        driver commits after them), so a task need not read the table again for each of
        its record batches (``last_batch_id``, ``new_rows``). A sink whose reads go
        through ``_pinned_view`` keeps it; one that reads nothing per batch has nothing
        to keep."""
        self._pinned = True

    def _pinned_view(self, read: Callable[[], Any]) -> Any:
        """``read()`` (the target's table, or None), or once pinned the first one read."""
        if self._viewed:
            return self._view
        view = read()
        if self._pinned:
            self._view, self._viewed = view, True
        return view

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
        raise _undeclared(self, "does not take files from tasks")

    def commit_files(self, files: list[dict[str, Any]], schema: pa.Schema,
                     batch_id: int, final: bool = True) -> WriteResult:
        """On the driver: every task's files of a batch in one commit, with the batch id
        (a target that has the files of the batch already commits nothing); the files of
        attempts that died are removed. Not ``final``: the batch's other changes of the
        table follow in the driver's ``write``, which records the batch id as applied."""
        raise _undeclared(self, "does not take files from tasks")

    # -- changes written by tasks, a slice of the keys each (capabilities.changes_from_tasks)

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
        raise _undeclared(self, "does not take changes from tasks")

    def write_changes(self, slices: KeySlices, index: int, upserts: pa.Table,
                      changed_keys: pa.Table, batch_id: int,
                      replaces: tuple[KeyRange, ...] = ()) -> dict[str, Any]:
        """In a Spark task: slice ``index``'s planned changes, uncommitted: ``upserts``
        (rows to hold, shaped as the target stores them) and ``changed_keys`` (the key
        columns of every upserted or deleted key); ``replaces``: the batch's ranges whose
        other rows go (``ChangeSet.replaces``; a sink may leave them to ``commit_changes``).
        Called for every slice when there are ranges, rows or none. What the driver's
        commit needs about them (a few hundred bytes a file, whatever its rows)."""
        raise _undeclared(self, "does not take changes from tasks")

    def commit_changes(self, slices: KeySlices, written: list[dict[str, Any]],
                       batch_id: int, replaces: tuple[KeyRange, ...] = (),
                       new_files: list[dict[str, Any]] | None = None,
                       schema: pa.Schema | None = None) -> WriteResult:
        """On the driver: every slice's changes of a batch in one commit with the batch id
        (a target that has the batch commits nothing); what attempts that died left is
        removed. ``replaces``: as ``write_changes`` got them. ``new_files``: the batch's new
        rows of the target that its first stage wrote as files (``write_files``; their
        ``schema`` as ``commit_files`` takes it), in the same commit: the slices were cut
        before the batch ran, from the target as it was then, so the files cannot be
        committed on their own first (docs/sinks.md, "One job a batch")."""
        raise _undeclared(self, "does not take changes from tasks")

    def drop_uncommitted(self, batch_id: int) -> None:
        """On the driver: what the tasks wrote for ``batch_id`` that no commit will take
        removed now (files, staging tables): the table's batch turned out to carry a
        schema change, and the driver's path writes it instead."""

    # -- rows written by Spark itself, from the micro-batch's DataFrame (capabilities.spark_writer)

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
        raise _undeclared(self, "is not written by Spark itself")

    # -- schema evolution (capabilities.schema_changes; sinks/<type>/evolution.py) ---------

    def stored_columns(self) -> pa.Schema | None:
        """The target's stored columns, or None when it does not exist yet (or has no
        schema of its own)."""
        return None

    def can_change(self, change: Change, current: pa.DataType | None = None) -> bool:
        """Whether the target can make ``change`` (``current``: the column's stored type,
        for a retype): a kind its class declares (``schema_changes``) that ``_can_make``
        does not refuse."""
        return (change.kind in self.capabilities.schema_changes
                and self._can_make(change, current))

    def _can_make(self, change: Change, current: pa.DataType | None) -> bool:
        """A sink that makes a kind of change only in part (Iceberg retypes by its
        promotions) says so here."""
        return True

    def _refusal_note(self, change: Change) -> str:
        """Why, where ``_can_make`` refuses ``change``, in words for the user ("" if none)."""
        return ""

    def refusal(self, change: Change) -> str:
        """Why the target cannot make ``change``, in words for the user."""
        extra = self._refusal_note(change)
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
        """Make ``changes``, which the target does not show yet (``evolve`` filtered); a
        sink with stored columns implements it."""
        raise NotImplementedError(f"the {self.type} sink evolves no schema")

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
        schema and its record of applied batches stay. A sink whose class declares it
        (``capabilities.empties``) implements it; the others refuse."""
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

    def __enter__(self):  # the sink itself, of its own class
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def _undeclared(sink: Sink, what: str) -> NotImplementedError:
    return NotImplementedError(f"the {sink.type} sink {what} (its capabilities say so)")


# What a declared capability obliges a sink class to implement (and what it must leave to
# ``Sink`` when not declared, so that a declaration never drifts from the code).
_BY_CAPABILITY: dict[str, tuple[str, ...]] = {
    "files_from_tasks": ("may_take_files", "takes_files", "new_rows", "write_files",
                         "commit_files"),
    "changes_from_tasks": ("may_take_changes", "takes_changes", "plan_changes",
                           "write_changes", "commit_changes"),
    "spark_writer": ("writer_for", "takes_frames", "write_frame"),
}


def _check_declared(cls: type[Sink]) -> None:
    """``cls``'s declarations against what it implements; a mismatch is a bug in the
    sink, a ``TypeError`` when its module is imported."""
    caps = cls.capabilities

    def own(name: str) -> bool:
        return any(name in k.__dict__ for k in cls.__mro__ if k is not Sink
                   and issubclass(k, Sink))

    wrong = []
    if not isinstance(cls.__dict__.get("type"), SinkType):
        wrong.append("type is not a SinkType")
    write = "write" if caps.kind is SinkKind.MERGE else "write_changelog"
    other = "write_changelog" if caps.kind is SinkKind.MERGE else "write"
    wrong += [f"a {caps.kind} sink implements {write}"] if not own(write) else []
    wrong += [f"a {caps.kind} sink does not implement {other}"] if own(other) else []
    for flag, names in _BY_CAPABILITY.items():
        declared = getattr(caps, flag)
        wrong += [f"{name}: {flag} is {declared}" for name in names if own(name) != declared]
    if own("empty") != caps.can_empty:
        wrong.append(f"empty: empties is {caps.empties}")
    if own("stored_columns") and not own("_evolve"):
        wrong.append("a sink with stored columns implements _evolve")
    if wrong:
        raise TypeError(f"{cls.__name__} does not match its capabilities: {'; '.join(wrong)}")


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
