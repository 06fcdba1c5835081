"""Snapshot rows written by the tasks that read them: no row through the driver.

A micro-batch of the pipeline's stream is a DataFrame of Arrow record batches (one per row,
``_batch``), each of one table: the chunks the batch reads and its binlog window. Instead of
collecting them all to the driver, the batch runs ``write_snapshot_files`` over them in the
tasks that hold them (``mapInArrow``: no shuffle). A record batch of snapshot rows (every
row read by a chunk, ``_op_ts`` null) of a table with a ``FilePlan`` is planned there as the
driver would plan it (``reduce_changes``), and when every row is new to each of the table's
targets (``Sink.new_rows``: the target's file statistics show no stored row in the rows'
key range) the task writes them as files of each target (``Sink.write_files``) and sends
the driver one small row per file. Everything else (the window's changes, schema events,
rows a target may hold already) comes back as it was, for the driver's own path.

Why this is exact. A batch's chunk rows and its window's changes name different keys: the
window passes a change only for keys of chunks finished before it, and the chunks of this
batch are finished at its end (docs/algorithm.md). A chunk read again (a re-read, the keys
already in the target) is seldom new, and one that replaces its range (``run/replaces.py``)
is never planned here: a file of new rows cannot delete the range's other rows. So the files and the
driver's merge of the same table never hold one key twice, and their order does not
matter; the driver commits the files first (``commit_files``), then writes the rest.

The batch id stays exactly-once over two commits: the files' commit records the batch as
app transaction ``<app id>#files`` (a run of the batch after it commits no file again) and,
when the table has nothing else in the batch, the table's own app id too; otherwise the
driver's write of the rest records that, as always.
"""

from __future__ import annotations

import json
import os
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass, field
from functools import partial
from itertools import pairwise
from typing import Any, Protocol

import pyarrow as pa
import pyarrow.compute as pc

from sparkcdc.apply import DEFAULT_DELETES, ApplySpec, reduce_changes
from sparkcdc.core.schema import TableSchema
from sparkcdc.pipeline.definition import targets
from sparkcdc.pipeline.definition.conversions import convert_rows
from sparkcdc.pipeline.definition.flink_keys import SourceExtras
from sparkcdc.pipeline.run.schema.in_stream import conform
from sparkcdc.spark.arrow_batches import from_ipc, to_ipc
from sparkcdc.spark.read import PROFILE_ENV, profiled
from sparkcdc.spark.rows import batch_event
from sparkcdc.spark.task_cpu import accounted

OUT_SCHEMA = ("kind string, tbl string, target string, ord long, part int, job int, "
              "slice int, payload binary")
FILES, ROWS, CHANGES, NAMES = "files", "rows", "changes", "names"
# the one-job batch's (``task_changes``): a piece of a key slice's changes, going to the
# write task ``part``; a slice's outcome, coming back from it
PIECES, OUTCOMES = "pieces", "outcomes"


class Router(Protocol):
    """How the batch's first stage cuts the change rows of the tables whose targets take
    changes into the pieces of their key slices (``task_changes.Router``)."""

    tables: frozenset[str]
    tasks: int  # the write tasks, the partitions after the shuffle

    def pieces(self, table: str, rows: pa.Table) -> Iterator[tuple[int, int, int, bytes]]:
        """``(write task, job, slice, rows as IPC)`` for each piece of ``rows``."""
        ...


@dataclass(frozen=True)
class TargetWrite:
    """One target of a table in this batch: where, under which app id, its batch id."""

    target: str
    app_id: str
    batch_id: int
    creation: tuple[tuple[str, str], ...] = ()  # options a new target is created with


@dataclass(frozen=True)
class FilePlan:
    """A table whose snapshot rows the tasks of this batch may write as files."""

    table: str
    schema: TableSchema  # as the source reads it (for the conversions)
    rows_schema: pa.Schema  # the target's rows (stream_schema.conform)
    spec: ApplySpec
    writes: tuple[TargetWrite, ...]


def plannable(spec: ApplySpec) -> bool:
    """Whether ``spec`` plans snapshot rows as plain upserts (what files can hold)."""
    return (spec.stored_as_scd_type == 1 and spec.apply_as_deletes == DEFAULT_DELETES
            and spec.apply_as_truncates is None and not spec.ignore_null_updates)


def files_row(table: str, target: str, files: list[dict[str, Any]]) -> dict[str, Any]:
    return {"kind": FILES, "tbl": table, "target": target, "ord": None,
            "payload": json.dumps(files).encode()}


