"""MariaDB -> ``sparkcdc run`` -> Kafka: a ``read_committed`` consumer of each table's topic
sees exactly the source's changelog (a snapshot, then every change once, in order per key),
a micro-batch Spark replays after a crash is not written twice, and a column added to the
source shows in the messages after the ALTER, which is announced in the schema change
topic."""

from __future__ import annotations

import json

import pytest
from pipeline_support import source_yaml
from server_support import seq

from sparkcdc import sinks
from sparkcdc.pipeline.commands.verify import Verifier
from sparkcdc.pipeline.definition import parse_pipeline
from sparkcdc.pipeline.run.loop import Runner


def _defn(mariadb, db, tmp_path, broker, fmt="debezium-json", extra=""):
    source = source_yaml(mariadb, db + ".\\.*", 40)
    return parse_pipeline(f"""
{source}
sink:
  type: kafka
  properties.bootstrap.servers: {broker.bootstrap_servers}
  value.format: {fmt}
  sink.add-tableId-to-header-enabled: true{extra}
route:
  - source-table: {db}.orders
    sink-table: {db}_out.orders
pipeline:
  name: k
  parallelism: 1
  checkpoint.location: {tmp_path}/ckpt
""", "k.yaml", env={"TEST_PW": mariadb.info.cdc_password})


def _run(defn, spark) -> None:
    Runner(defn, spark, until_caught_up=True).run()


@pytest.fixture
def writes(monkeypatch):
    """Every write of a kafka sink: (topic, batch id, skipped, messages)."""
    from sparkcdc.sinks.kafka.sink import KafkaSink

    seen: list[tuple] = []
    real = KafkaSink.write_changelog

    def spy(self, df, batch_id, keys=()):
        r = real(self, df, batch_id, keys)
        seen.append((self.topic, batch_id, r.skipped, (r.counts or {}).get("messages", 0)))
        return r

    monkeypatch.setattr(KafkaSink, "write_changelog", spy)
    return seen


def _events(broker, topic: str) -> dict[int, list[tuple]]:
    """Per key, its Debezium events in the order a consumer reads them: (op, before, after)
    with the rows as dicts."""
    sink = sinks.create("kafka", broker.info.sink_options(topic=topic))
    try:
        msgs = sink.read().to_pylist()
    finally:
        sink.close()
    by_key: dict[int, list[tuple]] = {}
    parts: dict[int, int] = {}
    for m in msgs:  # partition, then offset order
        key = json.loads(m["key"])["id"]
        assert parts.setdefault(key, m["partition"]) == m["partition"], "a key in two partitions"
        e = json.loads(m["value"])
        by_key.setdefault(key, []).append((e["op"], e["before"], e["after"]))
        headers = dict(json.loads(m["headers"]))
        assert headers["tableName"] == topic.split(".")[1]
    return by_key


