"""One small batch of random-key updates into a large Delta target: deletion vectors written
by key-slice tasks beside delta-rs' copy-on-write MERGE from the driver
(docs/benchmarks.md, "A small batch into a large table").

    .venv/bin/python bench/small_batch.py [--rows 2000000] [--changes 2000] [--rounds 3]

Two pipelines read one MariaDB table (11 columns, ``--rows`` rows) into two Delta targets,
each as a user runs it (``sparkcdc run pipeline.yaml --until-caught-up``, whole process):

* ``copy-on-write``: ``deletion-vectors: false`` (the table has no such feature), so the
  driver merges each batch with delta-rs, which rewrites every file holding a changed row;
* ``deletion vectors``: the default: tasks own slices of the keys, write the new rows and
  mark the old ones in deletion vectors; the driver commits.

Both first load the table (the snapshot; not timed here, bench/task_writes.py times it).
Then, per round, ``--changes`` random keys are updated on the source and each pipeline
catches up once (the modes in turn, first one then the other): reported per mode, medians
over the rounds: bytes the run added to the target's folder per changed row, wall seconds,
CPU-seconds of the whole process tree, and the bytes the tasks sent the driver (Spark's
event log). The targets are compared with the source row by row at the end.
"""

from __future__ import annotations

import argparse
import os
import random
import shutil
import statistics
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "bench"))

from task_writes import result_bytes, run
from throughput import COLUMNS_DDL, FILL

from sparkcdc.testing.mariadb import MariaDBSandbox, ServerSettings

DB, TABLE = "bench", "orders"
MODES = {"copy-on-write": "false", "deletion vectors": "true"}


def pipeline(sb, work: Path, name: str, dv: str, events: Path) -> Path:
    i = sb.info
    text = (f"source:\n  type: mysql\n  hostname: {i.host}\n  port: {i.port}\n"
            f"  username: {i.cdc_user}\n  password: ${{BENCH_PW}}\n  tables: {DB}.{TABLE}\n"
            f"sink:\n  type: delta\n  path: {work}/lake\n  deletion-vectors: {dv}\n"
            f"  compact-every: 0\n"
            f"pipeline:\n  name: {name}\n  checkpoint.location: {work}/ckpt\n"
            f"  spark:\n    spark.eventLog.enabled: 'true'\n"
            f"    spark.eventLog.dir: {events}\n    spark.eventLog.compress: 'false'\n"
            f"    spark.eventLog.rolling.enabled: 'false'\n")
    path = work / "p.yaml"
    path.write_text(text)
    return path


def folder_bytes(path: Path) -> int:
    return sum(f.stat().st_size for f in path.rglob("*") if f.is_file())


def check(sb, lake: Path) -> None:
    import deltalake

    from sparkcdc.sinks.delta.sink import read_table

    got = read_table(deltalake.DeltaTable(str(lake / DB / TABLE))).select(["id", "a"])
    want = dict(sb.query(f"SELECT id, a FROM {DB}.{TABLE}"))
    have = dict(zip(got.column("id").to_pylist(), got.column("a").to_pylist()))
    if have != want:
        bad = [k for k in want if have.get(k) != want[k]][:5]
        raise SystemExit(f"{lake}: {len(have)} rows, the source {len(want)}; differ: {bad}")


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--rows", type=int, default=2_000_000)
    ap.add_argument("--changes", type=int, default=2000)
    ap.add_argument("--rounds", type=int, default=3)
    args = ap.parse_args()
    tmp = Path(tempfile.mkdtemp(prefix="sparkcdc-bench-small-"))
    sb = MariaDBSandbox(ServerSettings(extra_args=("--innodb-buffer-pool-size=3G",)),
                        name="bench-small", base_dir=tmp)
    sb.start()
    rng = random.Random(31)
    try:
        sb.execute(f"CREATE DATABASE {DB}")
        sb.execute(f"CREATE TABLE {TABLE} {COLUMNS_DDL}", database=DB)
        for lo in range(0, args.rows, 1_000_000):
            n = min(1_000_000, args.rows - lo)
            sb.execute(f"INSERT INTO {TABLE} " + FILL.format(n=n, lo=lo), database=DB)
        env = {**os.environ, "BENCH_PW": sb.info.cdc_password,
               "PYSPARK_PYTHON": sys.executable}
        cli = str(ROOT / ".venv" / "bin" / "sparkcdc")
        works = {}
        for k, (mode, dv) in enumerate(MODES.items()):
            work = tmp / f"m{k}"
            (work / "events").mkdir(parents=True)
            works[mode] = (work, dv)
            y = pipeline(sb, work, f"small{k}", dv, work / "events")
            m = run([cli, "run", str(y), "--until-caught-up", "--no-progress"], env,
                    work / "run.log")
            if m["rc"]:
                raise SystemExit((work / "run.log").read_text()[-3000:])
            print(f"{mode}: snapshot of {args.rows:,} rows in {m['seconds']:.0f} s, "
                  f"{folder_bytes(work / 'lake') / 1e6:.0f} MB", flush=True)
        results: dict[str, list[dict]] = {m: [] for m in MODES}
        for r in range(args.rounds):
            keys = rng.sample(range(1, args.rows + 1), args.changes)
            sb.execute(f"UPDATE {TABLE} SET a = a + 1, c = CONCAT('upd-', id) WHERE id IN "
                       f"({','.join(map(str, keys))})", database=DB)
            order = list(MODES) if r % 2 == 0 else list(reversed(MODES))
            for mode in order:
                work, dv = works[mode]
                events = work / f"events-r{r}"
                events.mkdir()
                y = pipeline(sb, work, f"small{list(MODES).index(mode)}", dv, events)
                before = folder_bytes(work / "lake")
                m = run([cli, "run", str(y), "--until-caught-up", "--no-progress"], env,
                        work / "run.log")
                if m["rc"]:
                    raise SystemExit((work / "run.log").read_text()[-3000:])
                m["written"] = folder_bytes(work / "lake") - before
                m["result_bytes"] = result_bytes(events)
                m["load"] = os.getloadavg()[0]
                results[mode].append(m)
                print(f"round {r} {mode}: {m['seconds']:.1f} s, {m['cpu']:.1f} CPU-s, "
                      f"{m['written'] / args.changes:,.0f} B written per changed row, "
                      f"load {m['load']:.1f}", flush=True)
        for mode, (work, _dv) in works.items():
            check(sb, work / "lake")
    finally:
        sb.stop()
        shutil.rmtree(tmp, ignore_errors=True)

    def med(mode: str, key: str) -> float:
        return statistics.median(x[key] for x in results[mode])

    print(f"\n{args.changes:,} random-key updates into {args.rows:,} rows (11 columns) in "
          f"Delta; medians of {args.rounds} rounds\n")
    print("| | bytes written per changed row | wall s | CPU-s | changes per CPU-s | "
          "bytes to the driver per change | load |")
    print("|---|---|---|---|---|---|---|")
    for mode in MODES:
        cpu = med(mode, "cpu")
        loads = ", ".join(f"{x['load']:.1f}" for x in results[mode])
        print(f"| {mode} | {med(mode, 'written') / args.changes:,.0f} | "
              f"{med(mode, 'seconds'):.1f} | {cpu:.1f} | {args.changes / cpu:,.0f} | "
              f"{med(mode, 'result_bytes') / args.changes:,.1f} | {loads} |")


if __name__ == "__main__":
    main()
