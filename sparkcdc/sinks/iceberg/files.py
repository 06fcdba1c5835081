"""Iceberg data files written where the rows are, described in a few hundred bytes for the
driver's commit, and the files no commit names found and removed.

A Spark task writes a batch's rows as Parquet data files of the table with pyiceberg's own
writer (``_dataframe_to_data_files``: the table's schema with its field ids, its partition
spec, its target file size, and the per-column statistics a manifest entry carries), and
sends the driver what the manifest needs about each file (``describe``): a ``DataFile``
whose bounds and partition values are bytes, encoded as the spec serializes them
(``pyiceberg.conversions.to_bytes``), so the driver rebuilds the very ``DataFile``
(``data_file``) without reading the file.

**Whose files.** Every file a writer makes carries a *write id* in its name, a UUID whose
first twelve bytes say which app id (a digest), what kind (``b``: a batch's rows and
deletes; ``c``: a compaction) and which batch, and whose last four are random (one task
attempt). A file of a batch that no commit names (an attempt that died, a run of a batch
that found it committed) is known by that prefix and removed once the batch is committed
(``IcebergSink._remove_leftovers``), and so are the manifests of a commit killed before the
catalog took it (``commit.commit`` names them by the write id); another writer's files
(another app id into the same table) are never touched.

Only tables in the local file system are written so (``supported``): the removal lists the
table's data folder.
"""

from __future__ import annotations

import base64
import hashlib
import os
import uuid
from collections.abc import Iterable
from pathlib import Path
from typing import Any

import pyarrow as pa

BATCH, COMPACTION = "b", "c"


def supported(location: str) -> bool:
    """Whether tasks can write the table's files themselves: a local folder (``file://``
    or a path), which every task of a local run, and of a cluster whose executors share
    it, reaches."""
    return location.startswith("file://") or "://" not in location


def local(path: str) -> Path:
    return Path(path.removeprefix("file://").removeprefix("file:"))


def write_prefix(app_id: str, batch_id: int, kind: str = BATCH) -> str:
    """The text every write id of ``app_id``'s ``batch_id`` (of ``kind``) starts with."""
    return str(write_id(app_id, batch_id, kind, b"\0" * 4))[:28]


def write_id(app_id: str, batch_id: int, kind: str = BATCH, tail: bytes | None = None
             ) -> uuid.UUID:
    """A new write id (module docstring): digest, kind, batch, then four random bytes."""
    head = hashlib.sha256(app_id.encode()).digest()[:4]
    body = kind.encode()[:1] + (batch_id & (2**56 - 1)).to_bytes(7, "big")
    return uuid.UUID(bytes=head + body + (tail if tail is not None else os.urandom(4)))


def write_data_files(table, rows: pa.Table, wid: uuid.UUID) -> list[Any]:
    """``rows`` (shaped as the table's Arrow schema) written as data files of ``table``
    (a pyiceberg ``Table``), uncommitted, named by ``wid``; the ``DataFile``s."""
    from pyiceberg.io.pyarrow import _dataframe_to_data_files

    if rows.num_rows == 0:
        return []
    return list(_dataframe_to_data_files(table_metadata=table.metadata, df=rows, io=table.io,
                                         write_uuid=wid))


def b64(b: bytes) -> str:
    return base64.b64encode(b).decode()


def spec_id(f: Any, table) -> int:
    """A file's partition spec: pyiceberg's writer leaves it unset on the files it writes
    (they take the table's default spec)."""
    got = getattr(f, "_spec_id", None)
    return table.metadata.default_spec_id if got is None else int(got)


def partition_type(table, spec: int) -> Any:
    return table.specs()[spec].partition_type(table.schema())


