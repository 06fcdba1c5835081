"""The ``sparkcdc`` commands as a user runs them: separate processes, real servers.

``run`` costs a JVM start each time, so one test does the lot: a continuous run that picks up
a table created while it runs and stops cleanly on Ctrl-C, then ``status``, ``verify`` (OK,
then DIFFERENT with the missing keys while the pipeline is stopped), a resumed
``run --until-caught-up``, and ``verify`` OK again."""

from __future__ import annotations

import os
import random
import re
import signal
import subprocess
import sys
import urllib.request

import pytest
from cli_support import cause, cli, delta_ids, run_tail, wait_for, waited
from server_support import seq
from sink_support import read_delta

from sparkcdc.pipeline.commands.status import table_statuses
from sparkcdc.pipeline.definition import load_pipeline
from sparkcdc.testing.mariadb import MariaDBSandbox, ServerSettings


def write_pipeline(path, options, db, lake, ckpt):
    base = random.randint(100_000, 3_000_000_000)
    path.write_text(f"""\
source:
  type: mysql
  hostname: {options['hostname']}
  port: {options['port']}
  username: {options['username']}
  password: ${{CLI_TEST_PW}}
  tables: {db}.\\.*
  server-id: {base}-{base + 19}
sink:
  type: delta
  path: {lake}
pipeline:
  name: cli
  parallelism: 1
  checkpoint.location: {ckpt}
  trigger.interval: 1s
  discovery.interval: 1s
""")


