"""``sparkcdc run`` as a child process that the fault tests kill, again and again.

Every run is its own process group (the CLI, its JVM, the Python workers) and is killed as
a whole, as a machine that dies kills it: no JVM lingers to finish a batch after its
driver is gone. Each run's output goes to ``run-<k>.log``. How far a pipeline got is the
test's own measure (``progress``: batches in a checkpoint's commit log, for instance).
"""

from __future__ import annotations

import os
import random
import signal
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path

CLI = [sys.executable, "-m", "sparkcdc.cli"]


def count_files(folder: Path) -> Callable[[], int]:
    """A ``progress`` measure: the files in ``folder`` whose names are numbers (``3``,
    ``3.json``), 0 while it does not exist."""
    def count() -> int:
        if not folder.is_dir():
            return 0
        return sum(1 for p in folder.iterdir() if p.name.split(".")[0].isdigit())
    return count


class PipelineRuns:
    """``sparkcdc run <yaml>`` started again and again with ``env``: ``start`` one run,
    ``wait_progress`` for more batches, ``kill`` it (SIGKILL to the group) or ``stop`` it
    (SIGTERM, then SIGKILL), ``kill_loop`` for a series of kills at random moments, and
    ``to_the_end`` for a last run with ``--until-caught-up``. ``command`` replaces
    ``python -m sparkcdc.cli`` (a wrapper that runs the same CLI)."""

    def __init__(self, yaml: Path, logs: Path, progress: Callable[[], int],
                 env: dict[str, str] | None = None, command: list[str] | None = None,
                 master: str = "local[2]"):
        self.logs, self.progress = logs, progress
        self.env = {**os.environ, "PYSPARK_PYTHON": sys.executable, "PYTHONUNBUFFERED": "1",
                    **(env or {})}
        self.cmd = [*(command or CLI), "run", str(yaml), "--no-progress", "--master", master]
        self.runs = 0

    def log(self, k: int) -> Path:
        return self.logs / f"run-{k}.log"

    def tail(self, k: int | None = None, chars: int = 3000) -> str:
        k = self.runs - 1 if k is None else k
        return self.log(k).read_text(errors="replace")[-chars:]

    def start(self, env: dict[str, str] | None = None) -> subprocess.Popen:
        with open(self.log(self.runs), "w") as log:
            p = subprocess.Popen(self.cmd, env={**self.env, **(env or {})}, stdout=log,
                                 stderr=subprocess.STDOUT, start_new_session=True)
        self.runs += 1
        return p

    def wait_progress(self, p: subprocess.Popen, want: int, timeout: float = 300) -> bool:
        """Until ``progress()`` reaches ``want``, the run exits, or ``timeout`` s pass."""
        deadline = time.monotonic() + timeout
        while p.poll() is None and time.monotonic() < deadline and self.progress() < want:
            time.sleep(0.1)
        return self.progress() >= want

    def wait_exit(self, p: subprocess.Popen, timeout: float = 300) -> int:
        try:
            return p.wait(timeout)
        except subprocess.TimeoutExpired:
            self.kill(p)
            raise AssertionError(f"run {self.runs - 1} did not end in {timeout} s:\n"
                                 f"{self.tail()}") from None

    @staticmethod
    def kill(p: subprocess.Popen) -> None:
        try:
            os.killpg(p.pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
        p.wait()

    def stop(self, p: subprocess.Popen, timeout: float = 120) -> None:
        """A clean stop (SIGTERM to the group), SIGKILL when it takes longer than
        ``timeout``."""
        if p.poll() is not None:
            return
        os.killpg(p.pid, signal.SIGTERM)
        try:
            p.wait(timeout)
        except subprocess.TimeoutExpired:
            self.kill(p)

    def kill_loop(self, kills: int, rnd: random.Random,
                  moment: Callable[[subprocess.Popen, int], None] | None = None,
                  timeout: float = 300) -> list[dict]:
        """``kills`` runs, each SIGKILLed once it committed 1 to 3 batches more and then
        ``moment(p, k)`` returned (default: 0 to 2 s later: in a task, a sink's write, the
        checkpoint, the logs). Returns what each kill hit."""
        hits = []
        for k in range(kills):
            p = self.start()
            have = self.progress()
            self.wait_progress(p, have + rnd.randint(1, 3), timeout)
            if moment is None:
                time.sleep(rnd.uniform(0.0, 2.0))
            else:
                moment(p, k)
            assert p.poll() is None, f"run {self.runs - 1} ended before its kill:\n{self.tail()}"
            self.kill(p)
            hits.append({"run": self.runs - 1, "batches_before": have,
                         "batches_at_kill": self.progress()})
        return hits

    def to_the_end(self, timeout: float = 900, env: dict[str, str] | None = None) -> str:
        """A last run with ``--until-caught-up``; it must succeed. Returns its output."""
        done = subprocess.run(self.cmd + ["--until-caught-up"], env={**self.env, **(env or {})},
                              capture_output=True, text=True, timeout=timeout, check=False)
        assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-3000:]
        return done.stdout + done.stderr
