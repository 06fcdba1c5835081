"""Delta data files written by Spark tasks and committed once by the driver
(sinks/delta/files.py): real Spark tasks write the rows they hold, the driver receives only
what the commit needs about the files, and commits them with the batch id. The table is
read back by delta-rs and by a reader of our own (the Delta log's adds less its removes,
the Parquet files read by pyarrow), and each must equal the rows written. A batch committed
twice is committed once; the folders of attempts that never committed are removed."""

from __future__ import annotations

import json
from pathlib import Path

import deltalake
import pyarrow as pa
import pyarrow.parquet as pq
from sink_support import delta_log_files, read_delta

from sparkcdc import sinks

SCHEMA = pa.schema([("id", pa.int64()), ("v", pa.string()), ("p", pa.int32())])


def by_log(root: Path) -> pa.Table:
    """The table as its log says, without delta-rs: the live files read with pyarrow,
    partition values from the log."""
    parts = []
    for path, values in delta_log_files(root):
        t = pq.read_table(path)
        for k, v in values.items():
            if k not in t.column_names:
                t = t.append_column(k, pa.array([None if v is None else int(v)] * t.num_rows,
                                                SCHEMA.field(k).type))
        parts.append(t.select(SCHEMA.names).cast(SCHEMA))
    return pa.concat_tables(parts) if parts else SCHEMA.empty_table()


def rows_of(t: pa.Table) -> list[tuple]:
    return sorted(tuple(r.values()) for r in t.select(SCHEMA.names).to_pylist())


def task_writes(spark, options: dict, batch_id: int, n: int, parts: int = 3) -> list[dict]:
    """Spark tasks write ``n`` rows (``parts`` tasks, each the rows it holds); what reaches
    the driver is the files' descriptions, as JSON text."""
    df = spark.range(0, n, numPartitions=parts).selectExpr(
        "id", "concat('v', id) AS v", "CAST(id % 4 AS INT) AS p")

    def write(batches):
        sink = sinks.create("delta", options)
        for b in batches:
            rows = pa.Table.from_batches([b]).cast(SCHEMA)
            for f in sink.write_files(rows, batch_id):
                yield pa.RecordBatch.from_pydict({"file": [json.dumps(f)]})

    got = df.mapInArrow(write, "file string").collect()
    return [json.loads(r["file"]) for r in got]


def test_tasks_write_files_the_driver_commits_once(spark, tmp_path):
    root = tmp_path / "t"
    options = {"path": str(root), "app-id": "app", "partition-by": "p"}
    sink = sinks.create("delta", options)
    assert sink.takes_files()

    written = task_writes(spark, options, batch_id=0, n=30_000)
    sent = sum(len(json.dumps(f)) for f in written)
    assert sent < 30_000, sent  # under a byte per row reaches the driver
    assert {f["partition_values"]["p"] for f in written} == {"0", "1", "2", "3"}
    r = sink.commit_files(written, SCHEMA, 0)
    assert not r.skipped and r.counts["appended"] == 30_000
    want = [(i, f"v{i}", i % 4) for i in range(30_000)]
    assert rows_of(read_delta(deltalake.DeltaTable(str(root)))) == want
    assert rows_of(by_log(root)) == want
    assert deltalake.DeltaTable(str(root)).transaction_version("app") == 0

    # batch 1 written twice (a task attempt that died before the commit, then the batch
    # run again): one attempt's files are committed, the other's folders removed
    dead = task_writes(spark, options, batch_id=1, n=1_000)
    again = task_writes(spark, options, batch_id=1, n=1_000)
    dead_dirs = {f["path"].split("/")[0] for f in dead}
    assert all((root / d).is_dir() for d in dead_dirs)
    r = sink.commit_files(again, SCHEMA, 1)
    assert not r.skipped
    assert not any((root / d).exists() for d in dead_dirs)
    # Spark runs batch 1 once more after its commit (its own commit log lost to a crash):
    # nothing is committed, and that run's files go
    late = task_writes(spark, options, batch_id=1, n=1_000)
    r = sink.commit_files(late, SCHEMA, 1)
    assert r.skipped
    assert not any((root / f["path"].split("/")[0]).exists() for f in late)
    want = sorted(want + [(i, f"v{i}", i % 4) for i in range(1_000)])
    assert rows_of(read_delta(deltalake.DeltaTable(str(root)))) == want
    assert rows_of(by_log(root)) == want
    assert all((root / f["path"]).exists() for f in again)  # the committed files stay
    sink.close()


def test_an_empty_batch_records_its_id_and_a_remote_table_is_not_taken(tmp_path):
    root = tmp_path / "e"
    sink = sinks.create("delta", {"path": str(root), "app-id": "app"})
    assert sink.write_files(SCHEMA.empty_table(), 0) == []
    assert not sink.commit_files([], SCHEMA, 0).skipped
    assert deltalake.DeltaTable(str(root)).transaction_version("app") == 0
    assert not sinks.create("delta", {"path": "s3://bucket/t"}).takes_files()
    mapped = sinks.create("delta", {"path": str(tmp_path / "m"),
                                    "table-property.delta.columnMapping.mode": "name"})
    assert not mapped.takes_files()


def test_a_pinned_sink_reads_its_table_once(tmp_path):
    """In a task the sink is pinned (``Sink.pin``): the table as it was when first read
    serves every record batch of the task (nothing commits while a batch's tasks run);
    an unpinned sink, the driver's, reads each commit."""
    root = tmp_path / "p"
    options = {"path": str(root), "app-id": "app"}
    driver = sinks.create("delta", options)
    rows = pa.table({"id": [1, 2], "v": ["a", "b"], "p": [0, 0]}, schema=SCHEMA)
    driver.commit_files(driver.write_files(rows, 0), SCHEMA, 0)
    task = sinks.create("delta", options)
    task.pin()
    assert task.last_batch_id() == 0
    driver.commit_files(driver.write_files(rows, 1), SCHEMA, 1)
    assert driver.last_batch_id() == 1
    assert task.last_batch_id() == 0  # its view, kept
    fresh = sinks.create("delta", options)
    fresh.pin()
    assert fresh.last_batch_id() == 1
