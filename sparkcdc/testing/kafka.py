"""A real, throwaway Apache Kafka broker for tests, benchmarks and ``sparkcdc sandbox``.

Kafka 4.x in KRaft mode: one JVM that is broker and controller at once (no ZooKeeper),
started from the jars ``make setup`` fetched into ``.jars/kafka`` (scripts/fetch_jars.sh),
on two free loopback ports (clients, controller) with a temporary log directory. The same
two steps as Kafka's own scripts, by their main classes: ``kafka.tools.StorageTool format``
(what ``kafka-storage.sh format`` runs) writes the cluster id and the bootstrap metadata,
then ``kafka.Kafka`` runs the server.

Sized for a shared 2-core machine and a quick start (about 1.5 s): a 256 MiB heap, the
client compiler only, a few network and I/O threads, one partition per internal topic,
replication factor 1 everywhere (so transactions and consumer groups work on one broker),
no group rebalance delay. The server's log (log4j, INFO) is ``server.log`` in its directory.

Lifetimes as for the MariaDB sandbox (``sparkcdc.testing.mariadb``): attached (tests) dies
with the Python process that started it, through ``atexit`` and the kernel's parent-death
signal; detached (``sparkcdc sandbox start kafka``) outlives the command, found again by
its state file.
"""

from __future__ import annotations

import base64
import dataclasses
import json
import os
import secrets
import shutil
import signal
import socket
import subprocess
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

from sparkcdc.errors import SandboxError
from sparkcdc.testing import processes
from sparkcdc.testing.mariadb import _pid_alive, free_port, set_pdeathsig, state_dir

JARS_ENV = "SPARKCDC_KAFKA_JARS"  # a folder of the broker's jars, instead of .jars/kafka
READY_LINE = "Kafka Server started"  # what kafka.server.KafkaRaftServer logs once serving
JVM_OPTIONS = ("-Xmx256m", "-Xms64m", "-XX:+UseSerialGC", "-XX:TieredStopAtLevel=1",
               "-XX:-UsePerfData", "-Djava.awt.headless=true")

LOG4J = """\
status = error
appender.file.type = File
appender.file.name = FILE
appender.file.fileName = {log}
appender.file.append = true
appender.file.layout.type = PatternLayout
appender.file.layout.pattern = [%d] %p %m (%c)%n
rootLogger.level = INFO
rootLogger.appenderRef.file.ref = FILE
logger.state.name = state.change.logger
logger.state.level = WARN
"""


def jars_dir() -> Path:
    """Where the broker's jars are: ``$SPARKCDC_KAFKA_JARS``, else ``.jars/kafka`` of the
    source tree this package runs from (``make setup`` fills it)."""
    env = os.environ.get(JARS_ENV)
    d = Path(env) if env else Path(__file__).resolve().parents[2] / ".jars" / "kafka"
    if not any(d.glob("kafka_2.13-*.jar")):
        raise SandboxError(f"the Kafka broker's jars are not in {d}",
                           fix="run `make setup` (scripts/fetch_jars.sh kafka fetches them with "
                               f"mvn), or point {JARS_ENV} at a folder holding kafka_2.13 and "
                               "its runtime jars")
    return d


def _java() -> str:
    home = os.environ.get("JAVA_HOME")
    found = str(Path(home) / "bin" / "java") if home else shutil.which("java")
    if not found or not os.path.exists(found):
        raise SandboxError("java was not found on this machine (Kafka 4 needs Java 17 or newer)",
                           fix="install Debian's openjdk-17-jre-headless (`make setup`)")
    return found


def cluster_id() -> str:
    """A random KRaft cluster id: 16 bytes, URL-safe base64 without padding (Kafka's Uuid
    text), never starting with '-' (the command line would take it for an option)."""
    while True:
        text = base64.urlsafe_b64encode(secrets.token_bytes(16)).decode().rstrip("=")
        if not text.startswith("-"):
            return text


@dataclass
class KafkaInfo:
    """Everything needed to reach a running broker; JSON-serializable."""

    name: str
    pid: int
    host: str
    port: int
    controller_port: int
    root: str
    detached: bool = False

    @property
    def bootstrap_servers(self) -> str:
        return f"{self.host}:{self.port}"

    @property
    def log_file(self) -> str:
        return os.path.join(self.root, "server.log")

    def sink_options(self, **extra: str) -> dict[str, str]:
        """Options of the ``kafka`` sink for this broker."""
        return {"properties.bootstrap.servers": self.bootstrap_servers, **extra}