@pytest.mark.long
def test_run_status_verify_and_resume(mariadb, db, tmp_path):
    mariadb.execute("CREATE TABLE t1 (id INT PRIMARY KEY, v VARCHAR(10))",
                    f"INSERT INTO t1 SELECT seq, CONCAT('v', seq) FROM {seq(mariadb, 50)}",
                    database=db)
    yaml_path, lake, ckpt = tmp_path / "p.yaml", tmp_path / "lake", tmp_path / "ckpt"
    write_pipeline(yaml_path, mariadb.source_options(), db, lake, ckpt)
    env = {**os.environ, "CLI_TEST_PW": mariadb.info.cdc_password,
           "PYSPARK_PYTHON": sys.executable}
    defn = load_pipeline(yaml_path, env=env)
    with open(tmp_path / "run.log", "w+") as log:
        proc = subprocess.Popen([sys.executable, "-m", "sparkcdc.cli", "run", str(yaml_path),
                                 "--no-progress", "--master", "local[2]", "--metrics-port", "0"],
                                stdout=log, stderr=subprocess.STDOUT, env=env)
        try:
            wait_for(lambda: delta_ids(lake, db, "t1") == set(range(1, 51)), 240, "the snapshot")
            # the metrics page of the running process says the same (docs/operations.md)
            url = re.search(r"metrics: (http://\S+)", (tmp_path / "run.log").read_text()).group(1)

            def rows_t1() -> float:
                with urllib.request.urlopen(url, timeout=10) as r:
                    page = r.read().decode()
                return max([float(line.rsplit(" ", 1)[1]) for line in page.splitlines()
                            if line.startswith("sparkcdc_table_rows_total{")
                            and f'table="{db}.t1"' in line] or [0.0])
            wait_for(lambda: rows_t1() == 50, 30, "the metrics of the snapshot")
            mariadb.execute("CREATE TABLE t2 (id INT PRIMARY KEY)",
                            "INSERT INTO t2 VALUES (1), (2)",
                            "INSERT INTO t1 VALUES (51, 'new')", "DELETE FROM t1 WHERE id = 1",
                            database=db)
            wait_for(lambda: delta_ids(lake, db, "t2") == {1, 2}, 120, "the new table")
            wait_for(lambda: delta_ids(lake, db, "t1") == set(range(2, 52)), 60, "the changes")
            mariadb.execute("UPDATE t1 SET v = 'pre' WHERE id = 2",  # while it runs: a DDL
                            "ALTER TABLE t1 ADD COLUMN w INT", "INSERT INTO t1 VALUES (52, 'x', 7)",
                            database=db)
            wait_for(lambda: 52 in delta_ids(lake, db, "t1"), 120, "the altered table")
            rows = {r["id"]: r for r in read_delta(lake / db / "t1").to_pylist()}
            assert (rows[52]["w"], rows[2]["v"], rows[3]["w"]) == (7, "pre", None)
            running = {s.table: s.running for s in table_statuses(defn)}
            assert running == {f"{db}.t1": True, f"{db}.t2": True}
            proc.send_signal(signal.SIGINT)  # Ctrl-C
            # (the first run on a machine also writes Spark's class archive as it ends)
            assert waited(proc, 300) == 0, run_tail(log, ckpt)
        finally:
            if proc.poll() is None:
                proc.kill()
            log.seek(0)
            out = log.read()
    assert "pipeline 'cli' stopped" in out, out[-3000:]
    # clean output: sparkcdc's own lines; Spark's log4j lines go to a file under the
    # checkpoint (a JVM stack trace, too, has no place on the console)
    spark_lines = [ln for ln in out.splitlines()
                   if re.match(r"\d\d/\d\d/\d\d \d\d:\d\d:\d\d (WARN|ERROR|INFO) ", ln)
                   or ln.lstrip().startswith("at org.apache.")]
    assert not spark_lines, spark_lines[:5]
    assert "Using incubator modules" not in out  # the JVM's own line: in Spark's log
    assert f"Spark's log: {ckpt / 'logs' / 'spark.log'}" in out, out[-1000:]
    assert (ckpt / "logs" / "spark.log").exists()

    status = cli("status", str(yaml_path), env=env)
    assert status.returncode == 0, status.stderr
    # the ALTER came in the pipeline's stream: t1 went on in generation 0
    for needle in (f"{db}.t1", f"{db}.t2", "streaming", "stopped g0",
                   "server binlog position"):
        assert needle in status.stdout, status.stdout

    ok = cli("verify", str(yaml_path), env=env)
    assert ok.returncode == 0, ok.stdout + ok.stderr
    assert f"OK {db}.t1 <- {db}.t1: 51 rows" in ok.stdout and f"OK {db}.t2" in ok.stdout

    # the pipeline is stopped and the source moves on: the target is still exact as of its
    # position, which verify says, and status shows the lag
    mariadb.execute("INSERT INTO t1 VALUES (1001, 'late', 1), (1002, 'late', 2)", database=db)
    behind = cli("verify", str(yaml_path), "--timeout", "1", env=env)
    assert behind.returncode == 0, behind.stdout
    assert f"OK {db}.t1 <- {db}.t1: 51 rows in 1 range(s) match as of binlog position" \
        in behind.stdout, behind.stdout
    lag = cli("status", str(yaml_path), env=env)
    assert " 0 B " not in lag.stdout.split(f"{db}.t1")[1].splitlines()[0], lag.stdout

    resumed = cli("run", str(yaml_path), "--until-caught-up", "--no-progress", "--master",
                  "local[2]", env=env)
    assert resumed.returncode == 0, resumed.stdout[-2000:] + cause(resumed.stderr)
    assert "caught up" in resumed.stdout
    assert "nothing to do" not in resumed.stdout  # it had two rows to bring
    for notice in ("log4j profile", "NativeCodeLoader", "resolves to a loopback"):
        assert notice not in resumed.stderr, resumed.stderr[-2000:]
    assert cli("verify", str(yaml_path), env=env).returncode == 0

    # again at once: the binlog has not moved, so the run starts no JVM at all
    idle = cli("run", str(yaml_path), "--until-caught-up", "--no-progress", env=env)
    assert idle.returncode == 0, idle.stdout[-2000:] + idle.stderr[-3000:]
    assert "caught up (nothing to do since the last run" in idle.stdout, idle.stdout
    assert "log4j" not in idle.stderr, idle.stderr[-2000:]
    # one change anywhere in the binlog, even of a table not captured, means a real run
    mariadb.execute(f"CREATE DATABASE {db}_other", f"CREATE TABLE {db}_other.t (id INT)")
    moved = cli("run", str(yaml_path), "--until-caught-up", "--no-progress", env=env)
    assert moved.returncode == 0, moved.stdout[-2000:] + cause(moved.stderr)
    assert "nothing to do" not in moved.stdout, moved.stdout


