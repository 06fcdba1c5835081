"""Transforms at run time, against the real MariaDB, the shared SparkSession and Delta: the
AUTO CDC keys of a transform (SCD type 2 with tracked history, apply-as-truncates), a
transform's partition-keys and table-options reaching the target's creation, and Flink's
source keys the pipeline honours itself (treat-tinyint1-as-boolean.enabled,
debezium.skipped.operations)."""

from __future__ import annotations

import decimal

import deltalake
import pytest
from pipeline_support import source_yaml
from sink_support import read_delta

from sparkcdc.errors import ConfigError
from sparkcdc.pipeline.definition import parse_pipeline, routing
from sparkcdc.pipeline.run.loop import Runner
from sparkcdc.sinks.base import END_AT, START_AT


def load(text: str, mariadb):
    return parse_pipeline(text, "t.yaml", env={"TEST_PW": mariadb.info.cdc_password})


def delta(tmp_path, db, table) -> deltalake.DeltaTable:
    return deltalake.DeltaTable(str(tmp_path / "lake" / db / table))


def test_auto_cdc_keys_and_table_layout_from_yaml(spark, mariadb, db, tmp_path):
    mariadb.execute(
        "CREATE TABLE hist (id INT PRIMARY KEY, name VARCHAR(10), qty INT)",
        "INSERT INTO hist VALUES (1, 'a', 1), (2, 'b', 2)",
        "CREATE TABLE trunc (id INT PRIMARY KEY, op VARCHAR(10), v INT)",
        "INSERT INTO trunc VALUES (1, 'x', 1), (2, 'y', 2)",
        "CREATE TABLE part (id INT PRIMARY KEY, region VARCHAR(5), v INT)",
        "INSERT INTO part VALUES (1, 'eu', 1), (2, 'us', 2)", database=db)
    source = source_yaml(mariadb, db + ".\\.*", 10)
    defn = load(f"""
{source}
sink:
  type: delta
  path: {tmp_path}/lake
transform:
  - source-table: {db}.hist
    stored-as-scd-type: 2
    track-history-column-list: name
  - source-table: {db}.trunc
    apply-as-truncates: "op = 'TRUNCATE'"
  - source-table: {db}.part
    partition-keys: region
    table-options: comment=parts by region
pipeline:
  name: auto-cdc
  parallelism: 1
  checkpoint.location: {tmp_path}/ckpt
""", mariadb)
    Runner(defn, spark, until_caught_up=True).run()
    hist = read_delta(delta(tmp_path, db, "hist")).to_pylist()
    assert sorted((r["id"], r["name"], r["qty"], r[END_AT]) for r in hist) == [
        (1, "a", 1, None), (2, "b", 2, None)]
    mariadb.execute(
        "UPDATE hist SET qty = 5 WHERE id = 1",        # untracked: the version in place
        "UPDATE hist SET name = 'b2' WHERE id = 2",    # tracked: a new version
        "UPDATE hist SET name = 'a9' WHERE id = 1",
        "INSERT INTO trunc VALUES (3, 'z', 3)",
        "INSERT INTO trunc VALUES (0, 'TRUNCATE', 0)",  # empties the target here
        "INSERT INTO trunc VALUES (4, 'w', 4)",
        "UPDATE trunc SET v = 20 WHERE id = 2",
        "INSERT INTO part VALUES (3, 'eu', 3)", database=db)
    Runner(defn, spark, until_caught_up=True).run()

    hist = sorted(read_delta(delta(tmp_path, db, "hist")).to_pylist(),
                  key=lambda r: (r["id"], r[START_AT]))
    assert [(r["id"], r["name"], r["qty"], r[END_AT] is None) for r in hist] == [
        (1, "a", 5, False), (1, "a9", 5, True), (2, "b", 2, False), (2, "b2", 2, True)]
    for old, new in ((hist[0], hist[1]), (hist[2], hist[3])):
        assert old[END_AT] == new[START_AT] and old[START_AT] < new[START_AT]

    trunc = read_delta(delta(tmp_path, db, "trunc")).to_pylist()
    assert sorted((r["id"], r["op"], r["v"]) for r in trunc) == [(2, "y", 20), (4, "w", 4)]

    part = delta(tmp_path, db, "part")
    assert part.metadata().partition_columns == ["region"]
    assert part.metadata().configuration.get("comment") == "parts by region"
    assert sorted(r["id"] for r in read_delta(part).to_pylist()) == [1, 2, 3]


