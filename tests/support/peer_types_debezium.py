"""Debezium's MySQL type tests, restated: their DDL, their rows and the values their ITs
assert, converted to sparkcdc's canonical values (docs/types.md), each deliberate
difference named at its value. The JSON and geometry tests are in
peer_types_debezium_json.py.

Read from debezium/debezium at commit aad5519902997a3627fe296f77ea6d3452e9acce (2026-08-22),
debezium-connector-binlog/src/test/resources/ddl/*.sql (shared by the MySQL and MariaDB
connectors since Debezium 3), asserted by debezium-connector-binlog/src/test/java/io/
debezium/connector/binlog/Binlog*IT.java (run for MySQL by debezium-connector-mysql's
MySql*IT subclasses): regression_test.sql (BinlogRegressionIT), unsigned_integer_test.sql
(BinlogUnsignedIntegerIT), tinyint_test.sql (BinlogTinyIntIT), boolean_test.sql,
numeric_column_test.sql (BinlogNumericColumnIT), decimal_column_test.sql
(BinlogDecimalColumnIT), decimal_test.sql (BinlogDecimalIT), float_test.sql (BinlogFloatIT),
real_test.sql, year_test.sql (BinlogYearIT), datetime_key_test.sql (BinlogDateTimeInKeyIT),
enum_column_test.sql (BinlogEnumColumnIT), binary_column_test.sql
(BinlogFixedLengthBinaryColumnIT), binary_mode_test.sql (BinlogBinaryModeIT).

Debezium's ITs read the same rows through the snapshot and the binlog; where MySQL rounds
fractional seconds and MariaDB truncates them, BinlogRegressionIT expects each server's own
value, and so does this data (``mysql``).
"""

from __future__ import annotations

import base64
import datetime as dt
from decimal import Decimal
from typing import Any

from peer_types_support import (
    EPOCH,
    PeerFile,
    PeerTable,
    changed,
    copied,
    copy_rows,
    dec,
    epoch_day,
    epoch_millis,
    micro_time,
    utc,
    wall,
)
from types_support import f32

DEBEZIUM = "debezium/debezium@aad5519902997a3627fe296f77ea6d3452e9acce"
DDL = "debezium-connector-binlog/src/test/resources/ddl"
MYSQL8_MODE = ("SET SESSION sql_mode = 'ONLY_FULL_GROUP_BY,STRICT_TRANS_TABLES,NO_ZERO_IN_DATE,"
               "NO_ZERO_DATE,ERROR_FOR_DIVISION_BY_ZERO,NO_ENGINE_SUBSTITUTION'")


def _rows(columns: list[str], *values: tuple) -> tuple[dict[str, Any], ...]:
    return tuple(dict(zip(columns, v)) for v in values)


# -- regression_test.sql ------------------------------------------------------------------------