class KafkaSandbox:
    """One throwaway Kafka broker. Use as a context manager or call start()/stop().

    ``settings``: extra ``server.properties`` entries (e.g. ``{"auto.create.topics.enable":
    "false"}``), over the defaults of ``properties``; ``jvm_options``: the JVM's (a
    benchmark may want the full JIT and a bigger heap)."""

    def __init__(self, settings: dict[str, str] | None = None, *, name: str = "sandbox",
                 base_dir: str | os.PathLike | None = None, detached: bool = False,
                 jvm_options: tuple[str, ...] = JVM_OPTIONS):
        self.settings = dict(settings or {})
        self.jvm_options = tuple(jvm_options)
        self.name = name
        self.detached = detached
        self._base_dir = Path(base_dir) if base_dir else None
        self._proc: subprocess.Popen | None = None
        self._root: Path | None = None
        self.info: KafkaInfo | None = None

    def __enter__(self):
        self.start()
        return self

    def __exit__(self, *exc) -> None:
        self.stop()

    # -- lifecycle -------------------------------------------------------------------------

    def properties(self, port: int, controller_port: int, data: Path) -> dict[str, str]:
        """The broker's ``server.properties``: a combined broker and controller on loopback,
        small and single-replica."""
        props = {
            "process.roles": "broker,controller",
            "node.id": "1",
            "controller.quorum.voters": f"1@127.0.0.1:{controller_port}",
            "listeners": f"PLAINTEXT://127.0.0.1:{port},CONTROLLER://127.0.0.1:{controller_port}",
            "advertised.listeners": f"PLAINTEXT://127.0.0.1:{port}",
            "controller.listener.names": "CONTROLLER",
            "inter.broker.listener.name": "PLAINTEXT",
            "listener.security.protocol.map": "PLAINTEXT:PLAINTEXT,CONTROLLER:PLAINTEXT",
            "log.dirs": str(data),
            "num.partitions": "1",
            "default.replication.factor": "1",
            "offsets.topic.replication.factor": "1",
            "offsets.topic.num.partitions": "1",
            "transaction.state.log.replication.factor": "1",
            "transaction.state.log.min.isr": "1",
            "transaction.state.log.num.partitions": "1",
            "share.coordinator.state.topic.replication.factor": "1",
            "share.coordinator.state.topic.min.isr": "1",
            "group.initial.rebalance.delay.ms": "0",
            "num.network.threads": "2",
            "num.io.threads": "2",
            "background.threads": "2",
            "num.recovery.threads.per.data.dir": "1",
            "log.cleaner.threads": "1",
            "log.cleaner.dedupe.buffer.size": str(8 << 20),  # 128 MiB by default: > the heap
            "log.cleaner.backoff.ms": "1000",
        }
        props.update(self.settings)
        return props

    def _write_config(self, root: Path, port: int, controller_port: int) -> Path:
        path = root / "server.properties"
        props = self.properties(port, controller_port, root / "data")
        path.write_text("".join(f"{k}={v}\n" for k, v in props.items()))
        (root / "log4j2.properties").write_text(LOG4J.format(log=root / "server.log"))
        return path

    def _java_args(self, root: Path, main: str, *args: str) -> list[str]:
        return [_java(), *self.jvm_options, f"-Dlog4j2.configurationFile={root / 'log4j2.properties'}",
                "-cp", str(jars_dir() / "*"), main, *args]

    def start(self, timeout: float = 60.0) -> KafkaInfo:
        if self.info is not None:
            return self.info
        jars_dir()  # missing jars fail before anything is made
        root = Path(tempfile.mkdtemp(prefix=f"sparkcdc-kafka-{self.name}-", dir=self._base_dir))
        self._root = root
        last = ""
        try:
            for _attempt in range(5):  # a free port can be taken between probe and bind
                port, cport = free_port(), free_port()
                if port == cport:
                    continue
                shutil.rmtree(root / "data", ignore_errors=True)  # a try's quorum state too
                config = self._write_config(root, port, cport)
                self._format(root, config)
                self._launch(root, config)
                if self._wait_ready(root, port, timeout):
                    break
                last = self._log_tail(root)
                self._kill()
                if "Address already in use" not in last:
                    raise SandboxError(f"the Kafka broker did not become ready:\n{last}")
            else:
                raise SandboxError(f"the Kafka broker could not bind a port:\n{last}")
        except BaseException:
            self._kill()
            shutil.rmtree(root, ignore_errors=True)
            self._root = None
            raise
        assert self._proc is not None
        self.info = KafkaInfo(name=self.name, pid=self._proc.pid, host="127.0.0.1", port=port,
                              controller_port=cport, root=str(root), detached=self.detached)
        if not self.detached:
            processes.live.add(self)
        return self.info

    def _format(self, root: Path, config: Path) -> None:
        """``kafka-storage.sh format``: the log directory gets its cluster id and the
        bootstrap metadata (the features of this Kafka version)."""
        p = subprocess.run(self._java_args(root, "kafka.tools.StorageTool", "format",
                                           "-t", cluster_id(), "-c", str(config)),
                           capture_output=True, text=True, timeout=120, check=False)
        if p.returncode != 0:
            raise SandboxError("formatting the Kafka log directory failed: "
                               f"{(p.stderr or p.stdout).strip()[-2000:]}")

    def _launch(self, root: Path, config: Path) -> None:
        with open(root / "server.out", "ab") as out:  # the JVM's own output (a crash)
            self._proc = subprocess.Popen(
                self._java_args(root, "kafka.Kafka", str(config)), stdout=out,
                stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                preexec_fn=None if self.detached else set_pdeathsig,  # noqa: PLW1509 - prctl(2)
                start_new_session=self.detached)

    def _wait_ready(self, root: Path, port: int, timeout: float, since: int = 0) -> bool:
        """Serving: the server logged that it started (after byte ``since`` of its log: a
        restart appends to it) and its client port takes a connection."""
        log = root / "server.log"
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self._proc is None or self._proc.poll() is not None:
                return False
            try:
                with open(log, "rb") as f:
                    f.seek(since)
                    started = READY_LINE.encode() in f.read()
            except OSError:
                started = False
            if started and _accepts(port):
                return True
            time.sleep(0.05)
        return False

    @staticmethod
    def _log_tail(root: Path) -> str:
        text = ""
        for name in ("server.out", "server.log"):
            p = root / name
            if p.exists():
                text += p.read_text(errors="replace")[-3000:]
        return text

    def _kill(self) -> None:
        processes.kill(self._proc)
        self._proc = None

    def stop(self, timeout: float = 20.0) -> None:
        """Shut the broker down (SIGTERM: a clean shutdown), SIGKILL if it lingers; remove its
        data."""
        processes.live.discard(self)
        processes.end(self._proc, timeout)
        self._proc = None
        if self._root is not None:
            shutil.rmtree(self._root, ignore_errors=True)
            self._root = None
        self.info = None

    def kill(self) -> None:
        """SIGKILL the broker, keeping its data and ports (``restart`` brings it back)."""
        self._kill()

    def restart(self, timeout: float = 60.0) -> None:
        """Stop (cleanly unless killed already) and start the same broker again: same data,
        same ports. For fault tests."""
        info = self._require()
        if self._proc is not None and self._proc.poll() is None:
            self._proc.terminate()
            self._proc.wait(timeout)
        root = Path(info.root)
        since = (root / "server.log").stat().st_size
        self._launch(root, root / "server.properties")
        if not self._wait_ready(root, info.port, timeout, since):
            raise SandboxError(f"the Kafka broker did not come back:\n{self._log_tail(root)}")
        info.pid = self._proc.pid if self._proc else info.pid

    @property
    def running(self) -> bool:
        return self._proc is not None and self._proc.poll() is None

    def _require(self) -> KafkaInfo:
        if self.info is None:
            raise SandboxError("the Kafka sandbox is not running", fix="call start() first")
        return self.info

    @property
    def bootstrap_servers(self) -> str:
        return self._require().bootstrap_servers


