"""Change-event formats: exact round trips through JSON text, and the wire shapes."""

from __future__ import annotations

import json

import pytest
from sink_support import ALL_TYPES_DDL, all_types_rows, changes_df

from sparkcdc import formats
from sparkcdc.errors import ConfigError

DDL = "id int, name string, qty int"


@pytest.fixture(scope="module")
def stream(spark):
    rows = [(1, "a", 1, "insert", 10), (2, "b", None, "insert", 10),
            (1, "a", 1, "update_preimage", 101), (1, "a", 5, "update_postimage", 102),
            (2, "b", None, "update_preimage", 111), (2, "b", 7, "update_postimage", 112),
            (3, "c", 3, "insert", 121), (2, "b", 7, "delete", 131)]
    return changes_df(spark, DDL, rows)


def _sorted(df):
    return sorted(df.collect(), key=lambda r: r["_seq"])


@pytest.mark.parametrize("fmt", formats.FORMATS)
def test_round_trip_all_types(spark, fmt):
    rows = all_types_rows()
    changes = [r + ("insert", 10 + i) for i, r in enumerate(rows)]
    changes += [rows[0] + ("update_preimage", 1001),                # every column changes
                (rows[0][0],) + rows[1][1:] + ("update_postimage", 1002),
                rows[2] + ("delete", 2001)]
    df = changes_df(spark, ALL_TYPES_DDL, changes)
    enc = formats.encode(df, fmt, keys=["id"])
    assert enc.columns == ["key", "value"]
    back = formats.decode(enc, fmt, ALL_TYPES_DDL)
    assert back.columns == df.columns
    assert _sorted(back) == _sorted(df)


def test_debezium_envelope(spark, stream):
    msgs = [(json.loads(r.key), json.loads(r.value))
            for r in formats.encode(stream, "debezium-json", keys=["id"]).collect()]
    by_seq = {m["source"]["seq"]: (k, m) for k, m in msgs}
    assert len(msgs) == 6  # pre-images are folded into their update event
    snaps = [m for k, m in msgs if m["source"]["seq"] == "10"]
    assert len(snaps) == 2
    snap = snaps[0]
    assert snap["op"] == "r" and snap["before"] is None and snap["source"]["snapshot"] == "true"
    _, upd = by_seq["112"]
    assert upd["op"] == "u" and upd["before"] == {"id": 2, "name": "b", "qty": None}
    assert upd["after"] == {"id": 2, "name": "b", "qty": 7}
    assert upd["source"]["seq_before"] == "111" and upd["source"]["db"] == "shop"
    assert upd["ts_ms"] == 1704067200000
    key, dele = by_seq["131"]
    assert key == {"id": 2} and dele["op"] == "d" and dele["after"] is None
    assert by_seq["121"][1]["op"] == "c"
    tomb = formats.encode(stream, "debezium-json", keys=["id"], tombstones=True).collect()
    assert len(tomb) == 7 and sum(r.value is None for r in tomb) == 1
    # tombstones are skipped when decoding
    assert formats.decode(spark.createDataFrame(tomb), "debezium-json", DDL).count() == 8


def test_changelog_json_is_flinks_shape(stream):
    vals = [json.loads(r.value) for r in formats.encode(stream, "changelog-json").collect()]
    ops = sorted(v["op"] for v in vals)
    assert ops == sorted(["+I", "+I", "-U", "+U", "-U", "+U", "+I", "-D"])
    insert = next(v for v in vals if v["seq"] == "121")
    assert {"data": {"id": 3, "name": "c", "qty": 3}, "op": "+I"}.items() <= insert.items()


def test_canal_old_holds_only_changed_columns(stream):
    vals = {json.loads(r.value)["seq"]: json.loads(r.value)
            for r in formats.encode(stream, "canal-json", keys=["id"]).collect()}
    upd = vals["112"]
    assert upd["type"] == "UPDATE" and upd["data"] == [{"id": 2, "name": "b", "qty": 7}]
    assert upd["old"] == [{"qty": None}]  # the old null is written, unchanged columns are not
    assert vals["102"]["old"] == [{"qty": 1}]
    assert vals["10"]["old"] is None and vals["10"]["type"] == "INSERT"
    assert vals["131"]["type"] == "DELETE" and vals["131"]["pkNames"] == ["id"]


