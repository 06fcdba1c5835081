"""A real, throwaway MariaDB server for tests, benchmarks and the demo.

It runs Debian's ``mariadbd`` as a child process on a free loopback port with a temporary
datadir, configured for CDC (binlog ROW, row image FULL, row metadata FULL, a unique
server id) and with a least-privilege CDC user. It can also be started misconfigured on
purpose, so validation can be tested against a real server rather than a mock.

Two lifetimes:

* attached (the default, used by tests): the server dies with the Python process that
  started it -- on a clean exit (``atexit``) and also on SIGKILL of the parent, via the
  kernel's parent-death signal, so no orphan server survives a failing test run;
* detached (``sparkcdc sandbox start``): the server outlives the command; its state file
  (mode 0600, it holds the throwaway passwords) lets ``status`` and ``stop`` find it.
"""

from __future__ import annotations

import ctypes
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
from typing import TYPE_CHECKING, Any

from sparkcdc.errors import SandboxError
from sparkcdc.testing import leftovers, processes

if TYPE_CHECKING:  # typing.Self is 3.11's; `with` on a subclass gives the subclass
    from typing_extensions import Self

CDC_PRIVILEGES = "SELECT, REPLICATION SLAVE, REPLICATION CLIENT"


@dataclass(frozen=True)
class ServerSettings:
    """How the server's binlog is configured. The defaults are what CDC needs."""

    log_bin: bool = True
    binlog_format: str = "ROW"
    binlog_row_image: str = "FULL"
    binlog_row_metadata: str = "FULL"
    server_id: int | None = None  # None: a free-ish random id
    version: str | None = None  # override what the server reports (e.g. for Debezium)
    time_zone: str | None = None  # e.g. "+02:00"; None keeps the server default (SYSTEM)
    tls: TLSFiles | None = None  # serve TLS with these files (see make_tls_files)
    extra_args: tuple[str, ...] = ()

    @classmethod
    def misconfigured(cls, what: str) -> ServerSettings:
        """Settings that break CDC on purpose: ``statement``, ``mixed``, ``no-binlog``,
        ``minimal-image``, ``noblob-image``, ``minimal-metadata``."""
        variants = {
            "statement": cls(binlog_format="STATEMENT"),
            "mixed": cls(binlog_format="MIXED"),
            "no-binlog": cls(log_bin=False),
            "minimal-image": cls(binlog_row_image="MINIMAL"),
            "noblob-image": cls(binlog_row_image="NOBLOB"),
            "minimal-metadata": cls(binlog_row_metadata="MINIMAL"),
        }
        if what not in variants:
            raise SandboxError(
                f"unknown misconfiguration {what!r}",
                fix=f"use one of: {', '.join(sorted(variants))}",
            )
        return variants[what]


@dataclass(frozen=True)
class TLSFiles:
    """A throwaway CA and the PEM files signed by it (see ``make_tls_files``)."""

    ca: str
    ca_key: str
    server_cert: str
    server_key: str
    client_cert: str
    client_key: str


def make_tls_files(directory: str | os.PathLike,
                   names: tuple[str, ...] = ("127.0.0.1", "localhost"), *,
                   ca_name: str = "sparkcdc test CA") -> TLSFiles:
    """A self-signed CA plus a server certificate for ``names`` (IPs and DNS names in its
    subjectAltName) and a client certificate, made with the openssl CLI in ``directory``."""
    openssl = _find_binary("openssl")
    d = Path(directory)
    d.mkdir(parents=True, exist_ok=True)

    def run(*args: str) -> None:
        p = subprocess.run([openssl, *args], capture_output=True, text=True, cwd=d, check=False)
        if p.returncode != 0:
            raise SandboxError(f"openssl {args[0]} failed: {p.stderr.strip()[-1000:]}")

    san = ",".join((f"IP:{n}" if n.replace(".", "").isdigit() or ":" in n else f"DNS:{n}")
                   for n in names)
    key = ("-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:prime256v1", "-nodes")
    run("req", "-x509", *key, "-days", "3", "-subj", f"/CN={ca_name}",
        "-keyout", "ca-key.pem", "-out", "ca.pem",
        "-addext", "basicConstraints=critical,CA:TRUE",
        "-addext", "keyUsage=critical,keyCertSign,cRLSign")
    for who, usage, ext in (("server", "serverAuth", f"subjectAltName={san}\n"),
                            ("client", "clientAuth", "")):
        run("req", *key, "-subj", f"/CN=sparkcdc test {who}",
            "-keyout", f"{who}-key.pem", "-out", f"{who}.csr")
        (d / f"{who}.ext").write_text(
            ext + "basicConstraints=CA:FALSE\n"
            "keyUsage=critical,digitalSignature\n"
            f"extendedKeyUsage={usage}\n")
        run("x509", "-req", "-in", f"{who}.csr", "-CA", "ca.pem", "-CAkey", "ca-key.pem",
            "-CAcreateserial", "-days", "3", "-out", f"{who}-cert.pem",
            "-extfile", f"{who}.ext")
    return TLSFiles(ca=str(d / "ca.pem"), ca_key=str(d / "ca-key.pem"),
                    server_cert=str(d / "server-cert.pem"), server_key=str(d / "server-key.pem"),
                    client_cert=str(d / "client-cert.pem"), client_key=str(d / "client-key.pem"))


