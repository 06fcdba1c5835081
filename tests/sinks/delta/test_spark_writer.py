"""Which writer writes a Delta target (the sink's ``writer``; sinks/delta/spark_writer.py),
in the test session's own Spark, which has no Delta Lake: ``auto`` keeps sparkcdc's own
writers, ``spark`` stops with one error naming the fix before anything is written, and
``status`` names the writer from the YAML. Spark's Delta writing a pipeline's targets is
tests/pipeline/test_spark_delta.py (marker ``spark_delta``, PySpark 4.2)."""

from __future__ import annotations

import pytest

from sparkcdc import sinks
from sparkcdc.errors import ConfigError
from sparkcdc.pipeline.commands.status import writer_of
from sparkcdc.pipeline.definition import parse_pipeline
from sparkcdc.sinks.delta import spark_writer
from sparkcdc.sinks.delta.config import DeltaConfig


def test_the_writer_option_takes_three_choices():
    assert DeltaConfig.parse({"path": "/x"}).writer == "auto"
    assert DeltaConfig.parse({"path": "/x", "writer": "spark"}).writer == "spark"
    with pytest.raises(ConfigError) as e:
        DeltaConfig.parse({"path": "/x", "writer": "delta-spark"})
    assert e.value.key == "writer" and "sparkcdc" in str(e.value)


def test_a_session_without_delta_keeps_sparkcdcs_writers_or_stops(spark, tmp_path):
    assert "DeltaSparkSessionExtension" in spark_writer.lacks_delta(spark)
    auto = sinks.create("delta", {"path": str(tmp_path / "a")})
    assert auto.publish(spark) and not auto.takes_frames(("id",))
    assert auto.takes_files() and auto.takes_changes(("id",))  # sparkcdc's own path
    mine = sinks.create("delta", {"path": str(tmp_path / "b"), "writer": "sparkcdc"})
    assert mine.publish(spark) and not mine.uses_spark
    chosen = sinks.create("delta", {"path": str(tmp_path / "c"), "writer": "spark"})
    with pytest.raises(ConfigError) as e:
        chosen.publish(spark)  # when the table joins, before anything is written
    assert e.value.key == "writer"
    assert "delta-spark" in e.value.fix and "writer: sparkcdc" in e.value.fix
    assert not (tmp_path / "c").exists()


def test_status_names_spark_delta_where_the_yaml_gives_it(tmp_path):
    def defn(sink: str, spark: str = ""):
        return parse_pipeline(f"""
source:
  type: mysql
  hostname: 127.0.0.1
  port: 3306
  username: u
  tables: shop.\\.*
sink:
  type: delta
  path: {tmp_path}/lake
{sink}pipeline:
  name: w
  checkpoint.location: {tmp_path}/ckpt
{spark}""", "w.yaml")

    delta = ("  spark:\n    spark.sql.extensions: io.delta.sql.DeltaSparkSessionExtension\n")
    assert writer_of(defn("  writer: spark\n"), "shop.a") == "spark (delta-spark MERGE)"
    assert writer_of(defn("", delta), "shop.a") == "spark (delta-spark MERGE)"
    assert writer_of(defn("  writer: sparkcdc\n", delta), "shop.a") == \
        "tasks (changes: key slices, deletion vectors)"
    assert writer_of(defn(""), "shop.a") == "tasks (changes: key slices, deletion vectors)"
