"""The compiled row decoder equals the reference (PyRowDecoder) value by value and type by
type: on the all-types table through a real MariaDB, on randomized rows written to that
server, and on randomized row-image bytes of every column type (including values no server
writes: invalid dates, out-of-range fractions, unknown ENUM indexes)."""

from __future__ import annotations

import struct
from decimal import Decimal

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from replay_support import jsonb
from rows_support import FUZZ_BINLOG_COLUMNS as _BCS
from rows_support import FUZZ_COLUMNS as _COLS
from rows_support import assert_rows_same, random_rows, write_random_rows
from rows_support import binlog_column as _bc
from rows_support import fuzz_image as _image
from types_support import COLUMNS, cdc, expected_all_types, insert_all_types

from sparkcdc.core.schema import Column, TableId, TableSchema
from sparkcdc.errors import DecodeError
from sparkcdc.mysql.binlog import fastdecode as F
from sparkcdc.mysql.binlog import field_decoders as FDEC
from sparkcdc.mysql.binlog import row_decoding as B
from sparkcdc.mysql.binlog import transaction_payload as P
from sparkcdc.mysql.binlog.protocol.codes import ColumnType as CT
from sparkcdc.mysql.binlog.reader import BinlogReader
from sparkcdc.mysql.binlog.row_decoding import PyRowDecoder
from sparkcdc.mysql.binlog.server_lookups import load_table_schema
from sparkcdc.mysql.offsets import current_offset

pytestmark = pytest.mark.timeout(300)  # the extension is built by `make setup`


# -- the real server ---------------------------------------------------------------------------

def read_both(conn, schema, start, end):
    tables = {schema.table_id: schema}
    ref = list(BinlogReader(conn, 7301, tables, decoder=PyRowDecoder()).read_window(start, end))
    fast = list(BinlogReader(conn, 7302, tables, decoder=F.CRowDecoder())
                .read_window(start, end))
    return ref, fast


def test_all_types_inserts_updates_deletes_equal_the_reference(mariadb, db):
    conn = cdc(mariadb)
    start = current_offset(conn)
    insert_all_types(mariadb, db)
    mariadb.execute("UPDATE all_types SET y = 1999 WHERE id <> 1",
                    "UPDATE all_types SET id = id + 10",
                    "DELETE FROM all_types WHERE id = 13", database=db)
    end = current_offset(conn)
    schema = load_table_schema(conn, TableId(db, "all_types"))
    ref, fast = read_both(conn, schema, start, end)
    assert [r.op for r in ref] == ["c"] * 4 + ["u"] * 3 + ["u"] * 4 + ["d"]
    assert fast == ref  # records: ops, offsets, images
    assert_rows_same([(r.before, r.after) for r in fast], [(r.before, r.after) for r in ref])
    assert [r.after for r in fast[:4]] == expected_all_types()
    assert all(list(r.after) == COLUMNS for r in fast[:4])


def test_the_default_decoder_is_the_compiled_one():
    assert isinstance(F.default_decoder(), F.CRowDecoder)


def test_without_the_extension_the_default_falls_back_to_python(monkeypatch):
    monkeypatch.setattr(F, "_C", None)
    assert not F.available()
    assert type(F.default_decoder()) is PyRowDecoder


def test_an_extension_without_json_and_payloads_in_c_leaves_them_to_python(monkeypatch):
    """An extension built before JSON and payloads moved to C: JSON columns go through
    json_binary (OP_CALL), payloads through transaction_payload, with the same values."""
    col = Column("j", "json")
    schema = TableSchema(TableId("f", "j"), (col,), ("j",), "j")
    bc = _bc(CT.JSON, length_size=4)
    doc = jsonb(("obj", [("a", ("int16", 7))], False))
    data = b"\0" + struct.pack("<I", len(doc)) + doc
    assert F.column_spec(bc, col)[0] == (F.OP_JSON if F.JSON_IN_C else F.OP_CALL)
    fast = F._C.decode(F.compile_plan([bc], schema), data, 0)
    monkeypatch.setattr(F, "JSON_IN_C", False)
    monkeypatch.setattr(F, "PAYLOAD_IN_C", False)
    assert F.column_spec(bc, col)[0] == F.OP_CALL
    assert F._C.decode(F.compile_plan([bc], schema), data, 0) == fast == \
        [(None, {"j": '{"a": 7}'})]
    assert F.CRowDecoder().open_payload is P.open_payload


@settings(max_examples=20, deadline=None,
          suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow])
@given(rows=random_rows, new_rows=random_rows)
def test_randomized_rows_through_the_server_equal_the_reference(mariadb, db, rows, new_rows):
    conn, schema, start, end = write_random_rows(mariadb, db, rows, new_rows)
    ref, fast = read_both(conn, schema, start, end)
    assert len(ref) == len(rows) + min(len(rows), len(new_rows)) + (len(rows) + 1) // 2
    assert_rows_same([(r.before, r.after) for r in fast], [(r.before, r.after) for r in ref])
    assert [(r.op, r.offset) for r in fast] == [(r.op, r.offset) for r in ref]


