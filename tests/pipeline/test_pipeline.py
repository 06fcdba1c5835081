"""A whole-database pipeline against the real MariaDB, the shared SparkSession and Delta:
routes merging shards, a transform (projection + filter), a column added mid-stream under
every behavior class, a table created later, status from the checkpoint, and verify."""

from __future__ import annotations

import io

import deltalake
import pytest
from pipeline_support import source_yaml
from rich.console import Console
from server_support import seq
from sink_support import read_delta

from sparkcdc.errors import ConfigError, SchemaChangeStop
from sparkcdc.pipeline.commands.progress import LiveDisplay
from sparkcdc.pipeline.commands.status import server_position, table_statuses
from sparkcdc.pipeline.commands.validate import validate_pipeline
from sparkcdc.pipeline.commands.verify import Verifier, render
from sparkcdc.pipeline.definition import parse_pipeline
from sparkcdc.pipeline.run.loop import Runner


def pipeline_yaml(mariadb, db, tmp_path, behavior="lenient", extra_source=""):
    source = source_yaml(mariadb, db + ".\\.*", 40)
    return f"""
{source}{extra_source}
sink:
  type: delta
  path: {tmp_path}/lake
route:
  - source-table: {db}.orders_[0-9]+
    sink-table: out.orders
transform:
  - source-table: {db}.customers
    projection: "*, UPPER(name) AS name_upper, __table_name__ AS src"
    filter: "country = 'DE'"
pipeline:
  name: t
  parallelism: 1
  checkpoint.location: {tmp_path}/ckpt
  schema.change.behavior: {behavior}
"""


def load(mariadb, db, tmp_path, behavior="lenient"):
    return parse_pipeline(pipeline_yaml(mariadb, db, tmp_path, behavior), "t.yaml",
                          env={"TEST_PW": mariadb.info.cdc_password})


def delta_rows(tmp_path, db, table, key):
    t = read_delta(deltalake.DeltaTable(str(tmp_path / "lake" / db / table)))
    return {r[key]: r for r in t.to_pylist()}


def run(defn, spark):
    Runner(defn, spark, until_caught_up=True).run()


