"""The Arrow (driver-side) writer of the formats against the Spark encoders: for every
format, on the all-types rows and a stream of inserts, paired and unpaired updates, deletes
and a snapshot, the same keys and the same messages once read back (by Spark's ``decode``
and by the kafka source's ``decode_message``), with tombstones in the same places."""

from __future__ import annotations

import json

import pytest
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


def test_each_column_as_json_text():
    """The values Arrow's kernels write and those written one by one, nulls included."""
    import datetime as dt
    import decimal

    import pyarrow as pa

    utc = dt.timezone.utc
    cases = [
        (pa.array([1, None, -5], pa.int8()), ["1", "null", "-5"]),
        (pa.array([True, None, False]), ["true", "null", "false"]),
        (pa.array([1.5, None, -0.0]), ["1.5", "null", "-0"]),
        (pa.array([1.5, float("nan"), float("-inf")]), ["1.5", '"NaN"', '"-Infinity"']),
        (pa.array([1.1], pa.float32()), ["1.1"]),
        (pa.array([decimal.Decimal("-12.30"), None], pa.decimal128(10, 2)), ["-12.30", "null"]),
        (pa.array([dt.date(999, 1, 2)]), ['"0999-01-02"']),
        (pa.array([dt.datetime(2024, 1, 2, 3, 4, 5, 6)], pa.timestamp("us")),
         ['"2024-01-02T03:04:05.000006"']),
        (pa.array([dt.datetime(2024, 1, 2, 3, 4, 5, tzinfo=utc)],
                  pa.timestamp("us", tz="Europe/Paris")), ['"2024-01-02T03:04:05.000000Z"']),
        (pa.array([dt.timedelta(seconds=-1, microseconds=5)], pa.duration("us")), ["-999995"]),
        (pa.array([b"\x00\xff", None]), ['"AP8="', "null"]),
        (pa.array(['a"\\\n😀', None]), ['"a\\"\\\\\\n😀"', "null"]),
    ]
    for arr, want in cases:
        assert arrow_json.column_json(arr).to_pylist() == want, arr.type
        for text in want:
            json.loads(text)  # each piece is JSON
