"""Apply a stream of change rows to a target table, modelled on Databricks' AUTO CDC.

    from sparkcdc import sinks
    from sparkcdc.apply import apply_changes

    target = sinks.create("postgres", {...})
    (changes.writeStream
        .foreachBatch(apply_changes(target, keys=["id"]))           # a foreachBatch function
        .option("checkpointLocation", ckpt).start())

    apply_changes(batch_df, batch_id, target, keys=["id"])           # or call it yourself

Per batch: skip it if the target already holds this batch id; drop ``update_preimage`` rows;
reduce the rest in Spark (SCD type 1: the last change per key in ``sequence_by`` order;
type 2: every change as a version, plus where to close the key's open version); collect the
reduced rows to the driver as Arrow; hand them to the sink, which writes them and the batch
id in one atomic step. See docs/sinks.md.

``apply_as_truncates`` and history tracked on some columns (``track_history_column_list``,
``track_history_except_column_list``) are planned on the driver, in Arrow
(``reduce_changes``): Spark evaluates the SQL rules into marker columns (``mark_changes``)
and the rows are collected first. The pipeline plans every batch that way.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc

from sparkcdc.core.records import META_COLUMNS
from sparkcdc.errors import ConfigError, SchemaError
from sparkcdc.sinks import SinkKind
from sparkcdc.sinks import create as create_sink
from sparkcdc.sinks.base import (
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
    Sink,
    WriteResult,
)

log = logging.getLogger("sparkcdc.apply")

DEFAULT_DELETES = "_change_type = 'delete'"
DEL_MARK, TRUNC_MARK = "__del", "__trunc"  # the SQL rules, evaluated (``mark_changes``)


@dataclass(frozen=True)
class ApplySpec:
    """How change rows become target rows. The names follow ``dlt.create_auto_cdc_flow``.

    ``apply_as_deletes`` is a SQL boolean expression over the change row. The target's columns
    are ``column_list`` (default: every column of the change rows except the metadata
    columns ``_change_type``, ``_database``, ``_table``, ``_op_ts``, ``_seq``), minus
    ``except_column_list``.
    """

    keys: tuple[str, ...]
    sequence_by: str = "_seq"
    apply_as_deletes: str = DEFAULT_DELETES
    column_list: tuple[str, ...] | None = None
    except_column_list: tuple[str, ...] = ()
    ignore_null_updates: bool = False
    stored_as_scd_type: int = 1
    apply_as_truncates: str | None = None
    track_history_column_list: tuple[str, ...] | None = None
    track_history_except_column_list: tuple[str, ...] | None = None

    def __post_init__(self):
        if not self.keys:
            raise ConfigError("apply_changes needs at least one key column",
                              fix="pass keys=['id'] (the target's primary key)")
        if self.stored_as_scd_type not in (1, 2):
            raise ConfigError(f"stored_as_scd_type must be 1 or 2, got "
                              f"{self.stored_as_scd_type!r}",
                              fix="1 keeps the latest row per key; 2 keeps every version")
        if self.ignore_null_updates and self.stored_as_scd_type == 2:
            raise ConfigError("ignore_null_updates is supported for stored_as_scd_type=1 only",
                              fix="send full rows for SCD type 2 targets")
        overlap = set(self.keys) & set(self.except_column_list)
        if overlap:
            raise ConfigError(f"key columns {sorted(overlap)} are in except_column_list",
                              fix="the target needs its key columns")
        tracking = (self.track_history_column_list is not None
                    or self.track_history_except_column_list is not None)
        if tracking and self.stored_as_scd_type != 2:
            raise ConfigError("track_history_column_list / track_history_except_column_list "
                              "choose which changes make a new version, which only SCD type "
                              "2 keeps", fix="add stored_as_scd_type=2")
        if (self.track_history_column_list is not None
                and self.track_history_except_column_list is not None):
            raise ConfigError("track_history_column_list and track_history_except_column_list "
                              "are both given",
                              fix="name the tracked columns, or the untracked ones, not both")
        if self.apply_as_truncates and self.stored_as_scd_type != 1:
            raise ConfigError("apply_as_truncates empties the target, which SCD type 2 never "
                              "does (as in Databricks' AUTO CDC)",
                              fix="use apply_as_truncates with stored_as_scd_type=1")
        if self.apply_as_truncates and self.ignore_null_updates:
            raise ConfigError("apply_as_truncates and ignore_null_updates together are not "
                              "supported", fix="send full rows, or leave one of them out")

    @property
    def in_arrow(self) -> bool:
        """Whether batches are planned on the driver in Arrow (``reduce_changes``): the
        rules only the Arrow planner has (truncates, tracked history)."""
        return bool(self.apply_as_truncates or self.track_history_column_list is not None
                    or self.track_history_except_column_list is not None)

    def tracked_columns(self, names: Sequence[str]) -> tuple[str, ...] | None:
        """The columns whose change makes a new SCD type 2 version (None: every change
        does, the default)."""
        if self.track_history_column_list is not None:
            missing = [c for c in self.track_history_column_list if c not in names]
            if missing:
                raise SchemaError(f"track_history_column_list names columns the target "
                                  f"lacks: {missing}",
                                  fix=f"the target columns are: {', '.join(names)}")
            return tuple(self.track_history_column_list)
        if self.track_history_except_column_list is not None:
            missing = [c for c in self.track_history_except_column_list if c not in names]
            if missing:
                raise SchemaError(f"track_history_except_column_list names columns the "
                                  f"target lacks: {missing}",
                                  fix=f"the target columns are: {', '.join(names)}")
            return tuple(c for c in names if c not in self.keys
                         and c not in self.track_history_except_column_list)
        return None

    def target_columns(self, available: Sequence[str]) -> list[str]:
        if self.column_list is not None:
            missing = [c for c in self.column_list if c not in available]
            if missing:
                raise SchemaError(f"column_list names columns the change rows lack: {missing}",
                                  fix=f"the change rows have: {', '.join(available)}")
            cols = list(self.column_list)
        else:
            cols = [c for c in available if c not in META_COLUMNS]
        cols = [c for c in cols if c not in self.except_column_list]
        missing = [k for k in self.keys if k not in cols]
        if missing:
            raise SchemaError(f"key columns {missing} are not among the target columns",
                              fix=f"the target columns are: {', '.join(cols)}")
        if self.sequence_by not in available:
            raise SchemaError(f"the sequence column '{self.sequence_by}' is not in the change "
                              f"rows", fix="pass sequence_by= a column that orders the changes")
        for c in (START_AT, END_AT, OP):
            if c in cols:
                raise SchemaError(f"the change rows have a column named '{c}', which the sink "
                                  f"uses itself", fix="rename it or add it to except_column_list")
        return cols


def _col(name: str):
    """A column by its exact name (dots and spaces are part of the name, not paths)."""
    from pyspark.sql import functions as F

    return F.col("`" + name.replace("`", "``") + "`")


def plan_changes(df, spec: ApplySpec):
    """The reduced change rows of one batch, as a Spark DataFrame (see ``ChangeSet``)."""
    from pyspark.sql import Window
    from pyspark.sql import functions as F

    cols = [_col(c) for c in spec.target_columns(df.columns)]
    names = spec.target_columns(df.columns)
    seq = _col(spec.sequence_by)
    if "_change_type" in df.columns:
        df = df.filter(F.col("_change_type").isNull()
                       | (F.col("_change_type") != "update_preimage"))
    df = df.withColumn("__del", F.coalesce(F.expr(spec.apply_as_deletes), F.lit(False)))
    keys = [_col(k) for k in spec.keys]
    by_key = Window.partitionBy(*keys)

    if spec.stored_as_scd_type == 2:
        ordered = by_key.orderBy(seq)
        x = (df.withColumn(END_AT, F.lead(seq).over(ordered))
               .withColumn("__first", F.min(seq).over(by_key)))
        # every change closes nothing but the first per key, which closes the target's open
        # version; every non-delete change is a version until the next change of its key
        ops = F.array_compact(F.array(F.when(seq == F.col("__first"), F.lit(CLOSE)),
                                      F.when(~F.col("__del"), F.lit(VERSION))))
        x = x.withColumn(OP, F.explode(ops))
        return x.select(
            *cols,
            F.when(F.col(OP) == VERSION, seq).alias(START_AT),
            F.when(F.col(OP) == VERSION, F.col(END_AT)).otherwise(F.col("__first"))
             .alias(END_AT),
            F.col(OP))

    newest = by_key.orderBy(seq.desc())
    x = df.withColumn("__rn", F.row_number().over(newest))
    if spec.ignore_null_updates:
        # a null means "unchanged": carry each column's last non-null value since the key's
        # last delete in this batch; with no delete before it, the target's value fills in
        running = by_key.orderBy(seq).rowsBetween(Window.unboundedPreceding, Window.currentRow)
        x = x.withColumn("__seg", F.sum(F.col("__del").cast("int")).over(running))
        seg = (Window.partitionBy(*keys, F.col("__seg")).orderBy(seq)
               .rowsBetween(Window.unboundedPreceding, Window.currentRow))
        for c in names:
            if c not in spec.keys:
                x = x.withColumn(c, F.last(_col(c), ignorenulls=True).over(seg))
        op = (F.when(F.col("__del"), F.lit(DELETE))
               .when(F.col("__seg") > 0, F.lit(UPSERT)).otherwise(F.lit(PATCH)))
    else:
        op = F.when(F.col("__del"), F.lit(DELETE)).otherwise(F.lit(UPSERT))
    if "_change_type" in df.columns:
        # the key's first change in the batch is an insert: the source did not hold the key
        # before the batch, so an in-sync target does not either (snapshot rows, new rows);
        # a hint only: the sink checks the target before it appends (ChangeSet.split_new)
        x = x.withColumn("__first", F.min_by(F.col("_change_type"), seq).over(by_key))
        new = (F.col("__first") == "insert") & (op == UPSERT)
    else:
        new = F.lit(False)
    return x.filter(F.col("__rn") == 1).select(*cols, op.alias(OP), new.alias(NEW))


def collect_changes(df, spec: ApplySpec) -> ChangeSet:
    """Plan one batch in Spark and collect the reduced rows to the driver as Arrow."""
    planned = plan_changes(df, spec)
    table = planned.toArrow()
    cols = tuple(spec.target_columns(df.columns))
    return ChangeSet(table=table, keys=tuple(spec.keys), columns=cols,
                     scd_type=spec.stored_as_scd_type)


def reducible_in_arrow(spec: ApplySpec) -> bool:
    """Whether ``reduce_changes`` can plan this spec on the driver: everything but
    ``ignore_null_updates`` (a rule other than the default delete needs its markers,
    ``mark_changes``)."""
    return not spec.ignore_null_updates


def needs_marks(spec: ApplySpec) -> bool:
    """Whether the spec has SQL rules ``mark_changes`` must evaluate before Arrow plans."""
    return spec.apply_as_deletes != DEFAULT_DELETES or bool(spec.apply_as_truncates)


def mark_changes(df, spec: ApplySpec):
    """The change rows with the spec's SQL rules evaluated into boolean columns, for the
    Arrow planner: ``__del`` (``apply_as_deletes``, when not the default) and ``__trunc``
    (``apply_as_truncates``). A null is false."""
    from pyspark.sql import functions as F

    if spec.apply_as_deletes != DEFAULT_DELETES:
        df = df.withColumn(DEL_MARK, F.coalesce(F.expr(spec.apply_as_deletes), F.lit(False)))
    if spec.apply_as_truncates:
        df = df.withColumn(TRUNC_MARK,
                           F.coalesce(F.expr(spec.apply_as_truncates), F.lit(False)))
    return df


def _deleted(table: pa.Table, spec: ApplySpec) -> pa.ChunkedArray:
    if DEL_MARK in table.column_names:
        return pc.fill_null(table[DEL_MARK], False)
    if spec.apply_as_deletes != DEFAULT_DELETES:
        raise ConfigError(f"apply_as_deletes {spec.apply_as_deletes!r} is SQL, which the "
                          "Arrow planner cannot evaluate",
                          fix="evaluate it first with mark_changes(df, spec)")
    return pc.fill_null(pc.equal(table["_change_type"], "delete"), False)


def cut_truncates(table: pa.Table, spec: ApplySpec) -> tuple[pa.Table, bool]:
    """``apply_as_truncates``: the rows after the batch's last truncate (in ``sequence_by``
    order), and whether there was one (the target is then emptied before they are
    written). The truncate rows themselves are no changes of a row."""
    if not spec.apply_as_truncates:
        return table, False
    if TRUNC_MARK not in table.column_names:
        raise ConfigError(f"apply_as_truncates {spec.apply_as_truncates!r} is SQL, which the "
                          "Arrow planner cannot evaluate",
                          fix="evaluate it first with mark_changes(df, spec)")
    marks = pc.fill_null(table[TRUNC_MARK], False)
    if not table.num_rows or not pc.any(marks).as_py():
        return table.drop_columns([TRUNC_MARK]), False
    seq = table[spec.sequence_by]
    last = pc.max(pc.filter(seq, marks))
    after = table.filter(pc.greater(seq, last)).drop_columns([TRUNC_MARK])
    return after, True


def reduce_changes(table: pa.Table, spec: ApplySpec) -> ChangeSet:
    """``plan_changes`` for change rows already on the driver, in Arrow: the same
    ``ChangeSet``, without a Spark job. SCD type 1: the last change per key in
    ``sequence_by`` order, ``__new`` where the key's first change is an insert. SCD type
    2: a version per change, or, with tracked columns, per change of a tracked column (a
    change of the others updates the open version in place: ``AMEND``). Not for
    ``ignore_null_updates`` (``reducible_in_arrow``); rules other than the default delete
    are read from their markers (``mark_changes``), and ``apply_as_truncates`` rows must
    have been cut first (``cut_truncates``).

    Rows are sorted by the sequence (stable: equal sequences keep their arrival order, as
    Spark's window does not promise, but sequences are unique per change), numbered, and
    the highest and lowest number per key pick the last change and the first kind."""
    if not reducible_in_arrow(spec):
        raise ConfigError("reduce_changes does not plan ignore_null_updates",
                          fix="use collect_changes (Spark) for this apply spec")
    names = spec.target_columns([c for c in table.column_names if c not in (DEL_MARK,
                                                                             TRUNC_MARK)])
    if TRUNC_MARK in table.column_names:
        table = table.drop_columns([TRUNC_MARK])
    if spec.stored_as_scd_type == 2:
        return _reduce_scd2(table, spec, names)
    table = table.append_column("__d", _deleted(table, spec))
    kind = table.column("_change_type")
    table = table.filter(pc.not_equal(kind, "update_preimage"))
    if table.num_rows:
        table = table.sort_by([(spec.sequence_by, "ascending")])
    idx = "__i"
    table = table.append_column(idx, pa.array(range(table.num_rows), pa.int64()))
    g = table.select([*spec.keys, idx]).group_by(list(spec.keys), use_threads=False).aggregate(
        [(idx, "max"), (idx, "min")])
    last = table.take(g.column(f"{idx}_max"))
    first_kind = table.column("_change_type").take(g.column(f"{idx}_min"))
    deleted = last.column("__d")
    op = pc.if_else(deleted, pa.scalar(DELETE), pa.scalar(UPSERT))
    new = pc.and_(pc.equal(first_kind, "insert"), pc.invert(deleted))
    out = last.select(names).append_column(OP, op).append_column(NEW, new)
    return ChangeSet(table=out, keys=tuple(spec.keys), columns=tuple(names), scd_type=1)


def _reduce_scd2(table: pa.Table, spec: ApplySpec, names: list[str]) -> ChangeSet:
    """SCD type 2 in Arrow (``reduce_changes``). Per key, in sequence order: an insert
    opens a version; an update opens one when a tracked column differs from the row
    before it (its pre-image, else the key's previous change in the batch; with neither,
    it is taken to differ), and otherwise joins the version it continues, whose values
    become its own; a delete ends the version. A key's first change ends the target's
    open version (``CLOSE`` at its sequence) or, when it continues it, updates it in
    place (``AMEND``: the values, and ``__END_AT`` if a later change of the batch ends it)."""
    seq_name = spec.sequence_by
    tracked = spec.tracked_columns(names)
    keys = list(spec.keys)
    n = table.num_rows
    table = table.append_column("__d", _deleted(table, spec)).append_column(
        "__i", pa.array(range(n), pa.int64()))
    if n:
        table = table.sort_by([(k, "ascending") for k in keys] + [(seq_name, "ascending")])
    key_vals = list(zip(*(table.column(k).to_pylist() for k in keys))) if n else []
    kinds = table.column("_change_type").to_pylist()
    seqs = table.column(seq_name).to_pylist()
    dels = table.column("__d").to_pylist()
    track_vals = (list(zip(*(table.column(c).to_pylist() for c in tracked)))
                  if tracked and n else [()] * n)
    take, ops, starts, ends = [], [], [], []

    def emit(row: int, op: str, start, end) -> None:
        take.append(row)
        ops.append(op)
        starts.append(start)
        ends.append(end)

    i = 0
    while i < n:
        j = i
        while j < n and key_vals[j] == key_vals[i]:
            j += 1
        prev = None  # the row before: (deleted, tracked values)
        cur: list | None = None  # the open run: [op, start, last row]
        first = True
        for r in range(i, j):
            if kinds[r] == "update_preimage":
                prev = (False, track_vals[r])
                continue
            if dels[r]:
                if cur is not None:
                    emit(cur[2], cur[0], cur[1], seqs[r])
                elif first:
                    emit(r, CLOSE, None, seqs[r])
                cur, first, prev = None, False, (True, track_vals[r])
                continue
            goes_on = (tracked is not None and kinds[r] != "insert" and prev is not None
                       and not prev[0] and prev[1] == track_vals[r])
            if goes_on:
                if cur is None:  # it continues the target's open version
                    cur = [AMEND, None, r]
                else:
                    cur[2] = r
            else:
                if cur is not None:
                    emit(cur[2], cur[0], cur[1], seqs[r])
                elif first:
                    emit(r, CLOSE, None, seqs[r])
                cur = [VERSION, seqs[r], r]
            first, prev = False, (False, track_vals[r])
        if cur is not None:
            emit(cur[2], cur[0], cur[1], None)
        i = j
    seq_type = table.schema.field(seq_name).type
    out = (table.take(pa.array(take, pa.int64())).select(names)
           .append_column(START_AT, pa.array(starts, seq_type))
           .append_column(END_AT, pa.array(ends, seq_type))
           .append_column(OP, pa.array(ops, pa.string())))
    return ChangeSet(table=out, keys=tuple(spec.keys), columns=tuple(names), scd_type=2)


def _as_sink(target: Sink | dict) -> Sink:
    if isinstance(target, Sink):
        return target
    if isinstance(target, dict):
        return create_sink(target)
    raise ConfigError(f"apply_changes needs a sink or a sink definition, got {type(target)!r}",
                      fix="sparkcdc.sinks.create('delta', {...}) or {'type': 'delta', ...}")


def _spec(keys, sequence_by, apply_as_deletes, column_list, except_column_list,
          ignore_null_updates, stored_as_scd_type, apply_as_truncates=None,
          track_history_column_list=None, track_history_except_column_list=None) -> ApplySpec:
    if isinstance(keys, str):
        keys = [keys]
    deletes = apply_as_deletes
    if deletes is None:
        deletes = DEFAULT_DELETES
    elif not isinstance(deletes, str):
        raise ConfigError("apply_as_deletes must be a SQL expression string",
                          fix="e.g. apply_as_deletes=\"_change_type = 'delete'\"")
    return ApplySpec(keys=tuple(keys), sequence_by=sequence_by, apply_as_deletes=deletes,
                     column_list=None if column_list is None else tuple(column_list),
                     except_column_list=tuple(except_column_list or ()),
                     ignore_null_updates=bool(ignore_null_updates),
                     stored_as_scd_type=int(stored_as_scd_type),
                     apply_as_truncates=apply_as_truncates or None,
                     track_history_column_list=_names(track_history_column_list),
                     track_history_except_column_list=_names(
                         track_history_except_column_list))


def _names(value) -> tuple[str, ...] | None:
    if value is None:
        return None
    return (value,) if isinstance(value, str) else tuple(value)


def _already_applied(sink: Sink, batch_id: int) -> WriteResult | None:
    """The skipped result when the sink already holds ``batch_id`` (a replayed batch), else
    None. Each sink checks again inside its own write; this saves planning the batch."""
    last = sink.last_batch_id()
    if last is not None and batch_id <= last:
        log.info("batch %d already applied to the %s sink (last %d): skipped",
                 batch_id, sink.type, last)
        return WriteResult(batch_id, skipped=True)
    return None


class ApplyChanges:
    """A ``foreachBatch`` function applying each micro-batch to one sink."""

    def __init__(self, target: Sink | dict, spec: ApplySpec):
        self.sink = _as_sink(target)
        self.spec = spec
        self.results: list[WriteResult] = []

    def __call__(self, df, batch_id: int) -> WriteResult:
        result = self.apply(df, batch_id)
        self.results.append(result)
        return result

    def apply(self, df, batch_id: int) -> WriteResult:
        batch_id = int(batch_id)
        skipped = _already_applied(self.sink, batch_id)
        if skipped is not None:
            return skipped
        t0 = time.monotonic()
        if self.sink.capabilities.kind is SinkKind.CHANGELOG:
            # the rows as they came: truncates and history are folded by ``materialize``
            self.spec.target_columns(df.columns)  # same checks as for merge sinks
            t1 = t0
            result = self.sink.write_changelog(df, batch_id, self.spec.keys)
        elif self.spec.in_arrow:
            # planned on the driver: the SQL rules evaluated by Spark, the rows collected
            return apply_arrow(self.sink, mark_changes(df, self.spec).toArrow(), batch_id,
                               self.spec)
        else:
            changes = collect_changes(df, self.spec)
            t1 = time.monotonic()
            result = self.sink.write(changes, batch_id)
        t2 = time.monotonic()
        log.info("batch %d -> %s sink: %s in %.2fs (planned and collected in %.2fs, "
                 "written in %.2fs)", batch_id, self.sink.type, result.counts, t2 - t0,
                 t1 - t0, t2 - t1)
        return result


def apply_arrow(sink: Sink, table: pa.Table, batch_id: int, spec: ApplySpec,
                empty_first: bool = False, replaces: tuple[KeyRange, ...] = ()) -> WriteResult:
    """One micro-batch of change rows already on the driver (``arrow-batches``), reduced in
    Arrow (``reduce_changes``) and written like ``ApplyChanges.apply`` does.
    ``empty_first``: a TRUNCATE came before these rows, so the target is emptied before
    they are written (unless it has the batch already: a replay empties nothing); so does
    a row ``apply_as_truncates`` marks (``cut_truncates``). ``replaces``: ``ChangeSet``'s."""
    batch_id = int(batch_id)
    skipped = _already_applied(sink, batch_id)
    if skipped is not None:
        return skipped
    table, truncated = cut_truncates(table, spec)
    if empty_first or truncated:
        sink.empty()
    t0 = time.monotonic()
    changes = reduce_changes(table, spec)
    if replaces:  # chunks read again: their ranges hold these rows and no other
        changes = ChangeSet(changes.table, changes.keys, changes.columns, changes.scd_type,
                            tuple(replaces))
    t1 = time.monotonic()
    result = sink.write(changes, batch_id)
    t2 = time.monotonic()
    log.info("batch %d -> %s sink: %s in %.2fs (%d change rows reduced in %.2fs, written in "
             "%.2fs)", batch_id, sink.type, result.counts, t2 - t0, table.num_rows, t1 - t0,
             t2 - t1)
    return result


def apply_changes(*args: Any, keys: Sequence[str] | str, sequence_by: str = "_seq",
                  apply_as_deletes: str | None = None,
                  column_list: Sequence[str] | None = None,
                  except_column_list: Sequence[str] | None = None,
                  ignore_null_updates: bool = False, stored_as_scd_type: int = 1,
                  apply_as_truncates: str | None = None,
                  track_history_column_list: Sequence[str] | None = None,
                  track_history_except_column_list: Sequence[str] | None = None):
    """``apply_changes(target, keys=...)`` returns a ``foreachBatch`` function;
    ``apply_changes(df, batch_id, target, keys=...)`` applies one batch now and returns a
    ``WriteResult``. ``target`` is a sink or a sink definition dict with a ``type``."""
    spec = _spec(keys, sequence_by, apply_as_deletes, column_list, except_column_list,
                 ignore_null_updates, stored_as_scd_type, apply_as_truncates,
                 track_history_column_list, track_history_except_column_list)
    if len(args) == 1:
        return ApplyChanges(args[0], spec)
    if len(args) == 3:
        df, batch_id, target = args
        return ApplyChanges(target, spec).apply(df, batch_id)
    raise ConfigError("apply_changes takes (target) or (df, batch_id, target) positionally",
                      fix="apply_changes(sink, keys=['id']) for foreachBatch")


def materialize(changelog, *, keys: Sequence[str] | str, sequence_by: str = "_seq",
                apply_as_deletes: str | None = None, column_list: Sequence[str] | None = None,
                except_column_list: Sequence[str] | None = None,
                ignore_null_updates: bool = False, stored_as_scd_type: int = 1,
                apply_as_truncates: str | None = None,
                track_history_column_list: Sequence[str] | None = None,
                track_history_except_column_list: Sequence[str] | None = None):
    """The table a whole changelog (e.g. what the ``files`` sink wrote) describes, as a Spark
    DataFrame: the latest row per live key (type 1), or every version with
    ``__START_AT``/``__END_AT`` (type 2). Truncates and tracked history are folded on the
    driver (the changelog is collected)."""
    from pyspark.sql import functions as F

    spec = _spec(keys, sequence_by, apply_as_deletes, column_list, except_column_list,
                 ignore_null_updates, stored_as_scd_type, apply_as_truncates,
                 track_history_column_list, track_history_except_column_list)
    if spec.in_arrow:
        table, _truncated = cut_truncates(mark_changes(changelog, spec).toArrow(), spec)
        changes = reduce_changes(table, spec)
        keep = (VERSION, AMEND) if spec.stored_as_scd_type == 2 else (UPSERT,)
        rows = changes.rows(*keep)
        return changelog.sparkSession.createDataFrame(rows, schema=_spark_schema(
            changelog, rows.schema))
    planned = plan_changes(changelog, spec)
    if spec.stored_as_scd_type == 2:
        return planned.filter(F.col(OP) == VERSION).drop(OP)
    # folded from an empty table, a patch is the row itself
    return planned.filter(F.col(OP).isin(UPSERT, PATCH)).drop(OP)


def _spark_schema(df, schema: pa.Schema):
    """The Spark schema of Arrow rows taken from ``df``'s columns (types as ``df`` has them;
    the SCD type 2 columns as the sequence's)."""
    from pyspark.sql.types import StructField, StructType

    fields = {f.name: f for f in df.schema.fields}
    seq = fields.get("_seq")
    out = []
    for name in schema.names:
        f = fields.get(name) or seq  # __START_AT / __END_AT: the sequence's type
        assert f is not None, name
        out.append(StructField(name, f.dataType, True))
    return StructType(out)


__all__ = [
    "META_COLUMNS",
    "ApplyChanges",
    "ApplySpec",
    "apply_arrow",
    "apply_changes",
    "collect_changes",
    "cut_truncates",
    "mark_changes",
    "materialize",
    "plan_changes",
    "reduce_changes",
]
