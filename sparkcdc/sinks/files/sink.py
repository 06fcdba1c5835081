"""A changelog on files: every batch's change rows, appended with Spark's own writers.

Each batch lands in its own directory ``<path>/sparkcdc_batch=<id>``, written by Spark's
file committer (files appear only at job commit, then ``_SUCCESS``). A batch whose directory
has ``_SUCCESS`` is applied; a replay skips it, and a crashed attempt (no ``_SUCCESS``) is
overwritten. Reading ``<path>`` with Spark gives the changelog with a ``sparkcdc_batch``
column; ``sparkcdc.apply.materialize`` folds it into the table it describes.

JSON cannot say its own types, so the first batch also writes the Spark schema as JSON text
to ``<path>/_sparkcdc_schema`` (a hidden directory for Spark's readers).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import pyarrow as pa

from sparkcdc.sinks.base import Sink, WriteResult, log
from sparkcdc.sinks.capabilities import Capabilities
from sparkcdc.sinks.evolution import ChangeKind
from sparkcdc.sinks.files import config
from sparkcdc.sinks.files.config import FilesConfig
from sparkcdc.sinks.kinds import SinkKind, SinkType

BATCH_COLUMN = "sparkcdc_batch"
# Spark's JSON defaults keep milliseconds only; CDC timestamps carry microseconds
JSON_TIME_FORMATS = {"timestampFormat": "yyyy-MM-dd'T'HH:mm:ss.SSSSSSXXX",
                     "timestampNTZFormat": "yyyy-MM-dd'T'HH:mm:ss.SSSSSS"}


def _spark():
    from pyspark.sql import SparkSession

    s = SparkSession.getActiveSession()
    return s if s is not None else SparkSession.builder.getOrCreate()


class FilesSink(Sink):
    type = SinkType.FILES
    capabilities = Capabilities(
        kind=SinkKind.CHANGELOG, writer="Spark's writer",
        # a changelog takes each batch's shape (new columns just appear) but never
        # rewrites what it wrote; nor can it be emptied
        schema_changes=frozenset({ChangeKind.ADD}),
        shares_targets=False,  # a batch's folder is named by its batch id alone
        no_layout="the files sink appends a changelog of change rows: it has no table to "
                  "partition or give properties")
    option_spec = config.OPTIONS
    target_options = staticmethod(config.target_options)  # how it names a target
    path_options = ("path",)

    def __init__(self, config: FilesConfig):
        self.config = config

    @classmethod
    def from_options(cls, options: Mapping[str, Any]) -> FilesSink:
        return cls(FilesConfig.parse(options))

    def _fs(self, spark):
        jvm = spark._jvm
        root = jvm.org.apache.hadoop.fs.Path(self.config.path)
        return root, root.getFileSystem(spark._jsc.hadoopConfiguration()), jvm

    def applied_batches(self, spark=None) -> list[int]:
        spark = spark or _spark()
        root, fs, jvm = self._fs(spark)
        if not fs.exists(root):
            return []
        done = []
        for st in fs.listStatus(root):
            name = st.getPath().getName()
            if (st.isDirectory() and name.startswith(BATCH_COLUMN + "=")
                    and fs.exists(jvm.org.apache.hadoop.fs.Path(st.getPath(), "_SUCCESS"))):
                done.append(int(name.split("=", 1)[1]))
        return sorted(done)

    def last_batch_id(self) -> int | None:
        done = self.applied_batches()
        return done[-1] if done else None

    def write_changelog(self, df, batch_id: int, keys: tuple[str, ...] = ()) -> WriteResult:
        spark = df.sparkSession
        if batch_id in self.applied_batches(spark):
            return WriteResult(batch_id, skipped=True)
        if self.config.format == "json":
            self._keep_schema(spark, df.schema)
        w = df.write.mode("overwrite").format(self.config.format)
        if self.config.compression:
            w = w.option("compression", self.config.compression)
        if self.config.format == "json":
            w = w.options(ignoreNullFields="false", **JSON_TIME_FORMATS)
        w.save(f"{self.config.path}/{BATCH_COLUMN}={batch_id}")
        log.debug("files sink: batch %d written to %s", batch_id, self.config.path)
        return WriteResult(batch_id)

    def _keep_schema(self, spark, schema) -> None:
        """The JSON changelog's schema: the first batch's, with the columns later batches
        add (an ADD COLUMN) appended, so a reader sees every column ever written."""
        from pyspark.sql.types import StructType

        text = self._schema_json(spark)
        if text is not None:
            have = StructType.fromJson(__import__("json").loads(text))
            new = [f for f in schema.fields if f.name not in have.fieldNames()]
            if not new:
                return
            schema = StructType(have.fields + new)
        (spark.createDataFrame([(schema.json(),)], "schema string").coalesce(1)
         .write.mode("overwrite").text(f"{self.config.path}/_sparkcdc_schema"))

    def _schema_json(self, spark) -> str | None:
        root, fs, jvm = self._fs(spark)
        if not fs.exists(jvm.org.apache.hadoop.fs.Path(root, "_sparkcdc_schema/_SUCCESS")):
            return None
        return spark.read.text(f"{self.config.path}/_sparkcdc_schema").first()[0]

    def changelog(self, spark=None):
        """The whole changelog as a Spark DataFrame (with ``sparkcdc_batch``), or None."""
        from pyspark.sql.types import StructType

        spark = spark or _spark()
        if not self.applied_batches(spark):
            return None
        reader = spark.read.format(self.config.format)
        if self.config.format == "parquet":  # batches after an ADD COLUMN have one more
            reader = reader.option("mergeSchema", "true")
        if self.config.format == "json":
            schema = StructType.fromJson(__import__("json").loads(self._schema_json(spark)))
            from pyspark.sql.types import LongType, StructField

            reader = reader.schema(StructType(schema.fields + [StructField(BATCH_COLUMN, LongType())]))
            reader = reader.options(**JSON_TIME_FORMATS)
        return reader.load(self.config.path)

    def read(self) -> pa.Table:
        df = self.changelog()
        return pa.table({}) if df is None else df.toArrow()
