"""``source: type: kafka`` against the real broker: topics sparkcdc's own kafka sink wrote
from MariaDB (canal-json, changelog-json) applied into Delta equal the source; Debezium's
envelope produced by the test, with a replay after a "restart", applied once; a bad message
named by topic, partition and offset, or sent to the dead-letter topic."""

from __future__ import annotations

import json

import pytest
from pipeline_support import delta_rows_by_key, source_rows_by_key, source_yaml
from server_support import seq

from sparkcdc.errors import DecodeError
from sparkcdc.pipeline.definition import parse_pipeline
from sparkcdc.pipeline.kafka.runner import KafkaRunner
from sparkcdc.pipeline.run.loop import Runner


def _to_kafka(mariadb, db, tmp_path, broker, fmt):
    return parse_pipeline(f"""
{source_yaml(mariadb, db + ".orders", 40)}
sink:
  type: kafka
  properties.bootstrap.servers: {broker.bootstrap_servers}
  value.format: {fmt}
pipeline:
  name: tok
  parallelism: 1
  checkpoint.location: {tmp_path}/ckpt-to-kafka
""", "tok.yaml", env={"TEST_PW": mariadb.info.cdc_password})


def _from_kafka(tmp_path, broker, topic, fmt, extra="", name="fromk"):
    return parse_pipeline(f"""
source:
  type: kafka
  properties.bootstrap.servers: {broker.bootstrap_servers}
  topic: {topic}
  value.format: {fmt}{extra}
sink:
  type: delta
  path: {tmp_path}/lake
pipeline:
  name: {name}
  checkpoint.location: {tmp_path}/ckpt-{name}
""", f"{name}.yaml")


@pytest.mark.long
@pytest.mark.parametrize("fmt", ["canal-json", "changelog-json"])
def test_a_topic_sparkcdc_wrote_applies_into_delta_equal_to_the_source(
        spark, mariadb, db, tmp_path, kafka_broker, fmt):
    mariadb.execute("CREATE TABLE orders (id INT PRIMARY KEY, v VARCHAR(20), n BIGINT)",
                    "INSERT INTO orders SELECT seq, CONCAT('s', seq), seq * 10 "
                    f"FROM {seq(mariadb, 30)}",
                    database=db)
    to_kafka = _to_kafka(mariadb, db, tmp_path, kafka_broker, fmt)
    from_kafka = _from_kafka(tmp_path, kafka_broker, f"{db}.orders", fmt)
    Runner(to_kafka, spark, until_caught_up=True).run()
    KafkaRunner(from_kafka, spark, until_caught_up=True).run()
    assert delta_rows_by_key(tmp_path, db, "orders") == source_rows_by_key(mariadb, db, "orders")

    mariadb.execute("UPDATE orders SET v = 'u1' WHERE id = 1",
                    "UPDATE orders SET v = 'u2', n = NULL WHERE id = 1",
                    "DELETE FROM orders WHERE id IN (2, 3)",
                    "INSERT INTO orders VALUES (31, 'new', 310)",
                    "UPDATE orders SET id = 32 WHERE id = 4", database=db)
    Runner(to_kafka, spark, until_caught_up=True).run()
    runner = KafkaRunner(from_kafka, spark, until_caught_up=True)
    runner.run()
    assert runner.batches == 1
    assert delta_rows_by_key(tmp_path, db, "orders") == source_rows_by_key(mariadb, db, "orders")

    # a crash after the targets wrote the last batch, before its commit was logged: the
    # batch is read again from its logged range, and Delta skips it by its batch id
    commits = tmp_path / "ckpt-fromk" / "kafka" / "commits"
    last = max(int(p.stem) for p in commits.glob("*.json"))
    (commits / f"{last}.json").unlink()
    mariadb.execute("UPDATE orders SET v = 'after' WHERE id = 5", database=db)
    Runner(to_kafka, spark, until_caught_up=True).run()
    seen = []
    KafkaRunner(from_kafka, spark, until_caught_up=True,
                on_batch=lambda t, df, b: seen.append((t, b))).run()
    assert [b for _t, b in seen] == [last, last + 1]  # the replay, then the new batch
    assert delta_rows_by_key(tmp_path, db, "orders") == source_rows_by_key(mariadb, db, "orders")


