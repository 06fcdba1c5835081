"""How a run answers signals (pipeline/signals.py), in a process of its own: the first
Ctrl-C or SIGTERM asks the loop to stop and interrupts nothing, a second Ctrl-C raises at
once, the handlers are put back afterwards, and SIGUSR1 prints every thread's stack."""

from __future__ import annotations

import subprocess
import sys

_SCRIPT = r"""
import os, signal, threading, time
from sparkcdc.pipeline.signals import stacks_on_sigusr1, stop_on_signals

stopped = threading.Event()
before = signal.getsignal(signal.SIGINT)
with stop_on_signals(stopped.set):
    os.kill(os.getpid(), signal.SIGTERM)
    assert stopped.wait(5), "SIGTERM did not ask the loop to stop"
    stopped.clear()
    t0 = time.monotonic()
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
