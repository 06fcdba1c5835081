"""Odd identifiers are captured correctly; the password never lands in checkpoints, plans,
progress or error messages."""

from __future__ import annotations

import json
import os
import random
import subprocess
import sys
from pathlib import Path

import pytest
from stream_support import stream_available

import sparkcdc

DB_SUFFIX = "wëird db`x"
TABLE = "sel`ect tâble ß"  # identifiers are BMP-only on MariaDB


@pytest.fixture(scope="module", autouse=True)
def _register(spark):
    sparkcdc.register(spark)


def _q(name: str) -> str:
    return "`" + name.replace("`", "``") + "`"


def test_backticks_spaces_unicode_and_keywords(spark, mariadb, tmp_path):
    db = f"t_{random.randint(0, 10**9)} {DB_SUFFIX}"
    mariadb.execute(f"CREATE DATABASE {_q(db)}")
    try:
        t = f"{_q(db)}.{_q(TABLE)}"
        mariadb.execute(
            f"CREATE TABLE {t} (`select` INT PRIMARY KEY, `my col` VARCHAR(20), `ü` INT, "
            f"`a``b` INT, `from` DATE)",
            f"INSERT INTO {t} VALUES (1, 'one', 10, 100, '2024-01-01'), "
            f"(2, 'two', 20, 200, NULL)")
        base = random.randint(10_000, 4_000_000_000)
        opts = mariadb.source_options(**{
            "database-name": ".*" + DB_SUFFIX.replace("`", "`"),
            "table-name": ".*\\.sel`ect tâble ß", "server-id": f"{base}-{base + 3}"})
        df = spark.read.format("mysql-cdc").options(**opts).load()
        assert df.columns[:5] == ["select", "my col", "ü", "a`b", "from"]
        assert sorted(tuple(r)[:4] for r in df.collect()) == [(1, "one", 10, 100),
                                                              (2, "two", 20, 200)]
        seen: list = []

        def run():
            stream_available(spark, opts, tmp_path / "ckpt", seen)

        run()
        mariadb.execute(f"UPDATE {t} SET `my col` = 'uno', `select` = 11 WHERE `select` = 1",
                        f"DELETE FROM {t} WHERE `ü` = 20")
        run()
        changes = sorted((r["_change_type"], r["select"], r["my col"]) for r in seen
                         if r["_op_ts"] is not None)
        assert changes == [("delete", 1, "one"), ("delete", 2, "two"), ("insert", 11, "uno")]
    finally:
        mariadb.execute(f"DROP DATABASE {_q(db)}")


def test_password_never_leaks(spark, mariadb, db, tmp_path):
    mariadb.execute(f"CREATE TABLE `{db}`.t (id INT PRIMARY KEY, v INT)",
                    f"INSERT INTO `{db}`.t VALUES (1, 1), (2, 2)")
    base = random.randint(10_000, 4_000_000_000)
    opts = mariadb.source_options(**{"database-name": db, "table-name": f"{db}\\.t",
                                     "server-id": f"{base}-{base + 3}"})
    secret = opts["password"]
    stream = spark.readStream.format("mysql-cdc").options(**opts).load()
    q = (stream.writeStream.format("parquet")
         .option("checkpointLocation", str(tmp_path / "ckpt"))
         .trigger(availableNow=True).start(str(tmp_path / "out")))
    q.awaitTermination(300)
    mariadb.execute(f"UPDATE `{db}`.t SET v = 5")
    texts = [str(q.lastProgress), str(q.recentProgress), q._jsq.toString()]
    plan = spark.read.format("mysql-cdc").options(**opts).load()
    texts.append(plan._jdf.queryExecution().toString())
    for f in Path(tmp_path).rglob("*"):
        if f.is_file():
            texts.append(f.read_bytes().decode("utf-8", "replace"))
    assert any("binlog" in t for t in texts)  # the offsets really are in there
    assert not [t[:200] for t in texts if secret in t]
    # an error about the connection names the user and host, not the password
    bad = {**opts, "port": str(mariadb.info.port), "username": "nobody"}
    with pytest.raises(Exception) as e:
        spark.read.format("mysql-cdc").options(**bad).load()
    assert "nobody" in str(e.value) and secret not in str(e.value)


@pytest.mark.long
def test_password_not_in_spark_ui_or_driver_log(mariadb, db, tmp_path):
    """A Spark session with its UI on (a child process, INFO logs) runs a batch read, a stream
    and a failing read; every UI page (jobs, stages, SQL plans, environment, streaming, the
    REST API) and the driver's log are searched for the password."""
    mariadb.execute(f"CREATE TABLE `{db}`.t (id INT PRIMARY KEY, v INT)",
                    f"INSERT INTO `{db}`.t VALUES (1, 1), (2, 2), (3, 3)")
    base = random.randint(10_000, 4_000_000_000)
    opts = mariadb.source_options(**{"database-name": db, "table-name": f"{db}\\.t",
                                     "server-id": f"{base}-{base + 3}"})
    secret = opts["password"]
    env = {**os.environ, "PYSPARK_PYTHON": sys.executable}
    proc = subprocess.run([sys.executable, str(Path(__file__).parents[1] / "support" / "ui_child.py"),
                           str(tmp_path)], input=json.dumps(opts), capture_output=True,
                          text=True, timeout=900, env=env, check=False)
    log = proc.stdout + proc.stderr
    (tmp_path / "driver.log").write_text(log)
    assert proc.returncode == 0, log[-3000:]
    assert "ROWS 3" in log and "STREAM None" in log and "FAILED" in log
    pages = {p.name: p.read_text(errors="replace") for p in (tmp_path / "ui").iterdir()}
    urls = {v.splitlines()[0] for v in pages.values()}
    text = "\n".join(pages.values())
    # the crawl saw query plans, the environment, the streaming query and the failed read
    assert any("/SQL/execution/" in u for u in urls), sorted(urls)
    assert any("/StreamingQuery/statistics/" in u for u in urls), sorted(urls)
    assert "BatchScan mysql-cdc" in text and "spark.app.name" in text
    assert f"nobody@{opts['hostname']}:{opts['port']}" in text  # the error, without password
    assert "INFO:sparkcdc.ui_child" in log and " WARN " in log  # the Python and JVM logs
    leaks = [v.splitlines()[0] for v in pages.values() if secret in v]
    assert not leaks, f"the password is on UI pages: {leaks[:5]}"
    assert secret not in log, "the password is in the driver's log"
    for f in tmp_path.rglob("*"):  # checkpoint, offsets, commits, data
        if f.is_file():
            assert secret.encode() not in f.read_bytes(), f
