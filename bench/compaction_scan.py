"""A full scan of a Delta table after 100 small batches written with deletion vectors,
before and after the sink's compaction, beside the scan of a fresh table of the same rows
(docs/benchmarks.md, "A small batch into a large table"); or of an Iceberg table after as
many batches written with position deletes (``--sink iceberg``).

    .venv/bin/python bench/compaction_scan.py [--rows 2000000] [--batches 100] [--changes 2000]
        [--sink delta|iceberg]

The batches are written as the pipeline's tasks write them (``sinks/delta/changes.py``:
key slices, new rows plus deletion vectors, one commit each), without Spark, so the
figure is the table's and not a run's. The scan is delta-rs' DataFusion scan summing two
columns (every live row read, deletion vectors applied), median of 5, taken in turn with
the fresh table's. The compaction is
the sink's own (``DeltaSink.compact``): files mostly deleted rewritten without their dead
rows (``purge``), then delta-rs' ``optimize.compact``.

Iceberg: the batches through the sink's own interface for the tasks' changes
(``plan_changes``, ``write_changes`` per slice, ``commit_changes``: new rows plus position
delete files, one snapshot each, files mostly deleted rewritten as the sink does after a
batch), the scan pyiceberg's (every live row of two columns read, position deletes
applied, the table's metadata read again), the compaction ``IcebergSink.compact``.
"""

from __future__ import annotations

import argparse
import random
import shutil
import statistics
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

import pyarrow as pa
import pyarrow.compute as pc

from sparkcdc import sinks
from sparkcdc.sinks.delta import changes as ch
from sparkcdc.sinks.delta.log import DeltaLog

SCHEMA = pa.schema([("id", pa.int64()), ("a", pa.int64()), ("b", pa.int64()),
                    ("c", pa.string()), ("d", pa.float64()), ("e", pa.string()),
                    ("f", pa.timestamp("us")), ("g", pa.date32()), ("h", pa.int8()),
                    ("i", pa.string()), ("j", pa.timestamp("us", tz="UTC"))])


def rows(ids: pa.Array, salt: int) -> pa.Table:
    n = len(ids)
    i64 = pc.cast(ids, pa.int64())
    return pa.table({
        "id": i64, "a": pc.add(pc.multiply(i64, 7), salt), "b": pc.multiply(i64, 1000003),
        "c": pc.binary_join_element_wise(pa.array(["name"] * n), pc.cast(i64, pa.string()), "-"),
        "d": pc.divide(pc.cast(i64, pa.float64()), 3.0),
        "e": pc.cast(pc.divide(i64, 7), pa.string()),
        "f": pc.cast(pc.multiply(i64, 1_000_000), pa.timestamp("us")),
        "g": pc.cast(pc.cast(pc.divide(i64, 86400), pa.int32()), pa.date32()),
        "h": pc.cast(pc.remainder(i64, 100), pa.int8()),
        "i": pc.cast(pc.multiply(i64, 31), pa.string()),
        "j": pc.cast(pc.multiply(i64, 1_000_000), pa.timestamp("us", tz="UTC"))},
        schema=SCHEMA)


def load(path: Path, n: int, per_file: int = 250_000):
    sink = sinks.create("delta", {"path": str(path), "compact-every": "0"})
    sink.ready_for_files(SCHEMA)
    import deltalake

    for lo in range(1, n + 1, per_file):
        ids = pa.array(range(lo, min(n + 1, lo + per_file)), pa.int64())
        deltalake.write_deltalake(str(path), rows(ids, 0), mode="append")
    return sink


def scan(path: Path) -> float:
    """Seconds to open the table (its log read) and read every live row of two columns."""
    import deltalake

    t0 = time.perf_counter()
    deltalake.QueryBuilder().register("t", deltalake.DeltaTable(str(path))).execute(
        "SELECT count(*), sum(a), sum(b) FROM t").read_all()
    return time.perf_counter() - t0


def side_by_side(a, b, n: int = 5, scan=scan) -> tuple[float, float]:
    """Medians of ``n`` scans of each, taken in turn (the machine's load hits both)."""
    ta, tb = [], []
    for _ in range(n):
        ta.append(scan(a))
        tb.append(scan(b))
    return statistics.median(ta), statistics.median(tb)


# -- Iceberg ------------------------------------------------------------------------------------

def iceberg_sink(path: Path, n: int, per_file: int = 250_000):
    """A fresh Iceberg table of ``n`` rows, ``per_file`` to a data file, and its sink."""
    from sparkcdc.sinks.iceberg.storage import storage_table

    sink = sinks.create("iceberg", {"warehouse": str(path), "table": "bench.t",
                                    "compact-every": "0"})
    sink.plan_changes(("id",), SCHEMA, 1)  # creates the table
    table = sink._table()
    arrow = table.schema().as_arrow()
    for lo in range(1, n + 1, per_file):
        ids = pa.array(range(lo, min(n + 1, lo + per_file)), pa.int64())
        table.append(storage_table(rows(ids, 0)).cast(arrow))
        table = sink._table()
    return sink


def iceberg_scan(sink) -> float:
    t0 = time.perf_counter()
    t = sink._table().scan(selected_fields=("a", "b")).to_arrow()
    (pc.sum(t["a"]).as_py(), pc.sum(t["b"]).as_py(), t.num_rows)
    return time.perf_counter() - t0


