"""Delta Lake through delta-rs: one commit per batch, carrying the batch id.

The batch id is recorded as Delta's app transaction (``txn`` action, app id + version) in the
same commit as the data, which is how Spark's own Delta writer makes ``foreachBatch``
idempotent.

When the table has Delta's ``deletionVectors`` feature (a table the sink creates gets it,
``deletion-vectors``) the pipeline's Spark tasks write its changes by key slices: new rows
plus deletion vectors marking the rows they replace or delete, committed once by the driver
(``changes.py``). What follows is the driver's own path, for the other tables and batches.

A batch of rows new to the target (a snapshot's chunks, inserts past the target's keys) is
*appended*: the files' statistics show that no stored row has a first key in the new rows'
range, so there is nothing to match. Anything else goes through one MERGE: the planned rows
carry ``__op`` and each clause matches on it, and the MERGE's condition carries the batch's
key range (and its partition values), so delta-rs reads and rewrites only the files that
can hold a touched key, not the whole table.

Delta has no interval type: MySQL TIME (Spark ``interval day to second``) is stored as a
``long`` of microseconds (Debezium's MicroTime).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc

from sparkcdc.errors import SchemaError
from sparkcdc.sinks.base import (
    END_AT,
    OP,
    START_AT,
    ChangeSet,
    KeyRange,
    KeySlices,
    RowOp,
    Sink,
    WriteResult,
    check_key_not_null,
    log,
)
from sparkcdc.sinks.base import (
    backtick as _q,
)
from sparkcdc.sinks.capabilities import Capabilities, Emptying, TableLayout
from sparkcdc.sinks.delta import changes as task_changes
from sparkcdc.sinks.delta import config, evolution, files, spark_writer
from sparkcdc.sinks.delta.catalog import publish
from sparkcdc.sinks.delta.config import DeltaConfig, DeltaWriter
from sparkcdc.sinks.delta.log import DeltaLog, last_checkpoint
from sparkcdc.sinks.delta.predicates import in_range as _in_range
from sparkcdc.sinks.delta.predicates import literal as _literal
from sparkcdc.sinks.delta.storage import has_deletion_vectors, read_table, storage_table
from sparkcdc.sinks.evolution import EVERY_CHANGE, Change
from sparkcdc.sinks.kinds import SinkKind, SinkType

__all__ = ["DeltaSink", "read_table", "storage_table"]  # (the helpers' home: storage.py)

class DeltaSink(Sink):
    type = SinkType.DELTA
    capabilities = Capabilities(
        kind=SinkKind.MERGE, writer="delta-rs", tasks_writer="key slices, deletion vectors",
        files_from_tasks=True, changes_from_tasks=True, spark_writer=True,
        replaces_ranges=True, empties=Emptying.ROWS, schema_changes=EVERY_CHANGE,
        table_layout=TableLayout("partition-by", config.PROPERTY_PREFIX))
    drivers = ("deltalake", "pyroaring")  # pyroaring: deletion vectors
    option_spec = config.OPTIONS
    target_options = staticmethod(config.target_options)  # how it names a target
    option_prefixes = config.PREFIXES
    path_options = ("path",)

    def __init__(self, config: DeltaConfig):
        self.config = config
        self._dl = self.load_drivers()[0]
        self.spark: Any = None  # the pipeline's session, once it names the writer (publish)
        # Spark's own Delta writes the table (``spark_writer``): ``writer: spark``, or
        # ``auto`` in a session with Delta, decided in ``publish``
        self.uses_spark = config.writer is DeltaWriter.SPARK
        # answers about one table object at one version (``_of_version``)
        self._answers: dict[str, tuple[Any, int, Any]] = {}
        self._loaded: Any = None  # the table as last read (``_read_table``)
        # the log as the driver last read it, and the last cut of the keys made from it
        # (``plan_changes``: every batch cuts each table's keys before it runs)
        self._log: DeltaLog | None = None
        self._cut: tuple[tuple[Any, ...], KeySlices] | None = None

    @classmethod
    def from_options(cls, options: Mapping[str, Any]) -> DeltaSink:
        return cls(DeltaConfig.parse(options))

    @classmethod
    def writer_for(cls, options: Mapping[str, Any], spark_conf: Mapping[str, str]) -> str:
        """Spark's Delta for ``writer: spark``, and for ``auto`` when the pipeline's
        ``spark`` section gives the session Delta's extension (status reads the YAML only:
        a session given Delta another way, such as Databricks', shows when it runs)."""
        writer = str(options.get("writer", "auto"))
        if writer == "spark" or (writer == "auto" and spark_writer.EXTENSION in
                                 spark_conf.get("spark.sql.extensions", "")):
            return spark_writer.NAME
        return ""

    def writes_with_spark(self, spark: Any) -> bool:
        """Whether Spark's own Delta writes the target in the session ``spark``
        (``writer``); ``writer: spark`` without Delta in it is a ``ConfigError`` here, when
        the table joins, before anything is written."""
        if self.spark is None:
            self.spark = spark
            self.uses_spark = spark_writer.chosen(self.config, spark)
        return self.uses_spark

    def _table(self):
        return self._pinned_view(self._read_table)

    def _read_table(self):
        """The table at its newest version (None when there is none). On a local path the
        table read before is brought up to date (``update_incremental``: the log's new
        entries only), where loading it again listed and read its log anew: on the driver,
        every table's sink asks at every batch (a 1,000-table batch spent a quarter of its
        driver's time there; docs/benchmarks.md, "Whole databases")."""
        dl = self._dl
        t = self._loaded
        if t is not None:
            if _brought_up(t, self.config.path):
                return t
            self._loaded = None
        if not dl.DeltaTable.is_deltatable(self.config.path, self.config.storage_options):
            return None
        table = dl.DeltaTable(self.config.path, storage_options=self.config.storage_options)
        if files.supported(self.config.path):  # local (elsewhere a stat costs a request)
            self._loaded = table
        return table

    def publish(self, spark) -> bool:
        self.writes_with_spark(spark)
        if self.config.catalog is None:
            return True

        return publish(spark, self.config, self._table() is not None)

    def last_batch_id(self) -> int | None:
        t = self._table()
        if t is None:
            return None
        return self._of_version(t, "last", lambda: t.transaction_version(self.config.app_id))

    def _of_version(self, table: Any, what: str, ask: Callable[[], Any]) -> Any:
        """``ask()``, once per table object and version: a task's pinned view answers every
        chunk it writes (its last batch id; its add actions, which delta-rs rebuilds from
        every file's statistics at each call), and a write through the object moves it to
        another version."""
        version = table.version()
        got = self._answers.get(what)
        if got is not None and got[0] is table and got[1] == version:
            return got[2]
        value = ask()
        self._answers[what] = (table, version, value)
        return value

    def _add_actions(self, table: Any) -> pa.Table:
        """The table's add actions, flattened: its files and their statistics."""
        def ask() -> pa.Table:
            actions = table.get_add_actions(flatten=True)
            return pa.table(actions) if not isinstance(actions, pa.Table) else actions
        return self._of_version(table, "actions", ask)

    def last_batch_seen(self) -> int | None:
        t = self._table()
        if t is None:
            return None
        seen = [v for a in (self.config.app_id, files.files_app_id(self.config.app_id))
                if (v := t.transaction_version(a)) is not None]
        return max(seen) if seen else None

    # -- files written by tasks (sinks/delta/files.py) -----------------------------------

    @classmethod
    def may_take_files(cls, options: Mapping[str, Any]) -> bool:
        return files.supported(str(options.get("path", "")))

    def takes_files(self) -> bool:
        """A table in a local folder without column mapping (its files name columns by
        their physical names, which the tasks' writer would not), unless Spark's own Delta
        writes it."""
        if self.uses_spark or not files.supported(self.config.path):
            return False
        props = self.config.table_properties
        t = self._table()
        if t is not None:
            props = t.metadata().configuration or {}
        return props.get("delta.columnMapping.mode", "none") == "none"

    # -- Spark's own Delta, from the micro-batch's DataFrame (spark_writer.py) ------------

    def takes_frames(self, keys: tuple[str, ...]) -> bool:
        return self.uses_spark and bool(keys)

    def frame_rows(self, rows: pa.Table) -> pa.Table:
        return storage_table(rows)

    def write_frame(self, frame: Any, keys: tuple[str, ...], batch_id: int,
                    replaces: tuple[KeyRange, ...] = ()) -> WriteResult:
        return spark_writer.write_frame(self, frame, keys, batch_id, replaces)

    def holds_keys_in(self, column: str, spans: Sequence[tuple[Any, Any]]) -> bool | None:
        table = self._table()
        if table is None:
            return False
        actions = self._add_actions(table)
        return any(_may_hold(actions, column, lo, hi) for lo, hi in spans)

    def new_rows(self, changes: ChangeSet) -> pa.Table | None:
        table = self._table()
        append, rest = changes.split_new(
            lambda lo, hi: table is not None and _may_hold(self._add_actions(table),
                                                           changes.keys[0], lo, hi))
        return append if rest.num_rows == 0 else None

    def ready_for_files(self, schema: pa.Schema) -> None:
        if self._table() is None:
            stored = storage_table(schema.empty_table()).schema
            if self.uses_spark:  # made by Spark's Delta, which writes it
                spark_writer.create(self, stored)
            else:
                self._create(stored)

    def write_files(self, rows: pa.Table, batch_id: int) -> list[dict[str, Any]]:
        written = files.write_data_files(self.config.path, storage_table(rows),
                                         self.config.app_id, batch_id, self.config.partition_by)
        return [f.to_dict() for f in written]

    def commit_files(self, written: list[dict[str, Any]], schema: pa.Schema,
                     batch_id: int, final: bool = True) -> WriteResult:
        stored = storage_table(schema.empty_table()).schema
        table = self._table() or self._create(stored)
        data = [files.DataFile.from_dict(d) for d in written]
        done = files.commit_data_files(table, data, stored, self.config.app_id, batch_id,
                                       self.config.partition_by, final)
        table = self._table()
        self._remove_leftovers(batch_id)
        if not done:
            return WriteResult(batch_id, skipped=True)
        n = sum(f.rows for f in data)
        self._maybe_compact(table, batch_id)
        return WriteResult(batch_id, counts={"upsert": n, "appended": n} if n else {})

    # -- changes written by tasks, key slices with deletion vectors (changes.py) ---------

    @classmethod
    def may_take_changes(cls, options: Mapping[str, Any]) -> bool:
        return cls.may_take_files(options) and DeltaConfig.parse(options).deletion_vectors

    def takes_changes(self, keys: tuple[str, ...]) -> bool:
        """A table that takes files (``takes_files``) and has the deletion vectors feature
        (or will: the sink creates it so), none of whose keys is a partition column (those
        are not in the files)."""
        if not keys or set(keys) & set(self.config.partition_by) or not self.takes_files():
            return False
        t = self._table()
        if t is None:
            return self.config.deletion_vectors
        return has_deletion_vectors(t)

    def plan_changes(self, keys: tuple[str, ...], schema: pa.Schema,
                     slices: int) -> KeySlices:
        """The cut of the table as the log has it now; the last one again while no commit
        came since (two file checks: a batch cuts every table of the stream that takes
        changes before it runs, most of which the batch does not touch)."""
        log = self._fresh_log()
        key_type = storage_table(schema.empty_table()).schema.field(keys[0]).type
        asked = (log.version, keys[0], key_type, slices)
        if self._cut is None or self._cut[0] != asked:
            self._cut = (asked, task_changes.plan_slices(log, keys[0], key_type, slices))
        return self._cut[1]

    def _fresh_log(self) -> DeltaLog:
        """The table's log as it is now: the one read before, read on if it is not."""
        root = files.local(self.config.path)
        if self._log is None or self._log.root != root:
            self._log = DeltaLog(root)
        if not self._log.newest():
            self._log.refresh()
        return self._log

    def write_changes(self, slices: KeySlices, index: int, upserts: pa.Table,
                      changed_keys: pa.Table, batch_id: int,
                      replaces: tuple[KeyRange, ...] = ()) -> dict[str, Any]:
        return task_changes.write_slice(
            self.config.path, slices.parts[index], storage_table(upserts),
            storage_table(changed_keys), self.config.app_id, batch_id,
            self.config.partition_by, replaces, self.config.purge_deleted_share).to_dict()

    def commit_changes(self, slices: KeySlices, written: list[dict[str, Any]],
                       batch_id: int, replaces: tuple[KeyRange, ...] = (),
                       new_files: list[dict[str, Any]] | None = None,
                       schema: pa.Schema | None = None) -> WriteResult:
        table = self._table()
        results = [task_changes.SliceResult.from_dict(w, slices) for w in written]
        # the table's own app id only: the batch's snapshot files may have been committed
        # before (``<app-id>#files``, by a build that committed them apart), and these
        # changes are still to come
        last = None if table is None else table.transaction_version(self.config.app_id)
        done = table is not None and (last is None or batch_id > last)
        if done:
            txns = [(self.config.app_id, batch_id)]
            if new_files and not files.committed(table, self.config.app_id, batch_id):
                results.append(task_changes.SliceResult(
                    tuple(files.DataFile.from_dict(d) for d in new_files), ()))
                txns.append((files.files_app_id(self.config.app_id), batch_id))
            task_changes.commit_changes(
                self.config.path, self._fresh_log(), slices.version, results,
                self.config.app_id, batch_id, txns)
            if task_changes.needs_purge(results, self.config.purge_deleted_share):
                self._purge()
        self._remove_leftovers(batch_id)
        if not done:
            return WriteResult(batch_id, skipped=True)
        self._checkpoint_if_due(self._maybe_compact(self._table(), batch_id))
        up = sum(f.rows for r in results for f in r.data)
        marked = sum(t.deleted for r in results for t in r.touched)
        return WriteResult(batch_id, counts={"written": up, "marked deleted": marked,
                                             "files touched": sum(len(r.touched)
                                                                  for r in results)})

    def _checkpoint_if_due(self, table) -> None:
        """A checkpoint once the table has passed the next multiple of ``CHECKPOINT_EVERY``
        after its last one, whichever commit took it there. Checking only the change's own
        commit (``version % 100 == 0``) missed every mark a purge or a compaction landed on:
        under steady writes a purge follows most batches, and a 30-minute run went 400
        versions without one, each batch reading the whole JSON log again twice
        (docs/benchmarks.md, "The 30-minute soak")."""
        every = task_changes.CHECKPOINT_EVERY
        last = last_checkpoint(files.local(self.config.path))
        if table.version() >= (every if last is None else (last // every + 1) * every):
            table.create_checkpoint()

    def drop_uncommitted(self, batch_id: int) -> None:
        self._remove_leftovers(batch_id)

    def _remove_leftovers(self, batch_id: int) -> None:
        gone = files.remove_leftovers(self.config.path, self.config.app_id, batch_id,
                                      self._fresh_log)
        if gone:
            log.info("%s: %d folder(s) of batch %d no commit names removed",
                     self.config.path, gone, batch_id)

    def _maybe_compact(self, table, batch_id: int):
        """The table, compacted when its batch is due (then read again: compaction commits).
        By batch id, not by batches this process wrote: short runs (--until-caught-up) write
        a few batches each and must compact as a long stream does."""
        if self.config.compact_every and (batch_id + 1) % self.config.compact_every == 0:
            self.compact(table)
            return self._table()
        return table

    def compact(self, table) -> None:
        """Files mostly deleted rewritten without their dead rows, then delta-rs'
        ``optimize.compact``, writing Snappy like the table's other files: its zstd default
        made a full scan of the compacted table 4x slower than of the same rows written
        plainly (docs/benchmarks.md, "100 small batches")."""
        if has_deletion_vectors(table) and files.supported(self.config.path):
            self._purge()  # first: compaction leaves a lone file with its dead rows
            table = self._table()
        metrics = table.optimize.compact(
            target_size=self.config.target_file_size,
            writer_properties=self._dl.WriterProperties(compression="SNAPPY"))
        log.info("compacted %s: %s", self.config.path, metrics)

    def _purge(self) -> None:
        """The files mostly deleted rewritten without their dead rows (``changes.purge``);
        a commit that meets another writer's is left to the next compaction."""
        try:
            n = task_changes.purge(self.config.path, self.config.purge_deleted_share,
                                   self.config.app_id, self.config.partition_by,
                                   self._fresh_log())
        except files.CommitConflict as e:
            log.warning("purging deleted rows of %s: %s; tried again at the next "
                        "compaction", self.config.path, e)
            return
        if n:
            log.info("%s: %d file(s) rewritten without their deleted rows", self.config.path,
                     n)

    def _create(self, schema: pa.Schema):
        bad = [c for c in self.config.partition_by if c not in schema.names]
        if bad:
            raise SchemaError(f"partition columns {bad} are not target columns of {self.config.path}",
                              fix=f"partition-by takes some of: {', '.join(schema.names)}")
        log.info("creating Delta table %s", self.config.path)
        dl = self._dl
        t = dl.DeltaTable.create(
            self.config.path, schema, mode="ignore",
            partition_by=list(self.config.partition_by) or None,
            configuration=self.config.table_properties or None,
            raise_if_key_not_exists=False,  # free keys (a pipeline's table-options) too
            storage_options=self.config.storage_options)
        if self.config.deletion_vectors and not has_deletion_vectors(t) and t.version() == 0:
            # the feature alone: delta-rs' table property delta.enableDeletionVectors would
            # add the variantType feature too, which older readers refuse
            t.alter.add_feature(dl.TableFeatures.DeletionVectors,
                                allow_protocol_versions_increase=True)
            t = self._table()
        return t

    def write(self, changes: ChangeSet, batch_id: int) -> WriteResult:
        dl = self._dl
        check_key_not_null(changes)
        if self.uses_spark:
            return spark_writer.write_changes(self, storage_table(changes.table),
                                              changes.keys, batch_id, changes.replaces,
                                              changes.scd_type)
        target_schema = storage_table(changes.rows()).schema
        table = self._table() or self._create(target_schema)
        last = table.transaction_version(self.config.app_id)
        if last is not None and batch_id <= last:
            return WriteResult(batch_id, skipped=True)
        props = dl.CommitProperties(
            app_transactions=[dl.Transaction(self.config.app_id, batch_id)],
            custom_metadata={"sparkcdc.batch": str(batch_id)})
        append, rest = changes.split_new(lambda lo, hi: _may_hold(self._add_actions(table),
                                                                  changes.keys[0],
                                                                  lo, hi))
        if rest.num_rows == 0 and not changes.replaces:
            # new rows only, or none: an append; an empty one still records the batch id
            dl.write_deltalake(table, storage_table(append).select(target_schema.names),
                               mode="append", commit_properties=props)
        else:
            self._merge(table, storage_table(changes.table), target_schema.names, changes,
                        rest, props)
        counts = changes.counts(appended=append.num_rows if rest.num_rows == 0
                                and not changes.replaces else 0)
        self._maybe_compact(table, batch_id)
        return WriteResult(batch_id, counts=counts)

    def _merge(self, table, source: pa.Table, names: list[str], changes: ChangeSet,
               rest: ChangeSet, props):
        """One MERGE of the whole batch. Its condition narrows the target to the key range
        of ``rest`` (the rows that may match a stored row) and to the partitions the batch
        touches; the batch's new rows outside that range match nothing and are inserted."""
        on = " AND ".join(f"t.{_q(k)} = s.{_q(k)}" for k in changes.keys)
        on += _narrowing(rest, self.config.partition_by)
        op = f"s.{_q(OP)}"
        insert = {_q(c): f"s.{_q(c)}" for c in names}
        if changes.scd_type == 2:
            m = table.merge(source, f"{on} AND t.{_q(END_AT)} IS NULL AND {op} IN ('{RowOp.CLOSE}', "
                                    f"'{RowOp.AMEND}')",
                            source_alias="s", target_alias="t", commit_properties=props)
            amend = {_q(c): f"s.{_q(c)}" for c in names
                     if c not in changes.keys and c != START_AT}
            m = (m.when_matched_update({_q(END_AT): f"s.{_q(END_AT)}"},
                                       predicate=f"{op} = '{RowOp.CLOSE}'")
                  .when_matched_update(amend, predicate=f"{op} = '{RowOp.AMEND}'")
                  .when_not_matched_insert(insert, predicate=f"{op} = '{RowOp.VERSION}'"))
        else:
            values = [c for c in names if c not in changes.keys]
            patch = {_q(c): f"coalesce(s.{_q(c)}, t.{_q(c)})" for c in values}
            m = table.merge(source, on, source_alias="s", target_alias="t",
                            commit_properties=props)
            m = m.when_matched_delete(predicate=f"{op} = '{RowOp.DELETE}'")
            if values:
                m = (m.when_matched_update({_q(c): f"s.{_q(c)}" for c in values},
                                           predicate=f"{op} = '{RowOp.UPSERT}'")
                      .when_matched_update(patch, predicate=f"{op} = '{RowOp.PATCH}'"))
            m = m.when_not_matched_insert(insert, predicate=f"{op} <> '{RowOp.DELETE}'")
            if changes.replaces:  # a chunk read again: its range holds its rows, no other
                m = m.when_not_matched_by_source_delete(predicate=" OR ".join(
                    _in_range(r, source.schema.field(r.column).type) for r in changes.replaces))
        metrics = m.execute()
        log.debug("merge into %s: %s", self.config.path, metrics)

    def read(self) -> pa.Table:
        t = self._table()
        return pa.table({}) if t is None else read_table(t)

    # -- schema evolution (evolution.py) ---------------------------------------------------

    def stored_columns(self) -> pa.Schema | None:
        return evolution.stored_columns(self)

    def _evolve(self, changes: list[Change], keys: tuple[str, ...]) -> None:
        evolution.evolve(self, changes, keys)

    def empty(self) -> None:
        evolution.empty(self)


def _brought_up(table: Any, path: str) -> bool:
    """``table`` (local) brought to its newest version; False when it cannot be (torn, or
    removed or made again under it, which ``update_incremental`` does not see: its newest
    log entry is gone), and it is to be read afresh."""
    try:
        table.update_incremental()
    except Exception:  # noqa: BLE001 - whatever the reason, a fresh read says it
        return False
    return (files.local(path) / "_delta_log" / f"{table.version():020d}.json").exists()


def _may_hold(actions: pa.Table, key: str, lo: Any, hi: Any) -> bool:
    """Whether any stored file may hold a row whose ``key`` lies in ``[lo, hi]`` (None:
    unbounded on that side), from the files' min/max statistics alone (``actions``: the
    table's add actions, flattened; a file without statistics may hold anything)."""
    if actions.num_rows == 0:
        return False
    lo_col, hi_col = f"min.{key}", f"max.{key}"
    if lo_col not in actions.column_names or hi_col not in actions.column_names:
        return True
    mins, maxs = actions[lo_col], actions[hi_col]
    if mins.null_count or maxs.null_count:
        return True
    t = mins.type
    try:  # (None: unbounded on that side)
        below = None if hi is None else pc.less_equal(mins, pa.scalar(hi, t))
        above = None if lo is None else pc.greater_equal(maxs, pa.scalar(lo, t))
    except (pa.ArrowInvalid, pa.ArrowTypeError, pa.ArrowNotImplementedError, TypeError):
        return True  # bounds the statistics' type does not take: may hold
    if below is None or above is None:
        overlap = below if above is None else above
        return True if overlap is None else bool(pc.any(overlap).as_py())
    return bool(pc.any(pc.and_(below, above)).as_py())


def _narrowing(rest: ChangeSet, partition_by: tuple[str, ...]) -> str:
    """`` AND t.k >= lo AND t.k <= hi`` for the first key over the rows that may match, and
    `` AND t.p IN (...)`` for each partition column that is also a key column. A partition
    column outside the key is left alone: an update may move a row to another partition,
    and its stored version, in the old partition, must still be matched."""
    out = ""
    bounds = rest.key_bounds()
    key = rest.keys[0]
    t = rest.table.schema.field(key).type
    if bounds is not None:
        lo, hi = (_literal(v, t) for v in bounds)
        if lo is not None and hi is not None:
            out += f" AND t.{_q(key)} >= {lo} AND t.{_q(key)} <= {hi}"
    for p in partition_by:
        if p not in rest.keys or p == key:
            continue
        col = rest.table[p]
        values = pc.unique(col)
        if col.null_count or len(values) > 100:
            continue
        lits = [_literal(v, col.type) for v in values.to_pylist()]
        texts = [x for x in lits if x is not None]
        if lits and len(texts) == len(lits):
            out += f" AND t.{_q(p)} IN ({', '.join(texts)})"
    return out