@dataclass
class SandboxInfo:
    """Everything needed to reach a running sandbox; JSON-serializable."""

    name: str
    pid: int
    host: str
    port: int
    socket: str
    datadir: str
    server_id: int
    cdc_user: str
    cdc_password: str
    admin_user: str
    admin_password: str
    detached: bool = False
    server: str = "mariadb"  # or "mysql" (sparkcdc/testing/mysql.py)

    def connection_options(self, *, password: bool = True) -> dict[str, str]:
        """Flink CDC-style source options for the CDC user."""
        opts = {
            "hostname": self.host,
            "port": str(self.port),
            "username": self.cdc_user,
            "password": self.cdc_password if password else "******",
        }
        return opts


def _find_binary(*names: str) -> str:
    for name in names:
        path = shutil.which(name)
        if path:
            return path
        for d in ("/usr/sbin", "/usr/bin", "/usr/libexec", "/usr/local/sbin"):
            cand = Path(d) / name
            if cand.exists():
                return str(cand)
    raise SandboxError(
        f"{names[0]} was not found on this machine",
        fix="install Debian's MariaDB server: `make setup` (or apt-get install mariadb-server)",
    )


def free_port() -> int:
    """A port that is free on 127.0.0.1 right now (the caller retries on a lost race)."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def set_pdeathsig() -> None:
    """The child dies with its parent (runs in the child between fork and exec): a killed
    test or pipeline leaves no server behind."""
    try:
        libc = ctypes.CDLL("libc.so.6", use_errno=True)
        libc.prctl(1, signal.SIGKILL)  # PR_SET_PDEATHSIG
    except OSError:
        pass




class MariaDBSandbox:
    """One throwaway ``mariadbd``. Use as a context manager or call start()/stop()."""

    def __init__(
        self,
        settings: ServerSettings | None = None,
        *,
        name: str = "sandbox",
        base_dir: str | os.PathLike | None = None,
        detached: bool = False,
        keep_datadir: bool = False,
    ):
        self.settings = settings or ServerSettings()
        self.name = name
        self.detached = detached
        self.keep_datadir = keep_datadir
        self._base_dir = Path(base_dir) if base_dir else None
        self._proc: subprocess.Popen | None = None
        self.info: SandboxInfo | None = None

    # -- lifecycle -------------------------------------------------------------------------

    def __enter__(self) -> Self:
        self.start()
        return self

    def __exit__(self, *exc) -> None:
        self.stop()

    def start(self, timeout: float = 60.0) -> SandboxInfo:
        if self.info is not None:
            return self.info
        server = self._server_binary()
        parent = self._temp_parent()
        leftovers.sweep(parent or Path(tempfile.gettempdir()))  # of runs killed before
        root = Path(tempfile.mkdtemp(prefix=f"{leftovers.PREFIX}{self.name}-", dir=parent))
        leftovers.record(root, [os.getpid()])
        datadir = root / "data"
        sock = root / "mysqld.sock"
        try:
            self._initialize(datadir)
        except BaseException:
            shutil.rmtree(root, ignore_errors=True)
            raise
        server_id = self.settings.server_id or (1000 + secrets.randbelow(1_000_000))
        last_error = ""
        for _attempt in range(5):  # a free port can be taken between probe and bind
            port = free_port()
            args = self._server_args(server, datadir, sock, port, server_id)
            self._proc = self._spawn(args, root / "error.log")
            if self._wait_ready(sock, timeout):
                leftovers.record(root, [os.getpid(), self._proc.pid])
                break
            last_error = (root / "error.log").read_text(errors="replace")[-3000:]
            self._kill()
            if "Address already in use" not in last_error:
                shutil.rmtree(root, ignore_errors=True)
                raise SandboxError(f"{self.SERVER_NAME} did not become ready:\n{last_error}")
        else:
            shutil.rmtree(root, ignore_errors=True)
            raise SandboxError(f"{self.SERVER_NAME} could not bind a port:\n{last_error}")

        info = SandboxInfo(
            name=self.name, pid=self._proc.pid, host="127.0.0.1", port=port, socket=str(sock),
            datadir=str(datadir), server_id=server_id,
            cdc_user="cdc", cdc_password=secrets.token_urlsafe(12),
            admin_user="admin", admin_password=secrets.token_urlsafe(12),
            detached=self.detached, server=self.SERVER_KIND,
        )
        self.info = info
        self._root = root
        try:
            self._create_users(info)
        except Exception:
            self.stop()
            raise
        if not self.detached:
            processes.live.add(self)
        return info

    # -- what differs between servers (MySQLSandbox overrides these) -------------------------

    SERVER_NAME = "mariadbd"
    SERVER_KIND = "mariadb"

    def _server_binary(self) -> str:
        return _find_binary("mariadbd", "mysqld")

    def _temp_parent(self) -> Path | None:
        """Where the sandbox's folder (datadir, socket, log) is made."""
        return self._base_dir

    def _initialize(self, datadir: Path) -> None:
        """A new datadir with the system tables and a password-less root on the socket."""
        install_db = _find_binary("mariadb-install-db", "mysql_install_db")
        for _attempt in range(3):  # a bootstrap racing another one on /tmp can fail: again
            proc = subprocess.run(
                [install_db, "--no-defaults", f"--datadir={datadir}", "--user=root",
                 "--auth-root-authentication-method=normal", "--skip-test-db"],
                capture_output=True, text=True, check=False,
            )
            if proc.returncode == 0:
                return
            shutil.rmtree(datadir, ignore_errors=True)
        raise SandboxError(f"mariadb-install-db failed: {proc.stderr.strip()[-2000:]}")

    def _spawn(self, args: list[str], log_path: Path) -> subprocess.Popen:
        """Start the server process, its output appended to ``log_path``."""
        with open(log_path, "ab") as log:
            return subprocess.Popen(
                args, stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                preexec_fn=None if self.detached else set_pdeathsig,  # noqa: PLW1509 - prctl(2)
                start_new_session=self.detached,
            )

    def _server_args(self, mariadbd: str, datadir: Path, sock: Path, port: int,
                     server_id: int) -> list[str]:
        s = self.settings
        args = [
            mariadbd, "--no-defaults", f"--datadir={datadir}", f"--socket={sock}",
            f"--port={port}", "--bind-address=127.0.0.1", f"--server-id={server_id}",
            "--user=root", "--character-set-server=utf8mb4",
            "--collation-server=utf8mb4_general_ci",
            f"--pid-file={datadir / 'mariadbd.pid'}",
            "--skip-name-resolve", "--innodb-buffer-pool-size=256M",
            "--innodb-flush-log-at-trx-commit=2", "--max-connections=500",
            "--max-allowed-packet=64M",
        ]
        if s.log_bin:
            args += [
                f"--log-bin={datadir / 'binlog'}",
                f"--binlog-format={s.binlog_format}",
                f"--binlog-row-image={s.binlog_row_image}",
                f"--binlog-row-metadata={s.binlog_row_metadata}",
            ]
        if s.version:
            args.append(f"--version={s.version}")
        if s.time_zone:
            args.append(f"--default-time-zone={s.time_zone}")
        if s.tls:
            args += [f"--ssl-ca={s.tls.ca}", f"--ssl-cert={s.tls.server_cert}",
                     f"--ssl-key={s.tls.server_key}"]
        args += list(s.extra_args)
        return args

    def _wait_ready(self, sock: Path, timeout: float) -> bool:
        import pymysql

        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self._proc is None or self._proc.poll() is not None:
                return False
            if sock.exists():
                try:
                    pymysql.connect(unix_socket=str(sock), user="root", connect_timeout=2).close()
                    return True
                except pymysql.err.MySQLError:
                    pass
            time.sleep(0.05)
        return False

    def _create_users(self, info: SandboxInfo) -> None:
        with self.admin_connection() as conn, conn.cursor() as cur:
            cur.execute("CREATE USER %s@'%%' IDENTIFIED BY %s", (info.cdc_user, info.cdc_password))
            cur.execute(f"GRANT {CDC_PRIVILEGES} ON *.* TO %s@'%%'", (info.cdc_user,))
            cur.execute("CREATE USER %s@'%%' IDENTIFIED BY %s",
                        (info.admin_user, info.admin_password))
            cur.execute("GRANT ALL PRIVILEGES ON *.* TO %s@'%%' WITH GRANT OPTION",
                        (info.admin_user,))

    def _kill(self) -> None:
        processes.kill(self._proc)

    def stop(self, timeout: float = 30.0) -> None:
        """Shut the server down cleanly (SIGTERM), then SIGKILL if it lingers; remove data."""
        processes.live.discard(self)
        processes.end(self._proc, timeout)
        self._proc = None
        if self.info is not None and not self.keep_datadir:
            shutil.rmtree(self._root, ignore_errors=True)
        self.info = None

    def crash(self) -> None:
        """SIGKILL the server, as a crash (a failover test's primary that fails at once,
        where ``stop()`` shuts down cleanly: 9 to 12 s for a MySQL primary with a replica
        attached); ``stop()`` still removes its folder."""
        self._kill()

    def restart(self, timeout: float = 60.0) -> None:
        """Stop and start the same server (same datadir, port and users): for fault tests."""
        info = self._require()
        if self._proc is not None and self._proc.poll() is None:
            self._proc.terminate()
            self._proc.wait(timeout)
        args = self._server_args(self._server_binary(), Path(info.datadir), Path(info.socket),
                                 info.port, info.server_id)
        self._proc = self._spawn(args, self._root / "error.log")
        if not self._wait_ready(Path(info.socket), timeout):
            raise SandboxError(f"{self.SERVER_NAME} did not come back after restart")
        info.pid = self._proc.pid
        leftovers.record(self._root, [os.getpid(), info.pid])

    @property
    def running(self) -> bool:
        return self._proc is not None and self._proc.poll() is None

    # -- access ----------------------------------------------------------------------------

    def _require(self) -> SandboxInfo:
        if self.info is None:
            raise SandboxError("the sandbox is not running", fix="call start() first")
        return self.info

    def admin_connection(self, database: str | None = None, **kwargs: Any):
        """A root connection over the unix socket (autocommit), for setting up test data."""
        import pymysql

        info = self._require()
        return pymysql.connect(unix_socket=info.socket, user="root", database=database,
                               autocommit=True, charset="utf8mb4", **kwargs)

    def execute(self, *statements: str, database: str | None = None) -> None:
        with self.admin_connection(database) as conn, conn.cursor() as cur:
            for stmt in statements:
                cur.execute(stmt)

    def query(self, sql: str, args: Any = None, database: str | None = None) -> list[tuple]:
        with self.admin_connection(database) as conn, conn.cursor() as cur:
            cur.execute(sql, args)
            return list(cur.fetchall())

    @property
    def server_version(self) -> str:
        """What the server says it is (``SELECT VERSION()``), e.g. ``10.11.11-MariaDB-0+deb12u1``
        or MySQL's ``9.7.4-2``."""
        return str(self.query("SELECT VERSION()")[0][0])

    def source_options(self, **extra: str) -> dict[str, str]:
        """Options for the ``mysql-cdc`` source with the CDC user."""
        return {**self._require().connection_options(), **extra}


