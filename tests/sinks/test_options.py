"""Sink options, the registry, apply_changes' arguments, and sink-specific features (Delta
partitions and compaction, the console's output)."""

from __future__ import annotations

import io
import pickle

import pyarrow as pa
import pytest
from sink_support import changes_df, read_delta

from sparkcdc import sinks
from sparkcdc.apply import ApplySpec, apply_changes
from sparkcdc.errors import ConfigError, SchemaError
from sparkcdc.sinks.base import ChangeSet
from sparkcdc.sinks.console import ConsoleConfig, ConsoleSink
from sparkcdc.sinks.delta import DeltaConfig
from sparkcdc.sinks.iceberg import IcebergConfig
from sparkcdc.sinks.mysql import MySQLConfig
from sparkcdc.sinks.postgres import PostgresConfig

DDL = "id int, region string, qty int"


def test_registry_lists_every_type_and_suggests_names():
    assert sinks.sink_types() == ["console", "delta", "files", "iceberg", "kafka", "mysql",
                                  "postgres"]
    with pytest.raises(ConfigError, match="did you mean 'delta'"):
        sinks.create("deltaa", {})
    with pytest.raises(ConfigError, match="has no 'type'"):
        sinks.create({"path": "/x"})
    assert sinks.create({"type": "console", "num-rows": "3"}).config.num_rows == 3


def test_options_are_parsed_once_with_clear_errors(tmp_path):
    with pytest.raises(ConfigError, match="(?s)unknown option 'partiton-by'.*did you mean 'partition-by'"):
        DeltaConfig.parse({"path": "/x", "partiton-by": "a"})
    with pytest.raises(ConfigError, match="needs the option 'path'"):
        DeltaConfig.parse({})
    with pytest.raises(ConfigError, match="'compact-every'.*must be an integer"):
        DeltaConfig.parse({"path": "/x", "compact-every": "often"})
    c = DeltaConfig.parse({"path": "/x", "partition-by": "region, day", "storage.AWS_REGION": "eu"})
    assert c.partition_by == ("region", "day") and c.storage_options == {"AWS_REGION": "eu"}
    with pytest.raises(ConfigError, match="'port'.*out of range"):
        PostgresConfig.parse({"user": "u", "database": "d", "table": "t", "port": "70000"})
    pg = PostgresConfig.parse({"user": "u", "database": "d", "table": "t", "password": "s3cret"})
    assert "s3cret" not in repr(pg) and pg.port == 5432
    my = MySQLConfig.parse({"hostname": "h", "username": "u", "password": "s3cret",
                            "database": "d", "table": "t"})
    assert "s3cret" not in repr(my) and my.port == 3306
    with pytest.raises(ConfigError, match="'table'.*namespace.table|give it as 'name.name'"):
        IcebergConfig.parse({"table": "justname", "warehouse": str(tmp_path)})
    ic = IcebergConfig.parse({"table": "db.t", "warehouse": str(tmp_path / "wh")})
    assert ic.catalog_properties["uri"].startswith("sqlite:///")
    with pytest.raises(ConfigError, match="one of parquet, json"):
        sinks.create("files", {"path": "/x", "format": "csv"})
    with pytest.raises(ConfigError, match="true or false"):
        ConsoleConfig.parse({"show-table": "maybe"})


def test_errors_survive_pickling():
    try:
        DeltaConfig.parse({"path": "/x", "bogus": "1"})
    except ConfigError as e:
        back = pickle.loads(pickle.dumps(e))
        assert type(back) is ConfigError and back.fix == e.fix and str(back) == str(e)


