"""Pipeline files from Flink CDC's own documentation and end-to-end tests, run as they are
(tests/pipeline/flink_examples/README.md says where each came from and what was changed:
the connection, the sink section, the test's placeholders) against the real MariaDB, into
local Delta tables, with the shared SparkSession: the snapshot, then changes from the
binlog, each target read back."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

import deltalake
import pytest
from sink_support import read_delta

from sparkcdc.pipeline.definition import load_pipeline
from sparkcdc.pipeline.run.loop import Runner

EXAMPLES = Path(__file__).parent / "flink_examples"


@pytest.fixture
def database(mariadb):
    """Creates the database an example names (fixed names, as the files have them) and
    drops it afterwards."""
    made = []

    def make(name: str, *statements: str) -> None:
        mariadb.execute(f"DROP DATABASE IF EXISTS `{name}`", f"CREATE DATABASE `{name}`")
        made.append(name)
        mariadb.execute(*statements, database=name)

    yield make
    for name in made:
        mariadb.execute(f"DROP DATABASE IF EXISTS `{name}`")


def example(name: str, mariadb, tmp_path):
    """The example file, its connection and lake from the environment, its checkpoint in
    ``tmp_path`` (the files name none: Flink keeps its state elsewhere)."""
    o = mariadb.source_options()
    env = {"MYSQL_HOST": o["hostname"], "MYSQL_PORT": str(o["port"]),
           "MYSQL_USER": o["username"], "MYSQL_PASSWORD": mariadb.info.cdc_password,
           "LAKE": str(tmp_path / "lake")}
    defn = load_pipeline(EXAMPLES / name, env=env)
    return replace(defn, pipeline=replace(defn.pipeline,
                                          checkpoint_location=str(tmp_path / "ckpt")))


def rows(tmp_path, db: str, table: str, key: str) -> dict:
    t = read_delta(deltalake.DeltaTable(str(tmp_path / "lake" / db / table)))
    out = {r[key]: r for r in t.to_pylist()}
    assert len(out) == t.num_rows, f"{db}.{table}: a key is held twice"
    return out


def run(defn, spark) -> None:
    Runner(defn, spark, until_caught_up=True).run()


def test_quickstart_mysql_to_doris_with_routes(spark, mariadb, database, tmp_path):
    """Flink CDC's quickstart (MySQL to Doris, with route): three tables of app_db routed
    to ods_db.ods_*, the Doris sink replaced by Delta; its job name has spaces."""
    database("app_db",
             "CREATE TABLE orders (id INT NOT NULL, price DECIMAL(10,2) NOT NULL, "
             "PRIMARY KEY (id))",
             "INSERT INTO orders VALUES (1, 4.00), (2, 100.00)",
             "CREATE TABLE shipments (id INT NOT NULL, city VARCHAR(255) NOT NULL, "
             "PRIMARY KEY (id))",
             "INSERT INTO shipments VALUES (1, 'beijing'), (2, 'xian')",
             "CREATE TABLE products (id INT NOT NULL, product VARCHAR(255) NOT NULL, "
             "PRIMARY KEY (id))",
             "INSERT INTO products VALUES (1, 'Beer'), (2, 'Cap'), (3, 'Peanut')")
    defn = example("mysql_to_doris_route.yaml", mariadb, tmp_path)
    assert defn.pipeline.name == "Sync MySQL Database to Doris"
    run(defn, spark)
    assert {k: str(r["price"]) for k, r in rows(tmp_path, "ods_db", "ods_orders", "id").items()
            } == {1: "4.00", 2: "100.00"}
    assert {k: r["product"] for k, r in rows(tmp_path, "ods_db", "ods_products", "id").items()
            } == {1: "Beer", 2: "Cap", 3: "Peanut"}
    # the quickstart's next step: changes in MySQL show up in the targets
    mariadb.execute("INSERT INTO orders VALUES (3, 100.00)",
                    "UPDATE orders SET price = 100.00 WHERE id = 1",
                    "DELETE FROM shipments WHERE id = 2", database="app_db")
    run(defn, spark)
    assert {k: str(r["price"]) for k, r in rows(tmp_path, "ods_db", "ods_orders", "id").items()
            } == {1: "100.00", 2: "100.00", 3: "100.00"}
    assert set(rows(tmp_path, "ods_db", "ods_shipments", "id")) == {1}


def test_e2e_soft_delete(spark, mariadb, database, tmp_path):
    """Flink CDC's end-to-end test of ``converter-after-transform: SOFT_DELETE``: every
    table gets ``op_type`` (``__data_event_type__``); a deleted row stays, as ``-D``."""
    database("mysql_inventory",
             "CREATE TABLE customers (id INT NOT NULL PRIMARY KEY, name VARCHAR(255) NOT NULL "
             "DEFAULT 'flink', address VARCHAR(1024), phone_number VARCHAR(512))",
             "INSERT INTO customers VALUES (101, 'user_1', 'Shanghai', '123567891234'), "
             "(102, 'user_2', 'Shanghai', '123567891234')",
             "CREATE TABLE products (id INT NOT NULL AUTO_INCREMENT PRIMARY KEY, name "
             "VARCHAR(255) NOT NULL DEFAULT 'flink', description VARCHAR(512), weight FLOAT)",
             "INSERT INTO products VALUES (106, 'hammer', '16oz carpenter''s hammer', 1.0), "
             "(107, 'rocks', 'box of assorted rocks', 5.3), (111, 'scooter', 'Big scooter', "
             "5.18)")
    defn = example("soft_delete.yaml", mariadb, tmp_path)
    run(defn, spark)
    prods = rows(tmp_path, "mysql_inventory", "products", "id")
    assert {k: r["op_type"] for k, r in prods.items()} == {106: "+I", 107: "+I", 111: "+I"}
    mariadb.execute("UPDATE products SET description = '18oz carpenter hammer' WHERE id = 106",
                    "DELETE FROM products WHERE id = 111",
                    "DELETE FROM customers WHERE id = 102", database="mysql_inventory")
    run(defn, spark)
    prods = rows(tmp_path, "mysql_inventory", "products", "id")
    assert {k: (r["description"], r["op_type"]) for k, r in prods.items()} == {
        106: ("18oz carpenter hammer", "+U"), 107: ("box of assorted rocks", "+I"),
        111: ("Big scooter", "-D")}
    cust = rows(tmp_path, "mysql_inventory", "customers", "id")
    assert {k: (r["name"], r["op_type"]) for k, r in cust.items()} == {
        101: ("user_1", "+I"), 102: ("user_2", "-D")}


def test_e2e_route_mode_all_match_fans_out(spark, mariadb, database, tmp_path):
    """Flink CDC's end-to-end test of ``route-mode: ALL_MATCH``: TABLEBETA matches both
    routes and goes to both targets; TABLEDELTA matches none and keeps its name."""
    stmts = []
    for table, values in (
            ("TABLEALPHA", "(1008, '8'), (1009, '8.1'), (1010, '10'), (1011, '11')"),
            ("TABLEBETA", "(2011, '11'), (2012, '12'), (2013, '13'), (2014, '14')"),
            ("TABLEGAMMA", "(3015, 'Amber'), (3016, 'Black'), (3017, 'Cyan'), (3018, 'Denim')"),
            ("TABLEDELTA", "(4019, 'Yosemite'), (4020, 'El Capitan'), (4024, 'Catalina')")):
        stmts += [f"CREATE TABLE {table} (ID INT NOT NULL PRIMARY KEY, VERSION VARCHAR(17))",
                  f"INSERT INTO {table} VALUES {values}"]
    database("route_test", *stmts)
    defn = example("route_mode_all_match.yaml", mariadb, tmp_path)
    run(defn, spark)

    def versions(db, table):
        return {k: r["VERSION"] for k, r in rows(tmp_path, db, table, "ID").items()}

    alphabet = versions("NEW_route_test", "ALPHABET")
    betagamm = versions("NEW_route_test", "BETAGAMM")
    assert set(alphabet) == {1008, 1009, 1010, 1011, 2011, 2012, 2013, 2014}
    assert set(betagamm) == {2011, 2012, 2013, 2014, 3015, 3016, 3017, 3018}
    assert set(versions("route_test", "TABLEDELTA")) == {4019, 4020, 4024}
    # the test's incremental changes: the update of TABLEBETA reaches both of its targets
    mariadb.execute("INSERT INTO TABLEALPHA VALUES (3007, '7')",
                    "UPDATE TABLEBETA SET VERSION = '2014' WHERE ID = 2014",
                    "INSERT INTO TABLEGAMMA VALUES (3019, 'Emerald')",
                    "DELETE FROM TABLEDELTA WHERE ID = 4024", database="route_test")
    run(defn, spark)
    alphabet = versions("NEW_route_test", "ALPHABET")
    betagamm = versions("NEW_route_test", "BETAGAMM")
    assert alphabet[3007] == "7" and alphabet[2014] == "2014" and 3019 not in alphabet
    assert betagamm[3019] == "Emerald" and betagamm[2014] == "2014" and 3007 not in betagamm
    assert set(versions("route_test", "TABLEDELTA")) == {4019, 4020}


def test_e2e_metadata_column_transform(spark, mariadb, database, tmp_path):
    """Flink CDC's end-to-end test of ``metadata.list: op_ts`` in a wildcard projection:
    ``opts`` is 0 for snapshot rows and the commit time in milliseconds for binlog rows.
    One documented difference: Spark SQL's ``||`` with a null (``__namespace_name__`` of
    MySQL) gives null, where Flink's prints ``null``."""
    database("transform_test",
             "CREATE TABLE TABLEALPHA (ID INT NOT NULL, VERSION VARCHAR(17), PRICEALPHA INT, "
             "AGEALPHA INT, NAMEALPHA VARCHAR(128), PRIMARY KEY (ID))",
             "INSERT INTO TABLEALPHA VALUES (1008, '8', 199, 17, 'Alice'), "
             "(1009, '8.1', 0, 18, 'Bob')",
             "CREATE TABLE TABLEBETA (ID INT NOT NULL, VERSION VARCHAR(17), CODENAMESBETA "
             "VARCHAR(17), AGEBETA INT, NAMEBETA VARCHAR(128), PRIMARY KEY (ID))",
             "INSERT INTO TABLEBETA VALUES (2011, '11', 'Big Sur', 21, 'Eva')")
    defn = example("metadata_column_transform.yaml", mariadb, tmp_path)
    run(defn, spark)
    alpha = rows(tmp_path, "transform_test", "TABLEALPHA", "ID")
    assert {k: (r["NAMEALPHA"], r["type"], r["opts"], r["identifier_name"])
            for k, r in alpha.items()} == {1008: ("Alice", "+I", 0, None),
                                            1009: ("Bob", "+I", 0, None)}
    assert "op_ts" not in alpha[1008]  # a metadata column only where projected
    before = mariadb.query("SELECT UNIX_TIMESTAMP()")[0][0] * 1000
    mariadb.execute("UPDATE TABLEALPHA SET VERSION = '100' WHERE ID = 1009",
                    "INSERT INTO TABLEALPHA VALUES (3007, '7', 79, 16, 'IINA')",
                    database="transform_test")
    after = mariadb.query("SELECT UNIX_TIMESTAMP()")[0][0] * 1000
    run(defn, spark)
    alpha = rows(tmp_path, "transform_test", "TABLEALPHA", "ID")
    assert (alpha[1009]["VERSION"], alpha[1009]["type"]) == ("100", "+U")
    assert alpha[3007]["type"] == "+I"
    for k in (1009, 3007):
        assert before <= alpha[k]["opts"] <= after  # milliseconds since the epoch
    assert alpha[1008]["opts"] == 0
