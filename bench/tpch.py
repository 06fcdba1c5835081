"""TPC-H at scale factor 1 (8,661,245 rows in 8 tables) from MariaDB into Delta and into
Iceberg, each as a user runs it: ``sparkcdc run pipeline.yaml --until-caught-up``, the
whole process (docs/benchmarks.md, "TPC-H SF1").

    .venv/bin/python bench/tpch.py [--sf 1] [--rounds 3] [--sinks delta,iceberg]

The data comes from ``tpchgen-cli`` (the TPC-H generator of datafusion-contrib, a wheel on
PyPI; ``pip install tpchgen-cli``), loaded into the sandbox with ``LOAD DATA LOCAL INFILE``
into the 8 tables with their TPC-H primary keys (``lineitem`` and ``partsupp`` keyed by two
columns). One pipeline captures the whole ``tpch`` database. Per round and sink, a fresh
target and checkpoint; the sinks in turn, the order alternating by round. Reported per sink,
medians over the rounds: wall seconds, rows per second, CPU-seconds of the whole process tree
(the CLI, the JVM, every Python worker: ``task_writes.run``), rows per CPU-second, peak PSS.
OLake publishes about 30-40k rows per CPU-second on this shape. After every run each
target's row count per table, and the sums of ``orders.o_totalprice`` and
``lineitem.l_extendedprice``, are checked against the source's.
"""

from __future__ import annotations

import argparse
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "bench"))

from task_writes import run

from sparkcdc.testing.mariadb import MariaDBSandbox, ServerSettings

DB = "tpch"
# the TPC-H schema (spec 1.4), with its primary keys
TABLES = {
    "region": "r_regionkey INT PRIMARY KEY, r_name CHAR(25), r_comment VARCHAR(152)",
    "nation": "n_nationkey INT PRIMARY KEY, n_name CHAR(25), n_regionkey INT, "
              "n_comment VARCHAR(152)",
    "supplier": "s_suppkey INT PRIMARY KEY, s_name CHAR(25), s_address VARCHAR(40), "
                "s_nationkey INT, s_phone CHAR(15), s_acctbal DECIMAL(15,2), "
                "s_comment VARCHAR(101)",
    "customer": "c_custkey INT PRIMARY KEY, c_name VARCHAR(25), c_address VARCHAR(40), "
                "c_nationkey INT, c_phone CHAR(15), c_acctbal DECIMAL(15,2), "
                "c_mktsegment CHAR(10), c_comment VARCHAR(117)",
    "part": "p_partkey INT PRIMARY KEY, p_name VARCHAR(55), p_mfgr CHAR(25), "
            "p_brand CHAR(10), p_type VARCHAR(25), p_size INT, p_container CHAR(10), "
            "p_retailprice DECIMAL(15,2), p_comment VARCHAR(23)",
    "partsupp": "ps_partkey INT, ps_suppkey INT, ps_availqty INT, "
                "ps_supplycost DECIMAL(15,2), ps_comment VARCHAR(199), "
                "PRIMARY KEY (ps_partkey, ps_suppkey)",
    "orders": "o_orderkey BIGINT PRIMARY KEY, o_custkey INT, o_orderstatus CHAR(1), "
              "o_totalprice DECIMAL(15,2), o_orderdate DATE, o_orderpriority CHAR(15), "
              "o_clerk CHAR(15), o_shippriority INT, o_comment VARCHAR(79)",
    "lineitem": "l_orderkey BIGINT, l_partkey INT, l_suppkey INT, l_linenumber INT, "
                "l_quantity DECIMAL(15,2), l_extendedprice DECIMAL(15,2), "
                "l_discount DECIMAL(15,2), l_tax DECIMAL(15,2), l_returnflag CHAR(1), "
                "l_linestatus CHAR(1), l_shipdate DATE, l_commitdate DATE, "
                "l_receiptdate DATE, l_shipinstruct CHAR(25), l_shipmode CHAR(10), "
                "l_comment VARCHAR(44), PRIMARY KEY (l_orderkey, l_linenumber)",
}


def generate(sf: float, out: Path) -> None:
    """The 8 tables as pipe-separated ``.tbl`` files (``tpchgen-cli``)."""
    exe = shutil.which("tpchgen-cli") or str(Path(sys.executable).parent / "tpchgen-cli")
    if not Path(exe).exists():
        raise SystemExit("tpchgen-cli is not installed; fix: .venv/bin/pip install tpchgen-cli")
    subprocess.run([exe, "-s", str(sf), f"--output-dir={out}"], check=True)


def load(sb: MariaDBSandbox, data: Path) -> None:
    """The tables created and filled."""
    sb.execute(f"CREATE DATABASE {DB}")
    with sb.admin_connection(DB, local_infile=True) as conn, conn.cursor() as cur:
        for name, cols in TABLES.items():
            cur.execute(f"CREATE TABLE {name} ({cols})")
            cur.execute(f"LOAD DATA LOCAL INFILE '{data / (name + '.tbl')}' INTO TABLE {name} "
                        "FIELDS TERMINATED BY '|' LINES TERMINATED BY '|\\n'")


