"""Canonical types: the snapshot path and the binlog path agree, value by value, with the
values written here by hand, for every MySQL/MariaDB column type sparkcdc maps; the tests on
a source run on MariaDB 10.11 and on MySQL 9.7 (the ``server`` fixture)."""

from __future__ import annotations

import datetime as dt
from decimal import Decimal

import pyarrow as pa
import pytest
from library_reader import LibraryBinlogReader, LibraryRowDecoder
from types_support import (
    COLUMNS,
    UTC,
    assert_rows_equal,
    cdc,
    expected_all_types,
    insert_all_types,
    td,
    wkb_point,
)

from sparkcdc.core.schema import Column, TableId, TableSchema
from sparkcdc.errors import ConfigError, SchemaError
from sparkcdc.mysql.binlog.reader import BinlogReader
from sparkcdc.mysql.binlog.server_lookups import load_table_schema
from sparkcdc.mysql.offsets import current_offset
from sparkcdc.mysql.snapshot import chunk_query, read_chunk, select_literal
from sparkcdc.mysql.types import arrow_schema, parse_column_type
from sparkcdc.testing.mariadb import MariaDBSandbox, ServerSettings


@pytest.fixture
def all_types(server, server_db):
    """The all-types table, its schema, and the binlog window holding its inserts."""
    mariadb, db = server, server_db
    conn = cdc(mariadb)
    mariadb.execute("CREATE TABLE noise (id INT PRIMARY KEY)", database=db)
    start = current_offset(conn)
    insert_all_types(mariadb, db)
    end = current_offset(conn)
    schema = load_table_schema(conn, TableId(db, "all_types"))
    return conn, schema, start, end


def test_snapshot_reads_every_type_canonically(all_types):
    conn, schema, _, _ = all_types
    table = read_chunk(conn, schema, None, None)
    assert table.schema == arrow_schema(schema)
    rows = sorted(table.to_pylist(), key=lambda r: r["id"])
    assert_rows_equal(rows, expected_all_types(), "snapshot")


def test_binlog_after_images_equal_snapshot_and_expected(all_types):
    conn, schema, start, end = all_types
    reader = BinlogReader(conn, 7101, {schema.table_id: schema})
    records = list(reader.read_window(start, end))
    assert [r.op for r in records] == ["c"] * 4
    assert all(r.before is None for r in records)
    assert_rows_equal([r.after for r in records], expected_all_types(), "binlog")
    snapshot = sorted(read_chunk(conn, schema, None, None).to_pylist(), key=lambda r: r["id"])
    assert [r.after for r in records] == snapshot


def test_arrow_table_from_binlog_values_has_the_canonical_schema(all_types):
    """Binlog values build the canonical Arrow schema as they are: the Spark layer relies
    on both paths sharing one Arrow type per column."""
    conn, schema, start, end = all_types
    after = [r.after for r in BinlogReader(conn, 7102, {schema.table_id: schema})
             .read_window(start, end)]
    table = pa.Table.from_pylist(after, schema=arrow_schema(schema))
    assert table.equals(read_chunk(conn, schema, None, None).sort_by("id"))


def test_library_rows_convert_canonically_except_where_the_library_loses_data(all_types):
    """``canonical_row`` over python-mysql-replication's own values agrees everywhere but on
    negative TIME values with a fraction, which the library decodes wrongly: the reason the
    default decoder reads the bytes itself."""
    conn, schema, start, end = all_types
    lib = list(LibraryBinlogReader(conn, 7103, {schema.table_id: schema},
                                   decoder=LibraryRowDecoder()).read_window(start, end))
    diffs = {(w["id"], k) for r, w in zip(lib, expected_all_types()) for k in COLUMNS
             if r.after[k] != w[k]}
    assert diffs == {(3, "tm3"), (3, "tm6")}
    assert lib[2].after["tm6"] != td(12, us=1, neg=True)


