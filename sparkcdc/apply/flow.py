"""The flow: change rows applied to a sink batch by batch, and a whole changelog folded
into the table it describes.

``apply_changes`` (a ``foreachBatch`` function, ``ApplyChanges``, or one batch applied now)
and ``apply_arrow`` (a batch already on the driver, the pipeline's way) skip a batch the
sink already holds, have it planned (``spark_planner`` or ``arrow_planner``), and hand the
plan to the sink, which writes it with the batch id in one atomic step. ``materialize``
folds a changelog sink's output with the same planners.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Sequence
from typing import Any

import pyarrow as pa

from sparkcdc.apply.arrow_planner import cut_truncates, reduce_changes
from sparkcdc.apply.spark_planner import collect_changes, mark_changes, plan_changes
from sparkcdc.apply.spec import ApplySpec, make_spec
from sparkcdc.errors import ConfigError
from sparkcdc.sinks import SinkKind
from sparkcdc.sinks import create as create_sink
from sparkcdc.sinks.base import (
    AMEND,
    OP,
    PATCH,
    UPSERT,
    VERSION,
    ChangeSet,
    KeyRange,
    Sink,
    WriteResult,
)

log = logging.getLogger("sparkcdc.apply")


def _as_sink(target: Sink | dict) -> Sink:
    if isinstance(target, Sink):
        return target
    if isinstance(target, dict):
        return create_sink(target)
    raise ConfigError(f"apply_changes needs a sink or a sink definition, got {type(target)!r}",
                      fix="sparkcdc.sinks.create('delta', {...}) or {'type': 'delta', ...}")


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
    spec = make_spec(keys, sequence_by, apply_as_deletes, column_list, except_column_list,
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

    spec = make_spec(keys, sequence_by, apply_as_deletes, column_list, except_column_list,
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
