"""Typed options of the ``kafka`` sink.

The names are those of Flink CDC's Kafka pipeline sink where it has one (``value.format``,
``key.format``, ``partition.strategy``, ``topic``, ``sink.tableId-to-topic.mapping``,
``sink.add-tableId-to-header-enabled``, ``sink.custom-header``, ``sink.delivery-guarantee``,
``properties.*``), Flink's Kafka connector's ``sink.transactional-id-prefix``, and
Debezium's ``tombstones.on.delete`` and ``include.schema.changes``. Two differ in their default, and say so in
docs/sinks.md: ``sink.delivery-guarantee`` is ``exactly-once`` (Flink: at-least-once) and
``partition.strategy`` is ``hash-by-key`` (Flink: all-to-zero), so every change of a row
lands in one partition, in order.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from sparkcdc.errors import ConfigError
from sparkcdc.options import Opt, Options
from sparkcdc.sinks.base import set_per_target

VALUE_FORMATS = ("debezium-json", "canal-json", "changelog-json")
KEY_FORMATS = ("json",)
STRATEGIES = ("hash-by-key", "all-to-zero")
GUARANTEES = ("exactly-once", "at-least-once")
PREFIXES = ("properties.", "sink.topic.config.")

OPTIONS = {
    "value.format": Opt("debezium-json", "one of " + ", ".join(VALUE_FORMATS)),
    "key.format": Opt("json", "json (the key columns as one JSON object)"),
    "partition.strategy": Opt("hash-by-key", "hash-by-key (a row's changes in one partition, "
                                             "in order) or all-to-zero"),
    "topic": Opt(None, "one topic for every table (default: each table its own topic, named "
                       "by its routed name db.table)"),
    "sink.tableId-to-topic.mapping": Opt(None, "'db.table:topic;db.other_\\.*:topic2': the "
                                               "topic of the tables a selector matches"),
    "sink.add-tableId-to-header-enabled": Opt("false", "true or false: headers namespace, "
                                                       "schemaName and tableName"),
    "sink.custom-header": Opt(None, "'key1:value1,key2:value2': headers on every message"),
    "sink.delivery-guarantee": Opt("exactly-once", "exactly-once (Kafka transactions) or "
                                                   "at-least-once"),
    "sink.transactional-id-prefix": Opt("sparkcdc", "the prefix of the transactional ids "
                                                    "(and marker groups) of the sink"),
    "debezium-json.include-schema.enabled": Opt("false", "false (a schema in each message is "
                                                         "not written)"),
    "include.schema.changes": Opt("true", "true or false: announce a source table's schema "
                                          "changes as the format does (canal-json: a DDL "
                                          "message in the table's topic; debezium-json: an "
                                          "event in schema.changes.topic)"),
    "schema.changes.topic": Opt(None, "the topic of debezium-json's schema change events "
                                      "(default: <sink.transactional-id-prefix>"
                                      ".schema-changes)"),
    "tombstones.on.delete": Opt("false", "true or false: a null-valued message after each "
                                         "delete, for compacted topics"),
    "sink.topic.auto-create": Opt("true", "true or false: create a missing topic"),
    "sink.topic.partitions": Opt(None, "partitions of a topic the sink creates (default: the "
                                       "broker's num.partitions)"),
    "sink.topic.replication-factor": Opt(None, "replicas of a topic the sink creates "
                                               "(default: the broker's)"),
    "table-id": Opt(None, "the target's name db.table (in a pipeline: each table's routed "
                          "name, set by the pipeline)"),
    "source-table": Opt(None, "the source table db.table whose changes the target takes (in a "
                              "pipeline: set by the pipeline; default: table-id): a truncate "
                              "event names it, as the rows' source block does"),
    "app-id": Opt("sparkcdc", "the application id: names the transactional id and the "
                              "marker group that hold the last batch id"),
    "connect-timeout": Opt("30", "seconds, a positive integer: how long to wait for the "
                                 "brokers"),
}

# properties the sink sets itself, or that would break what it promises
OWN_PROPERTIES = {
    "transactional.id": "set by the sink from sink.transactional-id-prefix, app-id and topic",
    "group.id": "the sink's marker group is its transactional id",
    "isolation.level": "the sink reads its markers read_committed",
    "enable.auto.commit": "the sink commits its markers itself",
}
_TOPIC = re.compile(r"[a-zA-Z0-9._-]{1,249}")


@dataclass(frozen=True)
class KafkaConfig:
    properties: Mapping[str, str]
    table_id: str | None = None
    topic: str | None = None
    topic_mapping: tuple[tuple[str, str], ...] = ()
    value_format: str = "debezium-json"
    key_format: str = "json"
    partition_strategy: str = "hash-by-key"
    table_id_headers: bool = False
    custom_headers: tuple[tuple[str, str], ...] = ()
    exactly_once: bool = True
    transactional_id_prefix: str = "sparkcdc"
    tombstones: bool = False
    include_schema_changes: bool = True
    schema_changes_topic: str | None = None
    auto_create: bool = True
    partitions: int | None = None
    replication_factor: int | None = None
    topic_config: Mapping[str, str] = field(default_factory=dict)
    app_id: str = "sparkcdc"
    connect_timeout: int = 30
    source_table: str | None = None  # the source table, named by a truncate event

    def __repr__(self) -> str:  # never print a password or a secret property
        shown = {k: ("******" if _secret(k) else v) for k, v in self.properties.items()}
        return (f"KafkaConfig(properties={shown}, topic={self.target_topic!r}, "
                f"value_format={self.value_format!r}, exactly_once={self.exactly_once})")

    @property
    def bootstrap_servers(self) -> str:
        return self.properties["bootstrap.servers"]

    @property
    def target_topic(self) -> str:
        """The topic this target's messages go to: ``topic``; else the first mapping whose
        selector matches the target's name; else the name itself."""
        if self.topic:
            return self.topic
        assert self.table_id is not None  # parse() checked
        for selector, topic in self.topic_mapping:
            if matches(selector, self.table_id):
                return topic
        return self.table_id

    @property
    def schema_topic(self) -> str:
        """The topic of debezium-json's schema change events (as Debezium's, named by the
        writer rather than by a table)."""
        return self.schema_changes_topic or f"{self.transactional_id_prefix}.schema-changes"

    @property
    def transactional_id(self) -> str:
        """Derived from the pipeline (its application id: ``<pipeline>.<db.table>``) and
        the target topic: a rerun of the same pipeline fences its own earlier producer, and
        two targets never share an id."""
        return f"{self.transactional_id_prefix}-{self.app_id}-{self.target_topic}"

    @classmethod
    def parse(cls, options: Mapping[str, Any]) -> KafkaConfig:
        o = Options("kafka sink", OPTIONS, options, prefixes=PREFIXES)
        props = dict(o.prefixed["properties."])
        if not props.get("bootstrap.servers", "").strip():
            raise ConfigError("the kafka sink needs the option 'properties.bootstrap.servers'",
                              fix="the brokers to connect to, e.g. 'broker1:9092,broker2:9092'",
                              key="properties.bootstrap.servers")
        for name, why in OWN_PROPERTIES.items():
            if name in props:
                raise ConfigError(f"option 'properties.{name}' of the kafka sink cannot be set",
                                  fix=f"leave it out: {why}", key=f"properties.{name}")
        exactly_once = o.choice("sink.delivery-guarantee", GUARANTEES) == "exactly-once"
        if exactly_once and props.get("enable.idempotence", "true").strip().lower() == "false":
            raise ConfigError("option 'properties.enable.idempotence' is false, but Kafka "
                              "transactions (sink.delivery-guarantee: exactly-once) need it",
                              fix="leave it out, or use sink.delivery-guarantee: at-least-once "
                                  "for brokers without idempotent producers",
                              key="properties.enable.idempotence")
        key_format = (o.get("key.format") or "").strip().lower()
        if key_format not in KEY_FORMATS:
            raise o.bad("key.format", f"is {key_format!r}; only json is supported",
                        fix="use key.format: json (Flink CDC's csv key format is not "
                            "implemented)")
        if o.flag("debezium-json.include-schema.enabled"):
            raise o.bad("debezium-json.include-schema.enabled", "is true; a Kafka Connect "
                        "schema in each message is not written by this sink",
                        fix="leave it false: messages carry the payload only (as Debezium's "
                            "JsonConverter with schemas.enable=false)")
        cfg = cls(
            properties=props, table_id=o.text("table-id"), topic=o.text("topic"),
            topic_mapping=_mapping(o, "sink.tableId-to-topic.mapping"),
            value_format=o.choice("value.format", VALUE_FORMATS), key_format=key_format,
            partition_strategy=o.choice("partition.strategy", STRATEGIES),
            table_id_headers=o.flag("sink.add-tableId-to-header-enabled"),
            custom_headers=_headers(o, "sink.custom-header"), exactly_once=exactly_once,
            transactional_id_prefix=o.text("sink.transactional-id-prefix") or "sparkcdc",
            tombstones=o.flag("tombstones.on.delete"),
            include_schema_changes=o.flag("include.schema.changes"),
            schema_changes_topic=o.text("schema.changes.topic"),
            auto_create=o.flag("sink.topic.auto-create"),
            partitions=o.integer("sink.topic.partitions", lo=1),
            replication_factor=o.integer("sink.topic.replication-factor", lo=1),
            topic_config=dict(o.prefixed["sink.topic.config."]),
            app_id=o.text("app-id") or "sparkcdc",
            source_table=o.text("source-table"),
            connect_timeout=o.integer("connect-timeout", lo=1) or 30)
        if not cfg.topic and not cfg.table_id:
            raise ConfigError("the kafka sink needs the option 'topic' (or 'table-id', the "
                              "target's name db.table, which names its topic)",
                              fix="set topic: the topic to write; in a pipeline each table's "
                                  "routed name names it", key="topic")
        if cfg.schema_changes_topic and not _TOPIC.fullmatch(cfg.schema_changes_topic):
            raise ConfigError(f"{cfg.schema_changes_topic!r} is not a valid Kafka topic name "
                              "(letters, digits, '.', '_' and '-', at most 249)",
                              fix="rename it", key="schema.changes.topic")
        if not _TOPIC.fullmatch(cfg.target_topic):
            raise ConfigError(f"{cfg.target_topic!r} is not a valid Kafka topic name (letters, "
                              "digits, '.', '_' and '-', at most 249)",
                              fix="name the topic with a route (sink-table), "
                                  "sink.tableId-to-topic.mapping or topic",
                              key="topic" if cfg.topic else "table-id")
        return cfg


