"""``sparkcdc run --master spark://...`` on a real Spark standalone cluster on loopback.

A master and two workers (1 core, 1 GB each) are started from pyspark's own
``spark-class`` as children of the test: they die with it (PR_SET_PDEATHSIG, as the
sandbox does) and are stopped, with every executor they started, even when the test fails.

The executors run a Python that has sparkcdc's dependencies but **not sparkcdc**: the
driver and the executors name the same interpreter (``PYSPARK_PYTHON``, a small wrapper),
which starts the deps-only Python when the executor's environment says so
(``spark.executorEnv``). The pipeline can only read chunks if the driver shipped the
package (``sparkcdc.pipeline.launch.cluster``), and the unpacked copy is looked at in each
executor's working directory.

That the chunk reads ran on both workers comes from Spark's event log: each task's executor
and the records it read from the source. No row is written to the server while the
pipeline runs (its binlog position is the same before and after), so every binlog window is
empty and every record a task read is a snapshot row, read by a chunk task. Executor ids
are mapped to workers by the worker directories they ran in.
"""

from __future__ import annotations

import json
import os
import random
import re
import signal
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

import deltalake
import pytest
from faults_support import alive
from server_support import binlog_status, seq
from sink_support import read_delta

from sparkcdc.testing.mariadb import free_port, set_pdeathsig

PYSPARK = Path(__import__("pyspark").__file__).parent
ROWS, CHUNK = 1600, 200  # 8 chunks: two micro-batches of 4 chunk reads (parallelism 4)


def _children(pid: int) -> list[int]:
    """Every descendant of ``pid`` (executor JVMs, their Python daemons)."""
    by_parent: dict[int, list[int]] = {}
    for d in Path("/proc").iterdir():
        if d.name.isdigit():
            try:
                ppid = int((d / "stat").read_text().rsplit(")", 1)[1].split()[1])
            except (OSError, IndexError, ValueError):
                continue
            by_parent.setdefault(ppid, []).append(int(d.name))
    out, todo = [], [pid]
    while todo:
        for c in by_parent.get(todo.pop(), []):
            out.append(c)
            todo.append(c)
    return out


class StandaloneCluster:
    """A Spark standalone master and ``workers`` workers on 127.0.0.1, as child processes."""

    def __init__(self, root: Path, workers: int = 2):
        self.root = root
        self.n = workers
        self.procs: list[subprocess.Popen] = []
        self.worker_dirs: list[Path] = []
        self.env = {**os.environ, "SPARK_LOCAL_IP": "127.0.0.1",
                    "SPARK_LOG_DIR": str(root / "logs"), "SPARK_PID_DIR": str(root / "pids"),
                    "SPARK_HOME": str(PYSPARK)}
        self.env.pop("SPARK_CONF_DIR", None)
        self.url = ""
        self.ui = 0

    def _spawn(self, name: str, *args: str) -> subprocess.Popen:
        with open(self.root / f"{name}.log", "w") as log:  # the child keeps its own copy
            p = subprocess.Popen([str(PYSPARK / "bin" / "spark-class"), *args], env=self.env,
                                 stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                                 preexec_fn=set_pdeathsig)  # noqa: PLW1509 - prctl(2), in the child
        self.procs.append(p)
        return p

    def state(self) -> dict:
        with urllib.request.urlopen(f"http://127.0.0.1:{self.ui}/json/", timeout=5) as r:
            return json.load(r)

    def start(self, timeout: float = 120.0) -> StandaloneCluster:
        port, self.ui = free_port(), free_port()
        self.url = f"spark://127.0.0.1:{port}"
        self._spawn("master", "org.apache.spark.deploy.master.Master", "--host", "127.0.0.1",
                    "--port", str(port), "--webui-port", str(self.ui))
        for i in range(self.n):
            wd = self.root / f"worker{i}"
            wd.mkdir(parents=True)
            self.worker_dirs.append(wd)
            self._spawn(f"worker{i}", "org.apache.spark.deploy.worker.Worker", "--host",
                        "127.0.0.1", "--webui-port", str(free_port()), "--cores", "1",
                        "--memory", "1g", "--work-dir", str(wd), self.url)
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            for p in self.procs:
                assert p.poll() is None, f"a cluster process exited: {self.logs()}"
            try:
                if sum(w["state"] == "ALIVE" for w in self.state()["workers"]) == self.n:
                    return self
            except OSError:
                pass
            time.sleep(0.5)
        raise AssertionError(f"the cluster did not come up: {self.logs()}")

    def logs(self) -> str:
        return "\n".join(f"--- {p.name}\n{p.read_text()[-2000:]}"
                         for p in sorted(self.root.glob("*.log")))

    def stop(self) -> None:
        """SIGTERM the workers (they stop their executors), then the master; SIGKILL
        whatever is left, descendants included."""
        family = {c for p in self.procs for c in _children(p.pid)}
        for p in reversed(self.procs):
            if p.poll() is None:
                p.send_signal(signal.SIGTERM)
        for p in self.procs:
            try:
                p.wait(20)
            except subprocess.TimeoutExpired:
                p.kill()
                p.wait(10)
        for pid in family:
            if alive(pid):
                try:
                    os.kill(pid, signal.SIGKILL)
                except ProcessLookupError:
                    pass
        deadline = time.monotonic() + 20
        while any(alive(pid) for pid in family) and time.monotonic() < deadline:
            time.sleep(0.2)
        self.leftover = [pid for pid in family if alive(pid)]


