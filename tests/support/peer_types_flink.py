"""Flink CDC's MySQL type tests, restated: their DDL, their rows and the values their tests
expect, converted to sparkcdc's canonical values (docs/types.md), with each deliberate
difference named where it is.

Read from apache/flink-cdc at commit 23fb108e9bea7f689230fa188e5f80c6eef0dbc3 (2026-08-21):

- flink-cdc-connect/flink-cdc-source-connectors/flink-connector-mysql-cdc/src/test/resources/
  ddl/column_type_test.sql and column_type_test_mysql8.sql (table ``full_types``), asserted by
  .../mysql/table/MySqlConnectorITCase.java ``testAllDataTypes`` (snapshot, then
  ``UPDATE full_types SET timestamp_c = '2020-07-17 18:33:22'`` read from the binlog);
- flink-cdc-connect/flink-cdc-pipeline-connectors/flink-cdc-pipeline-connector-mysql/src/
  test/resources/ddl/column_type_test_mysql8.sql (``common_types``, ``time_types``,
  ``precision_types``, ``json_types``, ``zerofill_types``), asserted by
  .../mysql/source/MySqlFullTypesITCase.java;
- .../flink-connector-mysql-cdc/src/test/resources/ddl/ancient_date_and_time.sql, asserted by
  .../mysql/source/MySqlAncientDateAndTimeITCase.java
  ``testAncientDateAndTimeWithoutTimeAdjuster`` (its server runs with
  ``sql_mode = STRICT_TRANS_TABLES,NO_ENGINE_SUBSTITUTION``).
"""

from __future__ import annotations

import datetime as dt
from decimal import Decimal
from typing import Any

from peer_types_support import (
    PeerFile,
    PeerTable,
    changed,
    copied,
    copy_rows,
    dec,
    nano_of_day,
    utc,
    wall,
    wkb,
)
from types_support import f32

FLINK = "apache/flink-cdc@23fb108e9bea7f689230fa188e5f80c6eef0dbc3"

# the JSON document as column_type_test.sql writes it: MySQL keeps the document and prints
# it as '{"key1": "value1"}' (Flink's snapshot expects that; its binlog path, with
# use.legacy.json.format, prints '{"key1":"value1"}': sparkcdc gives the server's text on
# both paths). MariaDB's JSON is LONGTEXT: the text as written, line breaks and all.
JSON_LITERAL = '{\n    "key1": "value1"\n  }'


def _full_types_ddl(collection: str) -> str:
    return f"""CREATE TABLE full_types (
    id SERIAL, tiny_c TINYINT, tiny_un_c TINYINT UNSIGNED, tiny_un_z_c TINYINT UNSIGNED ZEROFILL,
    small_c SMALLINT, small_un_c SMALLINT UNSIGNED, small_un_z_c SMALLINT UNSIGNED ZEROFILL,
    medium_c MEDIUMINT, medium_un_c MEDIUMINT UNSIGNED,
    medium_un_z_c MEDIUMINT UNSIGNED ZEROFILL, int_c INTEGER, int_un_c INTEGER UNSIGNED,
    int_un_z_c INTEGER UNSIGNED ZEROFILL, int11_c INT(11), big_c BIGINT,
    big_un_c BIGINT UNSIGNED, big_un_z_c BIGINT UNSIGNED ZEROFILL, varchar_c VARCHAR(255),
    char_c CHAR(3), real_c REAL, float_c FLOAT, float_un_c FLOAT UNSIGNED,
    float_un_z_c FLOAT UNSIGNED ZEROFILL, double_c DOUBLE, double_un_c DOUBLE UNSIGNED,
    double_un_z_c DOUBLE UNSIGNED ZEROFILL, decimal_c DECIMAL(8, 4),
    decimal_un_c DECIMAL(8, 4) UNSIGNED, decimal_un_z_c DECIMAL(8, 4) UNSIGNED ZEROFILL,
    numeric_c NUMERIC(6, 0), big_decimal_c DECIMAL(65, 1), bit1_c BIT, tiny1_c TINYINT(1),
    boolean_c BOOLEAN, date_c DATE, time_c TIME(0), datetime3_c DATETIME(3),
    datetime6_c DATETIME(6), timestamp_c TIMESTAMP, file_uuid BINARY(16), bit_c BIT(64),
    text_c TEXT, tiny_blob_c TINYBLOB, blob_c BLOB, medium_blob_c MEDIUMBLOB,
    long_blob_c LONGBLOB, year_c YEAR, enum_c enum('red', 'white') default 'red',
    set_c SET('a', 'b'), json_c JSON, point_c POINT, geometry_c GEOMETRY,
    linestring_c LINESTRING, polygon_c POLYGON, multipoint_c MULTIPOINT,
    multiline_c MULTILINESTRING, multipolygon_c MULTIPOLYGON,
    geometrycollection_c {collection}, varchar_len0_c VARCHAR(0), PRIMARY KEY (id)
) DEFAULT CHARSET=utf8"""


