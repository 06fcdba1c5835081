"""Real Debezium into Kafka, then Kafka into Delta with ``sparkcdc run``: a MariaDB table
under writers, Debezium's MySQL connector on a Kafka Connect worker (its snapshot, then the
binlog) writing Debezium JSON to the sandbox broker, the ``kafka`` source applying it into
Delta. The target equals the source.

Then Debezium's at-least-once, provoked: the worker is stopped cleanly once (its offsets
flushed), goes on under writes, and is SIGKILLed before its next offset flush, so the
restarted connector sends every event since the clean stop again. The topic then holds
events with the same source position (binlog file, position, row) twice; the pipeline
skips each second copy, and says how many it skipped. Replaying a suffix of changes in
order leaves an SCD type 1 table as it was, so the count (equal to the repeats in the
topic) is what shows the repeats were recognised, not the table alone."""

from __future__ import annotations

import json
import os
import random
import subprocess
import sys
import time
import uuid
from collections import Counter

import pytest
from faults_support import Writers, make_table
from pipeline_support import delta_rows_by_key, source_rows_by_key

from sparkcdc import sinks
from sparkcdc.testing.mariadb import MariaDBSandbox, ServerSettings

# what the server reports: Debezium's MySQL connector wants a MySQL 5.7 below 5.7.20 (from
# 5.7.20 on, its JDBC driver asks for transaction_isolation, which MariaDB 10.11 lacks)
DBZ_VERSION = "5.7.19-10.11.19-log"


@pytest.fixture(scope="module")
def dbz_mariadb():
    with MariaDBSandbox(ServerSettings(version=DBZ_VERSION), name="dbz") as sb:
        yield sb


@pytest.fixture(scope="module")
def connect_jars():
    """Kafka Connect's and Debezium's jars, fetched with mvn when missing (never a skip)."""
    from sparkcdc.testing.kafka_connect import ensure_jars

    ensure_jars()


def _payloads(broker, topic: str) -> list[dict | None]:
    """The topic's Debezium events in offset order (one partition), the envelope without
    Connect's schema; None for a tombstone."""
    sink = sinks.create("kafka", broker.info.sink_options(topic=topic))
    try:
        msgs = sink.read().to_pylist()
    finally:
        sink.close()
    out: list[dict | None] = []
    for m in sorted(msgs, key=lambda m: (m["partition"], m["offset"])):
        v = json.loads(m["value"]) if m["value"] is not None else None
        out.append(v["payload"] if v is not None and "payload" in v else v)
    return out


def _wait(what: str, cond, timeout: float = 180.0, connect=None) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if cond():
            return
        time.sleep(0.5)
    raise AssertionError(f"timed out waiting for {what}"
                         + (f"\n{connect.log_tail()}" if connect is not None else ""))


def _topic_has(broker, topic: str, pred) -> bool:
    from confluent_kafka import Consumer

    c = Consumer({"bootstrap.servers": broker.bootstrap_servers, "group.id": "probe"})
    try:
        if topic not in c.list_topics(timeout=10).topics:
            return False
    finally:
        c.close()
    return pred(_payloads(broker, topic))


def _run(yaml, tmp_path, k: str) -> None:
    cmd = [sys.executable, "-m", "sparkcdc.cli", "run", str(yaml), "--no-progress",
           "--until-caught-up"]
    with open(tmp_path / f"run-{k}.log", "w") as log:
        p = subprocess.run(cmd, env=os.environ.copy(), stdout=log, stderr=subprocess.STDOUT,
                           timeout=600, check=False)
    assert p.returncode == 0, (tmp_path / f"run-{k}.log").read_text()[-4000:]


