"""``zero-dates.not-null``: a zero date in a NOT NULL column reads as null (the default) or
as the epoch (Debezium's choice), alike in the snapshot and in the binlog, and ``verify``
agrees with the target either way. Nullable columns keep null."""

from __future__ import annotations

import datetime as dt

import deltalake
import pytest
from pipeline_support import source_yaml
from sink_support import read_delta

from sparkcdc.pipeline.commands.verify import Verifier
from sparkcdc.pipeline.definition import parse_pipeline
from sparkcdc.pipeline.run.loop import Runner

UTC = dt.timezone.utc


def _yaml(mariadb, db, tmp_path, mode):
    return f"""
{source_yaml(mariadb, db + ".z", 10)}  zero-dates.not-null: {mode}
sink:
  type: delta
  path: {tmp_path}/lake
pipeline:
  name: z
  parallelism: 1
  checkpoint.location: {tmp_path}/ckpt
"""


def _zero_rows(mariadb, db, first):
    with mariadb.admin_connection(db) as c, c.cursor() as cur:
        cur.execute("SET SESSION sql_mode = ''")  # zero dates allowed, as old schemas have
        cur.execute(f"INSERT INTO z VALUES ({first}, '0000-00-00', '0000-00-00 00:00:00', "
                    f"'0000-00-00 00:00:00', '0000-00-00', '2024-05-06'), "
                    f"({first + 1}, '2024-00-10', '2024-01-02 03:04:05', "
                    f"'2024-01-02 03:04:05', NULL, '2024-05-06')")


@pytest.mark.parametrize("mode", ["epoch", "null"])
def test_zero_dates_in_not_null_columns(spark, mariadb, db, tmp_path, mode):
    with mariadb.admin_connection(db) as c, c.cursor() as cur:
        cur.execute("SET SESSION sql_mode = ''")  # MySQL's default refuses DEFAULT 0
        cur.execute("CREATE TABLE z (id INT PRIMARY KEY, d DATE NOT NULL, "
                    "dt DATETIME NOT NULL, ts TIMESTAMP NOT NULL DEFAULT 0, d_null DATE, "
                    "other DATE NOT NULL)")
    _zero_rows(mariadb, db, 1)  # read by the snapshot
    defn = parse_pipeline(_yaml(mariadb, db, tmp_path, mode), "z.yaml",
                          env={"TEST_PW": mariadb.info.cdc_password})
    Runner(defn, spark, until_caught_up=True).run()
    _zero_rows(mariadb, db, 11)  # read from the binlog
    with mariadb.admin_connection(db) as c, c.cursor() as cur:
        cur.execute("SET SESSION sql_mode = ''")
        cur.execute("UPDATE z SET other = '2025-01-01' WHERE id = 11")  # a zero before image
    Runner(defn, spark, until_caught_up=True).run()
    rows = {r["id"]: r for r in read_delta(deltalake.DeltaTable(
        str(tmp_path / "lake" / db / "z"))).to_pylist()}
    epoch = mode == "epoch"
    for first in (1, 11):
        zero = rows[first]
        assert zero["d"] == (dt.date(1970, 1, 1) if epoch else None)
        assert zero["dt"] == (dt.datetime(1970, 1, 1) if epoch else None)
        assert zero["ts"] == (dt.datetime(1970, 1, 1, tzinfo=UTC) if epoch else None)
        assert zero["d_null"] is None  # nullable: null either way
        part = rows[first + 1]  # a date with a zero month is a zero date too
        assert part["d"] == (dt.date(1970, 1, 1) if epoch else None)
        assert part["dt"] == dt.datetime(2024, 1, 2, 3, 4, 5)
    assert rows[11]["other"] == dt.date(2025, 1, 1)
    results = Verifier(defn).run()
    assert [r.ok for r in results] == [True], [vars(r) for r in results]
