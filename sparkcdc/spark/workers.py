"""What the source's Python workers import: the one list behind the two places that need it.

Spark runs the source in Python processes of its own (the planners on the driver, the task
workers on the executors), and each imports the same modules. Two parts of a run act on that
list: a warm interpreter imports it before Spark asks for a process, so that processes forked
from it start with it loaded (pipeline/launch/warm_python.py), and on a cluster one small job
checks that every executor can import it before any chunk is read
(pipeline/launch/cluster.py). The list is the source's own knowledge, so it lives beside the
source; the pipeline asks for the work done, not for the names.
"""

from __future__ import annotations

import contextlib
import importlib
import os
import pkgutil
import socket
from collections.abc import Iterable
from typing import Any

from sparkcdc.mysql.port import default_decoder

# Spark 4's planners and task worker, then the modules the source (and its readers) imports,
# in the order a run needs them.
PRELOAD = (
    "pyspark.daemon",
    "pyspark.sql.worker.lookup_data_sources",
    "pyspark.sql.worker.create_data_source",
    "pyspark.sql.streaming.python_streaming_source_runner",
    "pyspark.sql.worker.plan_data_source_read",
    "pyspark.worker",
    "sparkcdc.spark.source",
    "pymysql",
    "connectorx",
    "pandas",  # pyarrow imports it as a binlog read builds its first columns (0.2 s)
    "encodings.idna",  # a connection's host name goes through it (0.1 s, unicodedata)
)
PACKAGES = ("sparkcdc.core", "sparkcdc.mysql", "sparkcdc.spark")  # every module of these
# what an executor must have installed beside the shipped sparkcdc (cluster.py ships it)
DEPENDENCIES = ("pyarrow", "pymysql", "pymysqlreplication", "connectorx")


def preload(extra: Iterable[str] = ()) -> None:
    """Import what Spark's Python processes will import: the source's modules, then
    ``extra`` (what the run's own tasks import, named by the run; a package of sparkcdc
    there brings its modules). A module that fails to import is left to the process that needs it (it
    will fail there, with its own message)."""
    names = list(PRELOAD)
    for package in (*PACKAGES, *extra):
        with contextlib.suppress(Exception):
            if package not in PACKAGES and not package.startswith("sparkcdc."):
                importlib.import_module(package)  # a driver: its own imports are its own
                continue
            mod = importlib.import_module(package)
            names += [m.name for m in pkgutil.iter_modules(mod.__path__, package + ".")]
    for name in names:
        with contextlib.suppress(Exception):
            importlib.import_module(name)


def probe(_: Any) -> list[dict]:
    """Run on an executor (one partition each): its host and process, where it imported
    sparkcdc from, which row decoder it picked, and the dependencies it cannot import."""
    out: dict[str, Any] = {"host": socket.gethostname(), "pid": os.getpid(),
                           "cwd": os.getcwd(), "missing": [],
                           # the package this module is part of (sparkcdc/spark/..), not
                           # an import of the package's top, which stands above this room
                           "sparkcdc": os.path.dirname(os.path.dirname(os.path.abspath(__file__))),
                           "decoder": type(default_decoder()).__name__}
    for mod in DEPENDENCIES:
        try:
            importlib.import_module(mod)
        except ImportError as e:
            out["missing"].append(f"{mod} ({e})")
    return [out]


__all__ = ["DEPENDENCIES", "PACKAGES", "PRELOAD", "preload", "probe"]