@pytest.mark.long
def test_whole_database_sync(spark, mariadb, db, tmp_path):
    mariadb.execute(
        "CREATE TABLE orders_1 (id INT PRIMARY KEY, amount INT, note VARCHAR(20))",
        "CREATE TABLE orders_2 LIKE orders_1",
        f"INSERT INTO orders_1 SELECT seq, seq, 'a' FROM {seq(mariadb, 100)}",
        f"INSERT INTO orders_2 SELECT seq, seq, 'b' FROM {seq(mariadb, 200, 101)}",
        "CREATE TABLE customers (id INT PRIMARY KEY, name VARCHAR(20), country CHAR(2))",
        "INSERT INTO customers VALUES (1, 'ada', 'DE'), (2, 'bob', 'FR'), (3, 'cyd', 'DE')",
        "CREATE TABLE plain (k VARCHAR(10) PRIMARY KEY, v DECIMAL(6,2))",
        "INSERT INTO plain VALUES ('a', 1.50), ('b', 2.25)", database=db)
    defn = load(mariadb, db, tmp_path)
    report = validate_pipeline(defn)
    assert report.ok, report.problems
    assert report.tables[f"{db}.orders_2"] == "out.orders"

    screen = io.StringIO()
    display = LiveDisplay(Console(file=screen, force_terminal=True, width=160))
    Runner(defn, spark, until_caught_up=True, display=display).run()
    display.close()
    shown = screen.getvalue()
    for needle in (f"{db}.orders_1", "out.orders", f"{db}.customers", "streaming", "1/1"):
        assert needle in shown  # the live table (rich), as a terminal shows it
    orders = delta_rows(tmp_path, "out", "orders", "id")
    assert sorted(orders) == list(range(1, 201))  # two shards, one target
    cust = delta_rows(tmp_path, db, "customers", "id")
    assert {k: (r["name_upper"], r["src"]) for k, r in cust.items()} == {
        1: ("ADA", "customers"), 3: ("CYD", "customers")}

    # changes while nothing runs: the next run resumes from the checkpoint
    mariadb.execute(
        "INSERT INTO orders_1 VALUES (1000, 5, 'new')", "DELETE FROM orders_2 WHERE id = 101",
        "UPDATE orders_2 SET amount = -1 WHERE id = 150",
        "UPDATE customers SET country = 'FR' WHERE id = 1",  # leaves the filter: deleted
        "UPDATE customers SET country = 'DE' WHERE id = 2",  # enters it
        "UPDATE plain SET v = 9.99 WHERE k = 'a'",  # before the DDL: the old schema's rows
        "ALTER TABLE plain ADD COLUMN extra INT",
        "INSERT INTO plain VALUES ('c', 3.00, 7)",
        "UPDATE plain SET extra = 1 WHERE k = 'b'",
        "CREATE TABLE later (id INT PRIMARY KEY, s VARCHAR(5))",
        "INSERT INTO later VALUES (1, 'x'), (2, 'y')", database=db)

    with pytest.raises(SchemaChangeStop, match=rf"table {db}\.plain changed: added extra"):
        run(load(mariadb, db, tmp_path, "exception"), spark)

    run(defn, spark)  # lenient: the target gets the new column
    orders = delta_rows(tmp_path, "out", "orders", "id")
    assert 101 not in orders and orders[1000]["note"] == "new" and orders[150]["amount"] == -1
    cust = delta_rows(tmp_path, db, "customers", "id")
    assert sorted(cust) == [2, 3] and cust[2]["name_upper"] == "BOB"
    plain = delta_rows(tmp_path, db, "plain", "k")
    assert {k: (str(r["v"]), r["extra"]) for k, r in plain.items()} == {
        "a": ("9.99", None), "b": ("2.25", 1), "c": ("3.00", 7)}
    assert sorted(delta_rows(tmp_path, db, "later", "id")) == [1, 2]  # a table created later

    current, why = server_position(defn)
    assert why is None
    sts = {s.table: s for s in table_statuses(defn, current)}
    assert set(sts) == {f"{db}.{t}" for t in ("orders_1", "orders_2", "customers", "plain",
                                              "later")}
    p = sts[f"{db}.plain"]
    # the change came in the pipeline's stream: the table went on, no new generation
    assert p.generation == 0 and "added extra" in p.note and p.phase == "streaming"
    assert all(s.phase == "streaming" and s.lag_bytes == 0 and not s.running
               for s in sts.values())
    assert sts[f"{db}.orders_1"].chunks_done == sts[f"{db}.orders_1"].chunks_total == 1

    results = {r.target: r for r in Verifier(defn, rows_per_range=40).run()}
    assert results["out.orders"].ok and len(results["out.orders"].ranges) == 5
    assert results["out.orders"].source_rows == 200  # 100 + 100 - 1 deleted + 1 inserted
    assert results[f"{db}.plain"].ok and results[f"{db}.later"].ok
    assert results[f"{db}.customers"].not_verified  # a transform: said, not hidden

    # a target that lost a row and holds a wrong value is caught, key by key; a source row
    # changed after the target's position is not a difference (compared at that position)
    target = deltalake.DeltaTable(str(tmp_path / "lake" / "out" / "orders"))
    target.delete("id = 7")
    target.update(updates={"note": "'tampered'"}, predicate="id = 130")
    mariadb.execute("UPDATE orders_2 SET note = 'later' WHERE id = 120", database=db)
    bad = Verifier(defn, rows_per_range=40, rechecks=1, catch_up_timeout=0).run()
    orders_result = next(r for r in bad if r.target == "out.orders")
    assert not orders_result.ok and orders_result.as_of
    assert orders_result.missing == [(7,)] and orders_result.different == [(130,)]
    assert orders_result.extra == []
    assert [x.range.describe("id") for x in orders_result.ranges if not x.equal] == [
        "id in [-inf, 201)"]  # ids 1..1000: five ranges of 200
    assert not render(bad)