def test_timestamps_agree_between_paths_on_a_server_not_in_utc(tmp_path):
    """The server (and the writing session) run at +02:00: TIMESTAMP values are the same
    UTC instants on both paths; DATETIME stays the wall-clock text."""
    with MariaDBSandbox(ServerSettings(time_zone="+02:00"), name="tz",
                        base_dir=tmp_path) as sb:
        sb.execute("CREATE DATABASE tz")
        assert sb.query("SELECT @@global.time_zone")[0][0] == "+02:00"
        sb.execute("CREATE TABLE tz.t (id INT PRIMARY KEY, ts TIMESTAMP(6) NULL, "
                   "dt DATETIME(6), ts0 TIMESTAMP NULL)")
        conn = cdc(sb)
        start = current_offset(conn)
        sb.execute("INSERT INTO tz.t VALUES (1, '2024-01-02 03:04:05.5', "
                   "'2024-01-02 03:04:05.5', '2024-07-01 00:30:00')",
                   "SET SESSION time_zone = '-05:00'",
                   "INSERT INTO tz.t VALUES (2, '2024-01-02 03:04:05.5', "
                   "'2024-01-02 03:04:05.5', '1970-01-01 00:00:00')")  # = 05:00 UTC
        end = current_offset(conn)
        schema = load_table_schema(conn, TableId("tz", "t"))
        want = [
            {"id": 1, "ts": dt.datetime(2024, 1, 2, 1, 4, 5, 500000, tzinfo=UTC),
             "dt": dt.datetime(2024, 1, 2, 3, 4, 5, 500000),
             "ts0": dt.datetime(2024, 6, 30, 22, 30, tzinfo=UTC)},
            {"id": 2, "ts": dt.datetime(2024, 1, 2, 8, 4, 5, 500000, tzinfo=UTC),
             "dt": dt.datetime(2024, 1, 2, 3, 4, 5, 500000),
             "ts0": dt.datetime(1970, 1, 1, 5, 0, tzinfo=UTC)},
        ]
        snap = sorted(read_chunk(conn, schema, None, None).to_pylist(), key=lambda r: r["id"])
        # a reading session in yet another zone changes nothing either
        snap2 = read_chunk(cdc(sb, server_time_zone="+09:00"), schema, None, None)
        binlog = [r.after for r in BinlogReader(conn, 7104, {schema.table_id: schema},
                                                 flavor="mariadb").read_window(start, end)]
        assert snap == want
        assert sorted(snap2.to_pylist(), key=lambda r: r["id"]) == want
        assert binlog == want
        # a TIMESTAMP chunk bound is an instant too
        mid = dt.datetime(2024, 1, 2, 5, 0, tzinfo=UTC)
        schema_ts = TableSchema(schema.table_id, schema.columns, schema.primary_key, "ts")
        assert [r["id"] for r in read_chunk(conn, schema_ts, None, mid).to_pylist()] == [1]
        assert [r["id"] for r in read_chunk(conn, schema_ts, mid, None).to_pylist()] == [2]


# -- the type mapping -------------------------------------------------------------------------

@pytest.mark.parametrize("column_type,arrow", [
    ("tinyint(4)", pa.int8()), ("tinyint(3) unsigned", pa.int16()), ("tinyint(1)", pa.int8()),
    ("smallint(6)", pa.int16()), ("smallint(5) unsigned", pa.int32()),
    ("mediumint(9)", pa.int32()), ("mediumint(8) unsigned", pa.int32()),
    ("int(11)", pa.int32()), ("int(10) unsigned", pa.int64()), ("int unsigned", pa.int64()),
    ("bigint(20)", pa.int64()), ("bigint(20) unsigned", pa.decimal128(20, 0)),
    ("bigint unsigned zerofill", pa.decimal128(20, 0)),
    ("decimal(10,2)", pa.decimal128(10, 2)), ("decimal(38,38)", pa.decimal128(38, 38)),
    ("decimal(39,0)", pa.string()), ("decimal(65,30) unsigned", pa.string()),
    ("float", pa.float32()), ("float(7,3)", pa.float32()), ("double", pa.float64()),
    ("bit(1)", pa.bool_()), ("bit(10)", pa.binary()), ("char(3)", pa.string()),
    ("varchar(20)", pa.string()), ("longtext", pa.string()), ("binary(4)", pa.binary()),
    ("varbinary(3)", pa.binary()), ("longblob", pa.binary()), ("date", pa.date32()),
    ("time", pa.duration("us")), ("time(6)", pa.duration("us")),
    ("datetime(3)", pa.timestamp("us")), ("timestamp(6)", pa.timestamp("us", tz="UTC")),
    ("year(4)", pa.int16()), ("year", pa.int16()), ("enum('a','b')", pa.string()),
    ("set('x','y')", pa.string()), ("json", pa.string()), ("geometry", pa.binary()),
    ("point", pa.binary()), ("multipolygon", pa.binary()),
])
def test_column_type_maps_to_arrow(column_type, arrow):
    assert parse_column_type(column_type).arrow_type == arrow


