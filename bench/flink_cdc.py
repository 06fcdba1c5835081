"""Flink CDC's mysql-cdc connector under PyFlink, as a peer of bench/flink.py; run in its own
venv (.venv-flink, scripts/setup_flink.sh), as a subprocess, like bench/debezium_run.py.

    .venv-flink/bin/python bench/flink_cdc.py CONFIG.json

CONFIG: host, port, user, password, database, table, columns (Flink SQL column list of the
table), parallelism, chunk_size, server_ids, jars (paths), mode, expect, timeout, log_dir,
time_zone and, for ``catchup``, file and pos.

- ``snapshot``: ``scan.startup.mode`` ``snapshot`` (the source is bounded: it reads the
  table in chunks and ends); the job's end is the end condition, and the rows are the
  connector's own count of each chunk read, from its log (a finished job's metrics leave
  the REST endpoint with it);
- ``catchup``: ``specific-offset`` at file/pos, an unbounded job; its end condition is the
  source operator's ``numRecordsOut`` (summed over the subtasks, read through the local
  cluster's REST endpoint every 50 ms) reaching ``expect``, then the job is cancelled.

Both run as one INSERT from the CDC table into a ``blackhole`` table: no Python on the
records' path (a Python UDF would run in a Python worker and handicap Flink), the planner's
own operators only. The local cluster is a MiniCluster started in PyFlink's JVM with its
REST endpoint on, and the job is submitted to it (``execution.target`` ``remote``): the
cluster that PyFlink's local execution starts shuts down with its job, and its counts with
it. Prints one JSON line of ``time.monotonic()`` stamps (the clock is system-wide, so the
parent measures from its own launch): ``t_imported`` (PyFlink imported), ``t_jvm`` (the
gateway JVM up, the local cluster started, the table environment made), ``t_submit`` (the
tables declared, the job planned and submitted), ``t_done`` (the last record, or the job's
end), then ``records``, ``job_state`` and the optimized plan (explained after the timing).
"""

from __future__ import annotations

import json
import os
import re
import socket
import sys
import time
import urllib.parse
import urllib.request
from pathlib import Path

T_START = time.monotonic()


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def sql_str(v) -> str:
    return "'" + str(v).replace("'", "''") + "'"


class Rest:
    """The local cluster's REST endpoint: the running job's vertices and their metrics."""

    def __init__(self, port: int):
        self.base = f"http://127.0.0.1:{port}"

    def get(self, path: str):
        with urllib.request.urlopen(self.base + path, timeout=10) as r:
            return json.loads(r.read())

    def source_vertex(self, job: str) -> dict:
        vertices = self.get(f"/jobs/{job}")["vertices"]
        return next(v for v in vertices if v["name"].startswith("Source"))

    def source_metric(self, job: str, vertex: dict) -> str:
        """The name of the source operator's numRecordsOut (operator scope: the operator's
        own count, whatever it is chained to)."""
        listed = self.get(f"/jobs/{job}/vertices/{vertex['id']}/subtasks/metrics")
        names = [m["id"] for m in listed]
        picks = [n for n in names if n.endswith(".numRecordsOut") and n.startswith("Source")]
        if not picks:
            raise RuntimeError(f"no source numRecordsOut among {sorted(names)}")
        return picks[0]

    def count(self, job: str, vertex: dict, metric: str) -> int:
        got = self.get(f"/jobs/{job}/vertices/{vertex['id']}/subtasks/metrics"
                       f"?get={urllib.parse.quote(metric)}&agg=sum")
        return int(float(got[0]["sum"])) if got else 0


def exported_rows(log_dir: Path) -> int:
    """The rows the snapshot's chunk reads exported, summed from the connector's log lines
    ("Finished exporting N records for split ...")."""
    total = 0
    for f in log_dir.glob("*.log"):
        for m in re.finditer(r"Finished exporting (\d+) records for split", f.read_text()):
            total += int(m.group(1))
    return total


