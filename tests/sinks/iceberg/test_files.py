"""Iceberg data files written by Spark tasks and committed once by the driver
(sinks/iceberg/files.py, commit.py): real Spark tasks write the rows they hold with the
table's field ids, the driver receives only what the manifest needs about each file and
commits them in one snapshot with the batch id. The table is read back by pyiceberg and by
iceberg-rust (tests/support/iceberg_support.py), and each must equal the rows written. A batch
committed twice is committed once; the files of attempts that never committed are
removed."""

from __future__ import annotations

import json

import pyarrow as pa
import pyarrow.parquet as pq
from iceberg_support import by_iceberg_rust, by_pyiceberg, rows

from sparkcdc import sinks
from sparkcdc.sinks.iceberg import files

SCHEMA = pa.schema([("id", pa.int64()), ("v", pa.string()), ("p", pa.int32())])
NAMES = SCHEMA.names


def task_writes(spark, options: dict, batch_id: int, n: int, start: int = 0,
                parts: int = 3) -> list[dict]:
    """Spark tasks write ``n`` rows (``parts`` tasks, each the rows it holds); what reaches
    the driver is the files' descriptions, as JSON text."""
    df = spark.range(start, start + n, numPartitions=parts).selectExpr(
        "id", "concat('v', id) AS v", "CAST(id % 4 AS INT) AS p")

    def write(batches):
        sink = sinks.create("iceberg", options)
        for b in batches:
            for f in sink.write_files(pa.Table.from_batches([b]).cast(SCHEMA), batch_id):
                yield pa.RecordBatch.from_pydict({"file": [json.dumps(f)]})
        sink.close()

    return [json.loads(r["file"]) for r in df.mapInArrow(write, "file string").collect()]


def both(sink) -> list[tuple]:
    t = sink._table()
    a, b = rows(by_pyiceberg(t), NAMES), rows(by_iceberg_rust(t), NAMES)
    assert a == b, "pyiceberg and iceberg-rust read the table differently"
    return a


def test_tasks_write_files_the_driver_commits_once(spark, tmp_path):
    options = {"warehouse": str(tmp_path / "wh"), "table": "db.t", "app-id": "app",
               "partition-by": "p"}
    sink = sinks.create("iceberg", options)
    assert sink.takes_files() and sink.takes_changes(("id",))
    sink.ready_for_files(SCHEMA)
    written = task_writes(spark, options, batch_id=0, n=30_000)
    sent = sum(len(json.dumps(f)) for f in written)
    assert sent < 30_000, sent  # under a byte per row reaches the driver
    # the table's field ids in every file, as Iceberg's readers resolve columns by them
    ids = {f.name: f.field_id for f in sink._table().schema().fields}
    some = pq.read_schema(files.local(written[0]["path"]))
    assert {f.name: int(f.metadata[b"PARQUET:field_id"]) for f in some} == ids
    r = sink.commit_files(written, SCHEMA, 0)
    assert not r.skipped and r.counts["appended"] == 30_000
    want = [(i, f"v{i}", i % 4) for i in range(30_000)]
    assert both(sink) == want
    assert sink.last_batch_id() == 0
    snap = sink._table().current_snapshot()
    assert snap.summary.operation.value == "append"
    assert snap.summary["sparkcdc.batch"] == "0" and snap.summary["sparkcdc.app-id"] == "app"
    assert {t.file.partition[0] for t in sink._table().scan().plan_files()} == {0, 1, 2, 3}

    # batch 1 written twice (a task attempt that died before the commit, then the batch
    # run again): one attempt's files are committed, the other's removed
    dead = task_writes(spark, options, batch_id=1, n=1_000, start=30_000)
    again = task_writes(spark, options, batch_id=1, n=1_000, start=30_000)
    assert all(files.local(f["path"]).exists() for f in dead)
    r = sink.commit_files(again, SCHEMA, 1, final=False)  # its changes follow
    assert not r.skipped and sink.last_batch_id() == 0 and sink.last_batch_seen() == 1
    assert not any(files.local(f["path"]).exists() for f in dead)
    # Spark runs batch 1 once more after its commit: nothing is committed, its files go
    late = task_writes(spark, options, batch_id=1, n=1_000, start=30_000)
    assert sink.commit_files(late, SCHEMA, 1).skipped
    assert not any(files.local(f["path"]).exists() for f in late)
    assert all(files.local(f["path"]).exists() for f in again)  # the committed files stay
    want += [(i, f"v{i}", i % 4) for i in range(30_000, 31_000)]
    assert both(sink) == sorted(want)
    sink.close()


def test_an_empty_batch_records_its_id_and_a_remote_table_is_not_taken(tmp_path):
    sink = sinks.create("iceberg", {"warehouse": str(tmp_path / "wh"), "table": "db.e",
                                    "app-id": "app"})
    sink.ready_for_files(SCHEMA)
    assert sink.write_files(SCHEMA.empty_table(), 0) == []
    assert not sink.commit_files([], SCHEMA, 0).skipped
    assert sink.last_batch_id() == 0 and sink._table().current_snapshot() is None
    remote = {"warehouse": "s3://bucket/wh", "table": "db.r", "catalog.uri": "sqlite:///:memory:"}
    assert not sinks.create("iceberg", remote).takes_files()
    from sparkcdc.sinks.iceberg.sink import IcebergSink

    assert not IcebergSink.may_take_files(remote)
    assert IcebergSink.may_take_files({"warehouse": str(tmp_path), "table": "db.x"})
    v1 = sinks.create("iceberg", {"warehouse": str(tmp_path / "wh"), "table": "db.v1",
                                  "table-property.format-version": "1"})
    assert not v1.takes_files()  # no position deletes in v1


def test_a_pinned_sink_reads_its_table_once(tmp_path):
    """As Delta's (``Sink.pin``): a pinned sink keeps the table it read first."""
    options = {"warehouse": str(tmp_path / "wh"), "table": "db.p", "app-id": "app"}
    driver = sinks.create("iceberg", options)
    schema = pa.schema([("id", pa.int64()), ("v", pa.string())])
    rows = pa.table({"id": [1, 2], "v": ["a", "b"]}, schema=schema)
    driver.ready_for_files(schema)
    driver.commit_files(driver.write_files(rows, 0), schema, 0)
    task = sinks.create("iceberg", options)
    task.pin()
    assert task.last_batch_id() == 0
    driver.commit_files(driver.write_files(rows, 1), schema, 1)
    assert driver.last_batch_id() == 1
    assert task.last_batch_id() == 0  # its view, kept
    driver.close()
    task.close()
