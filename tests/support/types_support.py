"""The all-types table the type tests and the decoder tests share: its DDL, its rows as SQL,
and the canonical values each path must read (written here by hand)."""

from __future__ import annotations

import datetime as dt
import struct
from decimal import Decimal

from sparkcdc.mysql.connection import ConnectionOptions
from sparkcdc.testing.mariadb import MariaDBSandbox

UTC = dt.timezone.utc


def cdc(sb: MariaDBSandbox, **kw) -> ConnectionOptions:
    i = sb.info
    return ConnectionOptions(hostname=i.host, port=i.port, username=i.cdc_user,
                             password=i.cdc_password, **kw)


def f32(x: float) -> float:
    return struct.unpack("<f", struct.pack("<f", x))[0]


def wkb_point(x: float, y: float) -> bytes:
    return b"\x01\x01\x00\x00\x00" + struct.pack("<dd", x, y)


ALL_TYPES_DDL = """
CREATE TABLE all_types (
  id INT PRIMARY KEY,
  ti TINYINT, tiu TINYINT UNSIGNED, si SMALLINT, siu SMALLINT UNSIGNED,
  mi MEDIUMINT, miu MEDIUMINT UNSIGNED, i INT, iu INT UNSIGNED, bi BIGINT, biu BIGINT UNSIGNED,
  d65 DECIMAL(65,30), d650 DECIMAL(65,0), d30 DECIMAL(30,20), d10 DECIMAL(10,2),
  f FLOAT, db DOUBLE, b1 BIT(1), b10 BIT(10), b64 BIT(64), bo BOOL,
  c CHAR(10), vc VARCHAR(100), tx TEXT, mtx MEDIUMTEXT,
  bn BINARY(4), vb VARBINARY(10), bl BLOB,
  d DATE, tm TIME, tm1 TIME(1), tm3 TIME(3), tm6 TIME(6),
  dt0 DATETIME, dt1 DATETIME(1), dt2 DATETIME(2), dt3 DATETIME(3), dt4 DATETIME(4),
  dt5 DATETIME(5), dt6 DATETIME(6),
  ts0 TIMESTAMP NULL, ts1 TIMESTAMP(1) NULL, ts2 TIMESTAMP(2) NULL, ts3 TIMESTAMP(3) NULL,
  ts4 TIMESTAMP(4) NULL, ts5 TIMESTAMP(5) NULL, ts6 TIMESTAMP(6) NULL,
  y YEAR, e ENUM('a','b','it''s'), st SET('x','y','z'), j JSON, g GEOMETRY, p POINT
) CHARACTER SET utf8mb4
"""

NINES65 = "9" * 65
ROW1_SQL = f"""(1, -128, 255, -32768, 65535, -8388608, 16777215, -2147483648, 4294967295,
  -9223372036854775808, 18446744073709551615,
  '12345678901234567890123456789012345.123456789012345678901234567891', {NINES65},
  '1234567890.12345678901234567890', 12345678.99,
  1.1, 2.2, b'1', b'1010101010', b'{"1" * 64}', TRUE,
  'abc😀', 'x𝄞y', 'tëxt 漢字 🎉', 'non-BMP 𝕏 𐍈 🦄',
  X'00ff0001', X'00ff', X'0000ff',
  '2024-02-29', '-838:59:59', '-00:00:01.5', '-00:00:00.5', '-00:00:00.5',
  '2024-01-02 03:04:05', '2024-01-02 03:04:05.1', '2024-01-02 03:04:05.12',
  '2024-01-02 03:04:05.123', '2024-01-02 03:04:05.1234', '2024-01-02 03:04:05.12345',
  '2024-01-02 03:04:05.123456',
  '2024-01-02 03:04:05', '2024-01-02 03:04:05.1', '2024-01-02 03:04:05.12',
  '2024-01-02 03:04:05.123', '2024-01-02 03:04:05.1234', '2024-01-02 03:04:05.12345',
  '2024-01-02 03:04:05.123456',
  2024, 'it''s', 'z,x', '{{"a": [1, 2], "é": "😀"}}',
  ST_GeomFromText('LINESTRING(0 0,1 1)'), POINT(1, 2))"""