_GEOMETRY_SQL = """ST_GeomFromText('POINT(1 1)'),
    ST_GeomFromText('POLYGON((1 1, 2 1, 2 2,  1 2, 1 1))'),
    ST_GeomFromText('LINESTRING(3 0, 3 3, 3 5)'),
    ST_GeomFromText('POLYGON((1 1, 2 1, 2 2,  1 2, 1 1))'),
    ST_GeomFromText('MULTIPOINT((1 1),(2 2))'),
    ST_GeomFromText('MultiLineString((1 1,2 2,3 3),(4 4,5 5))'),
    ST_GeomFromText('MULTIPOLYGON(((0 0, 10 0, 10 10, 0 10, 0 0)), ((5 5, 7 5, 7 7, 5 7, 5 5)))'),
    ST_GeomFromText('GEOMETRYCOLLECTION(POINT(10 10), POINT(30 30), LINESTRING(15 15, 20 20))')"""

_FULL_TYPES_TEMPORAL = """'2020-07-17', '18:00:22', '2020-07-17 18:00:22.123',
    '2020-07-17 18:00:22.123456', '2020-07-17 18:00:22',"""
_FULL_TYPES_ROW = f"""INSERT INTO full_types VALUES (DEFAULT, 127, 255, 255, 32767, 65535, 65535,
    8388607, 16777215, 16777215, 2147483647, 4294967295, 4294967295, 2147483647,
    9223372036854775807, 18446744073709551615, 18446744073709551615,
    'Hello World', 'abc', 123.102, 123.102, 123.103, 123.104, 404.4443, 404.4444, 404.4445,
    123.4567, 123.4568, 123.4569, 345.6, 34567892.1, 0, 1, true,
    {_FULL_TYPES_TEMPORAL}
    unhex(replace('651aed08-390f-4893-b2f1-36923e7b7400', '-', '')),
    b'0000010000000100000001000000010000000100000001000000010000000100',
    'text', UNHEX(HEX(16)), UNHEX(HEX(16)), UNHEX(HEX(16)), UNHEX(HEX(16)), 2021,
    'red', 'a,b,a', '{JSON_LITERAL}', {_GEOMETRY_SQL}, '')"""

# Flink's expected geometries are GeoJSON text ({"coordinates":[1,1],"type":"Point",
# "srid":0}); sparkcdc gives the stored geometry as WKB (EWKB with an SRID), so the same
# coordinates are compared as WKB
_POLYGON = [[[1, 1], [2, 1], [2, 2], [1, 2], [1, 1]]]
_GEOMETRIES = {
    "point_c": wkb("Point", [1, 1]),
    "geometry_c": wkb("Polygon", _POLYGON),
    "linestring_c": wkb("LineString", [[3, 0], [3, 3], [3, 5]]),
    "polygon_c": wkb("Polygon", _POLYGON),
    "multipoint_c": wkb("MultiPoint", [[1, 1], [2, 2]]),
    "multiline_c": wkb("MultiLineString", [[[1, 1], [2, 2], [3, 3]], [[4, 4], [5, 5]]]),
    "multipolygon_c": wkb("MultiPolygon", [[[[0, 0], [10, 0], [10, 10], [0, 10], [0, 0]]],
                                           [[[5, 5], [7, 5], [7, 7], [5, 7], [5, 5]]]]),
    "geometrycollection_c": wkb("GeometryCollection", [
        ("Point", [10, 10]), ("Point", [30, 30]), ("LineString", [[15, 15], [20, 20]])]),
}


