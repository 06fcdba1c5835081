"""A micro-batch's changes written into a Delta table by Spark tasks, each owning a slice
of the keys, with deletion vectors: a batch costs what it changes, not what the table holds.

How it goes (docs/sinks.md, "Delta: changes from the tasks"):

1. **Slices** (driver, ``plan_slices``): the table's live files, from its log
   (``log.DeltaLog``), grouped by the first key column's range in their statistics. Files
   whose ranges overlap fall in one group; consecutive groups are packed into at most ``n``
   slices of about equal rows. Slice ``i`` owns the keys from its first file's minimum up to
   the next slice's, and the files of its groups: every stored row of one of its keys lies
   in one of its files, and no other slice touches them. One key has one writer; one file
   has one deletion vector writer.
2. **Write** (a task, ``write_slice``): the slice's planned changes (one per key,
   ``ChangeSet``); the key columns of its files whose range the changes touch are read, the
   rows a deletion vector already deletes left out, and joined with the changed keys. The
   matched rows' positions are added to each file's deletion vector (a new vector file in
   the task's staging folder, ``deletion_vectors``); the upserted rows are written as new
   data files there (``files.write_data_files``). The driver gets the descriptions only.
3. **Commit** (driver, ``commit_changes``): one Delta commit for every slice: per touched
   file a ``remove`` of it with its old vector and an ``add`` with the new one, the new
   data files' ``add``, and the batch id as app transaction, written as the log's next
   version exclusively (``O_EXCL``): if anything else committed since the slices were
   planned, the commit fails and Spark runs the batch again.

Slices need an integer first key (statistics compare exactly); a table keyed otherwise is
one slice (one task), which is still no row through the driver. A key column that is also a
partition column is not in the files: such tables take the driver's path.
"""

from __future__ import annotations

import json
import os
import shutil
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any
from urllib.parse import unquote

import pyarrow as pa
import pyarrow.compute as pc

from sparkcdc.sinks.base import KeyRange, KeySlices, holds_any
from sparkcdc.sinks.delta import deletion_vectors as dv
from sparkcdc.sinks.delta import files
from sparkcdc.sinks.delta.log import DeltaLog
from sparkcdc.sinks.positions import distinct_sorted, keys_within

if TYPE_CHECKING:
    import numpy as np

CHECKPOINT_EVERY = 100  # as delta-rs and Spark do


def _range(add: dict[str, Any], key: str) -> tuple[Any, Any] | None:
    stats = add.get("stats")
    if not stats:
        return None
    s = json.loads(stats)
    lo, hi = (s.get("minValues") or {}).get(key), (s.get("maxValues") or {}).get(key)
    if lo is None or hi is None or not isinstance(lo, int) or not isinstance(hi, int):
        return None
    return lo, hi


def plan_slices(log: DeltaLog, key: str, key_type: pa.DataType, n: int) -> KeySlices:
    """The slices of the table's live files for a batch (module docstring, step 1)."""
    adds = list(log.files.values())
    ranges: list[tuple[Any, Any] | None] = (
        [_range(a, key) for a in adds] if pa.types.is_integer(key_type) else [None])
    return KeySlices.by_ranges(key, adds, ranges, [_rows(a) for a in adds], n, log.version)


def _rows(add: dict[str, Any]) -> int:
    stats = add.get("stats")
    return int(json.loads(stats).get("numRecords", 0)) if stats else 0


@dataclass(frozen=True)
class Touched:
    """A stored file some of whose rows a slice deleted: its ``add`` as the log had it and
    its new deletion vector, or None when the task wrote its live rows into the slice's
    new files instead (the file is then removed: ``write_slice``'s purge). The task sends
    the file's path only (the driver has the ``add`` in its ``KeySlices``): a few hundred
    bytes a file, whatever its stats."""

    add: dict[str, Any]
    vector: dv.Descriptor | None
    deleted: int  # rows this batch deleted in it

    def to_dict(self) -> dict[str, Any]:
        return {"path": self.add["path"],
                "dv": None if self.vector is None else self.vector.to_action(),
                "deleted": self.deleted}

    @classmethod
    def from_dict(cls, d: dict[str, Any], adds: dict[str, dict[str, Any]]) -> Touched:
        return cls(adds[d["path"]], dv.Descriptor.from_action(d["dv"]), int(d["deleted"]))


