"""sparkcdc against Flink CDC itself: one MariaDB, one table, the same parallelism (issue 19).

    .venv/bin/python bench/flink.py [--server mariadb|mysql] [--rows 2000000]
        [--updates 1000000] [--rounds 3] [--parallelism 2] [--chunk-size 8096]
        [--only snapshot,catchup] [--no-write-docs] [--json PATH]

Two whole processes, each timed from its launch, on one sandbox server: MariaDB 10.11 (which
reports itself as it is: Flink CDC 3.5 accepts it), or with ``--server mysql`` MySQL 9.7,
the server Flink CDC supports (bench/servers.py):

- **sparkcdc**: a new Spark session (``local[P]``), the ``mysql-cdc`` source into Spark's
  ``noop`` sink. Snapshot: the batch read (``spark.read``, what a one-off snapshot is), its
  rows counted with an ``Observation``. Catch-up: ``readStream`` from
  ``scan.startup.mode`` ``specific-offset`` with ``trigger(availableNow=True)``, which ends at
  the binlog's end as of its start; its rows are the queries' ``numInputRows``.
- **Flink CDC**: PyFlink in its own venv (.venv-flink, scripts/setup_flink.sh) runs
  bench/flink_cdc.py: a local cluster in PyFlink's JVM, one Flink SQL INSERT from a
  ``mysql-cdc`` table into a ``blackhole`` table at parallelism P. Snapshot:
  ``scan.startup.mode`` ``snapshot``, a bounded job, timed to its end. Catch-up:
  ``specific-offset``, timed until the source operator's ``numRecordsOut`` reaches the
  expected count (polled every 50 ms through the REST endpoint), then cancelled.

Both get P server ids, the same chunk size (sparkcdc's default, which is Flink CDC's) and
each tool's own defaults otherwise. For each round the tools take turns (the order flips every
round, so the machine's drift hits both alike); the median of the rounds is reported, with
the load average at each run's start. Each run reports the whole process (launch to the last
row: interpreter, JVM, session or cluster, planning, reading), the start-up part of it (launch
to a ready Spark session, or to PyFlink's JVM with its local cluster up), the CPU-seconds
and the peak RSS and PSS of its process tree (Python, the JVM, Spark's Python workers),
sampled every 0.2 s (CPU: or, if larger, the tree's rusage at its end).
An update is two change records in both (before and after image: sparkcdc's
``update_preimage`` and ``update_postimage``, Flink's -U and +U), so the catch-up counts
2 x ``--updates`` records and reports updates/s. Results go to docs/benchmarks.md between
the ``flink`` markers (``flink-mysql`` for MySQL).
"""

from __future__ import annotations

import argparse
import datetime as dt
import json
import os
import resource
import shutil
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "bench"))

import servers
from proctree import own_cpu_s, tree_memory_mb, tree_pids
from throughput import COLUMNS_DDL, LOG, machine, publish, say

DB = "bench"
TABLE = "orders"


def markers(server: str) -> tuple[str, str]:
    name = "flink" if server == "mariadb" else f"flink-{server}"
    return f"<!-- {name}:begin -->", f"<!-- {name}:end -->"
FLINK_PY = ROOT / ".venv-flink" / "bin" / "python"
FLINK_JARS = ROOT / ".jars" / "flink"
# the table of bench/throughput.py (COLUMNS_DDL) in Flink SQL's types, as Flink CDC maps them
FLINK_COLUMNS = ("id BIGINT, a INT, b BIGINT, c STRING, d DOUBLE, e DECIMAL(10, 2), "
                 "f TIMESTAMP(0), g DATE, h TINYINT, i STRING, j TIMESTAMP_LTZ(0), "
                 "PRIMARY KEY (id) NOT ENFORCED")
SPARKCDC = "sparkcdc → Spark noop"
FLINK = "Flink CDC → blackhole"


def keep_logs(work: Path) -> Path:
    """A failed run's folder (its logs; the config with the password is gone), moved out of
    the bench's temporary folder, which is removed at the end."""
    kept = Path(tempfile.gettempdir()) / "sparkcdc-bench-flink-failed" / work.name
    shutil.rmtree(kept, ignore_errors=True)
    kept.parent.mkdir(parents=True, exist_ok=True)
    shutil.move(str(work), kept)
    return kept


