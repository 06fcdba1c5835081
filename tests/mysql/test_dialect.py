"""The dialect object the engine and the Spark driver hold for the whole run, on MariaDB 10.11
and MySQL 9.7 (the ``server`` fixture); told no flavor, it asks the server."""

import pytest
from server_support import is_mysql

from sparkcdc.core.schema import TableId
from sparkcdc.mysql.binlog.server_lookups import load_table_schema
from sparkcdc.mysql.connection import ConnectionOptions
from sparkcdc.mysql.dialect import MySQLDialect
from sparkcdc.mysql.options import StartupOffset
from sparkcdc.testing.proxy import FaultProxy


def test_dialect_survives_a_killed_connection(server):
    mariadb = server
    i = mariadb.info
    d = MySQLDialect(ConnectionOptions(i.host, i.port, i.cdc_user, i.cdc_password))
    first = d.current_offset()
    conn_id = d._connection().thread_id()
    mariadb.execute(f"KILL CONNECTION {conn_id}")
    mariadb.execute("FLUSH BINARY LOGS")
    again = d.current_offset()
    assert again > first
    assert d._connection().thread_id() != conn_id
    d.close()


@pytest.mark.parametrize("read, sent", [("current_offset", b"SHOW"),
                                        ("binlog_files", b"SHOW BINARY LOGS")])
def test_a_read_cut_after_the_ping_is_read_again(server, read, sent):
    """The connection is cut in the middle of the server's answer, after the ping before the
    query found it alive (a failover's address moved, a restart): the dialect reads again on
    a new connection instead of raising the driver's 2013 (which stopped a user's Spark query
    in ``latestOffset`` across a MySQL failover)."""
    i = server.info
    with FaultProxy(i.host, i.port) as proxy, MySQLDialect(  # in the clear: the proxy sees it
            ConnectionOptions(proxy.host, proxy.port, i.cdc_user, i.cdc_password,
                              ssl_mode="disabled")) as d:
        before = getattr(d, read)()  # connected, flavor known
        proxy.cut_after(1, when_sent=sent)
        again = getattr(d, read)()
        assert proxy.stats().cut_mid_transfer == 1
    assert again == before  # nothing was written in between


def test_startup_positions(server):
    i = server.info
    with MySQLDialect(ConnectionOptions(i.host, i.port, i.cdc_user, i.cdc_password)) as d:
        assert d.flavor == ("mysql" if is_mysql(server) else "mariadb")
        files = d.binlog_files()
        assert d.earliest_offset().file == files[0] and d.earliest_offset().pos == 4
        assert d.current_offset().file == files[-1]


def test_a_gtid_set_alone_starts_after_the_transactions_it_holds(server, server_db):
    mariadb, db = server, server_db
    i = mariadb.info
    mariadb.execute("CREATE TABLE t (id INT PRIMARY KEY)", "INSERT INTO t VALUES (1)",
                    database=db)
    mariadb.execute("FLUSH BINARY LOGS")  # the set's point is in an older file
    mariadb.execute("INSERT INTO t VALUES (2)", database=db)
    held = mariadb.query("SELECT @@GLOBAL.gtid_executed" if is_mysql(mariadb)
                         else "SELECT @@GLOBAL.gtid_binlog_pos")[0][0]
    mariadb.execute("INSERT INTO t VALUES (3)", "INSERT INTO t VALUES (4)", database=db)
    conn = ConnectionOptions(i.host, i.port, i.cdc_user, i.cdc_password)
    with MySQLDialect(conn, server_id=7410) as d:
        start = d.specific_offset(StartupOffset(gtid_set=held))
        assert start.gtid == held and start.server == str(i.server_id)
        got = [r.after["id"] for r in d.read_window(
            load_table_schema(conn, TableId(db, "t")), start, d.current_offset())]
    assert got == [3, 4]