@dataclass(frozen=True)
class SliceResult:
    """What a slice's task hands the driver: its new data files and touched files."""

    data: tuple[files.DataFile, ...]
    touched: tuple[Touched, ...]

    def to_dict(self) -> dict[str, Any]:
        return {"data": [f.to_dict() for f in self.data],
                "touched": [t.to_dict() for t in self.touched]}

    @classmethod
    def from_dict(cls, d: dict[str, Any], slices: KeySlices) -> SliceResult:
        """``d`` as a task sent it; ``slices``: the cut it wrote by (the files' actions)."""
        adds = {a["path"]: a for part in slices.parts for a in part}
        return cls(tuple(files.DataFile.from_dict(f) for f in d["data"]),
                   tuple(Touched.from_dict(t, adds) for t in d["touched"]))


def write_slice(root: str, owned: tuple[dict[str, Any], ...], upserts: pa.Table,
                changed_keys: pa.Table, app_id: str, batch_id: int,
                partition_by: tuple[str, ...] = (),
                replaces: tuple[KeyRange, ...] = (),
                purge_share: float | None = None) -> SliceResult:
    """In a task: one slice's changes (module docstring, step 2). ``upserts``: the rows to
    write (shaped as the target stores them); ``changed_keys``: the key columns of every
    changed key (upserted or deleted); ``owned``: the slice's files. ``replaces``: ranges
    of chunks read again (``ChangeSet.replaces``): every row of the slice's files in them
    is marked deleted too, and the batch's upserts (the chunks' rows among them) hold the
    ranges anew. A stored row lies in a file of the slice that owns its key, so each
    slice clears its own part of a range.

    ``purge_share``: a touched file that would then have that share of its rows deleted
    is not given a vector: its live rows go into the slice's new files with the upserts,
    and the commit removes it. The slice owns the file, so this is its one writer, and the
    rows stay in the slice's stretch of keys. A purge on the driver after the commit (a
    second commit, one process) wrote every victim into one file spanning them all, after
    which the table's files overlapped and its keys could no longer be cut into slices."""
    base = files.local(root)
    keys = changed_keys.column_names
    staging = files.staging_name(app_id, batch_id)
    touched_files: list[tuple[dict[str, Any], np.ndarray, int]] = []
    wanted = _sorted_ints(changed_keys.column(keys[0])) if changed_keys.num_rows else None
    if changed_keys.num_rows or replaces:
        for add in owned:
            r = _range(add, keys[0])
            keyed = bool(changed_keys.num_rows) and (r is None or wanted is None
                                                     or _any_within(wanted, *r))
            ranged = any(_may_hold(add, x) for x in replaces)
            if not keyed and not ranged:
                continue
            hit = _positions(base, add, keys_within(changed_keys, r), replaces if ranged else (),
                             wanted if keyed else None)
            if hit is not None:
                touched_files.append((add, *hit))
    gone: list[tuple[dict[str, Any], np.ndarray, int]] = []  # rewritten here
    marked: list[tuple[dict[str, Any], np.ndarray, int]] = []  # given a vector
    for t in touched_files:
        rows_in = _rows(t[0])
        purged = purge_share is not None and rows_in and t[1].size / rows_in >= purge_share
        (gone if purged else marked).append(t)
    vectors = (dv.write_file(base, [p for _a, p, _n in marked], prefix=staging + "/")
               if marked else [])
    rows: pa.Table | pa.RecordBatchReader = upserts
    if gone:
        rows = _with_live_rows(base, upserts, gone)
    data = files.write_data_files(root, rows, app_id, batch_id, partition_by,
                                  name=staging)
    return SliceResult(tuple(data), tuple(
        Touched(add, vec, n) for (add, _p, n), vec in zip(marked, vectors)) + tuple(
        Touched(add, None, n) for add, _p, n in gone))


def _with_live_rows(base: Path, upserts: pa.Table,
                    gone: list[tuple[dict[str, Any], np.ndarray, int]]) -> pa.RecordBatchReader:
    """``upserts``, then the rows of the files ``gone`` that their positions (deleted
    after this batch) leave, a row group at a time, each shaped as ``upserts``: a
    column a file lacks is null, its partition values become columns."""
    out = upserts.schema

    def batches():
        yield from upserts.to_batches()
        for add, dead, _n in gone:
            yield from _live_batches(base / unquote(add["path"]), dead,
                                     _shaped(out, add.get("partitionValues") or {}))

    return pa.RecordBatchReader.from_batches(out, batches())


