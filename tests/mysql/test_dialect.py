"""The dialect object the engine and the Spark driver hold for the whole run."""

from sparkcdc.mysql.connection import ConnectionOptions
from sparkcdc.mysql.dialect import MySQLDialect


def test_dialect_survives_a_killed_connection(mariadb):
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


def test_startup_positions(mariadb):
    i = mariadb.info
    with MySQLDialect(ConnectionOptions(i.host, i.port, i.cdc_user, i.cdc_password)) as d:
        files = d.binlog_files()
        assert d.earliest_offset().file == files[0] and d.earliest_offset().pos == 4
        assert d.current_offset().file == files[-1]
