"""One batch of change rows planned in Spark: reduced per key with window functions into
the rows a sink writes (``plan_changes``), and collected to the driver as Arrow
(``collect_changes``).

``ApplyChanges`` and ``materialize`` plan with it unless the spec has rules only the Arrow
planner has (``ApplySpec.in_arrow``); it alone plans ``ignore_null_updates``. It also
evaluates the spec's SQL rules into marker columns (``mark_changes``) for the Arrow planner,
which has no SQL. pyspark is imported inside the functions: a driver that plans in Arrow
only never loads it here.
"""

from __future__ import annotations

from sparkcdc.apply.spec import DEFAULT_DELETES, DEL_MARK, TRUNC_MARK, ApplySpec
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
)


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