def _shaped(out: pa.Schema, pv: dict[str, Any]) -> Callable[[pa.RecordBatch], pa.RecordBatch]:
    """A file's record batch as ``out``: its columns cast, its partition values ``pv``
    (not in the files) as columns, a column it lacks (added since) null."""
    def shape(b: pa.RecordBatch) -> pa.RecordBatch:
        n = b.num_rows
        return pa.RecordBatch.from_arrays(
            [b.column(f.name).cast(f.type) if f.name in b.schema.names
             else pa.array([pv[f.name]] * n, pa.string()).cast(f.type) if f.name in pv
             else pa.nulls(n, f.type) for f in out], schema=out)
    return shape


def _may_hold(add: dict[str, Any], r: KeyRange) -> bool:
    """Whether the file may hold a row of ``r``, from its statistics (integer columns;
    any other, or none, may)."""
    stats = json.loads(add["stats"]) if add.get("stats") else {}
    lo = (stats.get("minValues") or {}).get(r.column)
    hi = (stats.get("maxValues") or {}).get(r.column)
    nulls = (stats.get("nullCount") or {}).get(r.column)
    if not (isinstance(lo, int) and isinstance(hi, int) and isinstance(nulls, int)):
        return True
    return (nulls > 0 and r.start is None) or r.meets(lo, hi)


def _sorted_ints(column: Any) -> np.ndarray | None:
    """The changed keys' first column, distinct and sorted, when it is an integer one
    (statistics compare exactly); None otherwise (no pruning by key)."""

    if not pa.types.is_integer(column.type) or column.null_count:
        return None
    return distinct_sorted(pc.unique(column).to_numpy())


def _any_within(wanted: np.ndarray, lo: Any, hi: Any) -> bool:
    """Whether a key of ``wanted`` (sorted) lies in ``[lo, hi]``: a batch's random keys
    meet few of a large table's files, which their min-max bounds alone would not tell."""
    if lo > wanted[-1] or hi < wanted[0]:  # also keeps lo, hi within the array's type
        return False
    i = int(wanted.searchsorted(lo))
    return i < len(wanted) and wanted[i] <= hi


def _positions(base: Path, add: dict[str, Any], changed_keys: pa.Table,
               replaces: tuple[KeyRange, ...] = (),
               wanted: np.ndarray | None = None) -> tuple[np.ndarray, int] | None:
    """The file's deleted positions after this batch (its vector's, the rows of changed
    keys it holds and its rows in ``replaces``), and how many this batch adds; None when
    it holds none of them. With ``wanted`` (the changed keys' integer first column, sorted)
    and no range to clear, only the row groups whose statistics may hold one of them are
    read: the cost of a batch stays with its keys, not the file's size."""
    import numpy as np
    import pyarrow.parquet as pq

    keys = changed_keys.column_names
    ranged = [r.column for r in replaces if r.column not in keys]
    columns = keys + sorted(set(ranged))
    path = base / unquote(add["path"])
    groups = _groups_to_read(pq.ParquetFile(path), keys[0], wanted) \
        if wanted is not None and not replaces else None
    if groups is None:
        stored = pq.read_table(path, columns=columns)
        positions = pa.array(range(stored.num_rows), pa.int64())
    else:
        if not groups:
            return None
        pf = pq.ParquetFile(path)
        stored = pf.read_row_groups([g for g, _start in groups], columns=columns)
        positions = pa.array(np.concatenate([
            np.arange(start, start + pf.metadata.row_group(g).num_rows, dtype=np.int64)
            for g, start in groups]))
    # as the rows name them (a file may hold string_view, which joins do not take)
    stored = stored.cast(pa.schema([changed_keys.schema.field(n) if n in keys
                                    else stored.schema.field(n) for n in stored.column_names]))
    stored = stored.append_column("__pos", positions)
    old = dv.Descriptor.from_action(add.get("deletionVector"))
    dead = dv.read(base, old) if old is not None else np.empty(0, dtype=np.int64)
    if dead.size:
        stored = stored.filter(pc.invert(pc.is_in(stored["__pos"], value_set=pa.array(dead))))
    hit = [stored.select(keys + ["__pos"]).join(
        changed_keys, keys, join_type="inner", use_threads=False).column("__pos")]
    if replaces:
        hit.append(stored.filter(holds_any(replaces, stored)).column("__pos"))
    new = distinct_sorted(np.concatenate([c.to_numpy() for c in hit]))
    if not new.size:
        return None
    # the stored rows already dead were left out above: the two sets do not meet
    return np.sort(np.concatenate([dead, new])), int(new.size)


