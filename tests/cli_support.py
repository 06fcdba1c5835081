"""Helpers of the tests that run ``sparkcdc`` as a user does, as separate processes
(tests/test_cli.py, tests/pipeline/test_operator.py)."""

from __future__ import annotations

import subprocess
import sys
import time

import deltalake


def cli(*args, env=None, timeout=300) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "sparkcdc.cli", *args], capture_output=True,
                          text=True, env=env, timeout=timeout)


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
    return {r["id"] for r in deltalake.DeltaTable(path).to_pyarrow_table().to_pylist()}
