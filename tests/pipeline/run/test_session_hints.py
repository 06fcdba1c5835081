"""What a run tells the session it starts (``batch.session_hints``, ``SessionHints``): the
modules its tasks import, and whether its DataFrames hold record batches only, so that
the session evaluates expressions without compiling code (``INTERPRETED``)."""

from __future__ import annotations

import pytest

from sparkcdc.pipeline.definition import parse_pipeline
from sparkcdc.pipeline.run.batch import session_hints

SOURCE = "source: {type: mysql, hostname: h, username: u, tables: d.t}\n"
TRANSFORM = ("transform:\n  - source-table: d.t\n"
             "    projection: \"*, UPPER(name) AS n\"\n")
SPARK_DELTA = ("pipeline:\n  spark:\n"
               "    spark.sql.extensions: io.delta.sql.DeltaSparkSessionExtension\n")


@pytest.mark.parametrize(("sink", "extra", "blobs"), [
    ("{type: delta, path: /tmp/x}", "", True),  # sparkcdc's own Delta writer
    ("{type: iceberg, warehouse: /tmp/w}", "", True),
    ("{type: postgres, host: h, user: u, database: d}", "", True),
    ("{type: delta, path: /tmp/x}", TRANSFORM, False),  # Spark SQL over the rows
    ("{type: delta, path: /tmp/x}", SPARK_DELTA, False),  # Spark's own Delta: MERGE
    ("{type: delta, path: /tmp/x, writer: spark}", "", False),
    ("{type: kafka, topic: t, properties.bootstrap.servers: 'h:1'}", "", False),
])
def test_a_session_compiles_no_code_only_for_record_batches(sink, extra, blobs):
    hints = session_hints(parse_pipeline(f"{SOURCE}sink: {sink}\n{extra}"))
    assert hints.blob_rows is blobs
    assert "sparkcdc.pipeline.run.task_changes" in hints.task_modules


def test_the_sinks_writers_are_among_the_task_modules():
    delta = session_hints(parse_pipeline(f"{SOURCE}sink: {{type: delta, path: /tmp/x}}\n"))
    assert {"deltalake", "sparkcdc.sinks.delta"} <= set(delta.task_modules)
    ice = session_hints(parse_pipeline(f"{SOURCE}sink: {{type: iceberg, warehouse: /tmp/w}}\n"))
    assert {"pyiceberg", "sparkcdc.sinks.iceberg"} <= set(ice.task_modules)
    assert "deltalake" not in ice.task_modules

