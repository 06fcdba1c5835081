"""The SQL sinks' append path (issue 15): new rows go straight into the target.

A batch's new rows (``__new``: snapshot rows, first inserts) are written to PostgreSQL by a
plain COPY into the target and to MySQL by plain multi-row INSERTs, when the target's key
index holds nothing in their key range (``ChangeSet.split_new``); every other row is merged
as before. Against the real servers, each test checks the target read back equals the source
rows *and* which path was taken (``WriteResult.counts['appended']``), so a sink that merged
everything (or appended over existing rows) fails:

* in-step targets: new rows appended, updates/deletes merged, a deleted key appended again,
  new rows inside the held range merged; composite date/decimal keys; text keys never append;
* out-of-step targets (rows written there directly): new rows over them are merged, no
  duplicate-key error, no duplicate rows; a writer racing the range check (simulated) makes
  the append fail on the primary key, and the savepoint brings it back to a merge;
* exactly once: a replayed batch id changes nothing, and a batch that fails after its append
  leaves neither rows nor batch id behind.
"""

from __future__ import annotations

import datetime as dt
import logging

import pytest
from sink_support import D, TargetFactory, arrow_schema, changes_df, table_rows

from sparkcdc.apply import ApplySpec, apply_changes, collect_changes
from sparkcdc.sinks.base import ChangeSet

DDL = "id int, name string, qty int"


@pytest.fixture(params=["postgres", "mysql"])
def make_sql_target(request, tmp_path):
    f = TargetFactory(request.param, request, tmp_path)
    yield f
    f.close()


def _target(make_sql_target):
    # small MySQL statements, so an append is many INSERTs (the savepoint must undo them all)
    extra = {"statement-bytes": "1024"} if make_sql_target.type == "mysql" else {}
    return make_sql_target(**extra)


def _apply(spark, sink, rows, batch_id, ddl=DDL, keys=("id",)):
    return apply_changes(changes_df(spark, ddl, rows), batch_id, sink, keys=list(keys))


def _rows(spark, sink, ddl=DDL, keys=("id",)):
    return table_rows(sink, spark, list(keys), schema=arrow_schema(spark, ddl))


def _expected(source: dict) -> list[dict]:
    return [{"id": k, "name": n, "qty": q} for k, (n, q) in sorted(source.items())]


def _write_directly(sink, rows: list[tuple]) -> None:
    """Someone else's rows in the target: the table created and filled with plain SQL, so
    the target is out of step with the source."""
    conn = sink.connection()
    if sink.type == "postgres":
        name = f'"{sink.config.schema}"."{sink.config.table}"'
        with conn.transaction(), conn.cursor() as cur:
            cur.execute(f"CREATE TABLE {name} (id integer PRIMARY KEY, name text, qty integer)")
            cur.executemany(f"INSERT INTO {name} VALUES (%s, %s, %s)", rows)
    else:
        name = f"`{sink.config.database}`.`{sink.config.table}`"
        with conn.cursor() as cur:
            cur.execute(f"CREATE DATABASE IF NOT EXISTS `{sink.config.database}`")
            cur.execute(f"CREATE TABLE {name} (id INT NOT NULL PRIMARY KEY, name LONGTEXT, "
                        "qty INT) ENGINE=InnoDB DEFAULT CHARSET=utf8mb4 COLLATE=utf8mb4_bin")
            cur.executemany(f"INSERT INTO {name} VALUES (%s, %s, %s)", rows)
        conn.commit()