def test_enum_and_set_members_keep_quotes_and_commas_in_order():
    t = parse_column_type("enum('a','it''s','x,y',' ')")
    assert t.members == ("a", "it's", "x,y", " ")
    assert parse_column_type("set('z','y','x')").members == ("z", "y", "x")


def test_unsupported_column_type_says_so():
    with pytest.raises(SchemaError, match="not supported"):
        parse_column_type("inet6")


def test_server_enum_members_with_quotes_read_alike(server, server_db):
    mariadb, db = server, server_db
    mariadb.execute("CREATE TABLE e (id INT PRIMARY KEY, "
                    "e ENUM('it''s', 'back\\\\slash', 'ünï'), x SET('q', 'r'))",
                    database=db)
    conn = cdc(mariadb)
    start = current_offset(conn)
    mariadb.execute("INSERT INTO e VALUES (1, 'it''s', 'r,q'), (2, 'back\\\\slash', 'q'), "
                    "(3, 'ünï', NULL)",
                    database=db)
    end = current_offset(conn)
    schema = load_table_schema(conn, TableId(db, "e"))
    snap = read_chunk(conn, schema, None, None).to_pylist()
    binlog = [r.after for r in BinlogReader(conn, 7105, [schema.table_id])
              .read_window(start, end)]
    assert [r["e"] for r in snap] == ["it's", "back\\slash", "ünï"]
    assert [r["x"] for r in snap] == ["q,r", "q", None]
    assert binlog == snap


# -- bounds and identifiers -------------------------------------------------------------------

def test_select_literal_forms():
    assert select_literal(5, Column("k", "int(11)")) == "5"
    assert select_literal(True, Column("k", "tinyint(1)")) == "1"
    assert select_literal(Decimal(18446744073709551615),
                          Column("k", "bigint(20) unsigned")) == "18446744073709551615"
    assert select_literal("1" * 50, Column("k", "decimal(65,0)")) == "1" * 50
    assert select_literal("a'b", Column("k", "varchar(5)")) == "_utf8mb4 X'612762'"
    assert select_literal(b"\x00'", Column("k", "varbinary(5)")) == "X'0027'"
    assert select_literal(dt.date(2024, 1, 2), Column("k", "date")) == "DATE'2024-01-02'"
    assert select_literal(dt.datetime(2024, 1, 2, 3, 4, 5, 6), Column("k", "datetime(6)")) \
        == "TIMESTAMP'2024-01-02 03:04:05.000006'"
    with pytest.raises(ConfigError):
        select_literal("1; DROP TABLE t", Column("k", "int(11)"))
    with pytest.raises(ConfigError):
        select_literal(None, Column("k", "int(11)"))


def test_string_bounds_follow_the_column_collation(server, server_db):
    """Membership is decided by the server under the column's collation: 'B' lies in
    ['b', 'c') under utf8mb4_general_ci though Python would put it before 'b'."""
    mariadb, db = server, server_db
    mariadb.execute("CREATE TABLE s (k VARCHAR(10) COLLATE utf8mb4_general_ci PRIMARY KEY, "
                    "v INT)", "INSERT INTO s VALUES ('a', 1), ('B', 2), ('c', 3), ('äb', 4)",
                    database=db)
    conn = cdc(mariadb)
    schema = load_table_schema(conn, TableId(db, "s"))
    got = {r["k"] for r in read_chunk(conn, schema, "b", "c").to_pylist()}
    assert got == {"B"}
    got = {r["k"] for r in read_chunk(conn, schema, None, "b").to_pylist()}
    assert got == {"a", "äb"}  # general_ci: 'äb' = 'ab' < 'b'; Python puts 'ä' after 'c'
    got = {r["k"] for r in read_chunk(conn, schema, "c", None).to_pylist()}
    assert got == {"c"}


