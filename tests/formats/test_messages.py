"""One message of each format decoded in Python (the kafka source's decoder): change kinds,
table identity, keys, declared types, Debezium's position; what is not the format is named."""

from __future__ import annotations

import datetime as dt
import decimal
import json

import pyarrow as pa
import pytest

from sparkcdc.formats.messages import BadMessage, Position, convert, decode_message, infer_type


def _m(d) -> bytes:
    return json.dumps(d).encode()


def test_debezium_with_kafka_connects_schema_types_the_columns():
    value = {"schema": {"type": "struct", "fields": [
        {"field": "before", "type": "struct", "fields": []},
        {"field": "after", "type": "struct", "fields": [
            {"field": "id", "type": "int32"},
            {"field": "price", "type": "bytes", "name": "org.apache.kafka.connect.data.Decimal",
             "parameters": {"scale": "2", "connect.decimal.precision": "8"}},
            {"field": "born", "type": "int32", "name": "io.debezium.time.Date"},
            {"field": "at", "type": "int64", "name": "io.debezium.time.Timestamp"}]}]},
        "payload": {"before": None, "after": {"id": 1, "price": "ATs=", "born": 1,
                                              "at": 1700000000123},
                    "source": {"db": "shop", "table": "t", "file": "binlog.000002",
                               "pos": 77, "row": 1, "snapshot": "false", "ts_ms": 5},
                    "op": "c"}}
    [c] = decode_message("debezium-json", _m({"schema": {}, "payload": {"id": 1}}), _m(value))
    assert (c.kind, c.database, c.table, c.keys, c.op_ts_ms) == ("insert", "shop", "t",
                                                                 ("id",), 5)
    assert c.position.key() == (2, 77, 1, 1) and not c.snapshot
    assert c.types["price"] == pa.decimal128(8, 2)
    assert convert(c.row["price"], c.types["price"]) == decimal.Decimal("3.15")
    assert convert(c.row["born"], c.types["born"]) == dt.date(1970, 1, 2)
    assert convert(c.row["at"], c.types["at"]) == dt.datetime(2023, 11, 14, 22, 13, 20, 123000)


def test_debezium_update_delete_and_snapshot_rows():
    src = {"db": "d", "table": "t", "file": "b.000001", "pos": 10, "row": 0}
    pre, post = decode_message("debezium-json", None, _m(
        {"before": {"id": 1, "v": "a"}, "after": {"id": 1, "v": "b"}, "source": src, "op": "u"}))
    assert (pre.kind, pre.row, post.kind, post.row) == ("update_preimage", {"id": 1, "v": "a"},
                                                        "update_postimage", {"id": 1, "v": "b"})
    [d] = decode_message("debezium-json", None, _m({"before": {"id": 1}, "after": None,
                                                    "source": src, "op": "d"}))
    assert d.kind == "delete"
    [r] = decode_message("debezium-json", None, _m({"before": None, "after": {"id": 1},
                                                    "source": {**src, "snapshot": "true"},
                                                    "op": "r"}))
    assert r.snapshot and r.position is None  # snapshot rows share one position
    assert decode_message("debezium-json", b'{"id":1}', None) == []  # a tombstone


def test_debezium_key_change_delete_comes_before_its_create():
    """Debezium makes a primary-key change a delete of the old key and a create of the new
    one, both at the same file, position and row: the create must order after the delete
    (else it would be taken for a repeat and lost), and a repeat of either must not."""
    src = {"db": "d", "table": "t", "file": "b.000001", "pos": 10, "row": 2}
    [d] = decode_message("debezium-json", None, _m({"before": {"id": 1}, "after": None,
                                                    "source": src, "op": "d"}))
    [c] = decode_message("debezium-json", None, _m({"before": None, "after": {"id": 9},
                                                    "source": src, "op": "c"}))
    assert d.position.key() < c.position.key()
    nxt = {**src, "row": 3}
    [u, _] = decode_message("debezium-json", None, _m({"before": {"id": 2}, "after": {"id": 2},
                                                       "source": nxt, "op": "u"}))
    assert c.position.key() < u.position.key()
    assert Position.from_list(c.position.to_list()) == c.position
    assert Position.from_list(["b.000001", 10, 2]).key() == c.position.key()  # an old mark


def test_canal_update_overlays_old_and_reads_mysql_types():
    msg = {"data": [{"id": "1", "price": "9.50", "v": "new"}], "old": [{"v": "old"}],
           "type": "UPDATE", "database": "shop", "table": "t", "pkNames": ["id"],
           "mysqlType": {"id": "int(11)", "price": "decimal(10,2)", "v": "varchar(20)"},
           "isDdl": False, "es": 7, "ts": 8}
    pre, post = decode_message("canal-json", None, _m(msg))
    assert pre.row["v"] == "old" and post.row["v"] == "new" and pre.keys == ("id",)
    assert pre.types == {"id": pa.int64(), "price": pa.decimal128(10, 2), "v": pa.string()}
    assert convert(post.row["id"], pre.types["id"]) == 1
    assert decode_message("canal-json", None, _m({**msg, "isDdl": True, "type": "ALTER",
                                                  "data": None})) == []


def test_changelog_json_and_inferred_types():
    [c] = decode_message("changelog-json", b'{"id":3}', _m(
        {"data": {"id": 3, "x": 1.5}, "op": "-D", "db": "a", "table": "b", "ts_ms": 1}))
    assert (c.kind, c.keys, c.table) == ("delete", ("id",), "b")
    assert infer_type([1, 2, None]) == pa.int64()
    assert infer_type([1, decimal.Decimal("1.5")]) == pa.float64()
    assert infer_type([{"a": 1}]) == pa.string() and infer_type([None]) == pa.string()
    assert convert({"a": 1}, pa.string()) == '{"a":1}'


@pytest.mark.parametrize("fmt,value,match", [
    ("debezium-json", b"{oops", "not JSON"),
    ("debezium-json", b"[1]", "not an object"),
    ("debezium-json", b'{"after": {}}', "no 'op' field"),
    ("debezium-json", b'{"op": "u", "before": null, "after": null}', "without 'after'"),
    ("debezium-json", b'{"op": "x", "after": {}}', "unknown op 'x'"),
    ("canal-json", b'{"data": [1], "type": "INSERT"}', "row of 'data' is not an object"),
    ("canal-json", b'{"op": "+I"}', "not a Canal flat message"),
    ("changelog-json", b'{"data": {}, "op": "?"}', "not Flink's changelog JSON"),
])
def test_what_is_not_the_format_is_named(fmt, value, match):
    with pytest.raises(BadMessage, match=match):
        decode_message(fmt, None, value)
