"""A real, throwaway Kafka Connect worker with Debezium's MySQL connector, for the tests and
benchmarks that need the system users put in front of Kafka.

Kafka Connect in *standalone* mode: one JVM (``org.apache.kafka.connect.cli.
ConnectStandalone``) given a worker properties file and one properties file per connector,
against a running broker (``sparkcdc.testing.kafka``). Standalone keeps the source offsets
in a local file, flushed every ``offset.flush.interval.ms`` and on a clean shutdown, which
is what makes Debezium's at-least-once easy to provoke on purpose: a SIGKILL after changes
were sent and before the next flush makes the restarted connector send them again. The
connectors are files in the worker's folder, so ``restart()`` starts the same worker with
the same connectors and offsets. The REST API listens on a free loopback port (status, the
tasks' states).

The jars come from ``scripts/fetch_jars.sh connect``: the worker's class path is
``.jars/connect`` and the plugin path ``.jars/connect-plugins`` (each connector a folder of
its own, loaded in an isolated class loader as Connect does for any plugin). Sized for a
shared 2-core machine: a 384 MiB heap, the client compiler only.

Debezium's MySQL connector checks the server's version: it reads MariaDB as MySQL when the
server reports a 5.7-ish version (``ServerSettings(version="5.7.19-10.11.19-log")``). Debezium
3.x's separate MariaDB connector would take MariaDB as it is, but the registry this project
fetches from did not serve it (docs/operations.md).
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import tempfile
import time
import urllib.error
import urllib.request
from collections.abc import Mapping
from pathlib import Path

from sparkcdc.errors import SandboxError
from sparkcdc.testing import processes
from sparkcdc.testing.kafka import LOG4J, _java
from sparkcdc.testing.mariadb import SandboxInfo, free_port, set_pdeathsig

JARS_ENV = "SPARKCDC_CONNECT_JARS"  # the worker's jars, instead of .jars/connect
PLUGINS_ENV = "SPARKCDC_CONNECT_PLUGINS"  # the plugin path, instead of .jars/connect-plugins
MYSQL_CONNECTOR = "io.debezium.connector.mysql.MySqlConnector"
READY_LINE = "Kafka Connect started"  # what org.apache.kafka.connect.runtime.Connect logs
JVM_OPTIONS = ("-Xmx384m", "-Xms64m", "-XX:+UseSerialGC", "-XX:TieredStopAtLevel=1",
               "-XX:-UsePerfData", "-Djava.awt.headless=true")
MAIN = "org.apache.kafka.connect.cli.ConnectStandalone"


def _source_tree() -> Path:
    return Path(__file__).resolve().parents[2]


def jars_dir() -> Path:
    """The worker's jars: ``$SPARKCDC_CONNECT_JARS``, else ``.jars/connect``."""
    env = os.environ.get(JARS_ENV)
    d = Path(env) if env else _source_tree() / ".jars" / "connect"
    if not any(d.glob("connect-runtime-*.jar")):
        raise SandboxError(f"Kafka Connect's jars are not in {d}",
                           fix="run `scripts/fetch_jars.sh connect` (it fetches them with mvn), "
                               f"or point {JARS_ENV} at a folder holding connect-runtime and its "
                               "runtime jars")
    return d


def plugins_dir() -> Path:
    """The plugin path: ``$SPARKCDC_CONNECT_PLUGINS``, else ``.jars/connect-plugins``; it
    must hold Debezium's MySQL connector."""
    env = os.environ.get(PLUGINS_ENV)
    d = Path(env) if env else _source_tree() / ".jars" / "connect-plugins"
    if not any(d.glob("*/debezium-connector-mysql-*.jar")):
        raise SandboxError(f"Debezium's MySQL connector is not in the plugin path {d}",
                           fix="run `scripts/fetch_jars.sh connect`, or point "
                               f"{PLUGINS_ENV} at a folder with one sub-folder per plugin")
    return d


