"""Helpers of the tests that run ``sparkcdc`` as a user does, as separate processes
(tests/test_cli.py, tests/pipeline/test_operator.py)."""

from __future__ import annotations

import contextlib
import signal
import subprocess
import sys
import time

import deltalake
from sink_support import read_delta


def cli(*args, env=None, timeout=300) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "sparkcdc.cli", *args], capture_output=True,
                          text=True, env=env, timeout=timeout, check=False)


def cause(stderr: str) -> str:
    """A failed run's error for the assertion message: the lines naming exceptions and
    their causes (a Java trace's root cause sits far from its end), then the tail."""
    named = [ln for ln in stderr.splitlines()
             if ("Error" in ln or "Exception" in ln or "Caused by" in ln)
             and not ln.lstrip().startswith("at ")]
    return "\n".join(named[:40]) + "\n...\n" + stderr[-2000:]


def wait_for(check, timeout, what):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if check():
            return
        time.sleep(0.5)
    raise AssertionError(f"timed out waiting for {what}")


def delta_ids(lake, db, table):
    path = str(lake / db / table)
    if not deltalake.DeltaTable.is_deltatable(path):
        return set()
    return {r["id"] for r in read_delta(deltalake.DeltaTable(path)).to_pylist()}


def waited(proc: subprocess.Popen, seconds: float) -> int | None:
    """The process's exit code, or, when it has not ended in ``seconds``, None after asking
    it where each of its Python threads waits (SIGUSR1, docs/operations.md) and its JVM
    where each Java thread does (SIGQUIT: a thread dump on the JVM's stdout, the log)."""
    try:
        return proc.wait(seconds)
    except subprocess.TimeoutExpired:
        proc.send_signal(signal.SIGUSR1)
        with contextlib.suppress(OSError):  # (pkill: procps)
            subprocess.run(["pkill", "-QUIT", "-P", str(proc.pid), "java"], check=False)
        time.sleep(5)
        return None


def run_tail(log, ckpt) -> str:
    """A run's output (``log``, its open file) and the end of Spark's log under ``ckpt``,
    for an assertion's message."""
    log.seek(0)
    spark_log = ckpt / "logs" / "spark.log"
    return (log.read()[-20000:] + "\n--- Spark's log:\n"
            + (spark_log.read_text()[-4000:] if spark_log.exists() else "(none)"))


@contextlib.contextmanager
def running(yaml_path, env, log_path, ckpt):
    """``sparkcdc run`` of ``yaml_path`` as a user runs it, in its own process (its output
    in ``log_path``, open as the yielded file), stopped on exit with Ctrl-C, which it must
    obey within 120 s (its stacks and the log's tail in the assertion if not)."""
    log = open(log_path, "w+")  # noqa: SIM115 - the child's, till it stops
    proc = subprocess.Popen([sys.executable, "-m", "sparkcdc.cli", "run", str(yaml_path),
                             "--no-progress", "--master", "local[2]"],
                            stdout=log, stderr=subprocess.STDOUT, env=env)
    try:
        yield log
    finally:
        proc.send_signal(signal.SIGINT)
        try:
            assert waited(proc, 120) is not None, run_tail(log, ckpt)
        finally:
            if proc.poll() is None:
                proc.kill()
            log.close()

