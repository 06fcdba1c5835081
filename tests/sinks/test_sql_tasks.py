"""The SQL sinks' rows from the tasks (sinks/postgres/staging.py; the mysql sink does the
same with INSERTs): tasks load a batch's rows into staging tables, the driver applies the ones they reported in one
transaction with the batch id and drops them; a replayed batch changes nothing; staging
tables a dead attempt left are dropped; a staging table the server emptied fails the
batch (PostgreSQL's are unlogged: a crash empties them). And ``KeySlices``' hash mode, which every process computes alike."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pyarrow as pa
import pytest
from sink_support import TargetFactory

from sparkcdc import sinks
from sparkcdc.errors import ConnectionFailed
from sparkcdc.sinks.base import NEW, OP, ChangeSet, KeySlices, stable_hash
from sparkcdc.sinks.postgres import staging

SCHEMA = pa.schema([("id", pa.int64()), ("v", pa.int64()), ("s", pa.string())])
KEYS = ("id",)


def _changes(ids, v, op="upsert", new=True) -> ChangeSet:
    n = len(ids)
    t = pa.table({"id": pa.array(ids, pa.int64()), "v": pa.array([v] * n, pa.int64()),
                  "s": pa.array([f"s{v}"] * n), OP: pa.array([op] * n),
                  NEW: pa.array([new] * n)})
    return ChangeSet(t, KEYS, ("id", "v", "s"))


def _sql(sink, statement: str, args=()) -> list[tuple]:
    """A statement through the sink's own connection, committed."""
    conn = sink.connection()
    if sink.type == "postgres":
        with conn.transaction(), conn.cursor() as cur:
            cur.execute(statement, args)
            return cur.fetchall() if cur.description else []
    with conn.cursor() as cur:
        cur.execute(statement, args)
        got = list(cur.fetchall()) if cur.description else []
    conn.commit()
    return got


def _where(sink) -> str:
    return sink.config.schema if sink.type == "postgres" else sink.config.database


def _stages(sink) -> list[str]:
    return sorted(r[0] for r in _sql(sink, "SELECT table_name FROM information_schema.tables "
                                           "WHERE table_schema = %s AND table_name LIKE "
                                           "'sc\\_%%'", (_where(sink),)))


def _rows(sink) -> dict:
    t = sink.read()
    return {r["id"]: (r["v"], r["s"]) for r in t.to_pylist()} if t.num_rows else {}


@pytest.fixture(params=["postgres", "mysql"])
def sql_sinks(request, tmp_path):
    """A driver's sink and a task's sink of one new target (separate connections)."""
    factory = TargetFactory(request.param, request, tmp_path)
    opts = factory.options()
    driver, task = sinks.create(factory.type, opts), sinks.create(factory.type, opts)
    yield driver, task
    driver.close()
    task.close()


