"""Small files in a long stream: the file count of a Delta target after many micro-batches,
with and without the sink's periodic compaction (``compact-every``).

    .venv/bin/python bench/small_files.py [--batches 1000] [--rows 100]

Each batch is what a steady stream brings: new keys, and a share of updates of recent keys
(``--hot`` newest). A batch of new keys only is appended (a file each); a batch with updates
is one MERGE, which rewrites the files holding the touched keys. The sink is driven directly (no Spark, no server): the
figures are the target's, not the pipeline's. Prints a Markdown table.
"""

from __future__ import annotations

import argparse
import random
import shutil
import sys
import tempfile
import time
from pathlib import Path

import pyarrow as pa

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from sparkcdc import sinks
from sparkcdc.sinks.base import ChangeSet
from sparkcdc.sinks.delta.sink import read_table


def batch(rng: random.Random, next_id: int, stored: int, n: int, hot: int,
          share: float) -> ChangeSet:
    """New keys, and a ``share`` of updates of keys among the ``hot`` newest stored ones."""
    new = list(range(next_id, next_id + n - int(n * share)))
    lo = max(0, stored - hot)
    upd = rng.sample(range(lo, stored), min(stored - lo, n - len(new))) if stored else []
    ids = new + upd
    t = pa.table({"id": pa.array(ids, pa.int64()),
                  "v": pa.array([rng.randrange(10**9) for _ in ids], pa.int64()),
                  "note": pa.array([f"row {i}" for i in ids]),
                  "__op": pa.array(["upsert"] * len(ids)),
                  "__new": pa.array([True] * len(new) + [False] * len(upd))})
    return ChangeSet(t, ("id",), ("id", "v", "note"))


def run(batches: int, rows: int, compact_every: int, tmp: Path, hot: int,
        share: float) -> dict:
    import deltalake

    path = tmp / f"c{compact_every}-{share}"
    sink = sinks.create("delta", {"path": str(path), "compact-every": str(compact_every)})
    rng = random.Random(7)
    next_id, t0 = 0, time.monotonic()
    for b in range(batches):
        cs = batch(rng, next_id, next_id, rows, hot, share)
        next_id += rows - int(rows * share)
        sink.write(cs, b)
    secs = time.monotonic() - t0
    t = deltalake.DeltaTable(str(path))
    return {"files": len(t.file_uris()), "rows": read_table(t).num_rows,
            "seconds": round(secs, 1)}


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--batches", type=int, default=1000)
    p.add_argument("--rows", type=int, default=100)
    p.add_argument("--compact-every", default="0,10,100")
    p.add_argument("--update-shares", default="0,0.5",
                   help="the share of each batch that updates stored keys (0: inserts only, "
                        "every batch appended)")
    p.add_argument("--hot", type=int, default=2000,
                   help="updates touch keys among this many newest stored ones")
    args = p.parse_args()
    tmp = Path(tempfile.mkdtemp(prefix="sparkcdc-small-files-"))
    try:
        print(f"| updates per batch | compact-every | files after {args.batches:,} batches | "
              "rows | seconds |")
        print("|---:|---:|---:|---:|---:|")
        for share in (float(x) for x in args.update_shares.split(",")):
            for c in (int(x) for x in args.compact_every.split(",")):
                r = run(args.batches, args.rows, c, tmp, args.hot, share)
                print(f"| {share:.0%} | {c or 'never'} | {r['files']:,} | {r['rows']:,} | "
                      f"{r['seconds']} |", flush=True)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


if __name__ == "__main__":
    main()
