"""Rows both decoders must agree on: random rows written through the server
(``write_random_rows``, from the ``random_rows`` strategy), random row-image bytes of every
column type (``FUZZ``, ``fuzz_image``) and the comparison that treats NaN as equal to NaN."""

from __future__ import annotations

import datetime as dt
import json
import math
import uuid
from types import SimpleNamespace

from hypothesis import strategies as st
from types_support import cdc

from sparkcdc.core.schema import Column, TableId
from sparkcdc.mysql.binlog import field_decoders as B
from sparkcdc.mysql.binlog.protocol.codes import ColumnType as CT
from sparkcdc.mysql.binlog.server_lookups import load_table_schema
from sparkcdc.mysql.offsets import current_offset


def same(a, b) -> bool:
    """Equal values of the same type (NaN equals NaN: random float bytes make NaNs)."""
    if type(a) is not type(b):
        return False
    if isinstance(a, float) and math.isnan(a):
        return math.isnan(b)
    return a == b


def assert_rows_same(got, want, where=""):
    assert len(got) == len(want), where
    for n, (g, w) in enumerate(zip(got, want)):
        for img_g, img_w in zip(g, w):
            if img_w is None:
                assert img_g is None, where
                continue
            assert list(img_g) == list(img_w), where
            for k in img_w:
                assert same(img_g[k], img_w[k]), \
                    f"{where} row {n} column {k}: C {img_g[k]!r}, reference {img_w[k]!r}"


RANDOM_DDL = """CREATE TABLE `{t}` (
  id INT PRIMARY KEY, ti TINYINT, su SMALLINT UNSIGNED, mi MEDIUMINT, bu BIGINT UNSIGNED,
  bi BIGINT, d DECIMAL(12,4), dw DECIMAL(50,20), f FLOAT, db DOUBLE, b1 BIT(1), b9 BIT(9),
  c CHAR(5), vc VARCHAR(300), tx TEXT, l1 VARCHAR(20) CHARACTER SET latin1, bn BINARY(3),
  vb VARBINARY(20), bl BLOB, da DATE, tm TIME(6), tm2 TIME(2), dt DATETIME(3), ts TIMESTAMP(6) NULL,
  y YEAR, e ENUM('a','b','c'), st SET('p','q','r'), j JSON, n INT DEFAULT 0
) CHARACTER SET utf8mb4"""

_text = st.text(alphabet=st.characters(codec="utf-8", exclude_categories=("Cs",)),
                max_size=12)
_td = st.integers(-(838 * 3600 + 3599) * 10**6 - 999999, (838 * 3600 + 3599) * 10**6 + 999999)


def _time_literal(us: int, digits: int) -> str:
    sign = "-" if us < 0 else ""
    us = abs(us)
    s, frac = divmod(us, 10**6)
    frac = f"{frac:06d}"[:digits]
    return f"{sign}{s // 3600}:{s // 60 % 60:02d}:{s % 60:02d}" + (f".{frac}" if digits else "")