ROW3_SQL = f"""(3, 127, 0, 32767, 0, 8388607, 0, 2147483647, 0, 9223372036854775807, 0,
  '-0.000000000000000000000000000001', -{NINES65}, '-0.00000000000000000001', -0.5,
  -1.5, 1.7976931348623157e308, b'0', b'1', b'1', FALSE,
  'x  ', 'sp  ', '', '',
  X'01', X'', X'ff',
  '1000-01-01', '838:59:59', '00:00:00.1', '-12:00:00.001', '-12:00:00.000001',
  '9999-12-31 23:59:59', '9999-12-31 23:59:59.9', '1000-01-01 00:00:00.01',
  '1000-01-01 00:00:00.001', '1000-01-01 00:00:00.0001', '1000-01-01 00:00:00.00001',
  '9999-12-31 23:59:59.999999',
  '1970-01-01 00:00:01', '1970-01-01 00:00:01.1', '2038-01-19 03:14:07.99',
  '2038-01-19 03:14:07.999', '2038-01-19 03:14:07.9999', '2038-01-19 03:14:07.99999',
  '2038-01-19 03:14:07.999999',
  0, 'nope', '', '[]', POINT(0, 0), POINT(-1.5, 2.5))"""
ROW4_ZERO_SQL = """INSERT INTO all_types (id, d, dt0, dt6, ts0, ts6, tm6, tm)
  VALUES (4, '0000-00-00', '0000-00-00 00:00:00', '2024-00-10 00:00:00',
          '0000-00-00 00:00:00', '0000-00-00 00:00:00.000000', '00:00:00.000001', '-00:00:01')"""

COLUMNS = ["id", "ti", "tiu", "si", "siu", "mi", "miu", "i", "iu", "bi", "biu", "d65", "d650",
           "d30", "d10", "f", "db", "b1", "b10", "b64", "bo", "c", "vc", "tx", "mtx", "bn", "vb",
           "bl", "d", "tm", "tm1", "tm3", "tm6", "dt0", "dt1", "dt2", "dt3", "dt4", "dt5", "dt6",
           "ts0", "ts1", "ts2", "ts3", "ts4", "ts5", "ts6", "y", "e", "st", "j", "g", "p"]


def td(h=0, m=0, s=0, us=0, neg=False):
    v = dt.timedelta(hours=h, minutes=m, seconds=s, microseconds=us)
    return -v if neg else v


