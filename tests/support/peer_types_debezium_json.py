"""Debezium's JSON and geometry type tests, restated (see peer_types_debezium.py for the
commit): debezium-connector-binlog/src/test/resources/ddl/json_test.sql (asserted by
BinlogJsonIT) and geometry_test_8.sql, geometry_test_5.sql (BinlogGeometryIT; MySQL 8
runs the first, MariaDB here the second, as Debezium's 5.7 servers did).

json_test.sql carries its own expectations in two columns: ``expectedJdbcStr`` (the snapshot)
and ``expectedBinlogStr`` (the binlog, compact). sparkcdc gives MySQL's own text of the
document on both paths (docs/types.md, "JSON (MySQL)"), which is ``expectedJdbcStr`` except
for the 14 rows in ``MYSQL_TEXT``: there MySQL 9.7 prints otherwise (``SELECT CAST(json AS
CHAR)`` gives exactly these texts). BinlogJsonIT reads one data record per path (the NULL
row), so Debezium's own tests never compare these rows.
"""

from __future__ import annotations

from typing import Any

from peer_types_debezium import DDL, DEBEZIUM
from peer_types_support import PeerFile, PeerTable, copied, copy_rows, ewkb_of, wkb

# (the json value as SQL, expectedJdbcStr, expectedBinlogStr), in the file's order
JSON_ROWS: list[tuple[str, str | None, str | None]] = [
    ("NULL", None, None),
    ("'{\"a\": 2}'", '{"a": 2}', '{"a":2}'),
    ("'[1, 2]'", "[1, 2]", "[1,2]"),
    ("'{\"key1\": \"value1\", \"key2\": \"value2\"}'", '{"key1": "value1", "key2": "value2"}',
     '{"key1":"value1","key2":"value2"}'),
    ("'[\"a\", \"b\",1]'", '["a", "b",1]', '["a","b",1]'),
    ("'{\"k1\": \"v1\", \"k2\": {\"k21\": \"v21\", \"k22\": \"v22\"}, \"k3\": [\"a\", \"b\", 1]}'",
     '{"k1": "v1", "k2": {"k21": "v21", "k22": "v22"}, "k3": ["a", "b", 1]}',
     '{"k1":"v1","k2":{"k21":"v21","k22":"v22"},"k3":["a","b",1]}'),
    ("'{\"a\": \"b\", \"c\": \"d\", \"ab\": \"abc\", \"bc\": [\"x\", \"y\"]}'",
     '{"a": "b", "c": "d", "ab": "abc", "bc": ["x", "y"]}',
     '{"a":"b","c":"d","ab":"abc","bc":["x","y"]}'),
    ("'[\"here\", [\"I\", \"am\"], \"!!!\"]'", '["here", ["I", "am"], "!!!"]',
     '["here",["I","am"],"!!!"]'),
    ("'\"scalar string\"'", '"scalar string"', '"scalar string"'),
    ("'true'", "true", "true"),
    ("'false'", "false", "false"),
    ("'null'", "null", "null"),
    ("'-1'", "-1", "-1"),
    ("CAST(CAST(1 AS UNSIGNED) AS JSON)", "1", "1"),
    *[(f"'{n}'", n, n) for n in ("32767", "32768", "-32768", "2147483647", "2147483648",
                                 "-2147483648", "-2147483649", "18446744073709551615",
                                 "18446744073709551616", "3.14", "{}", "[]")],
    ("CAST(CAST('2015-01-15 23:24:25' AS DATETIME) AS JSON)", '"2015-01-15 23:24:25"',
     '"2015-01-15 23:24:25"'),
    ("CAST(CAST('2015-01-15 23:24:25.12' AS DATETIME(3)) AS JSON)",
     '"2015-01-15 23:24:25.12"', '"2015-01-15 23:24:25.12"'),
    ("CAST(CAST('2015-01-15 23:24:25.0237' AS DATETIME(3)) AS JSON)",
     '"2015-01-15 23:24:25.024"', '"2015-01-15 23:24:25.024"'),
    ("CAST(CAST('23:24:25' AS TIME) AS JSON)", '"23:24:25"', '"23:24:25"'),
    ("CAST(CAST('23:24:25.12' AS TIME(3)) AS JSON)", '"23:24:25.12"', '"23:24:25.12"'),
    ("CAST(CAST('23:24:25.0237' AS TIME(3)) AS JSON)", '"23:24:25.024"', '"23:24:25.024"'),
    ("CAST(CAST('2015-01-15' AS DATE) AS JSON)", '"2015-01-15"', '"2015-01-15"'),
    ("CAST(TIMESTAMP'2015-01-15 23:24:25' AS JSON)", '"2015-01-15 23:24:25"',
     '"2015-01-15 23:24:25"'),
    ("CAST(TIMESTAMP'2015-01-15 23:24:25.12' AS JSON)", '"2015-01-15 23:24:25.12"',
     '"2015-01-15 23:24:25.12"'),
    ("CAST(TIMESTAMP'2015-01-15 23:24:25.0237' AS JSON)", '"2015-01-15 23:24:25.0237"',
     '"2015-01-15 23:24:25.0237"'),
    ("CAST(UNIX_TIMESTAMP('2015-01-15 23:24:25') AS JSON)", "1421364265", "1421364265"),
    ("CAST(ST_GeomFromText('POINT(1 1)') AS JSON)",
     '{"type": "Point", "coordinates": [1.0, 1.0]}',
     '{"type":"Point","coordinates":[1.0,1.0]}'),
    ("CAST('[]' AS CHAR CHARACTER SET 'ascii')", "[]", "[]"),
    ("CAST(x'cafe' AS JSON)", '"yv4="', '"yv4="'),
    ("CAST(x'cafebabe' AS JSON)", '"yv66vg=="', '"yv66vg=="'),
]