@pytest.mark.long
def test_read_committed_consumers_see_the_source_changelog_once(spark, mariadb, db, tmp_path,
                                                                kafka_broker, writes):
    mariadb.execute("CREATE TABLE orders (id INT PRIMARY KEY, v VARCHAR(20))",
                    f"INSERT INTO orders SELECT seq, CONCAT('s', seq) FROM {seq(mariadb, 20)}",
                    "CREATE TABLE items (id INT PRIMARY KEY, n INT)",
                    "INSERT INTO items VALUES (1, 1), (2, 2)", database=db)
    defn = _defn(mariadb, db, tmp_path, kafka_broker)
    _run(defn, spark)  # the snapshot
    expected = {i: [("r", None, {"id": i, "v": f"s{i}"})] for i in range(1, 21)}
    assert _events(kafka_broker, f"{db}_out.orders") == expected

    # changes, each one once: updates (one row twice), deletes, inserts, a key change
    mariadb.execute("UPDATE orders SET v = 'u1' WHERE id = 1",
                    "UPDATE orders SET v = 'u2' WHERE id = 1",
                    "DELETE FROM orders WHERE id = 2",
                    "INSERT INTO orders VALUES (21, 'new')",
                    "UPDATE orders SET id = 22 WHERE id = 3",
                    "INSERT INTO items VALUES (3, 3)", database=db)
    writes.clear()
    _run(defn, spark)
    second = list(writes)
    expected[1] += [("u", {"id": 1, "v": "s1"}, {"id": 1, "v": "u1"}),
                    ("u", {"id": 1, "v": "u1"}, {"id": 1, "v": "u2"})]
    expected[2] += [("d", {"id": 2, "v": "s2"}, None)]
    expected[21] = [("c", None, {"id": 21, "v": "new"})]
    expected[3] += [("d", {"id": 3, "v": "s3"}, None)]  # a key change: delete, then insert
    expected[22] = [("c", None, {"id": 22, "v": "s3"})]
    assert _events(kafka_broker, f"{db}_out.orders") == expected
    assert _events(kafka_broker, f"{db}.items") == {
        1: [("r", None, {"id": 1, "n": 1})], 2: [("r", None, {"id": 2, "n": 2})],
        3: [("c", None, {"id": 3, "n": 3})]}

    # a crash after the last batch was written to Kafka, before Spark logged it committed:
    # the next run replays that batch, and the sink recognises it
    commits = tmp_path / "ckpt" / "streams" / "_tables" / "g0" / "commits"
    last = max(int(p.name) for p in commits.iterdir() if p.name.isdigit())
    for name in (str(last), f".{last}.crc"):
        (commits / name).unlink()
    mariadb.execute("UPDATE items SET n = 30 WHERE id = 3", database=db)
    writes.clear()
    _run(defn, spark)
    skipped = [(t, b) for t, b, skip, _n in writes if skip]
    assert skipped, "the replayed batch reached no kafka target"
    assert set(skipped) <= {(t, b) for t, b, _s, n in second if n}
    newest: dict[str, int] = {}
    for t, b, _s, _n in second:
        newest[t] = max(b, newest.get(t, b))
    assert all(b > newest[t] for t, b, skip, _n in writes if not skip and t in newest)
    expected_items = {1: [("r", None, {"id": 1, "n": 1})], 2: [("r", None, {"id": 2, "n": 2})],
                      3: [("c", None, {"id": 3, "n": 3}),
                          ("u", {"id": 3, "n": 3}, {"id": 3, "n": 30})]}
    assert _events(kafka_broker, f"{db}.items") == expected_items
    assert _events(kafka_broker, f"{db}_out.orders") == expected
    # verify compares tables: a topic is said to be left out, not compared as one
    results = Verifier(defn).run()
    assert results and all("changelog" in (r.not_verified or "") for r in results)

    # a schema change: the messages after it carry the new column, those before stay
    mariadb.execute("ALTER TABLE items ADD COLUMN note VARCHAR(10)",
                    "UPDATE items SET note = 'x' WHERE id = 1",
                    "INSERT INTO items VALUES (4, 4, 'y')", database=db)
    _run(defn, spark)
    expected_items[1].append(("u", {"id": 1, "n": 1, "note": None},
                              {"id": 1, "n": 1, "note": "x"}))
    expected_items[4] = [("c", None, {"id": 4, "n": 4, "note": "y"})]
    assert _events(kafka_broker, f"{db}.items") == expected_items
    # ...and the change was announced once, as Debezium does, in the schema change topic
    sink = sinks.create("kafka", kafka_broker.info.sink_options(topic="sparkcdc.schema-changes"))
    try:
        events = [json.loads(m["value"]) for m in sink.read().to_pylist()]
    finally:
        sink.close()
    ours = [e for e in events if e["databaseName"] == db]
    assert [e["ddl"] for e in ours] == ["ALTER TABLE items ADD COLUMN note VARCHAR(10)"]
    assert [c["name"] for c in ours[0]["tableChanges"][0]["table"]["columns"]] == [
        "id", "n", "note"]
