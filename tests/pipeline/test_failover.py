"""A pipeline rides out a failover: a real primary and its GTID replica (MariaDB with
``log_slave_updates``, or MySQL 9.7 under ``make test-mysql``) behind one address, a proxy,
as a virtual IP gives it.

The pipeline snapshots and streams from the primary under writers; the writers stop, the
replica catches up, the primary is stopped, the replica promoted and the address pointed at
it; writers go on against the replica. The stream finds its place in the replica's binlog
by GTID state and goes on. Then a final catch-up; the Delta target read back equals the
replica's table, every key once; ``verify`` says equal; and the changelog of every applied
batch holds each change exactly once (tests/support/faults_support.py).
"""

from __future__ import annotations

import random

import pytest
from failover_support import FAILOVER_DB, FAILOVER_PASSWORD, failover_yaml, tools
from faults_support import (
    Current,
    Pipeline,
    Writers,
    check_changelog,
    make_table,
    table_state,
)
from sink_support import read_delta

from sparkcdc.pipeline.commands.verify import Verifier
from sparkcdc.pipeline.definition import parse_pipeline
from sparkcdc.pipeline.run.loop import Runner

pytestmark = pytest.mark.timeout(600)

DB, PASSWORD, ROWS = FAILOVER_DB, FAILOVER_PASSWORD, 1500


@pytest.mark.long
def test_the_pipeline_resumes_on_the_promoted_replica(spark, failover_pair, tmp_path):
    primary, replica, proxy = failover_pair
    now = Current(primary)
    make_table(primary, DB, ROWS)
    defn = parse_pipeline(failover_yaml(proxy.port, tmp_path, "failover",
                                        random.randint(100_000, 3_000_000_000)),
                          "failover.yaml",
                          env={"PIPE_PW": PASSWORD})
    table = f"{DB}.t"
    p = Pipeline(spark, defn)
    try:
        with Writers(now, DB, ROWS, n=2, pause=0.03) as before:
            p.wait(lambda: p.phase(table) == "streaming", 300, "the stream phase")
            n = p.batches()
            p.wait(lambda: p.batches() >= n + 2, 300, "batches streamed from the primary")
        tools(primary).caught_up(primary, replica)
        primary.stop()
        tools(replica).promote(replica)
        now.server = replica
        proxy.upstream = (replica.info.host, replica.info.port)
        proxy.cut_all()
        with Writers(now, DB, ROWS, n=2, pause=0.03, first_seed=3) as after:
            n = p.batches()
            p.wait(lambda: p.batches() >= n + 3, 300, "batches streamed from the replica")
    finally:
        error = p.finish()
    assert error is None, error  # ridden out: the continuous run never stopped
    assert p.position(table)["server"] == str(replica.info.server_id)  # it did move over
    # writers stopped: catch up, as `sparkcdc run --until-caught-up`
    Runner(defn, spark, until_caught_up=True, on_batch=p.log.hook).run()
    final = table_state(replica, DB)
    got = read_delta(tmp_path / "lake" / DB / "t").to_pylist()
    assert len(got) == len({r["id"] for r in got}), "a key is held twice"
    assert {r["id"]: (r["v"], r["s"]) for r in got} == final
    results = Verifier(defn).run()
    assert [r.ok for r in results] == [True], [vars(r) for r in results]
    assert before.total() > 10 and after.total() > 10
    counts = check_changelog(p.log.rows(), final, "applied batches")
    assert counts["delete"] > 0 and counts["update_preimage"] > 0, counts