@pytest.fixture
def cluster(tmp_path):
    c = StandaloneCluster(tmp_path / "cluster")
    (tmp_path / "cluster").mkdir()
    try:
        yield c.start()
    finally:
        c.stop()
        assert not c.leftover, f"processes left running: {c.leftover}"


def deps_only_python(root: Path) -> Path:
    """A virtualenv that sees the project venv's installed libraries but not sparkcdc
    (sparkcdc is installed editable, by a .pth file that this path entry does not run)."""
    venv = root / "deps-venv"
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(venv)], check=True)
    site = next(p for p in sys.path if p.endswith("site-packages") and Path(p).is_dir())
    (venv / "lib" / "python3.11" / "site-packages" / "project_deps.pth").write_text(site + "\n")
    return venv / "bin" / "python"


def test_the_shipped_archive(tmp_path):
    """The package as executors unpack it: sources and the compiled decoder, no caches; the
    user's own archives are kept; local masters ship nothing."""
    import zipfile

    from sparkcdc.pipeline.launch import cluster as cl

    path = cl.package_archive(tmp_path)
    names = zipfile.ZipFile(path).namelist()
    assert "__init__.py" in names and "spark/source.py" in names and "pipeline/launch/cluster.py" in names
    assert any(n.startswith("mysql/binlog/_fastdecode") and n.endswith(".so") for n in names)
    assert not [n for n in names if "__pycache__" in n or n.endswith(".pyc")]
    assert cl.package_archive(tmp_path) == path  # same content, same archive
    conf = cl.ship_conf({"spark.archives": "hdfs:///envs/py.tgz#env"}, path)
    assert conf["spark.archives"] == f"hdfs:///envs/py.tgz#env,{path.as_uri()}#sparkcdc"
    assert [cl.is_local(m) for m in (None, "local", "local[2]", "local[2,3]",
                                     "local-cluster[2,1,1024]", "spark://h:7077", "yarn")] == \
        [True, True, True, True, False, False, False]


