"""A long snapshot under steady writes: how often the binlog goes over the wire, and whether
batches stay flat (docs/benchmarks.md, "The binlog once").

    .venv/bin/python bench/binlog_once.py [--rows 200000] [--chunk 2000] [--server mariadb|mysql]

One table of ``--rows`` rows (``--chunk`` rows a chunk) is captured by ``sparkcdc run
--until-caught-up`` into Delta, as a user runs it, while a writer updates 50 random rows
every ~10 ms. Sampled whenever the run's stream commits a batch: the server's
``Bytes_sent`` and its binlog's size. Printed per batch: its time, the chunks it read, the
binlog its window read (its two offsets' positions, from the checkpoint), how much the
binlog grew meanwhile, and the bytes the server sent (windows, the chunks' roll-back reads
and their selects); then the run's total: bytes sent less one read of the table, over one
read of the binlog the run wrote (measured the same way after the run, the writer stopped:
MariaDB sends about 0.83 bytes per byte its binlog grows, MySQL about 1.0), the times the
binlog went over the wire; and the last quarter's batch time over the first quarter's.
"""

from __future__ import annotations

import argparse
import json
import os
import random
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))


def sandbox(kind: str):
    if kind == "mysql":
        from sparkcdc.testing.mysql import MySQLSandbox

        return MySQLSandbox(name="bench-once")
    from sparkcdc.testing.mariadb import MariaDBSandbox

    return MariaDBSandbox(name="bench-once")


def status(sb) -> tuple[int, int]:
    sent = int(sb.query("SHOW GLOBAL STATUS LIKE 'Bytes_sent'")[0][1])
    return sent, sum(int(r[1]) for r in sb.query("SHOW BINARY LOGS"))


def binlog_between(sb, a, b) -> int:
    """Bytes of binlog from position ``a`` to ``b`` (``BinlogOffset``s, files in order)."""
    if a.file == b.file:
        return b.pos - a.pos
    sizes = {r[0]: int(r[1]) for r in sb.query("SHOW BINARY LOGS")}
    files = sorted(f for f in sizes if a.file <= f <= b.file)
    return sizes[a.file] - a.pos + sum(sizes[f] for f in files[1:-1]) + b.pos


def one_read(sb, db: str, start, end) -> int:
    """What one plain read of the binlog from ``start`` to ``end`` costs the server."""
    from sparkcdc.core.schema import TableId
    from sparkcdc.mysql.binlog.reader import BinlogReader, load_table_schema
    from sparkcdc.mysql.connection import ConnectionOptions

    i = sb.info
    conn = ConnectionOptions(hostname=i.host, port=i.port, username=i.cdc_user,
                             password=i.cdc_password)
    schema = load_table_schema(conn, TableId(db, "t"))
    before = status(sb)[0]
    for _ in BinlogReader(conn, random.randint(10_000, 99_999),
                          {schema.table_id: schema}).read_window(start, end):
        pass
    return status(sb)[0] - before


def fill(sb, db: str, rows: int) -> None:
    sb.execute(f"CREATE DATABASE {db}")
    sb.execute("CREATE TABLE t (id INT PRIMARY KEY, v INT, s VARCHAR(40), "
               "pad VARCHAR(60))", database=db)
    step = 10_000
    for lo in range(1, rows + 1, step):
        hi = min(rows, lo + step - 1)
        values = ",".join(f"({i},{i % 13},'r{i}','{'x' * 50}')" for i in range(lo, hi + 1))
        sb.execute(f"INSERT INTO t VALUES {values}", database=db)