def test_validate_prints_every_problem_with_its_fix(tmp_path):
    with MariaDBSandbox(ServerSettings.misconfigured("statement"), name="validate") as sb:
        sb.execute("CREATE DATABASE shop", "CREATE TABLE shop.nokey (a INT, b INT)",
                   "CREATE TABLE shop.nokey2 (c INT)", "CREATE TABLE shop.ok (id INT PRIMARY KEY)")
        yaml_path = tmp_path / "p.yaml"
        write_pipeline(yaml_path, sb.source_options(), "shop", tmp_path / "lake",
                       tmp_path / "ckpt")
        env = {**os.environ, "CLI_TEST_PW": sb.info.cdc_password}
        r = cli("validate", str(yaml_path), env=env, timeout=120)
        assert r.returncode == 1, r.stdout + r.stderr
        out = r.stdout
        assert "binlog_format" in out and "STATEMENT" in out
        assert "table shop.nokey: table shop.nokey has no primary key" in out
        assert "table shop.nokey2:" in out  # not hidden by the first keyless table
        assert ("fix: name a chunk key column with the option "
                "scan.incremental.snapshot.chunk.key-column") in out
        assert "shop.ok -> shop.ok" in out and out.count("fix:") >= 3

        yaml_path.write_text(yaml_path.read_text().replace("tables: shop", "tables: nowhere"))
        r = cli("validate", str(yaml_path), env=env, timeout=120)
        assert r.returncode == 1
        assert "no table visible to 'cdc' matches nowhere" in r.stdout, r.stdout


def test_a_bad_file_fails_before_anything_runs(tmp_path):
    p = tmp_path / "p.yaml"
    write_pipeline(p, {"hostname": "127.0.0.1", "port": "not-a-port", "username": "u"}, "d",
                   tmp_path / "l", tmp_path / "c")
    r = cli("run", str(p), env={**os.environ, "CLI_TEST_PW": "x"}, timeout=60)
    assert r.returncode == 2
    assert "p.yaml:4: 'source.port'" in r.stderr and "must be an integer" in r.stderr


@pytest.mark.long
def test_a_run_that_fails_while_spark_starts_ends_its_jvm(mariadb, tmp_path):
    """A run starts Spark's JVM in the background while it discovers its tables. When
    discovery fails, the run reports discovery's reason, and its ``close()`` waits for that
    JVM and stops its session: in a process that goes on (a caller's), no session or
    starting thread is left behind."""
    yaml_path, ckpt = tmp_path / "p.yaml", tmp_path / "ckpt"
    write_pipeline(yaml_path, mariadb.source_options(), "nowhere", tmp_path / "lake", ckpt)
    env = {**os.environ, "CLI_TEST_PW": mariadb.info.cdc_password,
           "PYSPARK_PYTHON": sys.executable}
    r = cli("run", str(yaml_path), "--no-progress", "--master", "local[2]", env=env,
            timeout=300)
    assert r.returncode == 2, r.stdout[-2000:] + r.stderr[-3000:]  # a configuration error
    assert "no table visible to 'cdc'" in r.stderr, r.stderr[-3000:]
    assert "Traceback" not in r.stderr, r.stderr[-3000:]
    assert "Using incubator modules" in (ckpt / "logs" / "spark.log").read_text()  # it started

    caller = subprocess.run([sys.executable, "-c", """if True:
        import sys, threading
        from pyspark import SparkContext
        from sparkcdc.errors import SparkCDCError
        from sparkcdc.pipeline.definition import load_pipeline
        from sparkcdc.pipeline.run.loop import Runner
        runner = Runner(load_pipeline(sys.argv[1]), master="local[1]")
        try:
            runner.run()
        except SparkCDCError as e:
            print("failed:", e)
        finally:
            runner.close()  # as the CLI does
        starting = [t.name for t in threading.enumerate() if t.name == "sparkcdc-session"]
        print("left:", starting, SparkContext._active_spark_context)
        """, str(yaml_path)], capture_output=True, text=True, env=env, timeout=300, check=False)
    assert "failed: no table visible" in caller.stdout, caller.stdout + caller.stderr[-3000:]
    assert "left: [] None" in caller.stdout, caller.stdout
