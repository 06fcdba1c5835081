"""How a run answers signals: Ctrl-C (SIGINT) and SIGTERM ask its loop to stop, and SIGUSR1
prints where every thread of it is.

The first Ctrl-C or SIGTERM sets the loop's stop flag: the loop ends at its next step, stops
its streams and closes its targets, and a micro-batch being written finishes first (a Kafka
batch's transaction commits rather than being abandoned for the next run to replay). Python's
default for Ctrl-C, a ``KeyboardInterrupt`` raised wherever the main thread happens to be,
would cut into a call to Spark's JVM (Py4J then prints its own traceback on the console) or
into a change of the run's state halfway. A second Ctrl-C is the user insisting: it raises
``KeyboardInterrupt`` at once, as Python would have.

SIGUSR1 (``kill -USR1 <pid>``) writes the stack of every Python thread to stderr and the run
goes on: the answer to "what is it waiting for?" when a run seems stuck (docs/operations.md)."""

from __future__ import annotations

import contextlib
import faulthandler
import logging
import signal
import sys
import threading
from collections.abc import Callable, Iterator

log = logging.getLogger(__name__)


@contextlib.contextmanager
def stop_on_signals(stop: Callable[[], None]) -> Iterator[None]:
    """While the block runs in the main thread, SIGINT and SIGTERM call ``stop`` (a second
    SIGINT raises ``KeyboardInterrupt``). In another thread (a caller's runner thread) the
    process's handlers are left alone: only the main thread may set them."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return

    def on_term(signum, _frame) -> None:
        log.info("%s: stopping", signal.Signals(signum).name)
        stop()

    def on_int(signum, frame) -> None:
        on_term(signum, frame)
        signal.signal(signal.SIGINT, signal.default_int_handler)  # the next one insists

    old_term = signal.signal(signal.SIGTERM, on_term)
    old_int = signal.signal(signal.SIGINT, on_int)
    try:
        yield
    finally:
        signal.signal(signal.SIGTERM, old_term)
        signal.signal(signal.SIGINT, old_int)


def stacks_on_sigusr1() -> None:
    """From now on, SIGUSR1 writes every Python thread's stack to stderr (the process goes
    on). Written by the interpreter itself, so it works while every thread is blocked."""
    faulthandler.register(signal.SIGUSR1, file=sys.stderr, all_threads=True, chain=False)
