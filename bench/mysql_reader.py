"""The binlog reader's speed on MySQL beside MariaDB, for the same changes (issue 33).

    .venv/bin/python bench/mysql_reader.py [--inserts 30000] [--updates 3000] [--rounds 3]
        [--servers mariadb,mysql,mysql-compressed] [--json out.json]

One sandbox per server: MariaDB 10.11, MySQL 9.7, and MySQL 9.7 with
``binlog_transaction_compression=ON`` and ``binlog_row_value_options=PARTIAL_JSON``. Each
gets the same change load, made by a stored procedure on the server: ``--inserts``
single-row INSERT transactions, then ``--updates`` UPDATE transactions of 10 rows each, on
one table of six columns (no JSON column): a transaction per few rows, where per-transaction
costs (the GTID state) show. Then ``BinlogReader.read_window`` (the compiled decoder) reads
the whole window ``--rounds`` times; the median of records/s is reported, with the reader's
CPU seconds (this process's, the server's not included) beside the wall time, and the load
average. The result goes to stdout (and ``--json``); docs/mysql-findings.md quotes it.

The machine should be idle: run it when ``uptime`` shows a load under about 1.5.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from sparkcdc.core.schema import TableId
from sparkcdc.mysql.binlog.reader import BinlogReader, load_table_schema
from sparkcdc.mysql.connection import ConnectionOptions
from sparkcdc.mysql.offsets import current_offset
from sparkcdc.testing.mariadb import MariaDBSandbox
from sparkcdc.testing.mysql import MySQLSandbox, MySQLSettings

PROCEDURE = """
CREATE PROCEDURE load_changes(n_inserts INT, n_updates INT)
BEGIN
  DECLARE i INT DEFAULT 0;
  WHILE i < n_inserts DO
    INSERT INTO t VALUES (i, i * 7, CONCAT('row ', i), i / 3, 
                          TIMESTAMP '2024-01-01 00:00:00' + INTERVAL i SECOND, i % 2);
    SET i = i + 1;
  END WHILE;
  SET i = 0;
  WHILE i < n_updates DO
    UPDATE t SET a = a + 1, b = CONCAT(b, '+') WHERE id >= (i * 10) % n_inserts
      AND id < (i * 10) % n_inserts + 10;
    SET i = i + 1;
  END WHILE;
END
"""


def sandbox(kind: str):
    if kind == "mariadb":
        return MariaDBSandbox(name="bench-reader-mariadb")
    if kind == "mysql":
        return MySQLSandbox(name="bench-reader-mysql")
    if kind == "mysql-compressed":
        return MySQLSandbox(name="bench-reader-mysqlz", settings=MySQLSettings(extra_args=(
            "--binlog-transaction-compression=ON", "--binlog-row-value-options=PARTIAL_JSON")))
    raise SystemExit(f"unknown server {kind!r}")


def measure(kind: str, inserts: int, updates: int, rounds: int) -> dict:
    with sandbox(kind) as sb:
        i = sb.info
        conn = ConnectionOptions(hostname=i.host, port=i.port, username=i.cdc_user,
                                 password=i.cdc_password)
        sb.execute("CREATE DATABASE bench")
        sb.execute("CREATE TABLE t (id INT PRIMARY KEY, a BIGINT, b VARCHAR(200), "
                   "c DOUBLE, d DATETIME, e TINYINT)", PROCEDURE, database="bench")
        start = current_offset(conn)
        t0 = time.perf_counter()
        sb.execute(f"CALL load_changes({inserts}, {updates})", database="bench")
        made = time.perf_counter() - t0
        end = current_offset(conn)
        version = sb.query("SELECT VERSION()")[0][0]
        schema = load_table_schema(conn, TableId("bench", "t"))
        runs = []
        for r in range(rounds):
            reader = BinlogReader(conn, 7600 + r, {schema.table_id: schema})
            w0, c0 = time.perf_counter(), time.process_time()
            n = sum(1 for _ in reader.read_window(start, end))
            wall, cpu = time.perf_counter() - w0, time.process_time() - c0
            runs.append((n / wall, wall, cpu, n))
            print(f"  {kind} round {r + 1}: {n} records in {wall:.2f} s "
                  f"({n / wall:,.0f}/s), {cpu:.2f} CPU-s", flush=True)
        rate = statistics.median(x[0] for x in runs)
        return {"server": kind, "version": version, "records": runs[0][3],
                "records_per_s": round(rate),
                "wall_s": round(statistics.median(x[1] for x in runs), 3),
                "cpu_s": round(statistics.median(x[2] for x in runs), 3),
                "binlog_bytes": end.pos - start.pos if end.file == start.file else None,
                "load_seconds": round(made, 1), "loadavg": os.getloadavg()[0]}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--inserts", type=int, default=30000)
    ap.add_argument("--updates", type=int, default=3000)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--servers", default="mariadb,mysql,mysql-compressed")
    ap.add_argument("--json", default=None)
    a = ap.parse_args()
    print(f"load average before: {os.getloadavg()}", flush=True)
    out = [measure(k, a.inserts, a.updates, a.rounds) for k in a.servers.split(",")]
    print(f"{'server':18} {'version':24} {'records':>8} {'records/s':>10} {'wall s':>7} "
          f"{'CPU s':>6} {'load':>5}")
    for r in out:
        print(f"{r['server']:18} {r['version'][:24]:24} {r['records']:>8} "
              f"{r['records_per_s']:>10,} {r['wall_s']:>7.2f} {r['cpu_s']:>6.2f} "
              f"{r['loadavg']:>5.2f}")
    if a.json:
        Path(a.json).write_text(json.dumps(out, indent=1))


if __name__ == "__main__":
    main()
