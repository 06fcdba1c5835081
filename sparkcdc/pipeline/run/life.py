"""What a run owns from its start to its end, whatever its source (``Runner`` and the kafka
source's ``KafkaRunner`` each hold one): one run per checkpoint (a lock file), the Spark
session it starts, and the stop asked of it (``stop``, Ctrl-C, SIGTERM)."""

from __future__ import annotations

import os
import threading
from typing import IO, Any

from sparkcdc.errors import ConfigError
from sparkcdc.pipeline.launch import cluster
from sparkcdc.pipeline.launch.session import (
    NO_HINTS,
    OwnSession,
    PendingSession,
    SessionHints,
    build_session,
)
from sparkcdc.pipeline.run.checkpoint import Checkpoint


class RunLife:
    """A run's lock, session and stop. ``spark``: the session it was given, else one it
    starts (``begin_session`` starts it in the background; the first use waits for it).
    ``probe``: on a cluster, check that executors answer before the session is used.
    ``hints``: what the run will ask of a session it starts (``SessionHints``)."""

    def __init__(self, ckpt: Checkpoint, settings: Any, spark: Any = None, *,
                 master: str | None = None, spark_log_to_console: bool = False,
                 probe: bool = True, hints: SessionHints = NO_HINTS):
        self.ckpt = ckpt
        self.settings = settings
        self.master = master
        self.spark_log_to_console = spark_log_to_console
        self.stopping = threading.Event()
        self._spark = spark
        self._probe = probe
        self._hints = hints
        self._session: OwnSession | None = None  # the session this run started
        self._pending: PendingSession | None = None  # ... while it starts

    def begin_session(self) -> None:
        """Start the run's Spark session in the background (``PendingSession``)."""
        if self._spark is None and self._pending is None:
            self._pending = PendingSession(lambda: build_session(
                self.settings, self.master, str(self.ckpt.spark_log),
                self.spark_log_to_console, self._hints))

    @property
    def spark(self) -> Any:
        if self._spark is None:
            self.begin_session()
            assert self._pending is not None
            pending, self._pending = self._pending, None
            self._session = pending.result()
            self._spark = self._session.spark
            if self._probe and not cluster.is_local(self.master):
                try:
                    cluster.probe_executors(self._spark)
                except BaseException:
                    self.close()
                    raise
        return self._spark

    def lock_checkpoint(self) -> IO[str]:
        """One run per checkpoint: a second one would corrupt Spark's logs. The lock holds
        until the returned file is closed."""
        import fcntl

        self.ckpt.root.mkdir(parents=True, exist_ok=True)
        f = open(self.ckpt.root / ".lock", "a+")  # noqa: SIM115 - the lock: the caller closes it
        try:
            fcntl.flock(f, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            f.seek(0)
            holder = f.read().strip() or "another process"
            f.close()
            raise ConfigError(f"the pipeline is already running with checkpoint "
                              f"{self.ckpt.root} (pid {holder})",
                              fix="stop that run first (Ctrl-C), or give this one another "
                                  "checkpoint.location") from None
        f.seek(0)
        f.truncate()
        f.write(str(os.getpid()))
        f.flush()
        return f

    def stop(self) -> None:
        self.stopping.set()

    @property
    def interrupted(self) -> bool:
        """Whether the run was asked to stop (Ctrl-C, SIGTERM, ``stop``): a run
        ``--until-caught-up`` that was may have stopped before it caught up."""
        return self.stopping.is_set()

    def close(self) -> None:
        """Stop the SparkSession if this run started it."""
        if self._pending is not None:  # started, never used
            pending, self._pending = self._pending, None
            pending.stop()
        if self._session is not None:
            self._session.stop()
            self._session = self._spark = None
