"""``sparkcdc run`` into Kafka SIGKILLed (the whole process group: CLI, JVM, Python workers,
and with them the sink's producer, often in the middle of a transaction) while writers
change the source, then run to the end. A ``read_committed`` consumer of the topic sees
the source's changelog exactly once: no change twice (an aborted or replayed batch), none
lost (every before-image and delete matches the row held), and folding it gives the
source table."""

from __future__ import annotations

import json
import random
import time

import pytest
from faults_support import SEED, Writers, check_changelog, make_table, table_state
from kill_support import PipelineRuns, count_files
from pipeline_support import source_yaml

from sparkcdc import sinks


def _changes(messages: list[dict]) -> list[dict]:
    """Debezium events as change rows (what ``check_changelog`` takes)."""
    rows = []

    def row(image, kind, seq):
        return {"id": image["id"], "v": image["v"], "s": image["s"], "_change_type": kind,
                "_seq": int(seq)}

    for m in messages:
        if m["value"] is None:
            continue
        e = json.loads(m["value"])
        src = e["source"]
        if e["op"] in ("r", "c"):
            rows.append(row(e["after"], "insert", src["seq"]))
        elif e["op"] == "u":
            rows.append(row(e["before"], "update_preimage", src["seq_before"]))
            rows.append(row(e["after"], "update_postimage", src["seq"]))
        elif e["op"] == "d":
            rows.append(row(e["before"], "delete", src["seq"]))
    return rows


@pytest.mark.faults
@pytest.mark.timeout(2400)
def test_pipeline_into_kafka_killed_mid_transaction(mariadb, db, tmp_path, kafka_broker):
    rows, kills = 4000, 5
    runs = _runs_into_kafka(mariadb, db, tmp_path, kafka_broker, rows, "kill", partitions=3)
    rnd = random.Random(SEED + 200)

    def moment(p, k):
        if k % 2 == 0:  # the moment a transaction is open on the topic
            assert _open_transaction(kafka_broker, f"{db}.t", p, 120)
        else:  # anywhere: in a task, the sink, Spark's logs
            time.sleep(rnd.uniform(0.0, 2.0))

    with Writers(mariadb, db, rows, n=2, pause=0.02):
        runs.kill_loop(kills, rnd, moment)
    runs.to_the_end()
    messages = _checked_topic(kafka_broker, mariadb, db)
    keys = {}
    for m in messages:  # every key's messages in one partition
        assert keys.setdefault(m["key"], m["partition"]) == m["partition"]
    print(f"{kills} kills; {_in_log(kafka_broker, f'{db}.t') - len(messages)} messages of "
          f"aborted transactions in the log, {len(messages)} committed")


def _runs_into_kafka(mariadb, db, tmp_path, broker, rows: int, name: str,
                     partitions: int) -> PipelineRuns:
    """A table of ``rows`` rows and the runs of a pipeline streaming it into the topic
    ``<db>.t`` of ``partitions`` partitions, in micro-batches of at most 1,000 rows."""
    make_table(mariadb, db, rows)
    yaml, ckpt = tmp_path / "p.yaml", tmp_path / "ckpt"
    yaml.write_text(f"""\
{source_yaml(mariadb, f"{db}.t", 10)}\
  scan.incremental.snapshot.chunk.size: 500
sink:
  type: kafka
  properties.bootstrap.servers: {broker.bootstrap_servers}
  sink.topic.partitions: {partitions}
pipeline:
  name: {name}
  parallelism: 2
  max-rows-per-batch: 1000
  trigger.interval: 1s
  checkpoint.location: {ckpt}
""")
    commits = count_files(ckpt / "streams" / "_tables" / "g0" / "commits")
    return PipelineRuns(yaml, tmp_path, commits, env={"TEST_PW": mariadb.info.cdc_password})