def write_snapshot_files(batches: Iterable[pa.RecordBatch], plans: dict[str, FilePlan],
                         sink_type: str, options: dict[str, str],
                         extras: SourceExtras | None,
                         change_tables: frozenset[str] = frozenset(),
                         router: Router | None = None) -> Iterator[pa.RecordBatch]:
    """In a task: each of the task's record batches either written as files (a ``files``
    row per target), or cut into the pieces of its table's key slices (``router``: a
    ``pieces`` row each, for the write task its ``part`` names, and one ``changes`` row a
    table saying the task met its rows), or kept for the tasks that write changes (a
    ``changes`` row: rows of one of ``change_tables``, ``task_frames``), or handed back as
    it came (a ``rows`` row). Handed-back and kept rows carry their place in the batch
    (``ord``: the partition, then the order in it), which the driver's path keeps. With
    tables to keep or route, a handed-back batch also names the ones it holds rows or an
    event of (a ``names`` row each): such a table takes the driver's path whole, and the
    driver learns which without decoding what came back twice. With a ``router`` a
    record batch of several tables is cut by table first, and every row out names the
    write task it goes to (``part``)."""
    prof_dir = os.environ.get(PROFILE_ENV)
    if prof_dir:  # where a task's writing time goes (docs/benchmarks.md)
        yield from profiled(prof_dir, _write_snapshot_files(
            batches, plans, sink_type, options, extras, change_tables, router), "files")
    else:
        yield from accounted(_write_snapshot_files(batches, plans, sink_type, options, extras,
                                                   change_tables, router), "first-stage")


def _write_snapshot_files(batches: Iterable[pa.RecordBatch], plans: dict[str, FilePlan],
                          sink_type: str, options: dict[str, str],
                          extras: SourceExtras | None, change_tables: frozenset[str],
                          router: Router | None) -> Iterator[pa.RecordBatch]:
    from pyspark import TaskContext

    ctx = TaskContext.get()
    part = ctx.partitionId() if ctx is not None else 0
    to = None if router is None else part % router.tasks  # where the rest goes
    routed = frozenset() if router is None else router.tables
    watched = change_tables | routed
    met: set[str] = set()  # the routed tables this task met rows of
    seen = 0
    sinks: dict[tuple[str, str], Any] = {}

    def sink_of(w: TargetWrite):
        key = (w.target, w.app_id)
        if key not in sinks:
            sinks[key] = targets.create_sink(sink_type, {**options, **dict(w.creation)},
                                             w.target, w.app_id)
            sinks[key].pin()  # read once per task: nothing commits while the tasks run
        return sinks[key]

    # the rows planned as files, per (table, target), written when they reach FILE_ROWS
    # and at the task's end: one file per table and task for a batch, not one per chunk
    pending: dict[tuple[str, str], _Pending] = {}

    def flush(key: tuple[str, str]) -> dict[str, Any]:
        p = pending.pop(key)
        return files_row(key[0], key[1], p.write()) | {"part": to}

    try:
        for b in batches:
            out: list[dict[str, Any]] = []
            for ipc in b.column("_batch").to_pylist():
                for t, name, raw in _by_table(from_ipc(ipc), ipc, routed):
                    plan = plans.get(name) if name is not None and _snapshot_rows(t) else None
                    todo = _as_files(t, plan, sink_of, extras) if plan is not None else None
                    if todo is not None and plan is not None:
                        for w, sink, new in todo:
                            key = (plan.table, w.target)
                            p = pending.setdefault(key, _Pending(sink, w.batch_id,
                                                                 plan.spec.keys))
                            if new is not None:
                                p.add(new)
                            if p.rows >= FILE_ROWS:
                                out.append(flush(key))
                        continue
                    if router is not None and name in routed:
                        pieces = _routed(router, name, t)
                        if pieces is not None:
                            out.extend({"kind": PIECES, "part": p, "job": j, "slice": s,
                                        "payload": data}
                                       for p, j, s, data in pieces)
                            if name not in met:
                                met.add(name)
                                out.append({"kind": CHANGES, "tbl": name, "part": to})
                            continue
                    ord_ = (part << 32) | seen
                    seen += 1
                    if name in change_tables:
                        out.append({"kind": CHANGES, "tbl": name, "ord": ord_, "payload": raw()})
                    else:
                        out.append({"kind": ROWS, "ord": ord_, "part": to, "payload": raw()})
                        out.extend({"kind": NAMES, "tbl": n, "part": to}
                                   for n in _kept_in(t, watched))
            if out:
                yield pa.RecordBatch.from_pylist(out, schema=OUT_ARROW)
        if pending:
            yield pa.RecordBatch.from_pylist([flush(k) for k in sorted(pending)], schema=OUT_ARROW)
    finally:
        for s in sinks.values():
            s.close()


