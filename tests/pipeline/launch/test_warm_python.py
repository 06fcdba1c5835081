"""Warm workers (pipeline/launch/warm_python.py): a process asked of the stand-in interpreter is
forked from the warm one and is, to whoever started it, that process: its arguments,
environment, folder, streams, signals and exit status. Real processes; the last test runs
a real Spark session in a process of its own (one JVM per Python process)."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest
from faults_support import alive, wait_until
from pipeline_support import tree_env

from sparkcdc.pipeline.launch import class_cache, warm_python
from sparkcdc.pipeline.launch.warm_python import SOCKET_ENV, WarmPython

PROBE = textwrap.dedent("""
    import json, os, sys
    line = sys.stdin.readline().strip()
    print(json.dumps({"argv": sys.argv, "cwd": os.getcwd(), "var": os.environ.get("PROBE_VAR"),
                      "stdin": line, "pid": os.getpid(), "ppid": os.getppid(),
                      "warm": "pyarrow" in sys.modules, "path0": sys.path[0],
                      "name": __name__}))
    print("to stderr", file=sys.stderr)
    sys.exit(int(os.environ.get("PROBE_EXIT", "0")))
""")
SLEEPER = textwrap.dedent("""
    import os, sys, time
    print(os.getpid(), flush=True)
    time.sleep(120)
