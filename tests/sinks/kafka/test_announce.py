"""Schema changes announced the way each format does it, against a real broker: Canal's DDL
message in every partition of the table's topic, between the rows before and after it;
Debezium's schema change event in its own topic; once, even when a restarted run makes the
change again; nothing for changelog-json or with include.schema.changes false. The kafka
source reads the announcements as messages without rows."""

from __future__ import annotations

import json
import uuid

from sink_support import changes_df

from sparkcdc import sinks
from sparkcdc.apply import apply_changes
from sparkcdc.core.schema import Column, TableId, TableSchema
from sparkcdc.formats.messages import decode_message
from sparkcdc.sinks.kafka.sink import read_topic

BEFORE = TableSchema(TableId("shop", "items"),
                     (Column("id", "int(11)", False), Column("qty", "int(11)")), ("id",), "id")
AFTER = TableSchema(TableId("shop", "items"),
                    (*BEFORE.columns, Column("note", "varchar(10)", charset="utf8mb4"),
                     Column("price", "decimal(12,2) unsigned", False),
                     Column("size", "enum('s','m','l')")), ("id",), "id")
ALTER = ("ALTER TABLE items ADD COLUMN note VARCHAR(10), ADD COLUMN price DECIMAL(12,2) UNSIGNED "
         + "NOT NULL, ADD COLUMN size ENUM('s','m','l')",)
COLUMNS = ("id", "qty", "note", "price", "size")
DIFF = {"added": ("note", "price", "size"), "dropped": (), "modified": ()}


def _sink(broker, fmt, **options):
    topic = options.pop("topic", None) or f"t_{uuid.uuid4().hex[:8]}"
    options = {"value.format": fmt, "table-id": "shop.items",
               "app-id": f"a{uuid.uuid4().hex[:6]}", **options}
    return sinks.create("kafka", broker.info.sink_options(topic=topic, **options))


def _topic(broker, topic):
    sink = sinks.create("kafka", broker.info.sink_options(topic=topic))
    try:
        return read_topic(sink._ck, sink._client_config(), topic, 30)
    finally:
        sink.close()


def _before(spark, sink, batch_id, seq):
    rows = [(i, i, "insert", seq + i) for i in range(1, 13)]
    return apply_changes(changes_df(spark, "id int, qty int", rows, table="items"), batch_id,
                         sink, keys=["id"])


def _after(spark, sink, batch_id, seq):
    rows = [(i, i, "x", 1.5, "m", "insert", seq + i) for i in range(100, 112)]
    df = changes_df(spark, "id int, qty int, note string, price double, size string", rows,
                    table="items")
    return apply_changes(df, batch_id, sink, keys=["id"])


def test_canal_announces_in_every_partition_between_the_rows(spark, kafka_broker):
    options = {"sink.topic.partitions": "3"}
    sink = _sink(kafka_broker, "canal-json", **options)
    topic, app = sink.topic, sink.config.app_id
    try:
        _before(spark, sink, 0, 10)
        sink.announce(AFTER, ALTER, COLUMNS, DIFF)
    finally:
        sink.close()
    # a run stopped after the announcement and before its checkpoint makes the change again
    again = _sink(kafka_broker, "canal-json", topic=topic, **options, **{"app-id": app})
    try:
        again.announce(AFTER, ALTER, COLUMNS, DIFF)
        _after(spark, again, 1, 200)
        assert again.last_batch_id() == 1  # the announcements kept the batch id
    finally:
        again.close()
    msgs = _topic(kafka_broker, topic)
    by_part: dict[int, list[dict]] = {}
    for m in msgs:
        by_part.setdefault(m["partition"], []).append(json.loads(m["value"]))
    assert sorted(by_part) == [0, 1, 2]
    for part, values in by_part.items():
        ddl = [i for i, v in enumerate(values) if v["isDdl"]]
        assert len(ddl) == 1, f"partition {part}: {len(ddl)} announcements"
        d = values[ddl[0]]
        assert (d["type"], d["sql"], d["database"], d["table"], d["data"]) == (
            "ALTER", ALTER[0], "shop", "items", None)
        assert all("note" not in v["data"][0] for v in values[:ddl[0]])
        assert all("note" in v["data"][0] for v in values[ddl[0] + 1:])
        assert decode_message("canal-json", None, json.dumps(d).encode()) == []
    assert sum(len(v) for v in by_part.values()) == 12 + 12 + 3


