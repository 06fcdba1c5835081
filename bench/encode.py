"""The kafka sink's encoding of one micro-batch on the driver (``formats/arrow_json.py``),
timed in process, without Spark, MariaDB or Kafka.

    .venv/bin/python bench/encode.py [--rows 200000] [--runs 5] [--formats debezium-json,...]
        [--oracle path/to/old_arrow_json.py]

Two batches of ``--rows`` change rows shaped like bench/kafka.py's (bench/throughput.py's
11 columns): a catch-up batch (updates, inserts and deletes 2:1:1 in transactions of 1,000
changes, each update its pre-image and post-image, so 1.5 rows a change; 300,000 rows are
its 200,000 changes) and a snapshot batch of inserts without a commit time. Prints the median of ``--runs`` encodes per format and shape; with ``--oracle``
(a copy of an earlier ``arrow_json.py``), that one's beside it and whether both wrote the
same bytes.
"""

from __future__ import annotations

import argparse
import datetime as dt
import decimal
import importlib.util
import statistics
import sys
import time
from pathlib import Path

import pyarrow as pa

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from sparkcdc.formats import arrow_json
from sparkcdc.spark.rows import META_FIELDS

DATA = pa.schema([
    ("id", pa.int64()), ("a", pa.int32()), ("b", pa.int64()), ("c", pa.string()),
    ("d", pa.float64()), ("e", pa.decimal128(10, 2)), ("f", pa.timestamp("us")),
    ("g", pa.date32()), ("h", pa.int8()), ("i", pa.string()),
    ("j", pa.timestamp("us", tz="UTC")),
])
UTC = dt.timezone.utc


def _row(k: int, bump: int = 0) -> dict:
    """bench/throughput.py's FILL for id ``k``; ``bump``: bench/kafka.py's update applied."""
    return {"id": k, "a": k * 7 + bump, "b": k * 1000003,
            "c": f"u-{k}" if bump else f"name-{k}", "d": k / 3,
            "e": decimal.Decimal(k * 100 // 7 + bump * 100) / 100,
            "f": dt.datetime(2024, 1, 2, 3, 4, 5) + dt.timedelta(seconds=k, days=bump),
            "g": dt.date(2024, 1, 1) + dt.timedelta(days=k % 1000), "h": k % 100,
            "i": f"{k * 2654435761 % 2**128:032x}",
            "j": dt.datetime(2024, 5, 1, tzinfo=UTC) + dt.timedelta(seconds=k % 10_000_000)}


def catch_up(rows: int) -> pa.Table:
    """Transactions of 1,000 changes: 500 updates (pre- and post-image), 250 inserts above
    the table's ids, 250 deletes from its top, as bench/kafka.py writes them."""
    out, meta = [], []
    upd, ins, dele, seq = 1, 1_000_001, 1_000_000, 10**20
    ts = dt.datetime(2026, 1, 1, tzinfo=UTC)
    while len(out) < rows:
        for _ in range(500):
            out += [_row(upd), _row(upd, 1)]
            meta += [("update_preimage", ts), ("update_postimage", ts)]
            upd += 1
        for _ in range(250):
            out.append(_row(ins))
            meta.append(("insert", ts))
            ins += 1
        for _ in range(250):
            out.append(_row(dele))
            meta.append(("delete", ts))
            dele -= 1
        ts += dt.timedelta(milliseconds=3)
    out, meta = out[:rows], meta[:rows]
    return _with_meta(out, [m[0] for m in meta], [m[1] for m in meta], seq)


def snapshot(rows: int) -> pa.Table:
    return _with_meta([_row(k) for k in range(1, rows + 1)], ["insert"] * rows,
                      [None] * rows, 10**19)


def _with_meta(data: list[dict], kinds: list, ts: list, seq0: int) -> pa.Table:
    t = pa.Table.from_pylist(data, DATA)
    n = t.num_rows
    cols = {"_change_type": pa.array(kinds), "_database": pa.array(["bench"] * n),
            "_table": pa.array(["kafka_rows"] * n), "_op_ts": pa.array(ts, META_FIELDS[3].type),
            "_seq": pa.array([decimal.Decimal(seq0 + i * 10) for i in range(n)],
                             pa.decimal128(38, 0))}
    for f in META_FIELDS:
        t = t.append_column(f, cols[f.name])
    return t


def _median(fn, runs: int) -> tuple[float, object]:
    times, out = [], None
    for _ in range(runs):
        t0 = time.perf_counter()
        out = fn()
        times.append(time.perf_counter() - t0)
    return statistics.median(times), out


def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("--rows", type=int, default=200_000)
    p.add_argument("--runs", type=int, default=5)
    p.add_argument("--formats", default="debezium-json,canal-json,changelog-json")
    p.add_argument("--oracle", help="an earlier arrow_json.py to time beside")
    a = p.parse_args()
    old = None
    if a.oracle:
        spec = importlib.util.spec_from_file_location("old_arrow_json", a.oracle)
        assert spec and spec.loader
        old = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(old)
    for shape, table in (("catch-up", catch_up(a.rows)), ("snapshot", snapshot(a.rows))):
        for fmt in a.formats.split(","):
            def run(mod=arrow_json, table=table, fmt=fmt):
                return mod.encode(table, fmt, ["id"], version="0")
            new_s, new_out = _median(run, a.runs)
            line = f"{shape:9s} {fmt:15s} {table.num_rows:,} rows: {new_s:.3f} s"
            if old is not None:
                old_s, old_out = _median(lambda: run(old), a.runs)
                line += (f", before {old_s:.3f} s ({old_s / new_s:.1f}x), "
                         f"same bytes: {old_out == new_out}")
            print(line, flush=True)


if __name__ == "__main__":
    main()