def describe(f: Any, table) -> dict[str, Any]:
    """What the driver's manifest needs about the data or delete file ``f`` (a
    ``DataFile`` of ``table``), as JSON: its bounds and partition values as the spec's
    bytes."""
    from pyiceberg.conversions import to_bytes

    spec = spec_id(f, table)
    part = [None if v is None else b64(to_bytes(field.field_type, v))
            for field, v in zip(partition_type(table, spec).fields, f.partition)]
    d: dict[str, Any] = {
        "content": int(f.content), "path": f.file_path, "format": f.file_format.value,
        "spec": spec, "part": part, "rows": f.record_count,
        "size": f.file_size_in_bytes}
    for name in ("column_sizes", "value_counts", "null_value_counts", "nan_value_counts"):
        m = getattr(f, name)
        if m:
            d[name] = {str(k): v for k, v in m.items()}
    for name in ("lower_bounds", "upper_bounds"):
        m = getattr(f, name)
        if m:
            d[name] = {str(k): b64(v) for k, v in m.items()}
    if f.split_offsets:
        d["split_offsets"] = list(f.split_offsets)
    return d


def data_file(d: dict[str, Any], table) -> Any:
    """The ``DataFile`` of ``table`` that ``describe`` described."""
    from pyiceberg.conversions import from_bytes
    from pyiceberg.manifest import DataFile, DataFileContent, FileFormat
    from pyiceberg.typedef import Record

    part = Record(*[None if v is None else from_bytes(field.field_type, base64.b64decode(v))
                    for field, v in zip(partition_type(table, int(d["spec"])).fields,
                                        d["part"])])
    maps: dict[str, Any] = {}
    for name in ("column_sizes", "value_counts", "null_value_counts", "nan_value_counts"):
        maps[name] = {int(k): int(v) for k, v in (d.get(name) or {}).items()} or None
    for name in ("lower_bounds", "upper_bounds"):
        maps[name] = {int(k): base64.b64decode(v)
                      for k, v in (d.get(name) or {}).items()} or None
    f = DataFile.from_args(
        content=DataFileContent(int(d["content"])), file_path=d["path"],
        file_format=FileFormat(d["format"]), partition=part, record_count=int(d["rows"]),
        file_size_in_bytes=int(d["size"]), split_offsets=d.get("split_offsets"),
        sort_order_id=None, spec_id=int(d["spec"]), equality_ids=None, key_metadata=None,
        **maps)
    f.spec_id = int(d["spec"])
    return f


def on_disk(location: str, prefix: str) -> list[Path]:
    """The files under the table's data and metadata folders whose name holds a write id
    starting with ``prefix`` (data and delete files; manifests and manifest lists)."""
    out = []
    for folder in ("data", "metadata"):
        base = local(location) / folder
        if not base.is_dir():
            continue
        for root, _dirs, names in os.walk(base):
            out += [Path(root) / n for n in names if prefix in n]
    return out


def referenced(table) -> set[str]:
    """Every file any snapshot of the table's current metadata names (data and delete
    files live, existing or deleted in it, manifests, manifest lists), as local paths: what
    a file of this app's must be named by to stay. Each manifest is read once, however
    many snapshots share it."""
    out: set[str] = set()
    for s in table.snapshots():
        out.add(str(local(s.manifest_list)))
        for m in s.manifests(table.io):
            if str(local(m.manifest_path)) in out:
                continue
            out.add(str(local(m.manifest_path)))
            for e in m.fetch_manifest_entry(table.io, discard_deleted=False):
                out.add(str(local(e.data_file.file_path)))
    return out


def written_by(table, snapshots: Iterable[Any]) -> set[str]:
    """The files ``snapshots`` of the table wrote: the data and delete files they added
    (the entries of their own manifests), their manifests and manifest lists, as local
    paths."""
    out = set()
    for s in snapshots:
        out.add(str(local(s.manifest_list)))
        for m in s.manifests(table.io):
            if m.added_snapshot_id != s.snapshot_id:
                continue
            out.add(str(local(m.manifest_path)))
            for e in m.fetch_manifest_entry(table.io, discard_deleted=False):
                if e.snapshot_id == s.snapshot_id:
                    out.add(str(local(e.data_file.file_path)))
    return out


def remove(paths: Iterable[Path]) -> int:
    gone = 0
    for p in paths:
        try:
            p.unlink()
            gone += 1
        except FileNotFoundError:
            pass
    return gone
