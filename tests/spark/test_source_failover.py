"""The ``mysql-cdc`` Spark source, as a user's own streaming query, rides out a failover:
a primary and its GTID replica behind one address (a proxy, as a virtual IP gives it);
MariaDB pairs, or two MySQL 9.7 with ``SPARKCDC_TEST_SOURCE=mysql`` (``failover_pair``).

A query (continuous trigger, Spark's parquet file sink, its own checkpoint) snapshots and
streams from the primary under writers; the writers stop, the replica catches up, the
primary is stopped cleanly (the address dark meanwhile: 9 to 12 s for a MySQL primary with a
replica attached, waited out by the planning and by a batch's binlog read alike, up to
``connect.timeout``), the replica is promoted, the address pointed at it and every connection cut;
writers go on against the replica. The query finds its place in the replica's binlog by GTID
state without stopping; then an ``availableNow`` run from the same checkpoint catches up,
and the changes the file sink committed, applied in ``_seq`` order, give exactly the
replica's table, every change once (``faults_support.check_changelog``).
"""

from __future__ import annotations

import json
import os

import pytest
from failover_support import FAILOVER_DB, FAILOVER_PASSWORD, FAILOVER_USER, tools
from faults_support import (
    Current,
    Writers,
    check_changelog,
    file_sink_rows,
    make_table,
    server_ids,
    table_state,
    wait_until,
)

import sparkcdc

# make test-mysql runs it on MySQL; on MariaDB it is left to make test-faults (make test
# has tests/pipeline/test_failover.py there, and half a minute more would not fit its budget)
ON_MYSQL = os.environ.get("SPARKCDC_TEST_SOURCE") == "mysql"
pytestmark = [pytest.mark.timeout(600), *(() if ON_MYSQL else (pytest.mark.faults,))]

DB, ROWS = FAILOVER_DB, 1500


@pytest.fixture(scope="module", autouse=True)
def _register(spark):
    sparkcdc.register(spark)


class _Query:
    """The user's query: ``mysql-cdc`` through the proxy into parquet files."""

    def __init__(self, spark, proxy, tmp_path):
        self.spark, self.out, self.ckpt = spark, str(tmp_path / "out"), str(tmp_path / "ckpt")
        self.options = {
            "hostname": proxy.host, "port": str(proxy.port), "username": FAILOVER_USER,
            "password": FAILOVER_PASSWORD, "database-name": DB, "table-name": f"{DB}\\.t",
            "server-id": server_ids(), "scan.incremental.snapshot.chunk.size": "500",
            "maxRowsPerBatch": "500",
        }
        self.q = None

    def start(self, **trigger):
        self.q = (self.spark.readStream.format("mysql-cdc").options(**self.options).load()
                  .writeStream.format("parquet").option("checkpointLocation", self.ckpt)
                  .trigger(**trigger).start(self.out))
        return self.q

    def progress(self) -> list[dict]:
        """The batches that read rows, each with its end offset."""
        return [p for p in self.q.recentProgress if p["numInputRows"] > 0]

    def end_offset(self) -> dict:
        return json.loads(self.q.lastProgress["sources"][0]["endOffset"])

    def wait(self, check, what: str):
        """``wait_until``, but a query that stopped fails at once, with its error."""
        def check_or_fail():
            assert self.q.isActive, f"the query stopped waiting for {what}: {self.q.exception()}"
            return check()
        return wait_until(check_or_fail, 300, what)


def test_the_spark_source_resumes_on_the_promoted_replica(spark, failover_pair, tmp_path):
    primary, replica, proxy = failover_pair
    now = Current(primary)
    make_table(primary, DB, ROWS)
    query = _Query(spark, proxy, tmp_path)
    query.start(processingTime="1 second")
    try:
        with Writers(now, DB, ROWS, n=2, pause=0.03) as before:
            query.wait(lambda: query.q.lastProgress
                       and query.end_offset().get("phase") == "streaming", "the stream phase")
            n = len(query.progress())
            query.wait(lambda: len(query.progress()) >= n + 2, "changes read from the primary")
        primary_id = str(primary.info.server_id)
        assert query.end_offset()["pos"]["server"] == primary_id
        tools(primary).caught_up(primary, replica)
        # a clean stop: a MySQL primary with a replica attached keeps the address dark 9 to
        # 12 s, which a task's binlog read waits out (docs/mysql-findings.md, finding 18)
        primary.stop()
        tools(replica).promote(replica)
        now.server = replica
        proxy.upstream = (replica.info.host, replica.info.port)
        proxy.cut_all()
        with Writers(now, DB, ROWS, n=2, pause=0.03, first_seed=3) as after:
            n = len(query.progress())
            query.wait(lambda: len(query.progress()) >= n + 3, "changes read from the replica")
        assert query.q.exception() is None  # ridden out: the query never stopped
        assert query.end_offset()["pos"]["server"] == str(replica.info.server_id)
    finally:
        query.q.stop()
    # writers stopped: the same checkpoint, availableNow, reads up to the replica's position
    q = query.start(availableNow=True)
    q.awaitTermination(300)
    assert q.exception() is None, q.exception()
    assert before.total() > 10 and after.total() > 10
    final = table_state(replica, DB)
    counts = check_changelog(file_sink_rows(query.out), final, "the file sink's changes")
    assert counts["delete"] > 0 and counts["update_preimage"] > 0, counts
    assert len(final) > ROWS // 2
