"""Warm workers: the Python processes Spark starts for a local run, forked from one
interpreter that has already imported what they import.

Why: before a run's first change, Spark starts five Python interpreters one after the
other: the lookup of installed data sources, the source's creation, the stream's runner,
the read planner and the task's worker (docs/benchmarks.md, the start-up profile). Each
spends most of its first second importing pyarrow, numpy, pyspark and the source, the same
modules every time, and the next one starts only when the last has answered. Spark's own
daemon already forks its task workers from a parent that imported pyspark, for the same
reason; the planners on the driver get no such help.

How: as the session starts, the run starts one more interpreter, the *warm* one
(``main``, below), which imports those modules while the JVM starts on the other core, and
then forks on request. Spark is told to use a stand-in interpreter (``warm_launcher.py``, by
``PYSPARK_PYTHON``): for each ``<python> -m <module>`` Spark starts, the stand-in hands its
standard streams, environment, folder and arguments to the warm interpreter, which forks a
child that takes them over and runs the module as ``python -m`` would. The stand-in passes
signals on and ends with the child's status, so Spark sees the process it started. A child
is a fresh interpreter in all that Spark gives it; it only finds the modules already
imported.

Only for a local run whose Python is the run's own interpreter (``PYSPARK_PYTHON`` unset or
the same): executors on other hosts start their own Python, and another interpreter could
not use these imports. Anything the stand-in cannot hand over (another option than ``-m``,
a warm interpreter that is gone) it runs with the real interpreter, as without all this.
``pipeline.warm-workers: false`` turns it off.
"""

from __future__ import annotations

import contextlib
import hashlib
import io
import json
import logging
import os
import secrets
import selectors
import shlex
import signal
import socket
import struct
import subprocess
import sys
import traceback
import warnings
from collections.abc import Sequence
from pathlib import Path

from sparkcdc import heap
from sparkcdc.pipeline.launch.class_cache import cache_dir, unused
from sparkcdc.spark.workers import preload

log = logging.getLogger("sparkcdc.pipeline")

LAUNCHER = Path(__file__).with_name("warm_launcher.py")
SOCKET_ENV = "SPARKCDC_WARM_SOCKET"  # the warm interpreter's (abstract) socket name


class WarmPython:
    """The warm interpreter of one session, and what Spark is told in order to use it."""

    def __init__(self, name: str, process: subprocess.Popen[bytes], launcher: Path):
        self.name = name
        self.process = process
        self.launcher = launcher
        self._saved: dict[str, str | None] = {}

    @classmethod
    def start(cls, modules: Sequence[str] = ()) -> WarmPython | None:
        """Start the warm interpreter (it imports in the background: the source's modules,
        then ``modules``, what the run's own tasks import) and point the environment Spark
        is started with at the stand-in; None where that cannot be (a cache folder we
        cannot write or run programs from)."""
        try:
            launcher = _launcher()
        except OSError as e:
            log.debug("warm workers: off (%s)", e)
            return None
        name = f"sparkcdc-warm-{os.getpid()}-{secrets.token_hex(6)}"
        # bound here, so that a stand-in that comes before the warm interpreter listens
        # waits in the backlog rather than finding no one (abstract: no file to remove)
        with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as listener:
            listener.bind("\0" + name)
            listener.listen(64)
            process = subprocess.Popen(
                [sys.executable, "-m", "sparkcdc.pipeline.launch.warm_python",
                 str(listener.fileno()), *modules],
                stdin=subprocess.PIPE, stdout=subprocess.DEVNULL,
                pass_fds=(listener.fileno(),), env=_own_env())
        warm = cls(name, process, launcher)
        warm._point({"PYSPARK_PYTHON": str(launcher), SOCKET_ENV: name})
        return warm

    def _point(self, env: dict[str, str]) -> None:
        for key, value in env.items():
            self._saved[key] = os.environ.get(key)
            os.environ[key] = value

    def stop(self) -> None:
        """End the warm interpreter (the processes it forked end with their work) and
        give the environment back. A JVM that outlives this session finds no socket and
        runs the real interpreter: the stand-in stays, and only ever falls back."""
        for key, value in self._saved.items():
            if value is None:
                os.environ.pop(key, None)
            else:
                os.environ[key] = value
        self._saved = {}
        with contextlib.suppress(OSError):
            if self.process.stdin:
                self.process.stdin.close()  # its sign to go
        try:
            self.process.wait(5)
        except subprocess.TimeoutExpired:
            self.process.kill()
            self.process.wait()