def test_new_rows_are_appended_then_merged_when_held(spark, make_sql_target):
    sink = _target(make_sql_target)
    source = {i: (f"n{i} ' \\ \t ü", i % 7) for i in range(2, 1002, 2)}  # 500 even ids
    # batch 0, a snapshot into an empty target: every row appended
    r = _apply(spark, sink, [(i, n, q, "insert", 10) for i, (n, q) in source.items()], 0)
    assert r.counts == {"upsert": 500, "appended": 500}
    assert _rows(spark, sink) == _expected(source)

    # batch 1: updates and a delete are merged; new keys beyond the held range are appended
    batch = [(2, "n2", 0, "update_preimage", 101), (2, "two", 22, "update_postimage", 102),
             (4, None, None, "update_postimage", 103), (6, "n6", 6, "delete", 104)]
    batch += [(i, f"new{i}", i, "insert", 200 + i) for i in range(3001, 3011)]
    r = _apply(spark, sink, batch, 1)
    source.update({2: ("two", 22), 4: (None, None)})
    source.pop(6)
    source.update({i: (f"new{i}", i) for i in range(3001, 3011)})
    assert r.counts == {"upsert": 12, "delete": 1, "appended": 10}
    assert _rows(spark, sink) == _expected(source)

    # batch 2: new keys whose range [5, 3011] holds target rows: all merged, none appended
    r = _apply(spark, sink, [(5, "five", 5, "insert", 301), (3011, "x", 1, "insert", 302)], 2)
    source.update({5: ("five", 5), 3011: ("x", 1)})
    assert r.counts == {"upsert": 2}
    assert _rows(spark, sink) == _expected(source)

    # batch 3: the deleted key 6 comes back; the target holds nothing at 6 any more
    r = _apply(spark, sink, [(6, "six", 6, "insert", 401)], 3)
    source[6] = ("six", 6)
    assert r.counts == {"upsert": 1, "appended": 1}
    assert _rows(spark, sink) == _expected(source)
    assert sink.last_batch_id() == 3


def test_date_and_decimal_keys_append_text_keys_merge(spark, make_sql_target):
    # a composite key led by a date (the range check's bounds are dates), then decimal(20,0)
    # (MySQL's BIGINT UNSIGNED) leading a key of its own; a text key is never appended
    # (the server's collation, not Arrow, orders it)
    sink = _target(make_sql_target)
    ddl = "day date, n decimal(20,0), v string"
    keys = ("day", "n")
    d1, d2 = dt.date(2024, 1, 1), dt.date(2024, 1, 2)
    rows = [(d1, D(1), "a", "insert", 10), (d1, D("18446744073709551615"), "b", "insert", 10)]
    assert _apply(spark, sink, rows, 0, ddl, keys).counts == {"upsert": 2, "appended": 2}
    assert _apply(spark, sink, [(d2, D(1), "c", "insert", 20)], 1, ddl, keys).counts == {
        "upsert": 1, "appended": 1}
    assert _apply(spark, sink, [(d1, D(2), "d", "insert", 30)], 2, ddl, keys).counts == {
        "upsert": 1}
    got = _rows(spark, sink, ddl, keys)
    assert [(r["day"], r["n"], r["v"]) for r in got] == [
        (d1, D(1), "a"), (d1, D(2), "d"), (d1, D("18446744073709551615"), "b"), (d2, D(1), "c")]

    sink = _target(make_sql_target)
    ddl = "n decimal(20,0), v string"
    assert _apply(spark, sink, [(D(7), "x", "insert", 10)], 0, ddl, ("n",)).counts == {
        "upsert": 1, "appended": 1}
    sink = _target(make_sql_target)
    ddl = "code string, v int"
    assert _apply(spark, sink, [("a", 1, "insert", 10), ("b", 2, "insert", 10)], 0, ddl,
                  ("code",)).counts == {"upsert": 2}
    assert [(r["code"], r["v"]) for r in _rows(spark, sink, ddl, ("code",))] == [
        ("a", 1), ("b", 2)]


