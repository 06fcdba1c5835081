"""A truncate event in a topic the ``kafka`` source reads empties the table's target at its
place in the stream: the rows before it are gone, the rows after it written (as a source
TRUNCATE under ``evolve`` does in a MySQL pipeline). The topic is written by sparkcdc's
kafka sink (three partitions, the truncate in each), read into Delta: first rows, a
truncate and rows in one batch (a table met for the first time), then a truncate and rows
in a later batch; a batch read again after a crash empties nothing (its target has it).
Before, the source decoded a truncate as no row: the target kept every row before it.

And the other way: a MySQL pipeline's TRUNCATE under ``evolve`` reaches a kafka target as
its truncate event."""

from __future__ import annotations

import json

import pytest
from pipeline_support import delta_rows_by_key, source_yaml
from server_support import seq
from sink_support import change_rows, kafka_sink, topic_messages

from sparkcdc.pipeline.definition import parse_pipeline
from sparkcdc.pipeline.kafka.runner import KafkaRunner
from sparkcdc.pipeline.run.loop import Runner


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


@pytest.mark.parametrize("fmt", ["debezium-json",
                                 pytest.param("canal-json", marks=pytest.mark.faults)])
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


@pytest.mark.faults  # the shared-target test below makes the same TRUNCATE in make test
def test_a_source_truncate_under_evolve_reaches_a_kafka_target_as_a_truncate_event(
        spark, mariadb, db, tmp_path, kafka_broker):
    """A MySQL pipeline into Kafka: a ``TRUNCATE TABLE`` under ``evolve`` empties the target
    as for a merge sink, here by the table's truncate event between the rows before and the
    rows after it; replayed, the topic is the source. Before, the run stopped (a changelog
    cannot be emptied)."""
    mariadb.execute("CREATE TABLE t (id INT PRIMARY KEY, v INT)",
                    f"INSERT INTO t SELECT seq, seq FROM {seq(mariadb, 20)}", database=db)
    defn = parse_pipeline(f"""
{source_yaml(mariadb, db + ".t", 10)}sink:
  type: kafka
  properties.bootstrap.servers: {kafka_broker.bootstrap_servers}
  value.format: debezium-json
pipeline:
  name: truncev
  parallelism: 1
  schema.change.behavior: evolve
  checkpoint.location: {tmp_path}/ckpt-evolve
""", "truncev.yaml", env={"TEST_PW": mariadb.info.cdc_password})
    Runner(defn, spark, until_caught_up=True).run()
    mariadb.execute("DELETE FROM t WHERE id = 1", "UPDATE t SET v = -2 WHERE id = 2",
                    "TRUNCATE TABLE t", "INSERT INTO t VALUES (5, 50), (30, 300)",
                    "UPDATE t SET v = 51 WHERE id = 5", database=db)
    Runner(defn, spark, until_caught_up=True).run()

    state: dict = {}
    truncates = 0
    for m in topic_messages(kafka_broker, f"{db}.t"):  # one partition: the changelog's order
        e = json.loads(m["value"])
        if e["op"] == "t":
            assert (e["source"]["db"], e["source"]["table"], m["key"]) == (db, "t", None)
            truncates += 1
            state.clear()
        elif e["op"] == "d":
            state.pop(e["before"]["id"], None)
        else:
            state[e["after"]["id"]] = e["after"]["v"]
    assert truncates == 1
    assert state == {r[0]: r[1] for r in mariadb.query("SELECT id, v FROM t", database=db)} \
        == {5: 51, 30: 300}


def test_a_truncate_empties_a_shared_kafka_target_for_its_own_table(
        spark, mariadb, db, tmp_path, kafka_broker):
    """Two tables routed into one kafka target: a TRUNCATE of one under ``evolve`` is its
    truncate event, naming it, so a consumer drops that table's rows and keeps the other's.
    A merge target shared so stops instead (it would lose both); before, so did Kafka."""
    mariadb.execute("CREATE TABLE a (id INT PRIMARY KEY, v INT)",
                    f"INSERT INTO a SELECT seq, seq FROM {seq(mariadb, 10)}",
                    "CREATE TABLE b (id INT PRIMARY KEY, v INT)",
                    f"INSERT INTO b SELECT seq, seq FROM {seq(mariadb, 110, 101)}", database=db)
    every = db + ".\\.*"
    defn = parse_pipeline(f"""
{source_yaml(mariadb, every, 10)}sink:
  type: kafka
  properties.bootstrap.servers: {kafka_broker.bootstrap_servers}
  value.format: debezium-json
route:
  - source-table: {every}
    sink-table: {db}_all.t
pipeline:
  name: truncshared
  parallelism: 1
  schema.change.behavior: evolve
  checkpoint.location: {tmp_path}/ckpt-shared
""", "truncshared.yaml", env={"TEST_PW": mariadb.info.cdc_password})
    Runner(defn, spark, until_caught_up=True).run()
    mariadb.execute("TRUNCATE TABLE a", "INSERT INTO a VALUES (7, 70)",
                    "UPDATE b SET v = 0 WHERE id = 101", database=db)
    Runner(defn, spark, until_caught_up=True).run()

    # per source table, as the events name them
    state: dict[str, dict] = {"a": {}, "b": {}}
    for m in topic_messages(kafka_broker, f"{db}_all.t"):
        e = json.loads(m["value"])
        assert e["source"]["db"] == db
        rows = state[e["source"]["table"]]
        if e["op"] == "t":
            rows.clear()
        elif e["op"] == "d":
            rows.pop(e["before"]["id"], None)
        else:
            rows[e["after"]["id"]] = e["after"]["v"]
    for t in "ab":
        assert state[t] == dict(mariadb.query(f"SELECT id, v FROM {t}", database=db)), t
    assert state["a"] == {7: 70} and len(state["b"]) == 10