def test_flinks_source_keys_done_by_the_pipeline(spark, mariadb, db, tmp_path):
    """``treat-tinyint1-as-boolean.enabled``: the target column is a boolean (any non-zero
    value true); ``debezium.skipped.operations: d``: deletes are not applied; a
    ``jdbc.properties`` key that means a source option (``useSSL: false``) is that option."""
    mariadb.execute(
        "CREATE TABLE flags (id INT PRIMARY KEY, active TINYINT(1), n TINYINT)",
        "INSERT INTO flags VALUES (1, 1, 1), (2, 0, 0), (3, NULL, 7)", database=db)
    source = source_yaml(mariadb, db + ".\\.*", 10)
    defn = load(f"""
{source}  treat-tinyint1-as-boolean.enabled: true
  debezium.skipped.operations: d
  jdbc.properties.useSSL: false
sink:
  type: delta
  path: {tmp_path}/lake
pipeline:
  parallelism: 1
  checkpoint.location: {tmp_path}/ckpt
""", mariadb)
    assert defn.source.options["ssl.mode"] == "disabled"
    Runner(defn, spark, until_caught_up=True).run()
    mariadb.execute("UPDATE flags SET active = 5 WHERE id = 2", "DELETE FROM flags WHERE id = 1",
                    "INSERT INTO flags VALUES (4, 0, 2)", database=db)
    Runner(defn, spark, until_caught_up=True).run()
    t = read_delta(delta(tmp_path, db, "flags"))
    assert str(t.schema.field("active").type) == "bool" and str(t.schema.field("n").type) == "int8"
    assert sorted((r["id"], r["active"], r["n"]) for r in t.to_pylist()) == [
        (1, True, 1), (2, True, 0), (3, None, 7), (4, False, 2)]  # the delete was skipped


def test_a_fan_out_replayed_after_a_crash_between_its_targets(tmp_path):
    """A table's targets each record the batch id in their own commit: a batch written to
    one target but not the other (a crash between) is applied to the second on replay and
    skipped by the first; the table's batch ids go on after the highest of theirs."""
    import decimal

    import pyarrow as pa

    from sparkcdc.apply import ApplySpec, apply_arrow
    from sparkcdc.pipeline.definition.targets import create_sinks, each_sink

    def batch(*rows):
        n = len(rows)
        return pa.table({"id": pa.array([r[0] for r in rows], pa.int32()),
                         "v": pa.array([r[1] for r in rows], pa.int32()),
                         "_change_type": ["insert"] * n, "_database": ["d"] * n,
                         "_table": ["t"] * n, "_op_ts": pa.nulls(n, pa.timestamp("us", "UTC")),
                         "_seq": pa.array([decimal.Decimal(r[2]) for r in rows],
                                          pa.decimal128(38, 0))})

    fan = create_sinks("delta", {"path": str(tmp_path)}, ["a.t", "b.t"], "p.d.t")
    a, b = each_sink(fan)
    spec = ApplySpec(keys=("id",))
    apply_arrow(a, batch((1, 1, 10)), 0, spec)  # batch 0 reached a.t only: then a crash
    assert (a.last_batch_id(), b.last_batch_id(), fan.last_batch_id()) == (0, None, 0)
    for sink in each_sink(fan):  # the replay, as the runner writes it
        apply_arrow(sink, batch((1, 1, 10)), 0, spec)
    apply_arrow(fan, batch((2, 2, 20)), 1, spec)
    for sink in (a, b):
        assert sorted(r["id"] for r in sink.read().to_pylist()) == [1, 2]
        assert sink.last_batch_id() == 1


def test_a_transforms_bad_sql_is_a_config_error_and_a_bug_is_not(spark, monkeypatch):
    """Spark's refusal of a transform's SQL (an unknown column) is a ConfigError naming the
    transform and the table's columns; an error of sparkcdc's own code in the same steps is
    raised as it is, not blamed on the user's SQL."""

    def shaper(projection: str) -> routing.Shaper:
        defn = parse_pipeline(f"""
source:
  type: mysql
  hostname: 127.0.0.1
  username: cdc
  password: pw
  tables: app.t
sink:
  type: delta
  path: lake
transform:
  - source-table: app.t
    projection: "{projection}"
pipeline:
  name: shapes
""", "t.yaml")
        return routing.shaper_for(defn, "app.t")

    df = spark.createDataFrame(
        [(1, 2, "insert", "app", "t", None, decimal.Decimal(1))],
        "id INT, v INT, _change_type STRING, _database STRING, _table STRING, "
        "_op_ts TIMESTAMP, _seq DECIMAL(38, 0)")
    assert shaper("*, v + 1 AS w").apply(df, ("id",)).select("w").first()[0] == 3
    with pytest.raises(ConfigError, match=r"the transform of 'app\.t' failed: .*nosuch") as e:
        shaper("*, nosuch + 1 AS w").apply(df, ("id",))
    assert e.value.fix is not None and "id, v" in e.value.fix

    def broken(spec):
        raise KeyError("a bug of ours")

    monkeypatch.setattr(routing, "needs_marks", broken)
    with pytest.raises(KeyError, match="a bug of ours"):
        shaper("*, v + 1 AS w").apply(df, ("id",))