def _full_types_row(mysql: bool) -> dict[str, Any]:
    """MySqlConnectorITCase's expected ``+I[...]`` row."""
    return {
        # SERIAL is BIGINT UNSIGNED: decimal(20, 0), as Flink's pipeline connector maps it
        # (the ITCase declares its Flink column INT)
        "id": Decimal(1),
        "tiny_c": 127, "tiny_un_c": 255, "tiny_un_z_c": 255, "small_c": 32767,
        "small_un_c": 65535, "small_un_z_c": 65535, "medium_c": 8388607,
        "medium_un_c": 16777215, "medium_un_z_c": 16777215, "int_c": 2147483647,
        "int_un_c": 4294967295, "int_un_z_c": 4294967295, "int11_c": 2147483647,
        "big_c": 9223372036854775807, "big_un_c": Decimal(18446744073709551615),
        "big_un_z_c": Decimal(18446744073709551615), "varchar_c": "Hello World",
        "char_c": "abc",
        "real_c": 123.102,  # REAL is DOUBLE
        "float_c": f32(123.102), "float_un_c": f32(123.103), "float_un_z_c": f32(123.104),
        "double_c": 404.4443, "double_un_c": 404.4444, "double_un_z_c": 404.4445,
        "decimal_c": dec("123.4567"), "decimal_un_c": dec("123.4568"),
        "decimal_un_z_c": dec("123.4569"), "numeric_c": dec("346"),
        "big_decimal_c": "34567892.1",  # DECIMAL(65, 1): text, as Flink's STRING
        "bit1_c": False,
        # Flink reads TINYINT(1) and BOOLEAN as BOOLEAN (true); sparkcdc keeps the number
        # (a TINYINT(1) holds -128..127; docs/types.md)
        "tiny1_c": 1, "boolean_c": 1,
        "date_c": dt.date(2020, 7, 17), "time_c": dt.timedelta(hours=18, seconds=22),
        "datetime3_c": wall("2020-07-17 18:00:22.123"),
        "datetime6_c": wall("2020-07-17 18:00:22.123456"),
        "timestamp_c": utc("2020-07-17 18:00:22"),
        # the ITCase reads TO_BASE64(DECODE(file_uuid, 'UTF-8')), the bytes mangled through
        # UTF-8 (ZRrvv70I...); the pipeline test's parseHexBinary is the stored value
        "file_uuid": bytes.fromhex("651aed08390f4893b2f136923e7b7400"),
        "bit_c": bytes([4] * 8),  # [4, 4, 4, 4, 4, 4, 4, 4]
        "text_c": "text",
        "tiny_blob_c": b"\x10", "blob_c": b"\x10", "medium_blob_c": b"\x10",
        "long_blob_c": b"\x10",  # [16]
        "year_c": 2021, "enum_c": "red",
        "set_c": "a,b",  # Flink: the array [a, b]; sparkcdc: the server's text
        "json_c": '{"key1": "value1"}' if mysql else JSON_LITERAL,
        **_GEOMETRIES,
        # MariaDB 10.11's ST_GeomFromText reads no 'MULTIPOINT((1 1),(2 2))' (only
        # 'MULTIPOINT(1 1,2 2)') and returns NULL: the server stores null
        **({} if mysql else {"multipoint_c": None}),
        "varchar_len0_c": "",
    }


def _full_types(collection: str, mysql: bool) -> PeerTable:
    row = _full_types_row(mysql)
    return PeerTable(
        "full_types", _full_types_ddl(collection), (_FULL_TYPES_ROW,), (row,),
        update=("UPDATE full_types SET timestamp_c = '2020-07-17 18:33:22' WHERE id=1",),
        want_updated=changed((row,), "id", {1: {"timestamp_c": utc("2020-07-17 18:33:22")}}))


