"""One Iceberg snapshot of data files *and position delete files*, written to the table
spec with pyiceberg's building blocks, committed once with the batch id.

Why not pyiceberg's own snapshot producers (0.12): none can commit a delete file. Every
one writes its added files through ``ManifestWriterV2``, whose ``content()`` is always
``DATA`` (a delete file in a data manifest is read as rows); ``_OverwriteFiles`` rewrites a
manifest it touches with that same data writer, so a delete manifest holding a file it
drops would come back as a data manifest, and it records only data files as deleted. Its
writers are there all the same: ``write_manifest`` (a v2 manifest), ``write_manifest_list``,
``Snapshot``, the summary collector (which counts position delete files) and the catalog's
``commit_table``. So this module puts them together as the spec says ("Manifests",
"Snapshots", "Position Delete Files"):

* the added data files in a new data manifest, the added delete files in a new delete
  manifest (``content`` 1: a ``ManifestWriterV2`` whose ``content()`` is ``DELETES``), both
  with status ADDED and the snapshot's sequence number inherited;
* every manifest of the current snapshot kept as it is, except those holding a removed file
  (compaction), whose entries are written again into one manifest per content and
  partition spec, the removed as DELETED and the others EXISTING, their sequence numbers
  kept (one manifest each, not one per manifest touched: a compaction that removes every
  file of a table written in 100 small batches would leave 200 manifests of DELETED entries
  for every reader to open until the next commit);
* the small manifests kept (under 1 MB) merged into one per content and spec when there
  are more than ``MERGE_AT`` of a kind, their entries EXISTING (Java Iceberg merges
  likewise, ``commit.manifest.min-count-to-merge``): each batch adds a manifest or two, and
  a reader plans a scan by opening every manifest of the snapshot (after 100 batches, 200 of
  them took a scan of a 200,000-row table 0.85 s to plan);
* one manifest list, one snapshot (operation ``append``, ``overwrite``, ``delete`` or
  ``replace``; the summary's totals, with ``sparkcdc.*`` keys), the ``main`` branch moved to
  it and the table properties set, in one catalog commit that requires ``main`` to still
  be at ``base``.

A commit that finds ``main`` moved (another writer committed since the batch was planned)
fails with ``CommitConflict`` and removes the manifests it wrote; nothing is retried here:
the positions a batch marked were found in the snapshot it planned from, so Spark runs the
batch again, planned anew (as the Delta sink's commit does). Position deletes need format
v2; pyiceberg 0.12 writes no v3 manifest (``write_manifest`` refuses it), so v3's deletion
vectors are not written.
"""

from __future__ import annotations

import uuid
from collections.abc import Iterable, Mapping
from typing import Any

from sparkcdc.sinks.base import log
from sparkcdc.sinks.iceberg.files import spec_id

MERGE_AT = 16  # more small manifests of one kind than this in a snapshot: merged into one
SMALL_MANIFEST = 1 << 20  # bytes: a manifest under this is merged; larger ones are kept


class CommitConflict(RuntimeError):
    """Another writer committed to the table after the batch was planned; the batch fails
    and Spark runs it again."""


def _delete_writer(format_version: int):
    from pyiceberg.manifest import ManifestContent, ManifestWriterV2

    if format_version != 2:
        raise ValueError(f"position delete files need a v2 table (this one is v{format_version})")

    class DeleteManifestWriter(ManifestWriterV2):
        """A v2 manifest of delete files (``content`` 1)."""

        def content(self) -> ManifestContent:
            return ManifestContent.DELETES

        @property
        def _meta(self) -> dict[str, str]:
            return {**super()._meta, "content": "deletes"}

    return DeleteManifestWriter


