"""Delta targets named in a Spark catalog (sinks/delta/catalog.py), as a user runs them.

The whole flow needs Delta Lake in the pipeline's Spark session: delta-spark 4.4 runs on
PySpark 4.2 and no release runs on 4.3 yet, so those tests carry the marker ``spark_delta``
and run in ``make test-compat``'s PySpark 4.2 environment, with the jars that
``scripts/fetch_jars.sh`` fetched into ``.jars/delta``. The catalog is a Hive metastore
(embedded Derby) under the test's folder; each Spark process, the pipeline's and the
readers', is its own JVM, as a user's are.

Without Delta in the session, the run stops before writing anything (any PySpark)."""

from __future__ import annotations

import glob
import json
import os
import subprocess
import sys
from pathlib import Path

import deltalake
import pytest
from pipeline_support import source_yaml
from server_support import seq
from sink_support import read_delta

from sparkcdc.errors import ConfigError
from sparkcdc.sinks.delta.catalog import same_location
from sparkcdc.sinks.delta.config import DeltaConfig, target_options

ROOT = Path(__file__).resolve().parents[3]  # tests/sinks/delta/ -> the project
DELTA_JARS = sorted(glob.glob(str(ROOT / ".jars" / "delta" / "*.jar")))


def catalog_conf(tmp: Path, delta: bool = True) -> dict[str, str]:
    conf = {"spark.sql.catalogImplementation": "hive",
            "spark.hadoop.javax.jdo.option.ConnectionURL":
                f"jdbc:derby:;databaseName={tmp}/metastore_db;create=true",
            "spark.sql.warehouse.dir": str(tmp / "warehouse")}
    if delta:
        conf.update({"spark.jars": ",".join(DELTA_JARS),
                     "spark.sql.extensions": "io.delta.sql.DeltaSparkSessionExtension",
                     "spark.sql.catalog.spark_catalog":
                         "org.apache.spark.sql.delta.catalog.DeltaCatalog"})
    return conf


def write_pipeline(path: Path, mariadb, db: str, lake: Path, ckpt: Path,
                   conf: dict[str, str]) -> None:
    spark = "".join(f"    {k}: '{v}'\n" for k, v in conf.items())
    path.write_text(source_yaml(mariadb, f"{db}.orders", 10) + f"""\
sink:
  type: delta
  path: {lake}
  catalog: spark_catalog
route:
  - source-table: {db}.orders
    sink-table: lake.orders
pipeline:
  name: catalog
  parallelism: 1
  checkpoint.location: {ckpt}
  spark:
{spark}""")


def run_pipeline(yaml_path: Path, env: dict, cwd: Path) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "sparkcdc.cli", "run", str(yaml_path),
                           "--until-caught-up", "--no-progress", "--master", "local[2]"],
                          capture_output=True, text=True, env=env, cwd=cwd, timeout=600,
                          check=False)


READER = """\
import json, sys
from pyspark.sql import SparkSession
conf, sql = json.loads(sys.argv[1]), sys.argv[2:]
b = SparkSession.builder.master("local[1]").config("spark.ui.enabled", "false")
for k, v in conf.items():
    b = b.config(k, v)
spark = b.getOrCreate()
out = []
for q in sql:
    if q.startswith("ROWS "):
        out.append(sorted([r.asDict() for r in spark.table(q[5:]).collect()],
                          key=lambda r: r["id"]))
    else:
        out.append([list(r) for r in spark.sql(q).collect()])
print("RESULT " + json.dumps(out, default=str))
"""


def spark_sql(tmp: Path, conf: dict[str, str], *sql: str) -> list:
    """Statements in a Spark process of their own on the same catalog (the pipeline's
    Derby metastore admits one JVM at a time); ``ROWS db.t`` reads a table's rows."""
    script = tmp / "reader.py"
    script.write_text(READER)
    p = subprocess.run([sys.executable, str(script), json.dumps(conf), *sql],
                       capture_output=True, text=True, cwd=tmp, timeout=300,
                       env={**os.environ, "PYSPARK_PYTHON": sys.executable}, check=False)
    assert p.returncode == 0, p.stderr[-3000:]
    line = [ln for ln in p.stdout.splitlines() if ln.startswith("RESULT ")][-1]
    return json.loads(line[len("RESULT "):])


def source_rows(mariadb, db: str) -> list[dict]:
    cols = [r[0] for r in mariadb.query(
        "SELECT COLUMN_NAME FROM information_schema.COLUMNS WHERE TABLE_SCHEMA = %s "
        "AND TABLE_NAME = 'orders' ORDER BY ORDINAL_POSITION", (db,))]
    return [dict(zip(cols, r)) for r in mariadb.query(f"SELECT * FROM `{db}`.orders ORDER BY id")]


# -- options (no Spark) -------------------------------------------------------------------

def test_catalog_options_go_together_and_the_pipeline_names_each_target():
    with pytest.raises(ConfigError) as e:
        DeltaConfig.parse({"path": "/x", "catalog": "spark_catalog"})
    assert e.value.key == "catalog-table" and "go together" in e.value.message
    with pytest.raises(ConfigError) as e:
        DeltaConfig.parse({"path": "/x", "catalog-table": "lake.orders"})
    assert e.value.key == "catalog"
    opts = target_options({"path": "/lake", "catalog": "spark_catalog"}, "lake", "orders")
    cfg = DeltaConfig.parse(opts)
    assert (cfg.path, cfg.catalog, cfg.catalog_table) == (
        "/lake/lake/orders", "spark_catalog", ("lake", "orders"))
    assert "catalog-table" not in target_options({"path": "/lake"}, "lake", "orders")
    with pytest.raises(ConfigError) as e:  # the pipeline names each target itself
        target_options({"path": "/l", "catalog": "c", "catalog-table": "a.b"}, "lake", "o")
    assert e.value.key == "catalog-table"


