"""Which tables the loop takes as renamed during their snapshot (``Runner._renamed_in_snapshot``,
docs/pipelines.md "DROP TABLE and RENAME TABLE in the stream"): a table gone from discovery
during its snapshot with exactly one new table routed to exactly its targets, and only when
emptying the target takes no other table's rows. The rename itself, under writes, is
tests/pipeline/test_reread_rename.py; here each rule alone, on the loop's state (no server).
"""

from __future__ import annotations

import pytest

from sparkcdc.core.schema import Column, TableId, TableSchema
from sparkcdc.errors import SchemaError
from sparkcdc.pipeline.definition import parse_pipeline
from sparkcdc.pipeline.run.checkpoint import CaptureStatus, Checkpoint, TableState
from sparkcdc.pipeline.run.loop import Runner
from sparkcdc.pipeline.run.state import RunState
from sparkcdc.pipeline.run.tables import TableLifecycle


def _runner(tmp_path, routes: str, sink: str = "delta") -> Runner:
    sink_yaml = (f"  type: delta\n  path: {tmp_path}/lake\n" if sink == "delta" else
                 "  type: kafka\n  properties.bootstrap.servers: 127.0.0.1:9\n")
    defn = parse_pipeline(f"""
source:
  type: mysql
  hostname: 127.0.0.1
  port: 3306
  username: u
  password: p
  tables: shop.\\.*
sink:
{sink_yaml}route:
{routes}pipeline:
  name: p
  checkpoint.location: {tmp_path}/ckpt
""", "p.yaml")
    r = Runner.__new__(Runner)
    r.defn = defn
    r.state = RunState(defn, Checkpoint(tmp_path / "ckpt"))
    r.tables = TableLifecycle(r.state, None, None)  # type: ignore[arg-type]
    return r


ROUTES = """  - source-table: shop.a2?
    sink-table: out.a
  - source-table: shop.(b|c)
    sink-table: out.$1
"""


def _schema(name: str) -> TableSchema:
    return TableSchema(TableId("shop", name), (Column("id", "int", False),), ("id",), "id")


def _capture(r: Runner, table: str, target: str) -> None:
    # group None: not in the stream's committed batches, so not past its snapshot
    r.state.states[table] = TableState(table, target, status=CaptureStatus.ACTIVE)


def _found(*names: str) -> dict[str, TableSchema]:
    return {f"shop.{n}": _schema(n) for n in names}


def test_one_new_table_in_exactly_its_target_is_the_renamed_one(tmp_path):
    r = _runner(tmp_path, ROUTES)
    _capture(r, "shop.a", "out.a")
    _capture(r, "shop.b", "out.b")
    assert r._renamed_in_snapshot(_found("a2", "b"), set(), {}) == [("shop.a", "shop.a2")]


def test_a_new_table_in_another_target_is_a_new_table(tmp_path):
    r = _runner(tmp_path, ROUTES)
    _capture(r, "shop.a", "out.a")
    assert r._renamed_in_snapshot(_found("c"), set(), {}) == []


def test_two_new_tables_in_its_target_are_neither(tmp_path):
    r = _runner(tmp_path, ROUTES.replace("shop.a2?", "shop.a.?"))
    _capture(r, "shop.a", "out.a")
    assert r._renamed_in_snapshot(_found("a2", "a3"), set(), {}) == []


def test_a_table_the_stream_reads_on_or_that_streams_is_left_to_the_stream(tmp_path,
                                                                           monkeypatch):
    r = _runner(tmp_path, ROUTES)
    _capture(r, "shop.a", "out.a")
    assert r._renamed_in_snapshot(_found("a2"), {"shop.a"}, {}) == []  # waits for its DDL
    monkeypatch.setattr(RunState, "carried_by_stream", lambda self, st, memo=None: True)
    assert r._renamed_in_snapshot(_found("a2"), set(), {}) == []  # past its snapshot


@pytest.mark.parametrize("sink", ["delta", "kafka"])
def test_a_target_other_tables_share_is_not_emptied(tmp_path, sink):
    # b writes into out.a too: emptying it whole would take b's rows, so the run stops
    # with the fix instead of keeping rows the source deleted (a kafka target is emptied
    # by a truncate event naming the table, which leaves b's rows)
    r = _runner(tmp_path, "  - source-table: shop.(a2?|b)\n    sink-table: out.a\n", sink)
    _capture(r, "shop.a", "out.a")
    _capture(r, "shop.b", "out.a")
    if sink == "delta":
        with pytest.raises(SchemaError) as e:
            r._renamed_in_snapshot(_found("a2", "b"), set(), {})
        assert "shop.a2" in str(e.value) and "other tables write into that target" in str(
            e.value) and "new checkpoint location" in e.value.fix
    else:
        assert r._renamed_in_snapshot(_found("a2", "b"), set(), {}) == [("shop.a", "shop.a2")]