def _regression(mysql: bool) -> tuple[PeerTable, ...]:
    # MySQL rounds '...04.777' into a (2) column, MariaDB truncates (getNanos: 780 / 770)
    frac = "78" if mysql else "77"
    varbinary = _rows(["pk_column", "varbinary_col"], (1, b"MySQL"))
    ints_cols = ["colTinyIntA", "colTinyIntB", "colTinyIntC", "colTinyIntD", "colSmallIntA",
                 "colSmallIntB", "colSmallIntC", "colSmallIntD", "colMediumIntA",
                 "colMediumIntB", "colMediumIntC", "colMediumIntD", "colIntA", "colIntB",
                 "colIntC", "colIntD", "colBigIntA", "colBigIntB", "colBigIntC", "colBigIntD"]
    ints = _rows(ints_cols, (127, -128, 128, 255, 200, 201, 202, 203, 300, 301, 302, 303,
                             400, 401, 402, 403, 500, 501, 502, 503))
    frac_cols = ["c1", "c2", "c3", "c4"]
    fractest = _rows(frac_cols, (
        epoch_day(16321),  # '2014-09-08'
        micro_time((17 * 3600 + 51 * 60 + 4) * 10**6 + int(frac) * 10**4),
        wall(f"2014-09-08 17:51:04.{frac}"), utc(f"2014-09-08 17:51:04.{frac}")))
    enumset = _rows(["c1", "c2"], ("a", "a,b,c"), ("b", "a,b"), ("c", "a"))
    zero114 = _rows(frac_cols, (None, micro_time(0), None, None),
                    (None, micro_time(60_000_000), None, None))
    z1318_cols = ["c1", "c2", "c3", "c4", "nnc1", "nnc2", "nnc3"]
    # Debezium: nullable zero dates null, NOT NULL ones the epoch (nnc1 0, nnc3 0L):
    # sparkcdc's zero-dates.not-null: epoch; by default they read null (docs/types.md)
    zero1318 = _rows(z1318_cols, (None, micro_time(0), None, None, None, micro_time(0), None),
                     (None, micro_time(60_000_000), None, None, None, micro_time(60_000_000),
                      None))
    zero1318_epoch = tuple({**r, "nnc1": EPOCH, "nnc3": dt.datetime(1970, 1, 1)}
                           for r in zero1318)
    # BIT(n > 1): Debezium's bytes are little-endian ([219, 14, 110, 1, 0, 0, 0, 0] for
    # 23989979); sparkcdc's big-endian, as the server prints b'...' (docs/types.md)
    bit_le = bytes([219, 14, 110, 1, 0, 0, 0, 0])
    bits = _rows(["c1", "c2", "c3", "c4"], *[(True, bytes([2]), bytes([64]), bit_le[::-1])] * 2)
    bits_updated = tuple({**r, "c2": b"\x01", "c4": b"\xff" * 8} for r in bits)
    decimals = _rows(["pk_column", "decimal_value"], (1, dec("12345.67")))
    nums = _rows(["id", "search_version_read"], (4972, 0), (4973, -2147483648),
                 (4974, 2147483647))
    time_cols = [f"c{i}" for i in range(1, 12)]
    times = _rows(time_cols, (
        micro_time(1_864_264_000_000 + int(frac) * 10_000),  # '517:51:04.777'
        micro_time(-47_690_000_000), micro_time(-2_638_800_001_000),
        micro_time(-7_199_001_000), micro_time(-3_020_398_999_999),
        micro_time(-1_238_000_000), micro_time(-3_661_000_001), micro_time(-3_661_000_000),
        micro_time(-3_660_000_000), micro_time(-3_600_000_000), micro_time(0)))
    return (
        PeerTable("t1464075356413_testtable6",
                  "CREATE TABLE t1464075356413_testtable6 (pk_column int auto_increment "
                  "NOT NULL, varbinary_col varbinary(20) NOT NULL, PRIMARY KEY(pk_column))",
                  (("INSERT INTO t1464075356413_testtable6 (pk_column, varbinary_col) "
                   "VALUES(default, 0x4D7953514C)"),), varbinary, order=("pk_column",),
                  update=("UPDATE t1464075356413_testtable6 SET varbinary_col = X'00FF'",),
                  want_updated=changed(varbinary, "pk_column",
                                       {1: {"varbinary_col": b"\x00\xff"}})),
        PeerTable("dbz84_integer_types_table",
                  "CREATE TABLE dbz84_integer_types_table ("
                  "colTinyIntA tinyint NOT NULL DEFAULT 100, "
                  "colTinyIntB tinyint(1) NOT NULL DEFAULT 101, "
                  "colTinyIntC tinyint(2) UNSIGNED NOT NULL DEFAULT 102, "
                  "colTinyIntD tinyint(3) UNSIGNED NOT NULL DEFAULT 103, "
                  "colSmallIntA smallint NOT NULL DEFAULT 200, "
                  "colSmallIntB smallint(1) NOT NULL DEFAULT 201, "
                  "colSmallIntC smallint(2) NOT NULL DEFAULT 201, "
                  "colSmallIntD smallint(3) NOT NULL DEFAULT 201, "
                  "colMediumIntA mediumint NOT NULL DEFAULT 300, "
                  "colMediumIntB mediumint(1) NOT NULL DEFAULT 301, "
                  "colMediumIntC mediumint(2) NOT NULL DEFAULT 302, "
                  "colMediumIntD mediumint(3) NOT NULL DEFAULT 303, "
                  "colIntA int NOT NULL DEFAULT 400, colIntB int(1) NOT NULL DEFAULT 401, "
                  "colIntC int(2) NOT NULL DEFAULT 402, colIntD int(3) NOT NULL DEFAULT 403, "
                  "colBigIntA bigint NOT NULL DEFAULT 500, "
                  "colBigIntB bigint(1) NOT NULL DEFAULT 501, "
                  "colBigIntC bigint(2) NOT NULL DEFAULT 502, "
                  "colBigIntD bigint(3) NOT NULL DEFAULT 503)",
                  (("INSERT INTO dbz84_integer_types_table VALUES(127,-128,128,255, "
                   "default,201,202,203, default,301,302,303, default,401,402,403, "
                   "default,501,502,503)"),), ints, order=("colTinyIntA",),
                  update=(("UPDATE dbz84_integer_types_table SET colTinyIntD = 0, "
                          "colBigIntD = -9223372036854775808"),),
                  want_updated=({**ints[0], "colTinyIntD": 0,
                                 "colBigIntD": -9223372036854775808},)),
        PeerTable("dbz_85_fractest",
                  "CREATE TABLE dbz_85_fractest (c1 DATE, c2 TIME(2), c3 DATETIME(2), "
                  "c4 TIMESTAMP(2))",
                  (("INSERT INTO dbz_85_fractest VALUES ('2014-09-08', '17:51:04.777', "
                   "'2014-09-08 17:51:04.777', '2014-09-08 17:51:04.777')"),),
                  fractest, order=("c1",),
                  update=(("UPDATE dbz_85_fractest SET c2 = '-838:59:59', "
                          "c3 = '1000-01-01 00:00:00.005'"),),
                  want_updated=({**fractest[0], "c2": -dt.timedelta(hours=838, minutes=59,
                                                                    seconds=59),
                                 "c3": dt.datetime(1000, 1, 1, 0, 0, 0,
                                                   10000 if mysql else 0)},)),
        PeerTable("dbz_100_enumsettest",
                  "CREATE TABLE dbz_100_enumsettest (c1 enUM('a','b','c'), "
                  "c2 Set('a','b','c'))",
                  ("INSERT INTO dbz_100_enumsettest VALUES ('a', 'a,b,c')",
                   "INSERT INTO dbz_100_enumsettest VALUES ('b', 'b,a')",
                   "INSERT INTO dbz_100_enumsettest VALUES ('c', 'a')"), enumset, order=("c1",),
                  update=("UPDATE dbz_100_enumsettest SET c2 = '' WHERE c1 = 'b'",
                          "UPDATE dbz_100_enumsettest SET c2 = 'c,b' WHERE c1 = 'c'"),
                  want_updated=(enumset[0], {"c1": "b", "c2": ""}, {"c1": "c", "c2": "b,c"})),
        PeerTable("dbz_102_charsettest",
                  "CREATE TABLE dbz_102_charsettest (id INT(11) NOT NULL AUTO_INCREMENT, "
                  "text VARCHAR(255) DEFAULT NULL, PRIMARY KEY (`id`)) ENGINE=InnoDB "
                  "AUTO_INCREMENT=2001 DEFAULT CHARSET=utf8",
                  ("INSERT INTO dbz_102_charsettest VALUES (default, \"产品\")",),
                  ({"id": 2001, "text": "产品"},),
                  session=("SET character_set_client=utf8", "SET character_set_connection=utf8",
                           "SET SESSION sql_mode = 'NO_ENGINE_SUBSTITUTION'"),
                  update=("UPDATE dbz_102_charsettest SET text = '漢字 ü'",),
                  want_updated=({"id": 2001, "text": "漢字 ü"},)),
        PeerTable("dbz_114_zerovaluetest",
                  "CREATE TABLE dbz_114_zerovaluetest (c1 DATE, c2 TIME(2), c3 DATETIME(2), "
                  "c4 TIMESTAMP(2))",
                  (("INSERT IGNORE INTO dbz_114_zerovaluetest VALUES ('0000-00-00', "
                   "'00:00:00.000', '0000-00-00 00:00:00.000', '0000-00-00 00:00:00.000')"),
                   ("INSERT IGNORE INTO dbz_114_zerovaluetest VALUES ('0001-00-00', "
                   "'00:01:00.000', '0001-00-00 00:00:00.000', '0001-00-00 00:00:00.000')")),
                  zero114, order=("c2",), session=(MYSQL8_MODE,),
                  update=(("UPDATE dbz_114_zerovaluetest SET c1 = '2014-09-08' "
                          "WHERE c2 = '00:01:00'"),),
                  want_updated=(zero114[0], {**zero114[1], "c1": dt.date(2014, 9, 8)})),
        PeerTable("dbz_1318_zerovaluetest",
                  "CREATE TABLE dbz_1318_zerovaluetest (c1 DATE, c2 TIME(2), c3 DATETIME(2), "
                  "c4 TIMESTAMP(2), nnc1 DATE NOT NULL, nnc2 TIME(2) NOT NULL, "
                  "nnc3 DATETIME(2) NOT NULL)",
                  (("INSERT IGNORE INTO dbz_1318_zerovaluetest VALUES ('0000-00-00', "
                   "'00:00:00.000', '0000-00-00 00:00:00.000', '0000-00-00 00:00:00.000', "
                   "'0000-00-00', '00:00:00.000', '0000-00-00 00:00:00.000')"),
                   ("INSERT IGNORE INTO dbz_1318_zerovaluetest VALUES ('0001-00-00', "
                   "'00:01:00.000', '0000-00-00 14:02:10.000', '0000-00-00 14:02:10.000', "
                   "'0001-00-00', '00:01:00.000', '0000-00-00 14:02:10.000')")),
                  zero1318, order=("c2",),
                  session=(("SET SESSION sql_mode = 'ONLY_FULL_GROUP_BY,STRICT_TRANS_TABLES,"
                           "ERROR_FOR_DIVISION_BY_ZERO,NO_ENGINE_SUBSTITUTION'"),),
                  want_epoch=zero1318_epoch,
                  update=(("UPDATE dbz_1318_zerovaluetest SET nnc2 = '-00:01:00', "
                          "nnc3 = '2020-02-29 00:00:00.01' WHERE c2 = '00:01:00'"),),
                  want_updated=(zero1318[0], {**zero1318[1], "nnc2": micro_time(-60_000_000),
                                              "nnc3": wall("2020-02-29 00:00:00.01")})),
        PeerTable("dbz_123_bitvaluetest",
                  "CREATE TABLE dbz_123_bitvaluetest (c1 BIT, c2 BIT(2), c3 BIT(8) NOT NULL, "
                  "c4 BIT(64))",
                  ("INSERT INTO dbz_123_bitvaluetest VALUES (1,2,64,23989979)",
                   ("INSERT INTO dbz_123_bitvaluetest VALUES (b'1',b'10',b'01000000',"
                   "b'1011011100000111011011011')")), bits, order=("c1",),
                  update=(("UPDATE dbz_123_bitvaluetest SET c2 = b'01', "
                          "c4 = 18446744073709551615"),), want_updated=bits_updated),
        PeerTable("dbz_147_decimalvalues",
                  "CREATE TABLE dbz_147_decimalvalues (pk_column int auto_increment NOT NULL, "
                  "decimal_value decimal(7,2) NOT NULL, PRIMARY KEY(pk_column))",
                  (("INSERT INTO dbz_147_decimalvalues (pk_column, decimal_value) "
                   "VALUES(default, 12345.67)"),), decimals, order=("pk_column",),
                  update=("UPDATE dbz_147_decimalvalues SET decimal_value = -99999.99",),
                  want_updated=changed(decimals, "pk_column",
                                       {1: {"decimal_value": dec("-99999.99")}})),
        PeerTable("dbz_195_numvalues",
                  "CREATE TABLE dbz_195_numvalues (id int auto_increment NOT NULL, "
                  "`search_version_read` int(11) NOT NULL DEFAULT '0', PRIMARY KEY (`id`)) "
                  "ENGINE=InnoDB AUTO_INCREMENT=4972 DEFAULT CHARSET=utf8",
                  ("INSERT INTO dbz_195_numvalues VALUES (default,0)",
                   "INSERT INTO dbz_195_numvalues VALUES (default,-2147483648)",
                   "INSERT INTO dbz_195_numvalues VALUES (default,2147483647)"), nums,
                  update=copy_rows("dbz_195_numvalues", ["id", "search_version_read"], "id",
                                   {4972: 4974, 4974: 4972}),
                  want_updated=copied(nums, "id", {4972: 4974, 4974: 4972})),
        PeerTable("dbz_342_timetest",
                  "CREATE TABLE dbz_342_timetest (c1 TIME(2), c2 TIME(0), c3 TIME(3), "
                  "c4 TIME(3), c5 TIME(6), c6 TIME(6), c7 TIME(6), c8 TIME(6), c9 TIME(6), "
                  "c10 TIME(6), c11 TIME(6))",
                  (("INSERT INTO dbz_342_timetest VALUES ('517:51:04.777', '-13:14:50', "
                   "'-733:00:00.0011', '-1:59:59.0011', '-838:59:58.999999', "
                   "'-00:20:38.000000', '-01:01:01.000001', '-01:01:01.000000', "
                   "'-01:01:00.000000', '-01:00:00.000000', '-00:00:00.000000')"),),
                  times, order=("c1",),
                  update=(("UPDATE dbz_342_timetest SET c2 = '-838:59:59', "
                          "c11 = '838:59:59'"),),
                  want_updated=({**times[0], "c2": micro_time(-3_020_399_000_000),
                                 "c11": micro_time(3_020_399_000_000)},)),
    )