def _own_env() -> dict[str, str]:
    """The warm interpreter's own environment: the run's, with one thread for numpy's
    OpenBLAS (Spark's default for its workers, ``spark.task.cpus``), whose helper threads
    would otherwise start at import, before the forks. A forked process gets the
    environment Spark gave its stand-in, not this one."""
    env = dict(os.environ)
    env.setdefault("OMP_NUM_THREADS", "1")
    return env


def _launcher() -> Path:
    """The stand-in interpreter, written once per interpreter and sparkcdc into the cache
    folder: a shell script (Spark runs it as a program) that runs ``warm_launcher.py``
    with the real interpreter and no ``site``, so that it imports nothing beyond the
    standard library."""
    python = sys.executable
    text = (f"#!/bin/sh\nexec {shlex.quote(python)} -I -S {shlex.quote(str(LAUNCHER))} "
            f"{shlex.quote(python)} \"$@\"\n")
    folder = cache_dir() / "warm"
    folder.mkdir(parents=True, exist_ok=True)
    if os.statvfs(folder).f_flag & os.ST_NOEXEC:
        raise OSError(f"{folder} is on a file system that runs no programs")
    digest = hashlib.sha1(text.encode()).hexdigest()[:12]
    path = folder / f"python-{digest}"
    if not path.exists() or path.read_text() != text:
        tmp = path.with_name(f"{path.name}.{os.getpid()}.tmp")
        tmp.write_text(text)
        tmp.chmod(0o755)
        os.replace(tmp, path)
    else:
        os.utime(path)  # in use: kept by the pruning below
    _prune(folder, keep=path)
    return path


def _prune(folder: Path, keep: Path) -> None:
    """Remove the stand-ins of other interpreters or installs that no run used for a
    month (``class_cache.unused``, the rule for the class archives too)."""
    for f in unused(folder.glob("python-*"), keep):
        with contextlib.suppress(OSError):
            f.unlink()


def usable(master: str | None, conf: dict[str, str]) -> bool:
    """Whether a session on ``master`` with ``conf`` can take its Python processes from a
    warm interpreter: local, on this interpreter, on Linux (abstract Unix sockets, fork,
    descriptors passed over sockets), and starting a JVM of its own (a JVM already
    running keeps the environment it was started with)."""
    from pyspark import SparkContext

    from sparkcdc.pipeline.launch import cluster

    if not cluster.is_local(master) or not sys.platform.startswith("linux"):
        return False
    if not hasattr(socket, "send_fds") or SparkContext._gateway is not None:
        return False
    python = conf.get("spark.pyspark.python") or os.environ.get("PYSPARK_PYTHON")
    return not python or _same_file(python, sys.executable)


def _same_file(a: str, b: str) -> bool:
    import shutil

    found = shutil.which(a) or a
    try:
        return os.path.samefile(found, b)
    except OSError:
        return False


# ---- the warm interpreter itself (``python -m sparkcdc.pipeline.launch.warm_python <fd>``)


