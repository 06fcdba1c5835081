"""Partial JSON updates (``binlog_row_value_options=PARTIAL_JSON``): diffs applied to the
before image as the server's ``apply_json_diffs`` applies them, in C (``_fastjsondiff.c``)
and by its reference ``json_diff`` alike on generated documents, paths and damaged bytes, and
PARTIAL_UPDATE_ROWS events read by ``BinlogReader`` with both row decoders, alone and inside
a compressed transaction.

No public PARTIAL_UPDATE_ROWS event could be stored here (fixtures/mysql8/README.md), so
the events are built from MySQL's documented format by the encoders of replay_support."""

from __future__ import annotations

import json
import random
import struct

import pytest
from replay_support import (
    Binlog,
    ReplayReader,
    anonymous_gtid,
    inner,
    json_diff,
    jsonb,
    offset,
    packed,
    partial_row,
    payload_body,
    query,
    rows_v2,
    table_map,
    xid,
)

from sparkcdc.core.records import UPDATE
from sparkcdc.core.schema import Column, TableId, TableSchema
from sparkcdc.errors import DecodeError
from sparkcdc.mysql.binlog import fastdecode as F
from sparkcdc.mysql.binlog import json_binary as J
from sparkcdc.mysql.binlog import json_diff as D
from sparkcdc.mysql.binlog import protocol as E
from sparkcdc.mysql.binlog import transaction_payload as P
from sparkcdc.mysql.binlog.row_decoding import PyRowDecoder

DECODERS = [F.CRowDecoder, PyRowDecoder] if F.available() else [PyRowDecoder]
REPLACE, INSERT, REMOVE = D.REPLACE, D.INSERT, D.REMOVE

DOC = jsonb(("obj", [("a", ("int16", 1)), ("n", ("arr", [("int16", 1), ("int16", 2),
                                                        ("int16", 3)], False)),
                     ("zz", ("obj", [("k y", ("str", "v"))], False))], False))


def _apply(*diffs: bytes, doc: bytes = DOC) -> str:
    return D.apply(doc, b"".join(diffs), "doc")


def test_paths():
    assert D.parse_path("$") == ()
    assert D.parse_path('$.a[3]."k y".b[last][last-2]') == \
        ("a", (3, False), "k y", "b", (0, True), (2, True))
    assert D.parse_path('$."a\\"b\\u00e9"') == ('a"bé',)


def test_replace_insert_remove_as_the_server_applies_them():
    assert J.to_text(DOC) == '{"a": 1, "n": [1, 2, 3], "zz": {"k y": "v"}}'
    assert _apply(json_diff(REPLACE, "$.a", jsonb(("str", "x")))) == \
        '{"a": "x", "n": [1, 2, 3], "zz": {"k y": "v"}}'
    # a new member goes where MySQL keeps it: shorter keys first, then bytewise
    assert _apply(json_diff(INSERT, "$.b", jsonb(("lit", True))),
                  json_diff(INSERT, "$.aaa", jsonb(("double", 2.0)))) == \
        '{"a": 1, "b": true, "n": [1, 2, 3], "zz": {"k y": "v"}, "aaa": 2.0}'
    assert _apply(json_diff(INSERT, "$.n[1]", jsonb(("int16", 9))),
                  json_diff(INSERT, "$.n[99]", jsonb(("int16", 7))),
                  json_diff(REMOVE, "$.n[0]"),
                  json_diff(REPLACE, "$.n[last]", jsonb(("arr", [], False))),
                  json_diff(REMOVE, '$.zz."k y"')) == '{"a": 1, "n": [9, 2, 3, []], "zz": {}}'
    assert _apply(json_diff(REPLACE, "$.zz", jsonb(("opaque", 246, b"\x03\x01\x81\x00")))) \
        == '{"a": 1, "n": [1, 2, 3], "zz": 1.0}'


@pytest.mark.parametrize("diff", [
    json_diff(REPLACE, "$.nope", jsonb(("int16", 1))),  # REPLACE needs the value
    json_diff(INSERT, "$.a", jsonb(("int16", 1))),  # INSERT of a member that exists
    json_diff(REMOVE, "$.n[3]"),  # REMOVE past the end
    json_diff(REPLACE, "$.a[0]", jsonb(("int16", 1))),  # no auto-wrapping
    json_diff(REPLACE, "$", jsonb(("int16", 1))),  # never the whole document
    json_diff(REMOVE, "$.zz.*"),  # no wildcards
])
def test_a_diff_the_server_would_reject_stops_the_read(diff):
    with pytest.raises(DecodeError, match="does not fit its before image"):
        _apply(diff)