def test_canal_key_change_is_a_delete_and_an_insert(spark):
    """Canal's own shape of a primary-key change: one UPDATE whose ``old`` holds the old
    key; an update that keeps its key stays a pair."""
    msgs = [{"data": [{"id": 7, "name": "x", "qty": 1}], "old": [{"id": 3}],
             "type": "UPDATE", "database": "shop", "table": "t", "pkNames": ["id"],
             "isDdl": False, "es": 1, "ts": 1, "seq": "20", "seq_before": "19"},
            {"data": [{"id": 7, "name": "y", "qty": 1}], "old": [{"name": "x"}],
             "type": "UPDATE", "database": "shop", "table": "t", "pkNames": ["id"],
             "isDdl": False, "es": 1, "ts": 1, "seq": "30", "seq_before": "29"}]
    df = spark.createDataFrame([(None, json.dumps(m)) for m in msgs], "key string, value string")
    back = [(r["_change_type"], r["id"], r["name"]) for r in
            sorted(formats.decode(df, "canal-json", DDL).collect(), key=lambda r: r["_seq"])]
    assert back == [("delete", 3, "x"), ("insert", 7, "x"),
                    ("update_preimage", 7, "x"), ("update_postimage", 7, "y")]


def test_decode_keeps_kafka_columns_and_reads_bytes(spark, stream):
    enc = formats.encode(stream, "changelog-json", keys=["id"])
    kafka = enc.selectExpr("CAST(key AS BINARY) AS key", "CAST(value AS BINARY) AS value",
                           "'orders' AS topic", "0 AS partition",
                           "monotonically_increasing_id() AS offset")
    back = formats.decode(kafka, "changelog-json", DDL)
    assert back.columns[-3:] == ["topic", "partition", "offset"]
    assert back.count() == 8


def test_unknown_format_names_the_choices(stream):
    with pytest.raises(ConfigError, match="debezium-json"):
        formats.encode(stream, "debezium", keys=["id"])


@pytest.mark.parametrize("fmt", formats.FORMATS)
def test_tombstones_follow_each_delete(spark, stream, fmt):
    """``tombstones=True`` in every format: a null value right after each delete, under the
    deleted row's key (what Kafka's log compaction needs), and skipped by ``decode``."""
    plain = formats.encode(stream, fmt, keys=["id"]).collect()
    rows = formats.encode(stream, fmt, keys=["id"], tombstones=True).collect()
    assert len(rows) == len(plain) + 1
    i = next(i for i, r in enumerate(rows) if r.value is None)
    assert rows[i].key == rows[i - 1].key == '{"id":2}'
    assert json.loads(rows[i - 1].value).get("op", json.loads(rows[i - 1].value).get("type")) \
        in ("d", "-D", "DELETE")
    assert formats.decode(spark.createDataFrame(rows), fmt, DDL).count() == \
        formats.decode(spark.createDataFrame(plain), fmt, DDL).count()


@pytest.mark.parametrize("tombstones", [False, True])
@pytest.mark.parametrize("fmt", ["debezium-json", "canal-json"])
def test_a_batch_without_preimages_encodes_the_same_unpaired(spark, fmt, tombstones):
    """``pairs=False`` (what the kafka sink passes for a batch without pre-images, a
    snapshot's) writes exactly the messages the pairing window writes."""
    rows = all_types_rows()
    changes = [r + ("insert", 10 + i) for i, r in enumerate(rows)]  # snapshot rows
    changes += [rows[1] + ("insert", 1001), rows[2] + ("delete", 2001),  # binlog ones
                (rows[0][0],) + rows[1][1:] + ("update_postimage", 3002)]  # a lone post-image
    df = changes_df(spark, ALL_TYPES_DDL, changes)
    paired = formats.encode(df, fmt, keys=["id"], tombstones=tombstones).collect()
    unpaired = formats.encode(df, fmt, keys=["id"], tombstones=tombstones, pairs=False).collect()
    assert len(paired) == len(changes) + tombstones
    assert sorted(map(tuple, unpaired), key=str) == sorted(map(tuple, paired), key=str)
