"""The kafka sink against a real broker: keys and partitions, headers, tombstones, a run
killed in the middle of a transaction, at-least-once, and the errors a user meets (an
unreachable broker, a missing topic)."""

from __future__ import annotations

import json
import uuid

import pytest
from confluent_kafka import KafkaError, KafkaException
from confluent_kafka.admin import AdminClient, ConfigResource
from sink_support import changes_df

from sparkcdc import sinks
from sparkcdc.apply import apply_changes
from sparkcdc.errors import ConfigError, ConnectionFailed, PipelineFailed
from sparkcdc.testing.mariadb import free_port

DDL = "id int, name string, qty int"


def _sink(broker, **options):
    topic = options.pop("topic", None) or f"t_{uuid.uuid4().hex[:8]}"
    return sinks.create("kafka", broker.info.sink_options(topic=topic, **options))


def _apply(spark, sink, rows, batch_id):
    return apply_changes(changes_df(spark, DDL, rows), batch_id, sink, keys=["id"])


def _seq(value: bytes) -> int:
    e = json.loads(value)
    return int(e["source"]["seq"])


def test_a_keys_changes_share_a_partition_in_order(spark, kafka_broker):
    sink = _sink(kafka_broker, **{"sink.topic.partitions": "3"})
    try:
        rows, seq = [], 10
        for i in range(1, 41):  # 40 keys, each inserted and updated twice, some deleted
            rows.append((i, "n", 0, "insert", seq))
            for v in (1, 2):
                rows += [(i, "n", v - 1, "update_preimage", seq + 2 * v - 1),
                         (i, "n", v, "update_postimage", seq + 2 * v)]
            if i % 5 == 0:
                rows.append((i, "n", 2, "delete", seq + 5))
            seq += 10
        rows.reverse()  # within a batch only _seq orders the changes
        assert _apply(spark, sink, rows, 0).counts == {"messages": 40 * 3 + 8}
        msgs = sink.read().to_pylist()
        parts: dict[int, set] = {}
        order: dict[int, list[int]] = {}
        for m in msgs:
            k = json.loads(m["key"])
            assert list(k) == ["id"]
            parts.setdefault(k["id"], set()).add(m["partition"])
            order.setdefault(k["id"], []).append(_seq(m["value"]))
        assert all(len(p) == 1 for p in parts.values())
        assert len({next(iter(p)) for p in parts.values()}) == 3  # the keys are spread
        assert all(o == sorted(o) and len(o) == (4 if i % 5 == 0 else 3)
                   for i, o in order.items())
    finally:
        sink.close()


def test_all_to_zero_and_headers(spark, kafka_broker):
    sink = _sink(kafka_broker, **{"partition.strategy": "all-to-zero", "table-id": "shop.orders",
                                  "sink.topic.partitions": "2",
                                  "sink.add-tableId-to-header-enabled": "true",
                                  "sink.custom-header": "env:test,team:data"})
    try:
        _apply(spark, sink, [(i, "a", i, "insert", 10) for i in range(10)], 0)
        msgs = sink.read().to_pylist()
        assert len(msgs) == 10 and {m["partition"] for m in msgs} == {0}
        assert json.loads(msgs[0]["headers"]) == [["env", "test"], ["team", "data"],
                                                  ["schemaName", "shop"],
                                                  ["tableName", "orders"]]
    finally:
        sink.close()


def test_tombstones_on_a_compacted_topic(spark, kafka_broker):
    sink = _sink(kafka_broker, **{"tombstones.on.delete": "true",
                                  "value.format": "changelog-json",
                                  "sink.topic.config.cleanup.policy": "compact"})
    try:
        _apply(spark, sink, [(1, "a", 1, "insert", 10), (2, "b", 2, "insert", 10)], 0)
        _apply(spark, sink, [(1, "a", 1, "delete", 101)], 1)
        msgs = sink.read().to_pylist()
        assert [(json.loads(m["key"])["id"], m["value"] is None) for m in msgs] == [
            (1, False), (2, False), (1, False), (1, True)]
        admin = AdminClient({"bootstrap.servers": kafka_broker.bootstrap_servers})
        res = ConfigResource("topic", sink.topic)
        conf = admin.describe_configs([res])[res].result(30)
        assert conf["cleanup.policy"].value == "compact"
    finally:
        sink.close()


