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
from dataclasses import dataclass, field
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


def kind(pid: int, root: int) -> str:
    """Which part of a ``sparkcdc`` tree a process is: ``cli`` (the root, the Python
    driver), ``jvm`` (Spark's driver JVM) or ``py`` (Spark's Python workers and the warm
    interpreter they fork from)."""
    if pid == root:
        return "cli"
    try:
        comm = Path(f"/proc/{pid}/comm").read_text().strip()
    except OSError:
        return "py"
    return "jvm" if comm == "java" else "py"


def tree_parts_mb(root: int) -> dict[str, float]:
    """PSS (MB) of the tree by part (``kind``); ``rss``: the tree's RSS."""
    parts = {"cli": 0.0, "jvm": 0.0, "py": 0.0, "rss": 0.0}
    for pid in tree_pids(root):
        r, s = _rss_pss_kb(pid)
        parts[kind(pid, root)] += s / 1024
        parts["rss"] += r / 1024
    return parts


def tree_py_mb(root: int) -> list[float]:
    """PSS (MB) of each of the tree's Python workers (``py``), largest first."""
    return sorted((_rss_pss_kb(pid)[1] / 1024 for pid in tree_pids(root)
                   if kind(pid, root) == "py"), reverse=True)


class PeakSampler:
    """Samples a process tree every ``every`` seconds in a thread, keeping the peaks.

    ``pid``: the root's pid, or a callable giving it (None while the process is not started
    yet, as when a sandbox launches it inside a blocking ``start()``)."""

    def __init__(self, pid: int | Callable[[], int | None], every: float = 0.2,
                 trace: list[tuple[float, dict[str, float]]] | None = None):
        self._pid = pid if callable(pid) else (lambda: pid)
        self.every = every
        self.peak_rss_mb = 0.0
        self.peak_pss_mb = 0.0
        self.at_peak: dict[str, float] = {}  # the tree's parts (PSS) when its PSS peaked
        self.part_peaks: dict[str, float] = {}  # each part's own peak
        self.trace = trace  # (seconds, parts) per sample, when given a list
        self._t0 = time.monotonic()
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def _run(self) -> None:
        while not self._stop.is_set():
            pid = self._pid()
            if pid is not None:
                parts = tree_parts_mb(pid)
                rss = parts.pop("rss")
                pss = sum(parts.values())
                self.peak_rss_mb = max(self.peak_rss_mb, rss)
                if pss > self.peak_pss_mb:
                    self.peak_pss_mb, self.at_peak = pss, parts
                for k, v in parts.items():
                    self.part_peaks[k] = max(self.part_peaks.get(k, 0.0), v)
                if self.trace is not None:
                    py = tree_py_mb(pid)
                    self.trace.append((round(time.monotonic() - self._t0, 2),
                                       {**parts, "py_each": [round(x) for x in py]}))
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
    at_peak: dict[str, float] = field(default_factory=dict)  # PSS by part at the peak
    part_peaks: dict[str, float] = field(default_factory=dict)  # each part's own peak
    cpu_parts: dict[str, float] = field(default_factory=dict)  # CPU-seconds by part


def measure(cmd: list[str], env: dict | None, log_path: Path | str,
            discard_stdout: bool = False, every: float = 0.1,
            trace: list[tuple[float, dict[str, float]]] | None = None,
            cwd: Path | str | None = None) -> Measured:
    """Run ``cmd`` to its end, its output appended to ``log_path`` (stdout thrown away with
    ``discard_stdout``, as a dump to /dev/null).

    CPU-seconds: each process of the tree sampled every ``every`` seconds while it lives
    (its last sample kept), summed; or, if larger, the root's own rusage at its end, which
    holds the root and every descendant that was waited for. The samples miss a process's
    last tenth of a second and a process born and gone between two samples; the rusage
    misses the descendants nobody waited for (a JVM's Python workers). The larger of the
    two is the nearer; a one-process tool (a dump) is counted exactly by its rusage."""
    cpu: dict[int, float] = {}
    kinds: dict[int, str] = {}
    stop = threading.Event()
    with open(log_path, "ab") as out:
        t0 = time.monotonic()
        p = subprocess.Popen(cmd, env=env, stderr=subprocess.STDOUT if not discard_stdout
                             else out, stdout=subprocess.DEVNULL if discard_stdout else out,
                             cwd=cwd)

        def sample() -> None:  # beside the blocking wait, which times the end exactly
            while not stop.is_set():
                for q in tree_pids(p.pid):
                    cpu[q] = max(cpu.get(q, 0.0), own_cpu_s(q))
                    kinds[q] = kind(q, p.pid)  # (a launcher script execs the JVM)
                stop.wait(every)

        sampler = threading.Thread(target=sample, daemon=True)
        with PeakSampler(p.pid, trace=trace) as s:
            sampler.start()
            _, status, usage = os.wait4(p.pid, 0)
            secs = time.monotonic() - t0
            stop.set()
            sampler.join()
    p.returncode = os.waitstatus_to_exitcode(status)
    total = max(sum(cpu.values()), usage.ru_utime + usage.ru_stime)
    parts: dict[str, float] = {}
    for q, c in cpu.items():
        parts[kinds.get(q, "py")] = parts.get(kinds.get(q, "py"), 0.0) + c
    return Measured(secs, total, s.peak_rss_mb, s.peak_pss_mb, p.returncode, s.at_peak,
                    s.part_peaks, parts)


def timed(cmd: list[str], env: dict, log_path: Path) -> tuple[float, float, int]:
    """Run ``cmd`` to its end: wall seconds, peak PSS (MB) of its process tree, exit code."""
    m = measure(cmd, env, log_path)
    return m.seconds, m.peak_pss_mb, m.rc