def pipeline(sb: MariaDBSandbox, work: Path, sink: str) -> Path:
    i = sb.info
    target = {"delta": f"  type: delta\n  path: {work}/lake\n",
              "iceberg": f"  type: iceberg\n  warehouse: {work}/lake\n"}[sink]
    text = (f"source:\n  type: mysql\n  hostname: {i.host}\n  port: {i.port}\n"
            f"  username: {i.cdc_user}\n  password: ${{BENCH_PW}}\n  tables: {DB}..*\n"
            f"sink:\n{target}"
            f"pipeline:\n  name: tpch-{sink}\n  checkpoint.location: {work}/ckpt\n")
    path = work / "p.yaml"
    path.write_text(text)
    return path


SUMS = {"orders": "o_totalprice", "lineitem": "l_extendedprice"}


def source_state(sb: MariaDBSandbox) -> dict[str, tuple]:
    """Per table its row count, and for the two big ones the sum of a price column."""
    out = {}
    for t in TABLES:
        col = SUMS.get(t)
        sql = f"SELECT COUNT(*), {f'CAST(SUM({col}) AS CHAR)' if col else 'NULL'} FROM {t}"
        n, total = sb.query(sql, database=DB)[0]
        out[t] = (int(n), None if total is None else str(total))
    return out


def target_state(sink: str, work: Path) -> dict[str, tuple]:
    """The same, read from the target as a reader would (delta-rs, pyiceberg)."""
    import pyarrow.compute as pc

    from sparkcdc import sinks as sinks_mod

    out = {}
    for t in TABLES:
        if sink == "delta":
            import deltalake

            from sparkcdc.sinks.delta.sink import read_table
            rows = read_table(deltalake.DeltaTable(str(work / "lake" / DB / t)))
        else:
            target = sinks_mod.create("iceberg", {"warehouse": str(work / "lake"),
                                                  "table": f"{DB}.{t}"})
            rows = target.catalog().load_table(f"{DB}.{t}").scan().to_arrow()
        col = SUMS.get(t)
        total = str(pc.sum(rows.column(col)).as_py()) if col else None
        out[t] = (rows.num_rows, total)
    return out


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--sf", type=float, default=1.0)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--sinks", default="delta,iceberg")
    args = ap.parse_args()
    sinks = args.sinks.split(",")
    tmp = Path(tempfile.mkdtemp(prefix="sparkcdc-bench-tpch-"))
    sb = MariaDBSandbox(ServerSettings(extra_args=("--innodb-buffer-pool-size=4G",
                                                   "--innodb-log-file-size=1G",
                                                   "--max-binlog-size=1G")),
                        name="bench-tpch", base_dir=tmp)
    sb.start()
    results: dict[str, list[dict]] = {s: [] for s in sinks}
    try:
        generate(args.sf, tmp / "data")
        load(sb, tmp / "data")
        want = source_state(sb)
        rows = sum(n for n, _ in want.values())
        shutil.rmtree(tmp / "data")
        print(f"TPC-H SF{args.sf:g}: {rows:,} rows in {len(want)} tables", flush=True)
        env = {**os.environ, "BENCH_PW": sb.info.cdc_password,
               "PYSPARK_PYTHON": sys.executable}
        cli = str(ROOT / ".venv" / "bin" / "sparkcdc")
        for r in range(args.rounds):
            for sink in (sinks if r % 2 == 0 else list(reversed(sinks))):
                work = tmp / f"{sink}-r{r}"
                work.mkdir()
                y = pipeline(sb, work, sink)
                m = run([cli, "run", str(y), "--until-caught-up", "--no-progress"], env,
                        work / "run.log")
                if m["rc"]:
                    raise SystemExit((work / "run.log").read_text()[-3000:])
                m["load"] = os.getloadavg()[0]
                got = target_state(sink, work)
                if got != want:
                    raise SystemExit(f"{sink}: the target {got} != the source {want}")
                results[sink].append(m)
                print(f"round {r} {sink}: {m['seconds']:.1f} s, {rows / m['seconds']:,.0f} "
                      f"rows/s, {m['cpu']:.1f} CPU-s, {rows / m['cpu']:,.0f} rows/CPU-s, "
                      f"peak {m['pss']:,.0f} MB, load {m['load']:.1f}", flush=True)
                if r < args.rounds - 1:
                    shutil.rmtree(work)
    finally:
        sb.stop()
        shutil.rmtree(tmp, ignore_errors=True)

    print(f"\nTPC-H SF{args.sf:g} ({rows:,} rows, 8 tables), `sparkcdc run --until-caught-up`, "
          f"medians of {args.rounds}\n")
    print("| sink | wall s | rows/s | CPU-s | rows per CPU-s | peak PSS MB | load |")
    print("|---|---|---|---|---|---|---|")
    for sink in sinks:
        def med(key: str, s: str = sink) -> float:
            return statistics.median(x[key] for x in results[s])
        loads = ", ".join(f"{x['load']:.1f}" for x in results[sink])
        print(f"| {sink} | {med('seconds'):.1f} | {rows / med('seconds'):,.0f} | "
              f"{med('cpu'):.1f} | {rows / med('cpu'):,.0f} | {med('pss'):,.0f} | {loads} |")


if __name__ == "__main__":
    main()