_ROW_FIELDS = {
    "ti": st.integers(-128, 127), "su": st.integers(0, 65535),
    "mi": st.integers(-2**23, 2**23 - 1), "bu": st.integers(0, 2**64 - 1),
    "bi": st.integers(-2**63, 2**63 - 1),
    "d": st.decimals(min_value=-10**8 + 1, max_value=10**8 - 1, places=4),
    "dw": st.decimals(min_value=-10**29 + 1, max_value=10**29 - 1, places=20),
    "f": st.floats(-2.0**100, 2.0**100, width=32), "db": st.floats(allow_nan=False,
                                                            allow_infinity=False),
    "b1": st.integers(0, 1), "b9": st.integers(0, 511), "c": _text.map(lambda s: s[:5]),
    "vc": _text, "tx": st.text(max_size=200), "l1": st.text(alphabet="abcé€ÿ ", max_size=20),
    "bn": st.binary(max_size=3), "vb": st.binary(max_size=20), "bl": st.binary(max_size=300),
    "da": st.dates(dt.date(1000, 1, 1), dt.date(9999, 12, 31)),
    "tm": _td.map(lambda us: _time_literal(us, 6)), "tm2": _td.map(lambda us: _time_literal(us, 2)),
    "dt": st.datetimes(dt.datetime(1000, 1, 1), dt.datetime(9999, 12, 31))
          .map(lambda x: x.replace(microsecond=x.microsecond // 1000 * 1000)),
    "ts": st.integers(1, 2**31 - 1).map(lambda s: dt.datetime.fromtimestamp(s, dt.timezone.utc)
                                      .strftime("%Y-%m-%d %H:%M:%S.123456")),
    "y": st.sampled_from([0, 1901, 2024, 2155]), "e": st.sampled_from(["a", "b", "c"]),
    "st": st.sets(st.sampled_from("pqr")).map(lambda s: ",".join(sorted(s))),
    "j": st.recursive(st.none() | st.booleans() | st.integers(-1000, 1000) | _text,
                      lambda k: st.lists(k, max_size=3) | st.dictionaries(_text, k, max_size=3),
                      max_leaves=5).map(json.dumps),
}
_row = st.fixed_dictionaries(_ROW_FIELDS)
random_rows = st.lists(
    st.builds(lambda full, nulls: {k: (None if k in nulls else v) for k, v in full.items()},
              _row, st.sets(st.sampled_from(sorted(_ROW_FIELDS)))),
    min_size=1, max_size=6)


def _mysql_times(rows: list[dict]) -> list[dict]:
    """The rows with TIMEs beyond MySQL's range (MariaDB's goes to 838:59:59.999999) at
    its end."""
    def clamp(v):
        return v.split(".")[0] if v and v.lstrip("-").startswith("838:59:59.") else v
    return [{**r, "tm": clamp(r["tm"]), "tm2": clamp(r["tm2"])} for r in rows]


def write_random_rows(mariadb, db, rows, new_rows, one_transaction=False):
    """A new ``RANDOM_DDL`` table: ``rows`` inserted, the first ones updated to ``new_rows``
    (``n`` changes, so every update is logged), then the even ids deleted; the inserts and
    updates in one transaction with ``one_transaction``. Returns (the CDC connection
    options, the table's schema, the offsets before and after)."""
    conn = cdc(mariadb)
    if mariadb.info.server == "mysql":  # MySQL's TIME ends at 838:59:59.000000
        rows, new_rows = _mysql_times(rows), _mysql_times(new_rows)
    table = f"r_{uuid.uuid4().hex[:8]}"
    mariadb.execute("SET SESSION time_zone = '+00:00'", RANDOM_DDL.format(t=table),
                    database=db)
    cols = sorted(_ROW_FIELDS)
    start = current_offset(conn)
    with mariadb.admin_connection(db) as c, c.cursor() as cur:
        cur.execute("SET SESSION time_zone = '+00:00'")
        if one_transaction:
            cur.execute("BEGIN")
        ins = (f"INSERT INTO `{table}` (id, {', '.join(cols)}) VALUES "
               f"(%s{', %s' * len(cols)})")
        cur.executemany(ins, [(i, *(r[k] for k in cols)) for i, r in enumerate(rows)])
        for i, r in enumerate(new_rows[:len(rows)]):
            cur.execute(f"UPDATE `{table}` SET n = n + 1, "
                        f"{', '.join(f'{k} = %s' for k in cols)} WHERE id = %s",
                        (*(r[k] for k in cols), i))
        if one_transaction:
            cur.execute("COMMIT")
        cur.execute(f"DELETE FROM `{table}` WHERE id % 2 = 0")
    end = current_offset(conn)
    return conn, load_table_schema(conn, TableId(db, table)), start, end


# -- random row-image bytes, every column type ------------------------------------------------

def binlog_column(t, **kw):
    """A table-map column as the row decoders read it (``protocol.ColumnMeta``'s names)."""
    names = ("name", "max_length", "length_size", "fsp", "precision", "decimals", "bytes",
             "bits", "size", "enum_values", "set_values", "character_set_name")
    return SimpleNamespace(**{**dict.fromkeys(names), "type": t, **kw})


def _fixed(n):
    return st.binary(min_size=n, max_size=n)


def _prefixed(nbytes, payload):
    return payload.map(lambda b: len(b).to_bytes(nbytes, "little") + b)


_utf8 = st.text(max_size=40).map(lambda s: s.encode("utf-8"))

# every column type: (column type, charset, binlog column, strategy of the value's bytes
# in the row image), values no server writes included (invalid dates, out-of-range
# fractions, unknown ENUM indexes, text invalid in its charset)
FUZZ = [
    ("tinyint(4)", None, binlog_column(CT.TINY), _fixed(1)),
    ("tinyint(3) unsigned", None, binlog_column(CT.TINY), _fixed(1)),
    ("smallint(6)", None, binlog_column(CT.SHORT), _fixed(2)),
    ("smallint(5) unsigned", None, binlog_column(CT.SHORT), _fixed(2)),
    ("mediumint(9)", None, binlog_column(CT.INT24), _fixed(3)),
    ("mediumint(8) unsigned", None, binlog_column(CT.INT24), _fixed(3)),
    ("int(11)", None, binlog_column(CT.LONG), _fixed(4)),
    ("int(10) unsigned", None, binlog_column(CT.LONG), _fixed(4)),
    ("bigint(20)", None, binlog_column(CT.LONGLONG), _fixed(8)),
    ("bigint(20) unsigned", None, binlog_column(CT.LONGLONG), _fixed(8)),
    ("float", None, binlog_column(CT.FLOAT), _fixed(4)),
    ("double", None, binlog_column(CT.DOUBLE), _fixed(8)),
    ("year(4)", None, binlog_column(CT.YEAR), _fixed(1)),
    ("bit(1)", None, binlog_column(CT.BIT, bytes=1, bits=1), _fixed(1)),
    ("bit(10)", None, binlog_column(CT.BIT, bytes=2, bits=10), _fixed(2)),
    ("bit(64)", None, binlog_column(CT.BIT, bytes=8, bits=64), _fixed(8)),
    ("varchar(20)", "utf8mb4", binlog_column(CT.VARCHAR, max_length=80), _prefixed(1, _utf8)),
    ("varchar(300)", "utf8mb4", binlog_column(CT.VARCHAR, max_length=1200), _prefixed(2, _utf8)),
    ("char(10)", "utf8mb4", binlog_column(CT.STRING, max_length=40), _prefixed(1, _utf8)),
    ("varchar(20)", "latin1", binlog_column(CT.VARCHAR, max_length=20),
     _prefixed(1, st.binary(max_size=20))),
    ("varchar(20)", "greek", binlog_column(CT.VARCHAR, max_length=20),
     _prefixed(1, st.binary(max_size=20))),
    ("varchar(20)", "ascii", binlog_column(CT.VARCHAR, max_length=20),
     _prefixed(1, st.binary(max_size=20))),
    ("binary(4)", None, binlog_column(CT.STRING, max_length=4), _prefixed(1, st.binary(max_size=4))),
    ("varbinary(10)", None, binlog_column(CT.VARCHAR, max_length=10),
     _prefixed(1, st.binary(max_size=10))),
    ("text", "utf8mb4", binlog_column(CT.BLOB, length_size=2), _prefixed(2, _utf8)),
    ("mediumtext", "utf8mb4", binlog_column(CT.BLOB, length_size=3), _prefixed(3, _utf8)),
    ("longtext", "utf8mb4", binlog_column(CT.BLOB, length_size=4), _prefixed(4, _utf8)),
    ("json", "utf8mb4", binlog_column(CT.BLOB, length_size=4), _prefixed(4, _utf8)),
    ("blob", None, binlog_column(CT.BLOB, length_size=2), _prefixed(2, st.binary(max_size=40))),
    ("longblob", None, binlog_column(CT.BLOB, length_size=4), _prefixed(4, st.binary(max_size=40))),
    ("geometry", None, binlog_column(CT.GEOMETRY, length_size=4), _prefixed(4, st.binary(max_size=30))),
    ("json", None, binlog_column(CT.JSON, length_size=4), st.just(b"\0\0\0\0")),
    ("enum('a','b','it''s')", None, binlog_column(CT.ENUM, size=1), _fixed(1)),
    ("enum('a','b')", None, binlog_column(CT.ENUM, size=2), _fixed(2)),
    ("set('x','y','z')", None, binlog_column(CT.SET, size=1), _fixed(1)),
    ("set('a','b','c','d','e','f','g','h','i')", None, binlog_column(CT.SET, size=2), _fixed(2)),
    ("date", None, binlog_column(CT.DATE), _fixed(3)),
    ("time", None, binlog_column(CT.TIME), _fixed(3)),
    ("datetime", None, binlog_column(CT.DATETIME), _fixed(8)),
    ("timestamp", None, binlog_column(CT.TIMESTAMP), _fixed(4)),
] + [
    (f"time({p})", None, binlog_column(CT.TIME2, fsp=p), _fixed(3 + (p + 1) // 2)) for p in range(7)
] + [
    (f"datetime({p})", None, binlog_column(CT.DATETIME2, fsp=p), _fixed(5 + (p + 1) // 2))
    for p in range(7)
] + [
    (f"timestamp({p})", None, binlog_column(CT.TIMESTAMP2, fsp=p), _fixed(4 + (p + 1) // 2))
    for p in range(7)
] + [
    (f"decimal({p},{s})", None, binlog_column(CT.NEWDECIMAL, precision=p, decimals=s),
     _fixed(sum(n // 9 * 4 + B._DIG2BYTES[n % 9] for n in (p - s, s))))
    for p, s in [(10, 2), (65, 30), (65, 0), (30, 20), (38, 38), (1, 0), (9, 9), (18, 9),
                 (20, 0), (39, 1)]
]


# the captured columns of FUZZ (c0, c1...) and their table-map columns
FUZZ_COLUMNS = tuple(Column(f"c{i}", ctype, True, cs)
                     for i, (ctype, cs, _, _) in enumerate(FUZZ))
FUZZ_BINLOG_COLUMNS = [bc for _, _, bc, _ in FUZZ]


@st.composite
def fuzz_image(draw):
    """One row image of the FUZZ columns: the NULL bitmap, then random bytes of each value."""
    nulls = draw(st.lists(st.booleans(), min_size=len(FUZZ), max_size=len(FUZZ)))
    bitmap = bytearray((len(FUZZ) + 7) // 8)
    body = b""
    for i, (null, (_, _, _, value)) in enumerate(zip(nulls, FUZZ)):
        if null:
            bitmap[i >> 3] |= 1 << (i & 7)
        else:
            body += draw(value)
    return bytes(bitmap) + body
