"""``sparkcdc run`` SIGKILLed (the whole process group) in the middle of a failover: the
primary stopped, its replica promoted and the address (a proxy) pointed at it while the run
streams, then killed at a seeded random moment while it finds its place in the replica's
binlog. A second run catches up from the replica: the Delta target ends exactly equal to
the source, every key once."""

from __future__ import annotations

import os
import random
import signal
import subprocess
import sys
import time

import deltalake
import pytest
from failover_support import FAILOVER_DB, FAILOVER_PASSWORD, failover_yaml, tools
from faults_support import SEED, Current, Writers, make_table, table_state
from sink_support import read_delta

pytestmark = [pytest.mark.faults, pytest.mark.timeout(1200)]

DB, ROWS = FAILOVER_DB, 3000


def _commits(path) -> int:
    if not deltalake.DeltaTable.is_deltatable(str(path)):
        return 0
    return deltalake.DeltaTable(str(path)).version() + 1


def test_run_killed_during_the_failover(failover_pair, tmp_path):
    primary, replica, proxy = failover_pair
    rnd = random.Random(SEED)
    now = Current(primary)
    make_table(primary, DB, ROWS)
    base = rnd.randint(100_000, 3_000_000_000)
    yaml, lake = tmp_path / "p.yaml", tmp_path / "lake"
    yaml.write_text(failover_yaml(proxy.port, tmp_path, "failover-kill", base))
    target = lake / DB / "t"
    env = {**os.environ, "PIPE_PW": FAILOVER_PASSWORD, "PYSPARK_PYTHON": sys.executable}
    cmd = [sys.executable, "-m", "sparkcdc.cli", "run", str(yaml), "--no-progress",
           "--master", "local[2]"]
    with open(tmp_path / "run-0.log", "w") as log:  # the child keeps its own copy
        p = subprocess.Popen(cmd, env=env, stdout=log, stderr=subprocess.STDOUT,
                             start_new_session=True)
    try:
        with Writers(now, DB, ROWS, n=2, pause=0.03):
            deadline = time.monotonic() + 300
            # the snapshot (6 chunks) and a few stream batches
            while _commits(target) < 9 and p.poll() is None and time.monotonic() < deadline:
                time.sleep(0.2)
            assert p.poll() is None, (tmp_path / "run-0.log").read_text()[-3000:]
            assert _commits(target) >= 9, "the run did not reach its stream in time"
        tools(primary).caught_up(primary, replica)
        primary.stop()
        tools(replica).promote(replica)
        now.server = replica
        proxy.upstream = (replica.info.host, replica.info.port)
        with Writers(now, DB, ROWS, n=2, pause=0.03, first_seed=3):
            proxy.cut_all()
            time.sleep(rnd.uniform(0.0, 3.0))  # while the stream moves to the replica
            assert p.poll() is None, (tmp_path / "run-0.log").read_text()[-3000:]
            os.killpg(p.pid, signal.SIGKILL)
            p.wait()
            time.sleep(1.0)
    finally:
        if p.poll() is None:
            os.killpg(p.pid, signal.SIGKILL)
    final = subprocess.run([*cmd, "--until-caught-up"], env=env, capture_output=True,
                           text=True, timeout=600, check=False)
    assert final.returncode == 0, final.stdout[-2000:] + final.stderr[-3000:]
    got = read_delta(deltalake.DeltaTable(str(target))).to_pylist()
    ids = [r["id"] for r in got]
    assert len(ids) == len(set(ids)), "a key is held twice"
    assert {r["id"]: (r["v"], r["s"]) for r in got} == table_state(replica, DB)