def _checked_topic(broker, mariadb, db) -> list[dict]:
    """The topic's committed messages, once checked to be the source's changelog exactly
    once (with updates and deletes in it)."""
    sink = sinks.create("kafka", broker.info.sink_options(topic=f"{db}.t"))
    try:
        messages = sink.read().to_pylist()
    finally:
        sink.close()
    counts = check_changelog(_changes(messages), table_state(mariadb, db), "kafka topic")
    assert counts["update_postimage"] > 0 and counts["delete"] > 0
    return messages


def _open_transaction(broker, topic: str, proc, timeout: float) -> bool:
    """Wait until a transaction is open on the topic: some partition's log end (what
    read_uncommitted sees) is past its last stable offset (where read_committed stops)."""
    from confluent_kafka import Consumer, TopicPartition

    ends = {iso: Consumer({"bootstrap.servers": broker.bootstrap_servers, "group.id": "probe",
                           "isolation.level": iso})
            for iso in ("read_uncommitted", "read_committed")}
    try:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline and proc.poll() is None:
            meta = ends["read_committed"].list_topics(topic, timeout=10).topics.get(topic)
            for p in (meta.partitions if meta and meta.error is None else ()):
                tp = TopicPartition(topic, p)
                hw = ends["read_uncommitted"].get_watermark_offsets(tp, timeout=10)[1]
                lso = ends["read_committed"].get_watermark_offsets(tp, timeout=10)[1]
                if hw > lso:
                    return True
            time.sleep(0.01)
        return False
    finally:
        for c in ends.values():
            c.close()


def _in_log(broker, topic: str) -> int:
    """Messages in the topic's log, aborted transactions' too (a read_uncommitted read)."""
    from confluent_kafka import Consumer, TopicPartition

    c = Consumer({"bootstrap.servers": broker.bootstrap_servers, "group.id": "count",
                  "isolation.level": "read_uncommitted", "enable.partition.eof": True})
    try:
        parts = list(c.list_topics(topic, timeout=10).topics[topic].partitions)
        c.assign([TopicPartition(topic, p, 0) for p in parts])
        n, eof = 0, set()
        deadline = time.monotonic() + 60
        while len(eof) < len(parts) and time.monotonic() < deadline:
            m = c.poll(0.5)
            if m is None:
                continue
            if m.error():
                eof.add(m.partition())
            else:
                n += 1
        return n
    finally:
        c.close()


@pytest.mark.faults
@pytest.mark.timeout(2400)
def test_pipeline_into_kafka_rides_out_broker_restarts(mariadb, db, tmp_path, kafka_broker):
    """``sparkcdc run`` streaming into Kafka under writers while the broker restarts: once
    cleanly (SIGTERM), once crashed (SIGKILL, down for a few seconds). The run goes on
    after each, or stops with a retryable error (a ConnectionFailed naming the brokers) and
    is started again; a last run to the end, and a ``read_committed`` consumer sees the
    source's changelog exactly once."""
    rows = 3000
    runs = _runs_into_kafka(mariadb, db, tmp_path, kafka_broker, rows, "restart",
                            partitions=2)
    outcomes = []
    with Writers(mariadb, db, rows, n=2, pause=0.02):
        for crash in (False, True):
            p = runs.start()
            try:
                assert runs.wait_progress(p, runs.progress() + 2), runs.tail()
                if crash:
                    kafka_broker.kill()
                    time.sleep(5.0)  # down for longer than a batch's interval
                kafka_broker.restart()
                rode = runs.wait_progress(p, runs.progress() + 3)
                if not rode:  # it stopped: with a retryable error, then run again
                    p.wait(120)
                    text = runs.tail()
                    assert p.returncode not in (0, None), text
                    assert "ConnectionFailed" in text or "cannot reach" in text, text
                outcomes.append("rode it out" if rode else f"exit {p.returncode}")
            finally:
                runs.stop(p)  # a clean stop between rounds
    runs.to_the_end()
    messages = _checked_topic(kafka_broker, mariadb, db)
    print(f"broker restarts (clean, crashed): {outcomes}; {len(messages)} messages")
