"""The memory and CPU time of a whole process tree, sampled while it runs: what the benches
report as a tool's peak memory and CPU-seconds (the CLI, its JVM and Python workers; or a
Kafka Connect JVM; or a server's own client tool).

Both figures come from each process's ``/proc/<pid>/smaps_rollup``: *RSS* counts every
resident page of each process (pages shared between the tree's processes, such as the
Python workers' forked interpreter, count once per process), *PSS* splits shared pages
among their sharers, so the tree's PSS is what the tree as a whole holds.
"""

from __future__ import annotations

import os
import subprocess
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

TICK = os.sysconf("SC_CLK_TCK")


def _children(pid: int) -> list[int]:
    out = []
    try:
        for tid in os.listdir(f"/proc/{pid}/task"):
            with open(f"/proc/{pid}/task/{tid}/children") as f:
                out += [int(x) for x in f.read().split()]
    except OSError:
        pass
    return out


def _rss_pss_kb(pid: int) -> tuple[int, int]:
    rss = pss = 0
    try:
        with open(f"/proc/{pid}/smaps_rollup") as f:
            for line in f:
                if line.startswith("Rss:"):
                    rss = int(line.split()[1])
                elif line.startswith("Pss:"):
                    pss = int(line.split()[1])
                    break  # Pss follows Rss in the file
    except OSError:
        pass
    return rss, pss


def tree_memory_mb(root: int) -> tuple[float, float]:
    """RSS and PSS (MB) of ``root`` and every process below it, summed."""
    seen, todo, rss, pss = set(), [root], 0, 0
    while todo:
        p = todo.pop()
        if p in seen:
            continue
        seen.add(p)
        r, s = _rss_pss_kb(p)
        rss, pss = rss + r, pss + s
        todo += _children(p)
    return rss / 1024, pss / 1024


def tree_pss_mb(root: int) -> float:
    return tree_memory_mb(root)[1]


class PeakSampler:
    """Samples a process tree every ``every`` seconds in a thread, keeping the peaks.

    ``pid``: the root's pid, or a callable giving it (None while the process is not started
    yet, as when a sandbox launches it inside a blocking ``start()``)."""

    def __init__(self, pid: int | Callable[[], int | None], every: float = 0.2):
        self._pid = pid if callable(pid) else (lambda: pid)
        self.every = every
        self.peak_rss_mb = 0.0
        self.peak_pss_mb = 0.0
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def _run(self) -> None:
        while not self._stop.is_set():
            pid = self._pid()
            if pid is not None:
                rss, pss = tree_memory_mb(pid)
                self.peak_rss_mb = max(self.peak_rss_mb, rss)
                self.peak_pss_mb = max(self.peak_pss_mb, pss)
            self._stop.wait(self.every)

    def __enter__(self):
        self._thread.start()
        return self

    def __exit__(self, *exc) -> None:
        self._stop.set()
        self._thread.join()


def own_cpu_s(pid: int) -> float:
    """utime + stime of one process (its own, not its reaped children's), seconds; 0 when
    it is gone."""
    try:
        with open(f"/proc/{pid}/stat") as f:
            fields = f.read().rsplit(")", 1)[1].split()
        return (int(fields[11]) + int(fields[12])) / TICK
    except (OSError, IndexError, ValueError):
        return 0.0


def tree_pids(root: int) -> list[int]:
    seen, todo = [], [root]
    while todo:
        p = todo.pop()
        if p not in seen:
            seen.append(p)
            todo += _children(p)
    return seen


@dataclass(frozen=True)
class Measured:
    """One command run to its end: wall seconds, CPU-seconds of its whole process tree, the
    tree's peak RSS and PSS (MB), its exit code."""

    seconds: float
    cpu_s: float
    peak_rss_mb: float
    peak_pss_mb: float
    rc: int


def measure(cmd: list[str], env: dict | None, log_path: Path | str,
            discard_stdout: bool = False, every: float = 0.1) -> Measured:
    """Run ``cmd`` to its end, its output appended to ``log_path`` (stdout thrown away with
    ``discard_stdout``, as a dump to /dev/null).

    CPU-seconds: each process of the tree sampled every ``every`` seconds while it lives
    (its last sample kept), summed; or, if larger, the root's own rusage at its end, which
    holds the root and every descendant that was waited for. The samples miss a process's
    last tenth of a second and a process born and gone between two samples; the rusage
    misses the descendants nobody waited for (a JVM's Python workers). The larger of the
    two is the nearer; a one-process tool (a dump) is counted exactly by its rusage."""
    cpu: dict[int, float] = {}
    stop = threading.Event()
    with open(log_path, "ab") as out:
        t0 = time.monotonic()
        p = subprocess.Popen(cmd, env=env, stderr=subprocess.STDOUT if not discard_stdout
                             else out, stdout=subprocess.DEVNULL if discard_stdout else out)

        def sample() -> None:  # beside the blocking wait, which times the end exactly
            while not stop.is_set():
                for q in tree_pids(p.pid):
                    cpu[q] = max(cpu.get(q, 0.0), own_cpu_s(q))
                stop.wait(every)

        sampler = threading.Thread(target=sample, daemon=True)
        with PeakSampler(p.pid) as s:
            sampler.start()
            _, status, usage = os.wait4(p.pid, 0)
            secs = time.monotonic() - t0
            stop.set()
            sampler.join()
    p.returncode = os.waitstatus_to_exitcode(status)
    total = max(sum(cpu.values()), usage.ru_utime + usage.ru_stime)
    return Measured(secs, total, s.peak_rss_mb, s.peak_pss_mb, p.returncode)


def timed(cmd: list[str], env: dict, log_path: Path) -> tuple[float, float, int]:
    """Run ``cmd`` to its end: wall seconds, peak PSS (MB) of its process tree, exit code."""
    m = measure(cmd, env, log_path)
    return m.seconds, m.peak_pss_mb, m.rc
