"""The kafka sink's options: Flink CDC's names, the topic each target writes, what is
refused and why, and no secret in its repr. No broker needed."""

from __future__ import annotations

import pytest

from sparkcdc.errors import ConfigError
from sparkcdc.pipeline.definition.targets import check_sink_options, target_options
from sparkcdc.sinks.kafka.config import KafkaConfig, matches

BROKER = {"properties.bootstrap.servers": "b1:9092,b2:9092"}


def test_defaults_and_flinks_names():
    c = KafkaConfig.parse({**BROKER, "table-id": "shop.orders"})
    assert c.bootstrap_servers == "b1:9092,b2:9092"
    assert (c.value_format, c.key_format, c.partition_strategy) == ("debezium-json", "json",
                                                                  "hash-by-key")
    assert c.exactly_once and not c.tombstones and c.auto_create
    assert c.target_topic == "shop.orders"
    assert c.transactional_id == "sparkcdc-sparkcdc-shop.orders"
    c = KafkaConfig.parse({**BROKER, "table-id": "shop.orders", "value.format": "canal-json",
                           "partition.strategy": "all-to-zero",
                           "sink.delivery-guarantee": "at-least-once",
                           "sink.add-tableId-to-header-enabled": "true",
                           "sink.custom-header": "env:prod, team:data",
                           "sink.transactional-id-prefix": "etl", "app-id": "p.shop.orders",
                           "tombstones.on.delete": "true", "sink.topic.partitions": "6",
                           "sink.topic.config.cleanup.policy": "compact",
                           "properties.compression.type": "zstd"})
    assert c.value_format == "canal-json" and c.partition_strategy == "all-to-zero"
    assert not c.exactly_once and c.tombstones and c.table_id_headers
    assert c.custom_headers == (("env", "prod"), ("team", "data"))
    assert c.transactional_id == "etl-p.shop.orders-shop.orders"
    assert c.partitions == 6 and c.topic_config == {"cleanup.policy": "compact"}
    assert c.properties["compression.type"] == "zstd"


def test_topic_naming():
    assert KafkaConfig.parse({**BROKER, "topic": "all", "table-id": "a.b"}).target_topic == "all"
    mapping = {"sink.tableId-to-topic.mapping": "shop.orders:o;shop\\.*:rest;app.t_[0-9]+,app.v:ts"}
    assert KafkaConfig.parse({**BROKER, **mapping, "table-id": "shop.orders"}).target_topic == "o"
    assert KafkaConfig.parse({**BROKER, **mapping, "table-id": "shop.items"}).target_topic == "rest"
    assert KafkaConfig.parse({**BROKER, **mapping, "table-id": "app.t_12"}).target_topic == "ts"
    assert KafkaConfig.parse({**BROKER, **mapping, "table-id": "app.v"}).target_topic == "ts"
    assert KafkaConfig.parse({**BROKER, **mapping, "table-id": "app.u"}).target_topic == "app.u"
    assert matches("db[12].user_\\.*", "db2.user_x") and not matches("db[12].user_\\.*", "db3.user_x")
    assert matches("a.b, c.d", "c.d")


def test_rest_of_the_topic_naming_is_checked():
    with pytest.raises(ConfigError, match="needs the option 'topic'") as e:
        KafkaConfig.parse(BROKER)
    assert e.value.key == "topic"
    with pytest.raises(ConfigError, match="not a valid Kafka topic name") as e:
        KafkaConfig.parse({**BROKER, "table-id": "shop.order lines"})
    assert "route" in e.value.fix
    with pytest.raises(ConfigError, match="malformed entry 'shop.orders'"):
        KafkaConfig.parse({**BROKER, "table-id": "a.b",
                           "sink.tableId-to-topic.mapping": "shop.orders"})


@pytest.mark.parametrize("options,match,key", [
    ({}, "needs the option 'properties.bootstrap.servers'", "properties.bootstrap.servers"),
    ({**BROKER, "key.format": "csv"}, "only json is supported", "key.format"),
    ({**BROKER, "value.format": "avro"}, "one of debezium-json, canal-json, changelog-json",
     "value.format"),
    ({**BROKER, "debezium-json.include-schema.enabled": "true"}, "schema in each message",
     "debezium-json.include-schema.enabled"),
    ({**BROKER, "sink.delivery-guarantee": "none"}, "exactly-once, at-least-once",
     "sink.delivery-guarantee"),
    ({**BROKER, "properties.enable.idempotence": "false"}, "transactions .* need it",
     "properties.enable.idempotence"),
    ({**BROKER, "properties.transactional.id": "x"}, "cannot be set",
     "properties.transactional.id"),
    ({**BROKER, "properties.isolation.level": "read_uncommitted"}, "cannot be set",
     "properties.isolation.level"),
    ({**BROKER, "sink.custom-header": "novalue"}, "malformed entry 'novalue'",
     "sink.custom-header"),
    ({**BROKER, "sink.topic.partitions": "0"}, "out of range", "sink.topic.partitions"),
    ({**BROKER, "valeu.format": "canal-json"}, "did you mean 'value.format'", "valeu.format"),
])
def test_refusals_name_the_option(options, match, key):
    with pytest.raises(ConfigError, match=match) as e:
        KafkaConfig.parse({"table-id": "a.b", **options})
    assert e.value.key == key and e.value.fix


def test_at_least_once_allows_a_broker_without_idempotence():
    c = KafkaConfig.parse({**BROKER, "table-id": "a.b", "sink.delivery-guarantee":
                           "at-least-once", "properties.enable.idempotence": "false"})
    assert not c.exactly_once


def test_secrets_stay_out_of_the_repr():
    c = KafkaConfig.parse({**BROKER, "table-id": "a.b", "properties.sasl.password": "s3cret",
                           "properties.sasl.username": "etl"})
    assert "s3cret" not in repr(c) and "etl" in repr(c)


def test_in_a_pipeline_each_target_is_its_routed_name():
    opts = target_options("kafka", BROKER, "ods.orders", "shop-sync.shop.orders")
    c = KafkaConfig.parse(opts)
    assert c.target_topic == "ods.orders" and c.app_id == "shop-sync.shop.orders"
    assert c.transactional_id == "sparkcdc-shop-sync.shop.orders-ods.orders"
    check_sink_options("kafka", {**BROKER, "value.format": "changelog-json"})
    with pytest.raises(ConfigError, match="set by the pipeline") as e:
        check_sink_options("kafka", {**BROKER, "table-id": "x.y"})
    assert e.value.key == "table-id"
