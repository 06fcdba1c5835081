"""MySQL's binary JSON printed as the server prints it (``json_binary``), which is what the
snapshot reads (``SELECT j`` returns the server's text): every JSON type, through both row
decoders.

Real server bytes come from go-mysql's ``replication/row_event_test.go`` (MIT; commit
02e8369096c073bcb3cb6cbf923224ff0cc8f0f2): whole TABLE_MAP and WRITE/UPDATE_ROWS events of
MySQL 5.7 tables with JSON columns (``TestParseJson``, ``TestJsonNull``,
``TestJsonCompatibility``). go-mysql asserts its own renderings; the texts expected here
are MySQL's (``Json_wrapper::to_string``: ``", "`` and ``": "``). The types those events
lack are built from the documented format (``replay_support.jsonb``), their expected texts
written by hand from MySQL's printing rules (docs/types.md)."""

from __future__ import annotations

import base64
import struct
from decimal import Decimal

import pytest
from replay_support import jsonb

from sparkcdc.core.schema import Column, TableId, TableSchema
from sparkcdc.errors import DecodeError
from sparkcdc.mysql.binlog import fastdecode as F
from sparkcdc.mysql.binlog import json_binary as J
from sparkcdc.mysql.binlog import protocol as E
from sparkcdc.mysql.binlog.row_decoding import PyRowDecoder

DECODERS = [F.CRowDecoder, PyRowDecoder] if F.available() else [PyRowDecoder]


def _decode(decoder, tm_body: bytes, schema: TableSchema, event: bytes, mode: int):
    tm = E.parse_table_map(tm_body, "mysql")
    *_, p = E.rows_header(event, 0, len(event), 2, mode == 2)
    return decoder().decode_rows(tm, schema, mode, event[p:])


# -- real server bytes (go-mysql) -------------------------------------------------------

T10_MAP = b"m\x00\x00\x00\x00\x00\x01\x00\x04test\x00\x03t10\x00\x02\xf5\xf6\x03\x04\n\x00\x03"
T10 = TableSchema(TableId("test", "t10"), (Column("c1", "json"), Column("c2", "decimal(10,0)")),
                  (), "c2")
T10_ROWS = [
    b"m\x00\x00\x00\x00\x00\x01\x00\x02\x00\x02\xff\xfd\x80\x00\x00\x00\x01",
    (b"m\x00\x00\x00\x00\x00\x01\x00\x02\x00\x02\xff\xfc)\x00\x00\x00\x00\x02\x00(\x00\x12\x00"
     b"\x04\x00\x16\x00\x04\x00\x0c\x1a\x00\x0c!\x00key1key2\x06value1\x06value2\x80\x00\x00"
     b"\x00\x01"),
]


@pytest.mark.parametrize("decoder", DECODERS)
def test_go_mysql_t10_rows(decoder):
    got = [_decode(decoder, T10_MAP, T10, ev, 0) for ev in T10_ROWS]
    assert got == [[(None, {"c1": None, "c2": Decimal(1)})],
                   [(None, {"c1": '{"key1": "value1", "key2": "value2"}', "c2": Decimal(1)})]]


ORDER_MAP = (b"r\x00\x00\x00\x00\x00\x01\x00\x04test\x00\x10hj_order_preview\x00\x07\x03\x08\x08"
             b"\xf5\x01\x03\x11\x02\x04\x00\x00")
ORDER = TableSchema(TableId("test", "hj_order_preview"), (
    Column("id", "int"), Column("buyer_id", "bigint"), Column("order_sn", "bigint"),
    Column("order_detail", "json", False), Column("is_del", "tinyint(1)"),
    Column("add_time", "int"), Column("last_update_time", "timestamp")), ("id",), "id")
# go-mysql's "\ue4d0" is the UTF-8 bytes of U+E4D0
ORDER_ROW = (b"r\x00\x00\x00\x00\x00\x01\x00\x02\x00\x07\xff\x80\x01\x00\x00\x00B"
             + "\ue4d0".encode() + b"6W\x00\x00A\x10@l\x9a\x85/\x00\x00\x00\x00\x00\x00{\xc36X"
             b"\x00\x00\x00\x00")