def run_child(cmd: list[str], cfg: dict, work: Path, timeout: float) -> dict:
    """Launch ``cmd CONFIG``, sample its tree's memory, read its JSON line of monotonic
    stamps (the clock is system-wide) and turn them into seconds from launch."""
    work.mkdir(parents=True, exist_ok=True)
    path = work / "config.json"
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)  # it holds a password
    with os.fdopen(fd, "w") as f:
        json.dump(cfg, f)
    peak = {"rss": 0.0, "pss": 0.0}
    cpu: dict[int, float] = {}
    before = round(os.getloadavg()[0], 1)
    env = {**os.environ, "PYSPARK_PYTHON": sys.executable}
    try:
        with open(work / "stdout", "wb") as out, open(work / "stderr", "wb") as err:
            t0 = time.monotonic()
            reaped = resource.getrusage(resource.RUSAGE_CHILDREN)
            p = subprocess.Popen([*cmd, str(path)], stdout=out, stderr=err, env=env,
                                 cwd=str(work))
            stop = threading.Event()

            def sample():
                while not stop.is_set():
                    rss, pss = tree_memory_mb(p.pid)
                    peak["rss"], peak["pss"] = max(peak["rss"], rss), max(peak["pss"], pss)
                    for q in tree_pids(p.pid):
                        cpu[q] = max(cpu.get(q, 0.0), own_cpu_s(q))
                    stop.wait(0.2)

            th = threading.Thread(target=sample, daemon=True)
            th.start()
            try:
                rc = p.wait(timeout)
            except subprocess.TimeoutExpired:
                p.kill()
                p.wait()
                raise RuntimeError(f"{cmd[-1]} ran past {timeout:.0f} s") from None
            finally:
                stop.set()
                th.join()
            t_exit = time.monotonic()
            now = resource.getrusage(resource.RUSAGE_CHILDREN)  # the child and its reaped
            waited = (now.ru_utime + now.ru_stime) - (reaped.ru_utime + reaped.ru_stime)
    finally:
        path.unlink(missing_ok=True)
    lines = [x for x in (work / "stdout").read_text(errors="replace").splitlines()
             if x.startswith("{")]
    if rc != 0 or not lines:
        tail = (work / "stderr").read_text(errors="replace")[-3000:]
        raise RuntimeError(f"{Path(cmd[-1]).name} exited {rc} (logs: {keep_logs(work)}):\n"
                           f"{tail}")
    res = json.loads(lines[-1])
    return {"whole_s": round(res["t_done"] - t0, 2), "startup_s": round(res["t_jvm"] - t0, 2),
            "submit_s": round(res["t_submit"] - t0, 2),
            "work_s": round(res["t_done"] - res["t_submit"], 2),
            "exit_s": round(t_exit - t0, 2), "records": res["records"],
            "cpu_s": round(max(sum(cpu.values()), waited), 1),
            "rss_mb": round(peak["rss"]), "pss_mb": round(peak["pss"]), "load": before,
            **{k: res[k] for k in ("job_state", "batches") if k in res}}


# -- the bench -------------------------------------------------------------------------------