def commit(table, added: Iterable[Any], *, base: int | None, removed: Iterable[str] = (),
           properties: Mapping[str, str] | None = None,
           summary: Mapping[str, str] | None = None, replace: bool = False,
           name: uuid.UUID | None = None):
    """``added`` data and delete files (``DataFile``s) and the ``removed`` ones (their
    paths) in one snapshot of ``table`` (a pyiceberg ``Table``), with ``properties`` set,
    as the table's next snapshot after ``base`` (module docstring). ``replace``: the rows stay the same (a
    compaction). ``name``: the write id (``files.write_id``) the manifests and the manifest
    list are named by, so those of a commit killed before the catalog took it are found and
    removed as its data files are. Returns the table as committed."""
    from pyiceberg.exceptions import CommitFailedException
    from pyiceberg.manifest import (
        DataFileContent,
        ManifestContent,
        ManifestEntry,
        ManifestEntryStatus,
        write_manifest,
        write_manifest_list,
    )
    from pyiceberg.table import TableProperties
    from pyiceberg.table.refs import MAIN_BRANCH, SnapshotRefType
    from pyiceberg.table.snapshots import (
        Operation,
        Snapshot,
        SnapshotSummaryCollector,
        Summary,
        update_snapshot_summaries,
    )
    from pyiceberg.table.update import (
        AddSnapshotUpdate,
        AssertRefSnapshotId,
        AssertTableUUID,
        SetPropertiesUpdate,
        SetSnapshotRefUpdate,
    )

    meta = table.metadata
    current = meta.current_snapshot()
    if (current.snapshot_id if current else None) != base:
        raise CommitConflict(f"{table.name()}: committed by another writer since it was "
                             "planned")
    added = list(added)
    gone = set(removed)
    version = meta.format_version
    snapshot_id = meta.new_snapshot_id()
    seq = meta.next_sequence_number()
    commit_uuid = name or uuid.uuid4()
    codec = meta.properties.get(TableProperties.WRITE_AVRO_COMPRESSION,
                                TableProperties.WRITE_AVRO_COMPRESSION_DEFAULT)
    locations = table.location_provider()
    written: list[str] = []
    schema = meta.schema()
    specs = meta.specs()
    committing = False

    def writer(content, spec: int):
        path = locations.new_metadata_location(f"{commit_uuid}-m{len(written)}.avro")
        written.append(path)
        out = table.io.new_output(path)
        if content == ManifestContent.DELETES:
            return _delete_writer(version)(specs[spec], schema, out, snapshot_id, codec)
        return write_manifest(version, specs[spec], schema, out, snapshot_id, codec)

    manifests = []
    ssc = SnapshotSummaryCollector()
    try:
        groups: dict[tuple[Any, int], list[Any]] = {}
        for f in added:
            content = (ManifestContent.DATA if f.content == DataFileContent.DATA
                       else ManifestContent.DELETES)
            spec = spec_id(f, table)
            groups.setdefault((content, spec), []).append(f)
            ssc.add_file(f, schema, specs[spec])
        for (content, spec), fs in groups.items():
            with writer(content, spec) as w:
                for f in fs:
                    w.add(ManifestEntry.from_args(status=ManifestEntryStatus.ADDED,
                                                  snapshot_id=snapshot_id,
                                                  sequence_number=None,
                                                  file_sequence_number=None, data_file=f))
            manifests.append(w.to_manifest_file())
        found = set()
        kept = []
        # (content, spec) -> the entries written again: (dropped by this commit, entry)
        again: dict[tuple[Any, int], list[tuple[bool, Any]]] = {}
        for m in current.manifests(table.io) if current else []:
            live = m.has_added_files() or m.has_existing_files()
            if not gone:
                if live:
                    kept.append(m)
                continue
            entries = m.fetch_manifest_entry(table.io, discard_deleted=True)
            if not any(e.data_file.file_path in gone for e in entries):
                if live:
                    kept.append(m)
                continue
            mine = again.setdefault((m.content, m.partition_spec_id), [])
            for e in entries:
                dropped = e.data_file.file_path in gone
                mine.append((dropped, e))
                if dropped:
                    found.add(e.data_file.file_path)
                    ssc.remove_file(e.data_file, schema, specs[m.partition_spec_id])
        small: dict[tuple[Any, int], list[Any]] = {}
        for m in kept:
            if m.manifest_length < SMALL_MANIFEST:
                small.setdefault((m.content, m.partition_spec_id), []).append(m)
        for kind, ms in small.items():
            if len(ms) > MERGE_AT:
                merged = {m.manifest_path for m in ms}
                kept = [m for m in kept if m.manifest_path not in merged]
                mine = again.setdefault(kind, [])
                for m in ms:
                    mine += [(False, e) for e in
                             m.fetch_manifest_entry(table.io, discard_deleted=True)]
        for (content, spec), items in again.items():
            if not items:
                continue
            with writer(content, spec) as w:
                for dropped, e in items:
                    if dropped:
                        w.delete(e)
                    else:
                        w.existing(e)
            manifests.append(w.to_manifest_file())
        manifests += kept
        if found != gone:
            raise CommitConflict(f"{table.name()}: files to remove are not live any more: "
                                 f"{sorted(gone - found)[:3]}")
        kinds = {f.content == DataFileContent.DATA for f in added}
        op = (Operation.APPEND if kinds == {True} and not gone
              else Operation.DELETE if kinds == {False} and not gone else Operation.OVERWRITE)
        totals = update_snapshot_summaries(
            Summary(operation=op, **ssc.build(), **dict(summary or {})),
            previous_summary=current.summary if current else None)
        if replace:
            totals = Summary(operation=Operation.REPLACE, **totals.additional_properties)
        list_path = locations.new_metadata_location(f"snap-{snapshot_id}-0-{commit_uuid}.avro")
        written.append(list_path)
        with write_manifest_list(version, table.io.new_output(list_path), snapshot_id,
                                 current.snapshot_id if current else None, seq,
                                 codec) as ml:
            ml.add_manifests(manifests)
        # (pyiceberg's pydantic models take their fields' names as well as their aliases;
        # mypy reads the aliases only: hence the ignores)
        snap = Snapshot(snapshot_id=snapshot_id,  # type: ignore[call-arg]
                        parent_snapshot_id=current.snapshot_id if current else None,
                        manifest_list=list_path, sequence_number=seq, summary=totals,
                        schema_id=meta.current_schema_id)
        updates: tuple[Any, ...] = (
            AddSnapshotUpdate(snapshot=snap),
            SetSnapshotRefUpdate(snapshot_id=snapshot_id,  # type: ignore[call-arg]
                                 parent_snapshot_id=base,
                                 ref_name=MAIN_BRANCH, type=SnapshotRefType.BRANCH))
        if properties:
            updates += (SetPropertiesUpdate(updates=dict(properties)),)
        requirements = (AssertTableUUID(uuid=meta.table_uuid),
                        AssertRefSnapshotId(snapshot_id=base,  # type: ignore[call-arg]
                                            ref=MAIN_BRANCH))
        committing = True
        table._do_commit(updates, requirements)
    except CommitFailedException as e:  # the catalog refused it: nothing was committed
        _remove(table, written)
        raise CommitConflict(f"{table.name()}: {e}") from e
    except BaseException:
        if not committing:  # else the outcome is unknown: the manifests may be in use
            _remove(table, written)
        raise
    return table


def _remove(table, paths: list[str]) -> None:
    for p in paths:
        try:
            table.io.delete(p)
        except Exception as e:  # noqa: BLE001 -- a manifest left behind is an orphan
            log.debug("manifest %s of a commit that failed not removed: %s", p, e)