def _by_table(t: pa.Table, ipc: bytes, routed: frozenset[str]
              ) -> Iterator[tuple[pa.Table, str | None, Callable[[], bytes]]]:
    """A record batch as ``(rows, its one table or None, its IPC bytes when asked)``: whole,
    or cut by table when it holds rows of several and one of them is ``routed`` (a
    window over tables of one schema shares record batches; whole, such a batch would
    send its routed tables down the driver's path)."""
    names = _tables_in(t)
    if len(names) <= 1 or not routed.intersection(names):
        yield t, names[0] if len(names) == 1 else None, lambda: ipc
        return
    full = pc.binary_join_element_wise(t["_database"], t["_table"], ".")
    for name in sorted(names):
        part = t.filter(pc.equal(full, name))
        yield part, name, partial(_ipc_of, part)


def _ipc_of(t: pa.Table) -> bytes:
    return bytes(to_ipc(t).to_pybytes())


# what a change row's conversion to its target's shape may raise when its record batch
# is not of the shape the table's plan knows (a schema change in the batch, met before
# its event): the rows are handed back and the table takes the driver's path
_NOT_OF_PLAN = (pa.ArrowException, KeyError, ValueError, TypeError)


def _routed(router: Router, name: str, t: pa.Table) -> list[tuple[int, int, int, bytes]] | None:
    """``t``'s pieces (``Router.pieces``), or None when its rows do not convert as the
    table's plan says."""
    try:
        return list(router.pieces(name, t))
    except _NOT_OF_PLAN:
        return None


# rows of one table a task gathers before it writes them as one file (about 100-200 MB of
# Parquet for rows of ten-odd columns): a batch's chunks of a table become one file per
# task, so a large table is not thousands of chunk-sized files that every later batch of
# changes must open (docs/sinks.md, "Rows from the tasks")
FILE_ROWS = 1_000_000


@dataclass
class _Pending:
    """A task's rows of one table for one target, planned as files, not written yet."""

    sink: Any
    batch_id: int
    keys: tuple[str, ...]
    parts: list[pa.Table] = field(default_factory=list)
    rows: int = 0

    def add(self, rows: pa.Table) -> None:
        self.parts.append(rows)
        self.rows += rows.num_rows

    def write(self) -> list[dict[str, Any]]:
        """The rows as files, sorted by key (chunks come in any order; sorted, the files'
        and row groups' key statistics are tight, which the batches of changes prune by);
        no file when the target had the batch already (nothing was added)."""
        if not self.parts:
            return []
        keys = [k for k in self.keys if k in self.parts[0].column_names]
        if len(self.parts) == 1:
            rows = self.parts[0]
        elif keys and (ordered := _ordered_parts(self.parts, keys[0])) is not None:
            rows = pa.concat_tables(ordered)
        else:
            rows = pa.concat_tables(self.parts)
            if keys:
                rows = rows.sort_by([(k, "ascending") for k in keys])
        return list(self.sink.write_files(rows, self.batch_id))


def _ordered_parts(parts: list[pa.Table], key: str) -> list[pa.Table] | None:
    """The parts in key order when each is a chunk's rows (sorted by ``key`` already,
    ``rows.in_key_order``) and their ranges do not overlap, as chunks' do not: put in order
    by their first keys, they are sorted whole without sorting (and taking) every row
    again. None when that does not hold (then the rows are sorted)."""
    try:
        spans = []
        for p in parts:
            col = p.column(key)
            if not p.num_rows or col.null_count:
                return None
            if p.num_rows > 1 and pc.all(pc.less(col[:-1], col[1:])).as_py() is not True:
                return None
            spans.append((col[0].as_py(), col[-1].as_py(), p))
        spans.sort(key=lambda x: x[0])
    except (pa.ArrowNotImplementedError, pa.ArrowInvalid, TypeError):
        return None
    if any(a[1] >= b[0] for a, b in pairwise(spans)):
        return None
    return [p for _lo, _hi, p in spans]


OUT_ARROW = pa.schema([("kind", pa.string()), ("tbl", pa.string()), ("target", pa.string()),
                       ("ord", pa.int64()), ("part", pa.int32()), ("job", pa.int32()),
                       ("slice", pa.int32()), ("payload", pa.binary())])


def _tables_in(t: pa.Table) -> list[str]:
    """The tables a record batch holds rows of (``db.table``), in no order."""
    if not t.num_rows or "_database" not in t.column_names:
        return []
    db, tbl = t["_database"], t["_table"]
    if (db.null_count == 0 and tbl.null_count == 0  # one table (a chunk's, most windows'):
            and pc.all(pc.equal(db, db[0])).as_py() and pc.all(pc.equal(tbl, tbl[0])).as_py()):
        return [f"{db[0].as_py()}.{tbl[0].as_py()}"]  # compared, not hashed
    return pc.unique(pc.binary_join_element_wise(db, tbl, ".")).to_pylist()