class Bench:
    def __init__(self, args):
        self.args = args
        self.tmp = Path(tempfile.mkdtemp(prefix="sparkcdc-bench-flink-"))
        self.results: dict = {}
        self._ids = 5400
        self._runs = 0

    def start(self) -> None:
        # Flink CDC is told the server's zone (server-time-zone)
        self.sb = servers.sandbox(self.args.server, "bench-flink", base_dir=self.tmp,
                                  time_zone="+00:00")
        self.sb.start()
        self.version = version = servers.version(self.sb)
        self.sb.execute(f"CREATE DATABASE {DB}",
                        f"CREATE TABLE {DB}.{TABLE} {COLUMNS_DDL}")
        t0 = time.monotonic()
        servers.fill(self.sb, TABLE, self.args.rows, DB)
        say(f"sandbox {self.args.server} {version} on port {self.sb.info.port}; "
            f"{self.args.rows:,} rows loaded in {time.monotonic() - t0:.1f} s")

    def stop(self) -> None:
        self.sb.stop()
        shutil.rmtree(self.tmp, ignore_errors=True)

    def server_ids(self) -> str:
        """A fresh range of P ids for each run (a replica id still registered from the run
        before is never in the way)."""
        p = self.args.parallelism
        self._ids += 10
        return f"{self._ids}-{self._ids + p - 1}"

    def work(self, what: str) -> Path:
        self._runs += 1
        return self.tmp / f"{self._runs:03d}-{what}"

    # -- the two tools, one run each ---------------------------------------------------------

    def sparkcdc(self, mode: str, expect: int, start: tuple[str, int] | None = None) -> dict:
        i = self.sb.info
        work = self.work(f"sparkcdc-{mode}")
        opts = {"hostname": i.host, "port": str(i.port), "username": i.cdc_user,
                "password": i.cdc_password, "database-name": DB,
                "table-name": f"{DB}\\.{TABLE}", "server-id": self.server_ids(),
                "scan.incremental.snapshot.chunk.size": str(self.args.chunk_size)}
        if start is not None:
            opts.update({"scan.startup.mode": "specific-offset",
                         "scan.startup.specific-offset.file": start[0],
                         "scan.startup.specific-offset.pos": str(start[1])})
        cfg = {"mode": mode, "options": opts, "parallelism": self.args.parallelism,
               "checkpoint": str(work / "ckpt")}
        res = run_child([sys.executable, __file__, "--sparkcdc-child"], cfg, work,
                        self.args.timeout)
        if res["records"] != expect:
            raise RuntimeError(f"sparkcdc {mode}: {res['records']:,} rows, {expect:,} expected")
        shutil.rmtree(work, ignore_errors=True)
        return res

    def flink(self, mode: str, expect: int, start: tuple[str, int] | None = None) -> dict:
        i = self.sb.info
        work = self.work(f"flink-{mode}")
        cfg = {"host": i.host, "port": i.port, "user": i.cdc_user,
               "password": i.cdc_password, "database": DB, "table": TABLE,
               "columns": FLINK_COLUMNS, "parallelism": self.args.parallelism,
               "chunk_size": self.args.chunk_size, "server_ids": self.server_ids(),
               "jars": [str(j) for j in sorted(FLINK_JARS.glob("*.jar"))],
               "mode": mode, "expect": expect, "timeout": self.args.timeout,
               "log_dir": str(work / "log"), "time_zone": "UTC",
               "extra_options": dict(kv.split("=", 1) for kv in self.args.flink_option)}
        if start is not None:
            cfg["file"], cfg["pos"] = start
        res = run_child([str(FLINK_PY), str(ROOT / "bench" / "flink_cdc.py")], cfg, work,
                        self.args.timeout + 120)
        if res["records"] != expect or res.get("job_state") == "FAILED":
            kept = keep_logs(work)
            raise RuntimeError(f"Flink CDC {mode}: {res['records']:,} records "
                               f"({res.get('job_state')}), {expect:,} expected; its log: "
                               f"{kept}")
        shutil.rmtree(work, ignore_errors=True)
        return res

    def rounds(self, section: str, runs: dict) -> None:
        res = self.results.setdefault(section, {SPARKCDC: [], FLINK: []})
        for r in range(self.args.rounds):
            order = list(runs) if r % 2 == 0 else list(reversed(runs))
            for name in order:
                try:
                    x = runs[name]()
                except Exception as e:  # noqa: BLE001 - a tool that fails is reported, not hidden
                    say(f"{section} / {name} round {r + 1}: FAILED {type(e).__name__}: "
                        f"{str(e)[:1500]}")
                    res[name].append({"failed": f"{type(e).__name__}: {str(e)[:300]}"})
                    continue
                res[name].append(x)
                say(f"{section} / {name} round {r + 1}: {x['records']:,} records, whole "
                    f"{x['whole_s']} s (start-up {x['startup_s']} s, after submit "
                    f"{x['work_s']} s), {x['cpu_s']} CPU-s, peak RSS {x['rss_mb']:,} MB, PSS {x['pss_mb']:,} MB")

    def position(self) -> tuple[str, int]:
        return servers.binlog_position(self.sb)

    def snapshot(self) -> None:
        n = self.args.rows
        self.rounds("snapshot", {SPARKCDC: lambda: self.sparkcdc("snapshot", n),
                                 FLINK: lambda: self.flink("snapshot", n)})

    def catchup(self) -> None:
        m = self.args.updates
        if m > self.args.rows:
            raise SystemExit("--updates must not exceed --rows (one update per row)")
        start = self.position()
        t0 = time.monotonic()
        stmts = [f"UPDATE {TABLE} SET a = a + 1, d = d + 1 WHERE id >= {lo} AND "
                 f"id < {min(lo + 10_000, m + 1)}" for lo in range(1, m + 1, 10_000)]
        self.sb.execute(*stmts, database=DB)
        say(f"catch-up: {m:,} row updates in 10,000-row transactions written in "
            f"{time.monotonic() - t0:.1f} s, from {start[0]}:{start[1]} to "
            f"{':'.join(map(str, self.position()))}")
        self.rounds("catchup", {SPARKCDC: lambda: self.sparkcdc("catchup", 2 * m, start),
                                FLINK: lambda: self.flink("catchup", 2 * m, start)})