@pytest.mark.faults
@pytest.mark.timeout(1200)
def test_debezium_on_connect_into_delta_and_its_replays_after_a_kill_applied_once(
        dbz_mariadb, kafka_broker, connect_jars, tmp_path):
    from sparkcdc.testing.kafka_connect import KafkaConnectSandbox, debezium_mysql

    rows = 3000
    db = f"dbz_{uuid.uuid4().hex[:8]}"
    prefix = f"dbz{uuid.uuid4().hex[:6]}"
    topic, done_topic = f"{prefix}.{db}.t", f"{prefix}.{db}.done"
    dbz_mariadb.execute(f"CREATE DATABASE {db}")
    make_table(dbz_mariadb, db, rows)
    dbz_mariadb.execute("CREATE TABLE done (id INT PRIMARY KEY)", database=db)
    conf = debezium_mysql(dbz_mariadb.info, topic_prefix=prefix, databases=db,
                          server_id=random.randint(10_000, 4_000_000_000),
                          history_file=tmp_path / "history.dat", schemas=True)
    # offsets are flushed on a clean stop only: a SIGKILL then replays all sent since
    connect = KafkaConnectSandbox(kafka_broker.bootstrap_servers, {"dbz": conf},
                                  {"offset.flush.interval.ms": "3600000"}, base_dir=tmp_path)
    yaml = tmp_path / "p.yaml"
    yaml.write_text(f"""\
source:
  type: kafka
  properties.bootstrap.servers: {kafka_broker.bootstrap_servers}
  topic: {topic}
  value.format: debezium-json
  debezium-json.schema-include: true
sink:
  type: delta
  path: {tmp_path}/lake
pipeline:
  name: dbz
  checkpoint.location: {tmp_path}/ckpt
""")
    try:
        with Writers(dbz_mariadb, db, rows, n=2, pause=0.02):
            connect.start()  # the snapshot, under writes
            _wait("Debezium's snapshot and some binlog changes", lambda: _topic_has(
                kafka_broker, topic, lambda ev: any(e and e["source"]["snapshot"] == "last"
                                                    for e in ev)
                and sum(1 for e in ev if e and e["op"] != "r") >= 50), connect=connect)
            _run(yaml, tmp_path, "1")  # applies what is there, under writes
            connect.restart()  # a clean stop: every event sent so far is in its offsets
            assert connect.offsets(), "a clean stop flushed no offsets"
            clean = len(_payloads(kafka_broker, topic))
            _wait("changes sent after the clean restart", lambda: len(
                _payloads(kafka_broker, topic)) >= clean + 100, connect=connect)
            connect.kill()  # before the next flush: the restart sends those again
            time.sleep(1.0)
            connect.restart()
            time.sleep(3.0)
        dbz_mariadb.execute("INSERT INTO done VALUES (1)", database=db)
        _wait("Debezium caught up with the writers", lambda: _topic_has(
            kafka_broker, done_topic, lambda ev: len(ev) >= 1), connect=connect)
    finally:
        connect.stop()
    _run(yaml, tmp_path, "2")
    assert delta_rows_by_key(tmp_path, db, "t") == source_rows_by_key(dbz_mariadb, db, "t")

    events = [e for e in _payloads(kafka_broker, topic) if e is not None]
    # a primary-key change is a delete and a create at one file, position and row: no repeat
    positions = Counter((e["source"]["file"], e["source"]["pos"], e["source"]["row"],
                         e["op"] == "d") for e in events if e["op"] != "r")
    repeats = sum(n - 1 for n in positions.values())
    assert repeats > 0, "the SIGKILL and restart sent nothing again: the test proves nothing"
    commits = tmp_path / "ckpt" / "kafka" / "commits"
    last = max(int(p.stem) for p in commits.glob("*.json"))
    state = json.loads((commits / f"{last}.json").read_text())["tables"][f"{db}.t"]
    assert state["skipped"] == repeats, (state["skipped"], repeats)
    ops = Counter(e["op"] for e in events)
    assert ops["u"] > 0 and ops["d"] > 0 and ops["c"] > 0, ops
    key_changes = sum(1 for (*_p, is_delete), n in positions.items()
                      if not is_delete and (*_p, True) in positions)
    assert key_changes > 0, "no primary-key change reached the topic"
    print(f"{len(events)} events ({dict(ops)}), {repeats} repeated after the kill, "
          f"{state['skipped']} skipped")