def test_apply_spec_rejects_bad_arguments(spark):
    with pytest.raises(ConfigError, match="at least one key"):
        ApplySpec(keys=())
    with pytest.raises(ConfigError, match="1 or 2"):
        ApplySpec(keys=("id",), stored_as_scd_type=3)
    with pytest.raises(ConfigError, match="SCD type 2|scd_type=1 only"):
        ApplySpec(keys=("id",), ignore_null_updates=True, stored_as_scd_type=2)
    df = changes_df(spark, DDL, [(1, "eu", 1, "insert", 10)])
    sink = ConsoleSink(out=io.StringIO())
    with pytest.raises(SchemaError, match="key columns \\['nope'\\]"):
        apply_changes(df, 0, sink, keys=["nope"])
    with pytest.raises(SchemaError, match="sequence column 'ts'"):
        apply_changes(df, 0, sink, keys=["id"], sequence_by="ts")
    with pytest.raises(SchemaError, match="lack"):
        apply_changes(df, 0, sink, keys=["id"], column_list=["id", "missing"])
    with pytest.raises(ConfigError, match="except_column_list"):
        apply_changes(df, 0, sink, keys=["id"], except_column_list=["id"])


def test_console_prints_changes_and_table(spark):
    out = io.StringIO()
    sink = ConsoleSink(ConsoleConfig(num_rows=1, show_table=True), out=out)
    apply = apply_changes(sink, keys=["id"])
    apply(changes_df(spark, DDL, [(1, "eu", 1, "insert", 10), (2, "us", 2, "insert", 10)]), 0)
    apply(changes_df(spark, DDL, [(1, "eu", 1, "delete", 20)]), 1)
    text = out.getvalue()
    assert "-- batch 0: 2 upsert" in text and "... 1 more" in text
    assert "-- batch 1: 1 delete" in text
    assert text.rstrip().endswith("id=2 region='us' qty=2")


def test_null_keys_are_refused(tmp_path):
    sink = sinks.create("delta", {"path": str(tmp_path / "t")})
    t = pa.table({"id": pa.array([None], pa.int32()), "__op": ["upsert"]})
    with pytest.raises(SchemaError, match="null values"):
        sink.write(ChangeSet(t, ("id",), ("id",)), 0)


def test_delta_partitions_and_periodic_compaction(spark, tmp_path):
    from deltalake import DeltaTable

    path = str(tmp_path / "orders")
    sink = sinks.create("delta", {"path": path, "partition-by": "region", "compact-every": "3"})
    for b in range(3):
        rows = [(b * 10 + i, "eu" if i % 2 else "us", b, "insert", 100 * b + i) for i in range(4)]
        apply_changes(changes_df(spark, DDL, rows), b, sink, keys=["id"])
    t = DeltaTable(path)
    assert t.metadata().partition_columns == ["region"]
    ops = [h["operation"] for h in t.history()]
    # three batches of new keys past the stored ones: three appends, then the compaction
    assert ops[0] == "OPTIMIZE" and ops.count("WRITE") == 3
    assert len(t.file_uris()) == 2  # one file per partition after compaction
    assert t.transaction_version("sparkcdc") == 2
    assert read_delta(t).num_rows == 12
    with pytest.raises(SchemaError, match="partition columns \\['day'\\]"):
        bad = sinks.create("delta", {"path": str(tmp_path / "bad"), "partition-by": "day"})
        apply_changes(changes_df(spark, DDL, [(1, "eu", 1, "insert", 1)]), 0, bad, keys=["id"])


@pytest.mark.parametrize("sink_type,module", [("delta", "deltalake"), ("iceberg", "pyiceberg"),
                                              ("postgres", "psycopg"), ("kafka", "confluent_kafka")])
def test_a_missing_sink_driver_names_the_extra_to_install(monkeypatch, sink_type, module):
    """The sinks' drivers are extras of the package (``sparkcdc[delta]`` ...): a sink whose
    driver is not installed says which one to install."""
    import importlib

    from sparkcdc import sinks
    from sparkcdc.errors import ConfigError

    real = importlib.import_module

    def without(name, *args, **kwargs):
        if name == module:
            raise ImportError(f"No module named {module!r}")
        return real(name, *args, **kwargs)

    monkeypatch.setattr(importlib, "import_module", without)
    with pytest.raises(ConfigError, match=f"needs the Python package '{module}'") as e:
        sinks.require(module, sink_type)
    assert e.value.fix == f"pip install 'sparkcdc[{sink_type}]'"
