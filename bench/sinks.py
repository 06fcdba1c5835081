"""Apply rate of every sink: change rows per second through ``apply_changes``.

    .venv/bin/python bench/sinks.py [--rows 200000] [--sinks delta,postgres] [--no-write-docs]

Two batches of change rows for one table (id, name, qty, price, ts, note), half the rows
each: batch 0 inserts (an initial snapshot), batch 1 a mix on existing keys (updates as
pre-image + post-image pairs, deletes, new inserts). The change rows are cached in Spark
first, so the figures cover planning in Spark (reduce to the last change per key), collecting
to the driver, and the sink's write. ``write`` is the sink's part alone. Real servers: a
throwaway MariaDB and PostgreSQL, started here. Results go to docs/benchmarks.md under
"Sinks".
"""

from __future__ import annotations

import argparse
import datetime as dt
import os
import platform
import re
import shutil
import sys
import tempfile
import time
from decimal import Decimal
from pathlib import Path

import numpy as np
import pyarrow as pa

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from sparkcdc import sinks
from sparkcdc.apply import ApplyChanges, ApplySpec

SINKS = ["delta", "iceberg", "postgres", "mysql", "files-parquet", "files-json", "console"]


def change_batches(n: int, seed: int = 1) -> list[pa.Table]:
    rng = np.random.default_rng(seed)
    half = n // 2
    ids = np.arange(1, half + 1, dtype=np.int64)

    def rows(idv, kinds, seqs):
        m = len(idv)
        return {
            "id": pa.array(idv, pa.int64()),
            "name": pa.array([f"customer-{i % 9973} ü" for i in idv], pa.string()),
            "qty": pa.array(rng.integers(0, 10_000, m), pa.int32()),
            "price": pa.array([Decimal(int(x)) / 100 for x in rng.integers(0, 10**9, m)],
                              pa.decimal128(12, 2)),
            "ts": pa.array(np.datetime64("2024-01-01") + rng.integers(0, 10**12, m)
                           .astype("timedelta64[us]"), pa.timestamp("us", tz="UTC")),
            "note": pa.array([None if i % 3 else "note " * 4 for i in idv], pa.string()),
            "_change_type": pa.array(kinds, pa.string()),
            "_database": pa.array(["bench"] * m, pa.string()),
            "_table": pa.array(["orders"] * m, pa.string()),
            "_op_ts": pa.nulls(m, pa.timestamp("us", tz="UTC")),
            "_seq": pa.array([Decimal(int(s)) for s in seqs], pa.decimal128(38, 0)),
        }

    b0 = pa.table(rows(ids, ["insert"] * half, np.full(half, 1)))
    # batch 1: 40% of its rows are update pairs, 10% deletes, 10% inserts of new keys
    n_upd, n_del = int(half * 0.2), int(half * 0.1)
    n_ins = half - 2 * n_upd - n_del
    touched = rng.permutation(ids)[: n_upd + n_del]
    upd, dele = touched[:n_upd], touched[n_upd:]
    new = np.arange(half + 1, half + 1 + n_ins, dtype=np.int64)
    idv = np.concatenate([upd, upd, dele, new])
    kinds = (["update_preimage"] * n_upd + ["update_postimage"] * n_upd + ["delete"] * n_del
             + ["insert"] * n_ins)
    base = 10 + np.arange(len(idv)) * 10
    seqs = np.concatenate([base[:n_upd], base[:n_upd] + 1, base[2 * n_upd:]])
    b1 = pa.table(rows(idv, kinds, seqs))
    return [b0, b1]


def sink_options(sink_id: str, tmp: Path, pg, maria) -> dict[str, str]:
    kind = sink_id.split("-")[0]
    if kind == "delta":
        return {"type": "delta", "path": str(tmp / "delta")}
    if kind == "iceberg":
        return {"type": "iceberg", "warehouse": str(tmp / "iceberg"), "table": "bench.orders"}
    if kind == "postgres":
        return {"type": "postgres", **pg.info.sink_options("orders")}
    if kind == "mysql":
        i = maria.info
        return {"type": "mysql", "hostname": i.host, "port": str(i.port),
                "username": i.admin_user, "password": i.admin_password,
                "database": "bench", "table": "orders"}
    if kind == "files":
        return {"type": "files", "path": str(tmp / sink_id), "format": sink_id.split("-")[1]}
    return {"type": "console", "num-rows": "0"}


class TimedSink:
    """Wraps a sink to time its write alone."""

    def __init__(self, sink):
        self.sink, self.write_s = sink, 0.0

    def __getattr__(self, name):
        return getattr(self.sink, name)

    def timed(self, fn, *a):
        t0 = time.perf_counter()
        try:
            return fn(*a)
        finally:
            self.write_s += time.perf_counter() - t0