# -- the report ----------------------------------------------------------------------------------

def _ok(runs: list[dict]) -> list[dict]:
    return [r for r in runs if "failed" not in r]


def _med(runs: list[dict], key: str) -> float:
    return statistics.median(r[key] for r in runs)


def flink_versions() -> dict:
    out = {}
    try:
        code = "import pyflink.version as v; print(v.__version__)"
        v = subprocess.run([str(FLINK_PY), "-c", code], check=False, capture_output=True,
                           text=True, timeout=60)
        out["PyFlink"] = v.stdout.strip() or "?"
    except (OSError, subprocess.TimeoutExpired):
        out["PyFlink"] = "absent"
    jars = sorted(j.name for j in FLINK_JARS.glob("*.jar"))
    out["Flink CDC connector"] = ", ".join(jars) or "absent"
    return out


def render(b: Bench, started: str) -> str:
    a, m = b.args, machine()
    versions = {**m["versions"], **flink_versions()}
    begin, end = markers(a.server)
    title = ("## Against Flink CDC itself (issue 19)" if a.server == "mariadb" else
             f"## Against Flink CDC itself, on {b.version} (issue 33)")
    out = [begin, "", title, "",
           f"`bench/flink.py --server {a.server}`, run {started}: sparkcdc's `mysql-cdc` source into "
           f"Spark's `noop` sink (`local[{a.parallelism}]`) against Flink CDC's `mysql-cdc` "
           f"connector under PyFlink into a `blackhole` table (a local cluster, parallelism "
           f"{a.parallelism}, no Python on the records' path), on one sandbox server "
           f"({b.version}, as it reports itself) and one table of {a.rows:,} rows and 11 "
           "columns; chunk size "
           f"{a.chunk_size:,} and {a.parallelism} server ids for both. Each run is a whole "
           "process timed from its launch to its last record: snapshot = the batch read "
           "(sparkcdc) and `scan.startup.mode` `snapshot`, a bounded job (Flink CDC); "
           f"catch-up = {a.updates:,} row updates in 10,000-row transactions read from "
           "a `specific-offset` (sparkcdc: an `availableNow` stream; Flink CDC: until its "
           "source has emitted every -U/+U record, seen through the REST metrics, polled every "
           "50 ms). *start-up* is launch to a ready Spark session or to PyFlink's JVM with its "
           "local cluster; *after start-up* rates leave it out. Peak RSS and PSS are of the "
           f"whole process tree (Python, the JVM, Spark's Python workers). {a.rounds} rounds, "
           "the tools' order flipped each round, medians; *load* is the 1-minute load "
           f"average at each run's start. Machine: {m['cpu']}, {m['cores']} cores, "
           f"{m['memory_gb']} GB; " + ", ".join(f"{k} {v}" for k, v in versions.items()) + ".",
           ""]
    units = {"snapshot": ("rows", a.rows, "Snapshot"),
             "catchup": ("updates", a.updates, "Binlog catch-up")}
    for section, runs in b.results.items():
        unit, count, title = units[section]
        out += [f"### {title} ({count:,} {unit})", "",
                (f"| tool | {unit}/s, whole process | {unit}/s after start-up | whole s | "
                 "start-up s | CPU-s | peak RSS MB | peak PSS MB | load |"),
                "|---|---:|---:|---|---|---:|---:|---:|---|"]
        rates = {}
        for name, rs in runs.items():
            ok = _ok(rs)
            if not ok:
                out.append(f"| {name} | failed: {rs[0]['failed'] if rs else 'not run'} "
                           "| | | | | | | |")
                continue
            whole, startup = _med(ok, "whole_s"), _med(ok, "startup_s")
            rates[name] = (count / whole, count / (whole - startup))
            out.append(f"| {name} | {rates[name][0]:,.0f} | {rates[name][1]:,.0f} | "
                       f"{', '.join(str(r['whole_s']) for r in ok)} | "
                       f"{', '.join(str(r['startup_s']) for r in ok)} | "
                       f"{_med(ok, 'cpu_s'):.1f} | {max(r['rss_mb'] for r in ok):,} | {max(r['pss_mb'] for r in ok):,} | "
                       f"{', '.join(str(r['load']) for r in ok)} |")
        if len(rates) == 2:
            s, f = rates[SPARKCDC], rates[FLINK]
            out += ["", (f"sparkcdc / Flink CDC: {s[0] / f[0]:.2f}x whole process, "
                         f"{s[1] / f[1]:.2f}x after start-up.")]
        out.append("")
    out += ["Raw log of this run:", "", "```", *LOG[-40:], "```", "", end]
    return "\n".join(out)