def expected_all_types() -> list[dict]:
    base = dt.datetime(2024, 1, 2, 3, 4, 5)
    row1 = dict(  # noqa: C408 - a row reads as column=value
        id=1, ti=-128, tiu=255, si=-32768, siu=65535, mi=-8388608, miu=16777215,
        i=-2147483648, iu=4294967295, bi=-9223372036854775808,
        biu=Decimal(18446744073709551615),
        d65="12345678901234567890123456789012345.123456789012345678901234567891",
        d650=NINES65, d30=Decimal("1234567890.12345678901234567890"),
        d10=Decimal("12345678.99"), f=f32(1.1), db=2.2, b1=True, b10=b"\x02\xaa",
        b64=b"\xff" * 8, bo=1, c="abc😀", vc="x𝄞y", tx="tëxt 漢字 🎉", mtx="non-BMP 𝕏 𐍈 🦄",
        bn=b"\x00\xff\x00\x01", vb=b"\x00\xff", bl=b"\x00\x00\xff",
        d=dt.date(2024, 2, 29), tm=td(838, 59, 59, neg=True), tm1=td(s=1, us=500000, neg=True),
        tm3=td(us=500000, neg=True), tm6=td(us=500000, neg=True),
        dt0=base, dt1=base.replace(microsecond=100000), dt2=base.replace(microsecond=120000),
        dt3=base.replace(microsecond=123000), dt4=base.replace(microsecond=123400),
        dt5=base.replace(microsecond=123450), dt6=base.replace(microsecond=123456),
        y=2024, e="it's", st="x,z", j='{"a": [1, 2], "é": "😀"}',
        g=b"\x01\x02\x00\x00\x00\x02\x00\x00\x00" + struct.pack("<4d", 0, 0, 1, 1),
        p=wkb_point(1, 2))
    for k in ("ts0", "ts1", "ts2", "ts3", "ts4", "ts5", "ts6"):
        row1[k] = row1["dt" + k[2]].replace(tzinfo=UTC)  # inserted with time_zone +00:00
    row2 = {k: None for k in COLUMNS}
    row2["id"] = 2
    row3 = dict(  # noqa: C408 - a row reads as column=value
        id=3, ti=127, tiu=0, si=32767, siu=0, mi=8388607, miu=0, i=2147483647, iu=0,
        bi=9223372036854775807, biu=Decimal(0), d65="-0.000000000000000000000000000001",
        d650="-" + NINES65, d30=Decimal("-0.00000000000000000001"), d10=Decimal("-0.50"),
        f=-1.5, db=1.7976931348623157e308, b1=False, b10=b"\x00\x01",
        b64=b"\x00" * 7 + b"\x01", bo=0, c="x", vc="sp  ", tx="", mtx="",
        bn=b"\x01\x00\x00\x00", vb=b"", bl=b"\xff",
        d=dt.date(1000, 1, 1), tm=td(838, 59, 59), tm1=td(us=100000),
        tm3=td(12, us=1000, neg=True), tm6=td(12, us=1, neg=True),
        dt0=dt.datetime(9999, 12, 31, 23, 59, 59), dt1=dt.datetime(9999, 12, 31, 23, 59, 59, 900000),
        dt2=dt.datetime(1000, 1, 1, 0, 0, 0, 10000), dt3=dt.datetime(1000, 1, 1, 0, 0, 0, 1000),
        dt4=dt.datetime(1000, 1, 1, 0, 0, 0, 100), dt5=dt.datetime(1000, 1, 1, 0, 0, 0, 10),
        dt6=dt.datetime(9999, 12, 31, 23, 59, 59, 999999),
        ts0=dt.datetime(1970, 1, 1, 0, 0, 1, tzinfo=UTC),
        ts1=dt.datetime(1970, 1, 1, 0, 0, 1, 100000, tzinfo=UTC),
        ts2=dt.datetime(2038, 1, 19, 3, 14, 7, 990000, tzinfo=UTC),
        ts3=dt.datetime(2038, 1, 19, 3, 14, 7, 999000, tzinfo=UTC),
        ts4=dt.datetime(2038, 1, 19, 3, 14, 7, 999900, tzinfo=UTC),
        ts5=dt.datetime(2038, 1, 19, 3, 14, 7, 999990, tzinfo=UTC),
        ts6=dt.datetime(2038, 1, 19, 3, 14, 7, 999999, tzinfo=UTC),
        y=0, e="", st="", j="[]", g=wkb_point(0, 0), p=wkb_point(-1.5, 2.5))
    row4 = {k: None for k in COLUMNS}
    row4.update(id=4, tm6=td(us=1), tm=td(s=1, neg=True))  # zero dates are null
    return [row1, row2, row3, row4]


def insert_all_types(mariadb, db) -> None:
    mariadb.execute(
        "SET SESSION sql_mode = ''", "SET SESSION time_zone = '+00:00'",
        ALL_TYPES_DDL, f"INSERT INTO all_types VALUES {ROW1_SQL}",
        "INSERT INTO all_types (id) VALUES (2)",
        f"INSERT INTO all_types VALUES {ROW3_SQL}", ROW4_ZERO_SQL, database=db)


def assert_rows_equal(got: list[dict], want: list[dict], path: str) -> None:
    assert len(got) == len(want), path
    for g, w in zip(got, want):
        assert list(g) == COLUMNS, path
        for k in COLUMNS:
            assert g[k] == w[k] and type(g[k]) is type(w[k]), (
                f"{path}: row {w['id']} column {k}: got {g[k]!r}, want {w[k]!r}")
