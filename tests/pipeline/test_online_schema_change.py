"""Online schema change tools on a captured table while the pipeline streams under writes:
Percona's ``pt-online-schema-change`` itself (Debian's percona-toolkit), and gh-ost's
documented sequence of statements replayed (gh-ost is not packaged here). With
``scan.parse.online.schema.changes.enabled`` (Flink CDC's option), the tools' helper tables
are never targets of their own, the change reaches the table's target as an ALTER of the
table would, and the target equals the source afterwards (pipeline/online_schema.py)."""

from __future__ import annotations

import os
import shutil
import subprocess
import threading
import time

import pytest
from pipeline_support import delta_rows_by_key as _target
from pipeline_support import source_rows_by_key as _source
from pipeline_support import source_yaml
from server_support import seq

from sparkcdc.pipeline.definition import parse_pipeline
from sparkcdc.pipeline.run.loop import Runner


def _defn(mariadb, db, tmp_path, online: bool = True):
    flag = "  scan.parse.online.schema.changes.enabled: true\n" if online else ""
    source = source_yaml(mariadb, db + ".\\.*", 40)
    text = f"""
{source}  scan.incremental.snapshot.chunk.size: 500
{flag}sink:
  type: delta
  path: {tmp_path}/lake
pipeline:
  name: osc
  parallelism: 2
  schema.change.behavior: evolve
  checkpoint.location: {tmp_path}/ckpt
"""
    return parse_pipeline(text, "osc.yaml", env={"TEST_PW": mariadb.info.cdc_password})


def _targets(tmp_path, db) -> list[str]:
    d = tmp_path / "lake" / db
    return sorted(p.name for p in d.iterdir()) if d.exists() else []


class _Writer(threading.Thread):
    """Inserts, updates and deletes on ``t`` until stopped (the tools copy rows meanwhile)."""

    def __init__(self, mariadb, db):
        super().__init__(daemon=True)
        self.mariadb, self.db, self.stop = mariadb, db, threading.Event()
        self.error = None

    def run(self):
        n = 100_000
        try:
            with self.mariadb.admin_connection(self.db) as c, c.cursor() as cur:
                while not self.stop.is_set():
                    n += 1
                    cur.execute("INSERT INTO t (id, v) VALUES (%s, 1)", (n,))
                    cur.execute("UPDATE t SET v = v + 1 WHERE id = %s", (n % 3000 + 1,))
                    cur.execute("DELETE FROM t WHERE id = %s", (n % 4000 + 3001,))
                    c.commit()
                    time.sleep(0.005)
        except Exception as e:  # noqa: BLE001 - the writer thread's error, reported by the test
            self.error = e


def _pt_osc(mariadb, db, alter: str) -> None:
    i = mariadb.info
    p = subprocess.run(
        ["pt-online-schema-change", "--alter", alter, "--execute", "--chunk-size", "500",
         "--recursion-method", "none", "--no-check-replication-filters",
         "--no-check-unique-key-change",
         f"h=127.0.0.1,P={i.port},u={i.admin_user},D={db},t=t"],
        capture_output=True, text=True, timeout=300, check=False,
        env={**os.environ, "MYSQL_PWD": i.admin_password})
    assert p.returncode == 0, p.stdout[-3000:] + p.stderr[-3000:]