def test_ignore_keeps_the_target_schema_and_a_keyless_transform_fails_clearly(
        spark, mariadb, db, tmp_path):
    mariadb.execute("CREATE TABLE t (id INT PRIMARY KEY, a INT, b INT)",
                    "INSERT INTO t VALUES (1, 1, 1)", database=db)
    text = pipeline_yaml(mariadb, db, tmp_path, "ignore").replace(
        f"source-table: {db}.customers", f"source-table: {db}.nothing")
    defn = parse_pipeline(text, "t.yaml", env={"TEST_PW": mariadb.info.cdc_password})
    run(defn, spark)
    mariadb.execute("ALTER TABLE t DROP COLUMN b, ADD COLUMN c INT, MODIFY a BIGINT",
                    "INSERT INTO t VALUES (2, 2, 2)", database=db)
    run(defn, spark)
    rows = delta_rows(tmp_path, db, "t", "id")
    assert {k: (r["a"], r["b"]) for k, r in rows.items()} == {1: (1, 1), 2: (2, None)}
    assert "c" not in rows[2]  # ignore: the new column stays out of the target
    fields = deltalake.DeltaTable(str(tmp_path / "lake" / db / "t")).schema().fields
    assert [f.type.type for f in fields if f.name == "a"] == ["integer"]  # not long: a
    # retyped column keeps the target's type

    bad = text.replace('projection: "*, UPPER(name) AS name_upper, __table_name__ AS src"',
                       'projection: "a"').replace(f"{db}.nothing", f"{db}.t").replace(
        "ckpt", "ckpt2").replace("    filter: \"country = 'DE'\"\n", "")
    with pytest.raises(ConfigError, match=r"key column\(s\) \['id'\] .* not in its rows"):
        run(parse_pipeline(bad, "t.yaml", env={"TEST_PW": mariadb.info.cdc_password}), spark)


@pytest.mark.long
def test_truncate_drop_and_evolve(spark, mariadb, db, tmp_path):
    mariadb.execute("CREATE TABLE t (id INT PRIMARY KEY, a INT)",
                    "INSERT INTO t VALUES (1, 1), (2, 2)",
                    "CREATE TABLE gone (id INT PRIMARY KEY)", "INSERT INTO gone VALUES (1)",
                    database=db)
    defn = load(mariadb, db, tmp_path, "evolve")
    run(defn, spark)
    mariadb.execute("TRUNCATE TABLE t", "INSERT INTO t VALUES (5, 5)", database=db)
    # the TRUNCATE comes in the pipeline's stream: its batch fails, so nothing of it is
    # lost when the next run (evolve) replays it
    with pytest.raises(SchemaChangeStop, match=rf"table {db}\.t was truncated"):
        run(load(mariadb, db, tmp_path, "exception"), spark)
    mariadb.execute("ALTER TABLE t ADD COLUMN b VARCHAR(5)", "INSERT INTO t VALUES (6, 6, 'six')",
                    "DROP TABLE gone", database=db)
    run(defn, spark)  # evolve: the truncate empties the target, the new column is added
    rows = delta_rows(tmp_path, db, "t", "id")
    assert {k: (r["a"], r["b"]) for k, r in rows.items()} == {5: (5, None), 6: (6, "six")}
    sts = {s.table: s for s in table_statuses(defn)}
    assert sts[f"{db}.gone"].status == "dropped"
    assert sorted(delta_rows(tmp_path, db, "gone", "id")) == [1]  # the target is kept
    assert [r.ok for r in Verifier(defn).run() if r.target == f"{db}.t"] == [True]

    # one run per checkpoint at a time
    with (Runner(defn, spark)._lock_checkpoint(),
          pytest.raises(ConfigError, match="already running with checkpoint")):
        run(defn, spark)


