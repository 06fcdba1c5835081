"""librdkafka as the kafka sink uses it, apart from the sink's transactions: its own log
lines kept at debug level (a failure reaches the user as the sink's error), a topic read
back as a ``read_committed`` consumer sees it (``KafkaSink.read``, the tests), and a client
error's text and what it means for the run (``failure``: retry, fix the setup, or stop)."""

from __future__ import annotations

import json
import logging
import time
from typing import Any

import pyarrow as pa

from sparkcdc.errors import ConfigError, ConnectionFailed, PipelineFailed


def _librdkafka_log(logger: logging.Logger) -> logging.Logger:
    """librdkafka logs every refused connection and retry; they go to the debug log (a
    failure reaches the user as the sink's own error)."""
    quiet = logging.getLogger(logger.name + ".librdkafka")
    quiet.setLevel(logging.DEBUG)
    quiet.propagate = False
    quiet.addHandler(_DebugOf(logger))
    return quiet


class _DebugOf(logging.Handler):
    def __init__(self, target: logging.Logger):
        super().__init__()
        self.target = target

    def emit(self, record: logging.LogRecord) -> None:
        self.target.debug("librdkafka: %s", record.getMessage())


# librdkafka's own log lines, at debug level under the sink's logger (the kafka source uses
# it too)
LIBRDKAFKA_LOG = _librdkafka_log(logging.getLogger("sparkcdc.sinks.kafka"))


MESSAGES = pa.schema([("partition", pa.int32()), ("offset", pa.int64()), ("key", pa.binary()),
                      ("value", pa.binary()), ("timestamp", pa.int64()), ("headers", pa.string())])


def watermarks(ck: Any, consumer: Any, topic: str, partition: int, timeout: float
               ) -> tuple[int, int]:
    """A partition's low and high watermarks. While its leader is not known (a topic just
    made, its leader not yet elected: ``NOT_LEADER_FOR_PARTITION``; a leader moving) the
    broker is asked again until ``timeout`` has passed: librdkafka does not retry this
    request itself (and does not mark the error retriable). Any other error, or the last
    one, is raised."""
    deadline = time.monotonic() + timeout
    while True:
        try:
            lo, hi = consumer.get_watermark_offsets(ck.TopicPartition(topic, partition),
                                                    timeout=timeout)
            return int(lo), int(hi)
        except ck.KafkaException as e:
            err: Any = e.args[0] if e.args else None
            moving = {ck.KafkaError.NOT_LEADER_FOR_PARTITION, ck.KafkaError.LEADER_NOT_AVAILABLE}
            code = err.code() if hasattr(err, "code") else None
            if code not in moving or time.monotonic() >= deadline:
                raise
            time.sleep(0.2)


def read_topic(ck: Any, conf: dict, topic: str, timeout: float) -> list[dict]:
    """Every message of ``topic`` up to its end, as ``read_committed`` sees them (aborted
    transactions and the transaction markers left out), in partition and offset order.

    The end is each partition's log end when the read starts. A transaction's messages
    become readable a moment after its commit returns (the broker writes its markers into
    the partitions), and a read_committed consumer stops at the last stable offset until
    then: so the read goes on until it reaches that end, waiting out a transaction still
    open (up to ``timeout``)."""
    group = f"sparkcdc-read-{time.monotonic_ns()}"
    ends: dict[int, int] = {}
    probe = ck.Consumer({**conf, "group.id": group, "isolation.level": "read_uncommitted"})
    try:
        meta = probe.list_topics(topic, timeout=timeout).topics.get(topic)
        if meta is None or meta.error is not None:
            return []
        for p in sorted(meta.partitions):
            lo, hi = watermarks(ck, probe, topic, p, timeout)
            if hi > lo:
                ends[p] = hi
    finally:
        probe.close()
    c = ck.Consumer({**conf, "group.id": group, "isolation.level": "read_committed",
                     "enable.auto.commit": False, "enable.partition.eof": True,
                     "auto.offset.reset": "earliest"})
    try:
        c.assign([ck.TopicPartition(topic, p, ck.OFFSET_BEGINNING) for p in ends])
        rows: list[dict] = []
        done: set[int] = set()
        deadline = time.monotonic() + max(timeout, 30)
        while len(done) < len(ends) and time.monotonic() < deadline:
            m = c.poll(0.2)
            if m is None:
                continue
            if m.error():
                if m.error().code() != ck.KafkaError._PARTITION_EOF:
                    raise ck.KafkaException(m.error())
                if m.offset() >= ends[m.partition()]:
                    done.add(m.partition())
                continue
            if m.offset() >= ends[m.partition()]:  # written after the read started
                done.add(m.partition())
                continue
            hs = m.headers()
            rows.append({"partition": m.partition(), "offset": m.offset(), "key": m.key(),
                         "value": m.value(), "timestamp": m.timestamp()[1],
                         "headers": json.dumps([[k, v.decode(errors="replace")]
                                                for k, v in hs]) if hs else None})
        if len(done) < len(ends):
            raise ConnectionFailed(f"reading the topic {topic!r} did not reach its end in time "
                                   "(a transaction open on it?)",
                                   fix="read again once the writer committed or aborted")
        rows.sort(key=lambda r: (r["partition"], r["offset"]))
        return rows
    finally:
        c.close()