def regression(mysql: bool) -> PeerFile:
    return PeerFile(f"{DEBEZIUM} {DDL}/regression_test.sql", _regression(mysql))


# -- integers -----------------------------------------------------------------------------------

def _unsigned(name: str, ddl_cols: str, cols: list[str], *values: tuple) -> PeerTable:
    want = _rows(["id", *cols], *[(i, *v) for i, v in enumerate(values, start=1)])
    return PeerTable(
        name, f"CREATE TABLE {name} (id int auto_increment NOT NULL, {ddl_cols}, "
              "PRIMARY KEY (`id`)) ENGINE=InnoDB DEFAULT CHARSET=utf8",
        tuple(f"INSERT INTO {name} VALUES (default, {', '.join(map(str, v))})"
              for v in values), want,
        update=copy_rows(name, ["id", *cols], "id", {1: 3, 3: 1}),
        want_updated=copied(want, "id", {1: 3, 3: 1}))


U64 = Decimal(18446744073709551615)  # BIGINT UNSIGNED: decimal(20, 0) (Debezium: BigDecimal)


def integers(mysql: bool) -> PeerFile:
    t = ["c1", "c2", "c3"]
    tables = (
        _unsigned("dbz_228_tinyint_unsigned", "c1 TINYINT(3) UNSIGNED ZEROFILL NOT NULL, "
                  "c2 TINYINT(3) UNSIGNED NOT NULL, c3 TINYINT(3) NOT NULL", t,
                  (255, 255, 127), (155, 155, -100), (0, 0, -128)),
        _unsigned("dbz_228_smallint_unsigned", "c1 SMALLINT UNSIGNED ZEROFILL NOT NULL, "
                  "c2 SMALLINT UNSIGNED NOT NULL, c3 SMALLINT NOT NULL", t,
                  (65535, 65535, 32767), (45535, 45535, -12767), (0, 0, -32768)),
        _unsigned("dbz_228_mediumint_unsigned", "c1 MEDIUMINT UNSIGNED ZEROFILL NOT NULL, "
                  "c2 MEDIUMINT UNSIGNED NOT NULL, c3 MEDIUMINT NOT NULL", t,
                  (16777215, 16777215, 8388607), (10777215, 10777215, -6388607),
                  (0, 0, -8388608)),
        _unsigned("dbz_228_int_unsigned", "c1 int(11) UNSIGNED ZEROFILL NOT NULL, "
                  "c2 int(11) UNSIGNED NOT NULL, c3 int(11) NOT NULL, "
                  "c4 int(5) UNSIGNED ZEROFILL NOT NULL, c5 int(5) UNSIGNED NOT NULL, "
                  "c6 int(5) NOT NULL", ["c1", "c2", "c3", "c4", "c5", "c6"],
                  (4294967295, 4294967295, 2147483647, 4294967295, 4294967295, 2147483647),
                  (3294967295, 3294967295, -1147483647, 3294967295, 3294967295, -1147483647),
                  (0, 0, -2147483648, 0, 0, -2147483648)),
        _unsigned("dbz_integer_unsigned", "c1 INTEGER(11) UNSIGNED ZEROFILL NOT NULL, "
                  "c2 INTEGER(11) UNSIGNED NOT NULL, c3 INTEGER(11) NOT NULL", t,
                  (4294967295, 4294967295, 2147483647), (3294967295, 3294967295, -1147483647),
                  (0, 0, -2147483648)),
        _unsigned("dbz_228_bigint_unsigned", "c1 BIGINT UNSIGNED ZEROFILL NOT NULL, "
                  "c2 BIGINT UNSIGNED NOT NULL, c3 BIGINT NOT NULL", t,
                  (U64, U64, 9223372036854775807),
                  (Decimal(14446744073709551615), Decimal(14446744073709551615),
                   -1223372036854775807), (Decimal(0), Decimal(0), -9223372036854775808)),
        # a key that is all the table has: inserts only (an update would change the key)
        PeerTable("dbz_1185_serial", "CREATE TABLE dbz_1185_serial (id SERIAL NOT NULL, "
                  "PRIMARY KEY (`id`)) ENGINE=InnoDB DEFAULT CHARSET=utf8",
                  ("INSERT INTO dbz_1185_serial VALUES (10)",
                   "INSERT INTO dbz_1185_serial VALUES (default)",
                   "INSERT INTO dbz_1185_serial VALUES (18446744073709551615)"),
                  _rows(["id"], (Decimal(10),), (Decimal(11),), (U64,))),
        PeerTable("dbz_1185_serial_default_value",
                  "CREATE TABLE dbz_1185_serial_default_value (id SMALLINT UNSIGNED SERIAL "
                  "DEFAULT VALUE NOT NULL, PRIMARY KEY (`id`)) ENGINE=InnoDB "
                  "DEFAULT CHARSET=utf8",
                  ("INSERT INTO dbz_1185_serial_default_value VALUES (10)",
                   "INSERT INTO dbz_1185_serial_default_value VALUES (default)",
                   "INSERT INTO dbz_1185_serial_default_value VALUES (1000)"),
                  _rows(["id"], (10,), (11,), (1000,))),
        # tinyint_test.sql: Debezium's default reads TINYINT(1) as a number (100, 5, 50, 1),
        # as sparkcdc does; its TinyIntOneToBooleanConverter gives BOOLEAN true
        PeerTable("DBZ1773", "CREATE TABLE `DBZ1773` (id int not null primary key "
                  "auto_increment, ti TINYINT SIGNED, ti1 TINYINT(1) SIGNED, ti2 TINYINT(2), "
                  "b BOOLEAN) ENGINE=InnoDB AUTO_INCREMENT=10851 DEFAULT CHARSET=utf8",
                  ("INSERT INTO DBZ1773 VALUES (DEFAULT, 100, 5, 50, TRUE)",),
                  _rows(["id", "ti", "ti1", "ti2", "b"], (10851, 100, 5, 50, 1)),
                  # a BOOLEAN holds 2 (a boolean converter would read it true)
                  update=("UPDATE DBZ1773 SET ti = -128, ti1 = 127, b = 2",),
                  want_updated=_rows(["id", "ti", "ti1", "ti2", "b"],
                                     (10851, -128, 127, 50, 2))),
        PeerTable("DBZ2085", "CREATE TABLE `DBZ2085` (id int not null primary key "
                  "auto_increment, b BOOLEAN NOT NULL DEFAULT 0) ENGINE=InnoDB "
                  "AUTO_INCREMENT=10851 DEFAULT CHARSET=utf8",
                  ("INSERT INTO DBZ2085 VALUES (DEFAULT, 1)",), _rows(["id", "b"], (10851, 1))),
        PeerTable("DBZ5236", "CREATE TABLE `DBZ5236` (id int(11) not null primary key "
                  "auto_increment, ti1 tinyint(3) unsigned NOT NULL DEFAULT '0', "
                  "ti2 tinyint(1) unsigned NOT NULL DEFAULT '0', "
                  "ti3 tinyint(1) NOT NULL DEFAULT '1') ENGINE=InnoDB AUTO_INCREMENT=1 "
                  "DEFAULT CHARSET=utf8",
                  ("INSERT INTO DBZ5236 VALUES (DEFAULT, 1, 1, 0)",),
                  # the converter: (short) 1, true, false
                  _rows(["id", "ti1", "ti2", "ti3"], (1, 1, 1, 0)),
                  update=("UPDATE DBZ5236 SET ti1 = 255, ti2 = 255, ti3 = -1",),
                  want_updated=_rows(["id", "ti1", "ti2", "ti3"], (1, 255, 255, -1))),
        PeerTable("BOOLEAN_TEST", "CREATE TABLE `BOOLEAN_TEST` (`id` INT NOT NULL "
                  "AUTO_INCREMENT, `b1` boolean default true, `b2` boolean default false, "
                  "PRIMARY KEY (`ID`)) ENGINE=InnoDB AUTO_INCREMENT=1 DEFAULT CHARSET=utf8mb4",
                  ("INSERT INTO BOOLEAN_TEST(b1, b2) VALUE (false, true)",),
                  _rows(["id", "b1", "b2"], (1, 0, 1))),
    )
    return PeerFile(f"{DEBEZIUM} {DDL}/unsigned_integer_test.sql, tinyint_test.sql, "
                    "boolean_test.sql", tables)


