"""What the source says when the server can no longer give what a checkpoint needs, and
what a user's query does while the server is out of reach."""

from __future__ import annotations

import random
import time

import pytest
from faults_support import file_sink_rows, wait_until
from server_support import binlog_status

import sparkcdc
from sparkcdc.testing.proxy import FaultProxy


@pytest.fixture(scope="module", autouse=True)
def _register(spark):
    sparkcdc.register(spark)


def test_purged_binlog_is_one_clear_error(spark, mariadb, db, tmp_path):
    mariadb.execute(f"CREATE TABLE `{db}`.t (id INT PRIMARY KEY)",
                    f"INSERT INTO `{db}`.t VALUES (1)")
    base = random.randint(10_000, 4_000_000_000)
    opts = mariadb.source_options(**{"database-name": db, "table-name": f"{db}\\.t",
                                     "server-id": f"{base}-{base + 3}"})

    def run():
        q = (spark.readStream.format("mysql-cdc").options(**opts).load()
             .writeStream.format("parquet").option("checkpointLocation", str(tmp_path / "c"))
             .trigger(availableNow=True).start(str(tmp_path / "o")))
        q.awaitTermination(300)
        return q

    assert run().exception() is None
    (stopped_at,) = [r[0] for r in mariadb.query(binlog_status(mariadb))]
    mariadb.execute(f"INSERT INTO `{db}`.t VALUES (2)", "FLUSH BINARY LOGS",
                    f"INSERT INTO `{db}`.t VALUES (3)")
    for _ in range(50):  # MariaDB keeps a file until its binlog checkpoint has passed it
        (now,) = [r[0] for r in mariadb.query(binlog_status(mariadb))]
        mariadb.execute(f"PURGE BINARY LOGS TO '{now}'")
        if stopped_at not in [r[0] for r in mariadb.query("SHOW BINARY LOGS")]:
            break
        time.sleep(0.2)
    assert stopped_at not in [r[0] for r in mariadb.query("SHOW BINARY LOGS")]
    with pytest.raises(Exception) as e:
        run()
    err = str(e.value)
    assert f"binlog file '{stopped_at}'" in err and "purged" in err
    assert "new checkpoint location" in err and "scan.startup.mode" in err
    assert opts["password"] not in err


def _query_through(spark, server, db, proxy, tmp_path, timeout: str):
    """A user's continuous query of ``db.t`` through ``proxy`` into parquet files."""
    base = random.randint(10_000, 4_000_000_000)
    opts = server.source_options(**{"database-name": db, "table-name": f"{db}\\.t",
                                    "server-id": f"{base}-{base + 3}",
                                    "hostname": proxy.host, "port": str(proxy.port),
                                    "connect.timeout": timeout})
    return (spark.readStream.format("mysql-cdc").options(**opts).load()
            .writeStream.format("parquet").option("checkpointLocation", str(tmp_path / "c"))
            .trigger(processingTime="500 milliseconds").start(str(tmp_path / "o")))


def _ids(tmp_path) -> list[int]:
    return sorted(r["id"] for r in file_sink_rows(tmp_path / "o"))


def _active(q):
    assert q.isActive, q.exception()
    return True


@pytest.mark.long
def test_a_server_out_of_reach_is_waited_out_up_to_connect_timeout(spark, mariadb, db,
                                                                   tmp_path):
    """The address dark for 5 s (a failover moving it, a restart), longer than the
    connection's own retries but within connect.timeout (10 s): the query plans no batch
    meanwhile and goes on after, every change once (before, its driver stopped it with
    ConnectionFailed after about 1.5 s of refused connections). Then dark for good: empty
    triggers are not a silent stall, past connect.timeout the query stops with the
    connection's error."""
    mariadb.execute(f"CREATE TABLE `{db}`.t (id INT PRIMARY KEY)",
                    f"INSERT INTO `{db}`.t VALUES (1)")
    with FaultProxy(mariadb.info.host, mariadb.info.port) as proxy:
        q = _query_through(spark, mariadb, db, proxy, tmp_path, "10s")
        try:
            mariadb.execute(f"INSERT INTO `{db}`.t VALUES (2)")
            wait_until(lambda: _active(q) and _ids(tmp_path) == [1, 2], 120, "the first rows")
            proxy.refuse_for(5)
            proxy.cut_all()
            mariadb.execute(f"INSERT INTO `{db}`.t VALUES (3)")
            time.sleep(5.5)
            assert q.isActive, q.exception()
            assert proxy.stats().refused >= 2, proxy.stats()  # it did try meanwhile
            mariadb.execute(f"INSERT INTO `{db}`.t VALUES (4)")
            wait_until(lambda: _active(q) and _ids(tmp_path) == [1, 2, 3, 4], 120,
                       "the rows written while the server was out of reach, and after")
            proxy.refuse_for(120)
            proxy.cut_all()
            with pytest.raises(Exception) as stopped:  # False (no raise) if it still ran
                q.awaitTermination(60)
            err = str(stopped.value)
            assert "ConnectionFailed" in err and "cannot connect" in err, err
            assert "connect.timeout" in err, err
        finally:
            q.stop()
