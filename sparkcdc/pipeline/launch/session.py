"""The Spark session a pipeline run creates when it is not given one: tuned for collecting
Arrow batches on the driver, quiet on start-up, bound to loopback when local, started from
the class archive of earlier runs (pipeline/launch/class_cache.py), with HotSpot's quick compiler
only when local (``QUICK_JIT``), its Python processes forked from a warm interpreter when
local (pipeline/launch/warm_python.py), and shipping the driver's sparkcdc to the executors of a
cluster (pipeline/launch/cluster.py)."""

from __future__ import annotations

import os
import sys
import threading
from collections.abc import Callable
from concurrent.futures import Future
from dataclasses import dataclass
from typing import Any

from sparkcdc.pipeline.launch import cluster
from sparkcdc.pipeline.launch.class_cache import ClassCache
from sparkcdc.pipeline.launch.warm_python import WarmPython, usable

# A local run's JVM compiles with HotSpot's quick compiler (C1) alone. The optimising
# compiler (C2) took about 5 s of CPU in a run's first 20 s, from the cores that the Python
# processes Spark starts before the first batch, and then the readers, need. The JVM of a
# sparkcdc run plans micro-batches and moves Arrow batches, and C1's code does that as fast
# here: a 500k-row snapshot into Kafka ended about 2 s sooner, a 2M-row one 2-4 s sooner,
# and the JVM used half the CPU (docs/operations.md, "Start-up"). A user's own
# ``TieredStopAtLevel`` or ``TieredCompilation`` option replaces it; a cluster's driver
# keeps HotSpot's defaults (its executors do the work).
QUICK_JIT = "-XX:TieredStopAtLevel=1"


@dataclass
class OwnSession:
    """A session a run started, and what its end owes: the class archive its JVM writes,
    the warm interpreter its Python processes were forked from."""

    spark: Any
    cache: ClassCache
    warm: WarmPython | None = None

    def stop(self) -> None:
        try:
            self.spark.stop()
            self.cache.publish(self.spark)
        finally:
            if self.warm is not None:
                self.warm.stop()


class PendingSession:
    """A session started in a thread of its own. Its JVM takes seconds to start, mostly on
    another core; the run meanwhile reads its checkpoint, discovers its tables and reads the
    server's position, and waits only at the session's first use (``result``)."""

    def __init__(self, start: Callable[[], OwnSession]):
        self._future: Future[OwnSession] = Future()
        self._thread = threading.Thread(target=self._start, args=(start,),
                                        name="sparkcdc-session", daemon=True)
        self._thread.start()

    def _start(self, start: Callable[[], OwnSession]) -> None:
        try:
            self._future.set_result(start())
        except BaseException as e:  # noqa: BLE001 - handed to the thread that waits
            self._future.set_exception(e)

    def result(self) -> OwnSession:
        """The session, once started; its start's error, if it failed."""
        self._thread.join()
        return self._future.result()

    def stop(self) -> None:
        """Stop the session, once started (a run that ended before using it); a start that
        failed has nothing to stop."""
        try:
            session = self.result()
        except BaseException:  # noqa: BLE001 - reported where the session was wanted
            return
        session.stop()


@dataclass(frozen=True)
class SessionHints:
    """What a run tells the session it starts about the work it will give it.

    ``task_modules``: what the run's own tasks import beside the source's (its stages, its
    sink's writers), which the warm interpreter imports before it forks them."""

    task_modules: tuple[str, ...] = ()


NO_HINTS = SessionHints()


