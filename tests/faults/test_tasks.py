"""Fault injection: executor tasks that fail in the middle and are retried by Spark.

Spark retries a failed task only when the master allows it (``local[2,3]``: two cores, three
attempts per task). A child process reads a table through ``FaultProxy`` with such a master,
and the proxy tears connections in the middle of their transfer (a chunk read dies
half-way). The retried task must yield exactly the rows an undisturbed read yields: every
chunk is selected again and rolled back to the same binlog position, so the consistent
snapshot at that position is the same, row for row, ``_seq`` for ``_seq``.
"""

from __future__ import annotations

import time

import pyarrow.parquet as pq
import pytest
from faults_support import Writers, make_table, run_child, source_options

import sparkcdc
from sparkcdc.testing.proxy import FaultProxy


def _rows(table):
    return sorted((r["id"], r["v"], r["s"], r["_change_type"], r["_seq"])
                  for r in table.to_pylist())


@pytest.mark.faults
def test_retried_tasks_yield_identical_rows(spark, mariadb, db, tmp_path):
    sparkcdc.register(spark)
    rows = 3000
    make_table(mariadb, db, rows)
    direct = source_options(mariadb, db, **{"scan.incremental.snapshot.chunk.size": "1000"})
    with Writers(mariadb, db, rows, n=2, pause=0.02):
        time.sleep(1)
        df, as_of = sparkcdc.read_snapshot(spark, **direct)
        time.sleep(2)  # changes after as_of: each chunk is rolled back over them
    reference = sorted((r["id"], r["v"], r["s"], r["_change_type"], r["_seq"])
                       for r in (x.asDict() for x in df.collect()))
    assert len(reference) > rows // 2

    info = mariadb.info
    with FaultProxy(info.host, info.port) as proxy:
        # two chunk reads (about 20 kB each) die half-way: the connections that sent a chunk
        # query (its columns are selected AS `c0`, `c1`...) and then carried 8 kB
        proxy.cut_after(8_000, count=2, when_sent=b"AS `c0`")
        opts = {**direct, "hostname": proxy.host, "port": str(proxy.port),
                "scan.snapshot.as-of": as_of.to_json(),
                "ssl.mode": "disabled"}  # plain text on the wire, so the proxy sees queries
        out = tmp_path / "read"
        r = run_child({"options": opts, "out": str(tmp_path), "master": "local[2,3]",
                       "batch_read": str(out)})
        stats = proxy.stats()
    assert r.returncode == 0, r.stderr[-3000:]
    assert stats.cut_mid_transfer >= 1, stats
    failed = int(r.stdout.split("FAILED_TASKS ")[1].split()[0])
    assert failed >= 1, (r.stdout, stats)  # a task really failed and was retried
    got = _rows(pq.read_table(out))
    assert got == reference
