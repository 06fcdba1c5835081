"""A batch is one Spark job, and a quiet one is one stage (``MicroBatch._quiet``): a snapshot
read while nothing is written cuts no key slice and shuffles nothing (its chunks' rows are
files written where they were read); changes after it are cut into slices in the batch's
first stage and written by the slices' tasks, one commit per target with the batch id.
Both targets end equal to their sources, read by delta-rs and by the log on its own."""

from __future__ import annotations

import json
import logging
import re
import threading
from itertools import pairwise
from pathlib import Path

from cli_support import wait_for
from pipeline_support import source_yaml
from reread_support import mark, read_again
from server_support import binlog_status, seq
from sink_support import delta_log_rows, read_delta

from sparkcdc.pipeline.definition import parse_pipeline
from sparkcdc.pipeline.run import control
from sparkcdc.pipeline.run.loop import Runner
from sparkcdc.sinks.delta.log import DeltaLog
from sparkcdc.spark.offset_view import read_offset

ROWS = 3000


def rows_of(root: Path) -> dict:
    got = {r["id"]: (r["v"], r["s"]) for r in read_delta(root, ["id", "v", "s"]).to_pylist()}
    assert got == {r["id"]: (r["v"], r["s"]) for r in delta_log_rows(root, ["id", "v", "s"])}
    return got


def key_range(add: dict) -> tuple[int, int]:
    """A data file's ``id`` range, from its statistics."""
    stats = json.loads(add["stats"])
    return stats["minValues"]["id"], stats["maxValues"]["id"]


def tables_into_delta(mariadb, db: str, tmp_path: Path, names: str, chunk: int, option: str):
    """Tables ``names`` (one letter each) of ``ROWS`` rows, and a pipeline of them into Delta
    with chunks of ``chunk`` rows and one more pipeline ``option``."""
    for t in names:
        mariadb.execute(f"CREATE TABLE {t} (id INT PRIMARY KEY, v INT, s VARCHAR(10))",
                        f"INSERT INTO {t} SELECT seq, seq, 'init' FROM {seq(mariadb, ROWS)}",
                        database=db)
    return into_delta(mariadb, db, tmp_path, names, chunk, option)


def into_delta(mariadb, db: str, tmp_path: Path, names: str, chunk: int, option: str,
               ckpt: str = "ckpt"):
    return parse_pipeline(f"""
{source_yaml(mariadb, db + ".[" + names + "]", 3)}  scan.incremental.snapshot.chunk.size: {chunk}
sink:
  type: delta
  path: {tmp_path}/lake
pipeline:
  name: onejob
  parallelism: 2
  {option}
  checkpoint.location: {tmp_path}/{ckpt}
""", "onejob.yaml", env={"TEST_PW": mariadb.info.cdc_password})