class _Server:
    """Accepts stand-ins, forks their processes, tells each its child's pid and, later,
    its exit status. Single-threaded: a fork copies only the thread that forks."""

    def __init__(self, listener: socket.socket):
        self.listener = listener
        self.selector = selectors.DefaultSelector()
        self.children: dict[int, socket.socket] = {}
        self.wake_r, self.wake_w = os.pipe()
        os.set_blocking(self.wake_w, False)
        os.set_blocking(self.wake_r, False)

    def serve(self) -> None:
        signal.set_wakeup_fd(self.wake_w)
        signal.signal(signal.SIGCHLD, lambda *_: None)  # wakes the selector
        self.selector.register(self.listener, selectors.EVENT_READ, "accept")
        self.selector.register(sys.stdin.fileno(), selectors.EVENT_READ, "parent")
        self.selector.register(self.wake_r, selectors.EVENT_READ, "wake")
        while True:
            for key, _ in self.selector.select(timeout=1.0):
                if key.data == "parent":  # the run closed our stdin, or died
                    if not os.read(sys.stdin.fileno(), 4096):
                        return
                elif key.data == "wake":
                    with contextlib.suppress(BlockingIOError):
                        os.read(self.wake_r, 4096)
                elif key.data == "accept":
                    self._accept()
                else:  # a stand-in's connection: it has gone before its child ended
                    self._stand_in_gone(key.data)
            self._reap()

    def _accept(self) -> None:
        conn, _ = self.listener.accept()
        conn.setblocking(True)
        creds = conn.getsockopt(socket.SOL_SOCKET, socket.SO_PEERCRED, struct.calcsize("3i"))
        if struct.unpack("3i", creds)[1] != os.getuid():  # another user's process
            conn.close()
            return
        fds: list[int] = []
        try:
            head, fds, _flags, _addr = socket.recv_fds(conn, 4, 3)
            request = json.loads(_recv_exact(conn, struct.unpack("!I", head)[0]))
            pid = os.fork()
        except Exception:  # noqa: BLE001 - a stand-in that could not say what it wanted,
            for fd in fds:  # or no fork (no memory, no pids left): it runs the real
                os.close(fd)  # interpreter when it hears nothing back
            conn.close()
            return
        if pid == 0:
            self._child(conn, fds, request)  # never returns
        for fd in fds:
            os.close(fd)
        try:
            conn.sendall(struct.pack("!i", pid))
        except OSError:
            os.kill(pid, signal.SIGKILL)
        self.children[pid] = conn
        self.selector.register(conn, selectors.EVENT_READ, pid)

    def _stand_in_gone(self, pid: int) -> None:
        """A stand-in killed outright (SIGKILL) takes its child with it, as it would have
        been that process."""
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, signal.SIGKILL)
        conn = self.children.get(pid)
        if conn is not None:
            self.selector.unregister(conn)

    def _reap(self) -> None:
        while self.children:
            try:
                pid, status = os.waitpid(-1, os.WNOHANG)
            except ChildProcessError:
                return
            if pid == 0:
                return
            conn = self.children.pop(pid, None)
            if conn is None:
                continue
            with contextlib.suppress(KeyError, ValueError):
                self.selector.unregister(conn)
            with contextlib.suppress(OSError):
                conn.sendall(struct.pack("!i", os.waitstatus_to_exitcode(status)))
            conn.close()

    def _child(self, conn: socket.socket, fds: list[int], request: dict) -> None:
        """Become the process the stand-in was asked for: its streams, environment,
        folder, arguments and signals; then run its module as ``python -m`` does."""
        code = 1
        try:
            signal.set_wakeup_fd(-1)
            for sig in (signal.SIGCHLD, signal.SIGTERM, signal.SIGHUP):
                signal.signal(sig, signal.SIG_DFL)
            signal.signal(signal.SIGINT, signal.default_int_handler)
            self.selector.close()
            self.listener.close()
            for other in self.children.values():
                other.close()
            conn.close()
            os.close(self.wake_r)
            os.close(self.wake_w)
            for target, fd in enumerate(fds):
                os.dup2(fd, target)
                os.close(fd)
            _standard_streams(request["env"])
            os.environ.clear()
            os.environ.update(request["env"])
            os.chdir(request["cwd"])
            _search_path(request["cwd"], request["env"].get("PYTHONPATH", ""))
            module, *args = request["argv"]
            sys.argv = [module, *args]
            code = _run_module(module)
        except BaseException:  # noqa: BLE001 - reported on the child's stderr, as python would
            with contextlib.suppress(Exception):
                traceback.print_exc()
        finally:
            with contextlib.suppress(Exception):
                sys.stdout.flush()
                sys.stderr.flush()
            os._exit(code)


