"""The ``kafka`` sink: each micro-batch's change rows as messages in a topic, exactly once.

A changelog sink: it receives every change row of a batch (a Spark DataFrame, as the files
sink does), encodes them with ``sparkcdc.formats`` (debezium-json, canal-json or
changelog-json; the message key is the JSON of the primary key) and produces them with
librdkafka (confluent-kafka).

**Exactly once.** One Kafka transaction per target and batch, under a transactional id
derived from the pipeline's application id and the topic (``KafkaConfig.transactional_id``).
The batch id is recorded *in the same transaction*: ``send_offsets_to_transaction`` commits,
for the consumer group named like the transactional id, the "offset" ``batch id`` of the
topic's partition 0, with the batch as its metadata. Kafka makes the messages and that
offset visible together, or neither: a ``read_committed`` consumer never sees a batch's
messages without its marker, nor the marker without them.

* Before the first write the producer is initialised (``init_transactions``): that fences
  any older producer with the same id (a crashed run, a zombie) and completes or aborts its
  open transaction; only then is the marker read, so it is final.
* A crash before the commit: the transaction is aborted (by the fencing, or by the broker
  after ``transaction.timeout.ms``); the marker still names the batch before, and the
  replayed batch is written again.
* A crash after the commit and before Spark logged the batch as committed: the replay finds
  the marker at its batch id and is skipped. Nothing doubles, nothing is lost.

The marker is a committed offset, so it lasts as long as the broker keeps offsets
(``offsets.retention.minutes``, 7 days by default, counted from a group's last commit):
a run that crashed in that window and is started again later than that could write its
last batch twice. Keep the retention longer than a pipeline is ever stopped, as with
binlogs.

**Schema changes** are announced as the format does it (``announce.py``): a Canal DDL
message, or a Debezium schema change event, each in a transaction of its own that also
records the announcement in the marker's metadata (the batch id stays), so a change the
pipeline makes again after a crash is announced once. With ``sink.delivery-guarantee: at-least-once`` (brokers without transactions)
the messages are flushed, then the marker is committed on its own: a crash between the two
writes the batch again.
"""

from __future__ import annotations

import json
import logging
import threading
import time
from collections.abc import Iterator, Mapping, Sequence
from typing import Any

import pyarrow as pa

from sparkcdc.core.schema import TableSchema
from sparkcdc.errors import ConfigError, ConnectionFailed, PipelineFailed, SchemaError
from sparkcdc.sinks.base import Sink, WriteResult
from sparkcdc.sinks.capabilities import Capabilities, Emptying
from sparkcdc.sinks.evolution import EVERY_CHANGE
from sparkcdc.sinks.kafka import config
from sparkcdc.sinks.kafka.client import (
    LIBRDKAFKA_LOG,
    MESSAGES,
    error_text,
    failure,
    read_topic,
    unreachable,
)
from sparkcdc.sinks.kafka.config import KafkaConfig
from sparkcdc.sinks.kinds import SinkKind, SinkType

__all__ = ["LIBRDKAFKA_LOG", "KafkaSink", "read_topic"]  # (their home: client.py)

log = logging.getLogger("sparkcdc.sinks.kafka")

MARKER_PARTITION = 0  # the marker is the committed offset of this partition of the topic
NO_OFFSET = -1001  # librdkafka's OFFSET_INVALID: the group committed nothing there
TRANSACTION_TIMEOUT_MS = "300000"  # librdkafka's default 60 s is short for a snapshot batch
REBOOTSTRAP_LIBRDKAFKA = 0x020A0000  # 2.10.0: metadata.recovery.strategy (KIP-899)
PAIRING_FORMATS = ("debezium-json", "canal-json")  # an update's two images in one message
POLL_EVERY = 1000  # messages produced between two polls of the producer


