"""The shape of a table's rows as its target takes them: the Arrow schema of the rows a
micro-batch writes, a table's rows through its transform, and the target's columns changed
for a new schema (``column_evolution.evolve_target``)."""

from __future__ import annotations

from typing import Any

import pyarrow as pa

from sparkcdc.apply import DEFAULT_DELETES, DEL_MARK, TRUNC_MARK
from sparkcdc.core.schema import TableSchema
from sparkcdc.errors import ConfigError
from sparkcdc.pipeline.definition import conversions
from sparkcdc.pipeline.definition.routing import META, Shaper, shaper_for
from sparkcdc.pipeline.run.checkpoint import TableState
from sparkcdc.pipeline.run.life import RunLife
from sparkcdc.pipeline.run.schema import diff as sc
from sparkcdc.pipeline.run.schema.behavior import evolve_target
from sparkcdc.pipeline.run.schema.in_stream import target_arrow_schema
from sparkcdc.pipeline.run.state import RunState
from sparkcdc.pipeline.run.table_run import TableRun
from sparkcdc.spark.arrow_batches import spark_arrow_schema


class Shapes:
    """Rows shaped like their targets, for the parts that write or evolve them."""

    def __init__(self, state: RunState, life: RunLife):
        self.state = state
        self.life = life

    def rows_schema(self, st: TableState, shaper: Shaper) -> pa.Schema:
        """The Arrow schema of the table's rows as written: the target's columns, the
        metadata columns, and the markers of its AUTO CDC rules (``mark_changes``)."""
        schema = target_arrow_schema(st.columns or [], self.life.spark)
        spec = shaper.spec(("_",))
        if spec.apply_as_deletes != DEFAULT_DELETES:
            schema = schema.append(pa.field(DEL_MARK, pa.bool_()))
        if spec.apply_as_truncates:
            schema = schema.append(pa.field(TRUNC_MARK, pa.bool_()))
        return schema

    def arrow_path(self, st: TableState, schema: TableSchema, shaper: Shaper) -> pa.Schema:
        """The Arrow schema of the target's rows: a table's micro-batches skip Spark's rows
        (``arrow-batches``: decoded and planned on the driver, see spark/arrow_batches.py).
        For a merge sink everything the Spark plan would do to the rows is the plan
        ``reduce_changes`` does in Arrow; a changelog sink appends the rows with Spark's
        writer. Shaping them like the target (a column kept for a dropped one, a type
        kept) is ``stream_schema.conform``, and a transform runs on each batch's rows of
        the table (``transformed``)."""
        from pyspark.sql.pandas.types import from_arrow_schema

        from sparkcdc.spark.rows import output_schema

        spark = self.life.spark
        extras = self.state.defn.source.extras
        source = output_schema(conversions.arrow_schema(schema, extras))
        spark_schema = from_arrow_schema(source, prefer_timestamp_ntz=True)
        if shaper.active:  # the transform's own columns (checked here once)
            spark_schema = shaper.apply(spark.createDataFrame([], spark_schema)).schema
        data = [f.jsonValue() for f in spark_schema.fields
                if f.name not in META and f.name not in (DEL_MARK, TRUNC_MARK)]
        if st.columns is None:
            st.columns = data
        keys = shaper.keys(schema.primary_key)
        missing = [k for k in keys if k not in {c["name"] for c in data}]
        if missing:
            raise ConfigError(f"key column(s) {missing} of {st.table} are not in its rows "
                              f"after the transform",
                              fix="keep the key in the projection, or set primary-keys in the "
                                  "table's transform")
        shaper.spec(tuple(keys)).tracked_columns([c["name"] for c in data])  # names checked
        return self.rows_schema(st, shaper)

    def transformed(self, run: TableRun, rows: pa.Table) -> pa.Table:
        """A table's change rows through its transform (projection, filter: Spark SQL, so
        the same expressions as a stream of its own), on the driver: a local DataFrame of
        the batch's rows, planned and collected back as Arrow. Flink's source conversions
        (``conversions.py``) come first."""
        rows = conversions.convert_rows(rows, run.schema, self.state.defn.source.extras)
        if not run.shaper.active or not rows.num_rows:
            return rows
        rows = rows.cast(spark_arrow_schema(_plain_schema(rows.schema), self.life.spark))
        return run.shaper.apply(self.local_frame(rows), run.keys).toArrow()

    def local_frame(self, rows: pa.Table) -> Any:
        """Arrow rows on the driver as a Spark DataFrame (naive timestamps stay DATETIME)."""
        from pyspark.sql.pandas.types import from_arrow_schema

        return self.life.spark.createDataFrame(
            rows, schema=from_arrow_schema(rows.schema, prefer_timestamp_ntz=True))

    def evolve_columns(self, st: TableState, old: TableSchema, new: TableSchema,
                       d: sc.Diff, sink: Any, behavior: str, statements: Any = ()) -> list:
        """Change the target as ``behavior`` says; the target's columns afterwards
        (``column_evolution.evolve_target``)."""
        defn = self.state.defn
        t = shaper_for(defn, st.table).transform
        transformed = t is not None and t.shapes_rows
        return evolve_target(st.table, st.target, st.columns, new, d, sink, behavior,
                             transformed, defn.source.extras, tuple(statements))


def _plain_schema(schema: pa.Schema) -> pa.Schema:
    """An Arrow schema as the source builds it, for ``spark_arrow_schema`` (no metadata)."""
    return schema.remove_metadata() if schema.metadata else schema
