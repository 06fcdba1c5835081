"""One behaviour suite for every sink, against real storage and real servers.

Each test runs once per sink (delta, iceberg, postgres, mysql, files as Parquet and JSON,
console, kafka in its three value formats), applies hand-made change batches of the Spark source's shape through
``apply_changes``, and reads the target back from its storage.
"""

from __future__ import annotations

from sink_support import (
    ALL_TYPES_DDL,
    D,
    all_types_rows,
    arrow_schema,
    changes_df,
    table_rows,
)

from sparkcdc.apply import ApplySpec, apply_changes, collect_changes
from sparkcdc.sinks.base import END_AT, START_AT

DDL = "id int, name string, qty int"


def _apply(spark, sink, rows, batch_id, ddl=DDL, **kw):
    return apply_changes(changes_df(spark, ddl, rows), batch_id, sink, keys=["id"], **kw)


def _rows(spark, sink, ddl=DDL, scd_type=1, keys=("id",), **fold):
    return table_rows(sink, spark, list(keys), schema=arrow_schema(spark, ddl, scd_type),
                      scd_type=scd_type, **fold)


def test_inserts_updates_deletes_and_key_changes(spark, make_target):
    sink = make_target()
    # batch 0: a snapshot of four rows
    _apply(spark, sink, [(1, "apple", 5, "insert", 10), (2, "pear", 3, "insert", 10),
                         (3, "plum", 7, "insert", 10), (4, "fig", 1, "insert", 10)], 0)
    assert _rows(spark, sink) == [
        {"id": 1, "name": "apple", "qty": 5}, {"id": 2, "name": "pear", "qty": 3},
        {"id": 3, "name": "plum", "qty": 7}, {"id": 4, "name": "fig", "qty": 1}]
    # batch 1, rows deliberately out of order: several changes per key (the last in _seq
    # order wins; pre-images are ignored), a delete, a key change 3 -> 30 (delete + insert),
    # and a key inserted then deleted inside the batch
    _apply(spark, sink, [
        (1, "apple", 9, "update_postimage", 1002), (1, "apple", 5, "update_preimage", 1001),
        (1, "apple", 6, "update_postimage", 1004), (1, "apple", 9, "update_preimage", 1003),
        (2, "pear", 3, "delete", 1011),
        (30, "plum", 8, "insert", 1022), (3, "plum", 7, "delete", 1021),
        (5, "kiwi", 2, "insert", 1031), (5, "kiwi", 2, "delete", 1032),
        (6, None, None, "insert", 1041),
    ], 1)
    assert _rows(spark, sink) == [
        {"id": 1, "name": "apple", "qty": 6}, {"id": 4, "name": "fig", "qty": 1},
        {"id": 6, "name": None, "qty": None}, {"id": 30, "name": "plum", "qty": 8}]
    # batch 2: a deleted key comes back, an update sets a value to null
    _apply(spark, sink, [(2, "pear", 4, "insert", 2001),
                         (4, "fig", 1, "update_preimage", 2011),
                         (4, None, 1, "update_postimage", 2012)], 2)
    assert _rows(spark, sink) == [
        {"id": 1, "name": "apple", "qty": 6}, {"id": 2, "name": "pear", "qty": 4},
        {"id": 4, "name": None, "qty": 1}, {"id": 6, "name": None, "qty": None},
        {"id": 30, "name": "plum", "qty": 8}]


def test_replayed_batch_changes_nothing(spark, make_target):
    sink = make_target()
    batch0 = [(1, "a", 1, "insert", 10), (2, "b", 2, "insert", 10)]
    batch1 = [(1, "a", 1, "delete", 101), (2, "b", 2, "update_preimage", 111),
              (2, "b", 20, "update_postimage", 112)]
    r0 = _apply(spark, sink, batch0, 0)
    r1 = _apply(spark, sink, batch1, 1)
    assert not r0.skipped and not r1.skipped
    expected = [{"id": 2, "name": "b", "qty": 20}]
    assert _rows(spark, sink) == expected
    assert sink.last_batch_id() == 1
    # Spark re-runs the last batch after a crash: same id, same rows
    assert _apply(spark, sink, batch1, 1).skipped
    # an older batch id, which would resurrect key 1 and revert key 2 if it were applied
    assert _apply(spark, sink, batch0, 0).skipped
    # the sink checks the id itself, inside its write, not only apply_changes
    late = changes_df(spark, DDL, [(9, "z", 9, "insert", 500)])
    if sink.capabilities.kind == "merge":
        cs = collect_changes(late, ApplySpec(keys=("id",)))
        assert sink.write(cs, 1).skipped
    else:
        assert sink.write_changelog(late, 1, ("id",)).skipped
    assert _rows(spark, sink) == expected
    assert sink.last_batch_id() == 1


