"""The snapshot's SELECT list on the real servers: JSON arrives as the server's own text.

connectorx reads a bare JSON column by parsing the document and printing it again (keys
re-ordered, spacing dropped, DECIMAL scales dropped, doubles changed in their last digit), so
on MySQL the snapshot selects ``CAST(j AS CHAR CHARACTER SET utf8mb4)``: the text of
``SELECT CAST(j AS CHAR)``, which is also what the binlog path prints (MySQL's binary JSON
printed as the server prints it). MariaDB's JSON is a LONGTEXT whose text is kept as written."""

from __future__ import annotations

import dataclasses

from server_support import is_mysql
from types_support import cdc

from sparkcdc.core.schema import TableId
from sparkcdc.mysql.binlog.reader import BinlogReader
from sparkcdc.mysql.binlog.server_lookups import load_table_schema
from sparkcdc.mysql.offsets import current_offset
from sparkcdc.mysql.snapshot import read_chunk, select_list

DOCS = [
    '{"zebra": 1, "f": 104.66666666666667, "a": 1.0000, "mm": {"y": 2, "b": [1.50, -0.0, 1e300]}}',
    '{"é": "😀", "k": "tab\\there", "n": null, "t": true, "big": 18446744073709551615}',
    '[0.1, 0.30000000000000004, 1.0000, "x", {}, []]',
    '"just a string"',
    '3.14159265358979323846',
]


def _insert(sb, db) -> None:
    sb.execute("CREATE TABLE docs (id INT PRIMARY KEY, j JSON)", database=db)
    with sb.admin_connection(db) as c, c.cursor() as cur:
        for i, doc in enumerate(DOCS, 1):
            # a DECIMAL in a document (1.0000 keeps its scale) as MySQL makes one
            cur.execute("INSERT INTO docs VALUES (%s, %s)", (i, doc))
        cur.execute("INSERT INTO docs VALUES (6, JSON_OBJECT('d', CAST(1.0000 AS DECIMAL(10,4)),"
                    " 'f', 104.66666666666667e0, 'b', 'x'))")
        cur.execute("INSERT INTO docs VALUES (7, NULL)")


def test_mysql_json_arrives_as_the_servers_own_text_on_both_paths(mysql_server, mysql_db):
    conn = cdc(mysql_server)
    start = current_offset(conn)
    _insert(mysql_server, mysql_db)
    end = current_offset(conn)
    schema = load_table_schema(conn, TableId(mysql_db, "docs"))
    assert "CAST(`j` AS CHAR CHARACTER SET utf8mb4)" in select_list(schema)

    server_text = dict(mysql_server.query("SELECT id, CAST(j AS CHAR) FROM docs",
                                          database=mysql_db))
    table = read_chunk(conn, schema, None, None)
    snapshot = dict(zip(table.column("id").to_pylist(), table.column("j").to_pylist()))
    assert snapshot == server_text  # byte for byte

    # what the server prints, as written here from MySQL's rules (keys by length, then
    # bytes; a number parsed from text is a double, printed in its shortest round-trip
    # digits; a DECIMAL made in SQL keeps its scale)
    assert snapshot[1] == ('{"a": 1.0, "f": 104.66666666666667, "mm": {"b": [1.5, -0.0, '
                           '1e300], "y": 2}, "zebra": 1}')
    assert snapshot[6] == '{"b": "x", "d": 1.0000, "f": 104.66666666666667}'
    assert snapshot[7] is None

    records = list(BinlogReader(conn, 7301, {schema.table_id: schema}, flavor="mysql")
                   .read_window(start, end))
    binlog = {r.after["id"]: r.after["j"] for r in records}
    assert binlog == snapshot  # the two read paths agree for the same rows


def test_json_text_is_the_servers_own(mariadb, db):
    """The session's source server: MariaDB keeps a document's text as written; on MySQL
    (``SPARKCDC_TEST_SOURCE=mysql``) the snapshot gives the text its own client gets, as
    the test above checks in detail."""
    conn = cdc(mariadb)
    _insert(mariadb, db)
    schema = load_table_schema(conn, TableId(db, "docs"))
    table = read_chunk(conn, schema, None, None)
    snapshot = dict(zip(table.column("id").to_pylist(), table.column("j").to_pylist()))
    stored = dict(mariadb.query("SELECT id, j FROM docs", database=db))
    assert snapshot == stored
    if not is_mysql(mariadb):
        # spacing, key order and digits as written
        assert [snapshot[i] for i in range(1, 6)] == DOCS


def test_the_first_chunk_holds_the_rows_whose_chunk_key_is_null(mariadb, db):
    """A configured, nullable chunk key: the stream filter and the rollback place a NULL in
    the first chunk (``locate``), so the first chunk's select reads those rows too, and no
    other chunk does; together the chunks read every row once."""
    mariadb.execute("CREATE TABLE n (id INT PRIMARY KEY, c INT NULL)",
                    "INSERT INTO n VALUES (1, NULL), (2, 5), (3, NULL), (4, 20), (5, 10)",
                    database=db)
    conn = cdc(mariadb)
    schema = dataclasses.replace(load_table_schema(conn, TableId(db, "n")), chunk_key="c")
    assert schema.column("c").nullable

    def ids(start, end):
        return sorted(read_chunk(conn, schema, start, end).column("id").to_pylist())

    assert ids(None, 10) == [1, 2, 3]
    assert ids(10, None) == [4, 5]
    assert ids(None, None) == [1, 2, 3, 4, 5]