def iceberg_files(sink) -> int:
    return len(list(sink._table().scan().plan_files()))


def iceberg_run(args, tmp: Path, rng: random.Random) -> dict:
    fresh = iceberg_sink(tmp / "fresh", args.rows)
    sink = iceberg_sink(tmp / "t", args.rows)
    t0 = time.perf_counter()
    for b in range(args.batches):
        keys = pa.array(sorted(rng.sample(range(1, args.rows + 1), args.changes)), pa.int64())
        cut = sink.plan_changes(("id",), SCHEMA, args.slices)
        up = rows(keys, b + 1)
        written = []
        for s in range(cut.count):
            mine = pc.equal(cut.slice_of(keys), s)
            written.append(sink.write_changes(cut, s, up.filter(mine),
                                              pa.table({"id": keys.filter(mine)}), b))
        sink.commit_changes(cut, written, b)
    write_s = time.perf_counter() - t0
    files_before = iceberg_files(sink)
    base1, before = side_by_side(fresh, sink, scan=iceberg_scan)
    t1 = time.perf_counter()
    sink.compact(args.batches)
    compact_s = time.perf_counter() - t1
    files_after = iceberg_files(sink)
    base2, after = side_by_side(fresh, sink, scan=iceberg_scan)
    live = sink.read()
    if live.num_rows != args.rows or pc.sum(live["a"]).as_py() is None:
        raise SystemExit(f"the table holds {live.num_rows} rows, not {args.rows}")
    return {"write_s": write_s, "files_before": files_before, "base1": base1,
            "before": before, "compact_s": compact_s, "files_after": files_after,
            "base2": base2, "after": after}


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--rows", type=int, default=2_000_000)
    ap.add_argument("--batches", type=int, default=100)
    ap.add_argument("--changes", type=int, default=2000)
    ap.add_argument("--slices", type=int, default=2)
    ap.add_argument("--sink", default="delta", choices=("delta", "iceberg"))
    args = ap.parse_args()
    tmp = Path(tempfile.mkdtemp(prefix="sparkcdc-bench-scan-"))
    rng = random.Random(7)
    if args.sink == "iceberg":
        try:
            r = iceberg_run(args, tmp, rng)
        finally:
            shutil.rmtree(tmp, ignore_errors=True)
        report(args, r, "pyiceberg", "position deletes")
        return
    try:
        fresh = tmp / "fresh"
        load(fresh, args.rows)
        t = tmp / "t"
        sink = load(t, args.rows)
        t0 = time.perf_counter()
        for b in range(args.batches):
            keys = pa.array(sorted(rng.sample(range(1, args.rows + 1), args.changes)),
                            pa.int64())
            log = DeltaLog(t).refresh()
            cut = ch.plan_slices(log, "id", pa.int64(), args.slices)
            up = rows(keys, b + 1)
            results = []
            for s in range(cut.count):
                mine = pc.equal(cut.slice_of(keys), s)
                results.append(ch.write_slice(str(t), cut.parts[s], up.filter(mine),
                                              pa.table({"id": keys.filter(mine)}), "bench", b))
            v = ch.commit_changes(str(t), log, cut.version, results, "bench", b,
                                  [("bench", b)])
            if v % ch.CHECKPOINT_EVERY == 0:  # as the sink does (DeltaSink.commit_changes)
                sink._table().create_checkpoint()
        write_s = time.perf_counter() - t0
        files_before = len(DeltaLog(t).refresh().files)
        base1, before = side_by_side(fresh, t)
        t1 = time.perf_counter()
        sink.compact(sink._table())
        compact_s = time.perf_counter() - t1
        files_after = len(DeltaLog(t).refresh().files)
        base2, after = side_by_side(fresh, t)
        total = sum(f.stat().st_size for f in t.rglob("*") if f.is_file())
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    print(f"table {total / 1e6:.0f} MB at the end")
    report(args, {"write_s": write_s, "files_before": files_before, "base1": base1,
                  "before": before, "compact_s": compact_s, "files_after": files_after,
                  "base2": base2, "after": after}, "delta-rs' DataFusion", "deletion vectors")


def report(args, r: dict, reader: str, markers: str) -> None:
    print(f"\n{args.batches} batches of {args.changes:,} random-key updates into "
          f"{args.rows:,} rows (11 columns, {args.sink}, {markers}): written in "
          f"{r['write_s']:.1f} s ({args.batches * args.changes / r['write_s']:,.0f} changes/s, "
          f"no Spark); compaction {r['compact_s']:.1f} s; scans by {reader}\n")
    print("| scan | files | seconds (median of 5) | fresh table, in turn | x fresh |")
    print("|---|---|---|---|---|")
    print(f"| after {args.batches} batches | {r['files_before']} | {r['before']:.3f} | "
          f"{r['base1']:.3f} | {r['before'] / r['base1']:.2f} |")
    print(f"| after compaction | {r['files_after']} | {r['after']:.3f} | {r['base2']:.3f} | "
          f"{r['after'] / r['base2']:.2f} |")


if __name__ == "__main__":
    main()
