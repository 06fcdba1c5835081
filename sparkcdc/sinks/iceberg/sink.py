"""Apache Iceberg through pyiceberg: one transaction (one catalog commit) per batch.

Per batch, in one pyiceberg transaction:

* rows of keys the source did not hold before the batch (``ChangeSet.split_new``: snapshot
  rows, new inserts) are appended as they are when no data file's statistics overlap their
  key range: no data read, no rewrite, an ``append`` snapshot;
* the other rows are merged copy-on-write, narrowed to the data files whose key statistics
  hold a touched key: those files are read once, dropped, and their untouched rows written
  back with the new and patched ones (SCD2: closed versions), one ``overwrite`` snapshot;
* the table property ``sparkcdc.batch-id.<app-id>`` is set,

so data and batch id commit together. That is the driver's path (``apply_changes``, and
the pipeline's batches the tasks do not take). In a pipeline, Spark tasks write a table in
a local warehouse themselves: a snapshot's rows as data files where they were read, and
changes by key slices, merge-on-read, as new rows plus position delete files
(``changes.py``); the driver commits each target once per batch with the batch id
(``commit.py``: pyiceberg 0.12 cannot commit delete files itself). Every snapshot the sink
commits names its app id and batch in its summary (``sparkcdc.app-id``,
``sparkcdc.batch``), which is how the files of a batch's dead attempts are told from its
own (``files.py``).

Iceberg has no 8/16-bit integers (stored as ``int``) and no interval type: MySQL TIME
(Spark ``interval day to second``) is stored as a ``long`` of microseconds.
"""

from __future__ import annotations

import threading
from collections.abc import Mapping, Sequence
from typing import Any

import pyarrow as pa

from sparkcdc.errors import SchemaError
from sparkcdc.sinks.base import (
    ChangeSet,
    KeyRange,
    KeySlices,
    Sink,
    WriteResult,
    check_key_not_null,
    log,
)
from sparkcdc.sinks.capabilities import Capabilities, Emptying, TableLayout
from sparkcdc.sinks.evolution import EVERY_CHANGE, Change
from sparkcdc.sinks.iceberg import bounds, config, evolution, files
from sparkcdc.sinks.iceberg import changes as task_changes
from sparkcdc.sinks.iceberg.commit import CommitConflict, commit
from sparkcdc.sinks.iceberg.config import IcebergConfig
from sparkcdc.sinks.iceberg.merge import (
    Rewrite,
    between,
    key_range,
    may_hold,
    overwrite,
    plan_merge,
)
from sparkcdc.sinks.iceberg.storage import storage_table
from sparkcdc.sinks.kinds import SinkKind, SinkType

_CATALOG_LOCK = threading.Lock()