def _secret(name: str) -> bool:
    n = name.lower()
    return any(w in n for w in ("password", "secret", "jaas", "token", "key.pem", "credential"))


def _pairs(o: Options, key: str, sep: str, item: str) -> tuple[tuple[str, str], ...]:
    text = o.get(key)
    if not text:
        return ()
    out = []
    for part in text.split(sep):
        if not part.strip():
            continue
        left, colon, right = part.partition(":")
        if not colon or not left.strip() or not right.strip():
            raise o.bad(key, f"has the malformed entry {part.strip()!r}",
                        fix=f"'{key}' accepts {OPTIONS[key].accepts} ({item})")
        out.append((left.strip(), right.strip()))
    return tuple(out)


def _mapping(o: Options, key: str) -> tuple[tuple[str, str], ...]:
    pairs = _pairs(o, key, ";", "selector:topic, separated by ';'")
    for selector, _topic in pairs:
        try:
            matches(selector, "x.y")
        except re.error as e:
            raise o.bad(key, f"has the selector {selector!r}, which is not a valid pattern "
                             f"({e})") from None
    return pairs


def _headers(o: Options, key: str) -> tuple[tuple[str, str], ...]:
    return _pairs(o, key, ",", "key:value, separated by ','")


def matches(selector: str, table_id: str) -> bool:
    """Whether a Flink selector (``db.table``, each part a regular expression; the first
    unescaped '.' separates them and ``\\.`` is the regex 'any character') matches the
    name ``db.table``. Comma-separated selectors match if any does."""
    db, _, table = table_id.partition(".")
    for sel in selector.split(","):
        sel = sel.strip()
        i = 0
        while i < len(sel):
            if sel[i] == "\\":
                i += 2
                continue
            if sel[i] == ".":
                break
            i += 1
        dpat, tpat = sel[:i], sel[i + 1:] if i < len(sel) else ".*"
        if (re.fullmatch(dpat.replace("\\.", "."), db)
                and re.fullmatch(tpat.replace("\\.", "."), table)):
            return True
    return False


def target_options(options: Mapping[str, str], db: str, table: str) -> dict[str, str]:
    """A pipeline's Kafka destination: target ``db.table`` is topic ``db.table`` (or what
    ``topic`` or ``sink.tableId-to-topic.mapping`` say), one table's messages per target."""
    set_per_target("kafka", options, "table-id", "source-table")
    return {**options, "table-id": f"{db}.{table}"}
