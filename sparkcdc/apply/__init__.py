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

The package in four parts, each importing only those listed after it: ``flow`` (the above:
``apply_changes``, ``ApplyChanges``, ``apply_arrow``, ``materialize``), the two planners,
``spark_planner`` (``plan_changes``, ``collect_changes``, ``mark_changes``) and
``arrow_planner`` (``reduce_changes``, ``cut_truncates``), and ``spec`` (``ApplySpec``).
This face hands on their names: import them from ``sparkcdc.apply``.
"""

from __future__ import annotations

from sparkcdc.apply.arrow_planner import cut_truncates, reduce_changes, reducible_in_arrow
from sparkcdc.apply.flow import ApplyChanges, apply_arrow, apply_changes, materialize
from sparkcdc.apply.spark_planner import collect_changes, mark_changes, needs_marks, plan_changes
from sparkcdc.apply.spec import DEFAULT_DELETES, DEL_MARK, TRUNC_MARK, ApplySpec
from sparkcdc.core.records import META_COLUMNS

__all__ = [
    "DEFAULT_DELETES",
    "DEL_MARK",
    "META_COLUMNS",
    "TRUNC_MARK",
    "ApplyChanges",
    "ApplySpec",
    "apply_arrow",
    "apply_changes",
    "collect_changes",
    "cut_truncates",
    "mark_changes",
    "materialize",
    "needs_marks",
    "plan_changes",
    "reduce_changes",
    "reducible_in_arrow",
]
