"""schema_change.find_ddls against a real binlog: which DDLs a stream stopped at a position
must account for (no Spark: a few statements and one binlog scan each)."""

from sparkcdc.mysql.connection import ConnectionOptions
from sparkcdc.mysql.offsets import current_offset
from sparkcdc.pipeline import schema_change as sc


def _conn(mariadb) -> ConnectionOptions:
    i = mariadb.info
    return ConnectionOptions(i.host, i.port, i.cdc_user, i.cdc_password)


def test_one_alter_is_one_ddl_although_a_same_named_target_was_created(mariadb, db):
    # the ignore-mysql failure of test_ddl_during_the_stream, without Spark: a MySQL target on
    # the source server creates `<db>_t`.`t` after the stream's position; that CREATE once
    # counted as a DDL of <db>.t, so one ALTER with rows before it looked like two DDLs with
    # rows between them, and `ignore` took the table again, nulling the renamed-away column
    conn = _conn(mariadb)
    mariadb.execute("CREATE TABLE t (id INT PRIMARY KEY, a INT)", "INSERT INTO t VALUES (1, 1)",
                    database=db)
    after = current_offset(conn)
    try:
        mariadb.execute(f"CREATE DATABASE `{db}_t`")
        mariadb.execute(f"CREATE TABLE IF NOT EXISTS `{db}_t`.`t` (`id` INT NOT NULL, `a` INT)")
        mariadb.execute("UPDATE t SET a = 101 WHERE id = 1",
                        "ALTER TABLE t RENAME COLUMN a TO a2", "INSERT INTO t VALUES (2, 2)",
                        database=db)
        mariadb.execute("ALTER TABLE t ADD COLUMN b INT", database=f"{db}_t")  # the target's own
        ddls = sc.find_ddls(conn, after, db, "t", "mariadb")  # the sandbox is MariaDB
        assert [(x.statement, x.rows_before) for x in ddls] == [
            ("ALTER TABLE t RENAME COLUMN a TO a2", False)]
        assert after < ddls[0].start
    finally:
        mariadb.execute(f"DROP DATABASE IF EXISTS `{db}_t`")