def test_a_bad_operation_is_named():
    with pytest.raises(DecodeError, match="operation 7"):
        _apply(b"\x07" + json_diff(REMOVE, "$.a")[1:])


# -- the diffs in C against json_diff, on generated documents ------------------------------

C = F._C if F.DIFFS_IN_C else None
KEYS = ["a", "b", "n", "zz", "k y", "é", 'q"t', "back\\slash", "tab\t", "ключ", "😀", "a.b",
        "[x]", "", "$", "last", "12", "x" * 300]
SPACES = ["", " ", "  ", "\t", "\u3000", "\xa0"]


def _sorted(members: list) -> list:
    """Members in MySQL's key order, their keys as stored bytes."""
    return sorted(((k.encode("utf-8", "surrogateescape"), v) for k, v in members),
                  key=lambda kv: (len(kv[0]), kv[0]))


def _gen(rnd: random.Random, depth: int = 0) -> tuple:
    """A tagged tree for ``jsonb``: objects (keys in MySQL's order), arrays, every scalar;
    an object or an array at the top."""
    r = rnd.random() * (0.45 if depth == 0 else 1)
    if depth < 4 and r < 0.25:
        keys = rnd.sample(KEYS, rnd.randint(0, 5))
        return ("obj", _sorted([(k, _gen(rnd, depth + 1)) for k in keys]), rnd.random() < 0.2)
    if depth < 4 and r < 0.45:
        return ("arr", [_gen(rnd, depth + 1) for _ in range(rnd.randint(0, 5))],
                rnd.random() < 0.2)
    return rnd.choice([("int16", rnd.randint(-99, 99)), ("int32", rnd.randint(-2**31, 2**31 - 1)),
                       ("uint64", rnd.randint(0, 2**64 - 1)), ("double", rnd.uniform(-1e6, 1e6)),
                       ("str", rnd.choice(KEYS)), ("str", b"bad \xff utf-8"),
                       ("lit", rnd.choice([None, True, False])),
                       ("opaque", 246, b"\x05\x02\x80\x00\x01\x0c"),
                       ("opaque", 10, struct.pack("<q", (2024 * 13 + 2) << 46 | 29 << 41))])


def _name(rnd: random.Random, key: str) -> str:
    bare = key and not any(ch in key for ch in '.[]"* \t\\') and rnd.random() < 0.6
    return key if bare else json.dumps(key, ensure_ascii=rnd.random() < 0.5)


def _path(rnd: random.Random, tree) -> tuple[str, bool]:
    """A path into ``tree`` (json_binary.parse's), mostly to a member or element there; and
    whether it ends at a new member or an array position (where INSERT goes)."""
    text, node = "$", tree
    for step in range(rnd.randint(1, 4)):
        sp = rnd.choice(SPACES)
        if step and type(node) not in (dict, list) and rnd.random() < 0.95:
            break  # at a scalar: mostly the path ends there
        if type(node) is dict:
            key = rnd.choice(list(node)) if node and rnd.random() < 0.8 else rnd.choice(KEYS)
            text += f"{sp}.{rnd.choice(SPACES)}{_name(rnd, key)}"
            if key not in node:
                return text, True
            node = node[key]
        elif type(node) is list:
            i = rnd.randint(0, len(node))
            if i < len(node) and rnd.random() < 0.3:
                n = len(node) - 1 - i
                text += f"{sp}[{rnd.choice(SPACES)}last{' - ' + str(n) if n else ''}]"
            else:
                text += f"{sp}[{rnd.choice(SPACES)}{i}{rnd.choice(SPACES)}]"
            if i >= len(node):
                return text, True
            node = node[i]
        else:
            text += rnd.choice([".a", "[0]"])  # into a scalar: rejected
            return text, False
    return text + rnd.choice(SPACES), False


ODD_PATHS = [b"$", b"$.*", b"$**.a", b"$[1\xd9\xa3]", b"$.a[last-]", b"$.\"\\ud800\"",
             b'$."\\ud83d\\ude00"', b'$."\\x"', b"$.\xff", b"$[99999999999999999999]",
             b"a", b"$.", b"$.a b", b'$."a', "$.\u2003a\u2003".encode()]