def _kept_in(t: pa.Table, change_tables: frozenset[str]) -> list[str]:
    """Those of ``change_tables`` a handed-back record batch holds rows of, or is the
    event of."""
    if not change_tables:
        return []
    ev = batch_event(t.schema) if not t.num_rows else None
    names = [str(ev.table_id)] if ev is not None else _tables_in(t)
    return [n for n in names if n in change_tables]


def _snapshot_rows(t: pa.Table) -> bool:
    """Rows a chunk read: no commit time (``_op_ts`` is a change's)."""
    return (t.num_rows > 0 and "_op_ts" in t.column_names
            and t.column("_op_ts").null_count == t.num_rows)


def _as_files(t: pa.Table, plan: FilePlan, sink_of,
              extras: SourceExtras | None) -> list[tuple[TargetWrite, Any, pa.Table | None]] | None:
    """The table's rows planned as files of each of its targets, when every row is new to
    every one of them: per target its write, its sink and the rows (None: the target has
    the batch already); None (nothing planned) otherwise."""
    rows = conform(convert_rows(t.replace_schema_metadata(None), plan.schema, extras),
                   plan.rows_schema)
    changes = reduce_changes(rows, plan.spec)
    todo: list[tuple[TargetWrite, Any, pa.Table | None]] = []
    for w in plan.writes:
        sink = sink_of(w)
        last = sink.last_batch_id()
        if last is not None and w.batch_id <= last:
            todo.append((w, sink, None))  # the target has the batch: nothing to write
            continue
        new = sink.new_rows(changes)
        if new is None:
            return None
        todo.append((w, sink, new))
    return todo


@dataclass
class TaskOutput:
    """What the tasks of a batch sent the driver: per (table, target) the files written,
    the record batches handed back (IPC, by their place in the batch), for the driver's
    own path, the tables whose change rows the tasks kept or routed (``changes`` rows,
    whose payloads are not collected), those of them that something handed back names
    (``names`` rows: they take the driver's path whole), and in a batch of one job what
    each key slice's task wrote (``outcomes``)."""

    files: dict[tuple[str, str], list[dict[str, Any]]]
    rows: dict[int, bytes]
    kept: set[str]
    named: set[str] = field(default_factory=set)
    file_bytes: int = 0  # what the files' descriptions cost to send
    outcomes: list[dict[str, Any]] = field(default_factory=list)  # the slices' (one job)

    @property
    def evented(self) -> set[str]:
        """The kept tables something handed back names: they take the driver's path whole
        (their kept rows are collected after all)."""
        return self.kept & self.named

    @classmethod
    def of(cls, collected: Iterable[Any]) -> TaskOutput:
        out = cls({}, {}, set())
        out.add(collected)
        return out

    def add(self, collected: Iterable[Any]) -> None:
        for r in collected:
            if r["kind"] == FILES:
                self.file_bytes += len(r["payload"])
                self.files.setdefault((r["tbl"], r["target"]), []).extend(
                    json.loads(r["payload"]))
            elif r["kind"] == CHANGES and r["payload"] is None:
                self.kept.add(r["tbl"])
            elif r["kind"] == NAMES:
                self.named.add(r["tbl"])
            elif r["kind"] == OUTCOMES:
                self.outcomes.append(json.loads(r["payload"]))
            elif r["kind"] == ROWS:
                self.rows[int(r["ord"])] = bytes(r["payload"])
            else:
                raise ValueError(f"a task sent the driver a row of kind {r['kind']!r}")

    def handed_back(self) -> pa.Table:
        """The handed-back record batches as a collected micro-batch (``_batch``), in the
        batch's order."""
        return pa.table({"_batch": pa.array([self.rows[k] for k in sorted(self.rows)],
                                            pa.binary())})


def hand_back(batches: Iterable[pa.RecordBatch], tables: frozenset[str]
              ) -> Iterator[pa.RecordBatch]:
    """In a task, when a batch is read again for ``tables`` (their batch carried a schema
    change the first reading met only after it had cut their rows into slices): their
    record batches and events handed back as they came (a record batch of several tables
    cut to theirs), each in its place, and nothing else."""
    from pyspark import TaskContext

    ctx = TaskContext.get()
    part = ctx.partitionId() if ctx is not None else 0
    seen = 0
    for b in batches:
        out: list[dict[str, Any]] = []
        for ipc in b.column("_batch").to_pylist():
            t = from_ipc(ipc)
            if not _kept_in(t, tables):
                continue
            for _rows, name, raw in _by_table(t, ipc, tables):
                if name is not None and name not in tables:
                    continue
                out.append({"kind": ROWS, "ord": (part << 32) | seen, "payload": raw()})
                seen += 1
        if out:
            yield pa.RecordBatch.from_pylist(out, schema=OUT_ARROW)
