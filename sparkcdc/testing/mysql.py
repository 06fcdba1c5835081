"""A real, throwaway MySQL server for tests, benchmarks and the demo: the MySQL twin of
``sparkcdc.testing.mariadb``, with the same interface (``MySQLSandbox`` is a
``MariaDBSandbox``), so a test can take either.

Debian 12 ships no MySQL. ``scripts/setup_mysql.sh`` (run by ``make setup``) puts Debian
unstable's ``mysql-server-core`` (MySQL 9.7 LTS) in a minimal Debian unstable root, by default
``/opt/sparkcdc-mysql`` (``SPARKCDC_MYSQL_ROOT``). The sandbox runs that ``mysqld`` chrooted
into the root (the chroot is entered between fork and exec, so the process is ``mysqld``
itself, with the parent-death signal of an attached sandbox), with its datadir (a copy of one
that ``mysqld --initialize-insecure`` made once, ``MySQLSandbox._template``), socket and log
in a temporary folder under the root's ``/tmp``, which the host reaches at the same place
under the root: ``info.datadir`` and ``info.socket`` are the host's paths. Clients on the host
connect over TCP on 127.0.0.1 (the ``cdc`` and ``admin`` users) or over the socket (root,
for test setup), exactly as with MariaDB.

Configured for CDC: binlog on, ROW events with FULL row images and FULL row metadata,
``gtid_mode=ON`` with ``enforce_gtid_consistency=ON``, a random server id, the X plugin off
(no second port), ``--secure-file-priv=`` (empty: files anywhere inside the root) and the
least-privilege ``cdc`` user, whose password uses MySQL's default ``caching_sha2_password``.
Chrooting needs root, as the setup does.
"""

from __future__ import annotations

import fcntl
import os
import shutil
import subprocess
import tempfile
from dataclasses import dataclass
from pathlib import Path

from sparkcdc.errors import SandboxError
from sparkcdc.testing import mariadb
from sparkcdc.testing.mariadb import (
    CDC_PRIVILEGES,
    MariaDBSandbox,
    SandboxInfo,
    ServerSettings,
    TLSFiles,
    free_port,
    make_tls_files,
    port_in_use,
    set_pdeathsig,
)

ROOT_ENV = "SPARKCDC_MYSQL_ROOT"
DEFAULT_ROOT = "/opt/sparkcdc-mysql"
MYSQLD = "/usr/sbin/mysqld"  # inside the root


@dataclass(frozen=True)
class MySQLSettings(ServerSettings):
    """``ServerSettings`` plus MySQL's GTID settings; the defaults are what CDC needs.
    ``version`` (MariaDB's ``--version`` override) has no MySQL counterpart."""

    gtid_mode: str = "ON"
    enforce_gtid_consistency: str = "ON"

    @classmethod
    def misconfigured(cls, what: str) -> MySQLSettings:
        """MariaDB's misconfigurations, plus MySQL's own: ``no-gtid`` (``gtid_mode=OFF``),
        ``gtid-permissive`` (``gtid_mode=ON_PERMISSIVE`` with
        ``enforce_gtid_consistency=WARN``, halfway through turning GTIDs on),
        ``short-expiry`` (binlogs kept an hour) and ``partial-json-minimal``
        (``binlog_row_value_options=PARTIAL_JSON`` with a MINIMAL row image)."""
        own = {
            "no-gtid": cls(gtid_mode="OFF", enforce_gtid_consistency="OFF"),
            "gtid-permissive": cls(gtid_mode="ON_PERMISSIVE", enforce_gtid_consistency="WARN"),
            "short-expiry": cls(extra_args=("--binlog-expire-logs-seconds=3600",)),
            "partial-json-minimal": cls(binlog_row_image="MINIMAL", extra_args=(
                "--binlog-row-value-options=PARTIAL_JSON",)),
        }
        if what in own:
            return own[what]
        try:
            return super().misconfigured(what)  # type: ignore[return-value]
        except SandboxError as e:
            raise SandboxError(e.message, fix=f"{e.fix}, {', '.join(own)}") from None


def mysql_root() -> Path:
    """The Debian unstable root holding MySQL (``SPARKCDC_MYSQL_ROOT``)."""
    return Path(os.environ.get(ROOT_ENV) or DEFAULT_ROOT)


def installed() -> bool:
    """Whether ``scripts/setup_mysql.sh`` has installed MySQL where the sandbox looks."""
    return (mysql_root() / MYSQLD.lstrip("/")).is_file()


def _require_root_dir() -> Path:
    root = mysql_root()
    if not (root / MYSQLD.lstrip("/")).is_file():
        raise SandboxError(
            f"MySQL is not installed in {root} (no {MYSQLD} there)",
            fix="run `make setup`, or `bash scripts/setup_mysql.sh` (it installs MySQL 9.7 "
                f"into {DEFAULT_ROOT}; set {ROOT_ENV} to use another place)",
        )
    if os.geteuid() != 0:
        raise SandboxError(
            "the MySQL sandbox runs mysqld chrooted into its Debian unstable root, which "
            "needs root",
            fix="run as root (as `make setup` and CI do)",
        )
    return root