def test_a_quiet_snapshot_is_one_stage_and_changes_one_job(spark, mariadb, db, tmp_path, caplog):
    defn = tables_into_delta(mariadb, db, tmp_path, "ab", 500, "max-rows-per-batch: 3000")
    caplog.set_level(logging.INFO, logger="sparkcdc.pipeline")
    Runner(defn, spark, until_caught_up=True).run()
    said = [r.getMessage() for r in caplog.records]
    files = [int(m.group(1)) for m in (re.search(r"(\d+) row\(s\) written by the tasks as", x)
                                       for x in said) if m]
    assert sum(files) == 2 * ROWS, files  # every snapshot row, as the tasks' files
    cut = [x for x in said if re.search(r"batch (\d+): \d+ slice\(s\) of", x)]
    batches = {int(m.group(1)) for m in (re.search(r"batch (\d+): ", x) for x in said) if m}
    assert len(batches) >= 3, said  # several batches of chunks ...
    assert len(cut) <= 1, cut  # ... none cut into slices but the first (no window before it)
    for t in "ab":  # a task's chunks are neighbours: its file holds one stretch of keys
        ranges = sorted(key_range(a) for a in DeltaLog(tmp_path / "lake" / db / t).refresh()
                        .files.values())
        assert len(ranges) > 2 and all(x[1] < y[0] for x, y in pairwise(ranges)), ranges

    caplog.clear()
    # (under a fifth of each file: a file left purge-deleted-share deleted is rewritten)
    mariadb.execute("UPDATE a SET v = -v WHERE id % 13 = 0", "DELETE FROM a WHERE id % 17 = 0",
                    "INSERT INTO b VALUES (100001, 1, 'new')", "UPDATE b SET s = 'upd' "
                    "WHERE id % 13 = 0", database=db)
    Runner(defn, spark, until_caught_up=True).run()
    said = [r.getMessage() for r in caplog.records]
    assert [x for x in said if re.search(r"batch \d+: \d+ slice\(s\) of", x)], said
    committed = [x for x in said if re.search(r"-> .* from \d+ task\(s\): \{", x)]
    assert {re.search(r": (\S+) ->", x).group(1).split(".")[1] for x in committed} == {"a", "b"}
    assert not [x for x in said if "read again for the driver's path" in x]
    for t in "ab":
        root = tmp_path / "lake" / db / t
        assert rows_of(root) == {r[0]: (r[1], r[2]) for r in mariadb.query(
            f"SELECT id, v, s FROM `{db}`.`{t}`")}
        actions = [json.loads(x) for f in sorted((root / "_delta_log").glob("*.json"))
                   for x in f.read_text().splitlines()]
        assert any("add" in a and a["add"].get("deletionVector") for a in actions), \
            f"{t}: its changes did not mark the rows they replaced"


def test_a_snapshot_into_a_target_that_holds_rows_is_written_by_the_slices(
        spark, mariadb, db, tmp_path, caplog):
    """A new checkpoint into a table with rows: its snapshot's batches are not quiet
    (``MicroBatch._targets_may_hold``: the target's statistics hold the chunks' spans), so
    the rows the target has go to the slices' tasks, which mark the stored ones, and no
    batch comes back for the driver's merge (before, each did: the whole table through one
    process, and a copy-on-write of its files)."""
    tables_into_delta(mariadb, db, tmp_path, "a", 500, "max-rows-per-batch: 1500")
    Runner(into_delta(mariadb, db, tmp_path, "a", 500, "max-rows-per-batch: 1500"), spark,
           until_caught_up=True).run()
    root = tmp_path / "lake" / db / "a"
    had = len(list((root / "_delta_log").glob("*.json")))
    mariadb.execute("UPDATE a SET v = -v WHERE id % 7 = 0",
                    f"INSERT INTO a VALUES ({ROWS + 1000}, 1, 'new')", database=db)
    caplog.set_level(logging.INFO, logger="sparkcdc.pipeline")
    Runner(into_delta(mariadb, db, tmp_path, "a", 500, "max-rows-per-batch: 1500",
                      ckpt="ckpt2"), spark, until_caught_up=True).run()
    said = [r.getMessage() for r in caplog.records]
    assert len([x for x in said if re.search(r"batch \d+: \d+ slice\(s\) of", x)]) >= 2, said
    assert rows_of(root) == {r[0]: (r[1], r[2]) for r in mariadb.query(
        f"SELECT id, v, s FROM `{db}`.`a`")}
    commits = [[json.loads(x) for x in f.read_text().splitlines()]
               for f in sorted((root / "_delta_log").glob("*.json"))][had:]
    assert commits
    infos = [a["commitInfo"] for c in commits for a in c if "commitInfo" in a]
    # the slices' commits, and the tasks' files of the new row: no merge of the driver's
    assert all(i["operation"] != "MERGE" or i["operationParameters"].get("predicate")
               == "sparkcdc change slices" for i in infos), infos
    assert any("add" in a and a["add"].get("deletionVector") for c in commits for a in c), \
        "the stored rows were not marked"