def machine() -> str:
    cpu = "unknown CPU"
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                if line.startswith("model name"):
                    cpu = line.split(":", 1)[1].strip()
                    break
    except OSError:
        pass
    load = os.getloadavg()[0] if hasattr(os, "getloadavg") else float("nan")
    return (f"{platform.system()} {platform.machine()}, {os.cpu_count()} cores ({cpu}), "
            f"Python {platform.python_version()}, load average {load:.1f} at start")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--rows", type=int, default=200_000)
    ap.add_argument("--sinks", default=",".join(SINKS))
    ap.add_argument("--no-write-docs", action="store_true")
    args = ap.parse_args()
    chosen = [s for s in args.sinks.split(",") if s]

    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    from pyspark.sql import SparkSession

    from sparkcdc.testing.mariadb import MariaDBSandbox
    from sparkcdc.testing.postgres import PostgresSandbox

    spark = (SparkSession.builder.master("local[2]").appName("sparkcdc-bench-sinks")
             .config("spark.ui.enabled", "false").config("spark.sql.shuffle.partitions", "2")
             .config("spark.sql.session.timeZone", "UTC").config("spark.driver.memory", "4g")
             .config("spark.sql.execution.arrow.pyspark.enabled", "true").getOrCreate())
    spark.sparkContext.setLogLevel("ERROR")
    header = machine()
    tables = change_batches(args.rows)
    dfs = [spark.createDataFrame(t).persist() for t in tables]
    for d in dfs:
        d.count()
    n_rows = sum(t.num_rows for t in tables)
    spec = ApplySpec(keys=("id",))
    tmp = Path(tempfile.mkdtemp(prefix="sparkcdc-bench-"))
    results = []
    pg = PostgresSandbox() if any(s.startswith("postgres") for s in chosen) else None
    maria = MariaDBSandbox(name="bench") if any(s.startswith("mysql") for s in chosen) else None
    try:
        if pg:
            pg.start()
        if maria:
            maria.start()
        # warm up Spark's planning and Arrow collection once, so the first sink is not
        # charged for the JVM's JIT
        warm = ApplyChanges(sinks.create("console", {"num-rows": "0"}), spec)
        with open(os.devnull, "w") as devnull:
            warm.sink.out = devnull
            for b, d in enumerate(dfs):
                warm(d, b)
        for sid in chosen:
            sink = sinks.create(sink_options(sid, tmp, pg, maria))
            timed = TimedSink(sink)
            for meth in ("write", "write_changelog"):
                orig = getattr(sink, meth)
                setattr(sink, meth, lambda *a, _o=orig, _t=timed: _t.timed(_o, *a))
            applier = ApplyChanges(sink, spec)
            per_batch = []
            t0 = time.perf_counter()
            for b, d in enumerate(dfs):
                tb = time.perf_counter()
                applier(d, b)
                per_batch.append(time.perf_counter() - tb)
            total = time.perf_counter() - t0
            sink.close()
            results.append((sid, total, timed.write_s, per_batch))
            print(f"{sid:14s} {n_rows / total:10,.0f} rows/s  total {total:6.2f}s  "
                  f"write {timed.write_s:6.2f}s  batches " +
                  " ".join(f"{x:.2f}s" for x in per_batch), flush=True)
    finally:
        if pg:
            pg.stop()
        if maria:
            maria.stop()
        shutil.rmtree(tmp, ignore_errors=True)
        spark.stop()
    if not args.no_write_docs:
        write_docs(results, n_rows, [t.num_rows for t in tables], header)


def write_docs(results, n_rows: int, batch_rows: list[int], header: str) -> None:
    lines = [
        "## Sinks",
        "",
        (f"`bench/sinks.py`, {dt.date.today().isoformat()}: {n_rows:,} change rows in two "
        f"micro-batches ({batch_rows[0]:,} inserts, then {batch_rows[1]:,} mixed: update "
        "pairs, deletes, inserts) of a 6-column table, applied with `apply_changes` (SCD "
        "type 1). *Rate* is change rows per second for the whole apply (Spark reduces the "
        "batch, collects it to the driver, the sink writes); *write* is the sink's part. "
        "Servers are local throwaway MariaDB and PostgreSQL 15 (fsync off)."),
        "",
        (f"Machine: {header}. The machine was shared with other work while this ran, so "
        "treat the figures as lower bounds and compare sinks with each other, not with other "
        "machines."),
        "",
        "| sink | rate (rows/s) | total (s) | write (s) | batch 0 / batch 1 (s) |",
        "|---|---:|---:|---:|---|",
    ]
    for sid, total, write_s, per_batch in results:
        lines.append(f"| {sid} | {n_rows / total:,.0f} | {total:.2f} | {write_s:.2f} | "
                     + " / ".join(f"{x:.2f}" for x in per_batch) + " |")
    section = "\n".join(lines) + "\n"
    path = ROOT / "docs" / "benchmarks.md"
    text = path.read_text() if path.exists() else "# Benchmarks\n"
    pattern = re.compile(r"^## Sinks\n.*?(?=^## |\Z)", re.DOTALL | re.MULTILINE)
    if pattern.search(text):
        text = pattern.sub(lambda _m: section + "\n", text).rstrip() + "\n"
    else:
        text = text.rstrip() + "\n\n" + section
    path.write_text(text)
    print(f"wrote {path}")


if __name__ == "__main__":
    main()