def ensure_jars(timeout: float = 600.0) -> None:
    """Fetch the worker's and the connector's jars when they are missing (with the source
    tree's ``scripts/fetch_jars.sh connect``, which needs mvn); fail saying why otherwise.
    For test fixtures: a missing jar is fetched, never a reason to skip."""
    try:
        jars_dir()
        plugins_dir()
        return
    except SandboxError:
        if os.environ.get(JARS_ENV) or os.environ.get(PLUGINS_ENV):
            raise  # a folder was named: fetching into the tree would not fill it
    script = _source_tree() / "scripts" / "fetch_jars.sh"
    if not script.exists():
        raise SandboxError("Kafka Connect's jars are missing and this is no source tree to "
                           "fetch them into", fix=f"set {JARS_ENV} and {PLUGINS_ENV}")
    p = subprocess.run(["bash", str(script), "connect"], cwd=_source_tree(), text=True,
                       capture_output=True, timeout=timeout, check=False)
    if p.returncode != 0:
        raise SandboxError(f"fetching Kafka Connect's jars failed:\n{(p.stderr or p.stdout)[-3000:]}",
                           fix="run `scripts/fetch_jars.sh connect` by hand (mvn must reach "
                               "the Maven registry)")
    jars_dir()
    plugins_dir()


def debezium_mysql(db: SandboxInfo, *, topic_prefix: str, databases: str, server_id: int,
                   history_file: str | os.PathLike, schemas: bool = False,
                   **extra: str) -> dict[str, str]:
    """A Debezium MySQL connector's configuration for a sandbox server: its CDC user, the
    schema history in a file (no extra topic), ``snapshot.mode`` initial (the tables' rows,
    then the binlog), JSON values with or without Connect's schema in each message."""
    conf = {
        "connector.class": MYSQL_CONNECTOR,
        "tasks.max": "1",
        "database.hostname": db.host,
        "database.port": str(db.port),
        "database.user": db.cdc_user,
        "database.password": db.cdc_password,
        "database.server.id": str(server_id),
        "topic.prefix": topic_prefix,
        "database.include.list": databases,
        "snapshot.mode": "initial",
        "snapshot.locking.mode": "none",  # the CDC user has no RELOAD (FLUSH TABLES)
        "schema.history.internal": "io.debezium.storage.file.history.FileSchemaHistory",
        "schema.history.internal.file.filename": str(history_file),
        "include.schema.changes": "false",
        "key.converter": "org.apache.kafka.connect.json.JsonConverter",
        "key.converter.schemas.enable": str(schemas).lower(),
        "value.converter": "org.apache.kafka.connect.json.JsonConverter",
        "value.converter.schemas.enable": str(schemas).lower(),
    }
    conf.update(extra)
    return conf




