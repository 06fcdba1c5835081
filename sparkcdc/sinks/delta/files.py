"""Delta data files written where the rows are, committed once by the driver.

The rows of a micro-batch are written by the Spark tasks that hold them: each task writes
Parquet data files into the table's folder and hands the driver only what a commit needs
about them (``DataFile``: a path, sizes, partition values, statistics), a few hundred bytes
per file whatever its rows. The driver then commits every task's files of a batch in one
Delta commit carrying the batch id as the app transaction (``txn``), which is how Spark's
own Delta writer makes ``foreachBatch`` idempotent: a batch Spark runs again finds its id
there and commits nothing.

How a task writes files that nothing has committed yet: delta-rs writes them, as for the
driver's own appends (the same Parquet writer, statistics and partition folders), into a
*staging* table of its own inside the target's folder, ``sc-<app id's digest>-b<batch>-<uuid>/``; the task
reads the ``add`` actions from the staging table's first commit and removes its
``_delta_log``. The files stay where they were written, and the target's commit names them
by their path under its root (Delta paths are relative to the table's root and may lie in
any folder). A folder no commit names is the leftover of an attempt that died, or of one
whose batch was committed by another attempt: ``remove_leftovers`` deletes those of a batch
once it is committed, and Delta's ``VACUUM`` deletes any other.

Only folders in the local file system are written so (``supported``); any other table is
written from the driver, as before.
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import time
import uuid
from collections.abc import Callable
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

import pyarrow as pa


@dataclass(frozen=True)
class DataFile:
    """One Parquet data file a task wrote, as the driver's commit names it."""

    path: str  # relative to the table's root
    size: int
    rows: int
    partition_values: dict[str, str | None]
    modification_time: int  # ms since the epoch
    stats: str  # Delta's statistics JSON, as delta-rs wrote it

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> DataFile:
        return cls(str(d["path"]), int(d["size"]), int(d["rows"]),
                   dict(d.get("partition_values") or {}), int(d["modification_time"]),
                   str(d.get("stats") or ""))


def supported(path: str) -> bool:
    """Whether tasks can write the table's files themselves: a folder of the local file
    system (also ``file://``), which every task of a local run, and of a cluster whose
    executors share it, reaches."""
    return "://" not in path or path.startswith("file://")


class CommitConflict(RuntimeError):
    """Another writer committed to the table between a batch's plan and its commit; the
    batch fails and Spark runs it again, planned anew."""


def local(path: str) -> Path:
    return Path(path.removeprefix("file://"))


def _prefix(app_id: str, batch_id: int) -> str:
    """Staging folders of one writer's batch: several source tables may write one target
    (shards), each under its own app id and batch ids, so the app id is in the name."""
    digest = hashlib.sha256(app_id.encode()).hexdigest()[:10]
    return f"sc-{digest}-b{batch_id:010d}-"


def staging_name(app_id: str, batch_id: int) -> str:
    return _prefix(app_id, batch_id) + uuid.uuid4().hex


def write_data_files(root: str, rows: pa.Table | pa.RecordBatchReader, app_id: str,
                     batch_id: int, partition_by: tuple[str, ...] = (),
                     name: str | None = None) -> list[DataFile]:
    """In a task: ``rows`` (shaped as the target stores them; a reader streams them)
    written as data files of the table at ``root``, uncommitted, in staging folder
    ``name`` (a new one by default). No rows write nothing."""
    import deltalake

    if isinstance(rows, pa.Table) and rows.num_rows == 0:
        return []
    name = name or staging_name(app_id, batch_id)
    staging = local(root) / name
    deltalake.write_deltalake(str(staging), rows, mode="error",
                              partition_by=list(partition_by) or None)
    out = []
    log0 = staging / "_delta_log" / f"{0:020d}.json"
    for line in log0.read_text().splitlines():
        add = json.loads(line).get("add")
        if add is None:
            continue
        stats = add.get("stats") or ""
        n = json.loads(stats).get("numRecords", 0) if stats else 0
        out.append(DataFile(f"{name}/{add['path']}", int(add["size"]), int(n),
                            dict(add.get("partitionValues") or {}),
                            int(add.get("modificationTime") or time.time() * 1000), stats))
    shutil.rmtree(staging / "_delta_log")
    return out


def files_app_id(app_id: str) -> str:
    """The app transaction a batch's files are committed under, beside the table's own."""
    return f"{app_id}#files"


def committed(table, app_id: str, batch_id: int) -> bool:
    """Whether ``table`` has the files of ``batch_id``: their own commit, or the batch."""
    return any((v := table.transaction_version(a)) is not None and batch_id <= v
               for a in (app_id, files_app_id(app_id)))


def commit_data_files(table, files: list[DataFile], schema: pa.Schema, app_id: str,
                      batch_id: int, partition_by: tuple[str, ...] = (),
                      final: bool = True) -> bool:
    """On the driver: one commit adding ``files`` to ``table`` (a ``DeltaTable``), with the
    batch id as app transaction ``<app_id>#files`` and, when ``final`` (nothing else of the
    batch goes to the table after them), ``app_id``'s too. False when the table has them
    already: nothing is committed (the files are then leftovers)."""
    import deltalake
    from deltalake.transaction import AddAction

    if committed(table, app_id, batch_id):
        return False
    actions = [AddAction(f.path, f.size, f.partition_values, f.modification_time, True, f.stats)
               for f in files]
    txns = [deltalake.Transaction(files_app_id(app_id), batch_id)]
    if final:
        txns.append(deltalake.Transaction(app_id, batch_id))
    props = deltalake.CommitProperties(
        app_transactions=txns,
        custom_metadata={"sparkcdc.batch": str(batch_id), "sparkcdc.written-by": "tasks"})
    table.create_write_transaction(actions, mode="append", schema=schema,
                                   partition_by=list(partition_by) or None,
                                   commit_properties=props)
    return True


def remove_leftovers(root: str, app_id: str, batch_id: int,
                     log: Callable[[], Any] | None = None) -> int:
    """Delete the staging folders of ``app_id``'s ``batch_id`` that no live file of the
    table at ``root`` (as of after the batch's commit) lies in, nor any deletion vector of
    its files: those of task attempts that died, or of a run of the batch that found it
    committed already. Another writer's folders (a shard of the same target) are not
    touched. Returns how many went. ``log``: gives the table's ``DeltaLog`` as the caller
    keeps it, up to date (else the log is read from its last checkpoint, at every batch)."""
    prefix = _prefix(app_id, batch_id)
    base = local(root)
    if not base.is_dir():
        return 0
    here = [e for e in os.scandir(base) if e.is_dir() and e.name.startswith(prefix)]
    if not here:
        return 0
    from sparkcdc.sinks.delta.log import DeltaLog

    keep = set()
    for add in (log() if log is not None else DeltaLog(base).refresh()).files.values():
        keep.add(add["path"].split("/", 1)[0])
        vec = add.get("deletionVector") or {}
        if vec.get("storageType") == "u":
            keep.add(vec["pathOrInlineDv"][:-20].rstrip("/"))
    gone = 0
    for entry in here:
        if entry.name not in keep:
            shutil.rmtree(entry.path, ignore_errors=True)
            gone += 1
    return gone
