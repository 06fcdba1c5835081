"""A long run under steady writes: does the pipeline's memory stay flat and its lag bounded?

    flock /work/notes/spark.lock .venv/bin/python bench/soak.py [--minutes 30]
        [--rate 500] [--rows 200000] [--sample-every 10] [--pipeline-option KEY=VALUE]
        [--no-write-docs] [--json out.json] [--keep]

A sandbox MariaDB (bench/servers.py) with a table of ``--rows`` rows (bench/throughput.py's
11 columns) and three small tables (bench/soak_writer.py); then ``sparkcdc run
pipeline.yaml --no-progress --metrics-port N`` as a user runs it (continuous, a whole
process, into Delta on local disk) and, from the same moment, a writer at ``--rate`` row
changes a second in small transactions for ``--minutes``.

Every ``--sample-every`` seconds: the sparkcdc process tree's RSS and PSS, split into the
JVM, the CLI and Spark's Python processes (bench/proctree.py), its CPU-seconds, the load,
and the lag, read three ways:

- *seconds*: now minus the write time of the newest heartbeat row found in the Delta target
  (the writer inserts one a second; read with delta-rs), what a reader of the target sees;
  sampled in step with the trigger it shows one phase of the batches' sawtooth, so the run
  also takes each heartbeat's own latency afterwards: its write to the commit that brought
  it into the target (the heartbeat table's Delta log, bench/soak_check.py);
- *binlog bytes*: what ``sparkcdc status`` shows: from the position of the last committed
  micro-batch (Spark's offset and commit logs in the checkpoint) to the server's position
  now (``status.table_statuses``, in this process);
- *emit lag*: ``sparkcdc_table_emit_lag_seconds`` from the run's metrics page (the commit of
  the newest change of the table's last batch to its write; 1 s resolution).

Every minute the JVM's heap from ``jstat -gc`` (heap used, old generation). At the end: the
writer stops, a last heartbeat is written, the bench waits until the target holds it and
``status`` shows no lag, stops the run with SIGTERM, and compares every table's Delta
target with its source row for row, all columns (bench/soak_check.py). Figures and the
section of docs/benchmarks.md (between the ``soak`` markers): bench/soak_report.py.
"""

from __future__ import annotations

import argparse
import datetime as dt
import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
import urllib.request
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "bench"))

import servers
import soak_check
import soak_report
from proctree import TICK, _rss_pss_kb, kind, tree_pids
from soak_writer import Writer, fill_small
from throughput import COLUMNS_DDL, machine, publish, say

from sparkcdc.testing.mariadb import free_port

DB = "bench"
BEGIN, END = "<!-- soak:begin -->", "<!-- soak:end -->"


def cpu_with_children(pid: int) -> float:
    """utime + stime of a process and of its children it waited for (cutime, cstime).
    Summed over the live processes of a tree this counts the workers that came and went
    (the JVM and the warm interpreter wait for theirs), whenever the tree is sampled."""
    try:
        with open(f"/proc/{pid}/stat") as f:
            x = f.read().rsplit(")", 1)[1].split()
        return sum(int(v) for v in x[11:15]) / TICK
    except (OSError, IndexError, ValueError):
        return 0.0