def build_session(settings: Any, master: str | None, log_file: str | None = None,
                  log_to_console: bool = False,
                  hints: SessionHints = NO_HINTS) -> OwnSession:
    """A SparkSession for the pipeline ``settings`` (``PipelineSettings``) on ``master``
    (default ``local[*]``); the YAML's ``spark`` mapping overrides any default here. Spark's
    own warnings and errors go to ``log_file`` (and to the console too with
    ``log_to_console``), unless the configuration names a log4j file of its own.
    ``hints``: what the run will ask of the session (``SessionHints``)."""
    from pyspark.sql import SparkSession

    conf = {"spark.sql.execution.arrow.pyspark.enabled": "true",
            "spark.sql.shuffle.partitions": str(max(2, settings.parallelism)),
            "spark.ui.showConsoleProgress": "false",
            "spark.python.authenticate.socketTimeout": "120s",  # slow starts under load
            **settings.spark}
    # PySpark takes the executors' interpreter from the environment only
    if conf.get("spark.pyspark.python"):
        os.environ["PYSPARK_PYTHON"] = conf["spark.pyspark.python"]
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    if not cluster.is_local(master):  # executors import the driver's sparkcdc
        conf = cluster.ship_conf(conf, cluster.package_archive())
    else:  # a local run binds to loopback (no "hostname resolves to..." warning)
        os.environ.setdefault("SPARK_LOCAL_IP", "127.0.0.1")
    if "log4j" not in conf.get("spark.driver.extraJavaOptions", ""):
        quiet = os.path.join(os.path.dirname(__file__), "log4j2.properties")
        extra = f" -Dlog4j2.configurationFile=file:{quiet}"
        if log_file:
            os.makedirs(os.path.dirname(log_file), exist_ok=True)
            extra += f" -Dsparkcdc.spark.log={log_file}"
        if log_to_console:
            extra += " -Dsparkcdc.spark.console=WARN"
        conf["spark.driver.extraJavaOptions"] = (
            conf.get("spark.driver.extraJavaOptions", "") + extra).strip()
    if settings.local_time_zone:
        conf["spark.sql.session.timeZone"] = settings.local_time_zone
    cache = ClassCache.for_conf(conf, settings.class_cache)
    ours = jit_options(conf, master)
    # started first: it imports on the other core while the JVM starts
    warm = (WarmPython.start(hints.task_modules)
            if settings.warm_workers and usable(master, conf) else None)

    def launch(jvm_options: str):
        from pyspark import SparkConf, SparkContext

        jvm_options = f"{ours} {jvm_options}".strip()
        opts = {"spark.master": master or "local[*]", "spark.app.name": f"sparkcdc:{settings.name}",
                **conf}
        java = "spark.driver.extraJavaOptions"
        if jvm_options:  # ours first: the user's options come after and win
            opts[java] = f"{jvm_options} {conf.get(java, '')}".strip()
        if SparkContext._gateway is None:  # the JVM, with its stderr in Spark's log
            SparkContext._ensure_initialized(gateway=_gateway(
                SparkConf(loadDefaults=False).setAll(list(opts.items())),
                log_file if not log_to_console else None))
        b = SparkSession.builder
        for k, v in opts.items():
            b = b.config(k, v)
        return b.getOrCreate()

    try:
        spark = cache.start(launch)
    except BaseException:
        if warm is not None:
            warm.stop()
        raise
    spark.sparkContext.setLogLevel("ERROR")
    return OwnSession(spark, cache, warm)


def jit_options(conf: dict[str, str], master: str | None) -> str:
    """The JIT options a session's JVM gets from us (``QUICK_JIT``): none on a cluster, or
    when the user's driver options choose a compiler themselves."""
    user = conf.get("spark.driver.extraJavaOptions", "")
    if not cluster.is_local(master) or "Tiered" in user:
        return ""
    return QUICK_JIT


def _gateway(conf: Any, log_path: str | None) -> Any:
    """PySpark's gateway to a new JVM started with ``conf``; what the JVM prints past log4j
    (the launcher's "Using incubator modules" line, a crash's dump) goes to ``log_path``,
    Spark's log, rather than the console. Given to the JVM alone: the run's own threads
    keep writing to the console while it starts (``PendingSession``)."""
    from pyspark.java_gateway import launch_gateway

    if not log_path:
        return launch_gateway(conf)
    os.makedirs(os.path.dirname(log_path), exist_ok=True)
    with open(log_path, "ab") as err:
        return launch_gateway(conf, {"stderr": err})