def test_staged_rows_commit_once_and_leftovers_are_dropped(sql_sinks):
    driver, task = sql_sinks
    assert driver.takes_files() and driver.takes_changes(KEYS)
    driver.ready_for_files(SCHEMA)

    # batch 1: a snapshot's new rows, by two tasks; a third attempt died after loading
    first = task.new_rows(_changes(range(1, 51), 1))
    second = task.new_rows(_changes(range(51, 101), 1))
    assert first is not None and second is not None
    files = task.write_files(first, 1) + task.write_files(second, 1)
    dead = task.write_files(first, 1)
    assert len(_stages(driver)) == 3
    got = driver.commit_files(files, SCHEMA, 1)
    assert not got.skipped and got.counts["appended"] == 100
    assert _rows(driver) == {i: (1, "s1") for i in range(1, 101)}
    assert driver.last_batch_id() == 1
    assert _stages(driver) == [], "the dead attempt's staging table was left"
    assert dead[0]["stage"] not in _stages(driver)

    # rows the target holds are not new: the task says so, they take the other path
    assert task.new_rows(_changes(range(90, 110), 2)) is None

    # batch 1 replayed after its commit: its tasks load again, the commit skips them
    again = task.write_files(first, 1)
    assert driver.commit_files(again, SCHEMA, 1).skipped
    assert _stages(driver) == [] and len(_rows(driver)) == 100

    # batch 2: new rows of a chunk, then the batch fails before its other changes are
    # written (its table handed to the loop): nothing of it is applied, its id stays free
    stale = task.new_rows(_changes(range(400, 410), 5))
    assert stale is not None
    assert not driver.commit_files(task.write_files(stale, 2), SCHEMA, 2, final=False).skipped
    assert driver.last_batch_id() == 1 and 400 not in _rows(driver)

    # batch 2 again, other rows (the table taken again): the new rows kept for the batch's
    # changes, in one transaction with them, by three hash slices
    new = task.new_rows(_changes(range(200, 210), 2))
    assert new is not None
    assert not driver.commit_files(task.write_files(new, 2), SCHEMA, 2, final=False).skipped
    assert driver.last_batch_id() == 1 and 200 not in _rows(driver)
    cut = driver.plan_changes(KEYS, SCHEMA, 3)
    assert cut.mode == "hash" and cut.count == 3
    upserts = pa.table({"id": pa.array([5, 6, 7, 300], pa.int64()),
                        "v": pa.array([9, 9, 9, 9], pa.int64()), "s": ["u", "u", "u", "n"]})
    deletes = pa.array([10, 11, 12, 13, 999], pa.int64())  # 999: deleted, never stored
    changed = pa.table({"id": pa.concat_arrays([upserts["id"].combine_chunks(), deletes])})
    where = cut.slice_of(changed["id"]).to_pylist()
    assert len(set(where)) > 1, "the keys all fell in one slice"
    written = []
    for s in range(cut.count):
        mine = [i for i, w in enumerate(where) if w == s]
        keys_s = changed.take(mine)
        ups = upserts.filter(pa.array([w == s for w in where[:4]]))
        written.append(task.write_changes(cut, s, ups, keys_s, 2))
    task.write_changes(cut, 0, upserts, changed, 2)  # an attempt that died
    result = driver.commit_changes(cut, written, 2)
    assert result.counts["upsert"] == 4 and result.counts["delete"] == 5
    assert result.counts["staged new rows"] == 10
    want = {i: (1, "s1") for i in range(1, 101) if i not in (10, 11, 12, 13)}
    want.update({i: (9, "u") for i in (5, 6, 7)} | {300: (9, "n")})
    want.update({i: (2, "s2") for i in range(200, 210)})
    assert _rows(driver) == want
    assert driver.last_batch_id() == 2 and _stages(driver) == []

    # batch 2 replayed: nothing changes, its staging tables go
    redo = [task.write_changes(cut, 0, upserts.slice(0, 1).set_column(
        1, "v", pa.array([77], pa.int64())), changed.slice(0, 1), 2)]
    assert driver.commit_changes(cut, redo, 2).skipped
    assert _rows(driver) == want and _stages(driver) == []

    # batch 3: a staging table the server emptied (a crash empties unlogged tables)
    w3 = task.write_changes(cut, 0, upserts.slice(0, 1), changed.slice(0, 1), 3)
    q = '"' if driver.type == "postgres" else "`"
    _sql(driver, f'DELETE FROM {q}{_where(driver)}{q}.{q}{w3["stage"]}{q}')
    with pytest.raises(ConnectionFailed, match="holds 0 row"):
        driver.commit_changes(cut, [w3], 3)
    assert driver.last_batch_id() == 2 and _rows(driver) == want


def test_staging_names_are_the_writers_own():
    a = staging.name("app", "public", "t", 7, staging.CHANGES)
    assert len(a) <= 63
    assert staging.batch_of(a, staging.prefix("app", "public", "t")) == 7
    for other in (("app2", "public", "t"), ("app", "public", "u"), ("app", "x", "t")):
        assert staging.batch_of(a, staging.prefix(*other)) is None


def test_hash_slices_agree_across_processes():
    keys = pa.array([f"k{i}" for i in range(200)])
    here = stable_hash(keys).tolist()
    code = ("import pyarrow as pa; from sparkcdc.sinks.base import stable_hash; "
            "import json; print(json.dumps(stable_hash(pa.array([f'k{i}' for i in range(200)])).tolist()))")
    there = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                           check=True, env={**os.environ, "PYTHONHASHSEED": "123"}).stdout
    assert here == json.loads(there)
    cut = KeySlices.hashed("id", 4)
    ints = cut.slice_of(pa.array(range(0, 4000, 4), pa.int64())).to_pylist()
    # keys that step by the slice count still spread over every slice
    assert sorted(set(ints)) == [0, 1, 2, 3]
    assert min(ints.count(s) for s in range(4)) > 150
    texts = cut.slice_of(keys).to_pylist()
    assert sorted(set(texts)) == [0, 1, 2, 3]
    assert KeySlices.hashed("id", 1).slice_of(keys).to_pylist() == [0] * 200
