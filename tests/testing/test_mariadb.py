"""The throwaway MariaDB: CDC settings, least privileges, misconfigured variants, clean stop."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import time

import pymysql
import pytest
from server_support import binlog_status

from sparkcdc.testing.mariadb import MariaDBSandbox, ServerSettings, port_in_use


def _vars(sb: MariaDBSandbox, *names: str) -> dict[str, str]:
    rows = sb.query("SHOW GLOBAL VARIABLES WHERE Variable_name IN ("
                    + ",".join(["%s"] * len(names)) + ")", names)
    return {k.lower(): v for k, v in rows}


def _cdc_connect(sb: MariaDBSandbox) -> pymysql.Connection:
    info = sb.info
    return pymysql.connect(host=info.host, port=info.port, user=info.cdc_user,
                           password=info.cdc_password, autocommit=True)


def test_server_runs_with_cdc_settings(mariadb):
    v = _vars(mariadb, "log_bin", "binlog_format", "binlog_row_image", "binlog_row_metadata",
              "server_id", "bind_address", "character_set_server")
    assert v == {
        "log_bin": "ON", "binlog_format": "ROW", "binlog_row_image": "FULL",
        "binlog_row_metadata": "FULL", "server_id": str(mariadb.info.server_id),
        "bind_address": "127.0.0.1", "character_set_server": "utf8mb4",
    }


def test_cdc_user_reads_binlog_position_but_cannot_write(mariadb, db):
    mariadb.execute(f"CREATE TABLE `{db}`.t (id INT PRIMARY KEY)", f"INSERT INTO `{db}`.t VALUES (1)")
    with _cdc_connect(mariadb) as conn, conn.cursor() as cur:
        cur.execute(binlog_status(mariadb))
        file, pos = cur.fetchone()[:2]
        assert file.startswith("binlog.") and int(pos) > 0
        cur.execute(f"SELECT id FROM `{db}`.t")
        assert cur.fetchall() == ((1,),)
        cur.execute("SHOW GRANTS")
        grants = " ".join(r[0] for r in cur.fetchall())
        # MySQL 9 names the grant REPLICATION SLAVE still (SHOW GRANTS keeps the old words)
        assert "SELECT" in grants and "REPLICATION SLAVE" in grants
        for stmt in (f"INSERT INTO `{db}`.t VALUES (2)", f"DELETE FROM `{db}`.t",
                     f"CREATE TABLE `{db}`.u (id INT)", f"DROP TABLE `{db}`.t"):
            with pytest.raises(pymysql.err.OperationalError) as e:
                cur.execute(stmt)
            assert e.value.args[0] in (1142, 1044, 1227), e.value.args
    assert mariadb.query(f"SELECT id FROM `{db}`.t") == [(1,)]


@pytest.mark.parametrize("variant,var,expected", [
    ("statement", "binlog_format", "STATEMENT"),
    ("no-binlog", "log_bin", "OFF"),
    ("minimal-image", "binlog_row_image", "MINIMAL"),
    ("minimal-metadata", "binlog_row_metadata", "MINIMAL"),
])
def test_misconfigured_variants_really_are_misconfigured(variant, var, expected):
    with MariaDBSandbox(ServerSettings.misconfigured(variant), name=variant) as sb:
        assert _vars(sb, var)[var] == expected


def test_stop_leaves_no_process_or_port_behind():
    sb = MariaDBSandbox(name="stoptest")
    info = sb.start()
    assert port_in_use(info.port)
    pid = info.pid
    datadir = info.datadir
    sb.stop()
    assert not os.path.exists(f"/proc/{pid}") or _is_zombie(pid)
    assert not port_in_use(info.port)
    assert not os.path.exists(datadir)


def _is_zombie(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().split(")")[-1].split()[0] == "Z"
    except OSError:
        return True


def test_server_dies_with_a_killed_parent(tmp_path):
    """No orphan survives a SIGKILLed test run (parent-death signal)."""
    script = tmp_path / "child.py"
    script.write_text(
        "import sys, time\n"
        "from sparkcdc.testing.mariadb import MariaDBSandbox\n"
        "sb = MariaDBSandbox(name='orphan'); info = sb.start()\n"
        "print(info.pid, info.port, info.datadir, flush=True)\n"
        "time.sleep(600)\n"
    )
    child = subprocess.Popen([sys.executable, str(script)], stdout=subprocess.PIPE, text=True)
    pid, port, datadir = child.stdout.readline().split()
    pid, port = int(pid), int(port)
    assert port_in_use(port)
    child.kill()
    child.wait()
    deadline = time.monotonic() + 20
    while time.monotonic() < deadline and (port_in_use(port) or not _is_zombie_or_gone(pid)):
        time.sleep(0.1)
    assert not port_in_use(port)
    assert _is_zombie_or_gone(pid)
    # nor does its folder: the next sandbox to start sweeps it (sparkcdc/testing/leftovers.py)
    folder = os.path.dirname(datadir)
    assert os.path.isdir(folder)
    try:
        with MariaDBSandbox(name="sweeper") as sb:
            assert not os.path.exists(folder)
            assert os.path.isdir(os.path.dirname(sb.info.datadir))  # its own is kept
    finally:
        shutil.rmtree(folder, ignore_errors=True)


def _is_zombie_or_gone(pid: int) -> bool:
    return not os.path.exists(f"/proc/{pid}") or _is_zombie(pid)


def test_cli_start_status_stop(tmp_path):
    env = {**os.environ, "SPARKCDC_HOME": str(tmp_path)}
    cli = [sys.executable, "-m", "sparkcdc.cli", "sandbox"]
    out = subprocess.run(cli + ["start", "--name", "clitest"], env=env, capture_output=True,
                         text=True, check=True).stdout
    port = int(next(line.split(":")[1] for line in out.splitlines()
                    if line.strip().startswith("port:")))
    try:
        assert port_in_use(port)
        st = subprocess.run(cli + ["status", "--name", "clitest"], env=env, capture_output=True,
                            text=True, check=False)
        assert st.returncode == 0 and "running" in st.stdout and "******" in st.stdout
    finally:
        stop = subprocess.run(cli + ["stop", "--name", "clitest"], env=env, capture_output=True,
                              text=True, check=True)
    assert "stopped" in stop.stdout
    assert not port_in_use(port)
    st = subprocess.run(cli + ["status", "--name", "clitest"], env=env, capture_output=True,
                        text=True, check=False)
    assert st.returncode == 1


def test_spark_session_fixture_runs(spark):
    assert spark.range(10).selectExpr("sum(id)").first()[0] == 45
    assert spark.conf.get("spark.sql.shuffle.partitions") == "2"
