"""Rows both decoders must agree on: random rows written through the server
(``write_random_rows``, from the ``random_rows`` strategy) and the comparison that treats
NaN as equal to NaN."""

from __future__ import annotations

import datetime as dt
import json
import math
import uuid

from hypothesis import strategies as st
from types_support import cdc

from sparkcdc.core.schema import TableId
from sparkcdc.mysql.binlog.reader import load_table_schema
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


def write_random_rows(mariadb, db, rows, new_rows, one_transaction=False):
    """A new ``RANDOM_DDL`` table: ``rows`` inserted, the first ones updated to ``new_rows``
    (``n`` changes, so every update is logged), then the even ids deleted; the inserts and
    updates in one transaction with ``one_transaction``. Returns (the CDC connection
    options, the table's schema, the offsets before and after)."""
    conn = cdc(mariadb)
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