def test_odd_identifiers_and_numeric_bounds(server, server_db):
    """Backticks, spaces and unicode in names (MariaDB identifiers are BMP-only)."""
    mariadb, db = server, server_db
    tbl = "we`ird tä ble ☃"
    q = "`" + tbl.replace("`", "``") + "`"
    mariadb.execute(f"CREATE TABLE {q} (`k``ey` DECIMAL(65,0) PRIMARY KEY, "
                    "`col umn ü` VARCHAR(10), `☃` BIGINT UNSIGNED)", database=db)
    mariadb.execute(f"INSERT INTO {q} VALUES (1, 'one', 18446744073709551615), "
                    f"({'9' * 60}, 'big', 0), (-5, 'neg', NULL)", database=db)
    conn = cdc(mariadb)
    schema = load_table_schema(conn, TableId(db, tbl))
    assert schema.chunk_key == "k`ey"
    t = read_chunk(conn, schema, "0", "1" + "0" * 60)
    assert t.column_names == ["k`ey", "col umn ü", "☃"]
    assert sorted(t.to_pylist(), key=lambda r: len(r["k`ey"])) == [
        {"k`ey": "1", "col umn ü": "one", "☃": Decimal(18446744073709551615)},
        {"k`ey": "9" * 60, "col umn ü": "big", "☃": Decimal(0)}]
    assert read_chunk(conn, schema, None, "0").to_pylist() == [
        {"k`ey": "-5", "col umn ü": "neg", "☃": None}]
    assert "`k``ey` >= 0 AND `k``ey` < 1" in chunk_query(schema, "0", "1" + "0" * 60)


def test_empty_chunk_keeps_the_schema(all_types):
    conn, schema, _, _ = all_types
    t = read_chunk(conn, schema, 100, 200)
    assert t.num_rows == 0 and t.schema == arrow_schema(schema)


def test_time_date_and_datetime_bounds(server, server_db):
    mariadb, db = server, server_db
    mariadb.execute("CREATE TABLE tt (k TIME(6) PRIMARY KEY, d DATE, t DATETIME(6))",
                    "INSERT INTO tt VALUES ('-838:59:59', '2024-01-01', '2024-01-01 00:00:00'), "
                    "('-00:00:00.5', '2024-01-02', '2024-01-01 00:00:00.5'), "
                    "('00:00:00', '2024-01-03', '2024-01-01 00:00:01'), "
                    "('100:00:00.000001', '2024-01-04', '2024-01-02 00:00:00')", database=db)
    conn = cdc(mariadb)
    schema = load_table_schema(conn, TableId(db, "tt"))
    got = read_chunk(conn, schema, td(us=500000, neg=True), td(100, us=1)).to_pylist()
    assert [r["k"] for r in got] == [td(us=500000, neg=True), td()]
    got = read_chunk(conn, schema, None, td(us=500000, neg=True)).to_pylist()
    assert [r["k"] for r in got] == [td(838, 59, 59, neg=True)]
    by_d = TableSchema(schema.table_id, schema.columns, schema.primary_key, "d")
    got = read_chunk(conn, by_d, dt.date(2024, 1, 2), dt.date(2024, 1, 4)).to_pylist()
    assert [r["d"] for r in got] == [dt.date(2024, 1, 2), dt.date(2024, 1, 3)]
    by_t = TableSchema(schema.table_id, schema.columns, schema.primary_key, "t")
    got = read_chunk(conn, by_t, dt.datetime(2024, 1, 1, 0, 0, 0, 500000),
                     dt.datetime(2024, 1, 2)).to_pylist()
    assert [r["t"] for r in got] == [dt.datetime(2024, 1, 1, 0, 0, 0, 500000),
                                     dt.datetime(2024, 1, 1, 0, 0, 1)]


