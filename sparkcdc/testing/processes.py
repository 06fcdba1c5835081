"""Ending the throwaway servers' processes, the one way every sandbox does it: a process
ended on request (``end``, ``kill``), and every sandbox still running stopped when Python
exits (``live``)."""

from __future__ import annotations

import atexit
import contextlib
import subprocess
import threading
from typing import Any


class _Live:
    """The sandboxes this process started and has not stopped: each is stopped at exit,
    best effort (a failing stop never masks the failure that ended the process)."""

    def __init__(self) -> None:
        self._sandboxes: dict[int, Any] = {}
        self._lock = threading.Lock()
        atexit.register(self.stop_all)

    def add(self, sandbox: Any) -> None:
        with self._lock:
            self._sandboxes[id(sandbox)] = sandbox

    def discard(self, sandbox: Any) -> None:
        with self._lock:
            self._sandboxes.pop(id(sandbox), None)

    def stop_all(self) -> None:
        with self._lock:
            running = list(self._sandboxes.values())
        for sb in running:
            with contextlib.suppress(Exception):
                sb.stop()


live = _Live()


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