def test_all_types_survive(spark, make_target):
    sink = make_target()
    rows = all_types_rows()
    _apply(spark, sink, [r + ("insert", 10) for r in rows], 0, ddl=ALL_TYPES_DDL)
    # update row 4 to row 2's values (but keep its id) and delete row 1
    upd = (4,) + rows[1][1:]
    _apply(spark, sink, [rows[3] + ("update_preimage", 101), upd + ("update_postimage", 102),
                         rows[0] + ("delete", 201)], 1, ddl=ALL_TYPES_DDL)
    schema = arrow_schema(spark, ALL_TYPES_DDL)
    got = table_rows(sink, spark, ["id"], schema=schema)
    names = schema.names
    expected = [dict(zip(names, r)) for r in (rows[1], rows[2], upd)]
    assert len(got) == len(expected)
    for g, e in zip(got, expected):
        for n in names:
            assert g[n] == e[n] and type(g[n]) is type(e[n]), (sink.type, g["id"], n, g[n], e[n])


def test_scd2_keeps_history(spark, make_target):
    sink = make_target()
    kw = {"stored_as_scd_type": 2}
    _apply(spark, sink, [(1, "a", 1, "insert", 10), (2, "b", 2, "insert", 11)], 0, **kw)
    _apply(spark, sink, [
        (1, "a", 1, "update_preimage", 20), (1, "a", 5, "update_postimage", 21),
        (1, "a", 5, "update_preimage", 30), (1, "a2", 6, "update_postimage", 31),
        (2, "b", 2, "delete", 40)], 1, **kw)
    _apply(spark, sink, [(2, "b", 3, "insert", 50), (3, "c", 1, "insert", 51)], 2, **kw)
    # replaying batch 1 must not add or close versions
    assert _apply(spark, sink, [(1, "x", 0, "update_postimage", 99)], 1, **kw).skipped

    def v(i, name, qty, start, end):
        return {"id": i, "name": name, "qty": qty, START_AT: D(start),
                END_AT: None if end is None else D(end)}

    assert _rows(spark, sink, scd_type=2) == [
        v(1, "a", 1, 10, 21), v(1, "a", 5, 21, 31), v(1, "a2", 6, 31, None),
        v(2, "b", 2, 11, 40), v(2, "b", 3, 50, None),
        v(3, "c", 1, 51, None)]


def test_ignore_null_updates_and_column_lists(spark, make_target):
    sink = make_target()
    ddl = "id int, name string, qty int, note string"
    kw = {"ignore_null_updates": True, "except_column_list": ["note"]}
    _apply(spark, sink, [(1, "a", 1, "x", "insert", 10), (2, "b", 2, "y", "insert", 10)],
           0, ddl=ddl, **kw)
    _apply(spark, sink, [
        (1, None, 7, "z", "update_postimage", 101),     # name stays "a"
        (2, "b2", None, "z", "update_postimage", 111),  # qty from the target (2) ...
        (2, None, None, "z", "update_postimage", 112),  # ... and name from the batch (b2)
        (3, None, 3, "z", "update_postimage", 121),     # an update of a missing key inserts
    ], 1, ddl=ddl, **kw)
    assert _rows(spark, sink, ignore_null_updates=True) == [
        {"id": 1, "name": "a", "qty": 7}, {"id": 2, "name": "b2", "qty": 2},
        {"id": 3, "name": None, "qty": 3}]
    if sink.capabilities.kind == "merge":  # a changelog keeps every column; the others drop 'note'
        stored = sink.read().column_names
        assert "note" not in stored and "_seq" not in stored and "_change_type" not in stored


def test_composite_keys_and_custom_deletes(spark, make_target):
    sink = make_target()
    ddl = "region string, id long, v double, gone boolean"
    rows = [("eu", 1, 1.5, False, "insert", 10), ("us", 1, 2.5, False, "insert", 10),
            ("eu", 2, 3.5, False, "insert", 10)]
    kw = {"keys": ["region", "id"], "apply_as_deletes": "gone", "sequence_by": "_seq"}
    df = changes_df(spark, ddl, rows)
    apply_changes(df, 0, sink, **kw)
    df = changes_df(spark, ddl, [("eu", 1, 0.0, True, "update_postimage", 101),
                                 ("us", 1, 9.5, False, "update_postimage", 102)])
    apply_changes(df, 1, sink, **kw)
    got = table_rows(sink, spark, ["region", "id"], schema=arrow_schema(spark, ddl),
                     apply_as_deletes="gone")
    assert got == [{"region": "eu", "id": 2, "v": 3.5, "gone": False},
                   {"region": "us", "id": 1, "v": 9.5, "gone": False}]


