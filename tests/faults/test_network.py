"""Fault injection: connections cut, refused, delayed and throttled; the server restarted.

A pipeline (``sparkcdc.pipeline.run.loop.Runner``, the engine of ``sparkcdc run``) runs in this
process on the shared SparkSession, into Delta, under concurrent writers, with its source
pointed at ``sparkcdc.testing.proxy.FaultProxy`` in front of the real source server (MariaDB,
or MySQL 9.7 with ``SPARKCDC_TEST_SOURCE=mysql``). While it runs, the test breaks things --
in the snapshot and in the stream. The pipeline must ride the fault out (the source reconnects;
the runner restarts a stream that failed with a retryable error); then a final
``--until-caught-up`` run, and:

* ``verify`` (the API of ``sparkcdc verify``) reports every target equal to its source;
* the changelog collected from every applied batch (the runner's ``on_batch`` hook) holds
  each change exactly once, checked per ``_seq`` (tests/support/faults_support.py).
"""

from __future__ import annotations

import random
import time

import pytest
from faults_support import (
    Pipeline,
    Writers,
    check_changelog,
    make_table,
    table_state,
)

from sparkcdc.pipeline.commands.verify import Verifier
from sparkcdc.pipeline.definition import parse_pipeline
from sparkcdc.pipeline.run.loop import Runner
from sparkcdc.testing.proxy import FaultProxy

CHUNK = 500


def _yaml(info, host, port, db, tmp_path, chunk=CHUNK):
    base = random.randint(100_000, 3_000_000_000)
    return f"""
source:
  type: mysql
  hostname: {host}
  port: {port}
  username: {info.cdc_user}
  password: ${{FAULT_PW}}
  tables: {db}.t
  server-id: {base}-{base + 9}
  scan.incremental.snapshot.chunk.size: {chunk}
  connect.timeout: 5s
sink:
  type: delta
  path: {tmp_path}/lake
pipeline:
  name: faults
  parallelism: 1
  checkpoint.location: {tmp_path}/ckpt
  trigger.interval: 1s
  discovery.interval: 5s
  max-rows-per-batch: {chunk}
"""


def _run_with_faults(spark, server, db, tmp_path, rows, faults, through_proxy=True):
    """``faults(pipeline, proxy, table)`` breaks things while the pipeline runs under
    writers; then the final catch-up, verify and the changelog check. Returns the proxy's
    stats and the continuous run's error (None if it rode every fault out)."""
    make_table(server, db, rows)
    info = server.info
    proxy = FaultProxy(info.host, info.port).start()
    host, port = (proxy.host, proxy.port) if through_proxy else (info.host, info.port)
    defn = parse_pipeline(_yaml(info, host, port, db, tmp_path), "faults.yaml",
                          env={"FAULT_PW": info.cdc_password})
    table = f"{db}.t"
    try:
        with Writers(server, db, rows, n=2, pause=0.03) as writers:
            p = Pipeline(spark, defn)
            try:
                p.wait(lambda: p.batches() >= 1, 300, "the first batch")
                faults(p, proxy, table)
            finally:
                error = p.finish()
        proxy.clear()
        # writers stopped: catch up to the server's position, as `run --until-caught-up`
        Runner(defn, spark, until_caught_up=True, on_batch=p.log.hook).run()
        results = Verifier(defn).run()  # through the (now quiet) proxy, as the run connects
    finally:
        proxy.stop()
    assert writers.total() > 30
    final = table_state(server, db)
    assert [r.ok for r in results] == [True], [vars(r) for r in results]
    counts = check_changelog(p.log.rows(), final, "applied batches")
    assert counts["delete"] > 0 and counts["update_preimage"] > 0, counts
    return proxy.stats(), error


def _streaming(p, table):
    p.wait(lambda: p.phase(table) == "streaming", 300, "the stream phase")


# -- the fast subset (make test) -------------------------------------------------------------

@pytest.mark.long
def test_connections_cut_in_snapshot_and_stream(spark, mariadb, db, tmp_path):
    """Every connection (control, chunk reads, binlog) reset mid-snapshot and mid-stream,
    then new ones refused for 3 s."""
    def faults(p, proxy, table):
        assert p.phase(table) != "streaming"
        proxy.cut_all()
        proxy.refuse_for(3)
        _streaming(p, table)
        n = p.batches()
        proxy.cut_all()
        proxy.refuse_for(3)
        p.wait(lambda: p.batches() >= n + 2, 300, "batches after the cut")

    stats, error = _run_with_faults(spark, mariadb, db, tmp_path, 4 * CHUNK, faults)
    assert stats.cut >= 2 and stats.refused >= 1, stats
    assert error is None, error  # ridden out: the continuous run never stopped


# -- the full suite (make test-faults) --------------------------------------------------------

@pytest.mark.faults
def test_cut_in_the_middle_of_transfers(spark, mariadb, db, tmp_path):
    """Chunk reads and binlog windows torn in the middle, several times."""
    def faults(p, proxy, table):
        proxy.cut_after(20_000, count=3)
        _streaming(p, table)
        n = p.batches()
        proxy.cut_after(5_000, count=3)
        p.wait(lambda: p.batches() >= n + 3, 300, "batches after the cuts")

    stats, error = _run_with_faults(spark, mariadb, db, tmp_path, 6 * CHUNK, faults)
    assert stats.cut_mid_transfer >= 2, stats
    assert error is None, error