def _diffs(rnd: random.Random, doc: bytes) -> tuple[bytes, bool]:
    """A diff vector on ``doc``, and whether one of its paths is one of ODD_PATHS."""
    tree = J.parse(doc)
    out, odd_path = b"", False
    for _ in range(rnd.randint(1, 4)):
        if rnd.random() < 0.05:
            path = rnd.choice(ODD_PATHS)
            op = rnd.choice([REPLACE, INSERT, REMOVE])
            odd_path = True
        else:
            text, new = _path(rnd, tree)
            path = text.encode()
            odd = rnd.random() < 0.1  # REPLACE or REMOVE of what is not there, or INSERT of what is
            op = (INSERT if not odd else rnd.choice([REPLACE, REMOVE])) if new else \
                (rnd.choice([REPLACE, REMOVE]) if not odd else INSERT)
        out += bytes([op]) + packed(len(path)) + path
        if op != REMOVE:
            value = jsonb(_gen(rnd, 2)) if rnd.random() < 0.95 else b""
            out += packed(len(value)) + value
        try:  # later paths go into the document as it is after this diff
            tree = J.parse(jsonb_of(D.apply(doc, out, "doc")))
        except DecodeError:  # a rejected diff: the read stops there
            pass
    return out, odd_path


def jsonb_of(text: str) -> bytes:
    """The stored bytes of a document json_diff printed (its numbers and strings only)."""
    def tag(v):
        if isinstance(v, dict):
            return ("obj", _sorted([(k, tag(x)) for k, x in v.items()]), False)
        if isinstance(v, list):
            return ("arr", [tag(x) for x in v], False)
        return ("str", str(v).encode("utf-8", "surrogateescape"))
    return jsonb(tag(json.loads(text)))


def _damaged(rnd: random.Random, b: bytes) -> bytes:
    b = bytearray(b)
    if rnd.random() < 0.5 and b:
        b[rnd.randrange(len(b))] = rnd.randrange(256)
    else:
        del b[rnd.randrange(len(b) + 1):]
    return bytes(b)


@pytest.mark.skipif(C is None, reason="the compiled decoder is not built")
def test_generated_diffs_apply_in_c_as_json_diff_applies_them():
    """Every vector C applies, json_diff applies to the same text; every one json_diff
    refuses, C leaves to it; on undamaged bytes C applies all json_diff applies but the
    paths it leaves on purpose (ODD_PATHS)."""
    rnd = random.Random(33)
    applied = left = 0
    for k in range(1500):
        doc = jsonb(_gen(rnd)) if k % 10 else jsonb(("obj", [], False))
        diffs, odd_path = _diffs(rnd, doc)
        damaged = k % 7 == 0
        if damaged:
            doc, diffs = (_damaged(rnd, doc), diffs) if rnd.random() < 0.5 else \
                (doc, _damaged(rnd, diffs))
        try:
            ref = D.apply(doc, diffs, "doc")
        except DecodeError:
            ref = None
        got = C.json_apply_diffs(doc, diffs)
        if got is not None:
            assert got == ref, (doc, diffs)
            applied += 1
        elif ref is not None:
            left += 1
            assert damaged or odd_path, (doc, diffs)
    assert applied > 900 and left < 50, (applied, left)


# -- PARTIAL_UPDATE_ROWS events -----------------------------------------------------------

SCHEMA = TableSchema(TableId("shop", "items"), (
    Column("id", "int"), Column("doc", "json"), Column("name", "varchar(20)", True, "utf8mb4",
                                                        "utf8mb4_0900_ai_ci"),
    Column("tags", "json")), ("id",), "id")
TID = 77
# id INT, doc JSON (4-byte length), name VARCHAR(20) (80 bytes), tags JSON; charset 255
MAP = table_map(TID, b"shop", b"items", bytes([3, 245, 15, 245]), b"\4\x50\0\4",
                extra=b"\2\3\xfc\xff\0")


def _image(i: int, doc: bytes | None, name: str, tags: bytes | None) -> bytes:
    nulls = (doc is None) << 1 | (tags is None) << 3
    out = bytes([nulls]) + struct.pack("<i", i)
    if doc is not None:
        out += struct.pack("<I", len(doc)) + doc
    out += bytes([len(name.encode())]) + name.encode()
    if tags is not None:
        out += struct.pack("<I", len(tags)) + tags
    return out


