"""How a run answers signals (pipeline/run/signals.py), in a process of its own: the first
Ctrl-C or SIGTERM asks the loop to stop and interrupts nothing, a second Ctrl-C raises at
once, the handlers are put back afterwards, and SIGUSR1 prints every thread's stack."""

from __future__ import annotations

import subprocess
import sys

_SCRIPT = r"""
import os, signal, threading, time
from sparkcdc.pipeline.run.signals import stacks_on_sigusr1, stop_on_signals

stopped = threading.Event()
before = signal.getsignal(signal.SIGINT)
with stop_on_signals(stopped.set):
    os.kill(os.getpid(), signal.SIGTERM)
    assert stopped.wait(5), "SIGTERM did not ask the loop to stop"
    stopped.clear()
    os.kill(os.getpid(), signal.SIGINT)
    time.sleep(0.3)  # a KeyboardInterrupt would be raised here
    assert stopped.is_set(), "Ctrl-C did not ask the loop to stop"
    try:
        os.kill(os.getpid(), signal.SIGINT)
        time.sleep(5)
        raise AssertionError("a second Ctrl-C did not raise")
    except KeyboardInterrupt:
        print("second ctrl-c raised")
assert signal.getsignal(signal.SIGINT) is before, "the SIGINT handler was not put back"
assert signal.getsignal(signal.SIGTERM) is signal.SIG_DFL

def in_a_thread():
    with stop_on_signals(stopped.set):  # not the main thread: leaves the handlers alone
        assert signal.getsignal(signal.SIGINT) is before
threading.Thread(target=in_a_thread).start()

stacks_on_sigusr1()
waiter = threading.Thread(target=lambda: time.sleep(3), name="a-waiting-thread")
waiter.start()
os.kill(os.getpid(), signal.SIGUSR1)
time.sleep(0.5)
print("went on after SIGUSR1")
"""


def test_signals_stop_the_loop_and_sigusr1_prints_stacks():
    r = subprocess.run([sys.executable, "-c", _SCRIPT], capture_output=True, text=True,
                       timeout=60, check=False)
    assert r.returncode == 0, r.stdout + r.stderr
    assert "second ctrl-c raised" in r.stdout
    assert "went on after SIGUSR1" in r.stdout
    # faulthandler's dump: every thread, the sleeping one among them
    assert "Current thread 0x" in r.stderr and r.stderr.count("Thread 0x") >= 1, r.stderr
    assert "<lambda>" in r.stderr, r.stderr


def test_a_run_asked_to_stop_before_its_stream_starts_none_and_says_so(spark, mariadb, db,
                                                                          tmp_path):
    """Ctrl-C while a run starts (discovery, the session): no stream is started, nothing is
    written, and a run ``--until-caught-up`` does not claim it caught up."""
    import argparse

    from pipeline_support import source_yaml

    from sparkcdc.cli import _ended
    from sparkcdc.pipeline.definition import parse_pipeline
    from sparkcdc.pipeline.run.loop import Runner

    mariadb.execute("CREATE TABLE t (id INT PRIMARY KEY)", "INSERT INTO t VALUES (1)",
                    database=db)
    defn = parse_pipeline(f"""
{source_yaml(mariadb, db + ".t", 20)}sink:
  type: delta
  path: {tmp_path}/lake
pipeline:
  name: sig
  checkpoint.location: {tmp_path}/ckpt
""", "p.yaml", env={"TEST_PW": mariadb.info.cdc_password})
    runner = Runner(defn, spark, until_caught_up=True)
    runner.stop()  # as the signal handler does
    assert runner.run() == 0
    assert runner.interrupted and not runner.runs
    assert not (tmp_path / "lake").exists()
    args = argparse.Namespace(until_caught_up=True)
    assert _ended(args, runner) == "stopped before it caught up"
    done = Runner(defn, spark, until_caught_up=True)
    done.run()
    assert not done.interrupted and _ended(args, done) == "caught up"
    assert (tmp_path / "lake" / db / "t").exists()
