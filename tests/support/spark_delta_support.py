"""Helpers of the tests of Spark's own Delta writer (marker ``spark_delta``; the delta sink's
``writer: spark``, sinks/delta/spark_writer.py): the Delta settings a pipeline's Spark
session gets in its YAML, ``sparkcdc run`` as a user runs it, and the two readers each
target is judged with: delta-rs (DataFusion, which applies deletion vectors) and another
Spark process with delta-spark.

They run in ``make test-compat``'s PySpark 4.2 cell, with the jars scripts/fetch_jars.sh
fetched into .jars/delta (delta-spark 4.4 has no release for PySpark 4.3)."""

from __future__ import annotations

import glob
import json
import os
import subprocess
import sys
from pathlib import Path

from sink_support import read_delta

ROOT = Path(__file__).resolve().parents[2]
DELTA_JARS = sorted(glob.glob(str(ROOT / ".jars" / "delta" / "*.jar")))
NO_JARS = "scripts/fetch_jars.sh delta fetches delta-spark's jars into .jars/delta"
DELTA_CONF = {
    "spark.jars": ",".join(DELTA_JARS),
    "spark.sql.extensions": "io.delta.sql.DeltaSparkSessionExtension",
    "spark.sql.catalog.spark_catalog": "org.apache.spark.sql.delta.catalog.DeltaCatalog",
    # Delta reads its log with 50 tasks by default: two do on two cores
    "spark.databricks.delta.snapshotPartitions": "2",
    "spark.sql.shuffle.partitions": "2",
    "spark.ui.showConsoleProgress": "false",
}

READER = """\
import json, sys
from pyspark.sql import SparkSession
conf, paths = json.loads(sys.argv[1]), sys.argv[2:]
b = SparkSession.builder.master("local[1]").config("spark.ui.enabled", "false")
for k, v in conf.items():
    b = b.config(k, v)
spark = b.getOrCreate()
print("RESULT " + json.dumps([[r.asDict() for r in spark.read.format("delta").load(p)
                               .collect()] for p in paths], default=str))
"""


def spark_yaml(conf: dict[str, str] = DELTA_CONF) -> str:
    """The pipeline's ``spark:`` section (under ``pipeline:``) giving its session Delta."""
    return "  spark:\n" + "".join(f"    {k}: '{v}'\n" for k, v in conf.items())


def env_of(mariadb) -> dict[str, str]:
    return {**os.environ, "TEST_PW": mariadb.info.cdc_password,
            "PYSPARK_PYTHON": sys.executable}


def run(yaml_path: Path, mariadb, cwd: Path, *args: str) -> str:
    """``sparkcdc run --until-caught-up`` in its own process; its log (-v), also kept in
    ``cwd/run-<n>.log`` for a failure's reader."""
    p = subprocess.run([sys.executable, "-m", "sparkcdc.cli", "run", str(yaml_path), "-v",
                        "--until-caught-up", "--no-progress", "--master", "local[2]", *args],
                       capture_output=True, text=True, env=env_of(mariadb), cwd=cwd,
                       timeout=900, check=False)
    out = p.stdout + p.stderr
    n = len(list(cwd.glob("run-*.log")))
    (cwd / f"run-{n}.log").write_text(out)
    errors = [ln for ln in out.splitlines() if "Error" in ln or " ERROR " in ln]
    assert p.returncode == 0, (cwd / f"run-{n}.log", errors[-20:])
    return out


def spark_read(tmp: Path, *paths: Path) -> list[list[dict]]:
    """The tables' rows as another Spark process with delta-spark reads them."""
    script = tmp / "reader.py"
    script.write_text(READER)
    p = subprocess.run([sys.executable, str(script), json.dumps(DELTA_CONF),
                        *map(str, paths)],
                       capture_output=True, text=True, cwd=tmp, timeout=600, check=False,
                       env={**os.environ, "PYSPARK_PYTHON": sys.executable})
    assert p.returncode == 0, p.stderr[-3000:]
    line = [ln for ln in p.stdout.splitlines() if ln.startswith("RESULT ")][-1]
    return json.loads(line[len("RESULT "):])


def rs_read(path: Path) -> list[dict]:
    """The table's rows as delta-rs reads them."""
    return read_delta(path).to_pylist()


def commits(root: Path) -> list[list[dict]]:
    """The table's log: each commit's actions."""
    return [[json.loads(line) for line in f.read_text().splitlines()]
            for f in sorted((root / "_delta_log").glob("*.json"))]


def operations(root: Path) -> list[str]:
    """Each commit's operation, in order."""
    return [a["commitInfo"]["operation"] for c in commits(root) for a in c
            if "commitInfo" in a]


def engines(root: Path) -> set[str]:
    """Who wrote each commit after the table's creation (``engineInfo``)."""
    return {a["commitInfo"].get("engineInfo", "") for c in commits(root)[1:] for a in c
            if "commitInfo" in a}
