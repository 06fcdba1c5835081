"""A truncate event in a topic the ``kafka`` source reads empties the table's target at its
place in the stream: the rows before it are gone, the rows after it written (as a source
TRUNCATE under ``evolve`` does in a MySQL pipeline). The topic is written by sparkcdc's
kafka sink (three partitions, the truncate in each), read into Delta: first rows, a
truncate and rows in one batch (a table met for the first time), then a truncate and rows
in a later batch; a batch read again after a crash empties nothing (its target has it).

Before, the source decoded a truncate as no row: the target kept every row before it."""

from __future__ import annotations

import pytest
from pipeline_support import delta_rows_by_key
from sink_support import change_rows, kafka_sink

from sparkcdc.pipeline.definition import parse_pipeline
from sparkcdc.pipeline.kafka_runner import KafkaRunner


def from_kafka(tmp_path, broker, topic, fmt):
    return parse_pipeline(f"""
source:
  type: kafka
  properties.bootstrap.servers: {broker.bootstrap_servers}
  topic: {topic}
  value.format: {fmt}
sink:
  type: delta
  path: {tmp_path}/lake
pipeline:
  name: trunc
  checkpoint.location: {tmp_path}/ckpt
""", "trunc.yaml")


def rows(ids) -> dict:
    return {i: (i * 10,) for i in ids}


@pytest.mark.parametrize("fmt", ["debezium-json", "canal-json"])
def test_a_truncate_event_empties_the_target_at_its_place(spark, tmp_path, kafka_broker, fmt):
    writer = kafka_sink(kafka_broker, fmt, **{"sink.topic.partitions": "3"})
    topic, defn = writer.topic, from_kafka(tmp_path, kafka_broker, writer.topic, fmt)
    try:
        writer.write_changelog(change_rows(list(range(1, 31)), 100), 0, ("id",))
        writer.empty()
        writer.write_changelog(change_rows(list(range(20, 41)), 200), 1, ("id",))
        KafkaRunner(defn, spark, until_caught_up=True).run()
        assert delta_rows_by_key(tmp_path, "shop", "items") == rows(range(20, 41))

        writer.write_changelog(change_rows([41, 42], 300), 2, ("id",))
        KafkaRunner(defn, spark, until_caught_up=True).run()  # the table is known now
        writer.empty()
        writer.write_changelog(change_rows([7, 8, 41], 400), 3, ("id",))
        KafkaRunner(defn, spark, until_caught_up=True).run()
        assert delta_rows_by_key(tmp_path, "shop", "items") == rows([7, 8, 41])
    finally:
        writer.close()
    assert topic == defn.source.options["topic"]

    # a crash after the target wrote the last batch, before its commit was logged: read
    # again, the batch is skipped by the target, whose rows stay (not emptied again)
    commits = tmp_path / "ckpt" / "kafka" / "commits"
    (commits / f"{max(int(p.stem) for p in commits.glob('*.json'))}.json").unlink()
    KafkaRunner(defn, spark, until_caught_up=True).run()
    assert delta_rows_by_key(tmp_path, "shop", "items") == rows([7, 8, 41])