TAGS = jsonb(("arr", [("str", "new")], False))
ROWS = [  # (before image, after image, partial bits), then the values the reader gives
    (_image(1, DOC, "a", TAGS),
     _image(1, json_diff(REPLACE, "$.a", jsonb(("int16", 26)))
            + json_diff(REMOVE, "$.zz"), "b", jsonb(("arr", [], False))), b"\x01"),
    (_image(2, DOC, "c", None),  # doc partial, tags set in full (NULL -> a document)
     _image(2, json_diff(INSERT, "$.n[0]", jsonb(("int16", 0))), "c", TAGS), b"\x01"),
    (_image(3, DOC, "d", TAGS), _image(3, DOC, "d", None), None),  # value_options 0
]
EXPECTED = [
    ({"id": 1, "doc": '{"a": 1, "n": [1, 2, 3], "zz": {"k y": "v"}}', "name": "a",
      "tags": '["new"]'},
     {"id": 1, "doc": '{"a": 26, "n": [1, 2, 3]}', "name": "b", "tags": "[]"}),
    ({"id": 2, "doc": '{"a": 1, "n": [1, 2, 3], "zz": {"k y": "v"}}', "name": "c",
      "tags": None},
     {"id": 2, "doc": '{"a": 1, "n": [0, 1, 2, 3], "zz": {"k y": "v"}}', "name": "c",
      "tags": '["new"]'}),
    ({"id": 3, "doc": '{"a": 1, "n": [1, 2, 3], "zz": {"k y": "v"}}', "name": "d",
      "tags": '["new"]'},
     {"id": 3, "doc": '{"a": 1, "n": [1, 2, 3], "zz": {"k y": "v"}}', "name": "d",
      "tags": None}),
]


def _partial_event(rows=ROWS) -> bytes:
    return rows_v2(TID, 4, b"".join(partial_row(b, a, bits) for b, a, bits in rows),
                   update=True)


@pytest.mark.parametrize("decoder", DECODERS)
@pytest.mark.parametrize("compressed", [False, True])
def test_partial_updates_read_as_whole_documents(decoder, compressed):
    log = Binlog()
    gtid_at, _ = anonymous_gtid(log)
    events = [(E.QUERY, query(b"BEGIN")), (E.TABLE_MAP, MAP),
              (E.PARTIAL_UPDATE_ROWS, _partial_event()),
              (E.PARTIAL_UPDATE_ROWS, _partial_event(ROWS[:1])), (E.XID, xid(9))]
    if compressed:
        log.add(P.TRANSACTION_PAYLOAD, payload_body(b"".join(inner(t, b) for t, b in events)))
    else:
        for t, b in events:
            log.add(t, b)
    reader = ReplayReader(log, {SCHEMA.table_id: SCHEMA}, decoder())
    recs = list(reader.read_window(offset(4), offset(log.pos)))
    assert [(r.op, r.before, r.after) for r in recs] == \
        [(UPDATE, b, a) for b, a in EXPECTED + EXPECTED[:1]]
    assert [(r.offset.pos, r.offset.events, r.offset.rows) for r in recs] == \
        [(gtid_at, 0, 0), (gtid_at, 0, 1), (gtid_at, 0, 2), (gtid_at, 1, 0)]


@pytest.mark.skipif(not F.available(), reason="the compiled decoder is not built")
def test_partial_updates_with_before_images_by_key_alone():
    """``CRowDecoder(before_keys=True)`` (the pipeline's reader) on PARTIAL_UPDATE_ROWS: each
    after image as the reference reads it: a diff applied to the before bytes of a column
    not made into a value, a column the update left alone (an empty diff) printed from
    them, a NULL one left NULL; each before image its key alone, or whole when the key
    moved."""
    rows = ROWS + [
        (_image(5, DOC, "f", TAGS), _image(5, b"", "g", b""), b"\x03"),  # both left alone
        (_image(6, DOC, "h", None), _image(6, b"", "h", TAGS), b"\x01"),  # NULL tags set
        (_image(7, DOC, "i", TAGS),  # the key moved: the before image whole
         _image(70, json_diff(REPLACE, "$.a", jsonb(("int16", 7))), "i", TAGS), b"\x01"),
    ]
    log = Binlog()
    anonymous_gtid(log)
    for t, b in [(E.QUERY, query(b"BEGIN")), (E.TABLE_MAP, MAP),
                 (E.PARTIAL_UPDATE_ROWS, _partial_event(rows)), (E.XID, xid(1))]:
        log.add(t, b)

    def read(decoder):
        reader = ReplayReader(log, {SCHEMA.table_id: SCHEMA}, decoder)
        return [(r.before, r.after) for r in reader.read_window(offset(4), offset(log.pos))]

    want, got = read(PyRowDecoder()), read(F.CRowDecoder(before_keys=True))
    assert [a for _, a in got] == [a for _, a in want]
    assert [b for b, _ in got] == [{"id": b["id"]} for b, _ in want[:-1]] + [want[-1][0]]
    assert want[3][1]["doc"] == want[3][0]["doc"] and want[3][1]["tags"] == '["new"]'
    assert want[4][0]["tags"] is None and want[4][1]["tags"] == '["new"]'
    assert want[5][1]["id"] == 70


