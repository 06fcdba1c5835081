"""One small batch of random-key updates into a large Delta target: deletion vectors written
by key-slice tasks beside delta-rs' copy-on-write MERGE from the driver
(docs/benchmarks.md, "A small batch into a large table"); or into Iceberg (``--sink
iceberg``: position deletes written by the key-slice tasks, its one mode).

    .venv/bin/python bench/small_batch.py [--rows 2000000[,20000000]] [--changes 2000]
        [--rounds 3] [--modes copy-on-write,deletion-vectors] [--sink delta|iceberg]

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
event log), and the batch's own time (Spark's ``triggerExecution`` of the batches that
carried rows, from the same event log: the process's start-up left out). With several
``--rows`` sizes, each size is a table of its own and its own pipelines, the same
``--changes`` keys per round, so one run puts the batch into 2M beside the batch into 20M.
The targets are compared with the source row by row at the end.
"""

from __future__ import annotations

import argparse
import json
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

DB = "bench"
MODES = {"copy-on-write": "false", "deletion-vectors": "true"}  # Delta's
ICEBERG_MODES = {"position-deletes": ""}  # Iceberg's one: the key-slice tasks' deletes


def pipeline(sb, work: Path, name: str, dv: str, events: Path, table: str,
             sink: str = "delta") -> Path:
    i = sb.info
    block = (f"sink:\n  type: delta\n  path: {work}/lake\n  deletion-vectors: {dv}\n"
             if sink == "delta" else f"sink:\n  type: iceberg\n  warehouse: {work}/lake\n")
    text = (f"source:\n  type: mysql\n  hostname: {i.host}\n  port: {i.port}\n"
            f"  username: {i.cdc_user}\n  password: ${{BENCH_PW}}\n  tables: {DB}.{table}\n"
            + block + "  compact-every: 0\n"
            f"pipeline:\n  name: {name}\n  checkpoint.location: {work}/ckpt\n"
            f"  spark:\n    spark.eventLog.enabled: 'true'\n"
            f"    spark.eventLog.dir: {events}\n    spark.eventLog.compress: 'false'\n"
            f"    spark.eventLog.rolling.enabled: 'false'\n")
    path = work / "p.yaml"
    path.write_text(text)
    return path


def folder_bytes(path: Path) -> int:
    return sum(f.stat().st_size for f in path.rglob("*") if f.is_file())


def batch_seconds(events: Path) -> float:
    """Spark's own time for the query's batches that carried rows (``triggerExecution`` of
    each progress event with input), summed: the batch, without the process's start-up."""
    total = 0.0
    for f in events.rglob("*"):
        if not f.is_file():
            continue
        for line in f.read_text(errors="replace").splitlines():
            if "QueryProgressEvent" in line:
                p = json.loads(line).get("progress") or {}
                n = sum(int(x.get("numInputRows") or 0) for x in p.get("sources") or [])
                if n > 0:  # (the event log's progress counts input per source)
                    total += float((p.get("durationMs") or {}).get("triggerExecution") or 0)
    return total / 1000


