"""The throwaway MySQL 9.7: CDC settings with GTIDs, least privileges over TCP with
caching_sha2_password, misconfigured variants, a clean stop, no orphan, the CLI, and one clear
error when MySQL is not installed."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import time

import pymysql
import pytest

from sparkcdc.errors import SandboxError
from sparkcdc.testing.mysql import MySQLSandbox, MySQLSettings, port_in_use


def _vars(sb: MySQLSandbox, *names: str) -> dict[str, str]:
    rows = sb.query("SHOW GLOBAL VARIABLES WHERE Variable_name IN ("
                    + ",".join(["%s"] * len(names)) + ")", names)
    return {k.lower(): v for k, v in rows}


def _is_zombie_or_gone(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().split(")")[-1].split()[0] == "Z"
    except OSError:
        return True


def _cdc_connect(sb: MySQLSandbox) -> pymysql.Connection:
    info = sb.info
    return pymysql.connect(host=info.host, port=info.port, user=info.cdc_user,
                           password=info.cdc_password, autocommit=True)


def test_server_is_mysql_9_with_cdc_settings(mysql_server):
    assert mysql_server.server_version.startswith("9.")
    assert mysql_server.info.server == "mysql"
    v = _vars(mysql_server, "log_bin", "binlog_format", "binlog_row_image",
              "binlog_row_metadata", "gtid_mode", "enforce_gtid_consistency", "server_id",
              "bind_address", "character_set_server", "secure_file_priv")
    assert v == {
        "log_bin": "ON", "binlog_format": "ROW", "binlog_row_image": "FULL",
        "binlog_row_metadata": "FULL", "gtid_mode": "ON", "enforce_gtid_consistency": "ON",
        "server_id": str(mysql_server.info.server_id), "bind_address": "127.0.0.1",
        "character_set_server": "utf8mb4", "secure_file_priv": "",
    }
    # the datadir the host sees is the server's own (mysqld runs chrooted)
    assert os.path.isdir(os.path.join(mysql_server.info.datadir, "mysql"))
    (datadir,), = mysql_server.query("SELECT @@datadir")
    assert mysql_server.info.datadir.endswith(datadir.rstrip("/"))


def test_cdc_user_reads_binlog_status_and_gtids_but_cannot_write(mysql_server, mysql_db):
    db = mysql_db
    mysql_server.execute(f"CREATE TABLE `{db}`.t (id INT PRIMARY KEY)",
                         f"INSERT INTO `{db}`.t VALUES (1)")
    with _cdc_connect(mysql_server) as conn, conn.cursor() as cur:
        cur.execute("SHOW BINARY LOG STATUS")
        file, pos, _, _, gtids = cur.fetchone()
        assert file.startswith("binlog.") and int(pos) > 0
        (uuid,), = mysql_server.query("SELECT @@server_uuid")
        assert gtids.startswith(f"{uuid}:1-")
        cur.execute(f"SELECT id FROM `{db}`.t")
        assert cur.fetchall() == ((1,),)
        cur.execute("SHOW GRANTS")
        grants = " ".join(r[0] for r in cur.fetchall())
        assert grants == "GRANT SELECT, REPLICATION SLAVE, REPLICATION CLIENT ON *.* TO `cdc`@`%`"
        for stmt in (f"INSERT INTO `{db}`.t VALUES (2)", f"DELETE FROM `{db}`.t",
                     f"CREATE TABLE `{db}`.u (id INT)", f"DROP TABLE `{db}`.t"):
            with pytest.raises(pymysql.err.OperationalError) as e:
                cur.execute(stmt)
            assert e.value.args[0] in (1142, 1044, 1227), e.value.args
    assert mysql_server.query(f"SELECT id FROM `{db}`.t") == [(1,)]
    # MySQL 9's default password plugin: what a user of MySQL meets
    assert mysql_server.query("SELECT plugin FROM mysql.user WHERE user = 'cdc'") == \
        [("caching_sha2_password",)]


def test_load_data_and_into_outfile_work_inside_the_root(mysql_server, mysql_db):
    """``--secure-file-priv=`` (empty): the server writes and reads files anywhere in its
    root; the host finds them under the root."""
    info = mysql_server.info
    inner = "/" + os.path.relpath(os.path.join(os.path.dirname(info.datadir), "out.csv"),
                                  str(mysql_server._chroot))
    mysql_server.execute(f"CREATE TABLE `{mysql_db}`.t (id INT PRIMARY KEY, s TEXT)",
                         f"INSERT INTO `{mysql_db}`.t VALUES (1, 'a'), (2, 'b')",
                         f"SELECT * FROM `{mysql_db}`.t INTO OUTFILE '{inner}'")
    host = os.path.join(os.path.dirname(info.datadir), "out.csv")
    with open(host) as f:
        assert f.read() == "1\ta\n2\tb\n"


@pytest.mark.parametrize("variant,var,expected", [
    ("no-binlog", "log_bin", "OFF"),
    ("minimal-image", "binlog_row_image", "MINIMAL"),
    ("minimal-metadata", "binlog_row_metadata", "MINIMAL"),
    ("no-gtid", "gtid_mode", "OFF"),
    ("gtid-permissive", "gtid_mode", "ON_PERMISSIVE"),
    ("short-expiry", "binlog_expire_logs_seconds", "3600"),
    ("partial-json-minimal", "binlog_row_value_options", "PARTIAL_JSON"),
])
def test_misconfigured_variants_really_are_misconfigured(variant, var, expected):
    with MySQLSandbox(MySQLSettings.misconfigured(variant), name=variant) as sb:
        assert _vars(sb, var)[var] == expected


def test_each_sandbox_has_a_server_uuid_of_its_own(mysql_server):
    """Datadirs are copies of one template: its auto.cnf is left out, so each server makes
    its own UUID (GTIDs name their server by it; a replica refuses a source with its own)."""
    with MySQLSandbox(name="uuid") as other:
        mine = mysql_server.query("SELECT @@server_uuid")[0][0]
        assert other.query("SELECT @@server_uuid")[0][0] != mine
        assert other.query("SELECT @@gtid_executed")[0][0].startswith(
            other.query("SELECT @@server_uuid")[0][0])


def test_unknown_misconfiguration_names_the_choices():
    with pytest.raises(SandboxError) as e:
        MySQLSettings.misconfigured("bogus")
    assert "bogus" in e.value.message and "no-gtid" in e.value.fix


def test_stop_and_restart_leave_no_process_or_port_behind():
    sb = MySQLSandbox(name="stoptest")
    info = sb.start()
    assert port_in_use(info.port)
    sb.execute("CREATE DATABASE kept", "CREATE TABLE kept.t (id INT PRIMARY KEY)",
               "INSERT INTO kept.t VALUES (7)")
    first_pid = info.pid
    sb.restart()
    assert sb.info.pid != first_pid and _is_zombie_or_gone(first_pid)
    assert sb.query("SELECT id FROM kept.t") == [(7,)]
    pid, root = sb.info.pid, os.path.dirname(info.datadir)
    sb.stop()
    assert _is_zombie_or_gone(pid)
    assert not port_in_use(info.port)
    assert not os.path.exists(root)


def test_server_dies_with_a_killed_parent(tmp_path):
    """No orphan mysqld survives a SIGKILLed test run (parent-death signal, set before the
    chroot: the pid is mysqld's own)."""
    script = tmp_path / "child.py"
    script.write_text(
        "import sys, time\n"
        "from sparkcdc.testing.mysql import MySQLSandbox\n"
        "sb = MySQLSandbox(name='orphan'); info = sb.start()\n"
        "print(info.pid, info.port, info.datadir, flush=True)\n"
        "time.sleep(600)\n"
    )
    child = subprocess.Popen([sys.executable, str(script)], stdout=subprocess.PIPE, text=True)
    pid, port, datadir = child.stdout.readline().split()
    pid, port = int(pid), int(port)
    with open(f"/proc/{pid}/comm") as comm:
        assert comm.read().strip() == "mysqld"
    assert port_in_use(port)
    child.kill()
    child.wait()
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline and (port_in_use(port) or not _is_zombie_or_gone(pid)):
        time.sleep(0.1)
    assert not port_in_use(port)
    assert _is_zombie_or_gone(pid)
    # a killed parent cleans up nothing: its folder (~200 MB) is swept by the next sandbox
    # to start (sparkcdc/testing/leftovers.py)
    folder = os.path.dirname(datadir)
    assert os.path.isdir(folder)
    try:
        with MySQLSandbox(name="sweeper") as sb:
            assert not os.path.exists(folder)
            assert os.path.isdir(os.path.dirname(sb.info.datadir))  # its own is kept
    finally:
        shutil.rmtree(folder, ignore_errors=True)


def test_cli_start_status_stop(tmp_path):
    env = {**os.environ, "SPARKCDC_HOME": str(tmp_path)}
    cli = [sys.executable, "-m", "sparkcdc.cli", "sandbox"]
    out = subprocess.run(cli + ["start", "mysql", "--name", "clitest"], env=env,
                         capture_output=True, text=True, check=True).stdout
    assert "mysqld pid" in out and "sparkcdc sandbox stop mysql --name clitest" in out
    port = int(next(line.split(":")[1] for line in out.splitlines()
                    if line.strip().startswith("port:")))
    try:
        assert port_in_use(port)
        st = subprocess.run(cli + ["status", "mysql", "--name", "clitest"], env=env,
                            capture_output=True, text=True, check=False)
        assert st.returncode == 0 and "running" in st.stdout and "******" in st.stdout
        # MariaDB's sandbox of the same name is another one
        st = subprocess.run(cli + ["status", "--name", "clitest"], env=env,
                            capture_output=True, text=True, check=False)
        assert st.returncode == 1 and "not started" in st.stdout
        again = subprocess.run(cli + ["start", "mysql", "--name", "clitest"], env=env,
                               capture_output=True, text=True, check=False)
        assert again.returncode != 0 and "already running" in again.stderr
        assert "Traceback" not in again.stderr
    finally:
        stop = subprocess.run(cli + ["stop", "mysql", "--name", "clitest"], env=env,
                              capture_output=True, text=True, check=True)
    assert "stopped" in stop.stdout
    assert not port_in_use(port)
    st = subprocess.run(cli + ["status", "mysql", "--name", "clitest"], env=env,
                        capture_output=True, text=True, check=False)
    assert st.returncode == 1


def test_missing_install_is_one_clear_error(tmp_path, monkeypatch):
    monkeypatch.setenv("SPARKCDC_MYSQL_ROOT", str(tmp_path / "nowhere"))
    with pytest.raises(SandboxError) as e:
        MySQLSandbox(name="missing").start()
    assert "not installed" in e.value.message and "make setup" in e.value.fix
    env = {**os.environ, "SPARKCDC_HOME": str(tmp_path), "SPARKCDC_MYSQL_ROOT":
           str(tmp_path / "nowhere")}
    p = subprocess.run([sys.executable, "-m", "sparkcdc.cli", "sandbox", "start", "mysql"],
                       env=env, capture_output=True, text=True, check=False)
    assert p.returncode != 0 and "not installed" in p.stderr and "make setup" in p.stderr
    assert "Traceback" not in p.stderr
