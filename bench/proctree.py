"""The memory of a whole process tree, sampled while it runs: what the benches report as a
tool's peak memory (the CLI, its JVM and Python workers; or a Kafka Connect JVM).

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
from pathlib import Path


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


def timed(cmd: list[str], env: dict, log_path: Path) -> tuple[float, float, int]:
    """Run ``cmd`` to its end: wall seconds, peak PSS (MB) of its process tree, exit code."""
    with open(log_path, "ab") as out:
        t0 = time.monotonic()
        p = subprocess.Popen(cmd, env=env, stdout=out, stderr=subprocess.STDOUT)
        with PeakSampler(p.pid) as s:
            rc = p.wait()
            secs = time.monotonic() - t0
    return secs, s.peak_pss_mb, rc
