"""MySQL's binary JSON in C (``_fastjson.c``, through ``fastdecode``) against the reference,
``json_binary``, on the same bytes: generated documents of every scalar type (doubles of
every magnitude, DECIMALs of every precision and scale, dates and times inside JSON, opaque
values), unicode and escapes, invalid UTF-8, deep nesting and large documents; the trees
``json_diff`` applies partial updates to; damaged documents (both refuse them, or both print
the same); and partial updates decoded by both row decoders."""

from __future__ import annotations

import os
import random
import struct

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from replay_support import json_diff, jsonb, partial_row

from sparkcdc.core.schema import Column, TableId, TableSchema
from sparkcdc.errors import DecodeError
from sparkcdc.mysql.binlog import fastdecode as F
from sparkcdc.mysql.binlog import json_binary as J
from sparkcdc.mysql.binlog import protocol as E
from sparkcdc.mysql.binlog.json_diff import INSERT, REMOVE, REPLACE
from sparkcdc.mysql.binlog.row_decoding import PyRowDecoder

pytestmark = pytest.mark.skipif(not F.JSON_IN_C, reason="the compiled decoder is not built "
                                "(make setup builds it; test_fastdecode checks the fallback)")
C = F._C
# make test keeps this small; SPARKCDC_JSON_EXAMPLES=5000 for a long run
EXAMPLES = int(os.environ.get("SPARKCDC_JSON_EXAMPLES", "300"))

# -- generated documents -----------------------------------------------------------------------

_DIG2BYTES = (0, 1, 1, 2, 2, 3, 3, 4, 4, 4)


def binary_decimal(digits: str, precision: int, scale: int, negative: bool) -> bytes:
    """MySQL's binary DECIMAL (decimal2bin) of ``digits`` (precision of them, the last
    ``scale`` after the point)."""
    intg, frac = digits[:precision - scale], digits[precision - scale:]
    out = bytearray()
    lead = len(intg) % 9
    groups = ([(intg[:lead], _DIG2BYTES[lead])] if lead else []) + \
        [(intg[i:i + 9], 4) for i in range(lead, len(intg), 9)] + \
        [(frac[i:i + 9], 4 if len(frac) - i >= 9 else _DIG2BYTES[len(frac) - i])
         for i in range(0, len(frac), 9)]
    for text, nbytes in groups:
        out += int(text).to_bytes(nbytes, "big")
    if negative:
        out = bytearray(x ^ 0xFF for x in out)
    out[0] ^= 0x80
    return bytes(out)


@st.composite
def decimals(draw):
    precision = draw(st.integers(1, 65))
    scale = draw(st.integers(0, min(30, precision)))
    digits = draw(st.text("0123456789", min_size=precision, max_size=precision))
    data = bytes([precision, scale]) + binary_decimal(digits, precision, scale, draw(st.booleans()))
    return ("opaque", draw(st.sampled_from([246, 0])), data)


def packed_datetime(y, mo, d, h, mi, s, us) -> int:
    return ((((y * 13 + mo) << 5 | d) << 17 | (h << 12 | mi << 6 | s)) << 24) | us


datetimes = st.builds(packed_datetime, st.integers(0, 9999), st.integers(0, 12),
                      st.integers(0, 31), st.integers(0, 23), st.integers(0, 59),
                      st.integers(0, 59), st.integers(0, 999999))
times = st.builds(lambda h, mi, s, us, neg: (-1 if neg else 1) * ((h << 12 | mi << 6 | s) << 24
                                                                  | us),
                  st.integers(0, 838), st.integers(0, 59), st.integers(0, 59),
                  st.integers(0, 999999), st.booleans())
doubles = st.one_of(
    st.floats(allow_nan=False, allow_infinity=False),
    st.integers(-10**17, 10**17).map(float),  # whole numbers: the ".0" and 'e' limits
    st.sampled_from([0.0, -0.0, 1e15, 1e16, 1e-15, 1e-16, 123456789012345.6, 5e-324,
                     1.7976931348623157e308, 0.1, 104.66666666666667, 1e21, 2.5e-7]),
    st.builds(lambda m, e: m * 10.0 ** e, st.integers(1, 99999), st.integers(-20, 20)))
texts = st.one_of(
    st.text(),
    st.text(st.sampled_from('"\\/\b\f\n\r\t\x00\x01\x1f\x7f\x80é€𝄞\u2028 aZ')),
    st.binary(max_size=40))  # bytes as they are: invalid UTF-8 too
