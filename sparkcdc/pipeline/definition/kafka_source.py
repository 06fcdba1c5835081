"""The ``kafka`` source's options, as the pipeline definition reads them
(``KafkaSourceConfig``): Flink's Kafka connector keys (``properties.bootstrap.servers``,
``topic`` / ``topic-pattern``, ``value.format``, ``scan.startup.mode`` and its companions,
``properties.group.id``) and Kafka Connect's error handling (``errors.tolerance``,
``errors.deadletterqueue.topic.name``). The reading itself is the kafka room's
(``pipeline/kafka/reader.py``).
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from sparkcdc.errors import ConfigError
from sparkcdc.options import Opt, Options

FORMATS = ("debezium-json", "canal-json", "changelog-json")
STARTUP_MODES = ("earliest-offset", "latest-offset", "group-offsets", "timestamp",
                 "specific-offsets")
TOLERANCES = ("none", "all")
PREFIXES = ("properties.",)

OPTIONS = {
    "topic": Opt(None, "the topics to read, separated by ';' (or topic-pattern)"),
    "topic-pattern": Opt(None, "a regular expression: every topic whose whole name matches"),
    "value.format": Opt("debezium-json", "one of " + ", ".join(FORMATS)),
    "debezium-json.schema-include": Opt("false", "true or false: each message has Kafka "
                                                 "Connect's schema (read either way)"),
    "scan.startup.mode": Opt("earliest-offset", "one of " + ", ".join(STARTUP_MODES)),
    "scan.startup.timestamp-millis": Opt(None, "milliseconds since the epoch, for "
                                               "scan.startup.mode timestamp"),
    "scan.startup.specific-offsets": Opt(None, "'partition:0,offset:42;partition:1,offset:"
                                               "300', for scan.startup.mode specific-offsets"),
    "scan.topic-partition-discovery.interval": Opt(None, "accepted: new partitions and topics "
                                                         "are looked for before every batch"),
    "primary-keys": Opt(None, "'db.table:id;db.other_\\.*:id,sku': the key columns of tables "
                              "whose messages do not name them"),
    "tables": Opt(None, "table patterns (db.table, Flink's syntax): only these tables' "
                        "changes are applied (default: every table in the topics)"),
    "errors.tolerance": Opt("none", "none (a bad message fails the pipeline) or all (it goes "
                                    "to errors.deadletterqueue.topic.name)"),
    "errors.deadletterqueue.topic.name": Opt(None, "the topic bad messages go to, with "
                                                   "errors.tolerance: all"),
    "maxOffsetsPerTrigger": Opt(None, "a positive integer: at most this many offsets per "
                                      "micro-batch, over every partition"),
    "connect-timeout": Opt("30", "seconds, a positive integer: how long to wait for the "
                                 "brokers"),
}
# librdkafka properties the source sets itself
OWN_PROPERTIES = {
    "isolation.level": "the source reads read_committed, always",
    "enable.auto.commit": "positions are kept in the pipeline's checkpoint",
    "auto.offset.reset": "where to start is scan.startup.mode",
}
# Flink keys that would make a bad message pass silently
REFUSED = {
    "debezium-json.ignore-parse-errors": "errors.tolerance: all with "
                                         "errors.deadletterqueue.topic.name",
    "canal-json.ignore-parse-errors": "errors.tolerance: all with "
                                      "errors.deadletterqueue.topic.name",
    "value.debezium-json.ignore-parse-errors": "errors.tolerance: all with "
                                               "errors.deadletterqueue.topic.name",
}


@dataclass(frozen=True)
class KafkaSourceConfig:
    properties: Mapping[str, str]
    topics: tuple[str, ...] = ()
    topic_pattern: str | None = None
    value_format: str = "debezium-json"
    startup_mode: str = "earliest-offset"
    startup_timestamp: int | None = None
    specific_offsets: tuple[tuple[str | None, int, int], ...] = ()  # (topic, partition, offset)
    primary_keys: tuple[tuple[str, tuple[str, ...]], ...] = ()  # (selector, keys)
    tables: str | None = None
    tolerate_errors: bool = False
    dead_letter_topic: str | None = None
    max_offsets: int | None = None
    connect_timeout: int = 30
    group_id: str | None = field(default=None)

    def __repr__(self) -> str:  # never a password
        return (f"KafkaSourceConfig(brokers={self.bootstrap_servers!r}, topics={self.topics}, "
                f"pattern={self.topic_pattern!r}, format={self.value_format!r})")

    @property
    def bootstrap_servers(self) -> str:
        return self.properties["bootstrap.servers"]

    @property
    def what(self) -> str:
        return (f"topic(s) {', '.join(self.topics)}" if self.topics
                else f"topics matching {self.topic_pattern!r}")

    @classmethod
    def parse(cls, options: Mapping[str, Any]) -> KafkaSourceConfig:
        for name, instead in REFUSED.items():
            if name in options:
                raise ConfigError(f"option '{name}' of the kafka source would skip bad "
                                  "messages silently", fix=f"use {instead} (bad messages are "
                                  "kept there, each with its topic, partition and offset)",
                                  key=name)
        o = Options("kafka source", OPTIONS, options, prefixes=PREFIXES)
        props = dict(o.prefixed["properties."])
        if not props.get("bootstrap.servers", "").strip():
            raise ConfigError("the kafka source needs the option 'properties.bootstrap.servers'",
                              fix="the brokers to read from, e.g. 'broker1:9092,broker2:9092'",
                              key="properties.bootstrap.servers")
        for name, why in OWN_PROPERTIES.items():
            if name in props:
                raise ConfigError(f"option 'properties.{name}' of the kafka source cannot be "
                                  "set", fix=f"leave it out: {why}", key=f"properties.{name}")
        topics = tuple(t.strip() for t in (o.text("topic") or "").split(";") if t.strip())
        pattern = o.text("topic-pattern")
        if bool(topics) == bool(pattern):
            raise ConfigError("the kafka source needs one of 'topic' and 'topic-pattern'",
                              fix="topic: shop.orders;shop.items, or topic-pattern: shop\\..*",
                              key="topic")
        if pattern:
            try:
                re.compile(pattern)
            except re.error as e:
                raise o.bad("topic-pattern", f"is not a valid regular expression ({e})") from None
        mode = o.choice("scan.startup.mode", STARTUP_MODES)
        ts = o.integer("scan.startup.timestamp-millis", lo=0)
        if mode == "timestamp" and ts is None:
            raise o.bad("scan.startup.timestamp-millis", "is required with scan.startup.mode "
                        "timestamp", fix="milliseconds since the epoch, e.g. 1700000000000")
        specific = _specific_offsets(o)
        if mode == "specific-offsets" and not specific:
            raise o.bad("scan.startup.specific-offsets", "is required with scan.startup.mode "
                        "specific-offsets", fix="e.g. partition:0,offset:42;partition:1,offset:300")
        if mode == "group-offsets" and not props.get("group.id"):
            raise ConfigError("scan.startup.mode group-offsets needs properties.group.id",
                              fix="name the consumer group whose committed offsets to start "
                                  "from", key="properties.group.id")
        tolerate = o.choice("errors.tolerance", TOLERANCES) == "all"
        dlq = o.text("errors.deadletterqueue.topic.name")
        if tolerate and not dlq:
            raise ConfigError("errors.tolerance: all needs errors.deadletterqueue.topic.name",
                              fix="name the topic bad messages go to: nothing is dropped "
                                  "silently", key="errors.deadletterqueue.topic.name")
        if dlq and not tolerate:
            raise ConfigError("errors.deadletterqueue.topic.name is set, but errors.tolerance "
                              "is none (a bad message fails the pipeline)",
                              fix="set errors.tolerance: all to send bad messages there",
                              key="errors.tolerance")
        return cls(properties=props, topics=topics, topic_pattern=pattern,
                   value_format=o.choice("value.format", FORMATS), startup_mode=mode,
                   startup_timestamp=ts, specific_offsets=specific,
                   primary_keys=_primary_keys(o), tables=o.text("tables"),
                   tolerate_errors=tolerate, dead_letter_topic=dlq,
                   max_offsets=o.integer("maxOffsetsPerTrigger", lo=1),
                   connect_timeout=o.integer("connect-timeout", lo=1) or 30,
                   group_id=props.get("group.id"))


def _specific_offsets(o: Options) -> tuple[tuple[str | None, int, int], ...]:
    text = o.text("scan.startup.specific-offsets")
    if not text:
        return ()
    out = []
    for part in text.split(";"):
        if not part.strip():
            continue
        fields = dict(f.split(":", 1) for f in part.split(",") if ":" in f)
        try:
            out.append((fields.get("topic", "").strip() or None, int(fields["partition"]),
                        int(fields["offset"])))
        except (KeyError, ValueError):
            raise o.bad("scan.startup.specific-offsets", f"has the malformed entry "
                        f"{part.strip()!r}", fix="partition:<n>,offset:<n> (optionally "
                        "topic:<name>,) separated by ';'") from None
    return tuple(out)


def _primary_keys(o: Options) -> tuple[tuple[str, tuple[str, ...]], ...]:
    text = o.text("primary-keys")
    if not text:
        return ()
    out = []
    for part in text.split(";"):
        sel, colon, cols = part.partition(":")
        names = tuple(c.strip() for c in cols.split(",") if c.strip())
        if not colon or not sel.strip() or not names:
            raise o.bad("primary-keys", f"has the malformed entry {part.strip()!r}",
                        fix="db.table:col1,col2 entries separated by ';'")
        out.append((sel.strip(), names))
    return tuple(out)
