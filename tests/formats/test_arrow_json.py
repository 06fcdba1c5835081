"""The Arrow (driver-side) writer of the formats against the Spark encoders: for every
format, on the all-types rows and a stream of inserts, paired and unpaired updates, deletes
and a snapshot, the same keys and the same messages once read back (by Spark's ``decode``
and by the kafka source's ``decode_message``), with tombstones in the same places. And
against its value-by-value predecessor (``tests/support/arrow_json_oracle.py``) on random batches,
byte for byte: the column-wise writer changed how, never what."""

from __future__ import annotations

import datetime as dt
import decimal
import json

import arrow_json_oracle
import pyarrow as pa
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from sink_support import ALL_TYPES_DDL, all_types_rows, changes_df

from sparkcdc import formats
from sparkcdc.formats import arrow_json
from sparkcdc.formats.messages import decode_message


def _stream(spark):
    rows = all_types_rows()
    changes = [r + ("insert", 10 + i) for i, r in enumerate(rows)]           # a snapshot
    changes += [rows[0] + ("update_preimage", 1001),                         # every column
                (rows[0][0],) + rows[1][1:] + ("update_postimage", 1002),
                (rows[1][0],) + rows[1][1:] + ("update_postimage", 1011),    # no pre-image
                rows[2] + ("delete", 2001),
                (99,) + rows[1][1:] + ("insert", 3001)]                      # a binlog insert
    changes.reverse()  # only _seq orders a batch
    return changes_df(spark, ALL_TYPES_DDL, changes)


def _spark_msgs(df, fmt, tombstones):
    kw = {"tombstones": True} if tombstones else {}
    t = formats.encode(df.orderBy("_seq"), fmt, ["id"], **kw).toArrow()
    return list(zip(t.column("key").to_pylist(), t.column("value").to_pylist()))


def _decoded(spark, msgs, fmt):
    df = spark.createDataFrame([(k, v) for k, v in msgs], "key string, value string")
    return sorted(formats.decode(df, fmt, ALL_TYPES_DDL).collect(),
                  key=lambda r: (str(r["_seq"]), r["_change_type"], r["id"]))


def _normal(fmt: str, value: str | None):
    """A message as the kafka source reads it."""
    if value is None:
        return None
    return [(c.kind, c.database, c.table, c.op_ts_ms, c.snapshot, c.row)
            for c in decode_message(fmt, None, value.encode())]


@pytest.mark.parametrize("fmt", formats.FORMATS)
@pytest.mark.parametrize("tombstones", [False, True])
def test_the_same_messages_as_the_spark_encoders(spark, fmt, tombstones):
    df = _stream(spark)
    ours = [(k.decode() if k else None, v.decode() if v is not None else None)
            for k, v in arrow_json.encode(df.toArrow(), fmt, ["id"], version=_version(),
                                          tombstones=tombstones)]
    theirs = _spark_msgs(df, fmt, tombstones)
    # one message per change (pre-images folded into their update where the format does)
    assert len(ours) == len(theirs)
    assert all(k for k, _ in ours)
    assert sorted(k for k, _ in ours) == sorted(k for k, _ in theirs)
    # a key's messages in the same order, tombstones right after their delete
    for msgs in (ours, theirs):
        for i, (_k, v) in enumerate(msgs):
            if v is None:
                assert msgs[i - 1][0] == msgs[i][0]
    assert _decoded(spark, ours, fmt) == _decoded(spark, theirs, fmt)
    per_key = {}
    for name, msgs in (("ours", ours), ("theirs", theirs)):
        seen: dict = {}
        for k, v in msgs:
            seen.setdefault(k, []).append(_normal(fmt, v))
        per_key[name] = seen
    assert per_key["ours"] == per_key["theirs"]
    if fmt == "canal-json":  # only the changed columns' old values
        upd = next(json.loads(v) for _k, v in ours if v and json.loads(v)["seq"] == "1002")
        assert "id" not in upd["old"][0] and set(upd["old"][0]) < set(upd["data"][0])


def _version() -> str:
    from sparkcdc import __version__

    return __version__


UTC = dt.timezone.utc
# the all-types rows' columns as the pipeline's Arrow rows carry them, and a zoned timestamp
# outside UTC, a large string and a millisecond timestamp (written by Python)
_TEXT = st.text(alphabet=st.one_of(
    st.sampled_from(['"', "\\", "\n", "\t", "\x00", "\x1f", "\x7f", "é", "中", "😀",
                     "\u2028", "/", "'", " ", "a"]),
    st.characters(codec="utf-8", exclude_categories=("Cs",))), max_size=8)