class KafkaSink(Sink):
    type = SinkType.KAFKA
    capabilities = Capabilities(
        kind=SinkKind.CHANGELOG, writer="librdkafka", takes_arrow=True,
        empties=Emptying.EVENT,  # a truncate event naming the table (``empty``)
        # messages carry their row as it is: a changed table's later messages show the new
        # columns (as Flink CDC's and Debezium's JSON without schemas do), after the
        # announcement of the change (``announce``); a topic has no stored schema
        schema_changes=EVERY_CHANGE,
        no_layout="the kafka sink sends change messages to topics: it has no table to "
                  "partition or give properties")
    drivers = ("confluent_kafka",)
    option_spec = config.OPTIONS
    target_options = staticmethod(config.target_options)  # how it names a target
    option_prefixes = config.PREFIXES

    def __init__(self, config: KafkaConfig):
        self.config = config
        self._ck = self.load_drivers()[0]
        self._producer: Any = None  # initialised for transactions (fenced the older ones)
        self._consumer: Any = None  # reads the marker; its group is the transactional id
        self._last: int | None = None  # the marker, once read after the producer's init
        self._announced: str | None = None  # the last schema change announced (its print)
        self._ready = False  # the topic exists (made if absent) and the marker is read
        # the error that made the producer unusable, as its next poll raises it: a call on
        # a fenced producer may fail with only "Local: Fatal error"
        self._fatal: Any = None
        # the lazy set-up (clients, topic, producer, marker), made once: warm() in the
        # background, a write or a look at the marker meanwhile waits for it
        self._preparing = threading.RLock()

    @classmethod
    def from_options(cls, options: Mapping[str, Any]) -> KafkaSink:
        return cls(KafkaConfig.parse(options))

    @property
    def topic(self) -> str:
        return self.config.target_topic

    # -- clients -----------------------------------------------------------------------------

    def _client_config(self, **extra: Any) -> dict[str, Any]:
        conf: dict[str, Any] = dict(self.config.properties)
        conf.setdefault("socket.connection.setup.timeout.ms", str(self.config.connect_timeout * 1000))
        if self._ck.libversion()[1] >= REBOOTSTRAP_LIBRDKAFKA:
            # From librdkafka 2.10 on, a client that finds every broker down (a one-broker
            # cluster restarting) re-bootstraps and drops the brokers it knew; a transaction
            # then waits forever in send_offsets_to_transaction for its dropped group
            # coordinator (librdkafka issue 5511, open in 2.16). Without re-bootstrapping,
            # the client reconnects to the brokers it knows and the batch goes on.
            conf.setdefault("metadata.recovery.strategy", "none")
        conf["logger"] = LIBRDKAFKA_LOG
        conf.update(extra)
        return conf

    def _consumer_client(self):
        if self._consumer is None:
            self._consumer = self._ck.Consumer(self._client_config(
                **{"group.id": self.config.transactional_id, "isolation.level": "read_committed",
                   "enable.auto.commit": False, "enable.auto.offset.store": False}))
        return self._consumer

    def _new_producer(self):
        c = self.config
        extra: dict[str, Any] = {}
        if c.exactly_once:
            extra["transactional.id"] = c.transactional_id
            if "transaction.timeout.ms" not in c.properties:
                extra["transaction.timeout.ms"] = TRANSACTION_TIMEOUT_MS
        if "partitioner" not in c.properties:
            extra["partitioner"] = "murmur2_random"  # as Java's producers hash keys
        return self._ck.Producer(self._client_config(**extra))

    def _unreachable(self, e: Exception, doing: str) -> ConnectionFailed:
        return unreachable(self.config.bootstrap_servers, e, doing)

    def _check_reachable(self) -> None:
        """Fail fast, naming the brokers: librdkafka itself would retry until a timeout."""
        try:
            self._consumer_client().list_topics(timeout=self.config.connect_timeout)
        except self._ck.KafkaException as e:
            raise self._unreachable(e, "asking for the cluster's metadata") from None

    def _prepare(self) -> None:
        """Once per sink: the brokers answer, the topic exists (made when absent, if the
        sink may), the producer is initialised for transactions, and the marker is read
        after that, so it is final."""
        with self._preparing:
            if self._ready:
                return
            self._check_reachable()
            self._ensure_topic()
            producer = self._new_producer()
            if self.config.exactly_once:
                try:
                    producer.init_transactions(self._commit_timeout())
                except self._ck.KafkaException as e:
                    raise self._kafka_error(e, "initialising the transactional producer") \
                        from None
            self._producer = producer
            self._last = self._read_marker(self._commit_timeout())
            self._ready = True

    def warm(self) -> None:
        """The transactional producer initialised and the marker read before the first
        batch: on a broker that just started, the transaction coordinator alone can take
        a second or more."""
        try:
            self._prepare()
        except Exception as e:  # noqa: BLE001 - the first write meets it and says so
            log.debug("kafka sink: not ready ahead of the first batch (%s)", e)

    def _commit_timeout(self) -> float:
        ms = self.config.properties.get("transaction.timeout.ms") or TRANSACTION_TIMEOUT_MS
        return max(float(ms) / 1000, float(self.config.connect_timeout))

    def _ensure_topic(self, topic: str | None = None, partitions: int | None = None) -> None:
        from confluent_kafka.admin import AdminClient, NewTopic

        c = self.config
        topic = topic or self.topic
        meta = self._consumer_client().list_topics(timeout=c.connect_timeout)
        if topic in meta.topics and meta.topics[topic].error is None:
            return
        if not c.auto_create:
            raise ConfigError(
                f"the topic {topic!r} does not exist on the Kafka brokers at "
                f"{c.bootstrap_servers}",
                fix="create it (kafka-topics.sh --create --topic ...), or set "
                    "sink.topic.auto-create: true so the sink creates it",
                key="sink.topic.auto-create")
        admin = AdminClient(self._client_config())
        new = NewTopic(topic, num_partitions=partitions or c.partitions or -1,
                       replication_factor=c.replication_factor or -1,
                       config=dict(c.topic_config))
        try:
            admin.create_topics([new], operation_timeout=c.connect_timeout)[topic].result(
                c.connect_timeout)
            log.info("kafka sink: created topic %s", topic)
        except self._ck.KafkaException as e:
            err = e.args[0] if e.args else None
            if err is not None and err.code() == self._ck.KafkaError.TOPIC_ALREADY_EXISTS:
                return  # another writer made it meanwhile
            raise ConfigError(f"the kafka sink could not create the topic {topic!r} at "
                              f"{c.bootstrap_servers}: {error_text(e)}",
                              fix="create the topic yourself, or give the sink's user the "
                                  "right to create topics") from None

    # -- the marker: the last batch id, committed with the batch -------------------------------

    def _read_marker(self, timeout: float) -> int | None:
        tp = self._ck.TopicPartition(self.topic, MARKER_PARTITION)
        got = self._retrying(lambda left: self._consumer_client().committed([tp], timeout=left),
                             timeout, "reading the last batch id (the sink's marker)")
        if got and got[0].error is not None:
            raise self._kafka_error(self._ck.KafkaException(got[0].error),
                                    "reading the last batch id (the sink's marker)")
        off = got[0].offset if got else NO_OFFSET
        self._announced = _metadata(got[0].metadata).get("schema") if got else None
        return None if off < 0 else int(off)

    def _retrying(self, call, timeout: float, doing: str):
        """``call(seconds left)`` again while Kafka answers with a passing error (a group
        coordinator still loading, moving, or the offsets topic being made on first use)."""
        deadline = time.monotonic() + timeout
        while True:
            left = deadline - time.monotonic()
            try:
                return call(max(left, 0.1))
            except self._ck.KafkaException as e:
                err = e.args[0] if e.args else None
                K = self._ck.KafkaError
                passing = err is not None and (err.retriable() or err.code() in (
                    K.NOT_COORDINATOR, K.COORDINATOR_LOAD_IN_PROGRESS,
                    K.COORDINATOR_NOT_AVAILABLE, K.UNSTABLE_OFFSET_COMMIT))
                if not passing or time.monotonic() + 0.2 >= deadline:
                    raise self._kafka_error(e, doing) from None
                time.sleep(0.2)

    def last_batch_id(self) -> int | None:
        """The last batch committed to the topic by this target's stream. Read as it stands
        when nothing waits in an open transaction; otherwise (a run that died mid-batch)
        after initialising the producer, which ends that transaction."""
        with self._preparing:
            if self._ready:
                return self._last
            self._check_reachable()
            try:
                return self._read_marker(min(5.0, float(self.config.connect_timeout)))
            except (ConnectionFailed, PipelineFailed):  # unstable: a transaction holds offsets
                self._prepare()
                return self._last

    def _marker_offsets(self, batch_id: int, rows: int) -> list:
        marker = {"batch": batch_id, "app": self.config.app_id, "target": self.config.table_id,
                  "rows": rows}
        if self._announced:
            marker["schema"] = self._announced
        meta = json.dumps(marker, separators=(",", ":"))
        return [self._ck.TopicPartition(self.topic, MARKER_PARTITION, batch_id, meta)]

    # -- writing -------------------------------------------------------------------------------

    def write_changelog(self, df: Any, batch_id: int, keys: tuple[str, ...] = ()) -> WriteResult:
        self._prepare()
        if self._last is not None and batch_id <= self._last:
            return WriteResult(batch_id, skipped=True)
        if not keys:
            raise ConfigError("the kafka sink needs the key columns (its message key)",
                              fix="apply_changes(target, keys=[...]) passes them; in a "
                                  "pipeline they are the table's primary key")
        t0 = time.monotonic()
        parts = self._encode(df, keys)

        def send(report) -> int:
            n = 0
            for messages in parts:
                self._produce(messages, report)
                n += len(messages)
            return n

        doing = f"writing batch {batch_id} to {self.topic}"
        if self.config.exactly_once:
            sent = self._in_transaction(send, batch_id, doing)
        else:
            sent = self._at_least_once(send, batch_id, doing)
        self._last = batch_id
        log.debug("kafka sink: batch %d, %d messages to %s: encoded, produced and committed "
                  "in %.2fs", batch_id, sent, self.topic, time.monotonic() - t0)
        return WriteResult(batch_id, counts={"messages": sent})

    def _encode(self, df: Any,
                keys: tuple[str, ...]) -> Iterator[list[tuple[bytes, bytes | None]]]:
        """The batch's messages in parts, each row's changes in ``_seq`` order (Kafka keeps
        a partition's order, and a key's messages share a partition). Arrow rows (the
        pipeline's) are written on the driver (``formats/arrow_json.py``), a part at a time
        as the producer sends the last; a Spark DataFrame (``apply_changes``) with Spark's
        expressions, in one part."""
        if isinstance(df, pa.Table):
            from sparkcdc.formats import arrow_json

            yield from arrow_json.encode_parts(df, self.config.value_format, keys,
                                               version=_version(),
                                               tombstones=self.config.tombstones)
            return
        from sparkcdc.formats import encode

        kw: dict[str, Any] = {"tombstones": True} if self.config.tombstones else {}
        if self.config.value_format in PAIRING_FORMATS and not _has_preimages(df):
            kw["pairs"] = False  # nothing to pair (a snapshot batch): no window, no shuffle
        events = encode(df.orderBy("_seq"), self.config.value_format, list(keys), **kw)
        table = events.toArrow()
        k = table.column("key").to_pylist()
        v = table.column("value").to_pylist()
        yield [(a.encode(), None if b is None else b.encode()) for a, b in zip(k, v)]

    def _headers(self) -> list[tuple[str, bytes]]:
        c = self.config
        out = [(k, v.encode()) for k, v in c.custom_headers]
        if c.table_id_headers and c.table_id:
            db, _, table = c.table_id.partition(".")
            out += [("schemaName", db.encode()), ("tableName", table.encode())]
        return out

    def _produce(self, messages: Sequence[tuple[bytes | None, bytes | None]], on_delivery=None,
                 topic: str | None = None, partition: int | None = None) -> None:
        p = self._producer
        headers = self._headers() or None
        kw: dict[str, Any] = {} if on_delivery is None else {"on_delivery": on_delivery}
        if partition is not None:
            kw["partition"] = partition
        elif self.config.partition_strategy == "all-to-zero":
            kw["partition"] = 0
        for i, (key, value) in enumerate(messages):
            while True:
                try:
                    p.produce(topic or self.topic, value=value, key=key, headers=headers, **kw)
                    break
                except BufferError:  # the local queue is full: let it drain
                    p.poll(0.05)
            if not i % POLL_EVERY:  # delivery reports and errors; a call per message cost
                p.poll(0)  # a third of the sending (200,000 messages: 0.35 s against 0.23 s)

    def _in_transaction(self, send, batch_id: int | None, doing: str) -> int:
        """``send()`` the messages in one transaction that also records ``batch_id`` (when
        there is one) in the marker; how many were sent."""
        p = self._producer
        group = self._consumer_client().consumer_group_metadata()
        timeout = self._commit_timeout()
        try:
            p.begin_transaction()
            rows = send(None)
            if batch_id is not None:
                p.send_offsets_to_transaction(self._marker_offsets(batch_id, rows), group,
                                              timeout)
            p.commit_transaction(timeout)
        except self._ck.KafkaException as e:
            failure = self._kafka_error(e, doing)  # before _abort, which may drop the producer
            self._abort(e)
            raise failure from None
        return rows

    def _abort(self, e: Exception) -> None:
        """After a failed transaction: abort it when Kafka lets us; a fatal error (fenced by
        a newer producer of the same id) drops the producer, and the next write starts over
        from ``_prepare`` (and the marker as it then is)."""
        err = e.args[0] if e.args else None
        if err is not None and err.txn_requires_abort():
            try:
                self._producer.abort_transaction(self._commit_timeout())
                return
            except self._ck.KafkaException:
                pass
        self._reset()

    def _at_least_once(self, send, batch_id: int | None, doing: str) -> int:
        p = self._producer
        failed: list = []

        def report(err, _msg):
            if err is not None:
                failed.append(err)

        rows = send(report)
        left = p.flush(self._commit_timeout())
        if failed or left:
            why = error_text(failed[0]) if failed else f"{left} message(s) not delivered in time"
            self._reset()
            raise ConnectionFailed(f"the kafka sink failed {doing}: {why}",
                                   fix="check the brokers; the batch is written again when "
                                       "the stream retries (at-least-once)")
        if batch_id is None:
            return rows
        try:
            self._consumer_client().commit(offsets=self._marker_offsets(batch_id, rows),
                                           asynchronous=False)
        except self._ck.KafkaException as e:
            raise self._kafka_error(e, f"recording batch {batch_id}") from None
        return rows

    # -- schema changes, as the format announces them (announce.py) --------------------------

    def announce(self, schema: TableSchema, statements: tuple[str, ...],
                 columns: tuple[str, ...], diff: Mapping[str, tuple[str, ...]]) -> None:
        """Announce the source table's change to ``schema`` (the target now has
        ``columns``) in the topic, as the value format does it; once, even when the pipeline
        makes the change again after a crash (its print is in the marker)."""
        from sparkcdc.sinks.kafka import announce as an

        c = self.config
        if not c.include_schema_changes or c.value_format == "changelog-json":
            return
        self._prepare()
        mark = an.fingerprint(schema, statements, columns)
        if mark == self._announced:
            log.info("kafka sink: the change of %s was announced before", self.topic)
            return
        sqls = an.statements_or_diff(schema, statements, **diff)
        if not sqls:
            return
        db, _, table = (c.table_id or f"{schema.table_id}").partition(".")
        now = int(time.time() * 1000)
        if c.value_format == "canal-json":
            parts = (0,) if c.partition_strategy == "all-to-zero" else self._partitions()
            messages = an.canal_ddl(self.topic, db, table, sqls, now, parts)
        else:
            self._ensure_topic(c.schema_topic, partitions=1)
            messages = an.debezium_schema_change(c.schema_topic, db, table, schema, columns,
                                                 sqls, now, c.app_id, _version())

        def send(report) -> int:
            for m in messages:
                for part in m.partitions or (None,):
                    self._produce([(m.key, m.value)], report, topic=m.topic, partition=part)
            return 0  # no rows: the marker keeps the batch it names

        before, self._announced = self._announced, mark
        doing = f"announcing the schema change of {self.topic}"
        try:
            if c.exactly_once:
                self._in_transaction(send, self._last, doing)
            else:
                self._at_least_once(send, self._last, doing)
        except BaseException:
            self._announced = before
            raise
        log.info("kafka sink: announced %d schema change(s) of %s", len(sqls), self.topic)

    # -- emptying: a truncate event ------------------------------------------------------------

    def empty(self) -> None:
        """The table's target "emptied" as its format says a table was truncated: Debezium's
        truncate event (``op: t``) or Canal's ``TRUNCATE`` DDL message, naming the source
        table, into every partition of the topic (partition 0 under ``all-to-zero``), in a
        transaction of its own; a consumer of any partition drops the table's rows before
        it. The marker keeps the batch it names: a run stopped before its checkpoint
        empties again, and the rows it then writes follow the second truncate. Flink's
        changelog JSON has no such event."""
        c = self.config
        if c.value_format == "changelog-json":
            raise SchemaError(
                f"the kafka target {self.topic} would have to be emptied (its table taken "
                "again, or truncated), and Flink's changelog-json has no truncate event",
                fix="use value.format: debezium-json or canal-json, whose truncate event "
                    "empties the table for a consumer; or delete and recreate the topic and "
                    "start over with a new checkpoint.location")
        from sparkcdc.sinks.kafka import announce as an

        self._prepare()
        db, _, table = (c.source_table or c.table_id or self.topic).partition(".")
        now = int(time.time() * 1000)
        parts = (0,) if c.partition_strategy == "all-to-zero" else self._partitions()
        if c.value_format == "canal-json":
            m = an.canal_truncate(self.topic, db, table, now, parts)
        else:
            m = an.debezium_truncate(self.topic, db, table, now, "sparkcdc", _version(), parts)

        def send(report) -> int:
            for part in m.partitions or (None,):
                self._produce([(m.key, m.value)], report, partition=part)
            return 0  # no rows: the marker keeps the batch it names

        doing = f"writing a truncate event of {db}.{table} to {self.topic}"
        if c.exactly_once:
            self._in_transaction(send, self._last, doing)
        else:
            self._at_least_once(send, self._last, doing)
        log.info("kafka sink: %s emptied for %s.%s (a truncate event in %d partition(s))",
                 self.topic, db, table, len(parts))

    def _partitions(self) -> tuple[int, ...]:
        meta = self._consumer_client().list_topics(self.topic, timeout=self.config.connect_timeout)
        return tuple(sorted(meta.topics[self.topic].partitions))

    def _kafka_error(self, e: Exception, doing: str) -> Exception:
        """``e`` as the pipeline's error (``client.failure``); a fatal error's cause waits in
        the producer's queue, so it is served and read first."""
        err = e.args[0] if e.args else None
        if err is not None and err.code() == self._ck.KafkaError._FATAL:
            try:
                if self._producer is not None:
                    self._producer.poll(0)  # raises the cause
            except self._ck.KafkaException as cause:
                if cause.args and cause.args[0].fatal():
                    self._fatal = cause.args[0]
            if self._fatal is not None:
                e = self._ck.KafkaException(self._fatal)
        return failure(self._ck, e, doing, self.config, self.topic)

    def _reset(self) -> None:
        """Forget the producer and the marker: the next write initialises again."""
        self._producer = None
        self._fatal = None
        self._ready = False
        self._last = None

    # -- reading back --------------------------------------------------------------------------

    def read(self) -> pa.Table:
        """Every committed message of the topic, as a ``read_committed`` consumer sees them:
        partition, offset, key, value (null for a tombstone), timestamp and headers (JSON)."""
        rows = read_topic(self._ck, self._client_config(), self.topic, self.config.connect_timeout)
        return pa.Table.from_pylist(rows, schema=MESSAGES)

    def changelog(self, spark: Any, schema: Any) -> Any:
        """The topic's change rows (``formats.decode`` of every committed message) as a Spark
        DataFrame of ``schema``'s data columns and the metadata columns, plus partition and
        offset; ``sparkcdc.apply.materialize`` folds it into the table it describes."""
        from sparkcdc.formats import decode

        t = self.read()
        df = spark.createDataFrame(t.select(["partition", "offset", "key", "value"]),
                                   "partition int, offset long, key binary, value binary")
        return decode(df, self.config.value_format, schema)

    def close(self) -> None:
        if self._producer is not None:
            self._producer.flush(5)
        if self._consumer is not None:
            self._consumer.close()
        self._producer = self._consumer = None
        self._ready = False
        self._last = None
        self._fatal = None


def _version() -> str:
    """sparkcdc's version, for Debezium's ``source.version`` (read from the installed
    package: the sink does not import the package's top, which loads the Spark source)."""
    from importlib.metadata import PackageNotFoundError, version

    try:
        return version("sparkcdc")
    except PackageNotFoundError:
        return "unknown"


def _metadata(text: str | None) -> dict:
    """The marker's metadata (JSON written by ``_marker_offsets``), or {} if unreadable."""
    try:
        got = json.loads(text or "{}")
    except ValueError:
        return {}
    return got if isinstance(got, dict) else {}


def _has_preimages(df: Any) -> bool:
    """Whether the batch holds an update's pre-image: a scan of the change types (a small
    job, stopping at the first one found), much cheaper than the window it may spare."""
    return not df.filter("_change_type = 'update_preimage'").isEmpty()