def full_types_57(mysql: bool) -> PeerFile:
    return PeerFile(f"{FLINK} flink-connector-mysql-cdc ddl/column_type_test.sql",
                    (_full_types("GEOMETRYCOLLECTION", mysql),))


def full_types_mysql8(mysql: bool) -> PeerFile:
    return PeerFile(f"{FLINK} flink-connector-mysql-cdc ddl/column_type_test_mysql8.sql",
                    (_full_types("GEOMCOLLECTION", mysql),),
                    mariadb_skip="MariaDB 10.11 has no GEOMCOLLECTION type name (the file's "
                                 "only difference from column_type_test.sql, which runs there)")


# -- the pipeline connector's column_type_test_mysql8.sql -------------------------------------

def _common_types(mysql: bool) -> PeerTable:
    ddl = (_full_types_ddl("GEOMETRYCOLLECTION").replace("full_types", "common_types")
           .replace("bit1_c BIT, ", "bit1_c BIT, bit3_c BIT(3), ")
           .replace("date_c DATE, time_c TIME(0), datetime3_c DATETIME(3),\n"
                    "    datetime6_c DATETIME(6), timestamp_c TIMESTAMP, ", "")
           .replace("    set_c SET('a', 'b'), ", "    ")
           .replace("varchar_len0_c VARCHAR(0)",
                    "long_c LONG, long_varchar_c LONG VARCHAR, varchar_len0_c VARCHAR(0)"))
    insert = (_FULL_TYPES_ROW.replace("full_types", "common_types")
              .replace("34567892.1, 0, 1, true,", "34567892.1, 0, b'011', 1, true,")
              .replace(_FULL_TYPES_TEMPORAL + "\n    ", "")
              .replace(f"'red', 'a,b,a', '{JSON_LITERAL}'", """'red', '{"key1":"value1"}'"""))
    insert = insert.removesuffix(", '')") + ", 'long', 'long varchar', '')"
    full = _full_types_row(mysql)
    row: dict[str, Any] = {}
    for k, v in full.items():
        if k in ("date_c", "time_c", "datetime3_c", "datetime6_c", "timestamp_c", "set_c"):
            continue
        if k == "varchar_len0_c":
            row.update(long_c="long", long_varchar_c="long varchar")  # LONG is MEDIUMTEXT
        row[k] = v
        if k == "bit1_c":
            row["bit3_c"] = b"\x03"  # new byte[] {3}
    row["json_c"] = '{"key1": "value1"}' if mysql else '{"key1":"value1"}'
    return PeerTable(
        "common_types", ddl, (insert,), (row,),
        update=("UPDATE common_types SET big_decimal_c = null WHERE id = 1",),
        want_updated=changed((row,), "id", {1: {"big_decimal_c": None}}))


_TIME_ROW = {
    "id": Decimal(1), "year_c": 2021, "date_c": dt.date(2020, 7, 17),  # fromEpochDay(18460)
    "time_c": nano_of_day(64822000_000_000), "time_3_c": nano_of_day(64822123_000_000),
    "time_6_c": nano_of_day(64822123_456_000), "datetime_c": wall("2020-07-17 18:00:22"),
    "datetime3_c": wall("2020-07-17 18:00:22.123"),
    "datetime6_c": wall("2020-07-17 18:00:22.123456"), "timestamp_c": utc("2020-07-17 18:00:22"),
    "timestamp3_c": utc("2020-07-17 18:00:22.123"),
    "timestamp6_c": utc("2020-07-17 18:00:22.123456"), "timestamp_def_c": None}