def _groups_to_read(pf: Any, key: str, wanted: np.ndarray) -> list[tuple[int, int]] | None:
    """The row groups of a data file that may hold a key of ``wanted``, each with the
    position of its first row; None when the file's statistics cannot tell (then it is read
    whole)."""
    md = pf.metadata
    names = [md.schema.column(j).path for j in range(md.num_columns)]
    if key not in names:
        return None
    j = names.index(key)
    out, start = [], 0
    for g in range(md.num_row_groups):
        rg = md.row_group(g)
        st = rg.column(j).statistics
        if st is None or not st.has_min_max or not isinstance(st.min, int):
            return None
        if _any_within(wanted, st.min, st.max):
            out.append((g, start))
        start += rg.num_rows
    return out


def commit_changes(root: str, log: DeltaLog, plan_version: int, results: list[SliceResult],
                   app_id: str, batch_id: int, txns: list[tuple[str, int]]) -> int:
    """On the driver: every slice's files and vectors in one commit (module docstring,
    step 3) with the app transactions ``txns``, as the log's version after
    ``plan_version``. Returns the version written."""
    now = int(time.time() * 1000)
    actions: list[dict[str, Any]] = [{"commitInfo": {
        "timestamp": now, "operation": "MERGE",
        "operationParameters": {"predicate": "sparkcdc change slices"},
        "engineInfo": "sparkcdc", "sparkcdc.batch": str(batch_id),
        "sparkcdc.written-by": "tasks", "isBlindAppend": False}}]
    actions += [{"txn": {"appId": a, "version": v, "lastUpdated": now}} for a, v in txns]
    for r in results:
        for t in r.touched:
            old = t.add
            remove = {"path": old["path"], "deletionTimestamp": now, "dataChange": True,
                      "extendedFileMetadata": True,
                      "partitionValues": old.get("partitionValues") or {},
                      "size": old["size"]}
            if old.get("deletionVector"):
                remove["deletionVector"] = old["deletionVector"]
            if t.vector is None:  # its live rows are in the slice's new files
                actions.append({"remove": remove})
                continue
            add = {k: v for k, v in old.items() if v is not None}
            add["deletionVector"] = t.vector.to_action()
            add["dataChange"] = True
            if add.get("stats"):
                stats = json.loads(add["stats"])
                stats["tightBounds"] = False
                add["stats"] = json.dumps(stats)
            actions += [{"remove": remove}, {"add": add}]
        for f in r.data:
            actions.append({"add": {
                "path": f.path, "partitionValues": f.partition_values, "size": f.size,
                "modificationTime": f.modification_time, "dataChange": True,
                "stats": f.stats}})
    return _commit(log, plan_version + 1, actions,
                   f"while batch {batch_id}'s changes were written")


def _commit(log: DeltaLog, version: int, actions: list[dict[str, Any]], during: str) -> int:
    """``actions`` written as the log's ``version``, which must not exist yet: the file is
    written whole under another name, then linked to its own (``link`` fails if the name
    is taken: a writer that committed since this one read the log)."""
    body = "".join(json.dumps(a, separators=(",", ":")) + "\n" for a in actions)
    path = log.dir / f"{version:020d}.json"
    tmp = log.dir / f".{version:020d}.json.{os.getpid()}.tmp"
    tmp.write_text(body)
    try:
        os.link(tmp, path)
    except FileExistsError:
        raise files.CommitConflict(f"{log.root}: version {version} was committed by another "
                                   f"writer {during}") from None
    finally:
        tmp.unlink(missing_ok=True)
    return version


