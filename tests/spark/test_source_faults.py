"""What the source says when the server can no longer give what a checkpoint needs."""

from __future__ import annotations

import random
import time

import pytest
from server_support import binlog_status

import sparkcdc


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
