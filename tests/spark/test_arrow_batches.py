"""``arrow-batches``: the source's change rows carried through Spark as whole Arrow record
batches are, once decoded on the driver, exactly the rows Spark's own row path gives, with
the same Arrow types: every column type of the all-types table, in the snapshot and in the
binlog, including updates and deletes."""

from __future__ import annotations

import pyarrow as pa
import pytest
from server_support import seq
from types_support import ALL_TYPES_DDL, ROW1_SQL, ROW3_SQL, ROW4_ZERO_SQL

from sparkcdc.core.schema import TableId
from sparkcdc.mysql.binlog.server_lookups import load_table_schema
from sparkcdc.mysql.types import arrow_schema
from sparkcdc.spark.arrow_batches import decode, spark_arrow_schema
from sparkcdc.spark.rows import output_schema


def _run(spark, options: dict, checkpoint, out: list) -> None:
    import sparkcdc

    sparkcdc.register(spark)

    def collect(batch, _batch_id):
        out.append(batch.toArrow())

    q = (spark.readStream.format("mysql-cdc").options(**options).load()
         .writeStream.foreachBatch(collect).option("checkpointLocation", str(checkpoint))
         .trigger(availableNow=True).start())
    q.awaitTermination(300)
    assert q.exception() is None


def _rows(tables: list[pa.Table]) -> pa.Table:
    t = pa.concat_tables([t for t in tables if t.num_rows])
    return t.sort_by([("_seq", "ascending"), ("_change_type", "ascending")])


@pytest.mark.long
def test_arrow_batches_equal_spark_rows_for_every_type(spark, mariadb, db, tmp_path):
    mariadb.execute("SET SESSION sql_mode = ''", "SET SESSION time_zone = '+00:00'",
                    ALL_TYPES_DDL, f"INSERT INTO all_types VALUES {ROW1_SQL}",
                    "INSERT INTO all_types (id) VALUES (2)", database=db)
    opts = mariadb.source_options(**{"database-name": db, "table-name": f"{db}\\.all_types",
                                     "server-id": "7300-7305"})
    arrow_opts = {**opts, "arrow-batches": "true", "server-id": "7310-7315"}
    plain, packed = [], []
    _run(spark, opts, tmp_path / "plain", plain)
    _run(spark, arrow_opts, tmp_path / "packed", packed)
    # the binlog: inserts of every value, an update and a delete
    mariadb.execute("SET SESSION sql_mode = ''", "SET SESSION time_zone = '+00:00'",
                    f"INSERT INTO all_types VALUES {ROW3_SQL}", ROW4_ZERO_SQL,
                    "UPDATE all_types SET id = id + 100 WHERE id = 2",
                    "DELETE FROM all_types WHERE id = 1", database=db)
    _run(spark, opts, tmp_path / "plain", plain)
    _run(spark, arrow_opts, tmp_path / "packed", packed)

    schema = load_table_schema(_conn(mariadb), TableId(db, "all_types"))
    want_schema = spark_arrow_schema(output_schema(arrow_schema(schema)), spark)
    got = _rows([decode(t, want_schema) for t in packed])
    want = _rows(plain)
    assert packed and all(t.column_names == ["_rows", "_batch"] for t in packed)
    assert got.schema == want.schema
    assert got.num_rows == want.num_rows == 7  # 2 + 2 inserts, a key change (2), a delete
    assert got.to_pylist() == want.to_pylist()


def _conn(mariadb):
    from sparkcdc.mysql.connection import ConnectionOptions

    i = mariadb.info
    return ConnectionOptions(hostname=i.host, port=i.port, username=i.cdc_user,
                             password=i.cdc_password)


@pytest.mark.long
def test_tables_that_differ_share_one_stream_each_in_its_own_types(spark, mariadb, db,
                                                                   tmp_path):
    """One arrow-batches stream over two tables whose schemas differ (the ``tables``
    shape): per table, exactly the rows and types a stream of that table alone gives,
    snapshot and binlog, with changes of both tables in the same transactions."""
    from sparkcdc.spark.arrow_batches import decode_tables

    mariadb.execute("CREATE TABLE a (id INT PRIMARY KEY, v VARCHAR(20))",
                    "CREATE TABLE b (k BIGINT PRIMARY KEY, d DECIMAL(12,3), ts DATETIME(6))",
                    f"INSERT INTO a SELECT seq, CONCAT('a', seq) FROM {seq(mariadb, 300)}",
                    "INSERT INTO b SELECT seq * 10, seq / 8, '2024-01-01' + INTERVAL seq SECOND"
                    f" FROM {seq(mariadb, 200)}", database=db)
    base = mariadb.source_options(**{"database-name": db,
                                     "scan.incremental.snapshot.chunk.size": "64"})
    both = {**base, "table-name": f"{db}\\.(a|b)", "arrow-batches": "true",
            "server-id": "7320-7325"}
    alone = {t: {**base, "table-name": f"{db}\\.{t}", "server-id": f"{7330 + 10 * n}-"
                 f"{7335 + 10 * n}"} for n, t in enumerate("ab")}
    packed, plain = [], {"a": [], "b": []}

    def run_all():
        _run(spark, both, tmp_path / "both", packed)
        for t in "ab":
            _run(spark, alone[t], tmp_path / f"alone-{t}", plain[t])

    run_all()
    mariadb.execute("BEGIN", "UPDATE a SET v = 'x' WHERE id <= 50",
                    "DELETE FROM b WHERE k <= 300", "INSERT INTO b VALUES (5, 1.5, NULL)",
                    "UPDATE a SET id = id + 1000 WHERE id = 7", "COMMIT", database=db)
    run_all()

    got: dict[str, list] = {}
    for t in packed:
        for name, changes in decode_tables(t).items():
            assert not changes.events
            got.setdefault(name, []).append(changes.rows())
    assert sorted(got) == [f"{db}.a", f"{db}.b"]
    for t in "ab":
        schema = load_table_schema(_conn(mariadb), TableId(db, t))
        want_schema = spark_arrow_schema(output_schema(arrow_schema(schema)), spark)
        mine = _rows([x.cast(want_schema) for x in got[f"{db}.{t}"]])
        theirs = _rows(plain[t])
        assert mine.schema == theirs.schema
        assert mine.num_rows == theirs.num_rows > 200
        assert mine.to_pylist() == theirs.to_pylist()