def _produce(broker, topic, messages, partitions=1):
    import confluent_kafka as ck
    from confluent_kafka.admin import AdminClient, NewTopic

    admin = AdminClient({"bootstrap.servers": broker.bootstrap_servers})
    fs = admin.create_topics([NewTopic(topic, num_partitions=partitions, replication_factor=1)])
    try:
        fs[topic].result(30)
    except ck.KafkaException:
        pass  # made already
    p = ck.Producer({"bootstrap.servers": broker.bootstrap_servers})
    for key, value in messages:
        p.produce(topic, key=None if key is None else json.dumps(key).encode(),
                  value=value if isinstance(value, bytes) or value is None
                  else json.dumps(value).encode())
    assert p.flush(30) == 0


def _dbz(op, before, after, pos=None, row=0, snapshot="false", table="customers"):
    """A Debezium 2.x/3.x MySQL change event as JsonConverter writes it with schemas off:
    the shape of Debezium's MySQL connector documentation."""
    source = {"version": "3.0.0.Final", "connector": "mysql", "name": "dbserver1",
              "ts_ms": 1700000000000, "snapshot": snapshot, "db": "inventory",
              "sequence": None, "table": table, "server_id": 223344,
              "gtid": None, "file": "mysql-bin.000003", "pos": pos or 154, "row": row,
              "thread": 7, "query": None}
    return {"before": before, "after": after, "source": source, "op": op,
            "ts_ms": 1700000000500, "transaction": None}


def test_debezium_events_and_a_replay_after_a_restart_are_applied_once(
        spark, tmp_path, kafka_broker):
    topic = f"dbserver1.inventory.customers.{tmp_path.name[-8:]}"

    def c(i, name):
        return {"id": i, "first_name": name, "email": f"{name}@x.org"}

    first = [({"id": i}, _dbz("r", None, c(i, f"n{i}"), snapshot="true" if i < 3 else "last"))
             for i in (1, 2, 3)]
    stream = [({"id": 4}, _dbz("c", None, c(4, "n4"), pos=400)),
              ({"id": 1}, _dbz("u", c(1, "n1"), c(1, "m1"), pos=500)),
              ({"id": 2}, _dbz("d", c(2, "n2"), None, pos=600)),
              ({"id": 2}, None),  # the delete's tombstone
              ({"id": 4}, _dbz("u", c(4, "n4"), c(4, "m4"), pos=700, row=0)),
              ({"id": 3}, _dbz("u", c(3, "n3"), c(3, "m3"), pos=700, row=1))]
    _produce(kafka_broker, topic, first + stream)
    defn = _from_kafka(tmp_path, kafka_broker, topic, "debezium-json", name="dbz")
    KafkaRunner(defn, spark, until_caught_up=True).run()
    expected = {1: ("m1@x.org", "m1"), 3: ("m3@x.org", "m3"), 4: ("m4@x.org", "m4")}
    assert delta_rows_by_key(tmp_path, "inventory", "customers") == expected

    # Debezium restarts and sends its last events again (from its last recorded offset),
    # then goes on; the repeats would undo the row 1 change made meanwhile, and bring
    # row 2 back
    restart = stream[1:3] + stream[4:] + [
        ({"id": 1}, _dbz("u", c(1, "m1"), c(1, "k1"), pos=800)),
        ({"id": 5}, _dbz("c", None, c(5, "n5"), pos=900))]
    _produce(kafka_broker, topic, restart)
    runner = KafkaRunner(defn, spark, until_caught_up=True)
    runner.run()
    expected[1] = ("k1@x.org", "k1")
    expected[5] = ("n5@x.org", "n5")
    assert delta_rows_by_key(tmp_path, "inventory", "customers") == expected
    assert runner.tables["inventory.customers"].skipped == 4
    assert runner.tables["inventory.customers"].position.pos == 900


