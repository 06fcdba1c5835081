"""A kafka target "emptied" is a truncate event, against a real broker: Debezium's ``op: t``
or Canal's ``TRUNCATE`` DDL message, naming the source table, in every partition of the
topic between the rows before and the rows after it (partition 0 only under
``all-to-zero``), in a transaction of its own that keeps the marker's batch; done twice
when a run stopped before its checkpoint empties again. The kafka source decodes it as a
truncate. Flink's changelog-json has none, and says so with the fix."""

from __future__ import annotations

import json

import pytest
from sink_support import change_rows, kafka_sink, topic_messages

from sparkcdc.errors import SchemaError
from sparkcdc.formats.messages import TRUNCATE, decode_message


def is_truncate(fmt: str, value: dict) -> bool:
    return value["op"] == "t" if fmt == "debezium-json" else value["type"] == "TRUNCATE"


@pytest.mark.parametrize("fmt,strategy", [("debezium-json", "hash-by-key"),
                                          ("canal-json", "hash-by-key"),
                                          ("debezium-json", "all-to-zero")])
def test_emptied_is_a_truncate_event_in_every_partition_between_the_rows(
        kafka_broker, fmt, strategy):
    options = {"sink.topic.partitions": "3", "partition.strategy": strategy}
    sink = kafka_sink(kafka_broker, fmt, **options)
    topic, app = sink.topic, sink.config.app_id
    try:
        sink.write_changelog(change_rows(list(range(1, 13)), 10), 0, ("id",))
        sink.empty()
        assert sink.last_batch_id() == 0  # the truncate kept the marker's batch
    finally:
        sink.close()
    # a run stopped after the truncate and before its checkpoint empties again on restart
    again = kafka_sink(kafka_broker, fmt, topic=topic, app=app, **options)
    try:
        again.empty()
        again.write_changelog(change_rows(list(range(100, 112)), 200), 1, ("id",))
        assert again.last_batch_id() == 1
    finally:
        again.close()

    by_part: dict[int, list[tuple[bytes | None, dict]]] = {}
    for m in topic_messages(kafka_broker, topic):
        by_part.setdefault(m["partition"], []).append((m["key"], json.loads(m["value"])))
    want = [0] if strategy == "all-to-zero" else [0, 1, 2]
    assert sorted(by_part) == want
    seen_rows = set()
    for part, msgs in by_part.items():
        cut = [i for i, (_k, v) in enumerate(msgs) if is_truncate(fmt, v)]
        assert len(cut) == 2 and cut[1] == cut[0] + 1, f"partition {part}: truncates at {cut}"
        before = [v for _k, v in msgs[:cut[0]]]
        after = [v for _k, v in msgs[cut[1] + 1:]]
        ids = ((lambda v: v["after"]["id"]) if fmt == "debezium-json"
               else (lambda v: int(v["data"][0]["id"])))
        assert all(ids(v) < 100 for v in before) and all(ids(v) >= 100 for v in after)
        seen_rows |= {ids(v) for v in before + after}
        key, t = msgs[cut[0]]
        if fmt == "debezium-json":
            assert key is None  # as Debezium's
            assert (t["before"], t["after"], t["source"]["db"], t["source"]["table"]) == (
                None, None, "shop", "items")
            assert t["ts_ms"] == t["source"]["ts_ms"] > 0
        else:
            assert (t["isDdl"], t["sql"], t["database"], t["table"], t["data"]) == (
                True, "TRUNCATE TABLE `shop`.`items`", "shop", "items", None)
        (c,) = decode_message(fmt, key, json.dumps(t).encode())
        assert (c.kind, c.database, c.table, c.row) == (TRUNCATE, "shop", "items", {})
    assert seen_rows == set(range(1, 13)) | set(range(100, 112))


def test_changelog_json_cannot_be_emptied_and_says_how(kafka_broker):
    sink = kafka_sink(kafka_broker, "changelog-json")
    try:
        with pytest.raises(SchemaError) as e:
            sink.empty()
    finally:
        sink.close()
    msg = str(e.value)
    assert "changelog-json" in msg and "truncate" in msg
    assert "debezium-json" in msg and "canal-json" in msg and "new checkpoint" in msg