# -- decimals and floats ------------------------------------------------------------------------

def _rating(kind: str) -> PeerTable:
    name = f"dbz_751_{kind.lower()}_column_test"
    want = _rows(["id", "rating1", "rating2", "rating3", "rating4"],
                 (1, dec("123"), dec("123.4567"), dec("235"), dec("346")))
    return PeerTable(
        name, f"CREATE TABLE {name} (id INT AUTO_INCREMENT NOT NULL, rating1 {kind}, "
              f"rating2 {kind}(8, 4), rating3 {kind}(7), rating4 {kind}(6, 0), "
              "PRIMARY KEY (id)) DEFAULT CHARSET=utf8",
        (f"INSERT INTO {name} VALUES (default, 123, 123.4567, 234.5, 345.6)",), want,
        update=((f"UPDATE {name} SET rating1 = -9999999999, rating2 = -9999.99995, "
                "rating3 = -0.5"),),
        want_updated=changed(want, "id", {1: {"rating1": dec("-9999999999"),
                                              "rating2": dec("-9999.9999"),  # clipped
                                              "rating3": dec("-1")}}),
        session=("SET SESSION sql_mode = ''",))  # -9999.99995 is out of range: clipped


def decimals(mysql: bool) -> PeerFile:
    dbz730 = _rows(["id", "A", "B", "C", "D", "E"],
                   # DECIMAL(65, 18): sparkcdc's plain text (Debezium: BigDecimal 0E-18)
                   (15851, dec("1.33"), dec("-2.111"), dec("3.44400"), None,
                    "0.000000000000000000"))
    dbz3865 = _rows(["id", "f1", "f2", "f3", "f4_23", "f4_24", "f4_25", "weight"],
                    # Debezium gives FLOAT(10,2) and FLOAT(35,5) as float64 of the float32
                    # the server stores; sparkcdc as float32: the same numbers
                    (1, f32(5.6), f32(5.61), f32(30.12346), f32(64.1), f32(64.1), 64.1,
                     f32(64.1234)))
    return PeerFile(
        f"{DEBEZIUM} {DDL}/numeric_column_test.sql, decimal_column_test.sql, "
        "decimal_test.sql, float_test.sql, real_test.sql",
        (_rating("NUMERIC"), _rating("DECIMAL"),
         PeerTable("DBZ730", "CREATE TABLE `DBZ730` (id INT NOT NULL PRIMARY KEY "
                   "AUTO_INCREMENT, A NUMERIC(3, 2) NOT NULL DEFAULT 1.23, "
                   "B DECIMAL(4, 3) NOT NULL DEFAULT 2.321, "
                   "C NUMERIC(7, 5) NULL DEFAULT '12.678', D NUMERIC(7, 5) NULL DEFAULT "
                   "'15.28', E DECIMAL(65, 18) NULL DEFAULT '0.000000000000000000') "
                   "ENGINE=InnoDB AUTO_INCREMENT=15851 DEFAULT CHARSET=utf8",
                   ("INSERT INTO `DBZ730`(A, B, C, D) VALUES (1.33, -2.111 , 3.444, NULL)",),
                   dbz730,
                   update=("UPDATE DBZ730 SET D = DEFAULT, E = -1.5",),
                   want_updated=changed(dbz730, "id", {15851: {
                       "D": dec("15.28000"), "E": "-1.500000000000000000"}})),
         PeerTable("DBZ3865", "CREATE TABLE `DBZ3865` (`id` INT NOT NULL AUTO_INCREMENT, "
                   "`f1` FLOAT DEFAULT 5.6, `f2` FLOAT(10, 2) DEFAULT NULL, "
                   "`f3` FLOAT(35, 5) DEFAULT NULL, `f4_23` FLOAT(23) DEFAULT NULL, "
                   "`f4_24` FLOAT(24) DEFAULT NULL, `f4_25` FLOAT(25) DEFAULT NULL, "
                   "`weight` FLOAT UNSIGNED DEFAULT '0', PRIMARY KEY (`ID`)) ENGINE=InnoDB "
                   "AUTO_INCREMENT=1 DEFAULT CHARSET=utf8mb4",
                   (("INSERT INTO DBZ3865(f1, f2, f3, f4_23, f4_24, f4_25, weight) VALUE "
                    "(5.6, 5.61, 30.123456, 64.1, 64.1, 64.1, 64.1234)"),), dbz3865,
                   update=("UPDATE DBZ3865 SET f1 = -1.5, f4_25 = 1.7976931348623157e308",),
                   want_updated=changed(dbz3865, "id", {1: {
                       "f1": -1.5, "f4_25": 1.7976931348623157e308}})),
         PeerTable("REAL_TEST", "CREATE TABLE `REAL_TEST` (`id` INT NOT NULL AUTO_INCREMENT, "
                   "`r1` real default 1.25, PRIMARY KEY (`ID`)) ENGINE=InnoDB "
                   "AUTO_INCREMENT=1 DEFAULT CHARSET=utf8mb4",
                   ("INSERT INTO REAL_TEST(r1) VALUE (2.36)",), _rows(["id", "r1"], (1, 2.36)),
                   update=("UPDATE REAL_TEST SET r1 = DEFAULT",),
                   want_updated=_rows(["id", "r1"], (1, 1.25)))))


