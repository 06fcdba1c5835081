"""A snapshot into Delta written by the tasks that read it, beside the same snapshot through
the driver, and the source alone (docs/benchmarks.md, "Writes from the tasks").

    .venv/bin/python bench/task_writes.py [--rows 2000000] [--rounds 3]

Each round runs, in turn, on a fresh checkpoint and target, as a user runs it
(``sparkcdc run pipeline.yaml --until-caught-up``, whole process):

* ``driver``: ``write.snapshot-from-tasks: false``, every row collected to the driver;
* ``tasks``: the default, each chunk's rows written as files by the task that read it;
* the ``mysql-cdc`` source alone into Spark's ``noop`` sink (bench/pipeline.py's).

Reported per mode, medians over the rounds: wall seconds, rows per second, CPU-seconds of
the whole process tree (the CLI, its JVM and Python workers, each sampled while it lives)
and rows
per CPU-second, peak PSS, and the bytes the tasks sent the driver per row (Spark's event
log: each task's ``Result Size``). The target is checked against the source each time.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "bench"))

from proctree import PeakSampler, _children
from throughput import COLUMNS_DDL, FILL

from sparkcdc.testing.mariadb import MariaDBSandbox, ServerSettings

DB, TABLE = "bench", "orders"


TICK = os.sysconf("SC_CLK_TCK")


def _tree(root: int) -> list[int]:
    seen, todo = [], [root]
    while todo:
        p = todo.pop()
        seen.append(p)
        todo += _children(p)
    return seen


def _cpu(pid: int) -> float:
    """utime + stime of one process, seconds (0 when gone)."""
    try:
        with open(f"/proc/{pid}/stat") as f:
            fields = f.read().rsplit(")", 1)[1].split()
        return (int(fields[11]) + int(fields[12])) / TICK
    except (OSError, IndexError, ValueError):
        return 0.0


def run(cmd: list[str], env: dict, log: Path) -> dict:
    """Wall seconds, CPU-seconds of the whole process tree (each process's own CPU time,
    sampled every 0.1 s while it lives: the CLI, the JVM, every Python worker), peak PSS
    (MB) and exit code."""
    cpu: dict[int, float] = {}
    with open(log, "ab") as out:
        t0 = time.monotonic()
        p = subprocess.Popen(cmd, env=env, stdout=out, stderr=subprocess.STDOUT)
        with PeakSampler(p.pid) as s:
            while p.poll() is None:
                for pid in _tree(p.pid):
                    cpu[pid] = max(cpu.get(pid, 0.0), _cpu(pid))
                time.sleep(0.1)
        secs = time.monotonic() - t0
    return {"seconds": secs, "cpu": sum(cpu.values()), "pss": s.peak_pss_mb, "rc": p.returncode}


def result_bytes(events: Path) -> int:
    """The bytes every task sent the driver (``Result Size``), from Spark's event logs."""
    total = 0
    for f in events.rglob("*"):
        if not f.is_file():
            continue
        for line in f.read_text(errors="replace").splitlines():
            if '"SparkListenerTaskEnd"' in line:
                e = json.loads(line)
                total += int((e.get("Task Metrics") or {}).get("Result Size") or 0)
    return total


def pipeline(sb, work: Path, from_tasks: bool) -> Path:
    i = sb.info
    events = work / "events"
    events.mkdir()
    text = (f"source:\n  type: mysql\n  hostname: {i.host}\n  port: {i.port}\n"
            f"  username: {i.cdc_user}\n  password: ${{BENCH_PW}}\n  tables: {DB}.{TABLE}\n"
            f"sink:\n  type: delta\n  path: {work}/lake\n"
            f"pipeline:\n  name: bench\n  checkpoint.location: {work}/ckpt\n"
            f"  write.snapshot-from-tasks: {str(from_tasks).lower()}\n"
            f"  spark:\n    spark.eventLog.enabled: 'true'\n"
            f"    spark.eventLog.dir: {events}\n    spark.eventLog.compress: 'false'\n"
            f"    spark.eventLog.rolling.enabled: 'false'\n")
    path = work / "p.yaml"
    path.write_text(text)
    return path