def main() -> None:
    cfg = json.loads(Path(sys.argv[1]).read_text())
    os.environ["FLINK_LOG_DIR"] = cfg["log_dir"]  # not the venv's: the bench's tmp, removed
    from pyflink.common import Configuration
    from pyflink.java_gateway import get_gateway
    from pyflink.table import EnvironmentSettings, TableEnvironment

    t_imported = time.monotonic()
    port = free_port()
    p = int(cfg["parallelism"])
    rest_conf = {"rest.address": "127.0.0.1", "rest.bind-address": "127.0.0.1",
                 "rest.port": str(port), "rest.bind-port": str(port)}
    # The local cluster, in PyFlink's JVM as local execution has it, but started here: the
    # one local execution starts shuts down with its job, and the finished job's counts
    # would go with it
    jvm = get_gateway().jvm
    jconf = jvm.org.apache.flink.configuration.Configuration()
    for k, v in {**rest_conf, "taskmanager.numberOfTaskSlots": str(p),
                 # the REST endpoint fetches metrics from the task manager at most this
                 # often (default 10 s): a catch-up's end is seen within about this much
                 "metrics.fetcher.update-interval": "100"}.items():
        jconf.setString(k, v)
    cluster = jvm.org.apache.flink.runtime.minicluster.MiniCluster(
        jvm.org.apache.flink.runtime.minicluster.MiniClusterConfiguration.Builder()
        .setConfiguration(jconf).setNumTaskManagers(1).setNumSlotsPerTaskManager(p).build())
    cluster.start()
    conf = Configuration()
    for k, v in {**rest_conf, "execution.target": "remote", "parallelism.default": str(p),
                 "pipeline.jars": ";".join(Path(j).resolve().as_uri() for j in cfg["jars"]),
                 "pipeline.name": f"bench-{cfg['mode']}"}.items():
        conf.set_string(k, v)
    settings = EnvironmentSettings.new_instance().in_streaming_mode() \
        .with_configuration(conf).build()
    t_env = TableEnvironment.create(settings)
    t_jvm = time.monotonic()

    mode = cfg["mode"]
    opts = {
        "connector": "mysql-cdc",
        "hostname": cfg["host"], "port": str(cfg["port"]),
        "username": cfg["user"], "password": cfg["password"],
        "database-name": cfg["database"], "table-name": cfg["table"],
        "server-id": cfg["server_ids"],
        "server-time-zone": cfg.get("time_zone", "UTC"),
        "scan.incremental.snapshot.enabled": "true",
        "scan.incremental.snapshot.chunk.size": str(cfg["chunk_size"]),
    }
    if mode == "snapshot":
        opts["scan.startup.mode"] = "snapshot"
    else:
        opts.update({"scan.startup.mode": "specific-offset",
                     "scan.startup.specific-offset.file": cfg["file"],
                     "scan.startup.specific-offset.pos": str(cfg["pos"])})
    opts.update(cfg.get("extra_options") or {})
    with_ = ", ".join(f"{sql_str(k)} = {sql_str(v)}" for k, v in opts.items())
    cols = cfg["columns"]
    t_env.execute_sql(f"CREATE TABLE src ({cols}) WITH ({with_})")
    t_env.execute_sql(f"CREATE TABLE sink ({cols}) WITH ('connector' = 'blackhole')")
    result = t_env.execute_sql("INSERT INTO sink SELECT * FROM src")
    t_submit = time.monotonic()
    client = result.get_job_client()
    job = str(client.get_job_id())
    rest = Rest(port)
    out = {"t_start": T_START, "t_imported": t_imported, "t_jvm": t_jvm, "t_submit": t_submit,
           "parallelism": p}
    deadline = time.monotonic() + float(cfg.get("timeout", 900))
    expect = int(cfg.get("expect", 0))
    vertex = metric = None
    n = 0
    state = "?"
    while time.monotonic() < deadline:
        if mode == "catchup":
            try:
                if metric is None:  # operator metrics appear a moment after the job runs
                    vertex = rest.source_vertex(job)
                    metric = rest.source_metric(job, vertex)
                n = rest.count(job, vertex, metric)
            except (OSError, StopIteration, RuntimeError, KeyError, IndexError,
                    ValueError) as e:
                out["last_poll_error"] = f"{type(e).__name__}: {e}"[:300]
            if n >= expect:
                break
        state = str(client.get_job_status().result()).rsplit(".", 1)[-1]
        if state in ("FAILED", "CANCELED", "FINISHED"):
            break
        time.sleep(0.05)
    out["t_done"] = time.monotonic()
    out["job_state"] = state
    if mode == "snapshot":
        # a finished job's metrics leave the REST endpoint with it (and the last value
        # fetched may be behind): the rows are the connector's own count of each chunk read
        n = exported_rows(Path(cfg["log_dir"]))
    else:
        out["metric"] = metric
        try:
            client.cancel().result()
        except Exception as e:  # noqa: BLE001 - reported, the process ends anyway
            out["cancel_error"] = str(e)[:300]
    out["records"] = n
    plan = t_env.explain_sql("INSERT INTO sink SELECT * FROM src")  # after the timing
    out["plan"] = plan.split("== Optimized Execution Plan ==")[-1].strip()[:2000]
    print(json.dumps(out), flush=True)
    os._exit(0)  # the gateway JVM must not keep the process alive


if __name__ == "__main__":
    main()