# -- dates and years ----------------------------------------------------------------------------

_YEAR_TYPES = {"y": "YEAR", "d": "DATE", "dt": "DATETIME"}


def temporal(mysql: bool) -> PeerFile:
    cols = ["id", "y18", "y0018", "y2018", "d18", "d0018", "d2018", "dt18", "dt0018", "dt2018",
            "y78", "y0078", "y1978", "d78", "d0078", "d1978", "dt78", "dt0078", "dt1978"]
    # BinlogYearIT with enable.time.adjuster=false ("ByDatabase"): the stored values.
    # Debezium's default adjuster turns 0018-04-01 into 2018-04-01; sparkcdc never does.
    # dt0018 and dt0078 Debezium cannot hold (epoch nanos underflow): the wall clock here
    years = _rows(cols, (1, 2018, 2018, 2018, epoch_day(17622), epoch_day(-712863),
                         epoch_day(17622), epoch_millis(1_522_586_096_000),
                         wall("0018-04-01 12:34:56"), epoch_millis(1_522_586_096_000),
                         1978, 1978, 1978, epoch_day(3012), epoch_day(-690948), epoch_day(3012),
                         epoch_millis(260_282_096_000), wall("0078-04-01 12:34:56"),
                         epoch_millis(260_282_096_000)))
    key_cols = ["id", "dtval", "dval", "tval"]
    # zero dates in the key: null by default; BinlogDateTimeInKeyIT's 0, 0, 0 (the epoch)
    # under zero-dates.not-null: epoch
    zero_key = _rows(key_cols, (1, None, None, micro_time(0)))
    return PeerFile(
        f"{DEBEZIUM} {DDL}/year_test.sql, datetime_key_test.sql",
        (PeerTable("dbz_1143_year_test",
                   "CREATE TABLE dbz_1143_year_test (id INT AUTO_INCREMENT NOT NULL, "
                   + ", ".join(f"{c} {_YEAR_TYPES[c.rstrip('0123456789')]}" for c in cols[1:])
                   + ", PRIMARY KEY (id)) DEFAULT CHARSET=utf8",
                   (("INSERT INTO dbz_1143_year_test VALUES (default, '18', '0018', '2018', "
                    "'18-04-01', '0018-04-01', '2018-04-01', '18-04-01 12:34:56', "
                    "'0018-04-01 12:34:56', '2018-04-01 12:34:56', '78', '0078', '1978', "
                    "'78-04-01', '0078-04-01', '1978-04-01', '78-04-01 12:34:56', "
                    "'0078-04-01 12:34:56', '1978-04-01 12:34:56')"),), years,
                   update=(("UPDATE dbz_1143_year_test SET y18 = 1901, y2018 = 2155, "
                           "y78 = 0, d18 = '0001-01-01', dt18 = '9999-12-31 23:59:59'"),),
                   want_updated=changed(years, "id", {1: {
                       "y18": 1901, "y2018": 2155, "y78": 0, "d18": dt.date(1, 1, 1),
                       "dt18": wall("9999-12-31 23:59:59")}})),
         PeerTable("dbz_1194_datetime_key_test",
                   "CREATE TABLE dbz_1194_datetime_key_test (id INT AUTO_INCREMENT NOT NULL, "
                   "dtval DATETIME NOT NULL, dval DATE NOT NULL, tval TIME NOT NULL, "
                   "PRIMARY KEY (id, dtval, dval, tval)) DEFAULT CHARSET=utf8",
                   (("INSERT INTO dbz_1194_datetime_key_test VALUES (default, "
                    "'0000-00-00 00:00:00', '0000-00-00', '00:00:00')"),), zero_key,
                   session=("SET sql_mode=''",),
                   want_epoch=({**zero_key[0], "dtval": dt.datetime(1970, 1, 1),
                                "dval": EPOCH},),
                   update=("UPDATE dbz_1194_datetime_key_test SET dval = '2020-02-29'",),
                   want_updated=({**zero_key[0], "dval": dt.date(2020, 2, 29)},))))