@pytest.mark.parametrize("decoder", DECODERS)
def test_go_mysql_an_empty_json_value_reads_as_json_null(decoder):
    """A NOT NULL JSON column filled leniently holds no bytes; the server reads it as the
    JSON null literal (Field_json::val_json), so the binlog gives 'null', not NULL."""
    [(_before, after)] = _decode(decoder, ORDER_MAP, ORDER, ORDER_ROW, 0)
    assert after == {"id": 1, "buyer_id": 95891865464386, "order_sn": 13376222192996417,
                     "order_detail": "null", "is_del": 0, "add_time": 1479983995,
                     "last_update_time": None}


T11_MAP = b"l\x00\x00\x00\x00\x00\x01\x00\x04test\x00\x03t11\x00\x04\x03\x0f\xf5\x03\x03d\x00\x04\x0f"
T11 = TableSchema(TableId("test", "t11"), (Column("id", "int"), Column("cfg", "varchar(100)"),
                                           Column("cfg_json", "json"), Column("age", "int")),
                  (), "id")
T11_UPDATES = [
    ((b"l\x00\x00\x00\x00\x00\x01\x00\x02\x00\x04\xff\xff\xf8\x01\x00\x00\x00\x02{}\x05\x00\x00"
      b"\x00\x00\x00\x00\x04\x00\xf8\x01\x00\x00\x00\n{\"a\":1234}\r\x00\x00\x00\x00\x01\x00"
      b"\x0c\x00\x0b\x00\x01\x00\x05\xd2\x04a"), ("{}", '{"a": 1234}')),
    ((b"l\x00\x00\x00\x00\x00\x01\x00\x02\x00\x04\xff\xff\xf8\x01\x00\x00\x00\n{\"a\":1234}\r"
      b"\x00\x00\x00\x00\x01\x00\x0c\x00\x0b\x00\x01\x00\x05\xd2\x04a\xf8\x01\x00\x00\x00\x02{}"
      b"\x05\x00\x00\x00\x00\x00\x00\x04\x00"), ('{"a": 1234}', "{}")),
]


@pytest.mark.parametrize("decoder", DECODERS)
def test_go_mysql_t11_updates_of_a_generated_json_column(decoder):
    for event, (was, now) in T11_UPDATES:
        [(before, after)] = _decode(decoder, T11_MAP, T11, event, 2)
        assert (before["cfg_json"], after["cfg_json"]) == (was, now)
        assert (before["cfg"], after["cfg"]) == (was.replace(" ", ""), now.replace(" ", ""))
        assert before["id"] == after["id"] == 1 and before["age"] is after["age"] is None


# -- every type, from the documented format ----------------------------------------------

def _packed_datetime(y, mo, d, h=0, mi=0, s=0, us=0) -> bytes:
    v = ((((y * 13 + mo) << 5 | d) << 17 | (h << 12 | mi << 6 | s)) << 24) | us
    return struct.pack("<q", v)


def _packed_time(h, mi, s, us=0, negative=False) -> bytes:
    v = (h << 12 | mi << 6 | s) << 24 | us
    return struct.pack("<q", -v if negative else v)