scalars = st.one_of(
    st.integers(-2**15, 2**15 - 1).map(lambda x: ("int16", x)),
    st.integers(0, 2**16 - 1).map(lambda x: ("uint16", x)),
    st.integers(-2**31, 2**31 - 1).map(lambda x: ("int32", x)),
    st.integers(0, 2**32 - 1).map(lambda x: ("uint32", x)),
    st.integers(-2**63, 2**63 - 1).map(lambda x: ("int64", x)),
    st.integers(0, 2**64 - 1).map(lambda x: ("uint64", x)),
    doubles.map(lambda x: ("double", x)),
    texts.map(lambda x: ("str", x)),
    st.sampled_from([None, True, False]).map(lambda x: ("lit", x)),
    decimals(),
    st.tuples(st.sampled_from([10, 12, 7]), datetimes).map(
        lambda t: ("opaque", t[0], struct.pack("<q", t[1]))),
    times.map(lambda v: ("opaque", 11, struct.pack("<q", v))),
    st.tuples(st.sampled_from([10, 11, 12, 7]), st.binary(max_size=9)).map(
        lambda t: ("opaque", t[0], t[1])),  # short or long packed values
    st.tuples(st.sampled_from([15, 245, 252, 254, 255, 1, 253]), st.binary(max_size=200)).map(
        lambda t: ("opaque", t[0], t[1])))
keys = st.one_of(st.text(max_size=12), st.binary(max_size=6))


def _key_bytes(k) -> bytes:
    return k if isinstance(k, bytes) else k.encode()


def _object(members, large):
    seen: dict[bytes, tuple] = {}
    for k, v in members:
        seen.setdefault(_key_bytes(k), (k, v))
    ordered = sorted(seen.items(), key=lambda kv: (len(kv[0]), kv[0]))  # MySQL's key order
    return ("obj", [kv for _, kv in ordered], large)


trees = st.recursive(
    scalars,
    lambda kids: st.one_of(
        st.builds(_object, st.lists(st.tuples(keys, kids), max_size=8), st.booleans()),
        st.builds(lambda items, large: ("arr", items, large), st.lists(kids, max_size=8),
                  st.booleans())),
    max_leaves=40)


def stored(tree) -> bytes:
    """The stored bytes; containers made large where a small one cannot hold them."""
    try:
        return jsonb(tree)
    except struct.error:
        return jsonb(_all_large(tree))


def _all_large(v):
    if v[0] == "obj":
        return ("obj", [(k, _all_large(x)) for k, x in v[1]], True)
    if v[0] == "arr":
        return ("arr", [_all_large(x) for x in v[1]], True)
    return v


def outcome(f, b):
    try:
        return ("ok", f(b))
    except DecodeError as e:
        return ("error", type(e))


def assert_same(b: bytes) -> str:
    text = J.to_text(b)
    assert F.json_text(b) == text
    tree = J.parse(b)
    assert C.json_tree(b) == tree
    assert C.json_render(tree) == J.render(tree) == text
    return text


# -- C against the reference ---------------------------------------------------------------------

def test_doubles_print_their_shortest_digits_as_the_reference():
    """The C printer's own shortest digits (Grisu3, _fastdouble.c, with Python's dtoa for the
    doubles it cannot settle) against the reference's repr, on 60,000 doubles: any bit
    pattern, the subnormals and the powers of two (whose lower neighbour is nearer), and the
    short decimals documents mostly hold."""
    rng = random.Random(31)
    xs = [5e-324, 1e-323, 2.2250738585072014e-308, 2.225073858507201e-308,
          1.7976931348623157e308, 9007199254740993.0, 1e23, 8.41e21, 5e-310, 0.3,
          float(2 ** 63), 104.66666666666667]
    for i in range(60_000):
        k = i % 4
        if k == 0:  # any finite bit pattern
            bits = rng.getrandbits(64)
            if (bits >> 52) & 0x7FF == 0x7FF:
                continue
        elif k == 1:  # subnormals, the smallest normals, around 1, the largest
            bits = rng.getrandbits(52) | rng.choice([0, 1, 2, 1023, 2046]) << 52
        elif k == 2:  # a power of two
            bits = rng.randint(1, 2046) << 52
        else:  # a short decimal at any scale
            digits = rng.randint(1, 17)
            x = float(f"{rng.randint(1, 10 ** digits - 1)}e{rng.randint(-300, 290)}")
            if x != float("inf"):
                xs.append(x)
            continue
        xs.append(struct.unpack("<d", bits.to_bytes(8, "little"))[0])
    for x in xs:
        for v in (x, -x):
            b = bytes([11]) + struct.pack("<d", v)
            assert F.json_text(b) == J.to_text(b), repr(v)


