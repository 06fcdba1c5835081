"""A micro-batch's changes written into an Iceberg table by Spark tasks, each owning a slice
of the keys, merge-on-read: new rows plus *position delete files* (the table spec's
"Position Delete Files": Parquet rows ``file_path``, ``pos``) marking the rows they replace
or delete. A batch costs what it changes, not the files that held the old rows.

1. **Slices** (driver, ``plan_slices``): the current snapshot's data files, each with the
   delete files that apply to it (pyiceberg's scan planning), cut by the first key
   column's bounds into ``KeySlices`` (``KeySlices.by_ranges``, as for Delta): one key has
   one writer, one data file one writer of its deletes in a batch.
2. **Write** (a task, ``write_slice``): the key columns of the slice's files whose bounds
   hold a changed key are read (by field id), less the positions their delete files
   delete already, and joined with the changed keys; each file with hits gets one new
   position delete file beside it, for it alone (file-scoped: its ``file_path`` bounds are
   the data file's path, so readers match it to that file without reading it), or, when
   the batch would leave ``purge-deleted-share`` of its rows deleted, its live rows are
   written again with the upserts and the file is removed (the *purge*); the upserts are
   written as new data files. The task sends the driver their descriptions.
3. **Commit** (driver, ``commit_changes``): one snapshot of every slice's files with the
   batch id, from the snapshot the slices were cut from (``commit.commit``).

Compaction (``rewrite``): data files with their deletes applied, written again, the old
ones and their file-scoped delete files dropped, in one ``replace`` snapshot; run every
``compact-every`` batches for every small file and every file with deletes.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from sparkcdc.sinks.base import KeyRange, KeySlices, holds_any, log
from sparkcdc.sinks.iceberg import bounds, files
from sparkcdc.sinks.iceberg.commit import CommitConflict, commit
from sparkcdc.sinks.positions import distinct_sorted, keys_within

PATH_ID, POS_ID = 2147483546, 2147483545  # the spec's reserved field ids
FIELD_ID = b"PARQUET:field_id"


def plan_slices(table, key: str, n: int) -> KeySlices:
    """The slices of the current snapshot's data files for a batch (step 1). Each part is
    a tuple of one dict per owned file: its path, rows, format, size, spec, partition
    (encoded as ``files.describe`` does), first-key bounds, the paths of its delete files
    and of those among them that are its alone (``own``: a purge drops them with it)."""
    snap = table.current_snapshot()
    tasks = list(table.scan().plan_files()) if snap is not None else []
    field = bounds.integer_key(table, key)
    items, ranges = [], []
    for t in tasks:
        f = t.file
        r = bounds.int_bounds(f, field) if field is not None else None
        desc = files.describe(f, table)
        items.append({"path": f.file_path, "rows": f.record_count, "spec": desc["spec"],
                      "part": desc["part"], "range": r, "format": desc["format"],
                      "size": desc["size"],
                      "deletes": sorted(d.file_path for d in t.delete_files),
                      "own": sorted(d.file_path for d in t.delete_files
                                    if file_scoped(d, f.file_path))})
        ranges.append(r)
    if field is None:
        ranges = [None]
    return KeySlices.by_ranges(key, items, ranges, [i["rows"] for i in items], n,
                               snap.snapshot_id if snap is not None else -1)


@dataclass(frozen=True)
class SliceResult:
    """What a slice's task hands the driver: its new data files and delete files, as
    ``files.describe`` puts them, how many stored rows it marked deleted, and the paths
    of the files its purge rewrote (data files and their own delete files), which the
    commit removes."""

    data: tuple[dict[str, Any], ...]
    deletes: tuple[dict[str, Any], ...]
    marked: int
    removed: tuple[str, ...] = ()
    purged: int = 0  # data files among ``removed``

    def to_dict(self) -> dict[str, Any]:
        return {"data": list(self.data), "deletes": list(self.deletes), "marked": self.marked,
                "removed": list(self.removed), "purged": self.purged}

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> SliceResult:
        return cls(tuple(d["data"]), tuple(d["deletes"]), int(d["marked"]),
                   tuple(d.get("removed") or ()), int(d.get("purged") or 0))


def write_slice(table, owned: tuple[dict[str, Any], ...], upserts: pa.Table,
                changed_keys: pa.Table, app_id: str, batch_id: int,
                replaces: tuple[KeyRange, ...] = (),
                purge_share: float | None = None) -> SliceResult:
    """In a task: one slice's changes (step 2). ``upserts``: rows shaped as the table's
    Arrow schema; ``changed_keys``: the key columns of every changed key (upserted or
    deleted), typed as the table stores them; ``owned``: the slice's files. ``replaces``:
    ranges of chunks read again (``ChangeSet.replaces``): every live row of the slice's
    files in them is deleted too, the batch's rows holding those ranges anew.

    ``purge_share``: a file the batch would leave with that share of its rows deleted gets
    no delete file: its live rows go into the slice's new data files with the upserts, and
    the commit removes it with its own delete files. The slice owns the file, so this task
    is its one writer, in the batch's one commit; a purge on the driver after the commit
    was a second snapshot, from one process, between every two batches (2-3 s of a
    catch-up's batch into a 2M-row table, docs/benchmarks.md)."""
    wid = files.write_id(app_id, batch_id)
    schema = table.schema()
    key_ids = [schema.find_field(k).field_id for k in changed_keys.column_names]
    first_key = changed_keys.column_names[0]
    deletes = []
    gone: list[tuple[dict[str, Any], np.ndarray]] = []  # (file, every dead position)
    marked = 0
    lo = hi = None
    if changed_keys.num_rows:
        first = changed_keys.column(0)
        lo, hi = pc.min(first).as_py(), pc.max(first).as_py()
    for i, item in enumerate(owned):
        r = item.get("range")
        near_keys = lo is not None and not (r is not None and (r[1] < lo or r[0] > hi))
        ranged = tuple(x for x in replaces if _may_hold(r, x, first_key))
        if not (near_keys or ranged):
            continue
        keys = keys_within(changed_keys, r) if near_keys else changed_keys.slice(0, 0)
        hit, dead = _positions(item, keys, key_ids, ranged, schema)
        if not hit.size:
            continue
        marked += len(hit)
        rows_in = int(item["rows"])
        if purge_share is not None and rows_in and (
                len(dead) + hit.size) / rows_in >= purge_share:
            gone.append((item, np.union1d(hit, dead)))
        else:
            deletes.append(_write_deletes(table, item, hit, wid, i))
    rows = upserts
    if gone:
        rows = pa.concat_tables([upserts, *(_live_rows(table, item, dead, upserts.schema)
                                            for item, dead in gone)])
    data = files.write_data_files(table, rows, wid)
    removed = tuple(p for item, _d in gone for p in [item["path"], *item.get("own", ())])
    return SliceResult(tuple(files.describe(f, table) for f in data),
                       tuple(deletes), marked, removed, len(gone))


def _live_rows(table, item: dict[str, Any], dead: np.ndarray, out: pa.Schema) -> pa.Table:
    """The rows of ``item``'s data file but those at the positions ``dead`` (ascending),
    read as the table's current schema (pyiceberg's scan: by field id, a column added
    since null), shaped as ``out``."""
    from pyiceberg.expressions import AlwaysTrue
    from pyiceberg.io.pyarrow import ArrowScan
    from pyiceberg.table import FileScanTask

    f = files.data_file({**item, "content": 0}, table)
    scan = ArrowScan(table.metadata, table.io, table.schema(), AlwaysTrue())
    got, start = [], 0
    for b in scan.to_record_batches([FileScanTask(f)]):
        n = b.num_rows
        cut = dead[(dead >= start) & (dead < start + n)] - start
        keep = np.ones(n, dtype=bool)
        keep[cut] = False
        got.append(pa.Table.from_batches([b]).filter(pa.array(keep)))
        start += n
    if start != int(item["rows"]):
        raise ValueError(f"{item['path']}: read {start} rows, the table says {item['rows']}")
    return pa.concat_tables(got).cast(out) if got else out.empty_table()


def read_by_ids(path: str, ids: list[int], names: list[str]) -> pa.Table:
    """The columns of field ids ``ids`` of a Parquet data file, named ``names``: a file
    names a column as the table did when it was written, and a rename since changes only
    the table's name for that id."""
    import pyarrow.parquet as pq

    pf = pq.ParquetFile(files.local(path))
    by_id = {int(f.metadata[FIELD_ID]): f.name for f in pf.schema_arrow
             if f.metadata and FIELD_ID in f.metadata}
    cols = [by_id.get(i, n) for i, n in zip(ids, names)]
    return pf.read(columns=cols).rename_columns(names)


def deleted_positions(delete_paths: list[str], data_path: str) -> pa.Array:
    """The positions of ``data_path`` that the position delete files delete."""
    import pyarrow.parquet as pq

    got = []
    for p in delete_paths:
        t = pq.read_table(files.local(p), columns=["file_path", "pos"])
        got.append(t.filter(pc.equal(t["file_path"], data_path))["pos"].combine_chunks())
    return pa.concat_arrays(got) if got else pa.array([], pa.int64())


def _may_hold(bounds: Any, r: KeyRange, first_key: str) -> bool:
    """Whether a file whose first key lies in ``bounds`` (None: unknown) may hold a row of
    ``r``; a range of another column may be anywhere."""
    if bounds is None or r.column != first_key:
        return True
    try:
        return r.meets(bounds[0], bounds[1])
    except TypeError:  # bounds and range of types that do not compare: look
        return True


def _positions(item: dict[str, Any], changed_keys: pa.Table, key_ids: list[int],
               replaces: tuple[KeyRange, ...] = (), schema: Any = None
               ) -> tuple[np.ndarray, np.ndarray]:
    """The positions in ``item``'s data file of live rows whose key changed, or that lie
    in one of ``replaces``, ascending (``sinks/positions.py``); and those its delete files
    delete already."""
    keys = changed_keys.column_names
    ranged = sorted({r.column for r in replaces if r.column not in keys})
    ids = key_ids + [schema.find_field(c).field_id for c in ranged]
    stored = read_by_ids(item["path"], ids, keys + ranged)
    stored = stored.cast(pa.schema([changed_keys.schema.field(n) if n in keys
                                    else stored.schema.field(n) for n in stored.column_names]))
    stored = stored.append_column("__pos", pa.array(np.arange(stored.num_rows, dtype=np.int64)))
    dead = deleted_positions(item["deletes"], item["path"])
    if len(dead):
        stored = stored.filter(pc.invert(pc.is_in(stored["__pos"], value_set=dead)))
    hit = [stored.select(keys + ["__pos"]).join(
        changed_keys, keys, join_type="inner", use_threads=False).column("__pos")]
    if replaces:
        hit.append(stored.filter(holds_any(replaces, stored)).column("__pos"))
    return (distinct_sorted(np.concatenate([c.to_numpy() for c in hit])),
            dead.to_numpy(zero_copy_only=False))


def _write_deletes(table, item: dict[str, Any], positions: np.ndarray, wid: Any,
                   n: int) -> dict[str, Any]:
    """One position delete file for ``item``'s data file alone, beside it; its
    description (step 2)."""
    import pyarrow.parquet as pq
    from pyiceberg.conversions import to_bytes
    from pyiceberg.manifest import DataFileContent
    from pyiceberg.types import LongType, StringType

    path = item["path"]
    where = path.rsplit("/", 1)[0] + f"/{wid}-deletes-{n:05d}.parquet"
    schema = pa.schema([
        pa.field("file_path", pa.string(), nullable=False, metadata={FIELD_ID: str(PATH_ID)}),
        pa.field("pos", pa.int64(), nullable=False, metadata={FIELD_ID: str(POS_ID)})])
    rows = pa.table([pa.repeat(pa.scalar(path, pa.string()), len(positions)),
                     pa.array(positions, pa.int64())], schema=schema)
    out = files.local(where)
    pq.write_table(rows, out, compression="zstd")
    # full bounds: file_path's are the data file's path (file-scoped), as Iceberg's own
    # position delete writers set them
    lo = {str(PATH_ID): files.b64(to_bytes(StringType(), path)),
          str(POS_ID): files.b64(to_bytes(LongType(), int(positions[0])))}
    hi = {**lo, str(POS_ID): files.b64(to_bytes(LongType(), int(positions[-1])))}
    return {"content": int(DataFileContent.POSITION_DELETES), "path": where,
            "format": "PARQUET", "spec": item["spec"], "part": item["part"],
            "rows": len(positions), "size": out.stat().st_size,
            "value_counts": {str(PATH_ID): len(positions), str(POS_ID): len(positions)},
            "null_value_counts": {str(PATH_ID): 0, str(POS_ID): 0},
            "lower_bounds": lo, "upper_bounds": hi}


def decode(table, described: list[dict[str, Any]]) -> list[Any]:
    return [files.data_file(d, table) for d in described]


def commit_changes(table, base: int, results: list[SliceResult], properties: dict[str, str],
                   summary: dict[str, str], name: Any = None):
    """On the driver: every slice's files in one snapshot after ``base`` (step 3), the
    files the slices' purges rewrote removed in it, its manifests named by the write id
    ``name``."""
    added = decode(table, [d for r in results for d in r.data + r.deletes])
    return commit(table, added, base=None if base < 0 else base,
                  removed=[p for r in results for p in r.removed], properties=properties,
                  summary=summary, name=name)


def deleted_share(task: Any) -> float:
    """How much of a planned data file its delete files delete (each of ours deletes
    positions no earlier one does)."""
    rows = task.file.record_count
    return sum(d.record_count for d in task.delete_files) / rows if rows else 0.0


def file_scoped(delete_file: Any, data_path: str) -> bool:
    """Whether a position delete file deletes rows of ``data_path`` only (its
    ``file_path`` bounds are that path)."""
    lo = (delete_file.lower_bounds or {}).get(PATH_ID)
    hi = (delete_file.upper_bounds or {}).get(PATH_ID)
    return lo is not None and lo == hi and lo == data_path.encode()


def rewrite(table, tasks: list[Any], app_id: str, batch_id: int, tidy: bool = False) -> int:
    """Compaction: the data files of ``tasks`` (planned scan tasks) read with their deletes
    applied and written again, and they and the delete files that were theirs alone
    dropped, in one ``replace`` snapshot (the rows are the same: a crash before or after
    it changes nothing). Raises ``CommitConflict`` when another writer committed first;
    its files are then removed. ``tidy`` (a compaction, which removes thousands of files):
    then a snapshot of live manifests only (``_live_manifests_only``). Returns how many data
    files were rewritten."""
    from pyiceberg.expressions import AlwaysTrue
    from pyiceberg.io.pyarrow import ArrowScan

    if not tasks:
        return 0
    snap = table.current_snapshot()
    schema = table.schema().as_arrow()
    rows = ArrowScan(table.metadata, table.io, table.schema(), AlwaysTrue()).to_table(
        tasks).cast(schema)
    wid = files.write_id(app_id, batch_id, files.COMPACTION)
    new = files.write_data_files(table, rows, wid)
    removed = [t.file.file_path for t in tasks]
    removed += [d.file_path for t in tasks for d in t.delete_files
                if file_scoped(d, t.file.file_path)]
    summary = {"sparkcdc.app-id": app_id, "sparkcdc.compaction": str(batch_id)}
    try:
        table = commit(table, new, base=snap.snapshot_id, removed=removed, replace=True,
                       summary=summary, name=wid)
    except CommitConflict:
        for f in new:
            table.io.delete(f.file_path)
        raise
    if tidy:
        _live_manifests_only(table, summary, wid)
    return len(tasks)


def _live_manifests_only(table, summary: dict[str, str], wid: Any) -> None:
    """After a compaction, a snapshot of the same rows whose manifest list leaves out the
    compaction's manifests of DELETED entries (``commit`` keeps only live manifests).

    The compaction's own snapshot records every file it removed as DELETED, as the spec
    has a removing snapshot do (incremental readers and snapshot expiry read them); but a
    reader plans a scan by opening every manifest of the current snapshot, and pyiceberg
    reads those entries only to skip them: after 100 small batches, 7,000 removed delete
    files took a scan of 2,000,000 rows 0.1 s to plan, 2.4x a fresh table's whole scan
    (docs/benchmarks.md, "100 small batches ... into Iceberg"). Java Iceberg's planning
    skips such manifests by their counts; the next batch's commit drops them too. A writer
    that commits first wins: this snapshot is then not needed."""
    current = table.metadata.current_snapshot()
    if current is None or all(m.has_added_files() or m.has_existing_files()
                              for m in current.manifests(table.io)):
        return
    try:
        commit(table, [], base=current.snapshot_id, replace=True,
               summary={**summary, "sparkcdc.manifests": "live"}, name=wid)
    except CommitConflict as e:
        log.debug("%s: the compaction's DELETED entries left to the next commit (%s)",
                  table.name(), e)
