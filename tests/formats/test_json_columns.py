"""Each column's values as JSON text: the values Arrow's kernels write and those written
one by one, nulls included, text that needs escapes beside text that does not, timestamps
inside and outside the years Arrow's cast serves; against the value-by-value writer
(``tests/support/arrow_json_oracle.py``) where the rendering changed."""

from __future__ import annotations

import datetime as dt
import decimal
import json

import arrow_json_oracle
import pyarrow as pa
from hypothesis import given, settings
from hypothesis import strategies as st

from sparkcdc.formats.json_columns import Json, column_json, column_parts, constant, join

UTC = dt.timezone.utc


def test_each_column_as_json_text():
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
        (pa.array([dt.datetime(2024, 1, 2, 3, 4, 5, tzinfo=UTC), None],
                  pa.timestamp("us", tz="Europe/Paris")), ['"2024-01-02T03:04:05.000000Z"', "null"]),
        (pa.array([dt.timedelta(seconds=-1, microseconds=5)], pa.duration("us")), ["-999995"]),
        (pa.array([b"\x00\xff", None]), ['"AP8="', "null"]),
        (pa.array(['a"\\\n😀', None]), ['"a\\"\\\\\\n😀"', "null"]),
        (pa.array(["plain", "", "é\x1f"]).dictionary_encode(), ['"plain"', '""', '"é\\u001f"']),
        (pa.array(["x", "tab\there"], pa.large_string()).slice(1), ['"tab\\there"']),
    ]
    for arr, want in cases:
        assert column_json(arr).to_pylist() == want, arr.type
        for text in want:
            json.loads(text)  # each piece is JSON


def test_quotes_kept_apart_only_without_nulls():
    """The quotes are the joins' to write when every row has them; a null is ``null``."""
    whole = column_parts(pa.array(["a", "b"]))
    assert (whole.prefix, whole.body.to_pylist(), whole.suffix) == ('"', ["a", "b"], '"')
    zoned = column_parts(pa.array([0], pa.timestamp("us", tz="UTC")))
    assert (zoned.prefix, zoned.suffix) == ('"', 'Z"')
    holed = column_parts(pa.array(["a", None]))
    assert (holed.prefix, holed.body.to_pylist(), holed.suffix) == ("", ['"a"', "null"], "")
    assert constant(pa.array(["shop", "shop"])) == Json('"shop"')
    assert isinstance(constant(pa.array(["shop", "mall"])).body, pa.Array)
    assert join("{", Json('"x"'), ",", whole, "}").to_pylist() == ['{"x","a"}', '{"x","b"}']
    assert Json(pa.array(["1", "2"])).take(None, pa.array([False, True]).to_numpy(
        zero_copy_only=False)).body.to_pylist() == ["1", "null"]


def test_timestamps_outside_the_years_of_arrows_cast():
    """Years past 9999 or before 1 (no Python datetime holds them) are written by strftime,
    as before."""
    micros = [-2**62, -62_135_596_800_000_001, 0, 253_402_300_800_000_000, 2**62, None]
    for t in (pa.timestamp("us"), pa.timestamp("us", tz="UTC")):
        arr = pa.array(micros, pa.int64()).view(t)
        assert column_json(arr) == arrow_json_oracle.column_json(arr), t


_TEXT = st.text(alphabet=st.one_of(
    st.sampled_from(['"', "\\", "\n", "\r", "\b", "\f", "\x00", "\x1f", "\x7f", "é", "😀",
                     "\u2028", "a"]),
    st.characters(codec="utf-8", exclude_categories=("Cs",))), max_size=10)


@settings(max_examples=200, deadline=None)
@given(values=st.lists(st.one_of(st.none(), _TEXT), max_size=20),
       start=st.integers(0, 3), large=st.booleans())
def test_text_the_same_as_pythons_json(values, start, large):
    arr = pa.array(values, pa.large_string() if large else pa.string()).slice(start)
    want = ["null" if v is None else json.dumps(v, ensure_ascii=False) for v in values[start:]]
    assert column_json(arr).to_pylist() == want


@settings(max_examples=100, deadline=None)
@given(values=st.lists(st.one_of(st.none(), st.datetimes()), max_size=20),
       zoned=st.booleans())
def test_timestamps_the_same_as_before(values, zoned):
    t = pa.timestamp("us", tz="UTC" if zoned else None)
    arr = pa.array([v.replace(tzinfo=UTC) if v and zoned else v for v in values], t)
    assert column_json(arr) == arrow_json_oracle.column_json(arr)