class Soak:
    def __init__(self, args):
        self.args = args
        self.tmp = Path(tempfile.mkdtemp(prefix="sparkcdc-bench-soak-"))
        self.work = self.tmp / "work"
        self.work.mkdir()
        self.samples: list[dict] = []
        self.cpu_seen = 0.0
        self.proc: subprocess.Popen | None = None
        self.jvm_pid: int | None = None
        self.heart = None

    # -- setup ------------------------------------------------------------------------------

    def start_server(self) -> None:
        self.sb = servers.sandbox("mariadb", "bench-soak", base_dir=self.tmp)
        self.sb.start()
        self.sb.execute(f"CREATE DATABASE {DB}")
        self.sb.execute(f"CREATE TABLE orders {COLUMNS_DDL}", database=DB)
        t0 = time.monotonic()
        servers.fill(self.sb, "orders", self.args.rows, DB)
        fill_small(self.sb, DB)
        self.version = servers.version(self.sb)
        say(f"sandbox {self.version} on port {self.sb.info.port}: {self.args.rows:,} rows "
            f"loaded in {time.monotonic() - t0:.1f} s")

    def pipeline_yaml(self) -> Path:
        i = self.sb.info
        opts = dict(self.args.pipeline_option)
        text = ("source:\n  type: mysql\n"
                f"  hostname: {i.host}\n  port: {i.port}\n  username: {i.cdc_user}\n"
                "  password: ${BENCH_SOURCE_PASSWORD}\n"
                f"  tables: {DB}.\\.*\n"
                f"sink:\n  type: delta\n  path: {self.work}/lake\n"
                f"pipeline:\n  name: soak\n  checkpoint.location: {self.work}/ckpt\n"
                + "".join(f"  {k}: {v}\n" for k, v in opts.items()))
        path = self.work / "pipeline.yaml"
        path.write_text(text)
        return path

    def connect(self):
        import pymysql

        return pymysql.connect(unix_socket=self.sb.info.socket, user="root", database=DB,
                               autocommit=False, charset="utf8mb4")

    # -- sampling ---------------------------------------------------------------------------

    def sample(self, t0: float, writer: Writer) -> dict:
        root = self.proc.pid
        parts = {"cli": 0.0, "jvm": 0.0, "py": 0.0}
        rss = cpu = 0.0
        py_each: list[float] = []  # each Python process's PSS: which one grows, or how many
        for pid in tree_pids(root):
            r, p = _rss_pss_kb(pid)
            k = kind(pid, root)
            if k == "jvm" and self.jvm_pid is None:
                self.jvm_pid = pid
            if k == "py":
                py_each.append(p / 1024)
            parts[k] += p / 1024
            rss += r / 1024
            cpu += cpu_with_children(pid)
        self.cpu_seen = max(self.cpu_seen, cpu)  # a subtree gone unwaited would lower it
        s = {"t": round(time.monotonic() - t0, 1), "rss": round(rss, 1),
             "pss": round(sum(parts.values()), 1), "pss_cli": round(parts["cli"], 1),
             "pss_jvm": round(parts["jvm"], 1), "pss_py": round(parts["py"], 1),
             "py_procs": len(py_each), "py_max": round(max(py_each, default=0.0), 1),
             "cpu_s": round(self.cpu_seen, 2), "load1": os.getloadavg()[0],
             "changes": writer.counts.changes, "lag_s": self.heartbeat_lag(),
             "lag_bytes": self.status_lag()}
        s.update(self.metrics())
        return s

    def heartbeat_lag(self) -> float | None:
        """Now minus the newest heartbeat's write time in the target (delta-rs)."""
        newest = self.newest_heartbeat()
        return None if newest is None else round(time.time() - newest / 1e6, 2)

    def newest_heartbeat(self) -> int | None:
        from deltalake import DeltaTable, QueryBuilder

        path = self.work / "lake" / DB / "heartbeat"
        try:
            if self.heart is None:
                if not (path / "_delta_log").exists():
                    return None
                self.heart = DeltaTable(str(path))
            else:
                self.heart.update_incremental()
            got = QueryBuilder().register("h", self.heart).execute(
                "SELECT MAX(sent_us) AS m FROM h").read_all()
        except Exception as e:  # noqa: BLE001 - a sample goes without, the log says why
            say(f"heartbeat not read: {e}")
            return None
        v = got.column("m")[0].as_py()
        return int(v) if v is not None else None

    def status_lag(self) -> int | None:
        """The largest binlog lag of any table, as ``sparkcdc status`` computes it."""
        from sparkcdc.pipeline.commands.status import table_statuses

        file, pos = servers.binlog_position(self.sb)
        try:
            st = table_statuses(self.defn, {"file": file, "pos": pos})
        except Exception as e:  # noqa: BLE001 - the checkpoint may be mid-write
            say(f"status not read: {e}")
            return None
        lags = [x.lag_bytes for x in st if x.lag_bytes is not None]
        return max(lags) if lags and len(lags) == len(st) else None

    def metrics(self) -> dict:
        try:
            with urllib.request.urlopen(f"http://127.0.0.1:{self.port}/metrics",
                                        timeout=5) as r:
                page = r.read().decode()
        except OSError:
            return {}
        out: dict = {}
        for line in page.splitlines():
            if line.startswith("sparkcdc_table_emit_lag_seconds{") and 'table="bench.orders"' \
                    in line:
                out["emit_lag_s"] = float(line.rsplit(" ", 1)[1])
            elif line.startswith("sparkcdc_table_rows_total{") and 'table="bench.orders"' \
                    in line:
                out["rows_applied"] = int(float(line.rsplit(" ", 1)[1]))
            elif line.startswith("sparkcdc_batch_seconds{"):
                out["batch_s"] = float(line.rsplit(" ", 1)[1])
            elif line.startswith("sparkcdc_table_lag_bytes{") and 'table="bench.orders"' \
                    in line:
                out["metrics_lag_bytes"] = int(float(line.rsplit(" ", 1)[1]))
        return out

    def jstat(self) -> dict:
        """The JVM's heap now (MB): used (survivors, eden, old) and the old generation."""
        if self.jvm_pid is None:
            return {}
        try:
            out = subprocess.run(["jstat", "-gc", str(self.jvm_pid)], check=False,
                                 capture_output=True,
                                 text=True, timeout=30).stdout.split("\n")
            row = dict(zip(out[0].split(), out[1].split()))
            used = sum(float(row[k]) for k in ("S0U", "S1U", "EU", "OU")) / 1024
            return {"jvm_heap_mb": round(used, 1), "jvm_old_mb": round(float(row["OU"]) / 1024, 1),
                    "jvm_full_gcs": int(row.get("FGC", 0))}
        except (OSError, subprocess.SubprocessError, IndexError, KeyError, ValueError):
            return {}

    # -- the run ----------------------------------------------------------------------------

    def run(self) -> dict:
        a = self.args
        yaml = self.pipeline_yaml()
        os.environ["BENCH_SOURCE_PASSWORD"] = self.sb.info.cdc_password
        from sparkcdc.pipeline import load_pipeline

        self.defn = load_pipeline(str(yaml))
        self.port = free_port()
        cmd = [str(ROOT / ".venv" / "bin" / "sparkcdc"), "run", str(yaml), "--no-progress",
               "--metrics-port", str(self.port)]
        log = open(self.work / "sparkcdc.log", "ab")  # noqa: SIM115 - open for the run
        writer = Writer(self.connect, a.rows, a.rate)
        t0 = time.monotonic()
        self.proc = subprocess.Popen(cmd, stdout=log, stderr=subprocess.STDOUT)
        writer.start()
        say(f"sparkcdc run (pid {self.proc.pid}) and the writer ({a.rate:,} changes/s) started")
        writes_end = a.minutes * 60
        next_jstat = 60.0
        while time.monotonic() - t0 < writes_end:
            time.sleep(max(0.0, a.sample_every - (time.monotonic() - t0) % a.sample_every))
            self.check_alive(writer)
            s = self.sample(t0, writer)
            if s["t"] >= next_jstat:
                s.update(self.jstat())
                next_jstat += 60
            self.samples.append(s)
            if len(self.samples) % 6 == 0:
                say(f"t={s['t'] / 60:.1f} min: PSS {s['pss']:,.0f} MB (JVM {s['pss_jvm']:,.0f}, "
                    f"CLI {s['pss_cli']:,.0f}, py {s['pss_py']:,.0f} in {s['py_procs']}, largest "
                    f"{s['py_max']:,.0f}), RSS {s['rss']:,.0f} MB, "
                    f"CPU {s['cpu_s']:,.0f} s, lag {s['lag_s']} s / {s['lag_bytes']} B, "
                    f"heap {s.get('jvm_heap_mb')} MB, {s['changes']:,} changes")
        writer.stop()
        writes_s = time.monotonic() - t0
        self.check_alive(writer, writing=False)
        say(f"writer stopped at {writes_s / 60:.1f} min: {writer.counts.changes:,} changes")
        caught = self.wait_caught_up(t0, writer)
        histogram = self.class_histogram()
        stop_s, rc, usage_cpu = self.terminate()
        log.close()
        markers = soak_check.heartbeat_latencies(self.work / "lake" / DB / "heartbeat")
        try:
            check = soak_check.compare(self.sb, self.work / "lake", DB)
        except Exception as e:  # noqa: BLE001 - the run's samples are kept all the same
            check = {"equal": False, "summary": f"not compared: {type(e).__name__}: {e}"}
        say(f"target against source: {check['summary']}")
        fig = soak_report.summarize(self.samples, writes_s, caught, markers)
        fig["cpu"]["whole_run_cpu_s"] = max(usage_cpu, self.cpu_seen)
        return {"writes_s": writes_s, "caught": caught, "stop_s": stop_s, "rc": rc,
                "check": check, "fig": fig, "writer": vars(writer.counts),
                "histogram": histogram, "markers": markers}

    def check_alive(self, writer: Writer, writing: bool = True) -> None:
        if self.proc.poll() is not None:
            tail = (self.work / "sparkcdc.log").read_text(errors="replace")[-3000:]
            raise RuntimeError(f"sparkcdc run exited {self.proc.returncode}:\n{tail}")
        if writer.counts.errors:
            raise RuntimeError(f"the writer failed: {writer.counts.errors[0]}")
        if writing and not writer.is_alive():
            raise RuntimeError("the writer stopped")

    def wait_caught_up(self, t0: float, writer: Writer) -> dict:
        """A last heartbeat, then wait until the target holds it and status shows no lag."""
        with self.connect() as conn, conn.cursor() as cur:
            last_us = int(time.time() * 1e6)
            cur.execute("INSERT INTO heartbeat (sent_us) VALUES (%s)", (last_us,))
            conn.commit()
        writer.counts.changes += 1
        t_stop = time.monotonic()
        still: tuple[int | None, float] = (None, t_stop)  # a lag that stopped moving, since
        while True:
            newest = self.newest_heartbeat()
            lag = self.status_lag()
            if lag != still[0]:
                still = (lag, time.monotonic())
            if newest is not None and newest >= last_us and (
                    lag == 0 or time.monotonic() - still[1] > 30):
                if lag != 0:
                    say(f"the last heartbeat arrived; status keeps {lag} B of lag (no batch "
                        "for them in 30 s)")
                break
            if time.monotonic() - t_stop > self.args.catchup_timeout:
                raise RuntimeError(f"not caught up {self.args.catchup_timeout} s after the "
                                   f"writes stopped (heartbeat {newest}, lag {lag} B)")
            self.check_alive(writer, writing=False)
            time.sleep(0.5)
        s = self.sample(t0, writer)
        s["catchup_s"] = round(time.monotonic() - t_stop, 1)
        self.samples.append(s)
        say(f"caught up {s['catchup_s']} s after the writer stopped")
        return s

    def class_histogram(self) -> list[str]:
        """The JVM's largest classes by bytes (``jcmd GC.class_histogram``; a full GC),
        taken after the writes, to see what the heap holds."""
        if self.jvm_pid is None:
            return []
        try:
            out = subprocess.run(["jcmd", str(self.jvm_pid), "GC.class_histogram"],
                                 check=False, capture_output=True, text=True, timeout=60).stdout
        except (OSError, subprocess.SubprocessError):
            return []
        return out.splitlines()[:20]

    def terminate(self) -> tuple[float, int, float]:
        """SIGTERM, as a user stops a run; its exit and the CPU of every process it waited
        for (rusage)."""
        t = time.monotonic()
        self.proc.send_signal(signal.SIGTERM)
        deadline = t + self.args.stop_timeout
        while time.monotonic() < deadline:
            pid, status, usage = os.wait4(self.proc.pid, os.WNOHANG)
            if pid:
                self.proc.returncode = os.waitstatus_to_exitcode(status)
                secs = time.monotonic() - t
                say(f"sparkcdc run stopped by SIGTERM in {secs:.1f} s, exit "
                    f"{self.proc.returncode}")
                return secs, self.proc.returncode, usage.ru_utime + usage.ru_stime
            time.sleep(0.2)
        self.proc.kill()
        self.proc.wait()
        raise RuntimeError(f"sparkcdc run did not stop within {self.args.stop_timeout} s "
                           "of SIGTERM")

    def stop(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait()
        self.sb.stop()
        if self.args.keep:
            say(f"kept {self.tmp}")
        else:
            shutil.rmtree(self.tmp, ignore_errors=True)


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--minutes", type=float, default=30.0, help="how long the writer writes")
    p.add_argument("--rate", type=int, default=500, help="row changes per second")
    p.add_argument("--rows", type=int, default=200_000)
    p.add_argument("--sample-every", type=float, default=10.0)
    p.add_argument("--pipeline-option", action="append", default=[],
                   help="KEY=VALUE added to the pipeline block (repeatable)")
    p.add_argument("--catchup-timeout", type=float, default=600.0)
    p.add_argument("--stop-timeout", type=float, default=180.0)
    p.add_argument("--keep", action="store_true", help="keep the sandbox's and run's folder")
    p.add_argument("--no-write-docs", action="store_true")
    p.add_argument("--json", help="also write the samples and figures here")
    p.add_argument("--render-from", help="no run: the section from a run's --json file")
    args = p.parse_args()
    args.pipeline_option = [tuple(x.split("=", 1)) for x in args.pipeline_option]
    if args.render_from:  # a run's JSON rendered again (after a change to the report)
        raw = json.loads(Path(args.render_from).read_text())
        # the memory figures again from the samples (the report may ask more of them); the
        # CPU's end point, the catch-up, is not among the samples: kept as it was
        fresh = soak_report.summarize(raw["samples"], raw["meta"]["writes_s"],
                                      raw["samples"][-1], raw.get("markers"))
        raw["figures"].update({k: fresh[k] for k in ("pss", "rss", "pss_jvm", "pss_cli",
                                                     "pss_py", "py_procs") if k in fresh})
        publish(soak_report.render(raw["meta"], raw["figures"], raw["samples"], BEGIN, END),
                raw, None, BEGIN, END, not args.no_write_docs)
        return
    started = dt.datetime.now(dt.timezone.utc).strftime("%Y-%m-%d %H:%M")
    b = Soak(args)
    b.start_server()
    try:
        res = b.run()
    finally:
        b.stop()
    opts = dict(args.pipeline_option)
    meta = {"machine": machine(), "started": started, "server": b.version,
            "command": "bench/soak.py " + " ".join(sys.argv[1:]), "rows": args.rows,
            "rate": args.rate, "minutes": args.minutes, "every": args.sample_every,
            "trigger": opts.get("trigger.interval", "5s (the default)"),
            "writer": res["writer"], "writes_s": res["writes_s"],
            "catchup_s": res["caught"]["catchup_s"], "stop_s": res["stop_s"], "rc": res["rc"],
            "check": res["check"]["summary"]}
    raw = {"meta": meta, "figures": res["fig"], "samples": b.samples, "check": res["check"],
           "histogram": res["histogram"], "markers": res["markers"]}
    if args.json:  # first, so a report that fails leaves the run's samples
        Path(args.json).write_text(json.dumps(raw, indent=1, default=str))
    publish(soak_report.render(meta, res["fig"], b.samples, BEGIN, END), raw, None, BEGIN,
            END, not args.no_write_docs)
    if not res["check"]["equal"] or res["rc"] != 0:
        raise SystemExit(1)


if __name__ == "__main__":
    main()