# -- enums and binary ---------------------------------------------------------------------------

NOW = "SET TIMESTAMP = 1600000000"  # CURRENT_TIMESTAMP: 2020-09-13 12:26:40 UTC


def strings_and_binary(mysql: bool) -> PeerFile:
    stamp = wall("2020-09-13 12:26:40")
    stations = _rows(["id", "name", "type", "created", "modified"],
                     (1, "ha Tinh 7", "station", stamp, stamp),
                     (2, "Ha Tinh 1", "now", stamp, stamp))
    uuid = _rows(["id", "file_uuid"], *[(i, base64.b64decode(v)) for i, v in enumerate(
        # BinlogFixedLengthBinaryColumnIT: a short value is padded with zero bytes
        ["ZRrtCDkPSJOy8TaSPnt0AA==", "ZRrtCDkPSJOy8TaSPnt0qw==", "ZRrtCDkPSJOy8TaSPnt0AA==",
         "AAAAAAAAAAAAAAAAAAAAAA=="], start=1)])
    blob_cols = ["id", "blob_col", "tinyblob_col", "mediumblob_col", "longblob_col",
                 "binary_col", "varbinary_col"]
    blobs = _rows(blob_cols, (1, *[b"\x01\x02\x03"] * 6))
    return PeerFile(
        f"{DEBEZIUM} {DDL}/enum_column_test.sql, binary_column_test.sql, "
        "binary_mode_test.sql",
        (PeerTable("test_stations_10",
                   "CREATE TABLE `test_stations_10` (`id` int(10) unsigned NOT NULL "
                   "AUTO_INCREMENT, `name` varchar(500) COLLATE utf8_unicode_ci NOT NULL, "
                   "`type` enum('station', 'post_office') COLLATE utf8_unicode_ci NOT NULL "
                   "DEFAULT 'station', `created` datetime DEFAULT CURRENT_TIMESTAMP, "
                   "`modified` datetime DEFAULT CURRENT_TIMESTAMP ON UPDATE CURRENT_TIMESTAMP, "
                   "PRIMARY KEY (`id`))",
                   (("INSERT INTO test_stations_10 (`name`, `type`) values "
                    "( 'ha Tinh 7', 'station' )"),
                    ("ALTER TABLE `test_stations_10` MODIFY COLUMN `type` ENUM('station', "
                    "'post_office', 'plane', 'ahihi_dongok', 'now', 'test', 'a,b', 'c,\\'d', "
                    "'g,''h') CHARACTER SET 'utf8' COLLATE 'utf8_unicode_ci' NOT NULL "
                    "DEFAULT 'station'"),
                    ("INSERT INTO test_stations_10 ( `name`, `type` ) values "
                    "( 'Ha Tinh 1', 'now' )")), stations,
                   session=(NOW,),
                   update=("UPDATE test_stations_10 SET type = 'c,''d' WHERE id = 1",
                           "UPDATE test_stations_10 SET type = 'g,''h' WHERE id = 2"),
                   want_updated=changed(stations, "id", {1: {"type": "c,'d"},
                                                         2: {"type": "g,'h"}})),
         PeerTable("dbz_254_binary_column_test",
                   "CREATE TABLE dbz_254_binary_column_test (id INT AUTO_INCREMENT NOT NULL, "
                   "file_uuid BINARY(16), PRIMARY KEY (id)) DEFAULT CHARSET=utf8",
                   tuple(f"INSERT INTO dbz_254_binary_column_test VALUES (default, {v})" for v in (
                       "unhex(replace('651aed08-390f-4893-b2f1-36923e7b7400','-',''))",
                       "unhex(replace('651aed08-390f-4893-b2f1-36923e7b74ab','-',''))",
                       "unhex(replace('651aed08-390f-4893-b2f1-36923e7b74','-',''))",
                       "unhex(00)")), uuid,
                   update=copy_rows("dbz_254_binary_column_test", ["id", "file_uuid"], "id",
                                    {2: 4, 4: 2}),
                   want_updated=copied(uuid, "id", {2: 4, 4: 2})),
         PeerTable("dbz_1814_binary_mode_test",
                   "CREATE TABLE dbz_1814_binary_mode_test (id INT AUTO_INCREMENT NOT NULL, "
                   "blob_col BLOB NOT NULL, tinyblob_col TINYBLOB NOT NULL, "
                   "mediumblob_col MEDIUMBLOB NOT NULL, longblob_col LONGBLOB NOT NULL, "
                   "binary_col BINARY(3) NOT NULL, varbinary_col varbinary(20) NOT NULL, "
                   "PRIMARY KEY (id)) DEFAULT CHARSET=utf8",
                   (("INSERT INTO dbz_1814_binary_mode_test (id, blob_col, tinyblob_col, "
                    "mediumblob_col, longblob_col, binary_col, varbinary_col) VALUES (default, "
                    "X'010203', X'010203', X'010203', X'010203', X'010203', X'010203')"),),
                   blobs,
                   update=(("UPDATE dbz_1814_binary_mode_test SET blob_col = X'', "
                           "binary_col = X'01', varbinary_col = X'00'"),),
                   want_updated=changed(blobs, "id", {1: {
                       "blob_col": b"", "binary_col": b"\x01\x00\x00",
                       "varbinary_col": b"\x00"}}))))


FILES = (regression, integers, decimals, temporal, strings_and_binary)
