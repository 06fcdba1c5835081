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
import threading
import time

import deltalake
import pytest
from faults_support import SEED, Writers, make_table, table_state
from pipeline_support import source_yaml
from server_support import seq
from sink_support import read_delta


def _yaml(path, mariadb, db, lake, ckpt, tables="t", chunk=2000,
          pipeline="  max-rows-per-batch: 4000\n"):
    path.write_text(f"""\
{source_yaml(mariadb, f"{db}.{tables}", 10)}\
  scan.incremental.snapshot.chunk.size: {chunk}
sink:
  type: delta
  path: {lake}
pipeline:
  name: kill
  parallelism: 2
{pipeline}  checkpoint.location: {ckpt}
""")


def _commits(path) -> int:
    """The target's commits of rows (not the one that creates it, which the run makes
    before its first batch's tasks write files into it)."""
    if not deltalake.DeltaTable.is_deltatable(str(path)):
        return 0
    return sum(h["operation"] != "CREATE TABLE"
               for h in deltalake.DeltaTable(str(path)).history())


def _kill_runs(mariadb, db, tmp_path, kills: int, seed: int) -> None:
    rnd = random.Random(seed)
    # 2,000-row chunks, 2 per batch; a kill waits for 1-3 more batches, and every kill must
    # land while the snapshot runs (after it, a run catches up and exits on its own)
    rows = 4_000 * (3 * kills + 2)
    make_table(mariadb, db, rows)
    yaml, lake, ckpt = tmp_path / "p.yaml", tmp_path / "lake", tmp_path / "ckpt"
    _yaml(yaml, mariadb, db, lake, ckpt)
    target = lake / db / "t"
    env = {**os.environ, "TEST_PW": mariadb.info.cdc_password,
           "PYSPARK_PYTHON": sys.executable}
    cmd = [sys.executable, "-m", "sparkcdc.cli", "run", str(yaml), "--until-caught-up",
           "--no-progress", "--master", "local[2]"]
    with Writers(mariadb, db, rows, n=2, pause=0.02):
        for k in range(kills):
            with open(tmp_path / f"run-{k}.log", "w") as log:  # the child keeps its own copy
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
    final = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=600, check=False)
    assert final.returncode == 0, final.stdout[-2000:] + final.stderr[-3000:]
    ops = [h["operation"] for h in deltalake.DeltaTable(str(target)).history()]
    assert "WRITE" in ops, ops  # the snapshot was appended (the writers' changes merged)
    got = read_delta(deltalake.DeltaTable(str(target))).to_pylist()
    ids = [r["id"] for r in got]
    assert len(ids) == len(set(ids)), "a key is held twice"
    assert {r["id"]: (r["v"], r["s"]) for r in got} == table_state(mariadb, db)


@pytest.mark.long
@pytest.mark.timeout(1200)  # two JVM starts; minutes each on a loaded machine
def test_pipeline_killed_while_appending_its_snapshot(mariadb, db, tmp_path):
    """One kill (make test); eight below (make test-faults)."""
    _kill_runs(mariadb, db, tmp_path, kills=1, seed=SEED)


@pytest.mark.faults
@pytest.mark.timeout(3600)
def test_pipeline_killed_at_8_points(mariadb, db, tmp_path):
    _kill_runs(mariadb, db, tmp_path, kills=8, seed=SEED + 1)


class _ManyWriter(threading.Thread):
    """Changes random rows of random tables, one statement per transaction, until stopped."""

    def __init__(self, mariadb, db, names, rows, seed):
        super().__init__(daemon=True)
        self.mariadb, self.db, self.names, self.rows = mariadb, db, names, rows
        self.rnd, self.halt, self.ops = random.Random(seed), threading.Event(), 0

    def run(self):
        with self.mariadb.admin_connection(self.db) as conn, conn.cursor() as cur:
            conn.autocommit(True)
            while not self.halt.is_set():
                t, k = self.rnd.choice(self.names), self.rnd.randint(1, 2 * self.rows)
                op = self.rnd.random()
                if op < 0.5:
                    cur.execute(f"UPDATE {t} SET v = v + 1, s = 'u{self.ops}' WHERE id = {k}")
                elif op < 0.75:
                    cur.execute(f"DELETE FROM {t} WHERE id = {k}")
                else:
                    cur.execute(f"REPLACE INTO {t} VALUES ({k}, {self.ops}, 'r')")
                self.ops += 1
                time.sleep(0.005)


@pytest.mark.faults
@pytest.mark.timeout(3600)
def test_pipeline_killed_while_writing_100_targets(mariadb, db, tmp_path):
    """One stream, 100 tables under writers: SIGKILLed at random moments while its batches
    write up to 100 targets at once, then run to the end. Every target ends equal to its
    source, every key once: a batch replayed after a kill skips the targets that committed
    it and writes the others."""
    names, rows = [f"t{i:03d}" for i in range(100)], 300
    mariadb.execute(*[f"CREATE TABLE {t} (id INT PRIMARY KEY, v INT, s VARCHAR(20))"
                      for t in names],
                    *[f"INSERT INTO {t} SELECT seq, seq, 'a' FROM {seq(mariadb, rows)}"
                      for t in names], database=db)
    yaml, lake, ckpt = tmp_path / "p.yaml", tmp_path / "lake", tmp_path / "ckpt"
    _yaml(yaml, mariadb, db, lake, ckpt, tables="t\\d+", chunk=100,
          pipeline="  trigger.interval: 1s\n")
    commits = ckpt / "streams" / "_tables" / "g0" / "commits"
    env = {**os.environ, "TEST_PW": mariadb.info.cdc_password,
           "PYSPARK_PYTHON": sys.executable}
    cmd = [sys.executable, "-m", "sparkcdc.cli", "run", str(yaml), "--no-progress",
           "--master", "local[2]"]
    rnd = random.Random(SEED + 100)
    writers = [_ManyWriter(mariadb, db, names, rows, seed) for seed in (1, 2)]
    for w in writers:
        w.start()
    try:
        for k in range(6):
            with open(tmp_path / f"run-{k}.log", "w") as log:  # the child keeps its own copy
                p = subprocess.Popen(cmd, env=env, stdout=log, stderr=subprocess.STDOUT,
                                     start_new_session=True)
            have = len(list(commits.iterdir())) if commits.is_dir() else 0
            want = have + rnd.randint(1, 3)
            deadline = time.monotonic() + 300
            while (p.poll() is None and time.monotonic() < deadline
                   and (len(list(commits.iterdir())) if commits.is_dir() else 0) < want):
                time.sleep(0.1)
            time.sleep(rnd.uniform(0.0, 2.0))  # most likely inside a batch's writes
            assert p.poll() is None, (tmp_path / f"run-{k}.log").read_text()[-3000:]
            os.killpg(p.pid, signal.SIGKILL)
            p.wait()
    finally:
        for w in writers:
            w.halt.set()
        for w in writers:
            w.join()
    assert sum(w.ops for w in writers) > 100
    final = subprocess.run(cmd + ["--until-caught-up"], env=env, capture_output=True,
                           text=True, timeout=900, check=False)
    assert final.returncode == 0, final.stdout[-2000:] + final.stderr[-3000:]
    for t in names:
        got = read_delta(deltalake.DeltaTable(str(lake / db / t))).to_pylist()
        ids = [r["id"] for r in got]
        assert len(ids) == len(set(ids)), f"{t}: a key is held twice"
        want = {r[0]: (r[1], r[2]) for r in mariadb.query(f"SELECT id, v, s FROM `{db}`.{t}")}
        assert {r["id"]: (r["v"], r["s"]) for r in got} == want, t