def _gh_ost(mariadb, db, writer: _Writer) -> None:
    """gh-ost's documented sequence of statements for ``ADD COLUMN c ... DEFAULT 7``, with
    its binlog-driven catch-up done as the statements it would apply: a changelog table,
    the ghost table altered, the rows copied in chunks while the writer writes, the writer's
    changes applied to the ghost, then the atomic cut-over (a sentry table dropped, one
    RENAME TABLE) and the cleanup."""
    run = lambda *sql: mariadb.execute(*sql, database=db)
    run("CREATE TABLE _t_ghc (id BIGINT AUTO_INCREMENT, last_update TIMESTAMP NOT NULL DEFAULT "
        "CURRENT_TIMESTAMP, hint VARCHAR(64) NOT NULL, value VARCHAR(4096) NOT NULL, "
        "PRIMARY KEY (id), UNIQUE KEY hint_uidx (hint))",
        "INSERT INTO _t_ghc (hint, value) VALUES ('state', 'GhostTableMigrated')",
        "CREATE TABLE _t_gho LIKE t",
        "ALTER TABLE _t_gho ADD COLUMN c INT NOT NULL DEFAULT 7")
    hi = mariadb.query(f"SELECT MAX(id) FROM `{db}`.t")[0][0]
    for lo in range(0, hi + 1, 1000):  # the row copy, in chunks, under writes
        run(f"INSERT IGNORE INTO _t_gho (id, v) SELECT id, v FROM t FORCE INDEX (PRIMARY) "
            f"WHERE id BETWEEN {lo} AND {lo + 999} LOCK IN SHARE MODE",
            "INSERT INTO _t_ghc (hint, value) VALUES ('heartbeat', NOW()) "
            "ON DUPLICATE KEY UPDATE value = VALUES(value)")
    writer.stop.set()  # gh-ost holds writes back while it cuts over
    writer.join()
    # the changes it read from the binlog meanwhile, applied to the ghost
    run("REPLACE INTO _t_gho (id, v, c) SELECT t.id, t.v, COALESCE(g.c, 7) FROM t "
        "LEFT JOIN _t_gho g ON g.id = t.id",
        "DELETE g FROM _t_gho g LEFT JOIN t ON t.id = g.id WHERE t.id IS NULL",
        "CREATE TABLE _t_del (id INT AUTO_INCREMENT PRIMARY KEY) "
        "COMMENT='ghost-cut-over-sentry'",
        "DROP TABLE IF EXISTS _t_del",
        "rename /* gh-ost */ table t to _t_del, _t_gho to t",
        "DROP TABLE _t_del", "DROP TABLE _t_ghc")


def _pt_osc_run(mariadb, db, writer: _Writer) -> None:
    _pt_osc(mariadb, db, "ADD COLUMN c INT NOT NULL DEFAULT 7")
    writer.stop.set()
    writer.join()


TOOLS = {"pt-online-schema-change": _pt_osc_run, "gh-ost": _gh_ost}


@pytest.mark.long
@pytest.mark.parametrize("tool", sorted(TOOLS))
def test_an_online_schema_change_under_writes(spark, mariadb, db, tmp_path, tool):
    if tool == "pt-online-schema-change":
        assert shutil.which("pt-online-schema-change"), "make setup installs percona-toolkit"
    mariadb.execute("CREATE TABLE t (id INT PRIMARY KEY, v INT)",
                    f"INSERT INTO t SELECT seq, seq FROM {seq(mariadb, 6000)}",
                    "CREATE TABLE other (id INT PRIMARY KEY)", "INSERT INTO other VALUES (1)",
                    database=db)
    defn = _defn(mariadb, db, tmp_path)
    runner = Runner(defn, spark)
    thread = threading.Thread(target=runner.run, daemon=True)
    thread.start()
    writer = _Writer(mariadb, db)
    try:
        deadline = time.monotonic() + 180
        while "t" not in _targets(tmp_path, db) or len(_target(tmp_path, db, "t")) < 6000:
            assert time.monotonic() < deadline, "the snapshot did not land"
            time.sleep(0.5)
        writer.start()
        TOOLS[tool](mariadb, db, writer)
        assert writer.error is None, writer.error
        # after the swap: the table streams on with its new column
        mariadb.execute("INSERT INTO t (id, v, c) VALUES (999999, 1, 42)",
                        "UPDATE t SET c = 8 WHERE id = 5", database=db)
        time.sleep(2)
    finally:
        writer.stop.set()
        runner.stop()
        thread.join(120)
    Runner(defn, spark, until_caught_up=True).run()  # caught up to the server
    assert _targets(tmp_path, db) == ["other", "t"]  # no helper table became a target
    got, want = _target(tmp_path, db, "t"), _source(mariadb, db, "t")
    assert got == want
    assert want[1] == (7, 1) and want[5][0] == 8 and want[999999] == (42, 1)