def test_same_location_reads_spark_and_delta_rs_spellings(tmp_path):
    assert same_location(f"file:{tmp_path}/lake/o", f"{tmp_path}/lake/o/")
    assert same_location(f"file:///{tmp_path}/lake/o", str(tmp_path / "lake" / "o"))
    assert not same_location(f"file:{tmp_path}/lake/o", f"{tmp_path}/lake/p")
    assert same_location("s3://b/lake/o/", "s3://b/lake/o")


# -- a run without Delta in the session (any PySpark) --------------------------------------

@pytest.mark.long
def test_catalog_target_without_delta_in_spark_stops_before_writing(mariadb, db, tmp_path):
    mariadb.execute("CREATE TABLE orders (id INT PRIMARY KEY, v VARCHAR(10))",
                    "INSERT INTO orders VALUES (1, 'a'), (2, 'b')", database=db)
    lake, ckpt = tmp_path / "lake", tmp_path / "ckpt"
    write_pipeline(tmp_path / "p.yaml", mariadb, db, lake, ckpt,
                   catalog_conf(tmp_path, delta=False))
    env = {**os.environ, "TEST_PW": mariadb.info.cdc_password,
           "PYSPARK_PYTHON": sys.executable}
    p = run_pipeline(tmp_path / "p.yaml", env, tmp_path)
    assert p.returncode != 0, p.stdout[-2000:]
    err = p.stderr
    assert "needs Delta Lake in the pipeline's Spark session" in err, err[-3000:]
    assert "spark.sql.extensions: io.delta.sql.DeltaSparkSessionExtension" in err
    assert "Traceback" not in err, err[-3000:]
    assert not deltalake.DeltaTable.is_deltatable(str(lake / "lake" / "orders"))
    assert mariadb.info.cdc_password not in err + p.stdout


# -- the whole flow (PySpark 4.2 with delta-spark: make test-compat) -----------------------

@pytest.mark.spark_delta
def test_catalog_target_is_named_evolves_and_refuses_another_entry(mariadb, db, tmp_path):
    assert DELTA_JARS, "no delta-spark jars in .jars/delta (scripts/fetch_jars.sh)"
    mariadb.execute("CREATE TABLE orders (id INT PRIMARY KEY, v VARCHAR(10))",
                    f"INSERT INTO orders SELECT seq, CONCAT('v', seq) FROM {seq(mariadb, 40)}",
                    database=db)
    lake, ckpt = tmp_path / "lake", tmp_path / "ckpt"
    conf = catalog_conf(tmp_path)
    yaml_path = tmp_path / "p.yaml"
    write_pipeline(yaml_path, mariadb, db, lake, ckpt, conf)
    env = {**os.environ, "TEST_PW": mariadb.info.cdc_password,
           "PYSPARK_PYTHON": sys.executable}

    p = run_pipeline(yaml_path, env, tmp_path)
    assert p.returncode == 0, p.stderr[-3000:]
    rows, info = spark_sql(tmp_path, conf, "ROWS lake.orders",
                           "DESCRIBE TABLE EXTENDED lake.orders")
    assert rows == source_rows(mariadb, db)
    detail = {r[0]: r[1] for r in info}
    assert (detail["Provider"], detail["Type"]) == ("delta", "EXTERNAL")
    assert same_location(detail["Location"], str(lake / "lake" / "orders"))

    # changes and a new column, through the stream: Spark reads them from the same name
    mariadb.execute("ALTER TABLE orders ADD COLUMN w INT",
                    "INSERT INTO orders VALUES (41, 'new', 7)",
                    "UPDATE orders SET v = 'upd', w = 1 WHERE id = 2",
                    "DELETE FROM orders WHERE id = 3", database=db)
    p = run_pipeline(yaml_path, env, tmp_path)
    assert p.returncode == 0, p.stderr[-3000:]
    (rows,) = spark_sql(tmp_path, conf, "ROWS lake.orders")
    assert rows == source_rows(mariadb, db)
    assert {r["id"]: r["w"] for r in rows if r["id"] in (1, 2, 41)} == {1: None, 2: 1, 41: 7}

    # the name now points at another table: the run refuses, and writes nothing
    other = tmp_path / "elsewhere"
    deltalake.write_deltalake(str(other), read_delta(deltalake.DeltaTable(
        str(lake / "lake" / "orders"))))
    spark_sql(tmp_path, conf, "DROP TABLE lake.orders",
              f"CREATE TABLE lake.orders USING delta LOCATION '{other}'")
    version = deltalake.DeltaTable(str(lake / "lake" / "orders")).version()
    mariadb.execute("INSERT INTO orders VALUES (42, 'later', 0)", database=db)
    p = run_pipeline(yaml_path, env, tmp_path)
    assert p.returncode != 0
    assert "is the Delta table at" in p.stderr and str(other) in p.stderr, p.stderr[-3000:]
    assert "Traceback" not in p.stderr, p.stderr[-3000:]
    assert deltalake.DeltaTable(str(lake / "lake" / "orders")).version() == version
    assert read_delta(deltalake.DeltaTable(str(other))).num_rows == 40
