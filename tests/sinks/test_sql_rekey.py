"""A SQL target's key follows its table's new primary key (issue 30).

A table re-keyed on the source goes on by its new key: after its snapshot its target's rows
are kept and the changes are merged by the new key; during it, the table is taken again into
the emptied target with the new key (docs/algorithm.md "Reading a table again"). Before, the
target kept the primary key it was created with: PostgreSQL's ``ON CONFLICT (new key)``
found no unique constraint to match and every batch failed, and MySQL's ``ON DUPLICATE KEY
UPDATE`` by the old key made two rows sharing an old key one.

Against the real servers: rows written by ``id``, then by ``(id, name)``, two of them
sharing an ``id``; the target read back must hold both, with the updates and deletes of the
new key applied, on a kept target and on an emptied one.
"""

from __future__ import annotations

import pytest
from sink_support import TargetFactory, arrow_schema, changes_df, table_rows

from sparkcdc.apply import apply_changes
from sparkcdc.errors import SchemaError

DDL = "id int, name string, qty int"


@pytest.fixture(params=["postgres", "mysql"])
def make_sql_target(request, tmp_path):
    f = TargetFactory(request.param, request, tmp_path)
    yield f
    f.close()


def _apply(spark, sink, rows, batch_id, keys):
    return apply_changes(changes_df(spark, DDL, rows), batch_id, sink, keys=list(keys))


def _rows(spark, sink) -> list[tuple]:
    got = table_rows(sink, spark, ["id", "name"], schema=arrow_schema(spark, DDL))
    return [(r["id"], r["name"], r["qty"]) for r in got]


def _primary_key(sink) -> list[str]:
    conn = sink.connection()
    if sink.type == "postgres":
        with conn.transaction(), conn.cursor() as cur:
            cur.execute("SELECT a.attname FROM pg_index i JOIN pg_attribute a ON "
                        "a.attrelid = i.indrelid AND a.attnum = ANY(i.indkey) WHERE "
                        "i.indrelid = %s::regclass AND i.indisprimary",
                        (f'"{sink.config.schema}"."{sink.config.table}"',))
            return sorted(r[0] for r in cur.fetchall())
    with conn.cursor() as cur:
        cur.execute("SELECT column_name FROM information_schema.statistics WHERE "
                    "table_schema = %s AND table_name = %s AND index_name = 'PRIMARY'",
                    (sink.config.database, sink.config.table))
        got = sorted(r[0] for r in cur.fetchall())
    conn.commit()
    return got


@pytest.mark.parametrize("emptied", [False, True], ids=["kept", "emptied"])
def test_the_target_key_follows_a_new_primary_key(spark, make_sql_target, emptied):
    sink = make_sql_target()
    first = [(i, "a", i, "insert", 10) for i in range(1, 6)]
    assert _apply(spark, sink, first, 0, ("id",)).counts["upsert"] == 5
    assert _primary_key(sink) == ["id"]
    source = {(i, "a"): i for i in range(1, 6)}
    if emptied:  # taken again: the target emptied, the snapshot's rows by the new key
        sink.empty()
        _apply(spark, sink, [(i, "a", i, "insert", 20) for i in range(1, 6)], 1, ("id", "name"))
    else:
        _apply(spark, sink, [(9, "a", 9, "insert", 20)], 1, ("id", "name"))
        source[(9, "a")] = 9
    # by the new key: a second row of id 1 (its name differs), an update of (2, a), a key
    # change of (3, a) to (3, b) (a delete and an insert), a delete of (4, a)
    batch = [(1, "b", 100, "insert", 301), (2, "a", 200, "update_postimage", 302),
             (3, "a", 3, "delete", 303), (3, "b", 33, "insert", 304), (4, "a", 4, "delete", 305)]
    _apply(spark, sink, batch, 2, ("id", "name"))
    source.update({(1, "b"): 100, (2, "a"): 200, (3, "b"): 33})
    for gone in ((3, "a"), (4, "a")):
        source.pop(gone)
    assert _rows(spark, sink) == sorted((i, n, q) for (i, n), q in source.items())
    assert _primary_key(sink) == ["id", "name"]
    # and again by the same key, from a sink of its own (the key is found as it is)
    again = make_sql_target(sink.config.table, **(
        {"database": sink.config.database} if sink.type == "mysql" else {}))
    _apply(spark, again, [(1, "b", 101, "update_postimage", 401)], 3, ("id", "name"))
    source[(1, "b")] = 101
    assert _rows(spark, again) == sorted((i, n, q) for (i, n), q in source.items())


def test_a_target_whose_rows_cannot_take_the_new_key_says_so(spark, make_sql_target):
    # two rows of one new key in the target (written behind the pipeline): one clear error
    sink = make_sql_target()
    ddl_rows = [(1, "a", 1, "insert", 10), (2, "a", 2, "insert", 10)]
    _apply(spark, sink, ddl_rows, 0, ("id",))
    with pytest.raises(SchemaError, match=r"cannot take the table's new key \(name\)") as e:
        _apply(spark, sink, [(3, "c", 3, "insert", 20)], 1, ("name",))
    assert "empty the target table" in e.value.fix
    assert _primary_key(sink) == ["id"]  # left as it was
    assert sink.last_batch_id() == 0