# -- replication, for failover tests -----------------------------------------------------------

def replicate(primary: MariaDBSandbox, replica: MariaDBSandbox, timeout: float = 30.0) -> None:
    """Make ``replica`` a GTID replica of ``primary`` from the primary's position now. The
    replica should run with ``--log-slave-updates`` so that its own binlog holds the
    primary's transactions under their GTIDs, as a server that can be promoted does."""
    p = primary._require()
    pos = primary.query("SELECT @@GLOBAL.gtid_binlog_pos")[0][0]
    password = secrets.token_urlsafe(12)
    primary.execute("SET SESSION sql_log_bin = 0",
                    f"CREATE USER 'repl'@'%' IDENTIFIED BY '{password}'",
                    "GRANT REPLICATION SLAVE ON *.* TO 'repl'@'%'")
    replica.execute(f"SET GLOBAL gtid_slave_pos = '{pos}'",
                    f"CHANGE MASTER TO MASTER_HOST='{p.host}', MASTER_PORT={p.port}, "
                    f"MASTER_USER='repl', MASTER_PASSWORD='{password}', "
                    f"MASTER_USE_GTID=slave_pos, MASTER_CONNECT_RETRY=1",
                    "START SLAVE")
    caught_up(primary, replica, timeout)


def caught_up(primary: MariaDBSandbox, replica: MariaDBSandbox, timeout: float = 30.0) -> str:
    """Wait until ``replica`` has applied everything ``primary`` has written; its GTID."""
    pos = primary.query("SELECT @@GLOBAL.gtid_binlog_pos")[0][0]
    (ok,), = replica.query("SELECT MASTER_GTID_WAIT(%s, %s)", (pos, timeout))
    if ok != 0:
        status = replica.query("SHOW SLAVE STATUS")
        raise SandboxError(f"the replica did not reach {pos} in {timeout:g}s: {status}")
    return str(pos)