class IcebergSink(Sink):
    type = SinkType.ICEBERG
    capabilities = Capabilities(
        kind=SinkKind.MERGE, writer="pyiceberg", tasks_writer="key slices, position deletes",
        files_from_tasks=True, changes_from_tasks=True, replaces_ranges=True,
        empties=Emptying.ROWS, schema_changes=EVERY_CHANGE,  # retypes: by its promotions
        table_layout=TableLayout("partition-by", config.PROPERTY_PREFIX))
    drivers = ("pyiceberg",)
    option_spec = config.OPTIONS
    target_options = staticmethod(config.target_options)  # how it names a target
    option_prefixes = config.PREFIXES
    path_options = ("warehouse",)

    @classmethod
    def task_modules(cls) -> tuple[str, ...]:
        """Also the catalog a task opens the table through (the SQL catalog, the default,
        and SQLAlchemy's SQLite dialect under it) and pyiceberg's Arrow writer, which the
        sink imports only when it first opens a table: imported by each Python worker at
        its first write, they were a tenth of the workers' time in a snapshot of 2,000,000
        rows (docs/benchmarks.md, "Iceberg's purge in its tasks")."""
        return (*super().task_modules(), "pyiceberg.catalog", "pyiceberg.catalog.sql",
                "sqlalchemy.dialects.sqlite", "pyiceberg.io.pyarrow")

    def __init__(self, config: IcebergConfig):
        self.config = config
        self.load_drivers()
        self._catalog = None
        self._swept = False  # the leftovers of killed compactions looked for (first commit)
        # the last cut of the keys and what it was cut from (``plan_changes``, asked
        # before every batch: a snapshot's files are planned once)
        self._cut: tuple[tuple[Any, ...], KeySlices] | None = None

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
        return self._pinned_view(self._read_table)

    def _read_table(self):
        from pyiceberg.exceptions import NoSuchTableError

        try:
            return self.catalog().load_table(self.config.identifier)
        except NoSuchTableError:
            return None

    def last_batch_id(self) -> int | None:
        t = self._table()
        v = None if t is None else t.properties.get(self.config.batch_property)
        return None if v is None else int(v)

    def last_batch_seen(self) -> int | None:
        t = self._table()
        if t is None:
            return None
        seen = [int(v) for p in (self.config.batch_property, self.config.files_property)
                if (v := t.properties.get(p)) is not None]
        return max(seen) if seen else None

    def _summary(self, batch_id: int, by: str) -> dict[str, str]:
        """What a snapshot of this sink says of itself: whose and which batch
        (``files.py`` finds a batch's own files by it), and who wrote its rows."""
        return {"sparkcdc.app-id": self.config.app_id, "sparkcdc.batch": str(batch_id),
                "sparkcdc.written-by": by}

    # -- files and changes written by tasks (files.py, changes.py, commit.py) -------------

    @classmethod
    def may_take_files(cls, options: Mapping[str, Any]) -> bool:
        warehouse = options.get("warehouse") or options.get("catalog.warehouse") or "?://"
        version = str(options.get("table-property.format-version", "2"))
        return files.supported(str(warehouse)) and version == "2"

    def takes_files(self) -> bool:
        """A table in a local folder, of format v2 (position deletes; pyiceberg writes no
        v3 manifest), or one the sink will create so."""
        t = self._table()
        if t is None:
            where = self.config.catalog_properties.get("warehouse", "?://")
            version = self.config.table_properties.get("format-version", "2")
            return files.supported(where) and version == "2"
        return files.supported(t.location()) and t.metadata.format_version == 2

    def holds_keys_in(self, column: str, spans: Sequence[tuple[Any, Any]]) -> bool | None:
        table = self._table()
        if table is None or table.current_snapshot() is None:
            return False
        field = bounds.integer_key(table, column)
        if field is None or not all(v is None or isinstance(v, int) for s in spans for v in s):
            return None  # the tasks ask, by their rows' own bounds
        return bounds.may_hold(table, field, spans)

    def new_rows(self, changes: ChangeSet) -> pa.Table | None:
        """An integer first key is looked up in the manifests' bounds, each manifest read
        once per process (``bounds``); any other, by a scan's planning."""
        table = self._table()
        field = None if table is None else bounds.integer_key(table, changes.keys[0])

        def held(lo: Any, hi: Any) -> bool:
            if table is None:
                return False
            if field is not None and isinstance(lo, int) and isinstance(hi, int):
                return bounds.may_hold(table, field, [(lo, hi)])
            return may_hold(table, between(changes.keys[0], lo, hi))

        append, rest = changes.split_new(held)
        return append if rest.num_rows == 0 else None

    def ready_for_files(self, schema: pa.Schema) -> None:
        if self._table() is None:
            self._create(storage_table(schema.empty_table()).schema)

    def write_files(self, rows: pa.Table, batch_id: int) -> list[dict[str, Any]]:
        table = self._table()
        rows = storage_table(rows).cast(table.schema().as_arrow())
        wid = files.write_id(self.config.app_id, batch_id)
        return [files.describe(f, table) for f in files.write_data_files(table, rows, wid)]

    def _has_files_of(self, table, batch_id: int) -> bool:
        return any((v := table.properties.get(p)) is not None and batch_id <= int(v)
                   for p in (self.config.batch_property, self.config.files_property))

    def commit_files(self, written: list[dict[str, Any]], schema: pa.Schema,
                     batch_id: int, final: bool = True) -> WriteResult:
        table = self._table() or self._create(storage_table(schema.empty_table()).schema)
        props = {self.config.files_property: str(batch_id)}
        if final:
            props[self.config.batch_property] = str(batch_id)
        done = False
        for attempt in range(5):  # appends commute: another writer's commit is no conflict
            if self._has_files_of(table, batch_id):
                break
            snap = table.current_snapshot()
            if not written:  # no rows: the batch id alone, no snapshot
                with table.transaction() as tx:
                    tx.set_properties(props)
                done = True
                break
            try:
                commit(table, task_changes.decode(table, written),
                       base=snap.snapshot_id if snap else None, properties=props,
                       summary=self._summary(batch_id, "tasks"),
                       name=files.write_id(self.config.app_id, batch_id))
                done = True
                break
            except CommitConflict:
                if attempt == 4:
                    raise
                table = self._table()
        self._remove_leftovers(batch_id)
        if not done:
            return WriteResult(batch_id, skipped=True)
        n = sum(int(d["rows"]) for d in written)
        if final:
            self._maybe_compact(batch_id)
        return WriteResult(batch_id, counts={"upsert": n, "appended": n} if n else {})

    @classmethod
    def may_take_changes(cls, options: Mapping[str, Any]) -> bool:
        return cls.may_take_files(options)

    def takes_changes(self, keys: tuple[str, ...]) -> bool:
        return bool(keys) and self.takes_files()

    def plan_changes(self, keys: tuple[str, ...], schema: pa.Schema,
                     slices: int) -> KeySlices:
        """The cut of the current snapshot's files; the last one again while the table
        has the same snapshot (a batch cuts every table of the stream that takes changes
        before it runs, most of which the batch does not touch)."""
        table = self._table() or self._create(storage_table(schema.empty_table()).schema)
        asked = (table.metadata_location, keys[0], slices)  # (a new one at every commit)
        if self._cut is None or self._cut[0] != asked:
            self._cut = (asked, task_changes.plan_slices(table, keys[0], slices))
        return self._cut[1]

    def write_changes(self, slices: KeySlices, index: int, upserts: pa.Table,
                      changed_keys: pa.Table, batch_id: int,
                      replaces: tuple[KeyRange, ...] = ()) -> dict[str, Any]:
        table = self._table()
        arrow = table.schema().as_arrow()
        keys = pa.schema([arrow.field(k) for k in changed_keys.column_names])
        return task_changes.write_slice(
            table, slices.parts[index], storage_table(upserts).cast(arrow),
            storage_table(changed_keys).cast(keys), self.config.app_id, batch_id,
            replaces, self.config.purge_deleted_share).to_dict()

    def commit_changes(self, slices: KeySlices, written: list[dict[str, Any]],
                       batch_id: int, replaces: tuple[KeyRange, ...] = (),
                       new_files: list[dict[str, Any]] | None = None,
                       schema: pa.Schema | None = None) -> WriteResult:
        table = self._table()
        results = [task_changes.SliceResult.from_dict(w) for w in written]
        # the batch's own property only: its snapshot files may have been committed before
        # (by a build that committed them apart)
        last = table.properties.get(self.config.batch_property)
        done = last is None or batch_id > int(last)
        if done:
            props = {self.config.batch_property: str(batch_id)}
            had = table.properties.get(self.config.files_property)
            if new_files and (had is None or batch_id > int(had)):
                results.append(task_changes.SliceResult(tuple(new_files), (), 0))
                props[self.config.files_property] = str(batch_id)
            table = task_changes.commit_changes(
                table, slices.version, results, props,
                self._summary(batch_id, "tasks"), files.write_id(self.config.app_id, batch_id))
        self._remove_leftovers(batch_id)
        if not done:
            return WriteResult(batch_id, skipped=True)
        self._maybe_compact(batch_id)
        return WriteResult(batch_id, counts={
            "written": sum(int(d["rows"]) for r in results for d in r.data),
            "marked deleted": sum(r.marked for r in results),
            "delete files": sum(len(r.deletes) for r in results),
            "files purged": sum(r.purged for r in results)})

    def _rewrite(self, table, tasks: list, batch_id: int, what: str, tidy: bool = False) -> int:
        try:
            n = task_changes.rewrite(table, tasks, self.config.app_id, batch_id, tidy)
        except CommitConflict as e:
            log.warning("%s: %s; tried again at the next compaction",
                        ".".join(self.config.identifier), e)
            return 0
        log.info("%s: %d data file(s) %s", ".".join(self.config.identifier), n, what)
        return n

    def drop_uncommitted(self, batch_id: int) -> None:
        self._remove_leftovers(batch_id)

    def _remove_leftovers(self, batch_id: int) -> None:
        """The files of ``batch_id`` (committed, or found committed) that no commit
        names: attempts that died, a run of the batch found committed. The first call of a
        sink (a run's first commit) also removes the files of compactions killed before
        their commit, so they do not wait for the next compaction."""
        table = self._table()
        if table is None or not files.supported(table.location()):
            return
        if not self._swept:
            self._swept = True
            self._remove_compaction_leftovers(table)
        here = files.on_disk(table.location(), files.write_prefix(self.config.app_id, batch_id))
        if not here:
            return
        own = [s for s in table.snapshots() if s.summary is not None
               and s.summary.get("sparkcdc.app-id") == self.config.app_id
               and s.summary.get("sparkcdc.batch") == str(batch_id)]
        written = files.written_by(table, own)
        left = [p for p in here if str(p) not in written]
        if left:  # (its snapshot expired, say: any file the metadata names stays)
            named = files.referenced(table)
            left = [p for p in left if str(p) not in named]
        gone = files.remove(left)
        if gone:
            log.info("%s: %d file(s) of batch %d no commit names removed",
                     ".".join(self.config.identifier), gone, batch_id)

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
            lambda lo, hi: bool(changes.replaces) or may_hold(table, between(key, lo, hi)))
        arrow_schema = table.schema().as_arrow()
        summary = self._summary(batch_id, "driver")
        new_rows = storage_table(appendable).cast(arrow_schema)
        rewrite = (plan_merge(table, rest, arrow_schema)
                   if rest.num_rows or changes.replaces else None)
        if rewrite is not None and rewrite.drops_deletes():
            self._commit_rewrite(table, rewrite, new_rows, batch_id, summary)
        else:
            with table.transaction() as tx:
                if new_rows.num_rows:
                    # first, while the transaction's view is the table split_new asked about
                    _claim_range(tx, key_range(new_rows, key))
                if rewrite is not None:
                    overwrite(table, tx, rewrite, summary)
                if new_rows.num_rows:
                    tx.append(new_rows, snapshot_properties=summary)
                tx.set_properties({self.config.batch_property: str(batch_id)})
        counts = changes.counts(appended=appendable.num_rows)
        self._maybe_compact(batch_id)
        return WriteResult(batch_id, counts=counts)

    def _commit_rewrite(self, table, rewrite: Rewrite, new_rows: pa.Table, batch_id: int,
                        summary: dict[str, str]) -> None:
        """A copy-on-write merge over files that have delete files (a table the tasks
        wrote changes into), and the batch's new rows, in one snapshot of the sink's own
        (``commit.py``): the dropped data files' file-scoped delete files go with them, so
        none is left pointing at a file no snapshot holds. Its base is the snapshot it was
        planned from: another writer's commit since fails the batch (``CommitConflict``),
        and Spark runs it again, planned anew."""
        rows = pa.concat_tables([rewrite.rows, new_rows.select(rewrite.rows.column_names)])
        wid = files.write_id(self.config.app_id, batch_id)
        new = files.write_data_files(table, rows, wid)
        removed = [t.file.file_path for t in rewrite.tasks]
        removed += [d.file_path for t in rewrite.tasks for d in t.delete_files
                    if task_changes.file_scoped(d, t.file.file_path)]
        try:
            commit(table, new, base=table.current_snapshot().snapshot_id, removed=removed,
                   properties={self.config.batch_property: str(batch_id)}, summary=summary,
                   name=wid)
        except CommitConflict:  # nothing committed (any other error: the batch's leftovers)
            for f in new:  # (through the table's io: a remote table takes this path too)
                table.io.delete(f.file_path)
            raise

    def _maybe_compact(self, batch_id: int) -> None:
        # by batch id, as the delta sink does: short runs compact like a long stream
        every = self.config.compact_every
        if every and (batch_id + 1) % every == 0:
            self.compact(batch_id)

    def compact(self, batch_id: int) -> int:
        """Every small data file (under 32 MB) and every data file with delete files
        rewritten into as few as the writer makes, deletes applied, and those delete files
        dropped (``changes.rewrite``: one ``replace`` snapshot; the rows are the same, so a
        crash before or after it changes nothing). Fewer than two small files and none
        with deletes: nothing to do. Returns the data files rewritten."""
        table = self._table()
        if table is None or table.current_snapshot() is None:
            return 0
        self._remove_compaction_leftovers(table)
        tasks = [t for t in table.scan().plan_files()
                 if t.delete_files or t.file.file_size_in_bytes < SMALL_FILE_BYTES]
        if len(tasks) < 2 and not any(t.delete_files for t in tasks):
            return 0
        return self._rewrite(table, tasks, batch_id, "compacted", tidy=True)

    def _remove_compaction_leftovers(self, table) -> None:
        """The files of compactions killed before their commit: this app's
        compaction files that no snapshot of the table's current metadata names, whatever
        snapshots were expired since they were written."""
        if not files.supported(table.location()):
            return
        prefix = files.write_prefix(self.config.app_id, 0, files.COMPACTION)[:11]
        here = files.on_disk(table.location(), prefix)
        if not here:
            return
        named = files.referenced(table)
        gone = files.remove(p for p in here if str(p) not in named)
        if gone:
            log.info("%s: %d file(s) of killed compactions removed",
                     ".".join(self.config.identifier), gone)

    def read(self) -> pa.Table:
        t = self._table()
        return pa.table({}) if t is None else t.scan().to_arrow()


    # -- schema evolution (evolution.py) ---------------------------------------------------

    def stored_columns(self) -> pa.Schema | None:
        return evolution.stored_columns(self)

    def _can_make(self, change: Change, current: pa.DataType | None) -> bool:
        return evolution.can_change(change, current)

    def _refusal_note(self, change: Change) -> str:
        return evolution.refusal_note(change)

    def _evolve(self, changes: list[Change], keys: tuple[str, ...]) -> None:
        evolution.evolve(self, changes, keys)

    def empty(self) -> None:
        evolution.empty(self)


SMALL_FILE_BYTES = 32 * 1024**2  # a data file below this is rewritten by compaction


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