def purge(root: str, share: float, app_id: str, partition_by: tuple[str, ...] = (),
          log: DeltaLog | None = None) -> int:
    """Rewrite the files whose deletion vectors delete at least ``share`` of their rows,
    without those rows, in one commit (no data change: the table reads the same). delta-rs'
    ``optimize.compact`` leaves a file alone when nothing else is in its bin, whatever
    its vector deletes, so a table updated at random would keep its dead rows forever.
    The live rows stream from the old files to the new ones a row group at a time
    (``_live_rows``): a catch-up that marks half of a large table's rows deleted purges
    most of its files after one batch, and holding them all at once cost the driver
    hundreds of MB (docs/benchmarks.md, "Where the catch-up's memory went").
    Returns how many files were rewritten; a commit that meets another writer's fails and
    is tried at the next compaction. ``log``: the table's log as the caller keeps it, up to
    date (else read from its last checkpoint)."""
    base = files.local(root)
    log = log if log is not None else DeltaLog(base).refresh()
    victims = []
    for add in log.files.values():
        vec = dv.Descriptor.from_action(add.get("deletionVector"))
        rows = _rows(add)
        if vec is not None and rows and vec.cardinality / rows >= share:
            victims.append((add, vec))
    if not victims:
        return 0
    now = int(time.time() * 1000)
    name = files.staging_name(app_id, -1)
    actions: list[dict[str, Any]] = [{"commitInfo": {
        "timestamp": now, "operation": "OPTIMIZE",
        "operationParameters": {"predicate": f"purge deleted rows >= {share}"},
        "engineInfo": "sparkcdc", "isBlindAppend": False}}]
    for add, _vec in victims:
        remove = {"path": add["path"], "deletionTimestamp": now, "dataChange": False,
                  "extendedFileMetadata": True,
                  "partitionValues": add.get("partitionValues") or {}, "size": add["size"],
                  "deletionVector": add["deletionVector"]}
        actions.append({"remove": remove})
    new = files.write_data_files(root, _live_rows(base, log, victims), app_id, -1,
                                 partition_by, name=name)
    actions += [{"add": {"path": f.path, "partitionValues": f.partition_values,
                         "size": f.size, "modificationTime": f.modification_time,
                         "dataChange": False, "stats": f.stats}} for f in new]
    try:
        _commit(log, log.version + 1, actions, "while deleted rows were purged")
    except files.CommitConflict:
        shutil.rmtree(base / name, ignore_errors=True)
        raise
    return len(victims)


def _live_rows(base: Path, log: DeltaLog, victims: list[tuple[dict[str, Any], dv.Descriptor]]
               ) -> pa.RecordBatchReader:
    """The rows of ``victims`` their vectors do not delete, a row group at a time, each
    column as the table declares it (a file may hold string_view, which Arrow's filter
    does not take), partition values as columns (not in the files), and the files' columns
    unified as ``concat_tables`` would (a column a file lacks is null in its rows)."""
    import numpy as np
    import pyarrow.parquet as pq

    declared = _declared(log)
    plans = []
    for add, vec in victims:
        path = base / unquote(add["path"])
        stored = _schema_of(declared, pq.read_schema(path))
        pv = add.get("partitionValues") or {}  # not in the files
        own = pa.schema([*stored, *(pa.field(p, declared.field(p).type if p in declared.names
                                             else pa.string()) for p in pv)])
        plans.append((path, pv, vec, stored, own))
    out = pa.unify_schemas([p[4] for p in plans], promote_options="default")

    def batches():
        for path, pv, vec, stored, _own in plans:
            dead = np.asarray(dv.read(base, vec), dtype=np.int64)
            shape = _shaped(out, pv)
            yield from _live_batches(path, dead,
                                     lambda b, stored=stored, shape=shape: shape(b.cast(stored)))

    return pa.RecordBatchReader.from_batches(out, batches())


def _live_batches(path: Path, dead: np.ndarray,
                  shape: Callable[[pa.RecordBatch], pa.RecordBatch]
                  ) -> Iterator[pa.RecordBatch]:
    """The rows of the data file at ``path`` that the sorted positions ``dead`` leave, a row
    group at a time (a purged file is streamed, never held whole), each batch ``shape``d
    first (a file may hold string_view, which Arrow's filter does not take)."""
    import numpy as np
    import pyarrow.parquet as pq

    start = 0
    for b in pq.ParquetFile(path).iter_batches(batch_size=65_536):
        n = b.num_rows
        keep = np.ones(n, dtype=bool)
        lo, hi = np.searchsorted(dead, [start, start + n])
        keep[dead[lo:hi] - start] = False
        start += n
        if keep.any():
            yield shape(b).filter(pa.array(keep))


def needs_purge(results: list[SliceResult], share: float) -> bool:
    """Whether a file a batch marked now has at least ``share`` of its rows deleted (the
    tasks rewrite such files themselves when told the share: ``write_slice``)."""
    return any(_rows(t.add) and t.vector is not None
               and t.vector.cardinality / _rows(t.add) >= share
               for r in results for t in r.touched)


def _declared(log: DeltaLog) -> pa.Schema:
    """The table's columns as its log declares them, in Arrow."""
    from deltalake import Schema

    return pa.schema(Schema.from_json(log.metadata["schemaString"]).to_arrow())


def _schema_of(declared: pa.Schema, got: pa.Schema) -> pa.Schema:
    """The rows' Arrow schema with each column the table declares as it declares it (the
    log gives partition values as text; a file may hold string_view)."""
    return pa.schema([declared.field(n) if n in declared.names else got.field(n)
                      for n in got.names])
