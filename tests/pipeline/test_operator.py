"""``sparkcdc snapshot``, ``pause`` and ``resume`` against a running pipeline, as a user runs
them: separate processes, a real MariaDB, Delta targets (pipeline/operator.py).

One continuous run, two tables under changes: ``a`` is paused (its changes meanwhile reach
nothing, ``b`` streams on), resumed (every change made while it was paused arrives), its
target is then damaged by hand and ``snapshot`` makes it right while ``b`` streams on, and
``snapshot --where`` reads back only the rows its condition names; a request that cannot
be made is answered with the reason. Then ``status`` shows
the generations, and a request made while nothing runs waits for the next start."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time

import deltalake
import pytest
from cli_support import cli, run_tail, wait_for, waited
from pipeline_support import source_yaml
from server_support import seq
from sink_support import read_delta


def rows(lake, db, table) -> dict:
    path = str(lake / db / table)
    if not deltalake.DeltaTable.is_deltatable(path):
        return {}
    return {r["id"]: r["v"] for r in read_delta(deltalake.DeltaTable(path)).to_pylist()}


def source(mariadb, db, table) -> dict:
    return dict(mariadb.query(f"SELECT id, v FROM `{db}`.`{table}`"))


@pytest.mark.long
def test_pause_resume_and_snapshot_a_table_while_the_others_stream(mariadb, db, tmp_path):
    for t in "ab":
        mariadb.execute(f"CREATE TABLE {t} (id INT PRIMARY KEY, v INT)",
                        f"INSERT INTO {t} SELECT seq, seq FROM {seq(mariadb, 200)}", database=db)
    lake, ckpt = tmp_path / "lake", tmp_path / "ckpt"
    yaml_path = tmp_path / "p.yaml"
    yaml_path.write_text(source_yaml(mariadb, db + ".\\.*", 10) + f"""\
sink:
  type: delta
  path: {lake}
pipeline:
  name: ops
  parallelism: 1
  checkpoint.location: {ckpt}
  trigger.interval: 1s
""")
    env = {**os.environ, "TEST_PW": mariadb.info.cdc_password,
           "PYSPARK_PYTHON": sys.executable}
    with open(tmp_path / "run.log", "w+") as log:
        proc = subprocess.Popen([sys.executable, "-m", "sparkcdc.cli", "run", str(yaml_path),
                                 "--no-progress", "--master", "local[2]"],
                                stdout=log, stderr=subprocess.STDOUT, env=env)
        try:
            for t in "ab":
                wait_for(lambda t=t: rows(lake, db, t) == source(mariadb, db, t), 240,
                         f"the snapshot of {t}")

            # pause a: its changes wait in the binlog while b streams on
            p = cli("pause", str(yaml_path), "--tables", f"{db}\\.a", env=env)
            assert p.returncode == 0 and f"{db}.a: paused" in p.stdout, p.stdout + p.stderr
            mariadb.execute("UPDATE a SET v = -v WHERE id <= 50", "DELETE FROM a WHERE id > 190",
                            "INSERT INTO a VALUES (500, 500)", "UPDATE b SET v = 0 WHERE id = 1",
                            database=db)
            wait_for(lambda: rows(lake, db, "b") == source(mariadb, db, "b"), 60, "b's change")
            time.sleep(3)  # a few more batches of the pipeline's stream
            stale = rows(lake, db, "a")
            assert stale[1] == 1 and 500 not in stale and 200 in stale  # nothing of a arrived
            st = cli("status", str(yaml_path), env=env)
            assert "paused" in st.stdout, st.stdout
            again = cli("pause", str(yaml_path), "--tables", f"{db}\\.a", env=env)
            assert again.returncode == 1 and "not paused: it is paused" in again.stdout, \
                again.stdout

            # resume a: every change made while it was paused arrives, none twice
            p = cli("resume", str(yaml_path), "--tables", f"{db}\\.a", env=env)
            assert p.returncode == 0 and f"{db}.a: resumed" in p.stdout, p.stdout + p.stderr
            wait_for(lambda: rows(lake, db, "a") == source(mariadb, db, "a"), 120,
                     "a's changes made while it was paused")

            # the target of a damaged by hand; snapshot makes it right while b streams on
            path = str(lake / db / "a")
            deltalake.DeltaTable(path).delete("id <= 20")
            deltalake.DeltaTable(path).update({"v": "999"}, predicate="id = 100")
            p = cli("snapshot", str(yaml_path), "--tables", f"{db}\\.a", env=env)
            assert p.returncode == 0 and f"{db}.a: snapshotted again" in p.stdout, p.stdout
            mariadb.execute("UPDATE b SET v = 7 WHERE id = 2", "UPDATE a SET v = 8 WHERE id = 3",
                            database=db)
            wait_for(lambda: rows(lake, db, "a") == source(mariadb, db, "a"), 120,
                     "a snapshotted again")
            wait_for(lambda: rows(lake, db, "b") == source(mariadb, db, "b"), 60, "b streaming on")

            # part of a read again (--where): only the rows the condition names come back
            deltalake.DeltaTable(path).delete("id <= 20 OR (id >= 150 AND id <= 160)")
            bad = cli("snapshot", str(yaml_path), "--tables", f"{db}\\.a", "--where", "id <<< 3",
                      env=env)
            assert bad.returncode == 1 and "does not run on the source" in bad.stdout, bad.stdout
            p = cli("snapshot", str(yaml_path), "--tables", f"{db}\\.a", "--where", "id <= 20",
                    env=env)
            assert p.returncode == 0 and "rows where id <= 20 read again" in p.stdout, p.stdout
            mariadb.execute("UPDATE a SET v = 9 WHERE id = 100", "UPDATE b SET v = 9 WHERE id = 3",
                            database=db)
            want = {k: v for k, v in source(mariadb, db, "a").items() if not 150 <= k <= 160}
            wait_for(lambda: rows(lake, db, "a") == want, 120, "the rows where id <= 20")
            wait_for(lambda: rows(lake, db, "b") == source(mariadb, db, "b"), 60, "b streaming on")
            time.sleep(3)
            assert rows(lake, db, "a") == want  # the rows outside the condition were not read
        finally:
            proc.send_signal(signal.SIGINT)
            try:
                assert waited(proc, 120) is not None, run_tail(log, ckpt)
            finally:
                if proc.poll() is None:
                    proc.kill()
            log.seek(0)
            out = log.read()
    assert "pipeline 'ops' stopped" in out, out[-3000:]
    for kind in ("pause", "resume", "snapshot"):  # one line each, in the run's output
        assert f"{kind} requested for {db}\\.a: {db}.a" in out, out[-3000:]

    # made while nothing runs: it waits, and the next run takes it at its start
    p = cli("pause", str(yaml_path), "--tables", f"{db}\\.b", "--timeout", "1", env=env)
    assert p.returncode == 0 and "waits in" in p.stdout, p.stdout
    r = cli("run", str(yaml_path), "--until-caught-up", "--no-progress", env=env)
    assert r.returncode == 0, r.stderr[-3000:]
    st = cli("status", str(yaml_path), env=env)
    line = next(ln for ln in st.stdout.splitlines() if f"{db}.b" in ln)
    assert "paused" in line, st.stdout
