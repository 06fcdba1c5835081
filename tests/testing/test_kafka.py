"""The throwaway Kafka broker: KRaft on loopback, transactions and read_committed on one node,
no process, port or data left behind, dies with its parent, and the CLI's sandbox."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import time
import uuid

import pytest
from confluent_kafka import Consumer, Producer, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic

from sparkcdc.errors import SandboxError
from sparkcdc.testing.kafka import JARS_ENV, KafkaSandbox, cluster_id
from sparkcdc.testing.mariadb import port_in_use


def _gone(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().split(")")[-1].split()[0] == "Z"
    except OSError:
        return True


def _read_committed(bootstrap: str, topic: str, partitions: int = 1) -> list[tuple[str, str]]:
    c = Consumer({"bootstrap.servers": bootstrap, "group.id": f"g-{uuid.uuid4().hex}",
                  "isolation.level": "read_committed", "enable.auto.commit": False,
                  "enable.partition.eof": True, "auto.offset.reset": "earliest"})
    try:
        c.assign([TopicPartition(topic, p, 0) for p in range(partitions)])
        got, eof = [], set()
        deadline = time.monotonic() + 30
        while len(eof) < partitions and time.monotonic() < deadline:
            m = c.poll(0.5)
            if m is None:
                continue
            if m.error():
                assert m.error().code() == -191, m.error()  # _PARTITION_EOF
                eof.add(m.partition())
                continue
            got.append((m.key().decode(), m.value().decode()))
        return got
    finally:
        c.close()


def test_transactions_and_read_committed_work_on_one_node(kafka_broker):
    """The settings a single node needs for transactions (the transaction state log with one
    replica) are there: a committed transaction is read, an aborted one is not."""
    bootstrap = kafka_broker.bootstrap_servers
    topic = f"t-{uuid.uuid4().hex[:8]}"
    admin = AdminClient({"bootstrap.servers": bootstrap})
    admin.create_topics([NewTopic(topic, 1, 1)])[topic].result(30)
    p = Producer({"bootstrap.servers": bootstrap, "transactional.id": f"tx-{topic}"})
    p.init_transactions(60)
    p.begin_transaction()
    p.produce(topic, key="1", value="committed")
    p.commit_transaction(30)
    p.begin_transaction()
    p.produce(topic, key="2", value="aborted")
    p.flush(30)
    p.abort_transaction(30)
    assert _read_committed(bootstrap, topic) == [("1", "committed")]


def test_stop_leaves_no_process_port_or_data_behind():
    sb = KafkaSandbox(name="stoptest")
    t0 = time.monotonic()
    info = sb.start()
    started = time.monotonic() - t0
    assert port_in_use(info.port) and port_in_use(info.controller_port)
    with open(info.log_file) as f:
        assert "Kafka Server started" in f.read()
    sb.stop()
    assert _gone(info.pid)
    assert not port_in_use(info.port) and not port_in_use(info.controller_port)
    assert not os.path.exists(info.root)
    print(f"broker started in {started:.2f} s")


def test_restart_keeps_the_data():
    with KafkaSandbox(name="restart") as sb:
        bootstrap = sb.bootstrap_servers
        p = Producer({"bootstrap.servers": bootstrap})
        p.produce("kept", key="k", value="v")
        assert p.flush(30) == 0
        pid = sb.info.pid
        sb.restart()  # a clean stop (a SIGKILLed one waits ~9 s for its broker session)
        assert sb.info.pid != pid and _gone(pid)
        assert _read_committed(bootstrap, "kept") == [("k", "v")]


def test_broker_dies_with_a_killed_parent(tmp_path):
    """No orphan JVM survives a SIGKILLed test run (parent-death signal)."""
    script = tmp_path / "child.py"
    script.write_text(
        "import time\n"
        "from sparkcdc.testing.kafka import KafkaSandbox\n"
        "info = KafkaSandbox(name='orphan').start()\n"
        "print(info.pid, info.port, info.root, flush=True)\n"
        "time.sleep(600)\n")
    child = subprocess.Popen([sys.executable, str(script)], stdout=subprocess.PIPE, text=True)
    pid, port, root = child.stdout.readline().split()
    pid, port = int(pid), int(port)
    try:
        assert port_in_use(port)
        child.kill()
        child.wait()
        deadline = time.monotonic() + 20
        while time.monotonic() < deadline and (port_in_use(port) or not _gone(pid)):
            time.sleep(0.1)
        assert _gone(pid) and not port_in_use(port)
    finally:
        shutil.rmtree(root, ignore_errors=True)  # a killed parent cannot remove it


def test_missing_jars_say_how_to_get_them(tmp_path, monkeypatch):
    monkeypatch.setenv(JARS_ENV, str(tmp_path))
    with pytest.raises(SandboxError) as e:
        KafkaSandbox().start()
    assert str(tmp_path) in e.value.message and "make setup" in e.value.fix


def test_cluster_ids_are_kafka_uuids():
    ids = {cluster_id() for _ in range(200)}
    assert len(ids) == 200
    assert all(len(i) == 22 and not i.startswith("-") for i in ids)


def test_cli_start_status_stop(tmp_path):
    env = {**os.environ, "SPARKCDC_HOME": str(tmp_path)}
    cli = [sys.executable, "-m", "sparkcdc.cli", "sandbox"]
    out = subprocess.run(cli + ["start", "kafka", "--name", "clitest"], env=env,
                         capture_output=True, text=True, check=True).stdout
    bootstrap = next(line.split(":", 1)[1].strip() for line in out.splitlines()
                     if line.strip().startswith("properties.bootstrap.servers:"))
    port = int(bootstrap.rsplit(":", 1)[1])
    try:
        assert port_in_use(port)
        p = Producer({"bootstrap.servers": bootstrap})
        p.produce("hello", value="world")
        assert p.flush(30) == 0
        st = subprocess.run(cli + ["status", "kafka", "--name", "clitest"], env=env,
                            capture_output=True, text=True, check=False)
        assert st.returncode == 0 and "running" in st.stdout and bootstrap in st.stdout
    finally:
        stop = subprocess.run(cli + ["stop", "kafka", "--name", "clitest"], env=env,
                              capture_output=True, text=True, check=True)
    assert "stopped" in stop.stdout
    assert not port_in_use(port)
    st = subprocess.run(cli + ["status", "kafka", "--name", "clitest"], env=env,
                        capture_output=True, text=True, check=False)
    assert st.returncode == 1 and "not started" in st.stdout