def _accepts(port: int) -> bool:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.settimeout(0.5)
        return s.connect_ex(("127.0.0.1", port)) == 0


# -- detached brokers for the CLI ----------------------------------------------------------------

def _state_file(name: str) -> Path:
    return state_dir() / f"kafka-{name}.json"


def start_detached(name: str = "default") -> KafkaInfo:
    existing = read_state(name)
    if existing is not None and _pid_alive(existing.pid):
        raise SandboxError(f"Kafka sandbox {name!r} is already running (pid {existing.pid})",
                           fix=f"`sparkcdc sandbox stop kafka --name {name}` first, or pick "
                               "another --name")
    state_dir().mkdir(parents=True, exist_ok=True)
    info = KafkaSandbox(name=name, detached=True).start()
    fd = os.open(_state_file(name), os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(fd, "w") as f:
        json.dump(dataclasses.asdict(info), f, indent=2)
    return info


def read_state(name: str = "default") -> KafkaInfo | None:
    path = _state_file(name)
    if not path.exists():
        return None
    return KafkaInfo(**json.loads(path.read_text()))


def status_detached(name: str = "default") -> tuple[KafkaInfo | None, bool]:
    info = read_state(name)
    return info, bool(info and _pid_alive(info.pid))


def stop_detached(name: str = "default", timeout: float = 30.0) -> bool:
    """Stop a detached broker and remove its data. False when none was running."""
    info = read_state(name)
    if info is None:
        return False
    was_running = _pid_alive(info.pid)
    if was_running:
        os.kill(info.pid, signal.SIGTERM)
        deadline = time.monotonic() + timeout
        while _pid_alive(info.pid) and time.monotonic() < deadline:
            time.sleep(0.1)
        if _pid_alive(info.pid):
            os.kill(info.pid, signal.SIGKILL)
    shutil.rmtree(info.root, ignore_errors=True)
    _state_file(name).unlink(missing_ok=True)
    return was_running


__all__ = ["JARS_ENV", "KafkaInfo", "KafkaSandbox", "cluster_id", "jars_dir", "read_state",
           "start_detached", "status_detached", "stop_detached"]