""")


@pytest.fixture()
def warm(tmp_path, monkeypatch):
    monkeypatch.setenv(class_cache.CACHE_ENV, str(tmp_path / "cache"))
    monkeypatch.delenv("PYSPARK_PYTHON", raising=False)
    w = WarmPython.start()
    assert w is not None
    yield w
    w.stop()


@pytest.fixture()
def modules(tmp_path) -> Path:
    cwd = tmp_path / "cwd"
    cwd.mkdir()
    (cwd / "probe.py").write_text(PROBE)
    (cwd / "sleeper.py").write_text(SLEEPER)
    return cwd


def _gone_within(pid: int, seconds: float) -> None:
    wait_until(lambda: not alive(pid), seconds, f"process {pid} to end", every=0.05)


def test_a_forked_process_is_the_process_asked_for(warm, modules):
    env = {**os.environ, "PROBE_VAR": "x y", "PROBE_EXIT": "3", "PYTHONUNBUFFERED": "YES"}
    r = subprocess.run([str(warm.launcher), "-m", "probe", "a b", "c"], check=False,
                       cwd=modules, env=env, input="hello\n", capture_output=True, text=True,
                       timeout=120)
    assert r.returncode == 3, r.stderr
    out = json.loads(r.stdout)
    assert out["argv"] == [str(modules / "probe.py"), "a b", "c"]
    assert out["cwd"] == str(modules) and out["path0"] == str(modules)
    assert out["var"] == "x y" and out["stdin"] == "hello" and out["name"] == "__main__"
    assert out["ppid"] == warm.process.pid  # forked by the warm interpreter ...
    assert out["warm"]  # ... which had imported pyarrow before it forked
    assert r.stderr == "to stderr\n"  # and nothing else (runpy warns of a module run
    # as __main__ that was imported before: it must run afresh, as python -m runs it)


def test_a_runs_task_modules_are_imported_before_the_fork(tmp_path, monkeypatch, modules):
    """What the run's tasks import (its task stages, its sink's package and drivers) is in
    a forked worker already, and not in one of a warm interpreter not told of them."""
    from sparkcdc.pipeline.definition import parse_pipeline
    from sparkcdc.pipeline.run.batch import session_hints

    monkeypatch.setenv(class_cache.CACHE_ENV, str(tmp_path / "cache"))
    monkeypatch.delenv("PYSPARK_PYTHON", raising=False)
    wanted = ["deltalake", "pyroaring", "sparkcdc.pipeline.run.task_changes",
              "sparkcdc.sinks.delta.changes", "sparkcdc.sinks.delta.deletion_vectors"]
    ask = f"import sys, json; print(json.dumps([m in sys.modules for m in {wanted!r}]))"
    (modules / "ask.py").write_text(ask)
    seen = {}
    defn = parse_pipeline("source: {type: mysql, hostname: h, username: u, tables: d.t}\n"
                          "sink: {type: delta, path: /tmp/x}\n")
    for name, given in (("told", session_hints(defn).task_modules), ("not told", ())):
        w = WarmPython.start(given)
        assert w is not None
        try:
            r = subprocess.run([str(w.launcher), "-m", "ask"], check=True, cwd=modules,
                               capture_output=True, text=True, timeout=120)
        finally:
            w.stop()
        seen[name] = json.loads(r.stdout)
    assert seen["told"] == [True] * len(wanted)
    assert seen["not told"] == [False] * len(wanted)


def test_a_module_the_warm_interpreter_imported_runs_afresh(warm, modules):
    r = subprocess.run([str(warm.launcher), "-m", "pyspark.daemon", "x"], check=False,
                       cwd=modules, input=b"", capture_output=True, timeout=120,
                       env={**os.environ, "PYTHON_WORKER_FACTORY_SECRET": "s"})
    assert len(r.stdout) == 4  # the daemon's port: it ran, and ended with its stdin
    assert b"RuntimeWarning" not in r.stderr, r.stderr


def test_signals_reach_the_forked_process_and_it_ends_as_the_stand_in_does(warm, modules):
    p = subprocess.Popen([str(warm.launcher), "-m", "sleeper"], cwd=modules,
                         stdout=subprocess.PIPE, text=True)
    pid = int(p.stdout.readline())
    assert pid != p.pid and alive(pid)
    p.send_signal(signal.SIGTERM)  # how Spark stops a worker it started
    assert p.wait(30) == -signal.SIGTERM
    _gone_within(pid, 10)

    p = subprocess.Popen([str(warm.launcher), "-m", "sleeper"], cwd=modules,
                         stdout=subprocess.PIPE, text=True)
    pid = int(p.stdout.readline())
    p.kill()  # a stand-in killed outright takes its process with it
    p.wait(30)
    _gone_within(pid, 10)


def test_without_a_warm_interpreter_the_stand_in_runs_the_real_one(warm, modules):
    launcher = str(warm.launcher)
    pid = warm.process.pid
    warm.stop()
    assert os.environ.get(SOCKET_ENV) is None and os.environ.get("PYSPARK_PYTHON") is None
    for env in ({**os.environ, SOCKET_ENV: warm.name},  # a name no one listens on
                dict(os.environ)):  # no name at all
        r = subprocess.run([launcher, "-m", "probe"], check=False, cwd=modules, env=env, input="",
                           capture_output=True, text=True, timeout=120)
        assert r.returncode == 0, r.stderr
        out = json.loads(r.stdout)
        assert out["ppid"] != pid and out["argv"][0] == str(modules / "probe.py")
    r = subprocess.run([launcher, "-c", "import sys; print(sys.argv)", "z"], check=False,
                       capture_output=True, text=True, timeout=60)  # not -m: as python would
    assert r.returncode == 0 and r.stdout.strip() == "['-c', 'z']"


def test_only_a_local_session_on_this_interpreter_uses_it(monkeypatch):
    monkeypatch.delenv("PYSPARK_PYTHON", raising=False)
    from pyspark import SparkContext

    monkeypatch.setattr(SparkContext, "_gateway", None)
    assert warm_python.usable("local[2]", {})
    assert warm_python.usable(None, {"spark.pyspark.python": sys.executable})
    assert not warm_python.usable("spark://host:7077", {})
    assert not warm_python.usable("local[2]", {"spark.pyspark.python": "/usr/bin/true"})
    monkeypatch.setattr(SparkContext, "_gateway", object())  # a JVM runs already
    assert not warm_python.usable("local[2]", {})


CHILD = textwrap.dedent("""
    import json, os, sys
    from sparkcdc.pipeline.definition import PipelineSettings
    from sparkcdc.pipeline.launch.session import build_session
    own = build_session(PipelineSettings(name="warm", parallelism=2,
                                         warm_workers=sys.argv[1] == "on"), "local[2]")
    warm = own.warm.process.pid if own.warm else None

    def lineage(batches):
        import pyarrow as pa
        chain, pid = [], os.getpid()
        while pid > 1:
            chain.append(pid)
            with open(f"/proc/{pid}/stat") as f:
                pid = int(f.read().rsplit(")", 1)[1].split()[1])
        for b in batches:
            yield pa.RecordBatch.from_pylist([{"id": v, "chain": json.dumps(chain)}
                                              for v in b.column(0).to_pylist()])

    rows = own.spark.range(10).mapInArrow(lineage, "id long, chain string").collect()
    own.stop()
    print(json.dumps({"warm": warm, "ids": sorted(r.id for r in rows),
                      "chains": sorted({r.chain for r in rows}),
                      "env": os.environ.get("PYSPARK_PYTHON")}))