# -- randomized bytes, every column type (rows_support.FUZZ) ---------------------------------

def _reference(data: bytes, plan, names) -> tuple[list, Exception | None]:
    out, pos, nbits = [], 0, (len(names) + 7) // 8
    try:
        while pos < len(data):
            img, pos = B._image(data, pos, plan, names, nbits)
            out.append(img)
    except Exception as e:  # noqa: BLE001 - compared with the C decoder's outcome
        return out, e
    return out, None


@settings(max_examples=300, deadline=None)
@given(images=st.lists(_image(), min_size=1, max_size=4))
def test_randomized_row_images_of_every_type_equal_the_reference(images):
    from sparkcdc.core.schema import TableSchema

    schema = TableSchema(TableId("f", "z"), _COLS, ("c0",), "c0")
    names = schema.column_names
    py_plan = [FDEC.field_decoder(bc, col) for bc, col in zip(_BCS, _COLS)]
    c_plan = F.compile_plan(_BCS, schema)
    data = b"".join(images)
    want, err = _reference(data, py_plan, names)
    if err is not None:  # only text that is not valid in its charset fails here
        assert isinstance(err, UnicodeDecodeError), err
        with pytest.raises(UnicodeDecodeError):
            F._C.decode(c_plan, data, 0)
        return
    got = F._C.decode(c_plan, data, 0)
    assert_rows_same(got, [(None, w) for w in want])
    got = F._C.decode(c_plan, data, 1)
    assert_rows_same(got, [(w, None) for w in want])
    if len(images) % 2 == 0:
        got = F._C.decode(c_plan, data, 2)
        assert_rows_same(got, list(zip(want[::2], want[1::2])))


def test_hand_picked_edge_bytes():
    """Values the random bytes rarely hit: negative TIME2 with fractions, zero dates, the
    zero TIMESTAMP, Feb 30, DECIMAL negative zero, SET with every member."""
    cases = [
        ("time(6)", _bc(CT.TIME2, fsp=6), (0x800000000000 - 1).to_bytes(6, "big")),
        ("time(2)", _bc(CT.TIME2, fsp=2), (0x800000 - 1).to_bytes(3, "big") + b"\x9c"),
        ("time(4)", _bc(CT.TIME2, fsp=4), (0x800000 - 1).to_bytes(3, "big") + b"\xff\xfe"),
        ("date", _bc(CT.DATE), (2021 << 9 | 2 << 5 | 30).to_bytes(3, "little")),
        ("date", _bc(CT.DATE), b"\0\0\0"),
        ("datetime(0)", _bc(CT.DATETIME2, fsp=0), (0x8000000000).to_bytes(5, "big")),
        ("timestamp(3)", _bc(CT.TIMESTAMP2, fsp=3), b"\0\0\0\0\0\0"),
        ("timestamp(3)", _bc(CT.TIMESTAMP2, fsp=3), b"\0\0\0\0\0\1"),
        ("decimal(10,2)", _bc(CT.NEWDECIMAL, precision=10, decimals=2),
         bytes([0x7f, 0xff, 0xff, 0xff, 0xff])),
        ("decimal(65,30)", _bc(CT.NEWDECIMAL, precision=65, decimals=30),
         bytes([0x80]) + bytes(29)),
        ("set('x','y','z')", _bc(CT.SET, size=1), b"\x07"),
        ("enum('a','b')", _bc(CT.ENUM, size=1), b"\x00"),
        ("bigint(20) unsigned", _bc(CT.LONGLONG), b"\xff" * 8),
        ("varchar(20)", _bc(CT.VARCHAR, max_length=20), b"\x05\x80\x81\x8d\x8f\x90"),
    ]
    for ctype, bc, raw in cases:
        charset = "latin1" if ctype.startswith("varchar") else None
        col = Column("v", ctype, True, charset)
        schema = TableSchema(TableId("f", "e"), (col,), ("v",), "v")
        data = b"\0" + raw
        want, err = _reference(data, [FDEC.field_decoder(bc, col)], ["v"])
        assert err is None, (ctype, err)
        got = F._C.decode(F.compile_plan([bc], schema), data, 0)
        assert_rows_same(got, [(None, w) for w in want], ctype)


