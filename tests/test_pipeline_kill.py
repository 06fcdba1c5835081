"""``sparkcdc run`` SIGKILLed (the whole process group: CLI, JVM, Python workers) while its
snapshot is being appended to a Delta target under concurrent writers, then run again: the
target ends exactly equal to the source, every key once. The snapshot's batches take the
append path (no MERGE looks keys up), so a batch written but not committed in Spark's log,
then replayed, would double its rows if the sink's batch id did not guard it."""

from __future__ import annotations

import os
import random
import signal
import subprocess
import sys
import time

import deltalake
import pytest
from faults_support import SEED, Writers, make_table, table_state


def _yaml(path, mariadb, db, lake, ckpt):
    i = mariadb.info
    base = random.randint(100_000, 3_000_000_000)
    path.write_text(f"""\
source:
  type: mysql
  hostname: {i.host}
  port: {i.port}
  username: {i.cdc_user}
  password: ${{KILL_TEST_PW}}
  tables: {db}.t
  server-id: {base}-{base + 9}
  scan.incremental.snapshot.chunk.size: 2000
sink:
  type: delta
  path: {lake}
pipeline:
  name: kill
  parallelism: 2
  max-rows-per-batch: 4000
  checkpoint.location: {ckpt}
""")


def _commits(path) -> int:
    if not deltalake.DeltaTable.is_deltatable(str(path)):
        return 0
    return deltalake.DeltaTable(str(path)).version() + 1


def _kill_runs(mariadb, db, tmp_path, kills: int, seed: int) -> None:
    rnd = random.Random(seed)
    # 2,000-row chunks, 2 per batch; a kill waits for 1-3 more batches, and every kill must
    # land while the snapshot runs (after it, a run catches up and exits on its own)
    rows = 4_000 * (3 * kills + 2)
    make_table(mariadb, db, rows)
    yaml, lake, ckpt = tmp_path / "p.yaml", tmp_path / "lake", tmp_path / "ckpt"
    _yaml(yaml, mariadb, db, lake, ckpt)
    target = lake / db / "t"
    env = {**os.environ, "KILL_TEST_PW": mariadb.info.cdc_password,
           "PYSPARK_PYTHON": sys.executable}
    cmd = [sys.executable, "-m", "sparkcdc.cli", "run", str(yaml), "--until-caught-up",
           "--no-progress", "--master", "local[2]"]
    with Writers(mariadb, db, rows, n=2, pause=0.02):
        for k in range(kills):
            log = open(tmp_path / f"run-{k}.log", "w")
            p = subprocess.Popen(cmd, env=env, stdout=log, stderr=subprocess.STDOUT,
                                 start_new_session=True)
            want = _commits(target) + rnd.randint(1, 3)  # a few more batches, then a kill
            deadline = time.monotonic() + 240
            while (_commits(target) < want and p.poll() is None
                   and time.monotonic() < deadline):
                time.sleep(0.1)
            time.sleep(rnd.uniform(0.0, 1.0))  # anywhere: in a task, the sink, the logs
            assert p.poll() is None, (tmp_path / f"run-{k}.log").read_text()[-3000:]
            os.killpg(p.pid, signal.SIGKILL)
            p.wait()
            log.close()
    ops = [h["operation"] for h in deltalake.DeltaTable(str(target)).history()]
    assert "WRITE" in ops, ops  # the snapshot was appended
    final = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=600)
    assert final.returncode == 0, final.stdout[-2000:] + final.stderr[-3000:]
    got = deltalake.DeltaTable(str(target)).to_pyarrow_table().to_pylist()
    ids = [r["id"] for r in got]
    assert len(ids) == len(set(ids)), "a key is held twice"
    assert {r["id"]: (r["v"], r["s"]) for r in got} == table_state(mariadb, db)


@pytest.mark.timeout(1200)  # three JVM starts; minutes each on a loaded machine
def test_pipeline_killed_while_appending_its_snapshot(mariadb, db, tmp_path):
    _kill_runs(mariadb, db, tmp_path, kills=2, seed=SEED)


@pytest.mark.faults
@pytest.mark.timeout(3600)
def test_pipeline_killed_at_8_points(mariadb, db, tmp_path):
    _kill_runs(mariadb, db, tmp_path, kills=8, seed=SEED + 1)
