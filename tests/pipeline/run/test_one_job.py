"""A batch is one Spark job, and a quiet one is one stage (``MicroBatch._quiet``): a snapshot
read while nothing is written cuts no key slice and shuffles nothing (its chunks' rows are
files written where they were read); changes after it are cut into slices in the batch's
first stage and written by the slices' tasks, one commit per target with the batch id.
Both targets end equal to their sources, read by delta-rs and by the log on its own."""

from __future__ import annotations

import json
import logging
import re
from pathlib import Path

from pipeline_support import source_yaml
from server_support import seq
from sink_support import delta_log_rows, read_delta

from sparkcdc.pipeline.definition import parse_pipeline
from sparkcdc.pipeline.run.loop import Runner

ROWS = 3000


def rows_of(root: Path) -> dict:
    got = {r["id"]: (r["v"], r["s"]) for r in read_delta(root, ["id", "v", "s"]).to_pylist()}
    assert got == {r["id"]: (r["v"], r["s"]) for r in delta_log_rows(root, ["id", "v", "s"])}
    return got


def test_a_quiet_snapshot_is_one_stage_and_changes_one_job(spark, mariadb, db, tmp_path, caplog):
    for t in "ab":
        mariadb.execute(f"CREATE TABLE {t} (id INT PRIMARY KEY, v INT, s VARCHAR(10))",
                        f"INSERT INTO {t} SELECT seq, seq, 'init' FROM {seq(mariadb, ROWS)}",
                        database=db)
    source = source_yaml(mariadb, db + ".\\.*", 3)
    defn = parse_pipeline(f"""
{source}  scan.incremental.snapshot.chunk.size: 1000
sink:
  type: delta
  path: {tmp_path}/lake
pipeline:
  name: onejob
  parallelism: 2
  max-rows-per-batch: 2000
  checkpoint.location: {tmp_path}/ckpt
""", "onejob.yaml", env={"TEST_PW": mariadb.info.cdc_password})
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

    caplog.clear()
    mariadb.execute("UPDATE a SET v = -v WHERE id % 7 = 0", "DELETE FROM a WHERE id % 11 = 0",
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