def test_truncated_events_raise_decode_errors_not_garbage(mariadb, db):
    mariadb.execute("CREATE TABLE t (id INT PRIMARY KEY, v VARCHAR(20), d DATETIME(6))",
                    database=db)
    conn = cdc(mariadb)
    schema = load_table_schema(conn, TableId(db, "t"))
    bcs = [_bc(CT.LONG), _bc(CT.VARCHAR, max_length=80), _bc(CT.DATETIME2, fsp=6)]
    plan = F.compile_plan(bcs, schema)
    image = b"\0" + struct.pack("<i", 7) + b"\x03abc" + bytes([0x99, 0xb1, 0xc2, 0, 0, 1, 2, 3])
    assert F._C.decode(plan, image, 0)[0][1]["v"] == "abc"
    for cut in range(1, len(image)):
        with pytest.raises(ValueError, match="ends inside a value"):
            F._C.decode(plan, image[:cut], 0)
    with pytest.raises(ValueError):
        F._C.decode(plan, image, 2)  # an update needs two images
    bad = [_bc(CT.LONG), _bc(CT.LONG), _bc(CT.DATETIME2, fsp=6)]
    with pytest.raises(DecodeError, match="does not match"):
        F.compile_plan(bad, schema)
    with pytest.raises(DecodeError, match="columns"):
        F.compile_plan(bcs[:2], schema)


def test_bad_plans_are_refused():
    with pytest.raises(ValueError):
        F._C.Plan(("a",), ((99, 0, 0, 0, None),), Decimal)
    with pytest.raises(ValueError):
        F._C.Plan(("a",), ((F.OP_TEXT, 9, 0, 0, None),), Decimal)
    with pytest.raises(ValueError):
        F._C.Plan(("a", "b"), ((F.OP_INT, 4, 0, 0, None),), Decimal)
    with pytest.raises(TypeError):
        F._C.Plan((1,), ((F.OP_INT, 4, 0, 0, None),), Decimal)


# -- an update's before image by its key alone (CRowDecoder(before_keys=True)) ---------------

def _key_alone(pairs, key):
    """What a plan with keys gives for reference update pairs: the before image's key alone
    when the update kept the key, else the whole image."""
    out = []
    for before, after in pairs:
        same = all(before[k] == after[k] for k in key)
        out.append(({k: before[k] for k in key} if same else before, after))
    return out


@settings(max_examples=300, deadline=None)
@given(images=st.lists(_image(), min_size=2, max_size=6), last=st.booleans())
def test_randomized_update_images_by_key_alone(images, last):
    """Every column type stepped over in a before image (``fc_skip``) leaves the cursor where
    making its value would: the after images equal the reference, and each before image is
    its key alone, or whole when the key changed. The key is the first column or the last
    (every other column then stepped over before it)."""
    from sparkcdc.core.schema import TableSchema

    images = images[: len(images) // 2 * 2]
    key = (_COLS[-1].name,) if last else (_COLS[0].name,)
    schema = TableSchema(TableId("f", "z"), _COLS, key, key[0])
    names = schema.column_names
    py_plan = [FDEC.field_decoder(bc, col) for bc, col in zip(_BCS, _COLS)]
    data = b"".join(images)
    want, err = _reference(data, py_plan, names)
    keyed = F.compile_plan(_BCS, schema, before_keys=True)
    if err is not None:  # text invalid in its charset: refused where it is decoded (a
        try:             # column stepped over is not read, and its value not wanted)
            F._C.decode(keyed, data, 2)
        except UnicodeDecodeError:
            pass
        return
    got = F._C.decode(keyed, data, 2)
    assert_rows_same(got, _key_alone(list(zip(want[::2], want[1::2])), key))
    # inserts and deletes keep their whole images
    assert_rows_same(F._C.decode(keyed, data, 0), [(None, w) for w in want])
    assert_rows_same(F._C.decode(keyed, data, 1), [(w, None) for w in want])


def test_all_types_updates_by_key_alone_through_the_server(mariadb, db):
    conn = cdc(mariadb)
    insert_all_types(mariadb, db)
    start = current_offset(conn)
    mariadb.execute("UPDATE all_types SET y = 1999 WHERE id <> 1",
                    "UPDATE all_types SET id = id + 10", database=db)
    end = current_offset(conn)
    schema = load_table_schema(conn, TableId(db, "all_types"))
    tables = {schema.table_id: schema}
    ref = list(BinlogReader(conn, 7303, tables, decoder=PyRowDecoder()).read_window(start, end))
    keyed = list(BinlogReader(conn, 7304, tables, decoder=F.default_decoder(before_keys=True))
                 .read_window(start, end))
    assert [r.op for r in keyed] == ["u"] * 7
    assert [(r.offset, r.ts_ms) for r in keyed] == [(r.offset, r.ts_ms) for r in ref]
    assert_rows_same([(r.before, r.after) for r in keyed],
                     _key_alone([(r.before, r.after) for r in ref], schema.row_key))
    assert [list(r.before) for r in keyed[:3]] == [list(schema.row_key)] * 3  # the key kept
    assert [list(r.before) for r in keyed[3:]] == [COLUMNS] * 4  # the key moved: whole