class MySQLSandbox(MariaDBSandbox):
    """One throwaway ``mysqld`` (MySQL 9.7 from the Debian unstable root). Use as a context
    manager or call start()/stop(); the interface is ``MariaDBSandbox``'s."""

    SERVER_NAME = "mysqld"
    SERVER_KIND = "mysql"

    def __init__(self, settings: ServerSettings | None = None, **kwargs) -> None:
        super().__init__(settings or MySQLSettings(), **kwargs)
        if self.settings.version:
            raise SandboxError("MySQL cannot report another version (`version` is MariaDB's "
                               "--version)", fix="leave ServerSettings.version unset for MySQL")
        self._chroot = mysql_root()

    # -- the root ------------------------------------------------------------------------

    def _inside(self, path: Path | str) -> str:
        """``path`` (on the host, under the root) as mysqld sees it in its chroot."""
        return "/" + str(Path(path).relative_to(self._chroot))

    def _server_binary(self) -> str:
        self._chroot = _require_root_dir()
        return MYSQLD

    def _temp_parent(self) -> Path:
        tmp = self._chroot / "tmp"
        if self._base_dir is None:
            return tmp
        base = self._base_dir.resolve()
        if not base.is_relative_to(self._chroot.resolve()):
            raise SandboxError(f"base_dir {base} is outside MySQL's root {self._chroot}",
                               fix=f"leave base_dir out, or pick a folder under {tmp}")
        return base

    def _preexec(self):
        root, attached = str(self._chroot), not self.detached

        def enter() -> None:  # in the child, between fork and exec
            if attached:
                set_pdeathsig()
            os.chroot(root)
            os.chdir("/")
        return enter

    def _initialize(self, datadir: Path) -> None:
        """A copy of the template datadir (``_template``), without its ``auto.cnf``: the
        server makes a ``server_uuid`` of its own at its first start."""
        shutil.copytree(self._template(), datadir, symlinks=True)
        (datadir / "auto.cnf").unlink(missing_ok=True)

    def _template(self) -> Path:
        """A datadir ``mysqld --initialize-insecure`` made once for this mysqld binary, under
        the root's ``/var/lib/sparkcdc``: copying it takes 0.1 to 0.3 s where initializing
        takes 2 to 4. Made under a lock (pytest-xdist workers start servers at
        once); those of another binary (an older MySQL) are removed."""
        binary = os.stat(self._chroot / MYSQLD.lstrip("/"))
        name = f"datadir-{binary.st_size}-{binary.st_mtime_ns}"
        base = self._chroot / "var/lib/sparkcdc"
        done = base / name
        if done.is_dir():
            return done
        base.mkdir(parents=True, exist_ok=True)
        with open(base / "template.lock", "w") as lock:
            fcntl.flock(lock, fcntl.LOCK_EX)
            if done.is_dir():
                return done
            for old in base.glob("datadir-*"):
                shutil.rmtree(old, ignore_errors=True)
            work = Path(tempfile.mkdtemp(prefix="making-", dir=base))
            try:
                proc = subprocess.run(
                    [MYSQLD, "--no-defaults", "--initialize-insecure",
                     f"--datadir={self._inside(work / 'data')}", "--user=root"],
                    capture_output=True, text=True, preexec_fn=self._preexec(), check=False,
                )
                if proc.returncode != 0:
                    raise SandboxError(f"mysqld --initialize-insecure failed: "
                                       f"{(proc.stderr or proc.stdout).strip()[-2000:]}")
                os.rename(work / "data", done)
            finally:
                shutil.rmtree(work, ignore_errors=True)
        return done

    def _spawn(self, args: list[str], log_path: Path) -> subprocess.Popen:
        with open(log_path, "ab") as log:
            return subprocess.Popen(
                args, stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                preexec_fn=self._preexec(),  # noqa: PLW1509 - chroot(2), prctl(2): in the child
                start_new_session=self.detached,
            )

    def _server_args(self, mysqld: str, datadir: Path, sock: Path, port: int,
                     server_id: int) -> list[str]:
        s = self.settings
        inner = self._inside
        args = [
            mysqld, "--no-defaults", f"--datadir={inner(datadir)}", f"--socket={inner(sock)}",
            f"--port={port}", "--bind-address=127.0.0.1", f"--server-id={server_id}",
            "--user=root", "--character-set-server=utf8mb4",
            f"--pid-file={inner(datadir / 'mysqld.pid')}",
            "--skip-name-resolve", "--mysqlx=OFF", "--secure-file-priv=",
            "--innodb-buffer-pool-size=256M", "--innodb-flush-log-at-trx-commit=2",
            "--max-connections=500", "--max-allowed-packet=64M",
            # a recursive CTE may count to millions (the tests' stand-in for MariaDB's
            # seq_1_to_N tables; the default stops at 1000)
            "--cte-max-recursion-depth=4294967295",
        ]
        if s.log_bin:
            args += [
                f"--log-bin={inner(datadir / 'binlog')}",
                f"--binlog-row-image={s.binlog_row_image}",
                f"--binlog-row-metadata={s.binlog_row_metadata}",
            ]
            if s.binlog_format.upper() != "ROW":  # deprecated in MySQL; ROW is its default
                args.append(f"--binlog-format={s.binlog_format}")
        else:
            args.append("--skip-log-bin")
        gtid_mode = getattr(s, "gtid_mode", "ON")
        enforce = getattr(s, "enforce_gtid_consistency", "ON")
        args += [f"--gtid-mode={gtid_mode}", f"--enforce-gtid-consistency={enforce}"]
        if s.time_zone:
            args.append(f"--default-time-zone={s.time_zone}")
        if s.tls:
            tls_dir = datadir.parent / "tls"  # the files must be inside the chroot
            tls_dir.mkdir(exist_ok=True)
            for field, value in (("ca", s.tls.ca), ("cert", s.tls.server_cert),
                                 ("key", s.tls.server_key)):
                target = tls_dir / f"{field}.pem"
                shutil.copyfile(value, target)
                args.append(f"--ssl-{field}={inner(target)}")
        args += list(s.extra_args)
        return args