_TIME_TYPES = PeerTable(
    "time_types",
    """CREATE TABLE time_types (id SERIAL, year_c YEAR, date_c DATE, time_c TIME(0),
    time_3_c TIME(3), time_6_c TIME(6), datetime_c DATETIME(0), datetime3_c DATETIME(3),
    datetime6_c DATETIME(6), timestamp_c TIMESTAMP(0), timestamp3_c TIMESTAMP(3),
    timestamp6_c TIMESTAMP(6), timestamp_def_c TIMESTAMP NULL DEFAULT '2000-01-01 00:00:00',
    PRIMARY KEY (id)) DEFAULT CHARSET=utf8""",
    ("""INSERT INTO time_types VALUES (DEFAULT, '2021', '2020-07-17', '18:00:22',
    '18:00:22.123', '18:00:22.123456', '2020-07-17 18:00:22', '2020-07-17 18:00:22.123',
    '2020-07-17 18:00:22.123456', '2020-07-17 18:00:22', '2020-07-17 18:00:22.123',
    '2020-07-17 18:00:22.123456', NULL)""",),
    (_TIME_ROW,),
    update=("UPDATE time_types SET time_6_c = null, timestamp_def_c = default WHERE id = 1",),
    want_updated=({**_TIME_ROW, "time_6_c": None,
                   "timestamp_def_c": utc("2000-01-01 00:00:00")},))

_PRECISION_COLUMNS = ("float_c0 FLOAT(6, 0), float_c1 FLOAT(20, 3), float_c2 FLOAT(24, 12), "
                      "real_c0 REAL(6, 0), real_c1 REAL(20, 3), real_c2 REAL(24, 12), "
                      "double_c0 DOUBLE(6, 0), double_c1 DOUBLE(20, 3), "
                      "double_c2 DOUBLE(24, 12), double_precision_c0 DOUBLE PRECISION(6, 0), "
                      "double_precision_c1 DOUBLE PRECISION(20, 3), "
                      "double_precision_c2 DOUBLE PRECISION(24, 12)")
_PRECISION_ROW = {
    "id": Decimal(1), "decimal_c0": dec("123.40"), "decimal_c1": dec("1234.5000"),
    "decimal_c2": dec("1234.5600"),  # DECIMAL(p, s) keeps its s digits
    "time_c": nano_of_day(64800000_000_000), "time_3_c": nano_of_day(64822100_000_000),
    "time_6_c": nano_of_day(64822100_000_000), "datetime_c": wall("2020-07-17 18:00:00"),
    "datetime3_c": wall("2020-07-17 18:00:22"), "datetime6_c": wall("2020-07-17 18:00:22"),
    "timestamp_c": utc("2020-07-17 18:00:00"), "timestamp3_c": utc("2020-07-17 18:00:22"),
    "timestamp6_c": utc("2020-07-17 18:00:22"),
    # Flink widens all twelve to DOUBLE; sparkcdc keeps FLOAT(M, D) a float32 (the server
    # stores 4 bytes): the same Python floats here
    "float_c0": 2.0, "float_c1": 3.0, "float_c2": 5.0, "real_c0": 7.0, "real_c1": 11.0,
    "real_c2": 13.0, "double_c0": 17.0, "double_c1": 19.0, "double_c2": 23.0,
    "double_precision_c0": 29.0, "double_precision_c1": 31.0, "double_precision_c2": 37.0,
}
_PRECISION_TYPES = PeerTable(
    "precision_types",
    f"""CREATE TABLE precision_types (id SERIAL, decimal_c0 DECIMAL(6, 2),
    decimal_c1 DECIMAL(9, 4), decimal_c2 DECIMAL(20, 4), time_c TIME(0), time_3_c TIME(3),
    time_6_c TIME(6), datetime_c DATETIME(0), datetime3_c DATETIME(3),
    datetime6_c DATETIME(6), timestamp_c TIMESTAMP(0) NULL, timestamp3_c TIMESTAMP(3) NULL,
    timestamp6_c TIMESTAMP(6) NULL, {_PRECISION_COLUMNS}, PRIMARY KEY (id))
    DEFAULT CHARSET=utf8""",
    ("""INSERT INTO precision_types VALUES (DEFAULT, 123.4, 1234.5, 1234.56, '18:00',
    '18:00:22.1', '18:00:22.1', '2020-07-17 18:00', '2020-07-17 18:00:22',
    '2020-07-17 18:00:22', '2020-07-17 18:00', '2020-07-17 18:00:22', '2020-07-17 18:00:22',
    2, 3, 5, 7, 11, 13, 17, 19, 23, 29, 31, 37)""",),
    (_PRECISION_ROW,),
    update=("UPDATE precision_types SET time_6_c = null WHERE id = 1",),
    want_updated=changed((_PRECISION_ROW,), "id", {1: {"time_6_c": None}}))

