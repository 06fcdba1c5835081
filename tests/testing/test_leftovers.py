"""The sweep of dead sandboxes' folders (sparkcdc/testing/leftovers.py): which folders it
removes and which it must leave, whoever owns them."""

from __future__ import annotations

import json
import os
import subprocess

from sparkcdc.testing import leftovers


def _folder(parent, name: str):
    folder = parent / f"{leftovers.PREFIX}{name}"
    folder.mkdir()
    (folder / "data").mkdir()
    (folder / "data" / "ibdata1").write_bytes(b"x" * 1000)
    return folder


def test_only_folders_whose_processes_are_all_gone_are_swept(tmp_path):
    gone = subprocess.Popen(["sleep", "60"])
    server = subprocess.Popen(["sleep", "60"])
    killed = _folder(tmp_path, "killed-run")
    leftovers.record(killed, [gone.pid, server.pid])
    half = _folder(tmp_path, "server-still-up")  # its owner died, its server did not (yet)
    leftovers.record(half, [gone.pid, os.getpid()])
    running = _folder(tmp_path, "running")
    leftovers.record(running, [os.getpid()])
    being_made = _folder(tmp_path, "no-record-yet")  # mkdtemp'd, not recorded yet
    old = _folder(tmp_path, "old-version")  # a record it cannot read
    (old / leftovers.OWNER_FILE).write_text("{not json")
    other = tmp_path / "someone-else"
    other.mkdir()
    (other / leftovers.OWNER_FILE).write_text(json.dumps({"boot": "x", "owners": []}))
    try:
        assert leftovers.sweep(tmp_path) == []  # all alive yet
        for p in (gone, server):
            p.kill()
            p.wait()
        assert leftovers.sweep(tmp_path) == [killed]
    finally:
        for p in (gone, server):
            p.kill()
            p.wait()
    assert not killed.exists()
    assert all(f.is_dir() for f in (half, running, being_made, old, other))


def test_a_reused_pid_or_a_restarted_machine_does_not_keep_a_folder(tmp_path):
    me = leftovers.Process.of(os.getpid())
    assert me is not None and me.alive()
    reused = _folder(tmp_path, "reused")  # our pid, but another process's start time
    (reused / leftovers.OWNER_FILE).write_text(json.dumps(
        {"boot": leftovers._boot_id(), "owners": [[me.pid, me.started - 1]]}))
    rebooted = _folder(tmp_path, "rebooted")  # our very process, of another boot
    (rebooted / leftovers.OWNER_FILE).write_text(json.dumps(
        {"boot": "another-boot", "owners": [[me.pid, me.started]]}))
    assert sorted(leftovers.sweep(tmp_path)) == sorted([reused, rebooted])


def test_a_zombie_counts_as_gone(tmp_path):
    p = subprocess.Popen(["sleep", "60"])
    folder = _folder(tmp_path, "zombie")
    leftovers.record(folder, [p.pid])
    p.kill()
    os.waitid(os.P_PID, p.pid, os.WEXITED | os.WNOWAIT)  # ended, not reaped: a zombie
    try:
        assert leftovers.start_time(p.pid) is None
        assert leftovers.sweep(tmp_path) == [folder]
    finally:
        p.wait()


def test_a_missing_parent_sweeps_nothing(tmp_path):
    assert leftovers.sweep(tmp_path / "nowhere") == []
