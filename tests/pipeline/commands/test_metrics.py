"""``sparkcdc run --metrics-port``: a running pipeline scraped in Prometheus' text format,
during its snapshot and while it streams."""

from __future__ import annotations

import re
import threading
import time
import urllib.request

from pipeline_support import source_yaml
from server_support import seq

from sparkcdc.pipeline.commands.metrics import MetricsServer
from sparkcdc.pipeline.definition import parse_pipeline
from sparkcdc.pipeline.run.loop import Runner


def _scrape(port: int) -> dict[str, float]:
    with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=10) as r:
        assert r.headers["Content-Type"].startswith("text/plain; version=0.0.4")
        text = r.read().decode()
    out = {}
    for line in text.splitlines():
        if line and not line.startswith("#"):
            m = re.fullmatch(r"(\w+\{[^}]*\}) (\S+)", line)
            assert m, f"not Prometheus text: {line!r}"
            out[m.group(1)] = float(m.group(2))
    return out


def _wait(port: int, check, what: str, timeout: float = 240) -> dict[str, float]:
    deadline = time.monotonic() + timeout
    while True:
        got = _scrape(port)
        if check(got):
            return got
        assert time.monotonic() < deadline, f"{what}: {got}"
        time.sleep(0.5)


def test_metrics_of_a_running_pipeline(spark, mariadb, db, tmp_path):
    mariadb.execute("CREATE TABLE t (id INT PRIMARY KEY, v INT)",
                    f"INSERT INTO t SELECT seq, seq FROM {seq(mariadb, 50)}", database=db)
    source = source_yaml(mariadb, db + ".t", 20)
    defn = parse_pipeline(f"""
{source}sink:
  type: delta
  path: {tmp_path}/lake
pipeline:
  name: watched
  parallelism: 2
  trigger.interval: 1s
  checkpoint.location: {tmp_path}/ckpt
""", "m.yaml", env={"TEST_PW": mariadb.info.cdc_password})
    runner = Runner(defn, spark)
    server = MetricsServer(runner, 0).start()
    thread = threading.Thread(target=runner.run, daemon=True)
    thread.start()
    labels = f'pipeline="watched",table="{db}.t",target="{db}.t"'
    try:
        got = _wait(server.port,
                    lambda m: m.get(f"sparkcdc_table_rows_total{{{labels}}}") == 50,
                    "the snapshot's 50 rows")
        assert got['sparkcdc_streams{pipeline="watched"}'] == 1
        assert got[f"sparkcdc_table_snapshot_chunks_done{{{labels}}}"] >= 1
        assert got[f"sparkcdc_table_failed{{{labels}}}"] == 0
        mariadb.execute("UPDATE t SET v = -v WHERE id <= 5", database=db)
        phase = f'sparkcdc_table_phase{{pipeline="watched",table="{db}.t",phase="streaming"}}'
        got = _wait(server.port,
                    lambda m: m.get(f"sparkcdc_table_rows_total{{{labels}}}") == 55
                    and m.get(phase) == 1, "5 updates, streaming")
        assert got[f"sparkcdc_table_batches_total{{{labels}}}"] >= 2
        assert got[f"sparkcdc_table_lag_bytes{{{labels}}}"] >= 0
        assert got['sparkcdc_batch_seconds{pipeline="watched"}'] > 0
        # the updates were committed moments ago (commit times have 1 s resolution)
        assert 0 <= got[f"sparkcdc_table_emit_lag_seconds{{{labels}}}"] < 120
        with urllib.request.urlopen(f"http://127.0.0.1:{server.port}/metrics") as r:
            assert mariadb.info.cdc_password not in r.read().decode()
    finally:
        runner.stop()
        thread.join(120)
        server.close()
    assert not thread.is_alive()