def test_new_rows_over_rows_the_target_already_holds_are_merged(spark, make_sql_target,
                                                                 caplog):
    sink = _target(make_sql_target)
    # the target holds stale rows 5 and 7 (a re-snapshot into a table not cleared)
    _write_directly(sink, [(5, "stale", 0), (7, "stale", 0)])
    source = {i: (f"n{i}", i) for i in range(1, 11)}
    with caplog.at_level(logging.DEBUG, logger="sparkcdc.sinks"):
        r = _apply(spark, sink, [(i, n, q, "insert", 10) for i, (n, q) in source.items()], 0)
    assert r.counts == {"upsert": 10}  # no 'appended'
    # and the range check saw rows 5 and 7: no append was tried and refused by the key
    assert not [m for m in caplog.messages if "append" in m], caplog.messages
    assert _rows(spark, sink) == _expected(source)  # no duplicates, no stale values


def test_an_append_refused_by_the_primary_key_is_merged_instead(spark, make_sql_target,
                                                                 monkeypatch, caplog):
    # a writer outside the batch-id lock inserts into the range after the range check: the
    # check is made to answer "empty", so the append runs into the held keys
    sink = _target(make_sql_target)
    _write_directly(sink, [(450, "stale", 0), (451, "other writer", 1)])
    split_new = ChangeSet.split_new
    monkeypatch.setattr(ChangeSet, "split_new",
                        lambda self, may_hold, **kw: split_new(self, lambda lo, hi: False, **kw))
    source = {i: (f"row {i}", i) for i in range(1, 501)}
    with caplog.at_level(logging.WARNING, logger="sparkcdc.sinks"):
        r = _apply(spark, sink, [(i, n, q, "insert", 10) for i, (n, q) in source.items()], 0)
    assert r.counts == {"upsert": 500}
    assert any("merging them instead" in m for m in caplog.messages), caplog.messages
    # the failed append was rolled back to its savepoint (PostgreSQL's transaction could not
    # go on otherwise; MySQL's INSERTs before the one that hit key 450 are undone), then
    # every row was merged over the held ones
    assert _rows(spark, sink) == _expected(source)
    assert sink.last_batch_id() == 0


def test_replayed_and_failed_batches_append_exactly_once(spark, make_sql_target, monkeypatch):
    sink = _target(make_sql_target)
    batch0 = [(i, f"n{i}", i, "insert", 10) for i in range(1, 101)]
    source = {i: (f"n{i}", i) for i in range(1, 101)}
    assert _apply(spark, sink, batch0, 0).counts == {"upsert": 100, "appended": 100}
    # Spark re-runs batch 0 after a crash: skipped, not appended again (the rows would
    # collide) nor merged
    assert _apply(spark, sink, batch0, 0).skipped
    # the sink checks the id inside its write too: new rows of an applied batch id
    cs = collect_changes(changes_df(spark, DDL, [(500, "z", 9, "insert", 500)]),
                         ApplySpec(keys=("id",)))
    assert sink.write(cs, 0).skipped
    assert _rows(spark, sink) == _expected(source)
    assert sink.last_batch_id() == 0

    # batch 1 fails after its append, before the batch id is recorded: nothing of it stays
    batch1 = [(1, "one", 1, "update_postimage", 101)]
    batch1 += [(i, f"n{i}", i, "insert", 102) for i in range(200, 210)]
    merge = "_merge" if sink.type == "postgres" else "_apply_scd1"

    def crash(*a, **kw):
        raise RuntimeError("crashed after the append")

    monkeypatch.setattr(sink, merge, crash)
    with pytest.raises(RuntimeError, match="crashed after the append"):
        _apply(spark, sink, batch1, 1)
    monkeypatch.undo()
    assert _rows(spark, sink) == _expected(source)
    assert sink.last_batch_id() == 0
    # Spark's retry applies it once
    assert _apply(spark, sink, batch1, 1).counts == {"upsert": 11, "appended": 10}
    source[1] = ("one", 1)
    source.update({i: (f"n{i}", i) for i in range(200, 210)})
    assert _rows(spark, sink) == _expected(source)
    assert _apply(spark, sink, batch1, 1).skipped
    assert _rows(spark, sink) == _expected(source)
    assert sink.last_batch_id() == 1