def test_into_a_mysql_target_with_routes(spark, mariadb, db, tmp_path):
    """The same pipeline shape into another sink type: target `db.table` becomes the MySQL
    database and table, written back to the same server by its admin user."""
    mariadb.execute("CREATE TABLE items (id INT PRIMARY KEY, d DATE, t TIME(3), b VARBINARY(8))",
                    "INSERT INTO items VALUES (1, '2024-02-29', '-12:00:00.250', x'00ff'), "
                    "(2, NULL, '838:59:59', NULL)", database=db)
    info = mariadb.info
    text = pipeline_yaml(mariadb, db, tmp_path).replace(f"""sink:
  type: delta
  path: {tmp_path}/lake
""", f"""sink:
  type: mysql
  hostname: 127.0.0.1
  port: {info.port}
  username: {info.admin_user}
  password: {info.admin_password}
""").replace("sink-table: out.orders", f"sink-table: {db}_copy.orders")
    text = text.replace("route:\n", f"route:\n  - source-table: {db}.items\n"
                                    f"    sink-table: {db}_copy.goods\n")
    defn = parse_pipeline(text, "t.yaml", env={"TEST_PW": info.cdc_password})
    try:
        run(defn, spark)
        mariadb.execute("UPDATE items SET b = x'01' WHERE id = 2", database=db)
        run(defn, spark)
        got = mariadb.query(f"SELECT id, d, b FROM `{db}_copy`.goods ORDER BY id")
        assert [(r[0], str(r[1]), r[2]) for r in got] == [
            (1, "2024-02-29", b"\x00\xff"), (2, "None", b"\x01")]
        (res,) = Verifier(defn).run()
        assert res.target == f"{db}_copy.goods" and res.ok, render([res])
    finally:
        mariadb.execute(f"DROP DATABASE IF EXISTS `{db}_copy`")


def test_a_compressed_binlog_end_to_end(spark, mariadb_compressed, tmp_path):
    """A server writing its binlog with log_bin_compress=ON: the snapshot, then inserts,
    updates, deletes, a 3 MiB row and a column added, all read from compressed events (the
    DDL too), land exactly in the Delta target, and verify agrees."""
    import random
    import uuid

    from pipeline_support import delta_rows_by_key, source_rows_by_key

    sb = mariadb_compressed
    db = f"z_{uuid.uuid4().hex[:10]}"
    sb.execute(f"CREATE DATABASE `{db}`")
    try:
        sb.execute("CREATE TABLE t (id INT PRIMARY KEY, v VARCHAR(40), b MEDIUMBLOB)",
                   "INSERT INTO t SELECT seq, CONCAT('value ', seq), NULL FROM seq_1_to_500",
                   database=db)
        text = f"""
{source_yaml(sb, db + ".t", 10)}
sink:
  type: delta
  path: {tmp_path}/lake
pipeline:
  name: z
  parallelism: 1
  checkpoint.location: {tmp_path}/ckpt
  schema.change.behavior: evolve
"""
        defn = parse_pipeline(text, "z.yaml", env={"TEST_PW": sb.info.cdc_password})
        run(defn, spark)  # the snapshot
        assert delta_rows_by_key(tmp_path, db, "t") == source_rows_by_key(sb, db, "t")
        file, pos = sb.query("SHOW MASTER STATUS")[0][:2]
        big = random.Random(5).randbytes(3 << 20)
        with sb.admin_connection(db) as c, c.cursor() as cur:
            cur.execute("INSERT INTO t SELECT seq, CONCAT('new', seq), NULL "
                        "FROM seq_501_to_1200")
            cur.execute("UPDATE t SET v = CONCAT(v, '!') WHERE id % 3 = 0")
            cur.execute("DELETE FROM t WHERE id % 5 = 0")
            cur.execute("UPDATE t SET b = %s WHERE id = 7", (big,))
            cur.execute("ALTER TABLE t ADD COLUMN w INT DEFAULT 4")
            cur.execute("UPDATE t SET w = id WHERE id < 20")
        kinds = {r[2] for r in sb.query(f"SHOW BINLOG EVENTS IN '{file}' FROM {pos}")}
        assert {"Write_rows_compressed_v1", "Update_rows_compressed_v1",
                "Delete_rows_compressed_v1", "Query_compressed"} <= kinds, kinds
        run(defn, spark)  # the changes, streamed
        target = delta_rows_by_key(tmp_path, db, "t")
        assert target == source_rows_by_key(sb, db, "t")
        assert len(target) == 1200 - 240 and target[7][0] == big and target[3][1] == "value 3!"
        (res,) = Verifier(defn).run()
        assert res.ok, render([res])
    finally:
        sb.execute(f"DROP DATABASE IF EXISTS `{db}`")