""")


@pytest.mark.long
@pytest.mark.parametrize("mode", ["on", pytest.param("off", marks=pytest.mark.faults)])
def test_a_sessions_python_workers_are_forked_warm(tmp_path, mode):
    env = tree_env(tmp_path / "cache")
    env.pop("PYSPARK_PYTHON", None)
    r = subprocess.run([sys.executable, "-c", CHILD, mode], check=False, env=env, cwd=tmp_path,
                       capture_output=True, text=True, timeout=600)
    assert r.returncode == 0, r.stderr[-3000:]
    out = json.loads(r.stdout.strip().splitlines()[-1])
    assert out["ids"] == list(range(10))
    chains = [json.loads(c) for c in out["chains"]]
    assert out["env"] == sys.executable  # given back as the session stopped
    if mode == "on":
        assert out["warm"] and all(out["warm"] in c for c in chains), (out, r.stderr[-2000:])
    else:
        assert out["warm"] is None


def test_a_request_it_cannot_read_leaves_the_warm_interpreter_serving(warm, modules):
    import socket
    import struct

    for junk in (b"", struct.pack("!I", 5) + b"{no json"):
        s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        s.connect("\0" + warm.name)
        if junk:
            socket.send_fds(s, [junk[:4]], [0])
            s.sendall(junk[4:])
        s.shutdown(socket.SHUT_WR)
        try:
            reply = s.recv(4)
        except ConnectionResetError:  # closed with the junk unread
            reply = b""
        assert reply == b""  # no pid: that stand-in would run the real interpreter
        s.close()
    r = subprocess.run([str(warm.launcher), "-m", "probe"], check=False, cwd=modules,
                       input="", capture_output=True, text=True, timeout=120)
    assert r.returncode == 0, r.stderr
    assert json.loads(r.stdout)["ppid"] == warm.process.pid
    assert warm.process.poll() is None


def test_a_run_killed_outright_leaves_no_warm_interpreter(tmp_path):
    code = ("import sys, time\n"
            "from sparkcdc.pipeline.launch.warm_python import WarmPython\n"
            "w = WarmPython.start()\n"
            "print(w.process.pid, flush=True)\n"
            "time.sleep(120)\n")
    env = tree_env(tmp_path / "cache")
    run = subprocess.Popen([sys.executable, "-c", code], env=env, stdout=subprocess.PIPE,
                           text=True)
    warm = int(run.stdout.readline())
    assert alive(warm)
    run.kill()  # SIGKILL: no stop(), no atexit
    run.wait(30)
    _gone_within(warm, 30)  # its stdin, a pipe from the run, ended


def test_stand_ins_no_run_used_for_a_month_are_removed(tmp_path, monkeypatch):
    monkeypatch.setenv(class_cache.CACHE_ENV, str(tmp_path / "cache"))
    folder = tmp_path / "cache" / "warm"
    folder.mkdir(parents=True)
    old, recent = folder / "python-0ld", folder / "python-recent"
    for f in (old, recent):
        f.write_text("#!/bin/sh\n")
    month = time.time() - 31 * 86400
    os.utime(old, (month, month))
    mine = warm_python._launcher()
    os.utime(mine, (month, month))  # the one in use is kept, whatever its age
    assert warm_python._launcher() == mine
    assert mine.exists() and recent.exists() and not old.exists()