_JSON_C2 = ('[{"key1":"value1","key2":{"key2_1":"value2_1","key2_2":"value2_2"},'
            '"key3":["value3"],"key4":["value4_1","value4_2"]},{"key5":"value5"}]')


def _json_types(mysql: bool) -> PeerTable:
    # Flink's snapshot expects the server's text; its binlog (use.legacy.json.format) the
    # compact form. sparkcdc: the server's text on both paths; MariaDB's: as written
    row = {"id": Decimal(1),
           "json_c0": '{"key1": "value1"}' if mysql else '{"key1":"value1"}',
           "json_c1": ('{"key1": "value1", "key2": "value2"}' if mysql
                       else '{"key1":"value1","key2":"value2"}'),
           "json_c2": ('[{"key1": "value1", "key2": {"key2_1": "value2_1", "key2_2": '
                       '"value2_2"}, "key3": ["value3"], "key4": ["value4_1", "value4_2"]}, '
                       '{"key5": "value5"}]') if mysql else _JSON_C2,
           "int_c": 1}
    return PeerTable(
        "json_types",
        """CREATE TABLE json_types (id SERIAL, json_c0 JSON, json_c1 JSON, json_c2 JSON,
        int_c INTEGER, PRIMARY KEY (id)) DEFAULT CHARSET=utf8""",
        (f"""INSERT INTO json_types VALUES (DEFAULT, '{{"key1":"value1"}}',
        '{{"key1":"value1","key2":"value2"}}', '{_JSON_C2}', 1)""",),
        (row,), update=("UPDATE json_types SET int_c = null WHERE id = 1",),
        want_updated=changed((row,), "id", {1: {"int_c": None}}))


_ZEROFILL_ROW = {
    "id": Decimal(1), "tiny_z_c": 1, "small_z_c": 2, "medium_z_c": 3, "int_z_c": 4,
    "integer_z_c": 5, "big_z_c": Decimal(6),  # ZEROFILL is UNSIGNED: BIGINT -> decimal(20, 0)
    "real_z_c": 7.5, "float_z_c": 8.5, "double_z_c": 9.5, "double_precision_z_c": 10.5,
    "numeric_z_c": dec("11.500"), "fixed_z_c": dec("12.500"), "decimal_z_c": dec("13.500"),
}
_ZEROFILL_MAX = {**_ZEROFILL_ROW, "tiny_z_c": 255, "small_z_c": 65535,
                 "medium_z_c": 16777215, "int_z_c": 4294967295, "integer_z_c": 0,
                 "big_z_c": Decimal(18446744073709551615), "numeric_z_c": dec("99999.999")}
_ZEROFILL_TYPES = PeerTable(
    "zerofill_types",
    """CREATE TABLE zerofill_types (id SERIAL, tiny_z_c TINYINT ZEROFILL,
    small_z_c SMALLINT ZEROFILL, medium_z_c MEDIUMINT ZEROFILL, int_z_c INT ZEROFILL,
    integer_z_c INTEGER ZEROFILL, big_z_c BIGINT ZEROFILL, real_z_c REAL ZEROFILL,
    float_z_c FLOAT ZEROFILL, double_z_c DOUBLE ZEROFILL,
    double_precision_z_c DOUBLE PRECISION ZEROFILL, numeric_z_c NUMERIC(8, 3) ZEROFILL,
    fixed_z_c FIXED(8, 3) ZEROFILL, decimal_z_c DECIMAL(8, 3) ZEROFILL, PRIMARY KEY (id))
    DEFAULT CHARSET=utf8""",
    ("INSERT INTO zerofill_types VALUES (DEFAULT, 1, 2, 3, 4, 5, 6, 7.5, 8.5, 9.5, 10.5, "
     + "11.5, 12.5, 13.5)",),
    (_ZEROFILL_ROW,),
    # the ITCase reads only the snapshot; the update (sparkcdc's) takes each type's maximum
    update=(("UPDATE zerofill_types SET tiny_z_c = 255, small_z_c = 65535, "
             "medium_z_c = 16777215, int_z_c = 4294967295, integer_z_c = 0, "
             "big_z_c = 18446744073709551615, numeric_z_c = 99999.999 WHERE id = 1"),),
    want_updated=(_ZEROFILL_MAX,))