def test_empty_batch_records_its_id(spark, make_target):
    sink = make_target()
    _apply(spark, sink, [(1, "a", 1, "insert", 10)], 0)
    _apply(spark, sink, [], 1)
    assert sink.last_batch_id() == 1
    assert _rows(spark, sink) == [{"id": 1, "name": "a", "qty": 1}]


def test_scd2_tracks_history_of_some_columns(spark, make_target):
    """``track_history_column_list``: a change of a tracked column makes a new version; a
    change of the others updates the open version in place (the target's, or one of the
    batch), as Databricks' AUTO CDC does."""
    sink = make_target()
    kw = {"stored_as_scd_type": 2, "track_history_column_list": ["name"]}
    _apply(spark, sink, [(1, "a", 1, "insert", 10), (2, "b", 2, "insert", 11)], 0, **kw)
    _apply(spark, sink, [
        (1, "a", 1, "update_preimage", 20), (1, "a", 5, "update_postimage", 21),   # qty only
        (2, "b", 2, "update_preimage", 30), (2, "b2", 2, "update_postimage", 31),  # name
    ], 1, **kw)
    _apply(spark, sink, [
        (1, "a", 5, "update_preimage", 40), (1, "a9", 5, "update_postimage", 41),
        (1, "a9", 5, "update_preimage", 42), (1, "a9", 7, "update_postimage", 43),
        (2, "b2", 2, "delete", 50),
        (3, "c", 1, "insert", 51), (3, "c", 1, "update_preimage", 52),
        (3, "c", 3, "update_postimage", 53)], 2, **kw)
    # an in-place change of the target's open version, then a tracked change, in one batch
    _apply(spark, sink, [
        (3, "c", 3, "update_preimage", 60), (3, "c", 4, "update_postimage", 61),
        (3, "c", 4, "update_preimage", 62), (3, "c2", 4, "update_postimage", 63)], 3, **kw)
    assert _apply(spark, sink, [(1, "x", 0, "update_postimage", 99)], 3, **kw).skipped

    def v(i, name, qty, start, end):
        return {"id": i, "name": name, "qty": qty, START_AT: D(start),
                END_AT: None if end is None else D(end)}

    assert _rows(spark, sink, scd_type=2, track_history_column_list=["name"]) == [
        v(1, "a", 5, 10, 41), v(1, "a9", 7, 41, None),
        v(2, "b", 2, 11, 31), v(2, "b2", 2, 31, 50),
        v(3, "c", 4, 51, 63), v(3, "c2", 4, 63, None)]


def test_scd2_tracks_history_except_some_columns(spark, make_target):
    """``track_history_except_column_list``: every column but those makes new versions."""
    sink = make_target()
    kw = {"stored_as_scd_type": 2, "track_history_except_column_list": ["qty"]}
    _apply(spark, sink, [(1, "a", 1, "insert", 10)], 0, **kw)
    _apply(spark, sink, [(1, "a", 1, "update_preimage", 20), (1, "a", 2, "update_postimage", 21),
                         (1, "a", 2, "update_preimage", 30), (1, "z", 2, "update_postimage", 31)],
           1, **kw)
    # (a changelog read back is folded over the table's columns: a topic's partition and
    # offset columns are no columns of the table, and would count as tracked)
    assert _rows(spark, sink, scd_type=2, track_history_except_column_list=["qty"],
                 column_list=["id", "name", "qty"]) == [
        {"id": 1, "name": "a", "qty": 2, START_AT: D(10), END_AT: D(31)},
        {"id": 1, "name": "z", "qty": 2, START_AT: D(31), END_AT: None}]


def test_apply_as_truncates_empties_the_target(spark, make_target):
    """``apply_as_truncates``: a row the rule marks empties the target at its place; only
    the changes after it are applied (a changelog keeps every row; folding it with the same
    rule gives the same table). A replayed batch empties nothing."""
    sink = make_target()
    kw = {"apply_as_truncates": "name = 'TRUNCATE'"}
    _apply(spark, sink, [(1, "a", 1, "insert", 10), (2, "b", 2, "insert", 10),
                         (3, "c", 3, "insert", 10)], 0, **kw)
    batch1 = [(1, "a", 9, "update_postimage", 101), (0, "TRUNCATE", None, "insert", 105),
              (4, "d", 4, "insert", 110), (2, "b", 7, "update_postimage", 111)]
    _apply(spark, sink, batch1, 1, **kw)
    expected = [{"id": 2, "name": "b", "qty": 7}, {"id": 4, "name": "d", "qty": 4}]
    assert _rows(spark, sink, **kw) == expected
    assert _apply(spark, sink, batch1, 1, **kw).skipped
    _apply(spark, sink, [(5, "e", 5, "insert", 201)], 2, **kw)
    assert _rows(spark, sink, **kw) == expected + [{"id": 5, "name": "e", "qty": 5}]