# -- replication, for failover tests ------------------------------------------------------

def replicate(primary: MySQLSandbox, replica: MySQLSandbox, timeout: float = 30.0) -> None:
    """Make ``replica`` a GTID replica of ``primary`` (``SOURCE_AUTO_POSITION``) from the
    primary's state now: the replica's own GTIDs (its start-up users) are reset and the
    primary's executed set declared purged on it, so it asks only for what comes next.
    MySQL 8+ replicas log what they apply (``log_replica_updates`` is ON by default), as a
    server that can be promoted does."""
    import secrets

    p = primary._require()
    password = secrets.token_urlsafe(12)
    primary.execute("SET SESSION sql_log_bin = 0",
                    f"CREATE USER 'repl'@'%' IDENTIFIED BY '{password}'",
                    "GRANT REPLICATION SLAVE ON *.* TO 'repl'@'%'")
    executed = primary.query("SELECT @@GLOBAL.gtid_executed")[0][0].replace("\n", "")
    replica.execute("RESET BINARY LOGS AND GTIDS",
                    f"SET GLOBAL gtid_purged = '{executed}'",
                    f"CHANGE REPLICATION SOURCE TO SOURCE_HOST='{p.host}', "
                    f"SOURCE_PORT={p.port}, SOURCE_USER='repl', SOURCE_PASSWORD='{password}', "
                    "SOURCE_AUTO_POSITION=1, SOURCE_CONNECT_RETRY=1, GET_SOURCE_PUBLIC_KEY=1",
                    "START REPLICA")
    caught_up(primary, replica, timeout)


def caught_up(primary: MySQLSandbox, replica: MySQLSandbox, timeout: float = 30.0) -> str:
    """Wait until ``replica`` has applied everything ``primary`` has written; that set."""
    executed = primary.query("SELECT @@GLOBAL.gtid_executed")[0][0].replace("\n", "")
    (timed_out,), = replica.query("SELECT WAIT_FOR_EXECUTED_GTID_SET(%s, %s)",
                                  (executed, timeout))
    if timed_out:
        status = replica.query("SHOW REPLICA STATUS")
        raise SandboxError(f"the replica did not reach {executed} in {timeout:g}s: {status}")
    return str(executed)


def promote(replica: MySQLSandbox) -> None:
    """The replica stops replicating and takes writes of its own (a failover)."""
    replica.execute("STOP REPLICA", "RESET REPLICA ALL")


# -- detached sandboxes for the CLI (state files ``mysql-<name>.json`` beside MariaDB's) -------

def start_detached(name: str = "default", settings: ServerSettings | None = None) -> SandboxInfo:
    return mariadb.start_detached(name, settings or MySQLSettings(), sandbox_class=MySQLSandbox)


def read_state(name: str = "default") -> SandboxInfo | None:
    return mariadb.read_state(name, "mysql")


def status_detached(name: str = "default") -> tuple[SandboxInfo | None, bool]:
    return mariadb.status_detached(name, "mysql")


def stop_detached(name: str = "default", timeout: float = 30.0) -> bool:
    return mariadb.stop_detached(name, timeout, "mysql")


__all__ = [
    "CDC_PRIVILEGES", "DEFAULT_ROOT", "ROOT_ENV", "MySQLSandbox", "MySQLSettings",
    "SandboxInfo", "ServerSettings", "TLSFiles", "caught_up", "free_port", "installed",
    "make_tls_files", "mysql_root", "port_in_use", "promote", "read_state", "replicate",
    "start_detached", "status_detached", "stop_detached",
]