def pipeline_types(mysql: bool) -> PeerFile:
    return PeerFile(
        f"{FLINK} flink-cdc-pipeline-connector-mysql ddl/column_type_test_mysql8.sql",
        (_common_types(mysql), _TIME_TYPES, _PRECISION_TYPES, _json_types(mysql),
         _ZEROFILL_TYPES))


# -- ancient dates ------------------------------------------------------------------------------

_ANCIENT = [  # (date, then the seven DATETIME(0..6) wall clocks' date, time, fraction digits)
    ("0017-08-12", ["0016-07-13", "0015-06-14", "0014-05-15", "0013-04-16", "0012-03-17",
                    "0011-02-18", "0010-01-19"], "17:17:17"),
    None,  # the zero dates: null (Flink's expected row 2: all null)
    ("0001-01-01", ["0001-01-01"] * 7, "16:16:16"),
    ("0002-02-02", ["0002-02-02"] * 7, "15:15:15"),
    ("0033-03-03", ["0033-03-03"] * 7, "14:14:14"),
    ("0444-04-04", ["0444-04-04"] * 7, "13:13:13"),
    ("1969-12-31", ["1969-12-31"] * 7, "12:12:12"),
    ("2019-12-31", ["2019-12-31"] * 7, "23:11:11"),
]
_ANCIENT_COLUMNS = ["date_col"] + [f"datetime_{p}_col" for p in range(7)]


def _ancient() -> PeerTable:
    inserts, want = [], []
    for i, entry in enumerate(_ANCIENT, start=1):
        if entry is None:
            vals = ["'0000-00-00'"] + [
                "'0000-00-00 00:00:00" + ("." + "0" * p if p else "") + "'" for p in range(7)]
            row: dict[str, Any] = {"id": Decimal(i), **dict.fromkeys(_ANCIENT_COLUMNS)}
        else:
            d, days, clock = entry
            texts = [f"{day} {clock}" + ("." + "123456"[:p] if p else "")
                     for p, day in enumerate(days)]
            vals = [f"'{d}'"] + [f"'{t}'" for t in texts]
            row = {"id": Decimal(i), "date_col": dt.date.fromisoformat(d),
                   **{c: wall(t) for c, t in zip(_ANCIENT_COLUMNS[1:], texts)}}
        inserts.append(f"INSERT INTO ancient_times VALUES (DEFAULT, {', '.join(vals)})")
        want.append(row)
    pairs = {1: 6, 2: 1, 6: 2}  # sparkcdc's updates: rows trade values, the zero row too
    return PeerTable(
        "ancient_times",
        """CREATE TABLE ancient_times (id SERIAL, date_col DATE, datetime_0_col DATETIME(0),
        datetime_1_col DATETIME(1), datetime_2_col DATETIME(2), datetime_3_col DATETIME(3),
        datetime_4_col DATETIME(4), datetime_5_col DATETIME(5), datetime_6_col DATETIME(6),
        PRIMARY KEY (id))""",
        tuple(inserts), tuple(want),
        update=copy_rows("ancient_times", ["id", *_ANCIENT_COLUMNS], "id", pairs),
        want_updated=copied(tuple(want), "id", pairs),
        session=("SET SESSION sql_mode = 'STRICT_TRANS_TABLES,NO_ENGINE_SUBSTITUTION'",))


def ancient_dates(mysql: bool) -> PeerFile:
    return PeerFile(f"{FLINK} flink-connector-mysql-cdc ddl/ancient_date_and_time.sql",
                    (_ancient(),))


FILES = (full_types_57, full_types_mysql8, pipeline_types, ancient_dates)