@pytest.mark.faults
def test_slow_server_during_the_snapshot(spark, mariadb, db, tmp_path):
    """20 ms per chunk of bytes and 256 kB/s each way while the snapshot runs."""
    def faults(p, proxy, table):
        proxy.set_latency(0.02)
        proxy.set_bandwidth(256 * 1024)
        _streaming(p, table)
        proxy.clear()

    _stats, error = _run_with_faults(spark, mariadb, db, tmp_path, 6 * CHUNK, faults)
    assert error is None, error


@pytest.fixture(scope="module")
def restartable(own_source):
    """A server of its own, of the session's kind (MariaDB, or MySQL 9.7 with
    ``SPARKCDC_TEST_SOURCE=mysql``): restarting the session's would disturb nothing, but stay
    apart."""
    with own_source(name="restart") as sb:
        yield sb


@pytest.fixture
def rdb(restartable):
    name = f"r_{random.randrange(16**8):08x}"
    restartable.execute(f"CREATE DATABASE `{name}`")
    yield name
    restartable.execute(f"DROP DATABASE IF EXISTS `{name}`")


@pytest.mark.faults
def test_source_restarted_mid_snapshot_and_mid_stream(spark, restartable, rdb, tmp_path):
    def faults(p, proxy, table):
        assert p.phase(table) != "streaming"
        restartable.restart()
        _streaming(p, table)
        n = p.batches()
        restartable.restart()
        p.wait(lambda: p.batches() >= n + 2, 300, "batches after the restart")

    _stats, error = _run_with_faults(spark, restartable, rdb, tmp_path, 4 * CHUNK, faults,
                                     through_proxy=False)
    assert error is None, error


@pytest.mark.faults
def test_server_away_longer_than_the_retries(spark, mariadb, db, tmp_path):
    """Refused for 40 s: longer than any retry budget. The run may stop with a retryable
    error; the next run resumes from the checkpoint and loses nothing."""
    def faults(p, proxy, table):
        _streaming(p, table)
        proxy.refuse_for(40)
        proxy.cut_all()
        time.sleep(40)

    _stats, error = _run_with_faults(spark, mariadb, db, tmp_path, 2 * CHUNK, faults)
    if error is not None:
        assert getattr(error, "retryable", False) or "ConnectionFailed" in str(error), error
        assert "fix" in str(error) or getattr(error, "fix", None), error


def test_discovery_retries_a_connection_cut_mid_query(mariadb, db):
    """The driver's table discovery torn in the middle of its first big answer: read again."""
    from sparkcdc.mysql.discovery import discover
    from sparkcdc.mysql.options import SourceConfig

    make_table(mariadb, db, 10)
    info = mariadb.info
    with FaultProxy(info.host, info.port) as proxy:
        opts = {**mariadb.source_options(), "hostname": proxy.host, "port": str(proxy.port),
                "database-name": db, "table-name": f"{db}\\.t"}
        conn = SourceConfig.parse(opts).connection
        proxy.cut_after(2_000)  # information_schema.TABLES lists every table of the server
        tables = discover(conn, db, f"{db}\\.t")
        assert proxy.stats().cut_mid_transfer == 1
    assert [str(t) for t in tables] == [f"{db}.t"]


def test_periodic_discovery_rides_out_a_server_away(spark, mariadb, db, tmp_path):
    """The running pipeline's periodic look for new and changed tables meets a server that
    refuses connections: a few failures in a row are logged and retried at the next interval
    (the streams ride such a moment out themselves); only ``_MAX_IN_A_ROW`` in a row stop
    the pipeline, with the retryable error; once the server answers, the count starts over.
    (Before, the first such failure stopped the whole pipeline.)"""
    import sparkcdc
    from sparkcdc.errors import ConnectionFailed
    from sparkcdc.pipeline.run import loop as runner_mod

    sparkcdc.register(spark)  # as Runner.run() does
    make_table(mariadb, db, 10)
    info = mariadb.info
    with FaultProxy(info.host, info.port) as proxy:
        text = _yaml(info, proxy.host, proxy.port, db, tmp_path).replace(
            "connect.timeout: 5s", "connect.timeout: 1s\n  connect.max-retries: 0")
        defn = parse_pipeline(text, "faults.yaml", env={"FAULT_PW": info.cdc_password})
        r = Runner(defn, spark)
        r.states, r._scan_from = {}, None
        try:
            r._rediscover()  # finds the table and starts its stream
            assert list(r.runs) == [f"{db}.t"] and r._discovery_failures == 0
            proxy.refuse_for(600)
            for n in range(1, runner_mod._MAX_IN_A_ROW):
                r._rediscover()  # logged, not raised
                assert r._discovery_failures == n
            with pytest.raises(ConnectionFailed, match="cannot connect to"):
                r._rediscover()
            assert proxy.stats().refused >= runner_mod._MAX_IN_A_ROW
            proxy.clear()
            r._discovery_failures = 2
            r._rediscover()
            assert r._discovery_failures == 0
        finally:
            r._stop_all()