def _scaled(i: int) -> decimal.Decimal:
    """``i`` * 10**-10 with its ten places written out (as DECIMAL(38,10) holds it)."""
    digits = str(abs(i)).rjust(11, "0")
    return decimal.Decimal(f"{'-' if i < 0 else ''}{digits[:-10]}.{digits[-10:]}")


_DATA = [
    ("id", pa.int32(), st.sampled_from([1, 2, 3, None])),  # few keys: each changes often
    ("c_tinyint", pa.int8(), st.integers(-128, 127)),
    ("c_smallint", pa.int16(), st.integers(-(2**15), 2**15 - 1)),
    ("c_int", pa.int32(), st.integers(-(2**31), 2**31 - 1)),
    ("c_bigint", pa.int64(), st.integers(-(2**63), 2**63 - 1)),
    ("c_bigint_unsigned", pa.decimal128(20, 0),
     st.integers(0, 2**64 - 1).map(decimal.Decimal)),
    ("c_decimal", pa.decimal128(38, 10),
     st.integers(-(10**38) + 1, 10**38 - 1).map(_scaled)),
    ("c_decimal65", pa.string(), st.integers(-(10**65) + 1, 10**65 - 1).map(str)),
    ("c_float", pa.float32(), st.floats(width=32)),
    ("c_double", pa.float64(), st.one_of(st.floats(allow_nan=False, allow_infinity=False),
                                         st.floats())),
    ("c_bit1", pa.bool_(), st.booleans()),
    ("c_binary", pa.binary(), st.binary(max_size=8)),
    ("c_varchar", pa.string(), _TEXT),
    ("c_text", pa.large_string(), _TEXT),
    ("c_date", pa.date32(), st.dates()),
    ("c_time", pa.duration("us"), st.timedeltas(-dt.timedelta(hours=839),
                                                dt.timedelta(hours=839))),
    ("c_datetime", pa.timestamp("us"), st.datetimes()),
    ("c_timestamp", pa.timestamp("us", tz="UTC"), st.datetimes(timezones=st.just(UTC))),
    ("c_paris", pa.timestamp("us", tz="Europe/Paris"), st.datetimes(timezones=st.just(UTC))),
    ("c_ms", pa.timestamp("ms"), st.datetimes().map(lambda v: v.replace(
        microsecond=v.microsecond // 1000 * 1000))),
    ("c_year", pa.int16(), st.integers(1901, 2155)),
]
_KINDS = ["insert", "update_preimage", "update_postimage", "delete"]


@st.composite
def _batches(draw):
    """Random change rows: single images and whole updates (a pre-image then its
    post-image, sometimes of another key), nulls in every column, ``_seq`` in order or not
    and sometimes repeated, a database and table that change or not, one chunk or two."""
    rows, kinds = [], []
    for _ in range(draw(st.integers(0, 14))):
        row = {name: draw(st.one_of(st.none(), values)) for name, _t, values in _DATA}
        if draw(st.booleans()):
            post = {**row, **{n: draw(st.one_of(st.none(), v))
                              for n, _t, v in _DATA if draw(st.booleans())}}
            rows += [row, post]
            kinds += ["update_preimage", "update_postimage"]
        else:
            rows.append(row)
            kinds.append(draw(st.sampled_from(_KINDS)))
    n = len(rows)
    if draw(st.booleans()):
        seqs = list(range(10**20, 10**20 + n))
    else:
        seqs = draw(st.lists(st.integers(0, max(n // 2, 1)), min_size=n, max_size=n))
    names = st.sampled_from(["shop", 'a"b\\c', "中"])
    one_db, one_table = draw(names), draw(names)
    varying = draw(st.booleans())
    meta = {
        "_change_type": pa.array(kinds, pa.string()),
        "_database": pa.array([draw(names) if varying else one_db for _ in rows], pa.string()),
        "_table": pa.array([draw(names) if varying else one_table for _ in rows], pa.string()),
        "_op_ts": pa.array([draw(st.one_of(st.none(), st.datetimes(timezones=st.just(UTC))))
                            for _ in rows], pa.timestamp("us", tz="UTC")),
        "_seq": pa.array([decimal.Decimal(v) for v in seqs], pa.decimal128(38, 0)),
    }
    data = {name: pa.array([r[name] for r in rows], t) for name, t, _v in _DATA}
    table = pa.table({**data, **meta})
    cut = draw(st.integers(0, n))  # sometimes in two chunks
    return pa.concat_tables([table.slice(0, cut), table.slice(cut)]) if cut else table


@pytest.mark.long
@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow,
                                                                   HealthCheck.data_too_large])
@given(batch=_batches(), keys=st.sampled_from([["id"], [], ["id", "c_varchar"]]))
def test_the_same_bytes_as_the_value_by_value_writer(batch, keys):
    for fmt in formats.FORMATS:
        for tombstones in (False, True):
            kw = {"version": "1.2", "name": 'n"1', "tombstones": tombstones}
            assert (arrow_json.encode(batch, fmt, keys, **kw)
                    == arrow_json_oracle.encode(batch, fmt, keys, **kw)), (fmt, tombstones)


@pytest.mark.parametrize("fmt", formats.FORMATS)
def test_a_batch_in_chunks_and_out_of_order(fmt):
    """A key updated many times, its images far apart, updates of other keys in between, a
    post-image without its pre-image and a pre-image without its post-image; the table in
    several chunks."""
    kinds = ["insert", "update_preimage", "update_preimage", "update_postimage",
             "update_postimage", "update_postimage", "update_preimage", "update_postimage",
             "update_preimage", "delete"]
    ids = [1, 1, 2, 2, 1, 1, 1, 3, 3, 1]
    t = pa.table({"id": ids, "v": [f"v{i}\"" for i in range(10)], "_change_type": kinds,
                  "_database": ["db"] * 10, "_table": ["t"] * 10,
                  "_op_ts": pa.array([None] * 10, pa.timestamp("us", tz="UTC")),
                  "_seq": pa.array([decimal.Decimal(10 - i) for i in range(10)],
                                   pa.decimal128(38, 0))})
    chunked = pa.concat_tables([t.slice(0, 3), t.slice(3, 4), t.slice(7)])
    for keys in (["id"], []):
        got = arrow_json.encode(chunked, fmt, keys, tombstones=True)
        assert got == arrow_json_oracle.encode(t, fmt, keys, tombstones=True)
        if fmt != "changelog-json":
            assert len(got) == 10 - kinds.count("update_preimage") + 1  # and one tombstone


@settings(max_examples=100, deadline=None, suppress_health_check=[HealthCheck.too_slow,
                                                                   HealthCheck.data_too_large])
@given(batch=_batches(), keys=st.sampled_from([["id"], [], ["id", "c_varchar"]]),
       rows=st.integers(1, 6))
def test_parts_are_the_batch_in_order(batch, keys, rows):
    """``encode_parts`` (the kafka sink's) cut small: the same messages in the same order as
    the whole batch's, and never an update's two images in different parts."""
    for fmt in formats.FORMATS:
        for tombstones in (False, True):
            kw = {"version": "1.2", "tombstones": tombstones}
            parts = list(arrow_json.encode_parts(batch, fmt, keys, rows=rows, **kw))
            assert [m for p in parts for m in p] == arrow_json.encode(batch, fmt, keys, **kw)


def test_parts_cut_between_whole_updates_only():
    """Updates (pre-image then post-image) of one key after another, cut every 3 rows: a
    part never ends on a pre-image; a batch whose pre-image is not followed at once by its
    post-image is one part."""
    n = 12
    kinds = ["update_preimage", "update_postimage"] * (n // 2)
    t = pa.table({"id": [i // 2 for i in range(n)], "_change_type": kinds,
                  "_database": ["db"] * n, "_table": ["t"] * n,
                  "_op_ts": pa.array([None] * n, pa.timestamp("us", tz="UTC")),
                  "_seq": pa.array([decimal.Decimal(i) for i in range(n)],
                                   pa.decimal128(38, 0))})
    sizes = [t.num_rows for t in arrow_json._parts(t, ["id"], 3)]
    assert sizes == [4, 4, 4]  # 3 rows would part the second update's images
    parts = list(arrow_json.encode_parts(t, "debezium-json", ["id"], rows=3))
    assert [len(p) for p in parts] == [2, 2, 2]
    assert all(json.loads(v)["op"] == "u" for p in parts for _k, v in p)
    apart = t.take([0, 2, 1, 3] + list(range(4, n)))  # a pre-image, then another key's
    apart = apart.set_column(apart.schema.get_field_index("_seq"), "_seq", t.column("_seq"))
    assert [p.num_rows for p in arrow_json._parts(apart, ["id"], 3)] == [n]
