"""Each sink's own schema evolution behind ``Sink`` (sinks/evolution.py,
sinks/<type>/evolution.py): what it can change, how it says what it cannot, and that
evolving twice is evolving once. The pipeline tests (tests/pipeline/test_ddl.py) drive the same
methods through schema changes on a live source, per sink type."""

from __future__ import annotations

import deltalake
import pyarrow as pa
import pytest
from sink_support import read_delta

from sparkcdc import sinks
from sparkcdc.errors import SchemaError
from sparkcdc.sinks.evolution import Change, pending


def test_pending_skips_what_the_target_already_shows():
    have = {"id", "a", "b"}
    changes = [Change("add", "a", type=pa.int32()), Change("add", "c", type=pa.int32()),
               Change("drop", "z"), Change("drop", "b"), Change("rename", "a", "b"),
               Change("rename", "q", "r"), Change("retype", "a", type=pa.int64()),
               Change("copy", "zz", "a")]
    assert [c.describe() for c in pending(changes, have)] == [
        "add c int32", "drop b", "change a to int64"]


def test_delta_evolves_once_however_often_asked(tmp_path):
    path = str(tmp_path / "t")
    deltalake.write_deltalake(path, pa.table({"id": pa.array([1, 2], pa.int64()),
                                              "a": pa.array([10, 20], pa.int32())}))
    sink = sinks.create("delta", {"path": path})
    assert sink.stored_columns().names == ["id", "a"]
    plan = [Change("add", "b", type=pa.string()), Change("rename", "a", "a2"),
            Change("retype", "a2", type=pa.int64())]
    for _ in range(2):  # a run stopped half way does it all again
        sink.evolve(plan, ("id",))
    t = read_delta(deltalake.DeltaTable(path))
    assert t.schema.names == ["id", "a2", "b"] and t.schema.field("a2").type == pa.int64()
    assert sorted(t.column("a2").to_pylist()) == [10, 20]
    assert t.column("b").null_count == 2
    sink.empty()
    assert read_delta(deltalake.DeltaTable(path)).num_rows == 0
    assert sink.stored_columns().names == ["id", "a2", "b"]  # the schema stays


def test_a_target_not_created_yet_is_left_alone(tmp_path):
    sink = sinks.create("delta", {"path": str(tmp_path / "later")})
    assert sink.stored_columns() is None
    sink.evolve([Change("add", "b", type=pa.string())])  # its first write creates it
    sink.empty()
    assert not deltalake.DeltaTable.is_deltatable(str(tmp_path / "later"))


def test_iceberg_retypes_only_by_its_promotions(tmp_path):
    sink = sinks.create("iceberg", {"warehouse": str(tmp_path / "wh"), "table": "ns.t"})
    widen = Change("retype", "a", type=pa.int64())
    narrow = Change("retype", "a", type=pa.int32())
    assert sink.can_change(widen, pa.int32())
    assert not sink.can_change(narrow, pa.int64())
    assert "int to long" in sink.refusal(narrow)
    assert sink.refusal(Change("drop", "a")) == "the iceberg target cannot drop a"


def test_a_changelog_only_grows(tmp_path):
    sink = sinks.create("files", {"path": str(tmp_path / "log")})
    assert sink.can_change(Change("add", "b", type=pa.string()))
    drop = Change("drop", "a")
    assert not sink.can_change(drop)
    assert sink.refusal(drop) == "the files target cannot drop a"
    with pytest.raises(SchemaError, match="the files target cannot drop a"):
        sink.evolve([drop])
    with pytest.raises(SchemaError, match="cannot be emptied"):
        sink.empty()


def test_a_mysql_target_evolves_once_however_often_asked(server, server_db):
    """The mysql sink's ALTERs on a MariaDB and on a MySQL target (MySQL has no
    ``ADD COLUMN IF NOT EXISTS``); the second time round changes nothing."""
    server.execute("CREATE TABLE t (id BIGINT PRIMARY KEY, a INT, c INT)",
                   "INSERT INTO t VALUES (1, 10, 5), (2, 20, 6)", database=server_db)
    i = server.info
    sink = sinks.create("mysql", {"hostname": i.host, "port": str(i.port),
                                  "username": i.admin_user, "password": i.admin_password,
                                  "database": server_db, "table": "t"})
    try:
        assert sink.stored_columns().names == ["id", "a", "c"]
        plan = [Change("add", "b", type=pa.string()), Change("drop", "c"),
                Change("rename", "a", "a2"), Change("retype", "a2", type=pa.int64())]
        for _ in range(2):
            sink.evolve(plan, ("id",))
            assert sink.stored_columns().names == ["id", "a2", "b"]
        # each ALTER by itself once more, as a run stopped between two would find them
        from sparkcdc.sinks.mysql import evolution

        evolution.evolve(sink, plan[:2], ("id",))
    finally:
        sink.close()
    assert server.query(f"SELECT id, a2, b FROM `{server_db}`.t ORDER BY id") == [
        (1, 10, None), (2, 20, None)]
    assert server.query("SELECT data_type FROM information_schema.columns WHERE "
                        f"table_schema = '{server_db}' AND column_name = 'a2'") == [("bigint",)]