@pytest.mark.cluster
def test_pipeline_on_a_standalone_cluster(cluster, mariadb, db, tmp_path):
    deps_py = deps_only_python(tmp_path)
    probe = ("import pyarrow, pymysql, pymysqlreplication, connectorx, pyspark\n"
             "try:\n import sparkcdc\nexcept ImportError:\n print('no sparkcdc')")
    check = subprocess.run([str(deps_py), "-c", probe], check=False, capture_output=True,
                           text=True, cwd="/",
                           env={k: v for k, v in os.environ.items() if k != "PYTHONPATH"})
    assert check.stdout.strip() == "no sparkcdc", check.stdout + check.stderr
    wrapper = tmp_path / "python-for-spark"
    wrapper.write_text(f"#!/bin/sh\nif [ -n \"$SPARKCDC_TEST_EXECUTOR\" ]; then\n"
                       f"  exec {deps_py} \"$@\"\nfi\nexec {sys.executable} \"$@\"\n")
    wrapper.chmod(0o755)

    mariadb.execute("CREATE TABLE items (id INT PRIMARY KEY, name VARCHAR(40), qty INT, "
                    "doc JSON, price DECIMAL(10,2))",
                    f"INSERT INTO items SELECT seq, CONCAT('item-', seq), seq % 97, "
                    f"JSON_OBJECT('k', seq), seq / 7 FROM {seq(mariadb, ROWS)}", database=db)
    opts = mariadb.source_options()
    lake, ckpt, events = tmp_path / "lake", tmp_path / "ckpt", tmp_path / "events"
    events.mkdir()
    base = random.randint(100_000, 3_000_000_000)
    yaml_path = tmp_path / "p.yaml"
    yaml_path.write_text(f"""\
source:
  type: mysql
  hostname: {opts['hostname']}
  port: {opts['port']}
  username: {opts['username']}
  password: ${{CLUSTER_TEST_PW}}
  tables: {db}.items
  server-id: {base}-{base + 9}
  scan.incremental.snapshot.chunk.size: {CHUNK}
sink:
  type: delta
  path: {lake}
pipeline:
  name: on-cluster
  parallelism: 4
  checkpoint.location: {ckpt}
  trigger.interval: 1s
  spark:
    spark.executor.memory: 512m
    spark.executor.cores: "1"
    spark.cores.max: "2"
    spark.driver.host: 127.0.0.1
    spark.driver.memory: 1g
    spark.ui.enabled: "false"
    spark.eventLog.enabled: "true"
    spark.eventLog.dir: {events.as_uri()}
    spark.eventLog.rolling.enabled: "false"
    spark.eventLog.compress: "false"
    spark.executorEnv.SPARKCDC_TEST_EXECUTOR: "1"
""")
    env = {**os.environ, "CLUSTER_TEST_PW": mariadb.info.cdc_password,
           "PYSPARK_PYTHON": str(wrapper), "SPARK_LOCAL_IP": "127.0.0.1"}
    before = mariadb.query(binlog_status(mariadb))[0][:2]
    run = subprocess.run([sys.executable, "-m", "sparkcdc.cli", "run", str(yaml_path),
                          "--until-caught-up", "--no-progress", "-v", "--master", cluster.url],
                         check=False, capture_output=True, text=True, env=env, timeout=400,
                         preexec_fn=set_pdeathsig)
    out = run.stdout + run.stderr
    (tmp_path / "run.log").write_text(out)
    assert run.returncode == 0, out[-5000:] + cluster.logs()
    assert mariadb.query(binlog_status(mariadb))[0][:2] == before  # every window was empty

    # the target is the source
    got = read_delta(deltalake.DeltaTable(str(lake / db / "items"))).to_pylist()
    assert sorted(r["id"] for r in got) == list(range(1, ROWS + 1))
    verify = subprocess.run([sys.executable, "-m", "sparkcdc.cli", "verify", str(yaml_path)],
                            check=False, capture_output=True, text=True, env=env, timeout=300)
    assert verify.returncode == 0, verify.stdout + verify.stderr
    assert f"OK {db}.items <- {db}.items: {ROWS:,} rows" in verify.stdout, verify.stdout

    # the executors imported the shipped package: their Python has no sparkcdc, and each one
    # unpacked the driver's copy, compiled decoder included, in its own working directory
    (event_log,) = list(events.iterdir())
    app = event_log.name.split(".")[0]  # the application id
    executor_worker: dict[str, int] = {}
    for i, wd in enumerate(cluster.worker_dirs):
        for d in (wd / app).iterdir():
            executor_worker[d.name] = i
            assert (d / "sparkcdc" / "__init__.py").is_file(), list(d.iterdir())
            assert list((d / "sparkcdc" / "mysql" / "binlog").glob("_fastdecode*.so")), d
    assert sorted(executor_worker.values()) == [0, 1], executor_worker
    probed = [line for line in out.splitlines() if ": sparkcdc from " in line]
    assert probed and all(any(str(wd) in line for wd in cluster.worker_dirs)
                          and line.endswith("CRowDecoder") for line in probed), out[-3000:]

    # the snapshot's rows were written as files by the chunk tasks that read them (on the
    # workers, below), and only the files' metadata went to the driver
    wrote = [int(m.group(1)) for m in re.finditer(
        r"batch \d+: (\d+) row\(s\) written by the tasks as \d+ file\(s\)", out)]
    assert sum(wrote) == ROWS, out[-3000:]

    # chunk reads ran on both workers: records read from the source, per executor
    read_by: dict[str, int] = {}
    for line in event_log.read_text().splitlines():
        ev = json.loads(line)
        if ev["Event"] == "SparkListenerTaskEnd" and ev.get("Task Metrics"):
            n = ev["Task Metrics"]["Input Metrics"]["Records Read"]
            if n:
                ex = ev["Task Info"]["Executor ID"]
                read_by[ex] = read_by.get(ex, 0) + n
    workers_read = {executor_worker[ex] for ex, n in read_by.items() if n > 0}
    assert workers_read == {0, 1}, (read_by, executor_worker)
    # the pipeline's stream moves Arrow batches (arrow-batches): a record is one batch of up
    # to 8,192 rows, so each chunk read of CHUNK rows is one record
    assert sum(read_by.values()) >= ROWS // CHUNK, read_by

    # changes on a cluster: updates, deletes and inserts after the snapshot are written by
    # key-slice tasks on the workers (deletion vectors), and the driver commits file metadata
    mariadb.execute("UPDATE items SET qty = qty + 1000, name = CONCAT(name, '-u') "
                    "WHERE id % 5 = 0", "DELETE FROM items WHERE id % 7 = 0",
                    f"INSERT INTO items SELECT seq, CONCAT('more-', seq), 3, NULL, 2.5 "
                    f"FROM {seq(mariadb, ROWS + 400, ROWS + 1)}", database=db)
    changed = (ROWS // 5) + (ROWS // 7) + 400
    for old in events.iterdir():
        old.unlink()
    run = subprocess.run([sys.executable, "-m", "sparkcdc.cli", "run", str(yaml_path),
                          "--until-caught-up", "--no-progress", "-v", "--master", cluster.url],
                         check=False, capture_output=True, text=True, env=env, timeout=400,
                         preexec_fn=set_pdeathsig)
    out = run.stdout + run.stderr
    (tmp_path / "run-changes.log").write_text(out)
    assert run.returncode == 0, out[-5000:] + cluster.logs()
    sliced = [line for line in out.splitlines()
              if f"{db}.items -> " in line and " task(s): " in line]
    assert sliced and not any("skipped" in line for line in sliced), out[-3000:]
    want = sorted(mariadb.query("SELECT id, name, qty, CAST(price AS CHAR) FROM items",
                                database=db))
    got = read_delta(deltalake.DeltaTable(str(lake / db / "items")),
                     ["id", "name", "qty", "price"]).to_pylist()
    assert sorted((r["id"], r["name"], r["qty"], str(r["price"])) for r in got) == \
        [tuple(w) for w in want]
    # no row went through the driver: what every task of this run sent it (Spark's
    # ``Result Size``, mostly its fixed metrics per task) is far below the changed rows'
    # own bytes, and the change tasks ran on both workers
    (event_log,) = list(events.iterdir())
    result_bytes, ran_on = 0, set()
    for line in event_log.read_text().splitlines():
        ev = json.loads(line)
        if ev["Event"] == "SparkListenerTaskEnd" and ev.get("Task Metrics"):
            result_bytes += int(ev["Task Metrics"].get("Result Size") or 0)
            ex = ev["Task Info"]["Executor ID"]
            if ex in executor_worker:
                ran_on.add(executor_worker[ex])
            else:
                app2 = event_log.name.split(".")[0]
                for i, wd in enumerate(cluster.worker_dirs):
                    if (wd / app2 / ex).is_dir():
                        ran_on.add(i)
    assert ran_on == {0, 1}, ran_on
    tasks_log = [line for line in out.splitlines() if "written on the executors" in line]
    assert not tasks_log, tasks_log  # the driver-collected path did not run
    print(f"changes: {changed}, bytes to the driver: {result_bytes}")

    # executors whose Python has nothing installed: the run stops before any stream with
    # the missing module named and the fix, and leaves the checkpoint as it was
    bare = tmp_path / "bare-venv"
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(bare)], check=True)
    wrapper.write_text(f"#!/bin/sh\nif [ -n \"$SPARKCDC_TEST_EXECUTOR\" ]; then\n"
                       f"  exec {bare}/bin/python \"$@\"\nfi\nexec {sys.executable} \"$@\"\n")
    # a change on the server, so the run has work (a run with nothing to do starts no Spark)
    mariadb.execute(f"INSERT INTO items VALUES ({ROWS + 1000}, 'new', 1, NULL, 1)", database=db)
    offsets = sorted(p.name for p in ckpt.rglob("offsets/*"))
    bad = subprocess.run([sys.executable, "-m", "sparkcdc.cli", "run", str(yaml_path),
                          "--until-caught-up", "--no-progress", "--master", cluster.url],
                         check=False, capture_output=True, text=True, env=env, timeout=400,
                         preexec_fn=set_pdeathsig)
    assert bad.returncode != 0, bad.stdout + bad.stderr[-3000:]
    assert "the executors cannot run sparkcdc's Python" in bad.stderr, bad.stderr[-3000:]
    assert "No module named" in bad.stderr and "fix:" in bad.stderr, bad.stderr[-3000:]
    assert sorted(p.name for p in ckpt.rglob("offsets/*")) == offsets