def test_a_run_killed_mid_transaction(spark, kafka_broker):
    """A run dies after producing half a batch in its transaction (its producer lingers: a
    zombie). The next run's sink fences it, the open transaction is aborted, the batch is
    written once; the zombie can no longer commit; a sink started after a commit skips the
    replayed batch."""
    topic = f"t_{uuid.uuid4().hex[:8]}"
    first = _sink(kafka_broker, topic=topic)
    _apply(spark, first, [(1, "a", 1, "insert", 10)], 0)
    batch1 = [(2, "b", 2, "insert", 101), (1, "a", 1, "delete", 102)]
    zombie = first._producer
    zombie.begin_transaction()
    for part in first._encode(changes_df(spark, DDL, batch1), ("id",)):
        for key, value in part:
            zombie.produce(topic, key=key, value=value)
    assert zombie.flush(30) == 0  # the messages are in the log, uncommitted

    second = _sink(kafka_broker, topic=topic)  # the rerun
    try:
        assert second.last_batch_id() == 0
        assert not _apply(spark, second, batch1, 1).skipped
        with pytest.raises(KafkaException) as e:
            zombie.commit_transaction(30)
        assert e.value.args[0].fatal() or e.value.args[0].txn_requires_abort()
        # however a call meets the fenced producer (on a slow machine a produce fails with
        # only "Local: Fatal error"), the sink names the cause librdkafka reported
        fatal = KafkaException(KafkaError(KafkaError._FATAL))
        assert "fenced by a newer one" in str(first._kafka_error(fatal, "writing batch 2"))
        # the zombie's sink starts over: fenced, it fails the batch and reads the marker again
        with pytest.raises(PipelineFailed, match="fenced"):
            first._in_transaction(
                lambda report: first._produce([(b'{"id":9}', b"{}")], report) or 1, 2,
                "writing batch 2")
        assert first.last_batch_id() == 1
        third = _sink(kafka_broker, topic=topic)  # after a crash between commit and checkpoint
        try:
            assert third.last_batch_id() == 1
            assert _apply(spark, third, batch1, 1).skipped
        finally:
            third.close()
        by_key: dict[int, list[str]] = {}
        for m in second.read().to_pylist():  # a key's messages in order (keys may interleave)
            by_key.setdefault(json.loads(m["key"])["id"], []).append(json.loads(m["value"])["op"])
        assert by_key == {1: ["r", "d"], 2: ["c"]}
    finally:
        first.close()
        second.close()


@pytest.mark.parametrize("fmt", ["debezium-json", "canal-json"])
def test_a_batch_without_preimages_skips_the_pairing_window(spark, kafka_broker, monkeypatch,
                                                            fmt):
    """A snapshot's batch (no update pre-image) is encoded without the window that pairs an
    update's images; a batch with updates keeps it. Both write what ``formats.encode``
    writes with the pairing."""
    from sparkcdc import formats
    from sparkcdc.formats import canal, debezium

    calls: list[bool] = []
    real = debezium.paired

    def spy(df, keys, pairs=True):
        calls.append(pairs)
        return real(df, keys, pairs=pairs)

    for module in (debezium, canal):  # canal imported the name
        monkeypatch.setattr(module, "paired", spy)
    snapshot = [(i, f"n{i}", i, "insert", 10) for i in range(1, 21)]
    updates = [(1, "n1", 1, "update_preimage", 101), (1, "n1", 5, "update_postimage", 102),
               (2, "n2", 2, "delete", 103), (30, "new", 3, "insert", 104)]
    sink = _sink(kafka_broker, **{"value.format": fmt})
    try:
        _apply(spark, sink, snapshot, 0)
        _apply(spark, sink, updates, 1)
        assert calls == [False, True]
        want = [(r.key, r.value) for rows in (snapshot, updates)
                for r in formats.encode(changes_df(spark, DDL, rows), fmt, keys=["id"]).collect()]
        got = [(m["key"].decode(), m["value"].decode()) for m in sink.read().to_pylist()]
        assert sorted(got) == sorted(want) and len(got) == 20 + 3
    finally:
        sink.close()


