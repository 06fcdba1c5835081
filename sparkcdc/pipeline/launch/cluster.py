"""Running on a Spark cluster: sparkcdc shipped to the executors, and checked there.

Executors read chunks and binlog windows, so they import ``sparkcdc``. On a cluster
(``--master`` other than ``local``) the driver packs the installed ``sparkcdc`` package,
compiled row decoder included, into a zip and adds it as a Spark archive under the name
``sparkcdc``: each executor unpacks it into its working directory, which PySpark puts in
front of ``sys.path``, so the executors import the driver's exact copy even where sparkcdc is
not installed. (A zip given to ``addPyFile`` would not do: Python cannot import the
compiled decoder from inside a zip.) The executors' Python still needs sparkcdc's
dependencies (pyarrow, pymysql, mysql-replication, connectorx): the same environment on
every node, or a packed one in ``spark.archives``.

``probe_executors`` runs one small job before the streams start (``spark/workers.py``'s
``probe``): every executor reports its host, where it imported sparkcdc from, and which row decoder it picked; an executor that
cannot import sparkcdc or a dependency fails the run at once with the module named, not
later inside a chunk read.
"""

from __future__ import annotations

import hashlib
import logging
import os
import tempfile
import zipfile
from pathlib import Path

from sparkcdc.errors import ConfigError
from sparkcdc.spark.workers import probe

log = logging.getLogger("sparkcdc.pipeline")

ARCHIVE_NAME = "sparkcdc"  # the directory each executor unpacks the package into
# what names the cause in a failed probe's Java stack trace
_FATAL = ("ModuleNotFoundError", "ImportError", "Cannot run program", "No such file")


def is_local(master: str | None) -> bool:
    """True for ``local``, ``local[N]``, ``local[N,F]`` and ``local-cluster``...: the
    executors share the driver's machine and its installed sparkcdc. ``local-cluster`` runs
    separate executor JVMs, so it ships like a real cluster."""
    return master is None or master == "local" or master.startswith("local[")


def package_archive(dest_dir: str | os.PathLike | None = None) -> Path:
    """The installed ``sparkcdc`` package as a zip whose top level is the package's contents
    (unpacked as a directory named ``sparkcdc``). Sources and compiled modules only; no
    caches. The file name carries a content hash, so a rebuilt package is a new archive."""
    import sparkcdc

    root = Path(sparkcdc.__file__).resolve().parent
    files = sorted(p for p in root.rglob("*") if p.is_file() and "__pycache__" not in p.parts
                   and p.suffix in (".py", ".so", ".pyd", ".typed", ".json", ".yaml"))
    digest = hashlib.sha256()
    for p in files:
        digest.update(str(p.relative_to(root)).encode())
        digest.update(p.read_bytes())
    dest = Path(dest_dir or Path(tempfile.gettempdir()) / f"sparkcdc-ship-{os.getuid()}")
    dest.mkdir(parents=True, exist_ok=True)
    path = dest / f"sparkcdc-{digest.hexdigest()[:12]}.zip"
    if not path.exists():
        tmp = path.with_suffix(".tmp")
        with zipfile.ZipFile(tmp, "w", zipfile.ZIP_DEFLATED) as z:
            for p in files:
                z.write(p, str(p.relative_to(root)))
        tmp.replace(path)
    return path


def ship_conf(conf: dict[str, str], archive: Path) -> dict[str, str]:
    """``conf`` with the package archive added to ``spark.archives`` (kept: the user's own
    archives, e.g. a packed Python environment)."""
    entry = f"{archive.resolve().as_uri()}#{ARCHIVE_NAME}"
    have = [a for a in conf.get("spark.archives", "").split(",") if a.strip()]
    return {**conf, "spark.archives": ",".join([*have, entry])}


def probe_executors(spark, tasks: int | None = None) -> list[dict]:
    """One small job across the executors: what each imported, from where. Raises
    ``ConfigError`` naming what an executor is missing."""
    sc = spark.sparkContext
    n = tasks or max(2, sc.defaultParallelism)
    try:
        found = sc.parallelize(range(n), n).mapPartitions(probe).collect()
    except Exception as e:  # noqa: BLE001 - the executors' Python failed before our code ran
        lines = [x.strip() for x in str(e).splitlines() if x.strip()] or [type(e).__name__]
        why = next((x for x in lines if any(w in x for w in _FATAL)), lines[0])
        raise ConfigError(
            f"the executors cannot run sparkcdc's Python: {why[:300]}",
            fix="install the same Python environment on every node (PYSPARK_PYTHON names it; "
                "the default is the driver's interpreter path), or ship a packed one with "
                "pipeline.spark 'spark.archives'") from None
    missing = sorted({m for f in found for m in f["missing"]})
    if missing:
        raise ConfigError(
            f"the executors' Python ({os.environ.get('PYSPARK_PYTHON', 'python3')}) cannot "
            f"import {', '.join(missing)}",
            fix="install sparkcdc's dependencies (pip install sparkcdc) in the executors' "
                "Python, or ship a packed environment with pipeline.spark 'spark.archives'")
    for f in found:
        log.info("executor %s pid %s: sparkcdc from %s, %s", f["host"], f["pid"],
                 f["sparkcdc"], f["decoder"])
    return found


__all__ = ["ARCHIVE_NAME", "is_local", "package_archive", "probe_executors", "ship_conf"]