SCALARS = [  # (key, tagged value, MySQL's text)
    ("a", ("int16", -5), "-5"),
    ("b", ("uint16", 65535), "65535"),
    ("c", ("int32", -70000), "-70000"),
    ("d", ("uint32", 4000000000), "4000000000"),
    ("e", ("int64", -9223372036854775808), "-9223372036854775808"),
    ("f", ("uint64", 18446744073709551615), "18446744073709551615"),
    ("g", ("double", 1.5), "1.5"),
    ("h", ("double", 100.0), "100.0"),  # a whole double keeps ".0"
    ("i", ("str", 'x"y\\\n\t\x01\x1f\x7fé'), '"x\\"y\\\\\\n\\t\\u0001\\u001f\x7fé"'),
    ("j", ("lit", True), "true"),
    ("k", ("lit", False), "false"),
    ("l", ("lit", None), "null"),
    ("m", ("opaque", 246, b"\x05\x02\x80\x7b\x2d"), "123.45"),  # DECIMAL(5,2), unquoted
    ("n", ("opaque", 246, b"\x05\x02\x7f\xff\xcd"), "-0.50"),
    ("o", ("opaque", 10, _packed_datetime(2024, 1, 15)), '"2024-01-15"'),
    ("p", ("opaque", 12, _packed_datetime(2024, 1, 15, 10, 30, 45, 123456)),
     '"2024-01-15 10:30:45.123456"'),
    ("q", ("opaque", 7, _packed_datetime(1999, 12, 31, 23, 59, 59)),
     '"1999-12-31 23:59:59.000000"'),
    ("r", ("opaque", 11, _packed_time(838, 59, 59, 0, negative=True)), '"-838:59:59.000000"'),
    ("s", ("opaque", 11, _packed_time(87, 31, 46, 654321)), '"87:31:46.654321"'),
    ("t", ("opaque", 252, b"\x00\x01\xff"), '"base64:type252:AAH/"'),
    ("u", ("opaque", 253, "hé".encode()), '"hé"'),  # VAR_STRING opaque: a string
    ("v", ("opaque", 15, b"U"), '"base64:type15:VQ=="'),
]
DOUBLES = [(1e15, "1e15"), (1e14, "100000000000000.0"), (0.1, "0.1"), (-0.0, "-0.0"),
           (1e-15, "0.000000000000001"), (1e-16, "1e-16"), (1.5e-5, "0.000015"),
           (-2.5e100, "-2.5e100"), (123456789.125, "123456789.125"),
           (1.7976931348623157e308, "1.7976931348623157e308"), (5e-324, "5e-324")]


@pytest.mark.parametrize("large", [False, True])
def test_every_scalar_type_in_small_and_large_objects_and_arrays(large):
    obj = jsonb(("obj", [(k, v) for k, v, _ in SCALARS], large))
    assert J.to_text(obj) == "{" + ", ".join(f'"{k}": {t}' for k, _, t in SCALARS) + "}"
    arr = jsonb(("arr", [v for _, v, _ in SCALARS], large))
    assert J.to_text(arr) == "[" + ", ".join(t for *_, t in SCALARS) + "]"
    assert arr[0] == (3 if large else 2) and obj[0] == (1 if large else 0)


def test_top_level_scalars_doubles_nesting_and_empty_containers():
    for _k, v, text in SCALARS:
        assert J.to_text(jsonb(v)) == text
    for x, text in DOUBLES:
        assert J.to_text(jsonb(("double", x))) == text
    nested = ("obj", [("a", ("arr", [], False)), ("b", ("obj", [], False)),
                      ("cc", ("arr", [("obj", [("x", ("arr", [("int16", 1)], True))], False)],
                              False))], True)
    assert J.to_text(jsonb(nested)) == '{"a": [], "b": {}, "cc": [{"x": [1]}]}'
    assert J.to_text(b"") == "null"


def test_a_long_opaque_value_breaks_its_base64_every_76_characters():
    text = J.to_text(jsonb(("opaque", 252, bytes(range(120)))))
    b64 = base64.b64encode(bytes(range(120))).decode()
    assert len(b64) == 160
    assert text == f'"base64:type252:{b64[:76]}\\n{b64[76:152]}\\n{b64[152:]}"'


def test_malformed_values_are_named():
    good = jsonb(("obj", [("a", ("str", "xyz"))], False))
    for bad in (good[:-2], b"\x0d\x00", b"\x04\x07", good[:3]):
        with pytest.raises(DecodeError, match="malformed binary JSON"):
            J.to_text(bad)


@pytest.mark.parametrize("decoder", DECODERS)
def test_both_decoders_print_every_type_in_a_rows_event(decoder):
    schema = TableSchema(TableId("d", "j"), (Column("id", "int"), Column("j", "json")),
                         ("id",), "id")
    tm = E.parse_table_map(b"\x05\0\0\0\0\0\1\0\1d\0\1j\0\2\x03\xf5\1\4\2", "mysql")
    values = [jsonb(("obj", [(k, v) for k, v, _ in SCALARS], True)),
              jsonb(("arr", [("double", x) for x, _ in DOUBLES], False)), b""]
    images = b"".join(b"\0" + struct.pack("<iI", i, len(v)) + v for i, v in enumerate(values))
    got = decoder().decode_rows(tm, schema, 0, images)
    assert [a["j"] for _b, a in got] == [
        "{" + ", ".join(f'"{k}": {t}' for k, _, t in SCALARS) + "}",
        "[" + ", ".join(t for _, t in DOUBLES) + "]", "null"]
