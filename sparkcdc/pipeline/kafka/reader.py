"""The ``kafka`` source of a pipeline: the reading of Kafka offset ranges (its options are
the definition's: ``pipeline/definition/kafka_source.py``).

Reading is librdkafka's (confluent-kafka), always ``read_committed``: a transaction's
messages (the ``kafka`` sink's, Flink's exactly-once sinks') are read once it committed, an
aborted one never.

A micro-batch is a range of offsets per topic-partition, ``[start, end)``, planned on the
driver (``plan``) and written to the checkpoint before it is read (``kafka/runner.py``).
``end`` is the partition's last stable offset at planning time (the high watermark a
``read_committed`` consumer is given), so a replayed batch reads the very same messages.
"""

from __future__ import annotations

import logging
import re
import time
from dataclasses import dataclass
from typing import Any

from sparkcdc.errors import ConfigError, ConnectionFailed
from sparkcdc.pipeline.definition.kafka_source import KafkaSourceConfig
from sparkcdc.sinks.kafka.client import watermarks

log = logging.getLogger("sparkcdc.pipeline.kafka")

@dataclass
class Message:
    topic: str
    partition: int
    offset: int
    key: bytes | None
    value: bytes | None
    timestamp: int | None = None


def tp_name(topic: str, partition: int) -> str:
    return f"{topic}:{partition}"


def split_tp(name: str) -> tuple[str, int]:
    topic, _, p = name.rpartition(":")
    return topic, int(p)


