"""Ending the throwaway servers' processes, the one way every sandbox does it."""

from __future__ import annotations

import subprocess


def kill(proc: subprocess.Popen | None) -> None:
    """SIGKILL ``proc`` if it still runs, and reap it."""
    if proc is not None and proc.poll() is None:
        proc.kill()
        proc.wait(10)


def end(proc: subprocess.Popen | None, timeout: float) -> None:
    """SIGTERM ``proc`` (a clean shutdown), then SIGKILL if it lingers past ``timeout``."""
    if proc is not None and proc.poll() is None:
        proc.terminate()
        try:
            proc.wait(timeout)
        except subprocess.TimeoutExpired:
            kill(proc)