def test_geometry_keeps_its_srid_as_ewkb_on_every_path(server, server_db):
    """A geometry with an SRID is EWKB (the SRID flag in its type word, then the SRID), as
    Debezium keeps it; one without (SRID 0) stays plain WKB. The snapshot, the compiled
    and the Python decoders, and the library's values agree byte for byte."""
    mariadb, db = server, server_db
    import struct

    from sparkcdc.mysql.binlog.fastdecode import CRowDecoder
    from sparkcdc.mysql.binlog.row_decoding import PyRowDecoder

    conn = cdc(mariadb)
    mariadb.execute("CREATE TABLE geo (id INT PRIMARY KEY, g GEOMETRY, p POINT)", database=db)
    start = current_offset(conn)
    mariadb.execute("INSERT INTO geo VALUES (1, ST_GeomFromText('POINT(1 2)', 4326), "
                    "ST_GeomFromText('POINT(3 4)')), (2, ST_GeomFromText("
                    "'LINESTRING(0 0, 1 1)', 3857), NULL)", database=db)
    end = current_offset(conn)
    # MySQL reads SRID 4326's WKT as latitude, longitude (the EPSG axis order) and stores
    # x = longitude: POINT(1 2) is stored as (2, 1); MariaDB stores it as written
    x, y = (2, 1) if mariadb.info.server == "mysql" else (1, 2)
    ewkb_point = (b"\x01" + struct.pack("<I", 1 | 0x20000000) + struct.pack("<I", 4326)
                  + struct.pack("<dd", x, y))
    ewkb_line = (b"\x01" + struct.pack("<I", 2 | 0x20000000) + struct.pack("<I", 3857)
                 + struct.pack("<I", 2) + struct.pack("<dddd", 0, 0, 1, 1))
    want = {1: {"g": ewkb_point, "p": wkb_point(3, 4)}, 2: {"g": ewkb_line, "p": None}}
    schema = load_table_schema(conn, TableId(db, "geo"))
    snap = read_chunk(conn, schema, None, None).to_pylist()
    assert {r["id"]: {"g": r["g"], "p": r["p"]} for r in snap} == want
    for reader, decoder in ((BinlogReader, CRowDecoder), (BinlogReader, PyRowDecoder),
                            (LibraryBinlogReader, LibraryRowDecoder)):
        recs = list(reader(conn, 7110, {schema.table_id: schema}, decoder=decoder())
                    .read_window(start, end))
        assert {r.after["id"]: {"g": r.after["g"], "p": r.after["p"]} for r in recs} == want, \
            decoder


def test_enum_and_set_members_added_after_the_schema_was_read(server, server_db):
    """An ALTER that adds ENUM and SET members between the reader's schema and the rows:
    the rows are read by the members their table map carries (Debezium's
    enum_column_test.sql adds members this way, peer_types_debezium.py); the schema's
    shorter list gave '' for a new member, and a SET member past it was dropped."""
    from sparkcdc.mysql.binlog.fastdecode import CRowDecoder
    from sparkcdc.mysql.binlog.row_decoding import PyRowDecoder

    mariadb, db = server, server_db
    mariadb.execute("CREATE TABLE e (id INT PRIMARY KEY, e ENUM('a', 'b'), s SET('x'))",
                    database=db)
    conn = cdc(mariadb)
    schema = load_table_schema(conn, TableId(db, "e"))
    start = current_offset(conn)
    mariadb.execute("INSERT INTO e VALUES (1, 'b', 'x')",
                    "ALTER TABLE e MODIFY e ENUM('a', 'b', 'c,''d'), MODIFY s SET('x', 'y')",
                    "INSERT INTO e VALUES (2, 'c,''d', 'y,x')", database=db)
    end = current_offset(conn)
    want = [{"id": 1, "e": "b", "s": "x"}, {"id": 2, "e": "c,'d", "s": "x,y"}]
    for decoder in (CRowDecoder, PyRowDecoder):
        recs = BinlogReader(conn, 7111, {schema.table_id: schema}, decoder=decoder()
                            ).read_window(start, end)
        assert [r.after for r in recs] == want, decoder
