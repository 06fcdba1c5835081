"""A micro-batch's changes of a table as one Spark DataFrame, for targets that Spark's own
writer writes (``Sink.takes_frames``: Spark's Delta, ``sinks/delta/spark_writer.py``).

The table's record batches stay on the executors after the batch's first stage
(``task_files``, as ``task_changes`` keeps them). From them, without collecting a row:

1. **shape** (a task per stage-one partition): each record batch converted and shaped like
   the target, as the driver's path does (``convert_rows``, ``conform``), then as the
   target stores it (``Sink.frame_rows``);
2. **shuffle** by the key columns (Spark's hash partitioning), so every change of a key,
   whichever binlog reader or chunk read it, meets in one task;
3. **reduce** (a task per partition): the partition's changes reduced to one per key in
   binlog order by the driver's own planner (``reduce_changes``): ``__op`` and ``__new``,
   as a ``ChangeSet`` holds them.

The result is a DataFrame the sink writes with Spark (``Sink.write_frame``: new rows
appended, the rest merged, the batch id in the same commit). It is exact for the same
reason as the slices' path: a key's changes are reduced together in ``_seq`` order.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator
from typing import Any

import pyarrow as pa

from sparkcdc.apply import reduce_changes
from sparkcdc.pipeline.definition import targets
from sparkcdc.pipeline.definition.conversions import convert_rows
from sparkcdc.pipeline.definition.flink_keys import SourceExtras
from sparkcdc.pipeline.run.schema.in_stream import conform
from sparkcdc.pipeline.run.task_changes import ChangePlan
from sparkcdc.pipeline.run.task_files import CHANGES
from sparkcdc.sinks.base import NEW
from sparkcdc.spark.arrow_batches import from_ipc, spark_arrow_schema


def reduced_frame(staged: Any, plan: ChangePlan, sink_type: str, options: dict[str, str],
                  extras: SourceExtras | None, partitions: int) -> Any:
    """The DataFrame of ``plan``'s table's changes in the batch, one per key (module
    docstring); ``staged``: the batch's first stage, whose ``changes`` rows hold the
    table's record batches."""
    from pyspark.sql import functions as F
    from pyspark.sql.pandas.types import from_arrow_schema

    spark = staged.sparkSession
    sink = _sink(plan, sink_type, options)
    shaped = sink.frame_rows(conform(plan.rows_schema.empty_table(), plan.rows_schema))
    planned = reduced_schema(shaped.schema, plan)
    shaped_out = spark_arrow_schema(shaped.schema, spark)
    planned_out = spark_arrow_schema(planned, spark)

    def shape(batches: Iterable[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
        target = _sink(plan, sink_type, options)
        for b in batches:
            for ipc in b.column("payload").to_pylist():
                rows = conform(convert_rows(from_ipc(ipc).replace_schema_metadata(None),
                                            plan.schema, extras), plan.rows_schema)
                yield from target.frame_rows(rows).cast(shaped_out).to_batches()

    def reduce(batches: Iterable[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
        got = [pa.Table.from_batches([b]) for b in batches if b.num_rows]
        if not got:
            return
        rows = pa.concat_tables(got, promote_options="permissive")
        yield from with_new(reduce_changes(rows, plan.spec).table).select(
            planned_out.names).cast(planned_out).to_batches()

    rows = (staged.filter((F.col("kind") == CHANGES) & (F.col("tbl") == plan.table))
            .select("payload")
            .mapInArrow(shape, from_arrow_schema(shaped_out, prefer_timestamp_ntz=True)))
    return (rows.repartition(max(1, partitions), *[F.col(k) for k in plan.keys])
            .mapInArrow(reduce, from_arrow_schema(planned_out, prefer_timestamp_ntz=True)))


def reduced_schema(shaped: pa.Schema, plan: ChangePlan) -> pa.Schema:
    """The planned rows' columns: the target's, then ``__op`` and ``__new``."""
    return with_new(reduce_changes(shaped.empty_table(), plan.spec).table).schema


def with_new(t: pa.Table) -> pa.Table:
    """``t`` with ``__new`` (false where the planner left it out), so every partition's
    rows have one schema."""
    if NEW in t.column_names:
        return t
    return t.append_column(pa.field(NEW, pa.bool_()), pa.array([False] * t.num_rows,
                                                                 pa.bool_()))


def _sink(plan: ChangePlan, sink_type: str, options: dict[str, str]) -> Any:
    """The table's first target's sink (a fan-out's targets store rows alike)."""
    w = plan.writes[0]
    return targets.create_sink(sink_type, {**options, **dict(w.creation)}, w.target,
                               w.app_id)

