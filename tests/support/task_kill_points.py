"""Kill points inside ``sparkcdc run``: its whole session SIGKILLed (the CLI, the JVM, Spark's
Python daemon and workers, as a machine that dies takes them) at a chosen point of a
target's writes, from the process that reaches it, where a kill from outside lands only by
luck. In a Spark task as well as on the driver: the points are installed in every Python
process of the run by ``tests/support/task_kill_site/sitecustomize.py`` (its folder on the run's
``PYTHONPATH``, which Spark's workers inherit), when ``SPARKCDC_TEST_KILL`` names one:

  task-files      in a task, a sink's ``write_files`` wrote a snapshot's rows as files; the
                  driver never hears of them
  task-changes    in a task, a sink's ``write_changes`` wrote a slice's new rows and delete
                  files; the driver never hears of them
  commit-files    on the driver, every task wrote its files; before a target's
                  ``commit_files``, or its ``commit_changes`` that carries them (a batch is
                  one job: a table's new files commit with its changes)
  commit-changes  on the driver, every slice written; before a target's ``commit_changes``
  committed:<k>   on the driver, the k-th ``commit_changes`` of this run that committed
                  (not skipped) returned: Spark's checkpoint does not have the batch, nor
                  do the targets written after this one (a fan-out's next target)
  compaction      an Iceberg compaction wrote its files; before its commit

The first process to reach the point creates the file ``SPARKCDC_TEST_KILL_MARK`` (once:
``O_EXCL``) with a line saying where, then kills the session. The test reads it to know
the point was reached.
"""

from __future__ import annotations

import os
import signal
from pathlib import Path

POINT, MARK = "SPARKCDC_TEST_KILL", "SPARKCDC_TEST_KILL_MARK"
SITE = Path(__file__).with_name("task_kill_site")
SINKS = ("iceberg", "delta")


def env(point: str, mark: Path) -> dict[str, str]:
    """What a run needs in its environment to die at ``point``."""
    path = os.pathsep.join(p for p in (str(SITE), os.environ.get("PYTHONPATH")) if p)
    return {POINT: point, MARK: str(mark), "PYTHONPATH": path}


def _session() -> list[int]:
    """The processes of this process's session (the run, started in a session of its own)."""
    sid = os.getsid(0)
    out = []
    for d in Path("/proc").iterdir():
        if not d.name.isdigit():
            continue
        try:
            fields = (d / "stat").read_text().rsplit(")", 1)[1].split()
        except OSError:
            continue
        if int(fields[3]) == sid:
            out.append(int(d.name))
    return out


def _die(what: str) -> None:
    try:
        fd = os.open(os.environ[MARK], os.O_CREAT | os.O_EXCL | os.O_WRONLY)
    except FileExistsError:  # another process reached it first: the session is dying
        return
    os.write(fd, f"{what} (pid {os.getpid()})\n".encode())
    os.fsync(fd)
    os.close(fd)
    me = os.getpid()
    for pid in _session():
        if pid != me:
            try:
                os.kill(pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
    os.kill(me, signal.SIGKILL)


def _after(cls: type, name: str, what: str, when=lambda out: True) -> None:
    original = getattr(cls, name)

    def wrapped(self, *args, **kwargs):
        out = original(self, *args, **kwargs)
        if when(out):
            _die(f"{what}: after {cls.__name__}.{name}")
        return out

    setattr(cls, name, wrapped)


def _before(cls: type, name: str, what: str, when=lambda kwargs: True) -> None:
    original = getattr(cls, name)

    def wrapped(self, *args, **kwargs):
        if when(kwargs):
            _die(f"{what}: before {cls.__name__}.{name}")
        return original(self, *args, **kwargs)

    setattr(cls, name, wrapped)


def install() -> None:
    """The point ``SPARKCDC_TEST_KILL`` names, patched into the sinks' classes."""
    from sparkcdc import sinks

    point = os.environ[POINT]
    kind, _, count = point.partition(":")
    seen = [0]  # commits of this process (committed:<k>)

    def nth(result, at=int(count or 0)) -> bool:
        if not result.skipped:
            seen[0] += 1
        return not result.skipped and seen[0] == at

    for sink_type in SINKS:
        try:
            cls = sinks.sink_class(sink_type)
        except ImportError:
            continue
        if kind == "task-files":
            _after(cls, "write_files", kind)
        elif kind == "task-changes":
            _after(cls, "write_changes", kind)
        elif kind == "commit-files":  # alone, or with the changes of their batch
            _before(cls, "commit_files", kind)
            _before(cls, "commit_changes", kind, lambda kwargs: bool(kwargs.get("new_files")))
        elif kind == "commit-changes":
            _before(cls, "commit_changes", kind)
        elif kind == "committed":
            _after(cls, "commit_changes", point, nth)
        elif kind != "compaction":
            raise SystemExit(f"{POINT}={point!r}: not a kill point (tests/support/task_kill_points.py)")
    if kind == "compaction":
        from sparkcdc.sinks.iceberg import changes

        original = changes.commit

        def commit(table, *args, **kwargs):
            if kwargs.get("replace"):
                _die(f"compaction: before the commit of {kwargs.get('summary')}")
            return original(table, *args, **kwargs)

        changes.commit = commit