def test_debezium_announces_in_its_own_topic_once(spark, kafka_broker):
    schema_topic = f"changes_{uuid.uuid4().hex[:8]}"
    sink = _sink(kafka_broker, "debezium-json", **{"schema.changes.topic": schema_topic})
    topic, app = sink.topic, sink.config.app_id
    try:
        _before(spark, sink, 0, 10)
        sink.announce(AFTER, ALTER, COLUMNS, DIFF)
        sink.announce(AFTER, ALTER, COLUMNS, DIFF)  # the same change again: skipped
    finally:
        sink.close()
    again = _sink(kafka_broker, "debezium-json", topic=topic,
                  **{"schema.changes.topic": schema_topic, "app-id": app})
    try:
        again.announce(AFTER, ALTER, COLUMNS, DIFF)  # after a restart too
        # a change found when a run started again, no statement: written from the diff
        narrower = TableSchema(AFTER.table_id, AFTER.columns[:4], ("id",), "id")
        again.announce(narrower, (), COLUMNS[:4], {"added": (), "dropped": ("size",),
                                                   "modified": ()})
        _after(spark, again, 1, 200)
    finally:
        again.close()
    events = [json.loads(m["value"]) for m in _topic(kafka_broker, schema_topic)]
    keys = [json.loads(m["key"]) for m in _topic(kafka_broker, schema_topic)]
    assert [e["ddl"] for e in events] == [ALTER[0],
                                         "ALTER TABLE `shop`.`items` DROP COLUMN `size`"]
    assert keys == [{"databaseName": "shop"}] * 2
    first = events[0]
    assert (first["databaseName"], first["source"]["db"], first["source"]["table"]) == (
        "shop", "shop", "items")
    [change] = first["tableChanges"]
    assert (change["type"], change["id"]) == ("ALTER", '"shop"."items"')
    assert change["table"]["primaryKeyColumnNames"] == ["id"]
    cols = {c["name"]: c for c in change["table"]["columns"]}
    assert [c["name"] for c in change["table"]["columns"]] == list(COLUMNS)
    assert (cols["id"]["typeName"], cols["id"]["jdbcType"], cols["id"]["optional"]) == (
        "INT", 4, False)
    assert (cols["note"]["typeName"], cols["note"]["length"], cols["note"]["charsetName"]) == (
        "VARCHAR", 10, "utf8mb4")
    assert (cols["price"]["typeName"], cols["price"]["length"], cols["price"]["scale"],
            cols["price"]["optional"]) == ("DECIMAL UNSIGNED", 12, 2, False)
    assert cols["size"]["enumValues"] == ["s", "m", "l"]
    assert [c["position"] for c in change["table"]["columns"]] == [1, 2, 3, 4, 5]
    assert len(events[1]["tableChanges"][0]["table"]["columns"]) == 4
    # the table's own topic holds its rows only; a source reading either skips the events
    assert all(json.loads(m["value"])["op"] in ("r", "c") for m in _topic(kafka_broker, topic))
    assert decode_message("debezium-json", None, json.dumps(first).encode()) == []


def test_no_announcement_for_changelog_json_or_when_switched_off(spark, kafka_broker):
    for fmt, extra in (("changelog-json", {}),
                       ("canal-json", {"include.schema.changes": "false"})):
        sink = _sink(kafka_broker, fmt, **extra)
        try:
            _before(spark, sink, 0, 10)
            sink.announce(AFTER, ALTER, COLUMNS, DIFF)
            _after(spark, sink, 1, 200)
            assert len(_topic(kafka_broker, sink.topic)) == 24, fmt
        finally:
            sink.close()