def check(work: Path, rows: int) -> None:
    import deltalake

    from sparkcdc.sinks.delta.sink import read_table

    t = read_table(deltalake.DeltaTable(str(work / "lake" / DB / TABLE))).select(["id"])
    ids = t.column("id")
    if t.num_rows != rows or len(set(ids.to_pylist())) != rows:
        raise SystemExit(f"target has {t.num_rows} rows, the source {rows}")


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--rows", type=int, default=2_000_000)
    ap.add_argument("--rounds", type=int, default=3)
    args = ap.parse_args()
    tmp = Path(tempfile.mkdtemp(prefix="sparkcdc-bench-tasks-"))
    sb = MariaDBSandbox(ServerSettings(extra_args=("--innodb-buffer-pool-size=3G",)),
                        name="bench-tasks", base_dir=tmp)
    sb.start()
    try:
        sb.execute(f"CREATE DATABASE {DB}")
        sb.execute(f"CREATE TABLE {TABLE} {COLUMNS_DDL}", database=DB)
        for lo in range(0, args.rows, 1_000_000):
            n = min(1_000_000, args.rows - lo)
            sb.execute(f"INSERT INTO {TABLE} " + FILL.format(n=n, lo=lo), database=DB)
        env = {**os.environ, "BENCH_PW": sb.info.cdc_password,
               "PYSPARK_PYTHON": sys.executable}
        results: dict[str, list[dict]] = {"driver": [], "tasks": [], "source alone": []}
        for r in range(args.rounds):
            for mode in ("driver", "tasks"):
                work = tmp / f"r{r}-{mode}"
                work.mkdir()
                y = pipeline(sb, work, mode == "tasks")
                m = run([str(ROOT / ".venv" / "bin" / "sparkcdc"), "run", str(y),
                         "--until-caught-up", "--no-progress"], env, work / "run.log")
                if m["rc"]:
                    raise SystemExit((work / "run.log").read_text()[-3000:])
                check(work, args.rows)
                m["result_bytes"] = result_bytes(work / "events")
                m["load"] = os.getloadavg()[0]
                results[mode].append(m)
                print(f"round {r} {mode}: {m['seconds']:.1f} s, {m['cpu']:.1f} CPU-s, "
                      f"{m['result_bytes'] / args.rows:.1f} B/row to the driver, "
                      f"load {m['load']:.1f}", flush=True)
                shutil.rmtree(work / "lake", ignore_errors=True)
            work = tmp / f"r{r}-noop"
            work.mkdir()
            cfg = {"options": {"hostname": sb.info.host, "port": str(sb.info.port),
                               "username": sb.info.cdc_user, "password": sb.info.cdc_password,
                               "database-name": DB, "table-name": f"{DB}\\.{TABLE}",
                               "server-id": "5400-5404"},
                   "checkpoint": str(work / "ckpt")}
            (work / "noop.json").write_text(json.dumps(cfg))
            m = run([sys.executable, str(ROOT / "bench" / "pipeline.py"), "--noop-child",
                     str(work / "noop.json")], env, work / "noop.log")
            m["load"] = os.getloadavg()[0]
            results["source alone"].append(m)
            print(f"round {r} source alone: {m['seconds']:.1f} s, {m['cpu']:.1f} CPU-s",
                  flush=True)
    finally:
        sb.stop()
        shutil.rmtree(tmp, ignore_errors=True)

    def med(mode: str, key: str) -> float:
        return statistics.median(x[key] for x in results[mode])

    noop = med("source alone", "seconds")
    print(f"\n{args.rows:,} rows, 11 columns, into Delta; medians of {args.rounds} rounds\n")
    print("| | wall s | rows/s | x source alone | CPU-s | rows per CPU-s | peak PSS MB | "
          "bytes to the driver per row | load |")
    print("|---|---|---|---|---|---|---|---|---|")
    for mode in ("driver", "tasks", "source alone"):
        s, cpu = med(mode, "seconds"), med(mode, "cpu")
        rb = (f"{med(mode, 'result_bytes') / args.rows:.2f}"
              if "result_bytes" in results[mode][0] else "")
        loads = ", ".join(f"{x['load']:.1f}" for x in results[mode])
        print(f"| {mode} | {s:.1f} | {args.rows / s:,.0f} | {noop / s:.2f} | {cpu:.1f} | "
              f"{args.rows / cpu:,.0f} | {med(mode, 'pss'):,.0f} | {rb} | {loads} |")


if __name__ == "__main__":
    main()
