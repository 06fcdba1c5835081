"""A throwaway PostgreSQL server for tests and benchmarks (Debian's ``postgres`` binaries).

``initdb`` and ``postgres`` refuse to run as root, so as root the server runs as the
``postgres`` system user (or ``nobody``). Like the MariaDB sandbox, the server gets the
kernel's parent-death signal, so it dies with the Python process that started it.
"""

from __future__ import annotations

import atexit
import glob
import os
import pwd
import secrets
import shutil
import subprocess
import tempfile
import time
from dataclasses import dataclass
from typing import TYPE_CHECKING

from sparkcdc.errors import SandboxError
from sparkcdc.testing.mariadb import free_port, set_pdeathsig

if TYPE_CHECKING:  # typing.Self is 3.11's; `with` on a subclass gives the subclass
    from typing_extensions import Self


def _binary(name: str) -> str:
    found = shutil.which(name)
    if found:
        return found
    cands = sorted(glob.glob(f"/usr/lib/postgresql/*/bin/{name}"))
    if cands:
        return cands[-1]
    raise SandboxError(f"PostgreSQL's {name} was not found on this machine",
                       fix="install Debian's PostgreSQL: `make setup` (apt-get install postgresql)")


@dataclass(frozen=True)
class PostgresInfo:
    host: str
    port: int
    user: str
    password: str
    database: str

    def sink_options(self, table: str, **extra: str) -> dict[str, str]:
        return {"host": self.host, "port": str(self.port), "user": self.user,
                "password": self.password, "database": self.database, "table": table, **extra}


class PostgresSandbox:
    def __init__(self):
        self.info: PostgresInfo | None = None
        self._proc: subprocess.Popen | None = None
        self._root: str | None = None

    def __enter__(self) -> Self:
        self.start()
        return self

    def __exit__(self, *exc) -> None:
        self.stop()

    def _run_as(self) -> tuple[int | None, int | None]:
        if os.geteuid() != 0:
            return None, None
        for name in ("postgres", "nobody"):
            try:
                pw = pwd.getpwnam(name)
                return pw.pw_uid, pw.pw_gid
            except KeyError:
                continue
        raise SandboxError("running as root and no 'postgres' or 'nobody' user exists",
                           fix="create an unprivileged user for PostgreSQL")

    def start(self, timeout: float = 60.0) -> PostgresInfo:
        import psycopg

        uid, gid = self._run_as()
        root = tempfile.mkdtemp(prefix="sparkcdc-pg-")
        self._root = root
        password = secrets.token_urlsafe(12)
        pwfile = os.path.join(root, "pw")
        with open(pwfile, "w") as f:
            f.write(password)
        if uid is not None:
            for p in (root, pwfile):
                os.chown(p, uid, gid)
        kw = {"user": uid, "group": gid, "extra_groups": []} if uid is not None else {}
        data = os.path.join(root, "data")
        proc = subprocess.run(
            [_binary("initdb"), "-D", data, "-U", "sparkcdc", f"--pwfile={pwfile}",
             "-E", "UTF8", "--locale=C", "--auth-local=trust", "--auth-host=scram-sha-256",
             "--no-sync"], capture_output=True, text=True, check=False, **kw)
        if proc.returncode != 0:
            self.stop()
            raise SandboxError(f"initdb failed: {proc.stderr.strip()[-2000:]}")
        for _attempt in range(5):
            port = free_port()
            with open(os.path.join(root, "server.log"), "ab") as log:
                self._proc = subprocess.Popen(
                    [_binary("postgres"), "-D", data, "-p", str(port), "-k", root,
                     "-c", "listen_addresses=127.0.0.1", "-c", "fsync=off",
                     "-c", "synchronous_commit=off", "-c", "full_page_writes=off",
                     "-c", "max_connections=50", "-c", "shared_buffers=128MB"],
                    stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                    preexec_fn=set_pdeathsig,  # noqa: PLW1509 - prctl(2), only in the child
                    **kw)
            deadline = time.monotonic() + timeout
            while time.monotonic() < deadline and self._proc.poll() is None:
                try:
                    psycopg.connect(host="127.0.0.1", port=port, user="sparkcdc",
                                    password=password, dbname="postgres",
                                    connect_timeout=2).close()
                    self.info = PostgresInfo("127.0.0.1", port, "sparkcdc", password, "postgres")
                    atexit.register(self.stop)
                    return self.info
                except psycopg.OperationalError:
                    time.sleep(0.1)
            self._kill()
        with open(os.path.join(root, "server.log"), errors="replace") as f:
            text = f.read()[-3000:]
        self.stop()
        raise SandboxError(f"postgres did not become ready:\n{text}")

    def _kill(self) -> None:
        if self._proc is not None and self._proc.poll() is None:
            self._proc.terminate()
            try:
                self._proc.wait(20)
            except subprocess.TimeoutExpired:
                self._proc.kill()
                self._proc.wait(10)
        self._proc = None

    def stop(self) -> None:
        self._kill()
        if self._root:
            shutil.rmtree(self._root, ignore_errors=True)
            self._root = None
        self.info = None

    def execute(self, statement: str, args=None, database: str | None = None) -> list[tuple]:
        import psycopg

        i = self.info
        with psycopg.connect(host=i.host, port=i.port, user=i.user, password=i.password,
                             dbname=database or i.database, autocommit=True) as conn:
            cur = conn.execute(statement, args)
            return cur.fetchall() if cur.description else []