def promote(replica: MariaDBSandbox) -> None:
    """The replica stops replicating and takes writes of its own (a failover)."""
    replica.execute("STOP SLAVE", "RESET SLAVE ALL")


# -- detached sandboxes for the CLI ------------------------------------------------------------

def state_dir() -> Path:
    return Path(os.environ.get("SPARKCDC_HOME", Path.home() / ".sparkcdc")) / "sandbox"


def _state_file(name: str, kind: str = "mariadb") -> Path:
    # MariaDB's state files keep their names of before MySQL came (``<name>.json``)
    return state_dir() / (f"{name}.json" if kind == "mariadb" else f"{kind}-{name}.json")


def start_detached(name: str = "default", settings: ServerSettings | None = None, *,
                   sandbox_class: type[MariaDBSandbox] | None = None) -> SandboxInfo:
    cls = sandbox_class or MariaDBSandbox
    kind = cls.SERVER_KIND
    existing = read_state(name, kind)
    if existing is not None and _pid_alive(existing.pid):
        server = "" if kind == "mariadb" else f" {kind}"
        raise SandboxError(f"sandbox {name!r} is already running (pid {existing.pid})",
                           fix=f"`sparkcdc sandbox stop{server} --name {name}` first, "
                               "or pick another --name")
    state_dir().mkdir(parents=True, exist_ok=True)
    sb = cls(settings, name=name, detached=True)
    info = sb.start()
    path = _state_file(name, kind)
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(fd, "w") as f:
        json.dump({**dataclasses.asdict(info), "root": str(sb._root)}, f, indent=2)
    return info