# row id -> MySQL 9.7's text where it is not expectedJdbcStr
MYSQL_TEXT = {
    5: '["a", "b", 1]',  # the server prints ", " between all elements
    23: "1.8446744073709552e19",  # beyond UINT64 the server stores a double
    # DATETIME, TIMESTAMP and TIME values inside JSON print six fractional digits
    27: '"2015-01-15 23:24:25.000000"', 28: '"2015-01-15 23:24:25.120000"',
    29: '"2015-01-15 23:24:25.024000"', 30: '"23:24:25.000000"', 31: '"23:24:25.120000"',
    32: '"23:24:25.024000"', 34: '"2015-01-15 23:24:25.000000"',
    35: '"2015-01-15 23:24:25.120000"', 36: '"2015-01-15 23:24:25.023700"',
    # MySQL 8+ adds the geometry's coordinate system
    38: ('{"crs": {"type": "name", "properties": {"name": "urn:ogc:def:crs:MySQL::0"}}, '
         '"type": "Point", "coordinates": [1.0, 1.0]}'),
    # an opaque BLOB keeps its type: base64:type15 (VARCHAR), as the server prints it
    40: '"base64:type15:yv4="', 41: '"base64:type15:yv66vg=="',
}


def _json_table(mysql: bool) -> PeerTable:
    rows: list[dict[str, Any]] = []
    inserts: list[str] = []
    for sql, jdbc, binlog in JSON_ROWS:
        if not mysql and "AS JSON)" in sql:
            # MariaDB has no CAST(... AS JSON) (its JSON is LONGTEXT): these rows cannot be
            # written there, the rest are, and read as the text written
            continue
        i = len(rows) + 1

        def lit(v: str | None) -> str:
            return "NULL" if v is None else "'" + v.replace("'", "''") + "'"

        inserts.append(f"INSERT INTO dbz_126_jsontable VALUES (default, {sql}, {lit(jdbc)}, "
                       f"{lit(binlog)})")
        text = (MYSQL_TEXT.get(i, jdbc) if mysql
                else None if sql == "NULL" else "[]" if sql.startswith("CAST")
                else sql[1:-1])
        rows.append({"id": i, "json": text, "expectedJdbcStr": jdbc,
                     "expectedBinlogStr": binlog})
    assert len(rows) == (41 if mysql else 26)
    pairs = {2: 3, 3: 2, 9: 1, **({14: 41, 23: 36} if mysql else {25: 13})}
    return PeerTable(
        "dbz_126_jsontable",
        "CREATE TABLE dbz_126_jsontable (id INT AUTO_INCREMENT NOT NULL, json JSON, "
        "expectedJdbcStr VARCHAR(256), expectedBinlogStr VARCHAR(256), PRIMARY KEY(id)) "
        "DEFAULT CHARSET=utf8",
        tuple(inserts), tuple(rows),
        update=copy_rows("dbz_126_jsontable", list(rows[0]), "id", pairs),
        want_updated=copied(tuple(rows), "id", pairs))


def json(mysql: bool) -> PeerFile:
    return PeerFile(f"{DEBEZIUM} {DDL}/json_test.sql", (_json_table(mysql),))


# -- geometry -----------------------------------------------------------------------------------