def error_text(e: Exception) -> str:
    """The first line of a client error: a ``KafkaException``'s ``KafkaError`` says it in
    its ``str()``, any other exception in its own text."""
    err: Any = e.args[0] if e.args else None
    s = err.str() if hasattr(err, "str") else str(e)
    return s.splitlines()[0] if s else type(e).__name__


def unreachable(bootstrap_servers: str, e: Exception, doing: str) -> ConnectionFailed:
    """The brokers did not answer: a transient failure the stream retries."""
    return ConnectionFailed(
        f"cannot reach the Kafka brokers at {bootstrap_servers} ({doing}): {error_text(e)}",
        fix="check properties.bootstrap.servers and that the brokers run and are reachable "
            "from here (listeners, advertised.listeners, security settings)")


def failure(ck: Any, e: Exception, doing: str, config: Any, topic: str) -> Exception:
    """A client error ``e`` (of ``confluent_kafka`` ``ck``) met while ``doing``, as the
    pipeline's error: brokers away and retriable errors are transient (the stream retries
    the batch), a refused authorisation is the setup's (``ConfigError`` naming the grants),
    a fenced producer means another pipeline owns the transactional id, and anything else
    stops the run. ``config`` is the sink's ``KafkaConfig``."""
    err = e.args[0] if e.args else None
    code = err.code() if err is not None else None
    K = ck.KafkaError
    if code in (K._TRANSPORT, K._ALL_BROKERS_DOWN, K._TIMED_OUT, K._RESOLVE):
        return unreachable(config.bootstrap_servers, e, doing)
    if code in (K.TOPIC_AUTHORIZATION_FAILED, K.TRANSACTIONAL_ID_AUTHORIZATION_FAILED,
                K.GROUP_AUTHORIZATION_FAILED, K.CLUSTER_AUTHORIZATION_FAILED):
        return ConfigError(f"the Kafka brokers at {config.bootstrap_servers} refused "
                           f"the kafka sink ({doing}): {error_text(e)}",
                           fix="grant the sink's user write on the topic, the "
                               "transactional id and the group named "
                               f"{config.transactional_id!r}")
    if code == K._FENCED or code == K.PRODUCER_FENCED or code == K.INVALID_PRODUCER_EPOCH:
        return PipelineFailed(f"the kafka sink's producer for {topic} was fenced by "
                              f"a newer one with the transactional id "
                              f"{config.transactional_id!r} ({doing})",
                              fix="run one pipeline per checkpoint; the next attempt "
                                  "starts over from the batch Kafka holds")
    if err is not None and (err.retriable() or err.txn_requires_abort()):
        return ConnectionFailed(f"the kafka sink failed {doing}: {error_text(e)}",
                                fix="transient: the stream retries the batch")
    return PipelineFailed(f"the kafka sink failed {doing}: {error_text(e)}",
                          fix="see the broker's log; the stream retries from the last "
                              "committed batch")
