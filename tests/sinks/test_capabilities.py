"""The sink interface as one checked class per type: the registry by ``SinkType``, the
capabilities each class declares (checked against what it implements when it is defined),
the enums whose words cross into files and messages, and a missing driver's message."""

from __future__ import annotations

import pickle
from typing import Any

import pyarrow as pa
import pytest

from sparkcdc import sinks
from sparkcdc.errors import ConfigError, MissingPackage
from sparkcdc.sinks.base import OP, ChangeSet, KeyRange, RowOp, Sink, WriteResult
from sparkcdc.sinks.capabilities import Capabilities, Emptying
from sparkcdc.sinks.evolution import Change, ChangeKind
from sparkcdc.sinks.kinds import SinkKind, SinkType
from sparkcdc.sinks.sql import StageKind, staging_name


def test_every_type_has_one_class_that_says_it_is_of_that_type():
    for t in SinkType:
        cls = sinks.sink_class(t)
        assert cls.type is t and sinks.sink_class(t.value) is cls
        caps = cls.capabilities
        assert (caps.table_layout is None) == bool(caps.no_layout)
    assert sinks.sink_class("delta").capabilities.table_layout.partition_option == "partition-by"
    assert sinks.sink_class("kafka").capabilities.empties_by_event
    files = sinks.sink_class("files").capabilities
    assert not files.can_empty and not files.shares_targets
    with pytest.raises(ConfigError, match="did you mean 'kafka'"):
        sinks.sink_class("kafak")


def _declaring(**caps: Any) -> dict[str, Any]:
    body = {"type": SinkType.CONSOLE, "capabilities": Capabilities(writer="w", **caps),
            "from_options": classmethod(lambda cls, o: cls()),
            "target_options": classmethod(lambda cls, o, db, t: dict(o)),
            "last_batch_id": lambda self: None, "read": lambda self: pa.table({})}
    return body


def test_a_declaration_that_does_not_match_the_class_fails_when_it_is_defined():
    def write(self, changes: ChangeSet, batch_id: int) -> WriteResult:
        return WriteResult(batch_id)

    ok = type("Ok", (Sink,), {**_declaring(kind=SinkKind.MERGE, no_layout="n"), "write": write})
    assert ok.capabilities.kind is SinkKind.MERGE
    with pytest.raises(TypeError, match="a merge sink implements write"):
        type("NoWrite", (Sink,), _declaring(kind=SinkKind.MERGE, no_layout="n"))
    with pytest.raises(TypeError, match="write_files: files_from_tasks is True"):
        type("Claims", (Sink,), {**_declaring(kind=SinkKind.MERGE, no_layout="n",
                                              files_from_tasks=True, tasks_writer="t"),
                                 "write": write})
    with pytest.raises(TypeError, match="empty: empties is rows"):
        type("Keeps", (Sink,), {**_declaring(kind=SinkKind.MERGE, no_layout="n",
                                             empties=Emptying.ROWS), "write": write})
    with pytest.raises(TypeError, match="a changelog sink takes change rows"):
        Capabilities(kind=SinkKind.CHANGELOG, writer="w", no_layout="n", replaces_ranges=True)


def test_a_missing_driver_is_one_error_naming_the_package(monkeypatch):
    import importlib

    real = importlib.import_module
    monkeypatch.setattr(importlib, "import_module", lambda name, *a, **k: (
        (_ for _ in ()).throw(ImportError("No module named 'pyroaring'"))
        if name == "pyroaring" else real(name, *a, **k)))
    with pytest.raises(MissingPackage) as e:
        sinks.create("delta", {"path": "/nowhere"})
    assert e.value.package == "pyroaring" and e.value.fix == "pip install 'sparkcdc[delta]'"
    again = pickle.loads(pickle.dumps(e.value))  # Spark ships errors from the executors
    assert isinstance(again, ConfigError) and again.package == "pyroaring"


def test_the_enums_keep_their_words():
    """The words are what files, tables and messages hold: they must not change."""
    assert [o.value for o in RowOp] == ["upsert", "delete", "patch", "version", "close",
                                        "amend"]
    assert f"{RowOp.CLOSE}" == "close" and str(SinkType.DELTA) == "delta"
    assert staging_name("a", "s", "t", 7, StageKind.FILES).split("_")[3] == "f"
    assert Change("add", "c", type=pa.int32()).kind is ChangeKind.ADD
    t = pa.table({"id": [1, 2], OP: pa.array(["upsert", "delete"])})
    assert ChangeSet(t, ("id",), ("id",)).rows(RowOp.DELETE)["id"].to_pylist() == [2]


def test_the_console_replaces_a_range_read_again():
    """Its class says it replaces ranges (``replaces_ranges``): a key the range's batch
    does not hold goes, as in every other merge sink."""
    sink = sinks.create("console", {"num-rows": "0"})
    schema = pa.schema([("id", pa.int64()), ("v", pa.string()), (OP, pa.string())])

    def batch(rows: list[tuple], replaces: tuple[KeyRange, ...] = ()) -> ChangeSet:
        t = pa.Table.from_pylist([dict(zip(schema.names, r)) for r in rows], schema=schema)
        return ChangeSet(t, ("id",), ("id", "v"), replaces=replaces)

    sink.write(batch([(1, "a", "upsert"), (3, "gone", "upsert"), (5, "b", "upsert"),
                      (9, "c", "upsert")]), 0)
    sink.write(batch([(5, "b2", "upsert")], (KeyRange("id", 2, 9),)), 1)
    assert sorted(sink.read().to_pylist(), key=lambda r: r["id"]) == [
        {"id": 1, "v": "a"}, {"id": 5, "v": "b2"}, {"id": 9, "v": "c"}]