def planned_batches(ckpt: Path) -> int:
    """How many batches the stream has planned (its offset log)."""
    return len(list((ckpt / "streams" / "_tables").glob("g*/offsets/[0-9]*")))


def both_ways(mariadb, db: str, ckpt: Path, base: int) -> bool:
    """Keys ``base + 1 .. base + 300`` (past the target's last) read again while inserted:
    the chunk read again holds them alone, and their insert lands, as planned, in the
    window of the batch that reads it. Whether it did (the stream's timing decides)."""
    m = mark(ckpt, f"{db}.a")
    asked = control.submit(ckpt, "snapshot", f"{db}\\.a",
                           where=f"id > {base} AND id <= {base + 300}")
    assert control.wait(asked, 120) is not None
    # the stream takes the request in the batch after the next one: once that next one is
    # planned, the keys go into the window of the batch that reads the chunk again
    planned = planned_batches(ckpt)
    mariadb.execute(f"INSERT INTO a VALUES ({base + 900}, 0, 'far')", database=db)
    wait_for(lambda: planned_batches(ckpt) > planned, 120, "the next batch")
    mariadb.execute(f"INSERT INTO a SELECT seq + {base}, seq, 'new' FROM {seq(mariadb, 300)}",
                    database=db)
    inserted = tuple(mariadb.query(binlog_status(mariadb))[0][:2])
    wait_for(lambda: read_again(ckpt, f"{db}.a", m), 120, "a read again")
    stream = next((ckpt / "streams" / "_tables").glob("g*/offsets")).parent
    offs = [read_offset(stream, b) for b in range(planned_batches(ckpt))]
    at = next(b for b in range(planned, len(offs))
              if offs[b] is not None and offs[b].tables_read_again)
    pos = [(o.position_dict["file"], o.position_dict["pos"]) for o in offs[at - 1:at + 1]]
    return pos[0] < inserted <= pos[1]


def test_a_key_in_both_a_chunk_read_again_and_its_window_is_held_once(
        spark, mariadb, db, tmp_path):
    """A table read again stays covered (docs/algorithm.md, "Reading a table again"): a key
    written just before the batch that reads its chunk again is in that batch twice, as a
    change of its window and as the chunk's row. Keys past the target's last are new to it
    by its file statistics: written as a file of the first stage, such a chunk row escaped
    the write task that upserted the same key (the slices are cut before those files
    exist), and the target held the key twice (CI met it in test_reread under writes)."""
    defn = tables_into_delta(mariadb, db, tmp_path, "a", 10 * ROWS, "trigger.interval: 1s")
    ckpt = tmp_path / "ckpt"
    Runner(defn, spark, until_caught_up=True).run()
    runner = Runner(defn, spark)
    running = threading.Thread(target=runner.run)
    running.start()
    try:
        # a run's first batch reads no chunk while the binlog moves (it warms up): past it
        root = tmp_path / "lake" / db / "a"
        mariadb.execute(f"INSERT INTO a VALUES ({2 * ROWS}, 0, 'far')", database=db)
        wait_for(lambda: len(read_delta(root, ["id"])) > ROWS, 120, "the second run's batch")
        met = [both_ways(mariadb, db, ckpt, ROWS + 1000 * k) for k in range(4)]
        assert any(met), "no insert landed in the window of the batch that read it again"
        want = {r[0]: (r[1], r[2]) for r in mariadb.query(f"SELECT id, v, s FROM `{db}`.`a`")}
        wait_for(lambda: len(read_delta(root, ["id"])) >= len(want), 60, "the new keys")
    finally:
        runner.stop()
        running.join()
    ids = [r["id"] for r in read_delta(root, ["id"]).to_pylist()]
    assert len(ids) == len(set(ids)), sorted(i for i in set(ids) if ids.count(i) > 1)[:20]
    assert rows_of(root) == want