@settings(max_examples=EXAMPLES, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(tree=trees)
def test_generated_documents_print_as_the_reference(tree):
    assert_same(stored(tree))


@settings(max_examples=EXAMPLES, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(value=scalars)
def test_every_scalar_at_the_top_and_inside_containers(value):
    for tree in (value, ("arr", [value, value], False), ("obj", [("k", value)], True)):
        assert_same(stored(tree))


@settings(max_examples=EXAMPLES, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(tree=trees, data=st.data())
def test_damaged_documents_are_refused_by_both_or_printed_alike(tree, data):
    b = bytearray(stored(tree))
    for _ in range(data.draw(st.integers(1, 4))):
        kind = data.draw(st.sampled_from(["flip", "cut", "byte"]))
        if not b:
            break
        i = data.draw(st.integers(0, len(b) - 1))
        if kind == "cut":
            del b[i:]
        elif kind == "flip":
            b[i] ^= 1 << data.draw(st.integers(0, 7))
        else:
            b[i] = data.draw(st.integers(0, 255))
    ref, fast = outcome(J.to_text, bytes(b)), outcome(F.json_text, bytes(b))
    assert fast == ref


def test_deep_nesting_large_documents_and_unsorted_keys():
    rnd = random.Random(33)
    deep = ("int16", 7)
    for i in range(150):  # MySQL allows 100 levels
        deep = ("arr", [deep, ("str", f"l{i}")], False) if i % 2 else ("obj", [("k", deep)],
                                                                       False)
    assert assert_same(stored(deep)).startswith('[{"k": [{"k": [')
    big = ("arr", [("obj", [("id", ("int32", i)), ("name", ("str", "é" * rnd.randint(0, 40))),
                            ("x", ("double", rnd.random() * 10 ** rnd.randint(-20, 20)))],
                    False) for i in range(20000)], True)
    b = stored(big)
    assert len(b) > 1_000_000 and b[0] == 3  # a large array
    assert_same(b)
    # keys out of MySQL's order (never written by the server) and a key twice: as the
    # reference's dict has them
    odd = jsonb(("obj", [("b", ("int16", 1)), ("a", ("int16", 2)), ("b", ("int16", 3))], False))
    assert assert_same(odd) == '{"b": 3, "a": 2}'


def test_a_value_that_contains_itself_is_refused():
    # an array whose one element is the array itself (offset 0): no end to it
    b = bytes([2]) + struct.pack("<HH", 1, 7) + bytes([2]) + struct.pack("<H", 0)
    with pytest.raises(DecodeError, match="malformed binary JSON"):
        J.to_text(b)
    with pytest.raises(DecodeError, match="nested too deep"):
        F.json_text(b)


def test_trees_changed_by_diffs_render_as_the_reference():
    tree = J.parse(jsonb(("obj", [("a", ("arr", [], False))], False)))
    tree["a"].append(J.quote("x"))
    tree['new "key"\n\x01\udc80'] = {"é": ["1", "true"]}
    assert C.json_render(tree) == J.render(tree) == \
        '{"a": ["x"], "new \\"key\\"\\n\\u0001\udc80": {"é": [1, true]}}'
    with pytest.raises(TypeError):
        C.json_render({"a": 1})


# -- partial updates through both row decoders ---------------------------------------------------

SCHEMA = TableSchema(TableId("d", "p"), (Column("id", "int"), Column("j", "json"),
                                         Column("k", "json")), ("id",), "id")
MAP = E.parse_table_map(b"\x05\0\0\0\0\0\1\0\1d\0\1p\0\3\x03\xf5\xf5\2\4\4\6", "mysql")


def _image(i: int, j: bytes | None, k: bytes | None) -> bytes:
    out = bytes([(j is None) << 1 | (k is None) << 2]) + struct.pack("<i", i)
    for v in (j, k):
        if v is not None:
            out += struct.pack("<I", len(v)) + v
    return out


def _random_update(rnd: random.Random, doc: dict) -> tuple[bytes, dict]:
    """A diff vector on a flat object of int16 members, and the object after it."""
    doc = dict(doc)
    diffs = b""
    for _ in range(rnd.randint(1, 3)):
        name = rnd.choice(["a", "b", "cc", "d e", "é"])
        path = f'$."{name}"'
        if name in doc and rnd.random() < 0.5:
            diffs += json_diff(REMOVE, path)
            del doc[name]
        else:
            v = rnd.randint(-99, 99)
            diffs += json_diff(REPLACE if name in doc else INSERT, path, jsonb(("int16", v)))
            doc[name] = v
    return diffs, doc


def _doc(members: dict) -> bytes:
    return jsonb(_object([(k, ("int16", v)) for k, v in members.items()], False))


def test_random_partial_updates_equal_through_both_decoders():
    rnd = random.Random(7)
    rows, docs = [], {}
    for i in range(300):
        before = {k: rnd.randint(0, 9) for k in rnd.sample(["a", "b", "cc", "d e", "é"], 3)}
        diffs, after = _random_update(rnd, before)
        k_before = _doc({"x": i})
        shape = rnd.randint(0, 2)  # k: left alone (an empty diff), set whole, or NULL
        k_after = b"" if shape == 0 else (_doc({"y": i}) if shape == 1 else None)
        bits = b"\x03" if shape == 0 else b"\x01"  # j's diff; k's empty one
        rows.append(partial_row(_image(i, _doc(before), k_before), _image(i, diffs, k_after),
                                bits))
        docs[i] = (J.to_text(_doc(after)), J.to_text(k_before) if shape == 0 else
                   (J.to_text(_doc({"y": i})) if shape == 1 else None))
    data = b"".join(rows)
    head = struct.pack("<Q", 5)[:6] + b"\0\0" + b"\2\0" + b"\3\xff\xff"
    event = head + data
    fast = F.CRowDecoder().decode_partial_event(MAP, SCHEMA, event, 0, len(event), 6)
    assert fast is not None  # the diffs applied in the C loop, not handed back
    ref = PyRowDecoder().decode_partial_rows(MAP, SCHEMA, data)
    assert fast == ref
    assert [(a["j"], a["k"]) for _b, a in fast] == [docs[i] for i in range(300)]