class Updater(threading.Thread):
    def __init__(self, sb, db: str, rows: int):
        super().__init__(daemon=True)
        self.conn, self.rows = sb.admin_connection(db), rows
        self.halt, self.n, self.rnd = threading.Event(), 0, random.Random(7)

    def run(self):
        with self.conn.cursor() as cur:
            while not self.halt.wait(0.01):
                keys = ",".join(str(self.rnd.randint(1, self.rows)) for _ in range(50))
                cur.execute(f"UPDATE t SET v = v + 1 WHERE id IN ({keys})")
                self.n += 1


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--rows", type=int, default=200_000)
    ap.add_argument("--chunk", type=int, default=2_000)
    ap.add_argument("--server", choices=("mariadb", "mysql"), default="mariadb")
    args = ap.parse_args()
    with sandbox(args.server) as sb, tempfile.TemporaryDirectory() as tmp:
        db = "once"
        fill(sb, db, args.rows)
        before = status(sb)[0]
        sb.query(f"SELECT * FROM {db}.t")
        table_bytes = status(sb)[0] - before
        o = sb.source_options()
        ckpt = Path(tmp) / "ckpt"
        yaml = Path(tmp) / "p.yaml"
        yaml.write_text(f"""source:
  type: mysql
  hostname: {o['hostname']}
  port: {o['port']}
  username: {o['username']}
  password: ${{BENCH_PW}}
  tables: {db}.t
  scan.incremental.snapshot.chunk.size: {args.chunk}
sink:
  type: delta
  path: {tmp}/lake
pipeline:
  name: once
  checkpoint.location: {ckpt}
""")
        env = {**os.environ, "BENCH_PW": sb.info.cdc_password}
        from sparkcdc.mysql.offsets import current_offset
        from sparkcdc.spark.offset_view import read_offset

        w = Updater(sb, db, args.rows)
        w.start()
        time.sleep(2)
        with sb.admin_connection() as c:
            start = current_offset(c)
        sent0, log0 = status(sb)
        t0 = time.monotonic()
        p = subprocess.Popen([sys.executable, "-m", "sparkcdc.cli", "run", str(yaml),
                              "--until-caught-up", "--no-progress"], env=env,
                             stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
        samples = []  # (batch, its stream folder, seconds since start, bytes sent, binlog)
        seen = -1
        while p.poll() is None:
            commits = list(ckpt.glob("streams/_tables/g*/commits/[0-9]*"))
            last = max(commits, key=lambda c: int(c.name), default=None)
            if last is not None and int(last.name) > seen:
                seen = int(last.name)
                samples.append((seen, last.parent.parent, time.monotonic() - t0, *status(sb)))
            time.sleep(0.05)
        wall = time.monotonic() - t0
        w.halt.set()
        w.join()
        sent1, log1 = status(sb)
        with sb.admin_connection() as c:
            end = current_offset(c)
        if p.returncode != 0:
            sys.exit(f"the run failed: {p.stderr[-3000:]}")
        once = one_read(sb, db, start, end)
        rows = []
        prev = (0.0, sent0, log0)
        for b, stream, s, sent, size in samples:
            o, before = read_offset(stream, b), read_offset(stream, b - 1)
            window = (binlog_between(sb, before.position, o.position)
                      if o and before else 0)
            chunks = o.chunk_count if o else 0
            rows.append((b, s - prev[0], chunks, bool(o and o.tables_read), window,
                         size - prev[2], sent - prev[1]))
            prev = (s, sent, size)
    print(f"{args.server}, {args.rows:,} rows in chunks of {args.chunk:,}, writer: "
          f"{w.n} statements of 50 updates; run {wall:.1f} s; load "
          f"{os.getloadavg()[0]:.1f} at the end")
    print("\n| batch | s | chunks | window read (MB) | binlog grew (MB) | server sent (MB) |"
          "\n|---|---:|---:|---:|---:|---:|")
    for b, secs, chunks, _, window, grew, sent in rows:
        print(f"| {b} | {secs:.1f} | {chunks} | {window / 1e6:.2f} | {grew / 1e6:.2f} | "
              f"{sent / 1e6:.2f} |")
    grown = log1 - log0
    over = (sent1 - sent0 - table_bytes) / once if once else float("nan")
    print(f"\nbinlog grew {grown / 1e6:.1f} MB (one read of it: {once / 1e6:.1f} MB sent); "
          f"the server sent {(sent1 - sent0) / 1e6:.1f} MB, {table_bytes / 1e6:.1f} MB of it "
          f"one read of the table: the binlog went over the wire {over:.2f} times")
    snap = [secs for _, secs, _, reads, *_ in rows if reads]  # the snapshot's batches
    if len(snap) >= 4:
        q = len(snap) // 4
        first, last = statistics.median(snap[:q]), statistics.median(snap[-q:])
        print(f"snapshot batch time, median of the first quarter {first:.1f} s, of the last "
              f"{last:.1f} s: {last / first:.2f}x")
    print(json.dumps({"server": args.server, "rows": args.rows, "times_over_wire": over,
                      "wall": wall}))


if __name__ == "__main__":
    main()