def test_a_bad_message_is_named_or_goes_to_the_dead_letter_topic(spark, tmp_path, kafka_broker):
    from sparkcdc.sinks.kafka.sink import read_topic

    topic = f"bad.{tmp_path.name[-8:]}"
    dlq = f"dlq.{tmp_path.name[-8:]}"
    rows = [({"id": i}, {"data": [{"id": i, "v": f"s{i}"}], "type": "INSERT", "old": None,
                         "database": "shop", "table": "t", "pkNames": ["id"], "isDdl": False,
                         "es": 1700000000000, "ts": 1700000000001}) for i in range(1, 4)]
    _produce(kafka_broker, topic, [rows[0], ({"id": 9}, b"{not json"), rows[1],
                                   ({"id": 8}, {"something": "else"}), rows[2]])
    defn = _from_kafka(tmp_path, kafka_broker, topic, "canal-json", name="bad")
    with pytest.raises(DecodeError, match=rf"topic {topic}, partition 0, offset 1\b") as e:
        KafkaRunner(defn, spark, until_caught_up=True).run()
    assert "errors.tolerance" in e.value.fix
    assert not (tmp_path / "lake").exists()  # nothing of the batch was written

    tolerant = _from_kafka(tmp_path, kafka_broker, topic, "canal-json", name="bad", extra=f"""
  errors.tolerance: all
  errors.deadletterqueue.topic.name: {dlq}""")
    KafkaRunner(tolerant, spark, until_caught_up=True).run()
    assert delta_rows_by_key(tmp_path, "shop", "t") == {1: ("s1",), 2: ("s2",), 3: ("s3",)}
    import confluent_kafka as ck

    got = read_topic(ck, {"bootstrap.servers": kafka_broker.bootstrap_servers}, dlq, 30)
    assert [m["value"] for m in got] == [b"{not json", b'{"something": "else"}']
    headers = [dict(json.loads(m["headers"])) for m in got]
    assert [(h["__connect.errors.topic"], h["__connect.errors.offset"]) for h in headers] == [
        (topic, "1"), (topic, "3")]


def test_a_missing_topic_and_an_unreachable_broker_say_so(spark, tmp_path, kafka_broker):
    from sparkcdc.errors import ConfigError, ConnectionFailed

    defn = _from_kafka(tmp_path, kafka_broker, "no.such.topic.here", "canal-json", name="m")
    with pytest.raises(ConfigError, match="topic 'no.such.topic.here' does not exist"):
        KafkaRunner(defn, spark, until_caught_up=True).run()
    gone = parse_pipeline(f"""
source:
  type: kafka
  properties.bootstrap.servers: 127.0.0.1:1
  topic: x.y
  value.format: canal-json
  connect-timeout: 2
sink:
  type: delta
  path: {tmp_path}/lake
pipeline:
  checkpoint.location: {tmp_path}/ckpt-gone
""", "gone.yaml")
    with pytest.raises(ConnectionFailed, match="cannot reach the brokers at 127.0.0.1:1"):
        KafkaRunner(gone, spark, until_caught_up=True).run()


def _produce_to(broker, topic, messages, partitions):
    """``(partition, key, value)`` messages, each to the partition it names."""
    import confluent_kafka as ck
    from confluent_kafka.admin import AdminClient, NewTopic

    admin = AdminClient({"bootstrap.servers": broker.bootstrap_servers})
    admin.create_topics([NewTopic(topic, num_partitions=partitions,
                                  replication_factor=1)])[topic].result(30)
    p = ck.Producer({"bootstrap.servers": broker.bootstrap_servers})
    for part, key, value in messages:
        p.produce(topic, key=json.dumps(key).encode(), partition=part,
                  value=None if value is None else json.dumps(value).encode())
    assert p.flush(30) == 0