class KafkaReader:
    """Plans and reads offset ranges of the source's topics (``read_committed``)."""

    def __init__(self, config: KafkaSourceConfig):
        import confluent_kafka as ck  # the kafka extra; loaded when a kafka source runs

        from sparkcdc.sinks.kafka.client import LIBRDKAFKA_LOG

        self.ck = ck
        self.config = config
        self._log = LIBRDKAFKA_LOG
        self._consumer = None
        self._producer: Any = None  # confluent_kafka.Producer, made for the first bad message

    def _conf(self, **extra: Any) -> dict[str, Any]:
        conf: dict[str, Any] = dict(self.config.properties)
        conf.setdefault("socket.connection.setup.timeout.ms",
                        str(self.config.connect_timeout * 1000))
        conf.setdefault("group.id", "sparkcdc-kafka-source")  # never committed to by default
        conf.update({"logger": self._log, "isolation.level": "read_committed",
                     "enable.auto.commit": False, "enable.auto.offset.store": False,
                     "enable.partition.eof": True, "auto.offset.reset": "error"})
        conf.update(extra)
        return conf

    @property
    def consumer(self):
        if self._consumer is None:
            self._consumer = self.ck.Consumer(self._conf())
        return self._consumer

    def unreachable(self, e: Exception, doing: str) -> ConnectionFailed:
        return ConnectionFailed(
            f"the kafka source cannot reach the brokers at {self.config.bootstrap_servers} "
            f"({doing}): {_text(e)}",
            fix="check properties.bootstrap.servers and that the brokers run and are reachable "
                "from here (listeners, advertised.listeners, security settings)")

    def partitions(self) -> list[tuple[str, int]]:
        """Every topic-partition the source reads now (a ``topic`` that does not exist is
        an error naming it; a pattern may match none yet)."""
        c = self.config
        try:
            meta = self.consumer.list_topics(timeout=c.connect_timeout)
        except self.ck.KafkaException as e:
            raise self.unreachable(e, "asking for the cluster's metadata") from None
        out = []
        if c.topics:
            for t in c.topics:
                tm = meta.topics.get(t)
                if tm is None or tm.error is not None or not tm.partitions:
                    raise ConfigError(
                        f"the kafka source's topic {t!r} does not exist on the brokers at "
                        f"{c.bootstrap_servers}", fix="check the name (topic), create the topic, "
                        "or start the system that writes it first", key="topic")
                out += [(t, p) for p in sorted(tm.partitions)]
        else:
            rx = re.compile(c.topic_pattern or "")
            for t in sorted(meta.topics):
                tm = meta.topics[t]
                if rx.fullmatch(t) and not t.startswith("__") and tm.error is None:
                    out += [(t, p) for p in sorted(tm.partitions)]
        return out

    def bounds(self, tp: tuple[str, int]) -> tuple[int, int]:
        """The partition's first offset and its last stable one (``read_committed``)."""
        try:
            return watermarks(self.ck, self.consumer, *tp, self.config.connect_timeout)
        except self.ck.KafkaException as e:
            raise self.unreachable(e, f"asking for the offsets of {tp_name(*tp)}") from None

    def startup(self, tps: list[tuple[str, int]]) -> dict[str, int]:
        """Where each partition starts when the checkpoint has no position yet
        (``scan.startup.mode``)."""
        c = self.config
        out: dict[str, int] = {}
        if c.startup_mode == "timestamp":
            got = self.consumer.offsets_for_times(
                [self.ck.TopicPartition(t, p, c.startup_timestamp or 0) for t, p in tps],
                timeout=c.connect_timeout)
            for tp in got:
                out[tp_name(tp.topic, tp.partition)] = (
                    tp.offset if tp.offset >= 0 else self.bounds((tp.topic, tp.partition))[1])
            return out
        committed: dict[str, int] = {}
        if c.startup_mode == "group-offsets":
            got = self.consumer.committed([self.ck.TopicPartition(t, p) for t, p in tps],
                                          timeout=c.connect_timeout)
            committed = {tp_name(tp.topic, tp.partition): tp.offset for tp in got
                         if tp.offset >= 0}
        for t, p in tps:
            lo, hi = self.bounds((t, p))
            name = tp_name(t, p)
            if c.startup_mode == "latest-offset":
                out[name] = hi
            elif c.startup_mode == "specific-offsets":
                given = [off for topic, part, off in c.specific_offsets
                         if part == p and topic in (None, t)]
                out[name] = max(given[0], lo) if given else lo
            else:  # earliest, and a partition the group never committed
                out[name] = committed.get(name, lo)
        return out

    def plan(self, start: dict[str, int]) -> tuple[dict[str, int], dict[str, int]]:
        """The next batch's range: ``start`` (completed with new partitions, from their
        beginning, and with the startup offsets of a first batch) to each partition's
        last stable offset, at most ``maxOffsetsPerTrigger`` offsets in all."""
        tps = self.partitions()
        first = not start
        known = dict(start)
        new = [tp for tp in tps if tp_name(*tp) not in known]
        if new:
            if first:
                known.update(self.startup(new))
            else:
                for tp in new:  # a partition or topic that appeared since: all of it
                    known[tp_name(*tp)] = self.bounds(tp)[0]
        end: dict[str, int] = {}
        budget = self.config.max_offsets
        for tp in tps:
            name = tp_name(*tp)
            lo, hi = self.bounds(tp)
            s = known[name]
            if s < lo:
                raise ConfigError(
                    f"the kafka source's next offset of {name} is {s}, but the partition now "
                    f"starts at {lo}: messages {s}..{lo - 1} were deleted (retention) before "
                    "they were read", fix="nothing can bring them back: read the table "
                    "again from its source, and start a new checkpoint.location; keep the "
                    "topic's retention longer than the pipeline is ever stopped")
            e = max(s, hi)
            if budget is not None:
                e = min(e, s + budget)
                budget -= e - s
            end[name] = e
        return known, end

    def read(self, start: dict[str, int], end: dict[str, int]) -> list[Message]:
        """Every committed message of the ranges ``[start, end)``, partition by partition,
        in offset order (aborted transactions and transaction markers are not messages)."""
        c = self.consumer
        ck = self.ck
        out: list[Message] = []
        for name in sorted(end):
            s, e = start[name], end[name]
            if e <= s:
                continue
            topic, part = split_tp(name)
            c.assign([ck.TopicPartition(topic, part, s)])
            deadline = time.monotonic() + max(60.0, self.config.connect_timeout)
            while True:
                if time.monotonic() > deadline:
                    raise ConnectionFailed(
                        f"the kafka source could not read {name} offsets {s}..{e - 1} in time",
                        fix="check the brokers; the batch is read again on the next attempt")
                m = c.poll(0.5)
                if m is None:
                    pos = c.position([ck.TopicPartition(topic, part)])[0].offset
                    if pos >= e:
                        break
                    continue
                if m.error():
                    if m.error().code() == ck.KafkaError._PARTITION_EOF:
                        if m.offset() >= e:
                            break
                        continue
                    raise self.unreachable(ck.KafkaException(m.error()),
                                           f"reading {name} at offset {s}")
                if m.offset() >= e:
                    break
                out.append(Message(topic, part, m.offset(), m.key(), m.value(),
                                   m.timestamp()[1]))
                if m.offset() + 1 >= e:
                    break
            c.unassign()
        return out

    def dead_letter(self, bad: list[tuple[Message, str]]) -> None:
        """Bad messages to the dead-letter topic, as they were, with where they came from and
        why in headers (Kafka Connect's header names), flushed before the batch commits."""
        topic = self.config.dead_letter_topic
        if not bad or topic is None:
            return
        if self._producer is None:
            self._producer = self.ck.Producer({**{k: v for k, v in self._conf().items()
                                                  if k in self.config.properties
                                                  or k in ("logger",)},
                                               "bootstrap.servers": self.config.bootstrap_servers})
        failed: list = []
        for m, why in bad:
            headers = [("__connect.errors.topic", m.topic.encode()),
                       ("__connect.errors.partition", str(m.partition).encode()),
                       ("__connect.errors.offset", str(m.offset).encode()),
                       ("__connect.errors.exception.message", why.encode())]
            self._producer.produce(topic, key=m.key, value=m.value, headers=headers,
                                   on_delivery=lambda err, _m: failed.append(err) if err else None)
        left = self._producer.flush(self.config.connect_timeout)
        if failed or left:
            raise ConnectionFailed(f"the kafka source could not write {len(bad)} bad "
                                   f"message(s) to the dead-letter topic {topic!r}: "
                                   f"{failed[0] if failed else 'not delivered in time'}",
                                   fix="check the brokers and the right to write that topic; "
                                       "the batch is read again on the next attempt")

    def commit_group(self, end: dict[str, int]) -> None:
        """With ``properties.group.id``: the group's offsets follow the batches applied (for
        monitoring lag with Kafka's tools; the checkpoint is what the pipeline resumes
        from)."""
        if not self.config.group_id or not end:
            return
        try:
            self.consumer.commit(offsets=[self.ck.TopicPartition(*split_tp(n), o)
                                          for n, o in end.items()], asynchronous=False)
        except self.ck.KafkaException as e:
            log.warning("kafka source: committing the group's offsets failed: %s", _text(e))

    def close(self) -> None:
        if self._consumer is not None:
            self._consumer.close()
        if self._producer is not None:
            self._producer.flush(5)
        self._consumer = self._producer = None


def _text(e: Exception) -> str:
    err: Any = e.args[0] if getattr(e, "args", None) else None
    s = err.str() if hasattr(err, "str") else str(e)
    return s.splitlines()[0] if s else type(e).__name__

