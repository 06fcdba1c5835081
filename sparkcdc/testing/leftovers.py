"""The folders of dead sandboxes, swept when the next sandbox starts.

A sandbox's folder (datadir, socket, log: about 200 MB for MySQL, whose InnoDB makes its
redo log and undo spaces up front) is removed by ``stop()`` and at a normal exit. A test run
killed with SIGKILL removes nothing: its servers die with it (the parent-death signal), but
their folders stay, under ``/tmp`` for MariaDB and under the MySQL root's ``/tmp``, until the
disk fills. So each folder names the processes whose life it serves (``owner.json``: the
process that started the sandbox and the server), each by its pid and its start time (a pid
alone may be reused), and a sandbox starting sweeps the folders beside its own whose
processes are all gone. A folder without that record (one being made this moment, or left
by a version before this one) is never touched, nor is anything not named like a sandbox's.
"""

from __future__ import annotations

import json
import logging
import os
import shutil
from dataclasses import dataclass
from pathlib import Path

log = logging.getLogger(__name__)

OWNER_FILE = "owner.json"
PREFIX = "sparkcdc-"


def _boot_id() -> str:
    try:
        return Path("/proc/sys/kernel/random/boot_id").read_text().strip()
    except OSError:
        return ""


def start_time(pid: int) -> int | None:
    """When process ``pid`` started (clock ticks since boot, ``/proc/<pid>/stat``), or None
    when it is gone or a zombie (ended, not yet reaped)."""
    try:
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    except (OSError, IndexError):
        return None
    if fields[0] in ("Z", "X"):
        return None
    return int(fields[19])


@dataclass(frozen=True)
class Process:
    """One process a folder lives for: its pid and when it started."""

    pid: int
    started: int

    @classmethod
    def of(cls, pid: int) -> Process | None:
        started = start_time(pid)
        return None if started is None else cls(pid, started)

    def alive(self) -> bool:
        return start_time(self.pid) == self.started


def record(folder: Path, pids: list[int]) -> None:
    """Write ``folder``'s owners (the running ones of ``pids``); written whole, then renamed
    into place, so that a sweep never reads half a record."""
    owners = [p for p in (Process.of(pid) for pid in pids) if p is not None]
    tmp = folder / f".{OWNER_FILE}.tmp"
    tmp.write_text(json.dumps({"boot": _boot_id(),
                               "owners": [[p.pid, p.started] for p in owners]}))
    os.replace(tmp, folder / OWNER_FILE)


def dead(folder: Path) -> bool:
    """Whether every process ``folder`` lives for is gone (False without a record, or with
    one that cannot be read)."""
    try:
        data = json.loads((folder / OWNER_FILE).read_text())
        owners = [Process(int(pid), int(started)) for pid, started in data["owners"]]
        boot = str(data["boot"])
    except (OSError, ValueError, KeyError, TypeError):
        return False
    if boot != _boot_id():  # the machine restarted since: every process of it is gone
        return True
    return not any(p.alive() for p in owners)


def sweep(parent: Path) -> list[Path]:
    """Remove the folders of dead sandboxes in ``parent``; the ones removed."""
    removed: list[Path] = []
    try:
        folders = [f for f in parent.iterdir() if f.name.startswith(PREFIX) and f.is_dir()]
    except OSError:
        return removed
    for folder in folders:
        if dead(folder):
            shutil.rmtree(folder, ignore_errors=True)  # another sweep may race us: fine
            log.info("removed %s, the folder of a sandbox whose processes are gone", folder)
            removed.append(folder)
    return removed