@pytest.mark.parametrize("decoder", DECODERS)
def test_a_partial_update_of_null_or_a_broken_diff_is_named(decoder):
    log = Binlog()
    anonymous_gtid(log)
    null_doc = [(_image(4, None, "e", None),
                 _image(4, json_diff(REPLACE, "$.a", jsonb(("int16", 1))), "e", None), b"\1")]
    for t, b in [(E.QUERY, query(b"BEGIN")), (E.TABLE_MAP, MAP),
                 (E.PARTIAL_UPDATE_ROWS, _partial_event(null_doc)), (E.XID, xid(1))]:
        log.add(t, b)
    reader = ReplayReader(log, {SCHEMA.table_id: SCHEMA}, decoder())
    with pytest.raises(DecodeError, match="partial JSON update of a NULL value"):
        list(reader.read_window(offset(4), offset(log.pos)))
    truncated = _partial_event()[:-3]
    tm = E.parse_table_map(MAP, "mysql")
    *_, p = E.rows_header(truncated, 0, len(truncated), 2, True)
    with pytest.raises(DecodeError, match="malformed"):
        decoder().decode_partial_rows(tm, SCHEMA, truncated[p:])


def test_a_decoder_without_partial_updates_is_named():
    class Plain:  # a RowDecoder of before this change: decode_rows only
        def decode_rows(self, *a):
            return PyRowDecoder().decode_rows(*a)

    log = Binlog()
    anonymous_gtid(log)
    for t, b in [(E.QUERY, query(b"BEGIN")), (E.TABLE_MAP, MAP),
                 (E.PARTIAL_UPDATE_ROWS, _partial_event()), (E.XID, xid(1))]:
        log.add(t, b)
    with pytest.raises(DecodeError, match="cannot apply partial JSON updates"):
        list(ReplayReader(log, {SCHEMA.table_id: SCHEMA}, Plain())
             .read_window(offset(4), offset(log.pos)))


UNSORTED = jsonb(("obj", [("zz", ("int16", 1)), ("a", ("int16", 2))], False))  # not MySQL's


@pytest.mark.parametrize("decoder", DECODERS)
def test_what_the_c_code_leaves_json_diff_applies_or_names(decoder):
    """A before image whose keys are out of MySQL's order (no server writes one): the C code
    leaves its diff to json_diff, which applies it to the document as its dict holds it; a
    diff the server would reject is named by json_diff, whichever decoder read it."""
    diff = json_diff(REPLACE, "$.a", jsonb(("int16", 3)))
    if C is not None:
        assert C.json_apply_diffs(UNSORTED, diff) is None
    for after, error in [(diff, None), (json_diff(REMOVE, "$.nope"), "does not fit")]:
        log = Binlog()
        anonymous_gtid(log)
        rows = [(_image(5, UNSORTED, "f", None), _image(5, after, "f", None), b"\1")]
        for t, b in [(E.QUERY, query(b"BEGIN")), (E.TABLE_MAP, MAP),
                     (E.PARTIAL_UPDATE_ROWS, _partial_event(rows)), (E.XID, xid(1))]:
            log.add(t, b)
        reader = ReplayReader(log, {SCHEMA.table_id: SCHEMA}, decoder())
        if error:
            with pytest.raises(DecodeError, match=error):
                list(reader.read_window(offset(4), offset(log.pos)))
        else:
            [rec] = reader.read_window(offset(4), offset(log.pos))
            assert rec.after["doc"] == '{"zz": 1, "a": 3}'