# BinlogGeometryIT's hex WKB (Debezium's Geometry struct: wkb, srid apart)
POINT_1_1 = "0101000000000000000000F03F000000000000F03F"
LINE = "01020000000200000000000000000000000000000000000000000000000000F03F000000000000F03F"
POLYGON = ("0103000000010000000400000000000000000000000000000000000000000000000000F03F"
           "000000000000F03F000000000000F03F000000000000000000000000000000000000000000000000")
COLLECTION = ("0107000000020000000101000000000000000000F03F000000000000F03F0102000000020000"
              "0000000000000000000000000000000000000000000000F03F000000000000F03F")


def geometry(mysql: bool) -> PeerFile:
    cols = ["id", "point", "expected_x", "expected_y", "expected_srid"]
    # MySQL 8+ reads SRID 4326's WKT as latitude, longitude and stores x = longitude:
    # BinlogGeometryIT's MySQL 8 geometryAssertPoints swaps x and y likewise
    x, y = (3.22124447, 8.25554554) if mysql else (8.25554554, 3.22124447)
    points: list[tuple[int, str, float | None, float | None, int | None, bytes | None]] = [
        (1, "ST_GeomFromText('POINT(1 1)')", 1.0, 1.0, None, bytes.fromhex(POINT_1_1)),
        (2, "ST_GeomFromText('POINT(8.25554554 3.22124447)', 4326)", 8.25554554, 3.22124447,
         4326, ewkb_of(wkb("Point", [x, y]).hex(), 4326))]
    if not mysql:  # geometry_test_5.sql: MySQL 8 knows no SRID 1234 ("unknown SRIDs")
        points.append((3, "ST_GeomFromText('POINT(0 0)', 1234)", 0.0, 0.0, 1234,
                       ewkb_of(wkb("Point", [0, 0]).hex(), 1234)))
    points.append((len(points) + 1, "NULL", None, None, None, None))

    def num(v: float | None) -> str:
        return "NULL" if v is None else repr(v)

    point_rows = tuple({"id": i, "point": value, "expected_x": ex, "expected_y": ey,
                        "expected_srid": srid} for i, _, ex, ey, srid, value in points)
    geoms = ({"id": 1, "geom": ewkb_of(POINT_1_1, 4326), "linestring": ewkb_of(LINE, 3187),
              "polygon": bytes.fromhex(POLYGON), "collection": ewkb_of(COLLECTION, 4326)},
             {"id": 2, "geom": bytes.fromhex(LINE), "linestring": None, "polygon": None,
              "collection": None})
    name = "geometry_test_8.sql" if mysql else "geometry_test_5.sql"
    return PeerFile(f"{DEBEZIUM} {DDL}/{name}", (
        PeerTable("dbz_222_point",
                  "CREATE TABLE dbz_222_point (id INT AUTO_INCREMENT NOT NULL, "
                  "point POINT DEFAULT NULL, expected_x DOUBLE, expected_y DOUBLE, "
                  "expected_srid INT, PRIMARY KEY (id)) DEFAULT CHARSET=utf8",
                  tuple(f"INSERT INTO dbz_222_point VALUES (default,{sql}, {num(ex)}, "
                        f"{num(ey)}, {num(srid)})" for _, sql, ex, ey, srid, _v in points),
                  point_rows,
                  update=copy_rows("dbz_222_point", cols, "id", {1: 2, 2: 1}),
                  want_updated=copied(point_rows, "id", {1: 2, 2: 1})),
        PeerTable("dbz_507_geometry",
                  "CREATE TABLE dbz_507_geometry (id INT NOT NULL, geom GEOMETRY, "
                  "linestring LINESTRING, polygon POLYGON, collection GEOMETRYCOLLECTION, "
                  "PRIMARY KEY (id))",
                  (("INSERT INTO dbz_507_geometry VALUES (1, ST_GeomFromText('POINT(1 1)', 4326), "
                   "ST_GeomFromText('LINESTRING(0 0, 1 1)', 3187), "
                   "ST_GeomFromText('POLYGON((0 0, 1 1, 1 0, 0 0))'), "
                   "ST_GeomFromText('GEOMETRYCOLLECTION(POINT(1 1), LINESTRING(0 0, 1 1))', "
                   "4326))"),
                   ("INSERT INTO dbz_507_geometry VALUES (2, "
                   "ST_GeomFromText('LINESTRING(0 0, 1 1)'), NULL, NULL, NULL)")),
                  geoms,
                  update=copy_rows("dbz_507_geometry", list(geoms[0]), "id", {1: 2, 2: 1}),
                  want_updated=copied(geoms, "id", {1: 2, 2: 1}))))


FILES = (json, geometry)