class KafkaConnectSandbox:
    """One throwaway Kafka Connect worker (standalone) with its connectors. Use as a context
    manager or call start()/stop(); dies with the Python process that started it.

    ``connectors``: name -> configuration (``debezium_mysql(...)`` makes one);
    ``settings``: extra worker properties over the defaults of ``properties``."""

    def __init__(self, bootstrap_servers: str, connectors: Mapping[str, Mapping[str, str]],
                 settings: Mapping[str, str] | None = None, *, name: str = "sandbox",
                 base_dir: str | os.PathLike | None = None,
                 jvm_options: tuple[str, ...] = JVM_OPTIONS):
        self.bootstrap_servers = bootstrap_servers
        self.connectors = {n: dict(c) for n, c in connectors.items()}
        self.settings = dict(settings or {})
        self.name = name
        self.jvm_options = tuple(jvm_options)
        self._base_dir = Path(base_dir) if base_dir else None
        self._proc: subprocess.Popen | None = None
        self.root: Path | None = None
        self.port: int | None = None

    def __enter__(self):
        self.start()
        return self

    def __exit__(self, *exc) -> None:
        self.stop()

    def properties(self, root: Path, port: int) -> dict[str, str]:
        """The worker's properties: the broker, JSON converters by default (a connector may
        set its own), offsets in a file, the plugin path, REST on loopback."""
        props = {
            "bootstrap.servers": self.bootstrap_servers,
            "key.converter": "org.apache.kafka.connect.json.JsonConverter",
            "value.converter": "org.apache.kafka.connect.json.JsonConverter",
            "offset.storage.file.filename": str(root / "offsets.dat"),
            "offset.flush.interval.ms": "10000",
            "plugin.path": str(plugins_dir()),
            "plugin.discovery": "service_load",  # the connectors' manifests, no class scan
            "listeners": f"http://127.0.0.1:{port}",
            "rest.advertised.host.name": "127.0.0.1",
            "task.shutdown.graceful.timeout.ms": "10000",
        }
        props.update(self.settings)
        return props

    def _write_config(self, root: Path, port: int) -> list[Path]:
        worker = root / "worker.properties"
        worker.write_text(_props(self.properties(root, port)))
        files = [worker]
        for n, conf in self.connectors.items():
            path = root / f"connector-{n}.properties"
            fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)  # a password
            with os.fdopen(fd, "w") as f:
                f.write(_props({"name": n, **conf}))
            files.append(path)
        (root / "log4j2.properties").write_text(LOG4J.format(log=root / "connect.log"))
        return files

    def start(self, timeout: float = 120.0) -> KafkaConnectSandbox:
        """Start the worker and wait until every connector and its tasks run."""
        if self._proc is not None:
            return self
        jars_dir()
        root = Path(tempfile.mkdtemp(prefix=f"sparkcdc-connect-{self.name}-",
                                     dir=self._base_dir))
        self.root = root
        try:
            for _attempt in range(5):  # a free port can be taken between probe and bind
                self.port = free_port()
                self._write_config(root, self.port)
                since = _size(root / "connect.log")
                self._launch()
                ok = self._wait_ready(timeout, since)
                if ok:
                    break
                tail = self.log_tail()
                self._kill()
                if "Address already in use" not in tail:
                    raise SandboxError(f"Kafka Connect did not become ready (its log: "
                                       f"{root / 'connect.log'}):\n{tail}")
            else:
                raise SandboxError(f"Kafka Connect could not bind a port:\n{self.log_tail()}")
        except BaseException:
            self._kill()  # the folder stays: its log says why
            self.root = None
            raise
        processes.live.add(self)
        return self

    def _launch(self) -> None:
        assert self.root is not None
        root = self.root
        files = [root / "worker.properties",
                 *(root / f"connector-{n}.properties" for n in self.connectors)]
        args = [_java(), *self.jvm_options,
                f"-Dlog4j2.configurationFile={root / 'log4j2.properties'}",
                "-cp", str(jars_dir() / "*"), MAIN, *map(str, files)]
        # set_pdeathsig only calls prctl(2) in the child: safe between fork and exec
        with open(root / "connect.out", "ab") as out:  # the JVM's own output (a crash)
            self._proc = subprocess.Popen(args, stdout=out, stderr=subprocess.STDOUT,
                                          stdin=subprocess.DEVNULL,
                                          preexec_fn=set_pdeathsig)  # noqa: PLW1509

    def _wait_ready(self, timeout: float, since: int) -> bool:
        """Ready: the worker logged that it started (after byte ``since`` of its log) and
        every connector and task is RUNNING. A task that FAILED fails at once, with its
        trace."""
        assert self.root is not None
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self._proc is None or self._proc.poll() is not None:
                return False
            if READY_LINE.encode() in _read_from(self.root / "connect.log", since):
                states = {n: self._status(n) for n in self.connectors}
                failed = [(n, s) for n, s in states.items() if s and _failed(s)]
                if failed:
                    n, s = failed[0]
                    raise SandboxError(f"Kafka Connect's connector {n!r} failed:\n"
                                       f"{_trace(s)[-4000:]}")
                if all(s and _running(s) for s in states.values()):
                    return True
            time.sleep(0.1)
        return False

    def _status(self, connector: str) -> dict | None:
        try:
            with urllib.request.urlopen(f"{self.url}/connectors/{connector}/status",
                                        timeout=5) as r:
                return json.loads(r.read())
        except (urllib.error.URLError, OSError, ValueError):
            return None

    def status(self, connector: str) -> dict:
        """The REST API's status of a connector (its state and its tasks')."""
        s = self._status(connector)
        if s is None:
            raise SandboxError(f"Kafka Connect gave no status for {connector!r}:\n"
                               f"{self.log_tail()}")
        return s

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    @property
    def running(self) -> bool:
        return self._proc is not None and self._proc.poll() is None

    @property
    def pid(self) -> int | None:
        return self._proc.pid if self._proc else None

    def log_tail(self, chars: int = 3000) -> str:
        text = ""
        for name in ("connect.out", "connect.log"):
            p = self.root / name if self.root else None
            if p is not None and p.exists():
                text += p.read_text(errors="replace")[-chars:]
        return text

    def offsets(self) -> bytes:
        """The offsets file as it is (empty until the first flush)."""
        p = self.root / "offsets.dat" if self.root else None
        return p.read_bytes() if p is not None and p.exists() else b""

    def _kill(self) -> None:
        processes.kill(self._proc)
        self._proc = None

    def kill(self) -> None:
        """SIGKILL the worker, keeping its folder (offsets, history): ``restart`` resumes.
        Whatever was sent after the last offset flush is sent again then."""
        self._kill()

    def shutdown(self, timeout: float = 60.0) -> None:
        """A clean stop (SIGTERM): the tasks stop and their offsets are flushed; the folder
        stays for ``restart``."""
        processes.end(self._proc, timeout)
        self._proc = None

    def restart(self, timeout: float = 120.0) -> None:
        """Stop (cleanly unless killed already) and start the same worker again: the same
        connectors, offsets, schema history and REST port."""
        if self.root is None:
            raise SandboxError("the Kafka Connect sandbox is not running",
                               fix="call start() first")
        self.shutdown()
        since = _size(self.root / "connect.log")
        self._launch()
        if not self._wait_ready(timeout, since):
            raise SandboxError(f"Kafka Connect did not come back:\n{self.log_tail()}")

    def stop(self) -> None:
        """Shut the worker down and remove its folder."""
        processes.live.discard(self)
        self.shutdown(20.0)
        if self.root is not None:
            shutil.rmtree(self.root, ignore_errors=True)
            self.root = None