# -- sparkcdc's side, as a child process ---------------------------------------------------------

def sparkcdc_child(config: str) -> None:
    """A new Spark session, the source into the noop sink; prints the stamps as
    bench/flink_cdc.py does."""
    t_start = time.monotonic()
    cfg = json.loads(Path(config).read_text())
    from pyspark.sql import Observation, SparkSession
    from pyspark.sql import functions as F

    import sparkcdc

    p = cfg["parallelism"]
    spark = (SparkSession.builder.master(f"local[{p}]").appName("bench-flink-sparkcdc")
             .config("spark.ui.enabled", "false")
             .config("spark.sql.shuffle.partitions", str(p)).getOrCreate())
    spark.sparkContext.setLogLevel("ERROR")
    sparkcdc.register(spark)
    t_jvm = time.monotonic()
    out = {"t_start": t_start, "t_jvm": t_jvm, "t_submit": t_jvm}
    if cfg["mode"] == "snapshot":
        obs = Observation("rows")
        (spark.read.format("mysql-cdc").options(**cfg["options"]).load()
         .observe(obs, F.count(F.lit(1)).alias("n"))
         .write.format("noop").mode("overwrite").save())
        out["t_done"] = time.monotonic()
        out["records"] = int(obs.get["n"])
    else:
        q = (spark.readStream.format("mysql-cdc").options(**cfg["options"]).load()
             .writeStream.format("noop").option("checkpointLocation", cfg["checkpoint"])
             .trigger(availableNow=True).start())
        q.awaitTermination()
        out["t_done"] = time.monotonic()
        if q.exception() is not None:
            raise RuntimeError(str(q.exception()))
        out["records"] = sum(x["numInputRows"] for x in q.recentProgress)
        out["batches"] = len(q.recentProgress)
    print(json.dumps(out), flush=True)
    spark.stop()


def main() -> None:
    if len(sys.argv) == 3 and sys.argv[1] == "--sparkcdc-child":
        sparkcdc_child(sys.argv[2])
        return
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--server", choices=servers.SERVERS, default="mariadb")
    p.add_argument("--rows", type=int, default=2_000_000)
    p.add_argument("--updates", type=int, default=1_000_000)
    p.add_argument("--rounds", type=int, default=3)
    p.add_argument("--parallelism", type=int, default=2)
    p.add_argument("--chunk-size", type=int, default=8096,
                   help="scan.incremental.snapshot.chunk.size for both (the default of both)")
    p.add_argument("--only", default="snapshot,catchup")
    p.add_argument("--timeout", type=float, default=900, help="seconds per run")
    p.add_argument("--flink-option", action="append", default=[], metavar="KEY=VALUE",
                   help="a further option of Flink CDC's mysql-cdc table (repeatable)")
    p.add_argument("--no-write-docs", action="store_true")
    p.add_argument("--json", help="also write the raw results here")
    args = p.parse_args()
    if not FLINK_PY.exists() or not any(FLINK_JARS.glob("*.jar")):
        raise SystemExit("bench/flink.py: PyFlink or Flink CDC's jars are missing: run "
                         "scripts/setup_flink.sh (make bench does)")
    started = dt.datetime.now().strftime("%Y-%m-%d %H:%M")
    b = Bench(args)
    b.start()
    try:
        for section in args.only.split(","):
            getattr(b, section.strip())()
    finally:
        b.stop()
    publish(render(b, started), b.results, args.json, *markers(args.server),
            not args.no_write_docs)


if __name__ == "__main__":
    main()