def read_state(name: str = "default", kind: str = "mariadb") -> SandboxInfo | None:
    path = _state_file(name, kind)
    if not path.exists():
        return None
    data = json.loads(path.read_text())
    data.pop("root", None)
    return SandboxInfo(**data)


def _pid_alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    # a zombie child of ours counts as gone
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().split(")")[-1].split()[0] != "Z"
    except OSError:
        return True


def status_detached(name: str = "default",
                    kind: str = "mariadb") -> tuple[SandboxInfo | None, bool]:
    info = read_state(name, kind)
    return info, bool(info and _pid_alive(info.pid))


def stop_detached(name: str = "default", timeout: float = 30.0, kind: str = "mariadb") -> bool:
    """Stop a detached sandbox and remove its data. False when none was running."""
    path = _state_file(name, kind)
    if not path.exists():
        return False
    data = json.loads(path.read_text())
    pid, root = data["pid"], data.get("root")
    was_running = _pid_alive(pid)
    if was_running:
        os.kill(pid, signal.SIGTERM)
        deadline = time.monotonic() + timeout
        while _pid_alive(pid) and time.monotonic() < deadline:
            time.sleep(0.1)
        if _pid_alive(pid):
            os.kill(pid, signal.SIGKILL)
    if root:
        shutil.rmtree(root, ignore_errors=True)
    path.unlink(missing_ok=True)
    return was_running


def port_in_use(port: int) -> bool:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.settimeout(0.5)
        return s.connect_ex(("127.0.0.1", port)) == 0


__all__ = [
    "CDC_PRIVILEGES", "MariaDBSandbox", "SandboxInfo", "ServerSettings", "TLSFiles",
    "free_port", "make_tls_files", "port_in_use", "read_state", "start_detached",
    "status_detached", "stop_detached",
]
