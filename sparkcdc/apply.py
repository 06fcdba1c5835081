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
from sparkcdc.sinks import create as create_sink
from sparkcdc.sinks.base import (
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
    Sink,
    WriteResult,
)

log = logging.getLogger("sparkcdc.apply")

DEFAULT_DELETES = "_change_type = 'delete'"


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
    """Whether ``reduce_changes`` can plan this spec on the driver: SCD type 1 with the
    default delete rule and full rows (the pipeline's own case). Others plan in Spark."""
    return (spec.stored_as_scd_type == 1 and not spec.ignore_null_updates
            and spec.apply_as_deletes == DEFAULT_DELETES)


def reduce_changes(table: pa.Table, spec: ApplySpec) -> ChangeSet:
    """``plan_changes`` for change rows already on the driver, in Arrow: the same
    ``ChangeSet`` (last change per key in ``sequence_by`` order, ``__new`` where the key's
    first change is an insert), without a Spark job. Only for ``reducible_in_arrow`` specs.

    Rows are sorted by the sequence (stable: equal sequences keep their arrival order, as
    Spark's window does not promise, but sequences are unique per change), numbered, and
    the highest and lowest number per key pick the last change and the first kind."""
    if not reducible_in_arrow(spec):
        raise ConfigError("reduce_changes plans SCD type 1 with the default deletes only",
                          fix="use collect_changes (Spark) for this apply spec")
    names = spec.target_columns(table.column_names)
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
    deleted = pc.equal(last.column("_change_type"), "delete")
    op = pc.if_else(deleted, pa.scalar(DELETE), pa.scalar(UPSERT))
    new = pc.and_(pc.equal(first_kind, "insert"), pc.invert(deleted))
    out = last.select(names).append_column(OP, op).append_column(NEW, new)
    return ChangeSet(table=out, keys=tuple(spec.keys), columns=tuple(names), scd_type=1)


def _as_sink(target: Sink | dict) -> Sink:
    if isinstance(target, Sink):
        return target
    if isinstance(target, dict):
        return create_sink(target)
    raise ConfigError(f"apply_changes needs a sink or a sink definition, got {type(target)!r}",
                      fix="sparkcdc.sinks.create('delta', {...}) or {'type': 'delta', ...}")


def _spec(keys, sequence_by, apply_as_deletes, column_list, except_column_list,
          ignore_null_updates, stored_as_scd_type) -> ApplySpec:
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
                     stored_as_scd_type=int(stored_as_scd_type))


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
        if self.sink.kind == "changelog":
            self.spec.target_columns(df.columns)  # same checks as for merge sinks
            t1 = t0
            result = self.sink.write_changelog(df, batch_id, self.spec.keys)
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
                empty_first: bool = False) -> WriteResult:
    """One micro-batch of change rows already on the driver (``arrow-batches``), reduced in
    Arrow (``reduce_changes``) and written like ``ApplyChanges.apply`` does.
    ``empty_first``: a TRUNCATE came before these rows, so the target is emptied before
    they are written (unless it has the batch already: a replay empties nothing)."""
    batch_id = int(batch_id)
    skipped = _already_applied(sink, batch_id)
    if skipped is not None:
        return skipped
    if empty_first:
        sink.empty()
    t0 = time.monotonic()
    changes = reduce_changes(table, spec)
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
                  ignore_null_updates: bool = False, stored_as_scd_type: int = 1):
    """``apply_changes(target, keys=...)`` returns a ``foreachBatch`` function;
    ``apply_changes(df, batch_id, target, keys=...)`` applies one batch now and returns a
    ``WriteResult``. ``target`` is a sink or a sink definition dict with a ``type``."""
    spec = _spec(keys, sequence_by, apply_as_deletes, column_list, except_column_list,
                 ignore_null_updates, stored_as_scd_type)
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
                ignore_null_updates: bool = False, stored_as_scd_type: int = 1):
    """The table a whole changelog (e.g. what the ``files`` sink wrote) describes, as a Spark
    DataFrame: the latest row per live key (type 1), or every version with
    ``__START_AT``/``__END_AT`` (type 2)."""
    from pyspark.sql import functions as F

    spec = _spec(keys, sequence_by, apply_as_deletes, column_list, except_column_list,
                 ignore_null_updates, stored_as_scd_type)
    planned = plan_changes(changelog, spec)
    if spec.stored_as_scd_type == 2:
        return planned.filter(F.col(OP) == VERSION).drop(OP)
    # folded from an empty table, a patch is the row itself
    return planned.filter(F.col(OP).isin(UPSERT, PATCH)).drop(OP)


__all__ = [
    "META_COLUMNS",
    "ApplyChanges",
    "ApplySpec",
    "apply_arrow",
    "apply_changes",
    "collect_changes",
    "materialize",
    "plan_changes",
    "reduce_changes",
]
