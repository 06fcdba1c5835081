"""The row hash ``sparkcdc verify`` compares by: the server's SQL and Python's Arrow twin give
the same hash for every row of the all-types table, on MariaDB 10.11 and on MySQL 9.7 (which
has no MD5()), and both servers give the same answer for the same rows."""

from __future__ import annotations

import pytest
from types_support import cdc, insert_all_types

from sparkcdc.core.schema import TableId
from sparkcdc.mysql import checksums
from sparkcdc.mysql.binlog.server_lookups import load_table_schema
from sparkcdc.mysql.snapshot import read_chunk

HASHED = ["id", "ti", "tiu", "si", "siu", "mi", "miu", "i", "iu", "bi", "biu", "d65", "d650",
          "d30", "d10", "b1", "b10", "b64", "bo", "c", "vc", "tx", "mtx", "bn", "vb", "bl", "d",
          "tm", "tm1", "tm3", "tm6", "dt0", "dt1", "dt2", "dt3", "dt4", "dt5", "dt6", "ts0",
          "ts1", "ts2", "ts3", "ts4", "ts5", "ts6", "y", "e", "st", "j"]


def _hashes(sb, db) -> tuple[dict, dict, dict]:
    """The all-types rows' hashes by key: from the server's SQL, from Python over the rows
    the snapshot reads, and the server's range sums."""
    insert_all_types(sb, db)
    conn = cdc(sb)
    schema = load_table_schema(conn, TableId(db, "all_types"))
    cols = checksums.hashed_columns(schema)
    assert [c.name for c in cols] == HASHED  # FLOAT, DOUBLE and spatial columns are left out
    ranges = checksums.plan_ranges(None, None, 0, 1000)
    server = checksums.row_hashes(conn, [schema], cols, ["id"], ranges, "id")
    table = read_chunk(conn, schema, None, None)
    python = dict(zip(((k,) for k in table.column("id").to_pylist()),
                      (int(h) for h in checksums.arrow_row_hashes(table, cols))))
    sums = checksums.range_sums(conn, [schema], cols, ranges, "id")
    return server, python, sums


def test_server_and_python_hash_every_row_alike(server, server_db):
    sql, python, sums = _hashes(server, server_db)
    assert sorted(sql) == [(1,), (2,), (3,), (4,)]
    assert sql == python
    xor = 0
    for h in python.values():
        xor ^= h
    assert sums == {0: (4, xor)}


def test_the_hash_has_no_md5_and_mysql_9_has_no_md5(mysql_server):
    """Why the hash is SHA2: MySQL 9 removed MD5() (it reads as an unknown function)."""
    assert "MD5" not in checksums.sql_row_hash([]) and "SHA2(" in checksums.sql_row_hash([])
    import pymysql

    with pytest.raises(pymysql.err.MySQLError):
        mysql_server.query("SELECT MD5('x')", database="mysql")
    assert mysql_server.query("SELECT SHA2('x', 256)") == \
        [("2d711642b726b04401627ca9fbac32f5c8530fb1903cc4db02258717921a4881",)]


def test_both_servers_give_the_same_answer(mariadb, db, mysql_server, mysql_db):
    on_mariadb, _, sums_mariadb = _hashes(mariadb, db)
    on_mysql, _, sums_mysql = _hashes(mysql_server, mysql_db)
    assert on_mariadb == on_mysql
    assert sums_mariadb == sums_mysql