def check(sb, lake: Path, table: str, sink: str = "delta") -> None:
    """The target equals the source on ``id`` and ``a`` (the column the rounds update),
    both read as Arrow (connectorx; delta-rs' scan or pyiceberg's) and compared sorted: a
    dict of 20M rows in Python would take longer than the bench."""
    import connectorx

    from sparkcdc.mysql.connection import ConnectionOptions

    i = sb.info
    url = ConnectionOptions(hostname=i.host, port=i.port, username=i.cdc_user,
                            password=i.cdc_password).connectorx_url(DB)
    want = connectorx.read_sql(url, f"SELECT id, a FROM {table}", return_type="arrow")
    if sink == "delta":
        import deltalake

        from sparkcdc.sinks.delta.sink import read_table

        got = read_table(deltalake.DeltaTable(str(lake / DB / table))).select(["id", "a"])
    else:
        from sparkcdc.pipeline.definition import targets

        target = targets.create_sink("iceberg", {"warehouse": str(lake)}, f"{DB}.{table}",
                                     "check")
        try:
            got = target.read().select(["id", "a"])
        finally:
            target.close()
    want, got = (t.combine_chunks().sort_by("id") for t in (want, got))
    if got.num_rows != want.num_rows or not all(
            got.column(c).cast(want.column(c).type).equals(want.column(c)) for c in ("id", "a")):
        raise SystemExit(f"{lake}: {got.num_rows} rows, the source {want.num_rows}; differ")


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--rows", default="2000000",
                    help="table sizes, comma-separated (each its own table and pipelines)")
    ap.add_argument("--changes", type=int, default=2000)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--modes", default=None,
                    help=f"comma-separated: Delta's {', '.join(MODES)} (both by default); "
                         f"Iceberg's {', '.join(ICEBERG_MODES)}")
    ap.add_argument("--sink", default="delta", choices=("delta", "iceberg"))
    args = ap.parse_args()
    sizes = [int(x) for x in args.rows.split(",")]
    known = MODES if args.sink == "delta" else ICEBERG_MODES
    modes = [m.strip() for m in (args.modes or ",".join(known)).split(",")]
    if any(m not in known for m in modes):
        raise SystemExit(f"--modes: for {args.sink}, one of {', '.join(known)}")
    cases = [(n, m) for n in sizes for m in modes]
    tmp = Path(tempfile.mkdtemp(prefix="sparkcdc-bench-small-"))
    sb = MariaDBSandbox(ServerSettings(extra_args=("--innodb-buffer-pool-size=3G",)),
                        name="bench-small", base_dir=tmp)
    sb.start()
    rng = random.Random(31)
    results: dict[tuple[int, str], list[dict]] = {c: [] for c in cases}
    try:
        sb.execute(f"CREATE DATABASE {DB}")
        for n_rows in sizes:
            table = f"orders_{n_rows}"
            sb.execute(f"CREATE TABLE {table} {COLUMNS_DDL}", database=DB)
            for lo in range(0, n_rows, 1_000_000):
                n = min(1_000_000, n_rows - lo)
                sb.execute(f"INSERT INTO {table} " + FILL.format(n=n, lo=lo), database=DB)
        env = {**os.environ, "BENCH_PW": sb.info.cdc_password,
               "PYSPARK_PYTHON": sys.executable}
        cli = str(ROOT / ".venv" / "bin" / "sparkcdc")
        works = {}
        for k, (n_rows, mode) in enumerate(cases):
            work = tmp / f"m{k}"
            (work / "events").mkdir(parents=True)
            works[(n_rows, mode)] = (work, known[mode], f"small{k}")
            y = pipeline(sb, work, f"small{k}", known[mode], work / "events",
                         f"orders_{n_rows}", args.sink)
            m = run([cli, "run", str(y), "--until-caught-up", "--no-progress"], env,
                    work / "run.log")
            if m["rc"]:
                raise SystemExit((work / "run.log").read_text()[-3000:])
            print(f"{n_rows:,} rows, {mode}: snapshot in {m['seconds']:.0f} s, "
                  f"{folder_bytes(work / 'lake') / 1e6:.0f} MB", flush=True)
        for r in range(args.rounds):
            for n_rows in sizes:
                keys = rng.sample(range(1, n_rows + 1), args.changes)
                sb.execute(f"UPDATE orders_{n_rows} SET a = a + 1, c = CONCAT('upd-', id) "
                           f"WHERE id IN ({','.join(map(str, keys))})", database=DB)
            order = list(cases) if r % 2 == 0 else list(reversed(cases))
            for case in order:
                work, dv, name = works[case]
                events = work / f"events-r{r}"
                events.mkdir()
                y = pipeline(sb, work, name, dv, events, f"orders_{case[0]}", args.sink)
                before = folder_bytes(work / "lake")
                m = run([cli, "run", str(y), "--until-caught-up", "--no-progress"], env,
                        work / "run.log")
                if m["rc"]:
                    raise SystemExit((work / "run.log").read_text()[-3000:])
                m["written"] = folder_bytes(work / "lake") - before
                m["result_bytes"] = result_bytes(events)
                m["batch"] = batch_seconds(events)
                m["load"] = os.getloadavg()[0]
                results[case].append(m)
                print(f"round {r} {case[0]:,} rows {case[1]}: {m['seconds']:.1f} s "
                      f"(batch {m['batch']:.2f} s), {m['cpu']:.1f} CPU-s, "
                      f"{m['written'] / args.changes:,.0f} B written per changed row, "
                      f"load {m['load']:.1f}", flush=True)
        for (n_rows, _mode), (work, _dv, _name) in works.items():
            check(sb, work / "lake", f"orders_{n_rows}", args.sink)
    finally:
        sb.stop()
        if not os.environ.get("BENCH_KEEP"):
            shutil.rmtree(tmp, ignore_errors=True)

    def med(case: tuple[int, str], key: str) -> float:
        return statistics.median(x[key] for x in results[case])

    print(f"\n{args.changes:,} random-key updates into an 11-column {args.sink} table; medians of "
          f"{args.rounds} rounds\n")
    print("| rows | | bytes written per changed row | batch s | wall s | CPU-s | "
          "changes per CPU-s | bytes to the driver per change | load |")
    print("|---|---|---|---|---|---|---|---|---|")
    for case in cases:
        cpu = med(case, "cpu")
        loads = ", ".join(f"{x['load']:.1f}" for x in results[case])
        print(f"| {case[0]:,} | {case[1]} | {med(case, 'written') / args.changes:,.0f} | "
              f"{med(case, 'batch'):.2f} | {med(case, 'seconds'):.1f} | {cpu:.1f} | "
              f"{args.changes / cpu:,.0f} | "
              f"{med(case, 'result_bytes') / args.changes:,.1f} | {loads} |")
    if len(sizes) > 1:
        for mode in modes:
            small, big = (min(sizes), mode), (max(sizes), mode)
            print(f"\n{mode}: the batch into {big[0]:,} rows took "
                  f"{med(big, 'batch') / med(small, 'batch'):.2f}x its time into "
                  f"{small[0]:,} (whole process {med(big, 'seconds') / med(small, 'seconds'):.2f}x)")


if __name__ == "__main__":
    main()