def _run_module(module: str) -> int:
    """Run ``module`` as ``__main__`` and end as the interpreter would: its exit status,
    after its threads and exit handlers."""
    import atexit
    import runpy
    import threading

    code = 0
    # run afresh as __main__, as ``python -m`` runs it: what it imports stays imported
    sys.modules.pop(module, None)
    try:
        runpy.run_module(module, run_name="__main__", alter_sys=True)
    except SystemExit as e:
        if e.code is None:
            code = 0
        elif isinstance(e.code, int):
            code = e.code
        else:
            print(e.code, file=sys.stderr)
            code = 1
    except BaseException:  # noqa: BLE001 - printed as python would print it
        traceback.print_exc()
        code = 1
    with contextlib.suppress(Exception):
        threading._shutdown()  # type: ignore[attr-defined]
    with contextlib.suppress(Exception):
        atexit._run_exitfuncs()
    return code


def _standard_streams(env: dict[str, str]) -> None:
    """New ``sys.stdin``, ``stdout`` and ``stderr`` over the descriptors handed over,
    unbuffered when the process was asked to be (Spark asks, ``PYTHONUNBUFFERED``)."""
    unbuffered = bool(env.get("PYTHONUNBUFFERED"))
    sys.stdin = io.TextIOWrapper(io.BufferedReader(io.FileIO(0, "rb", closefd=False)))
    for fd, name in ((1, "stdout"), (2, "stderr")):
        raw = io.FileIO(fd, "wb", closefd=False)
        binary = raw if unbuffered else io.BufferedWriter(raw)
        stream = io.TextIOWrapper(binary, write_through=unbuffered,  # type: ignore[arg-type]
                                  line_buffering=not unbuffered and fd == 2,
                                  errors="backslashreplace" if fd == 2 else "strict")
        setattr(sys, name, stream)
    for name in ("stdin", "stdout", "stderr"):  # what a fresh interpreter would have
        setattr(sys, f"__{name}__", getattr(sys, name))


def _search_path(cwd: str, pythonpath: str) -> None:
    """``sys.path`` as ``python -m`` in ``cwd`` with ``PYTHONPATH`` would have it: the
    folder first, then the entries of ``PYTHONPATH``, then the interpreter's own."""
    own = [p for p in sys.path[1:] if p]
    extra = [p for p in pythonpath.split(os.pathsep) if p and p not in own]
    sys.path[:] = [cwd, *extra, *own]


def _recv_exact(sock: socket.socket, n: int) -> bytes:
    data = b""
    while len(data) < n:
        part = sock.recv(n - len(data))
        if not part:
            raise ConnectionError("the stand-in went away")
        data += part
    return data


def main(fd: int, modules: Sequence[str] = ()) -> None:
    """Serve on the listening socket ``fd`` (bound by ``WarmPython.start``): stand-ins
    that come while we import wait in its backlog; only our own user's are served.
    ``modules``: what the run's tasks import beside the source's."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # the run decides when we stop
    listener = socket.socket(fileno=fd)
    preload(modules)
    heap.settle()  # before the forks: the children's collections skip what it imported
    if sys.version_info >= (3, 12):  # numpy's and pyarrow's helper threads fork cleanly
        warnings.filterwarnings("ignore", category=DeprecationWarning,
                                message=".*multi-threaded.*fork")
    try:
        _Server(listener).serve()
    finally:
        listener.close()


if __name__ == "__main__":
    main(int(sys.argv[1]), sys.argv[2:])