def _props(d: Mapping[str, str]) -> str:
    """A Java properties file (values escaped where the format needs it)."""
    def esc(v: str) -> str:
        return v.replace("\\", "\\\\").replace("\n", "\\n")
    return "".join(f"{k}={esc(str(v))}\n" for k, v in d.items())


def _size(path: Path) -> int:
    return path.stat().st_size if path.exists() else 0


def _read_from(path: Path, since: int) -> bytes:
    try:
        with open(path, "rb") as f:
            f.seek(since)
            return f.read()
    except OSError:
        return b""


def _running(status: dict) -> bool:
    tasks = status.get("tasks") or []
    return (status.get("connector", {}).get("state") == "RUNNING" and bool(tasks)
            and all(t.get("state") == "RUNNING" for t in tasks))


def _failed(status: dict) -> bool:
    return (status.get("connector", {}).get("state") == "FAILED"
            or any(t.get("state") == "FAILED" for t in status.get("tasks") or []))


def _trace(status: dict) -> str:
    parts = [status.get("connector", {}).get("trace") or ""]
    parts += [t.get("trace") or "" for t in status.get("tasks") or []]
    return "\n".join(p for p in parts if p)


__all__ = ["JARS_ENV", "MYSQL_CONNECTOR", "PLUGINS_ENV", "KafkaConnectSandbox",
           "debezium_mysql", "ensure_jars", "jars_dir", "plugins_dir"]
