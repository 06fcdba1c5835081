"""The binlog a table needs was purged while the pipeline was stopped.

A dedicated server of the session's kind, MariaDB or MySQL (PURGE BINARY LOGS must not pull
the binlog from under other tests' checkpoints). The pipeline's stream (both tables) is put
back to a checkpoint in the first binlog file, as when it was stopped long ago. Changes are
made to both tables while the pipeline is stopped, then the first file is purged:

* ``binlog.purged.behavior: fail`` (the default) stops before anything starts, with one
  message naming a table, the missing file and the options;
* ``resnapshot`` empties and reloads the tables of that stream, in a new stream (rows
  deleted while their binlog was lost are gone from the targets), and ``verify`` says OK.
"""

from __future__ import annotations

import shutil
import time

import pytest
from pipeline_support import source_yaml
from server_support import seq

from sparkcdc.errors import BinlogUnavailable
from sparkcdc.pipeline.commands.verify import Verifier, render
from sparkcdc.pipeline.definition import parse_pipeline
from sparkcdc.pipeline.run.checkpoint import Checkpoint
from sparkcdc.pipeline.run.loop import Runner


@pytest.fixture(scope="module")
def server(own_source):
    with own_source(name="purge") as sb:
        yield sb


def _pipeline(sb, tmp_path, behavior: str | None):
    extra = f"  binlog.purged.behavior: {behavior}\n" if behavior else ""
    source = source_yaml(sb, "shop.\\.*", 60)
    text = f"""
{source}sink:
  type: delta
  path: {tmp_path}/lake
pipeline:
  name: purge
  parallelism: 1
  checkpoint.location: {tmp_path}/ckpt
{extra}"""
    return parse_pipeline(text, "purge.yaml", env={"TEST_PW": sb.info.cdc_password})


def _files(sb) -> list[str]:
    return [r[0] for r in sb.query("SHOW BINARY LOGS")]


def _purge_to(sb, keep: str) -> None:
    """PURGE BINARY LOGS TO ``keep``; the server refuses files its binlog checkpoint still
    needs, so retry until the files before ``keep`` are gone."""
    deadline = time.monotonic() + 60
    while _files(sb)[0] != keep:
        sb.execute(f"PURGE BINARY LOGS TO '{keep}'")
        if _files(sb)[0] == keep:
            break
        assert time.monotonic() < deadline, _files(sb)
        time.sleep(0.5)


def _target(defn, table: str) -> dict:
    from sparkcdc.pipeline.definition import targets

    sink = targets.create_sink(defn.sink.type, defn.sink.options, table, "read")
    try:
        return {r["id"]: r["v"] for r in sink.read().to_pylist()}
    finally:
        sink.close()


@pytest.mark.long
def test_purged_binlog_fails_clearly_then_resnapshots(spark, server, tmp_path):
    server.execute("DROP DATABASE IF EXISTS shop", "CREATE DATABASE shop")
    server.execute("CREATE TABLE a (id INT PRIMARY KEY, v INT)",
                   f"INSERT INTO a SELECT seq, seq FROM {seq(server, 40)}",
                   "CREATE TABLE b (id INT PRIMARY KEY, v INT)",
                   f"INSERT INTO b SELECT seq, seq FROM {seq(server, 10)}", database="shop")
    defn = _pipeline(server, tmp_path, None)
    ckpt = Checkpoint(defn.pipeline.checkpoint_location)
    Runner(defn, spark, until_caught_up=True).run()  # both snapshotted, positions in file 1
    a_dir = ckpt.pipeline_stream_dir(0)  # the pipeline stream: both tables
    shutil.copytree(a_dir, tmp_path / "a_at_file1")

    server.execute("FLUSH BINARY LOGS")
    second = _files(server)[-1]
    server.execute("UPDATE b SET v = 100 WHERE id = 1", database="shop")
    Runner(defn, spark, until_caught_up=True).run()  # both move on into the second file
    shutil.rmtree(a_dir)
    shutil.copytree(tmp_path / "a_at_file1", a_dir)  # the checkpoint lags: file 1

    # while the pipeline is stopped: changes to both, then the first file is purged
    server.execute("DELETE FROM a WHERE id <= 10", "UPDATE a SET v = -v WHERE id > 30",
                   f"INSERT INTO a SELECT seq, seq FROM {seq(server, 45, 41)}",
                   "DELETE FROM b WHERE id = 2", "INSERT INTO b VALUES (11, 11)",
                   database="shop")
    first = _files(server)[0]
    _purge_to(server, second)

    with pytest.raises(BinlogUnavailable) as e:
        Runner(defn, spark, until_caught_up=True).run()
    msg = str(e.value)
    assert "table shop.a" in msg and repr(first) in msg and "purged" in msg
    assert "binlog.purged.behavior: resnapshot" in msg and "binlog_expire_logs_seconds" in msg
    assert "shop.b" not in msg
    assert server.info.cdc_password not in msg

    defn = _pipeline(server, tmp_path, "resnapshot")
    Runner(defn, spark, until_caught_up=True).run()
    states = Checkpoint(defn.pipeline.checkpoint_location).load_tables()
    assert (states["shop.a"].generation, states["shop.b"].generation) == (1, 1)
    assert states["shop.a"].note == states["shop.b"].note == "resnapshot: binlog purged"
    assert states["shop.a"].stream_generation == states["shop.b"].stream_generation == 1  # a new stream
    a = _target(defn, "shop.a")
    assert sorted(a) == list(range(11, 46))  # the deleted rows are gone
    assert a[31] == -31 and a[45] == 45
    assert _target(defn, "shop.b") == {1: 100, **{i: i for i in range(3, 12)}}
    results = Verifier(defn, rechecks=1, catch_up_timeout=5).run()
    assert all(r.ok for r in results), render(results)
    assert {r.target for r in results} == {"shop.a", "shop.b"}
