"""The Spark session a pipeline run creates when it is not given one: tuned for collecting
Arrow batches on the driver, quiet on start-up, bound to loopback when local, started from
the class archive of earlier runs (pipeline/class_cache.py), and shipping the driver's
sparkcdc to the executors of a cluster (pipeline/cluster.py)."""

from __future__ import annotations

import os
import sys
from dataclasses import dataclass
from typing import Any

from sparkcdc.pipeline import cluster
from sparkcdc.pipeline.class_cache import ClassCache


@dataclass
class OwnSession:
    """A session a run started, and what its end owes: the class archive its JVM writes."""

    spark: Any
    cache: ClassCache

    def stop(self) -> None:
        self.spark.stop()
        self.cache.publish(self.spark)


def build_session(settings: Any, master: str | None, log_file: str | None = None,
                  log_to_console: bool = False) -> OwnSession:
    """A SparkSession for the pipeline ``settings`` (``PipelineSettings``) on ``master``
    (default ``local[*]``); the YAML's ``spark`` mapping overrides any default here. Spark's
    own warnings and errors go to ``log_file`` (and to the console too with
    ``log_to_console``), unless the configuration names a log4j file of its own."""
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

    def launch(jvm_options: str):
        b = SparkSession.builder.appName(f"sparkcdc:{settings.name}").master(
            master or "local[*]")
        java = "spark.driver.extraJavaOptions"
        opts = dict(conf)
        if jvm_options:  # ours first: the user's options come after and win
            opts[java] = f"{jvm_options} {conf.get(java, '')}".strip()
        for k, v in opts.items():
            b = b.config(k, v)
        return _with_stderr(log_file if not log_to_console else None, b.getOrCreate)

    spark = cache.start(launch)
    spark.sparkContext.setLogLevel("ERROR")
    return OwnSession(spark, cache)


def _with_stderr(path: str | None, start):
    """``start()`` (the JVM's launch) with this process's stderr pointed at ``path``: the
    JVM inherits it for its whole life, so what it prints past log4j (the launcher's
    "Using incubator modules" line, a crash's dump) lands in Spark's log, not on the
    console. Ours is restored at once."""
    if not path:
        return start()
    os.makedirs(os.path.dirname(path), exist_ok=True)
    sys.stderr.flush()
    saved = os.dup(2)
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)
    try:
        os.dup2(fd, 2)
        return start()
    finally:
        os.dup2(saved, 2)
        os.close(saved)
        os.close(fd)