def test_at_least_once(spark, kafka_broker):
    sink = _sink(kafka_broker, **{"sink.delivery-guarantee": "at-least-once"})
    try:
        _apply(spark, sink, [(1, "a", 1, "insert", 10)], 0)
        _apply(spark, sink, [(1, "a", 1, "update_preimage", 101),
                             (1, "a", 5, "update_postimage", 102)], 1)
        again = _sink(kafka_broker, topic=sink.topic, **{"sink.delivery-guarantee":
                                                         "at-least-once"})
        try:
            assert again.last_batch_id() == 1
            assert _apply(spark, again, [(1, "a", 5, "delete", 201)], 1).skipped
        finally:
            again.close()
        assert [json.loads(m["value"])["op"] for m in sink.read().to_pylist()] == ["r", "u"]
    finally:
        sink.close()


def test_an_unreachable_broker_is_one_clear_error(spark):
    port = free_port()  # nothing listens there
    sink = sinks.create("kafka", {"properties.bootstrap.servers": f"127.0.0.1:{port}",
                                  "topic": "x", "connect-timeout": "2"})
    with pytest.raises(ConnectionFailed) as e:
        _apply(spark, sink, [(1, "a", 1, "insert", 10)], 0)
    assert f"127.0.0.1:{port}" in e.value.message and "cannot reach" in e.value.message
    assert "properties.bootstrap.servers" in e.value.fix
    sink.close()


def test_a_missing_topic_without_auto_create(spark, kafka_broker):
    sink = _sink(kafka_broker, **{"sink.topic.auto-create": "false"})
    with pytest.raises(ConfigError) as e:
        _apply(spark, sink, [(1, "a", 1, "insert", 10)], 0)
    assert repr(sink.topic) in e.value.message and "does not exist" in e.value.message
    assert "sink.topic.auto-create: true" in e.value.fix
    admin = AdminClient({"bootstrap.servers": kafka_broker.bootstrap_servers})
    assert sink.topic not in admin.list_topics(timeout=10).topics  # nothing made it
    sink.close()


def test_clients_do_not_rebootstrap_unless_told():
    """librdkafka's re-bootstrap (when every broker is down, e.g. a one-broker cluster
    restarting) strands a transaction in send_offsets_to_transaction (librdkafka issue
    5511): the sink's clients reconnect to the brokers they know instead
    (tests/faults/test_kafka.py restarts the broker under a stream); a user's setting wins."""
    import confluent_kafka as ck

    from sparkcdc.sinks.kafka.sink import REBOOTSTRAP_LIBRDKAFKA

    if ck.libversion()[1] < REBOOTSTRAP_LIBRDKAFKA:
        pytest.fail(f"librdkafka {ck.libversion()[0]} predates re-bootstrapping: this test "
                    "checks nothing with it")
    base = {"properties.bootstrap.servers": "127.0.0.1:1", "topic": "t.x"}
    conf = sinks.create("kafka", base)._client_config()
    assert conf["metadata.recovery.strategy"] == "none"
    told = sinks.create("kafka", {**base, "properties.metadata.recovery.strategy":
                                  "rebootstrap"})._client_config()
    assert told["metadata.recovery.strategy"] == "rebootstrap"


def test_watermarks_wait_out_a_partition_without_a_leader():
    """A topic just made answers ``NOT_LEADER_FOR_PARTITION`` until its leader is elected
    (CI met it reading a target back): the offsets are asked again; another error is not."""
    import confluent_kafka as ck

    from sparkcdc.sinks.kafka.client import watermarks

    class Consumer:
        def __init__(self, errors):
            self.errors, self.asked = list(errors), 0

        def get_watermark_offsets(self, tp, timeout):
            self.asked += 1
            if self.errors:
                raise KafkaException(KafkaError(self.errors.pop(0)))
            return 3, 9

    c = Consumer([KafkaError.NOT_LEADER_FOR_PARTITION, KafkaError.LEADER_NOT_AVAILABLE])
    assert watermarks(ck, c, "t", 0, 10) == (3, 9) and c.asked == 3
    c = Consumer([KafkaError.TOPIC_AUTHORIZATION_FAILED])
    with pytest.raises(KafkaException):
        watermarks(ck, c, "t", 0, 10)
    assert c.asked == 1
    c = Consumer([KafkaError.NOT_LEADER_FOR_PARTITION] * 1000)
    with pytest.raises(KafkaException):  # not for ever: until the timeout
        watermarks(ck, c, "t", 0, 0.5)