def test_debezium_events_of_another_partition_are_no_repeats(spark, tmp_path, kafka_broker):
    """A Debezium topic of two partitions (keyed by the primary key): a batch reads one
    partition after the other, so it meets positions out of binlog order across them.
    Only an event at or below its own partition's mark is a repeat."""
    topic = f"dbserver1.inventory.customers.{tmp_path.name[-8:]}"

    def c(i, name):
        return {"id": i, "first_name": name, "email": f"{name}@x.org"}

    # key 1 and 3 in partition 0, key 2 in partition 1; binlog order 400 .. 800
    events = [(0, {"id": 1}, _dbz("c", None, c(1, "a1"), pos=400)),
              (1, {"id": 2}, _dbz("c", None, c(2, "a2"), pos=500)),
              (0, {"id": 3}, _dbz("c", None, c(3, "a3"), pos=600)),
              (1, {"id": 2}, _dbz("u", c(2, "a2"), c(2, "b2"), pos=700)),
              (0, {"id": 1}, _dbz("d", c(1, "a1"), None, pos=800))]
    restart = [(1, {"id": 2}, _dbz("u", c(2, "a2"), c(2, "b2"), pos=700)),  # sent again
               (0, {"id": 1}, _dbz("d", c(1, "a1"), None, pos=800)),
               (0, {"id": 3}, _dbz("u", c(3, "a3"), c(3, "b3"), pos=900))]
    _produce_to(kafka_broker, topic, events + restart, partitions=2)
    runner = KafkaRunner(_from_kafka(tmp_path, kafka_broker, topic, "debezium-json",
                                     name="parts"), spark, until_caught_up=True)
    runner.run()
    assert delta_rows_by_key(tmp_path, "inventory", "customers") == {
        2: ("b2@x.org", "b2"), 3: ("b3@x.org", "b3")}
    info = runner.tables["inventory.customers"]
    assert info.skipped == 2
    assert {tp.rpartition(":")[2]: p.pos for tp, p in info.positions.items()} == {
        "0": 900, "1": 700}


def _canal(typ, rows, old=None, table="t"):
    return {"data": rows, "old": old, "type": typ, "database": "shop", "table": table,
            "pkNames": ["id"], "isDdl": False, "es": 1700000000000, "ts": 1700000000001}


def test_a_canal_update_of_the_primary_key_moves_the_row(spark, tmp_path, kafka_broker):
    """Canal sends a primary-key change as one UPDATE whose ``old`` holds the old key: the
    row leaves its old key (a pre-image alone would leave it there)."""
    topic = f"canal.{tmp_path.name[-8:]}"
    _produce_to(kafka_broker, topic, [
        (0, "shop.t", _canal("INSERT", [{"id": 1, "v": "a"}, {"id": 2, "v": "b"}])),
        (0, "shop.t", _canal("UPDATE", [{"id": 10, "v": "a"}, {"id": 2, "v": "c"}],
                             old=[{"id": 1}, {"v": "b"}]))], partitions=1)
    KafkaRunner(_from_kafka(tmp_path, kafka_broker, topic, "canal-json", name="rekey"), spark,
                until_caught_up=True).run()
    assert delta_rows_by_key(tmp_path, "shop", "t") == {10: ("a",), 2: ("c",)}


def test_a_tables_first_batch_read_again_is_skipped_by_its_target(spark, tmp_path,
                                                                 kafka_broker):
    """A run killed after it wrote a table's first batch and before it logged the batch as
    committed: the batch read again gets the base its first attempt logged, and the
    target, which has it, skips it (no second commit)."""
    import deltalake

    topic = f"first.{tmp_path.name[-8:]}"
    _produce_to(kafka_broker, topic, [
        (0, "shop.t", _canal("INSERT", [{"id": i, "v": f"s{i}"}])) for i in (1, 2, 3)],
        partitions=1)
    defn = _from_kafka(tmp_path, kafka_broker, topic, "canal-json", name="first")
    KafkaRunner(defn, spark, until_caught_up=True).run()
    target = str(tmp_path / "lake" / "shop" / "t")
    version = deltalake.DeltaTable(target).version()
    (tmp_path / "ckpt-first" / "kafka" / "commits" / "0.json").unlink()
    seen = []
    runner = KafkaRunner(defn, spark, until_caught_up=True,
                         on_batch=lambda t, df, b: seen.append(b))
    runner.run()
    assert deltalake.DeltaTable(target).version() == version  # skipped, not written again
    assert runner.tables["shop.t"].base == 0
    assert delta_rows_by_key(tmp_path, "shop", "t") == {i: (f"s{i}",) for i in (1, 2, 3)}
