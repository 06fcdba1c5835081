"""Server validation against real servers, healthy and misconfigured on purpose: the tests
that need only a source run on MariaDB 10.11 and on MySQL 9.7 (the ``server`` fixture)."""

from __future__ import annotations

import pickle
import secrets
from pathlib import Path

import pytest

from sparkcdc.errors import ServerConfigError
from sparkcdc.mysql.connection import ConnectionOptions
from sparkcdc.mysql.grants import parse_grants
from sparkcdc.mysql.server_info import parse_version
from sparkcdc.mysql.validation import (
    check_server,
    check_warnings,
    inspect_server,
    validate_all,
    validate_server,
)
from sparkcdc.testing.mariadb import MariaDBSandbox, ServerSettings
from sparkcdc.testing.mysql import MySQLSandbox, MySQLSettings


def _cdc(sb: MariaDBSandbox, user: str | None = None, password: str | None = None):
    i = sb.info
    return ConnectionOptions(hostname=i.host, port=i.port, username=user or i.cdc_user,
                             password=password or i.cdc_password, max_retries=0)


def _admin(sb: MariaDBSandbox) -> ConnectionOptions:
    i = sb.info
    return ConnectionOptions(hostname=i.host, port=i.port, username=i.admin_user,
                             password=i.admin_password, max_retries=0)


def _single_problem(sb: MariaDBSandbox, check: str, **kw) -> ServerConfigError:
    with pytest.raises(ServerConfigError) as e:
        validate_server(_cdc(sb), **kw)
    err = e.value
    assert err.check == check, str(err)
    assert err.fix, "every problem names its fix"
    assert sb.info.cdc_password not in str(err)
    return err


def _client_privilege(sb: MariaDBSandbox) -> str:
    """What the server calls the privilege to read binlog positions."""
    return "REPLICATION CLIENT" if sb.info.server == "mysql" else "BINLOG MONITOR"


@pytest.fixture
def user(server):
    """A throwaway user on the session server with the privileges a test grants it."""
    name, password = f"u_{secrets.token_hex(4)}", secrets.token_urlsafe(10)
    server.execute(f"CREATE USER '{name}'@'%' IDENTIFIED BY '{password}'")

    def grant(*statements: str) -> ConnectionOptions:
        server.execute(*(s.format(user=f"'{name}'@'%'") for s in statements))
        return _cdc(server, name, password)

    yield grant
    server.execute(f"DROP USER '{name}'@'%'")


# -- healthy -----------------------------------------------------------------------------------


def test_healthy_server_passes(server, server_db):
    db = server_db
    info = validate_server(_cdc(server), server_ids=[5400, 5401], databases=[db])
    if server.info.server == "mysql":
        assert info.flavor == "mysql" and info.version >= (9, 0, 0)
    else:
        assert info.flavor == "mariadb" and info.version >= (10, 4, 0)
    assert info.server_id == server.info.server_id
    assert (info.log_bin, info.binlog_format, info.binlog_row_image,
            info.binlog_row_metadata) == (True, "ROW", "FULL", "FULL")
    assert info.gtid_mode == "ON" and info.gtid_position
    assert info.user == "'cdc'@'%'"
    assert info.replication_client_name == _client_privilege(server)
    if server.info.server == "mysql":
        # MySQL lets REPLICATION SLAVE list the replicas (SHOW REPLICAS): none here
        assert info.replica_server_ids == ()
    else:
        # MariaDB's least-privileged CDC user cannot list replicas: said, not failed
        assert info.replica_server_ids is None
        assert any("replica" in w for w in info.warnings)
    assert validate_all(_cdc(server), server_ids=[5400], databases=[db]) == []


def test_a_server_compressing_its_binlog_passes(mariadb_compressed):
    """MariaDB's log_bin_compress is read (binlog/protocol/ inflates its events): nothing
    to report about it."""
    sb = mariadb_compressed
    assert sb.query("SELECT @@log_bin_compress")[0][0] == 1
    info = validate_server(_cdc(sb), server_ids=[5400])
    assert not any("compress" in w for w in info.warnings)
    assert validate_all(_cdc(sb), server_ids=[5400]) == []


# -- binlog configuration, one misconfigured server each ---------------------------------------


def test_binlog_off():
    with MariaDBSandbox(ServerSettings.misconfigured("no-binlog"), name="v-nobinlog") as sb:
        err = _single_problem(sb, "log_bin")
        assert "log_bin=OFF" in err.message and "--log-bin" in err.fix
        # all problems at once: the binlog is off, and its (default) format is not ROW either
        problems = validate_all(_cdc(sb))
        assert problems[0].check == "log_bin"
        assert len({p.check for p in problems}) == len(problems)


@pytest.mark.parametrize("variant,value", [("statement", "STATEMENT"), ("mixed", "MIXED")])
def test_binlog_format_not_row(variant, value):
    with MariaDBSandbox(ServerSettings.misconfigured(variant), name=f"v-{variant}") as sb:
        err = _single_problem(sb, "binlog_format")
        assert f"binlog_format is {value}" in err.message
        assert "SET GLOBAL binlog_format = 'ROW'" in err.fix and "my.cnf" in err.fix
        assert [p.check for p in validate_all(_cdc(sb))] == ["binlog_format"]


def test_binlog_row_image_minimal():
    with MariaDBSandbox(ServerSettings.misconfigured("minimal-image"), name="v-img") as sb:
        err = _single_problem(sb, "binlog_row_image")
        assert "binlog_row_image is MINIMAL" in err.message
        assert "SET GLOBAL binlog_row_image = 'FULL'" in err.fix


def test_binlog_row_image_noblob():
    with MariaDBSandbox(ServerSettings.misconfigured("noblob-image"), name="v-noblob") as sb:
        assert "NOBLOB" in _single_problem(sb, "binlog_row_image").message


def test_binlog_row_metadata_minimal():
    with MariaDBSandbox(ServerSettings.misconfigured("minimal-metadata"), name="v-meta") as sb:
        err = _single_problem(sb, "binlog_row_metadata")
        assert "binlog_row_metadata is MINIMAL" in err.message
        assert "SET GLOBAL binlog_row_metadata = 'FULL'" in err.fix


@pytest.mark.parametrize("variant,check,said", [
    ("no-binlog", "log_bin", "log_bin=OFF"),
    ("minimal-image", "binlog_row_image", "binlog_row_image is MINIMAL"),
    ("noblob-image", "binlog_row_image", "NOBLOB"),
    ("minimal-metadata", "binlog_row_metadata", "binlog_row_metadata is MINIMAL"),
])
def test_a_misconfigured_mysql_is_named_with_its_fix(variant, check, said):
    with MySQLSandbox(MySQLSettings.misconfigured(variant), name=f"v-my-{variant}") as sb:
        problems = validate_all(_cdc(sb))
        assert problems and problems[0].check == check, [str(p) for p in problems]
        assert said in problems[0].message and problems[0].fix
        assert sb.info.cdc_password not in " ".join(str(p) for p in problems)


# -- versions ----------------------------------------------------------------------------------


def test_too_old_version_is_refused():
    with MariaDBSandbox(ServerSettings(version="10.3.39-MariaDB-log"), name="v-old") as sb:
        err = _single_problem(sb, "version")
        assert "MariaDB 10.3.39" in err.message and "upgrade" in err.fix
        assert "10.4" in err.fix


def test_mariadb_pretending_to_be_mysql_57_is_recognised():
    with MariaDBSandbox(ServerSettings(version="5.7.19-10.11.19-log"), name="v-57") as sb:
        info = validate_server(_cdc(sb))
        assert info.version_string == "5.7.19-10.11.19-log"
        assert (info.flavor, info.version) == ("mariadb", (10, 11, 19))


@pytest.mark.parametrize("version,comment,expected", [
    ("10.11.19-MariaDB-0+deb12u1", "Debian 12", ("mariadb", (10, 11, 19))),
    ("5.5.5-10.6.16-MariaDB-log", "", ("mariadb", (10, 6, 16))),
    ("11.4.2-MariaDB", "mariadb.org binary distribution", ("mariadb", (11, 4, 2))),
    ("8.0.36", "MySQL Community Server - GPL", ("mysql", (8, 0, 36))),
    ("8.4.0", "MySQL Community Server - GPL", ("mysql", (8, 4, 0))),
    ("5.7.44-log", "MySQL Community Server (GPL)", ("mysql", (5, 7, 44))),
    ("8.0.35-27", "Percona Server (GPL), Release 27", ("mysql", (8, 0, 35))),
    ("5.7.19-10.11.19-log", "mariadb.org binary distribution", ("mariadb", (10, 11, 19))),
    ("10.4", "", ("mysql", (10, 4, 0))),
])
def test_parse_version(version, comment, expected):
    assert parse_version(version, comment) == expected


def test_parse_version_flavor_hint_from_server_variables():
    # the comment says nothing: only the caller knows (from @@aria_block_size) it is MariaDB
    assert parse_version("5.7.19-10.11.19-log", "Debian 12") == ("mysql", (5, 7, 19))
    assert parse_version("5.7.19-10.11.19-log", "Debian 12", mariadb=True) == (
        "mariadb", (10, 11, 19))
    with pytest.raises(ServerConfigError, match="cannot read the server version"):
        parse_version("unknown")


# -- privileges --------------------------------------------------------------------------------


def test_user_lacking_replication_slave(server, server_db, user):
    db = server_db
    conn = user("GRANT SELECT, REPLICATION CLIENT ON *.* TO {user}")
    with pytest.raises(ServerConfigError) as e:
        validate_server(conn, databases=[db])
    err = e.value
    assert err.check == "privileges"
    assert "lacks REPLICATION SLAVE" in err.message
    assert "SELECT" not in err.message.split("lacks")[1].split(":")[0]
    assert f"GRANT REPLICATION SLAVE ON *.* TO '{conn.username}'@'%';" in err.fix
    assert conn.password not in str(err)


def test_user_lacking_select(server, server_db, user):
    db = server_db
    conn = user(f"GRANT REPLICATION SLAVE, {_client_privilege(server)} ON *.* TO {{user}}")
    with pytest.raises(ServerConfigError) as e:
        validate_server(conn, databases=[db])
    assert e.value.check == "privileges"
    assert f"lacks SELECT on {db}" in e.value.message
    assert f"GRANT SELECT ON `{db}`.* TO '{conn.username}'@'%';" in e.value.fix
    # without named databases, any SELECT at all is asked for
    with pytest.raises(ServerConfigError, match="GRANT SELECT ON \\*\\.\\*"):
        validate_server(conn)


def test_database_level_select_is_enough_for_that_database(server, server_db, user):
    db = server_db
    conn = user("GRANT REPLICATION SLAVE, REPLICATION CLIENT ON *.* TO {user}",
                f"GRANT SELECT ON `{db}`.* TO {{user}}")
    validate_server(conn, databases=[db])
    other = "not_granted_db"
    problems = validate_all(conn, databases=[db, other])
    assert [p.check for p in problems] == ["privileges"]
    assert f"SELECT on {other}" in problems[0].message and db not in problems[0].message


def test_user_lacking_everything_gets_one_grant_statement_per_scope(server, server_db, user):
    db = server_db
    conn = user()
    (problem,) = validate_all(conn, databases=[db])
    assert problem.check == "privileges"
    assert f"GRANT SELECT ON `{db}`.*" in problem.fix
    assert f"GRANT REPLICATION SLAVE, {_client_privilege(server)} ON *.*" in problem.fix


def test_all_privileges_cover_everything(server, server_db, user):
    conn = user("GRANT ALL PRIVILEGES ON *.* TO {user}")
    assert validate_all(conn, databases=[server_db]) == []


def test_parse_grants_spellings():
    g = parse_grants([
        "GRANT USAGE ON *.* TO `u`@`%` IDENTIFIED BY PASSWORD '*ABC'",
        "GRANT REPLICATION SLAVE,REPLICATION CLIENT ON *.* TO `u`@`%`",
        "GRANT SELECT, INSERT ON `shop\\_%`.* TO `u`@`%`",
        "GRANT SELECT (`a`, `b`) ON `hr`.`people` TO `u`@`%`",
        "GRANT SELECT ON `we``ird db`.`t 1` TO `u`@`%`",
        "GRANT `analyst`@`%` TO `u`@`%`",
        "GRANT PROXY ON ''@'%' TO 'u'@'%'",
    ])
    assert g.has_global("REPLICATION SLAVE") and g.has_global("REPLICATION CLIENT")
    assert not g.has_global("SELECT")
    assert g.can_select("shop_eu") and not g.can_select("shopXeu")
    assert not g.can_select("hr")  # column grants do not allow SELECT *
    assert g.can_select("we`ird db")
    assert g.roles == ("`analyst`@`%`",)


# -- server ids --------------------------------------------------------------------------------


def test_server_id_equal_to_the_servers_own_id(server):
    own = server.info.server_id
    err = _single_problem(server, "server_id", server_ids=[own - 1, own])
    assert f"server-id {own} is the source server's own @@server_id" in err.message
    assert "server-id option" in err.fix
    suggested = err.fix.split("'")[1]
    lo, _, hi = suggested.partition("-")
    assert own not in range(int(lo), int(hi or lo) + 1)


def test_server_id_out_of_range(server):
    assert _single_problem(server, "server_id", server_ids=[0]).message.startswith(
        "server-id 0 is out of range")


def test_server_id_clash_with_a_connected_replica(server, server_db):
    """A registered binlog reader shows in SHOW REPLICA HOSTS (MariaDB) or SHOW REPLICAS
    (MySQL), visible to a privileged user."""
    from pymysqlreplication import BinLogStreamReader

    db = server_db
    server.execute(f"CREATE TABLE `{db}`.t (id INT PRIMARY KEY)",
                   f"INSERT INTO `{db}`.t VALUES (1)")
    i = server.info
    reader = BinLogStreamReader(
        connection_settings={"host": i.host, "port": i.port, "user": i.admin_user,
                             "password": i.admin_password},
        server_id=7777, report_slave="clash-test", blocking=True)
    try:
        next(iter(reader), None)  # connect, register, read an event
        info = inspect_server(_admin(server))
        assert 7777 in info.replica_server_ids
        problems = check_server(info, server_ids=[7776, 7777])
        assert [p.check for p in problems] == ["server_id"]
        assert "7777 is already used by a replica" in problems[0].message
        assert "7777" not in problems[0].fix.split("'")[1]
    finally:
        reader.close()


def test_problems_pickle_with_their_check():
    info_problem = check_server(_fake_info(), server_ids=[1])[0]
    again = pickle.loads(pickle.dumps(info_problem))
    assert again.check == "server_id" and again.fix == info_problem.fix


def _fake_info():
    # a pure check needs no server: check_server is a function of ServerInfo
    from sparkcdc.mysql.server_info import ServerInfo

    return ServerInfo(flavor="mysql", version=(8, 0, 36), version_string="8.0.36",
                      server_id=1, log_bin=True, binlog_format="ROW", binlog_row_image="FULL",
                      binlog_row_metadata="FULL", gtid_mode="ON", gtid_position=None,
                      user="'cdc'@'%'",
                      grants=parse_grants([("GRANT SELECT, REPLICATION SLAVE, REPLICATION "
                                            "CLIENT ON *.* TO `cdc`@`%`")]),
                      replica_server_ids=())


def test_older_server_without_row_metadata_only_warns():
    from dataclasses import replace

    info = replace(_fake_info(), version=(5, 7, 44), binlog_row_metadata=None)
    assert check_server(info, server_ids=[5400]) == []
    mysql_super = replace(_fake_info(), grants=parse_grants(
        ["GRANT SELECT, REPLICATION SLAVE, SUPER ON *.* TO `cdc`@`%`"]))
    assert check_server(mysql_super) == []  # SUPER allows SHOW MASTER STATUS on MySQL


def test_privileges_held_through_a_role(server, server_db, user):
    role = f"r_{secrets.token_hex(4)}"
    server.execute(f"CREATE ROLE {role}", f"GRANT SELECT, REPLICATION SLAVE, "
                   f"{_client_privilege(server)} ON *.* TO {role}")
    # the default role: MariaDB says FOR the user, MySQL says TO
    default = "TO" if server.info.server == "mysql" else "FOR"
    try:
        conn = user(f"GRANT {role} TO {{user}}", f"SET DEFAULT ROLE {role} {default} {{user}}")
        info = validate_server(conn, databases=[server_db])
        assert info.grants.roles and not info.roles_unreadable
    finally:
        server.execute(f"DROP ROLE {role}")


# -- binlog settings sparkcdc reads, and the ones it cannot -----------------------------------

def test_mysql8_compression_and_partial_json_are_read_not_reported(monkeypatch):
    from dataclasses import replace

    from sparkcdc.mysql import validation as V

    info = replace(_fake_info(), binlog_transaction_compression="ON",
                   binlog_row_value_options="PARTIAL_JSON", binlog_checksum="CRC32",
                   binlog_encryption="ON")
    assert check_server(info) == []
    assert check_server(replace(info, binlog_checksum="NONE")) == []
    # without zstandard where sparkcdc runs, compressed transactions cannot be read
    real = V.importlib.util.find_spec
    monkeypatch.setattr(V.importlib.util, "find_spec",
                        lambda name: None if name == "zstandard" else real(name))
    [problem] = check_server(info)
    assert problem.check == "binlog_transaction_compression"
    assert "pip install zstandard" in problem.fix and "= OFF" in problem.fix
    assert check_server(replace(info, binlog_transaction_compression="OFF")) == []


def test_partial_json_needs_the_full_before_image_and_an_unknown_checksum_is_named():
    from dataclasses import replace

    info = replace(_fake_info(), binlog_row_value_options="PARTIAL_JSON",
                   binlog_row_image="MINIMAL")
    [problem] = check_server(info)
    assert problem.check == "binlog_row_image" and "PARTIAL_JSON" in problem.message
    [problem] = check_server(replace(_fake_info(), binlog_checksum="XXH64"))
    assert problem.check == "binlog_checksum" and "CRC32" in problem.fix


@pytest.fixture(scope="module")
def encrypted(tmp_path_factory):
    """A MariaDB whose binlog is encrypted at rest (encrypt_binlog=ON)."""
    base = tmp_path_factory.mktemp("encrypted")
    keys = base / "keys.txt"
    keys.write_text("1;" + secrets.token_hex(32) + "\n")
    settings = ServerSettings(extra_args=(
        "--plugin-load-add=file_key_management", f"--file-key-management-filename={keys}",
        "--encrypt-binlog=ON"))
    with MariaDBSandbox(name="validate-encrypted", settings=settings, base_dir=base) as sb:
        sb.execute("CREATE DATABASE e", "CREATE TABLE e.t (id INT PRIMARY KEY, v JSON)")
        yield sb


def test_an_encrypted_mariadb_binlog_is_valid_and_read(encrypted):
    from sparkcdc.core.schema import TableId
    from sparkcdc.mysql.binlog.reader import BinlogReader
    from sparkcdc.mysql.offsets import current_offset

    conn = _cdc(encrypted)
    info = validate_server(conn)
    assert (info.binlog_encryption, info.binlog_checksum) == ("ON", "CRC32")
    assert info.binlog_transaction_compression is None  # MySQL's only
    start = current_offset(conn)
    encrypted.execute("INSERT INTO e.t VALUES (1, '{\"a\": [1, 2]}')",
                      "UPDATE e.t SET v = JSON_SET(v, '$.a[0]', 3) WHERE id = 1")
    end = current_offset(conn)
    recs = list(BinlogReader(conn, 7710, [TableId("e", "t")]).read_window(start, end))
    assert [(r.op, r.after) for r in recs] == [("c", {"id": 1, "v": '{"a": [1, 2]}'}),
                                                ("u", {"id": 1, "v": '{"a": [3, 2]}'})]
    on_disk = (Path(encrypted.info.datadir) / end.file).read_bytes()
    assert b'{"a": [3, 2]}' not in on_disk  # encrypted at rest; the dump sent it decrypted


# -- MySQL's GTID and retention settings (warnings with their fix; errors where they block) ----

GTID_START = "3e11fa47-71ca-11e1-9e33-c80aa9429562:1-5"


@pytest.fixture(scope="module")
def mysql_no_gtid():
    with MySQLSandbox(MySQLSettings.misconfigured("no-gtid"), name="v-my-nogtid") as sb:
        yield sb


def test_mysql_without_gtids_is_warned_with_the_fix(mysql_no_gtid, caplog):
    sb = mysql_no_gtid
    with caplog.at_level("WARNING", logger="sparkcdc.validate"):
        assert validate_all(_cdc(sb)) == []  # file/position capture works: not a problem
    [logged] = [r for r in caplog.records if r.name == "sparkcdc.validate"]
    assert logged.getMessage().startswith("gtid_mode: gtid_mode is OFF on MySQL 9.")
    info = inspect_server(_cdc(sb))
    [warning] = check_warnings(info)
    assert warning.check == "gtid_mode"
    assert "failover" in warning.message and "scan.startup.specific-offset.gtid-set" in \
        warning.message
    assert "gtid_mode=ON" in warning.fix and "enforce_gtid_consistency=ON" in warning.fix
    assert any(w.startswith("gtid_mode is OFF") for w in info.warnings)
    assert validate_server(_cdc(sb)).gtid_mode == "OFF"


def test_a_gtid_start_on_mysql_without_gtids_is_an_error(mysql_no_gtid):
    from sparkcdc.mysql.dialect import MySQLDialect
    from sparkcdc.mysql.options import StartupOffset

    sb = mysql_no_gtid
    [problem] = validate_all(_cdc(sb), gtid_start=GTID_START)
    assert problem.check == "gtid_mode"
    assert GTID_START in problem.message and "gtid_mode=OFF" in problem.message
    assert "scan.startup.specific-offset.file" in problem.fix and "gtid_mode=ON" in problem.fix
    with pytest.raises(ServerConfigError) as e:
        validate_server(_cdc(sb), gtid_start=GTID_START)
    assert e.value.check == "gtid_mode"
    # where a stream starts: the same error, not a search of a binlog without GTIDs
    with MySQLDialect(_cdc(sb)) as d, pytest.raises(ServerConfigError) as e:
        d.specific_offset(StartupOffset(gtid_set=GTID_START))
    assert e.value.check == "gtid_mode" and "gtid_mode=OFF" in e.value.message
    # a file and position need no GTIDs
    with MySQLDialect(_cdc(sb)) as d:
        here = d.current_offset()
        got = d.specific_offset(StartupOffset(file=here.file, pos=4))
        assert (got.file, got.pos) == (here.file, 4)


def test_a_gtid_start_on_servers_with_gtids_is_no_problem(server):
    assert validate_all(_cdc(server), gtid_start=GTID_START) == []


def test_mysql_halfway_to_gtids_is_warned_twice():
    settings = MySQLSettings.misconfigured("gtid-permissive")
    with MySQLSandbox(settings, name="v-my-permissive") as sb:
        assert validate_all(_cdc(sb)) == []
        warnings = check_warnings(inspect_server(_cdc(sb)))
        assert [w.check for w in warnings] == ["gtid_mode", "enforce_gtid_consistency"]
        mode, consistency = warnings
        assert "ON_PERMISSIVE" in mode.message and "SET GLOBAL gtid_mode = ON" in mode.fix
        assert "enforce_gtid_consistency is WARN" in consistency.message
        assert "SET GLOBAL enforce_gtid_consistency = ON" in consistency.fix
        # ON_PERMISSIVE logs GTIDs for new transactions: a GTID start can be found
        assert validate_all(_cdc(sb), gtid_start=GTID_START) == []


def test_mysql_keeping_binlogs_an_hour_is_warned():
    with MySQLSandbox(MySQLSettings.misconfigured("short-expiry"), name="v-my-expiry") as sb:
        assert validate_all(_cdc(sb)) == []
        [warning] = check_warnings(inspect_server(_cdc(sb)))
        assert warning.check == "binlog_expire_logs_seconds"
        assert "binlog_expire_logs_seconds is 3600 (60 min)" in warning.message
        assert "SET PERSIST binlog_expire_logs_seconds = 604800" in warning.fix


def test_mysql_partial_json_with_a_minimal_image_is_one_problem():
    settings = MySQLSettings.misconfigured("partial-json-minimal")
    with MySQLSandbox(settings, name="v-my-pjson") as sb:
        [problem] = validate_all(_cdc(sb))
        assert problem.check == "binlog_row_image"
        assert "binlog_row_image is MINIMAL" in problem.message
        assert "PARTIAL_JSON" in problem.message
        assert "SET GLOBAL binlog_row_image = 'FULL'" in problem.fix


def test_healthy_servers_have_no_warnings(server, caplog):
    """The sandboxes are configured for CDC; on MariaDB nothing of this applies at all."""
    with caplog.at_level("WARNING", logger="sparkcdc.validate"):
        assert validate_all(_cdc(server)) == []
    assert not [r for r in caplog.records if r.name == "sparkcdc.validate"]
    assert check_warnings(inspect_server(_cdc(server))) == []


def test_warnings_are_mysql_only_and_pure():
    from dataclasses import replace

    mysql = replace(_fake_info(), enforce_gtid_consistency="ON", binlog_expire_seconds=2592000)
    assert check_warnings(mysql) == []
    assert [w.check for w in check_warnings(replace(mysql, gtid_mode="OFF"))] == ["gtid_mode"]
    assert [w.check for w in check_warnings(replace(mysql, binlog_expire_seconds=600))] == [
        "binlog_expire_logs_seconds"]
    # auto purge off, or kept forever: nothing is purged behind the pipeline's back
    assert check_warnings(replace(mysql, binlog_expire_seconds=600,
                                  binlog_auto_purge=False)) == []
    assert check_warnings(replace(mysql, binlog_expire_seconds=0)) == []
    # MariaDB: always GTIDs; its settings are not judged here
    maria = replace(mysql, flavor="mariadb", version=(10, 11, 9), gtid_mode="ON",
                    binlog_expire_seconds=600)
    assert check_warnings(maria) == []
    assert check_server(maria, gtid_start="0-1-5") == []
    # a value of binlog_row_value_options sparkcdc does not know is named
    [problem] = check_server(replace(mysql, binlog_row_value_options="PARTIAL_GEOMETRY"))
    assert problem.check == "binlog_row_value_options" and "PARTIAL_GEOMETRY" in problem.message
    assert "binlog_row_value_options = ''" in problem.fix


def _validate_cli(sb, tmp_path, extra_source=""):
    import os

    from cli_support import cli

    sb.execute("CREATE DATABASE IF NOT EXISTS shop",
               "CREATE TABLE IF NOT EXISTS shop.ok (id INT PRIMARY KEY)")
    o = sb.source_options()
    path = tmp_path / f"{sb.info.name}.yaml"
    path.write_text(f"""\
source:
  type: mysql
  hostname: {o['hostname']}
  port: {o['port']}
  username: {o['username']}
  password: ${{CLI_TEST_PW}}
  tables: shop.\\.*
{extra_source}sink:
  type: delta
  path: {tmp_path / 'lake'}
pipeline:
  name: validate
  checkpoint.location: {tmp_path / 'ckpt'}
""")
    return cli("validate", str(path), env={**os.environ, "CLI_TEST_PW": sb.info.cdc_password},
               timeout=120)


@pytest.mark.parametrize("kind", ["mariadb", "mysql"])
def test_cli_validate_on_a_server_without_binlog_is_one_message(kind, tmp_path):
    sandbox, settings = ((MySQLSandbox, MySQLSettings) if kind == "mysql"
                         else (MariaDBSandbox, ServerSettings))
    with sandbox(settings.misconfigured("no-binlog"), name=f"v-cli-{kind}") as sb:
        r = _validate_cli(sb, tmp_path)
    assert r.returncode == 1, r.stdout + r.stderr
    assert "Traceback" not in r.stdout + r.stderr, r.stderr
    assert "PROBLEM server (log_bin): binary logging is off" in r.stdout
    assert "fix: start the server with --log-bin" in r.stdout


def test_cli_validate_on_mysql_without_gtids_warns_and_passes(mysql_no_gtid, tmp_path):
    r = _validate_cli(mysql_no_gtid, tmp_path)
    assert r.returncode == 0, r.stdout + r.stderr
    assert "Traceback" not in r.stdout + r.stderr, r.stderr
    # the report lists the warning itself, with its fix (and it is not logged twice)
    out = " ".join(r.stdout.split())  # the console wraps long lines
    assert "WARNING server (gtid_mode): gtid_mode is OFF on MySQL 9." in out, r.stdout
    assert "fix: in my.cnf under [mysqld]: gtid_mode=ON and enforce_gtid_consistency=ON" in out
    assert "gtid_mode is OFF" not in r.stderr, r.stderr
    assert "OK: 1 table(s) ready to capture, 1 warning(s)" in r.stdout


def test_cli_validate_checks_the_pipelines_gtid_start(mysql_no_gtid, tmp_path):
    """A pipeline starting at a GTID set (scan.startup.specific-offset.gtid-set) on a MySQL
    that logs no GTIDs: ``sparkcdc validate`` says so, before a run would."""
    start = ("  scan.startup.mode: specific-offset\n"
             f"  scan.startup.specific-offset.gtid-set: {GTID_START}\n")
    r = _validate_cli(mysql_no_gtid, tmp_path, extra_source=start)
    assert r.returncode == 1, r.stdout + r.stderr
    assert "Traceback" not in r.stdout + r.stderr, r.stderr
    out = " ".join(r.stdout.split())  # the console wraps long lines
    assert f"PROBLEM server (gtid_mode): the start position is a GTID set ({GTID_START}" in \
        out, r.stdout
    assert "fix: start from a binlog file and position instead" in out
    assert r.stdout.count("PROBLEM") == 1 and "1 problem(s)" in r.stdout


def test_validate_pipeline_with_a_gtid_start_on_servers_with_gtids(server, tmp_path):
    from sparkcdc.pipeline.commands.validate import validate_pipeline
    from sparkcdc.pipeline.definition import parse_pipeline

    server.execute("CREATE DATABASE IF NOT EXISTS shop",
                   "CREATE TABLE IF NOT EXISTS shop.ok (id INT PRIMARY KEY)")
    o = server.source_options()
    gtid = server.query("SELECT @@GLOBAL.gtid_executed" if server.info.server == "mysql"
                        else "SELECT @@GLOBAL.gtid_binlog_pos")[0][0]
    defn = parse_pipeline(f"""\
source:
  type: mysql
  hostname: {o['hostname']}
  port: {o['port']}
  username: {o['username']}
  password: ${{PW}}
  tables: shop.ok
  scan.startup.mode: specific-offset
  scan.startup.specific-offset.gtid-set: "{gtid}"
sink:
  type: delta
  path: {tmp_path / 'lake'}
pipeline:
  name: validate
  checkpoint.location: {tmp_path / 'ckpt'}
""", "v.yaml", env={"PW": server.info.cdc_password})
    report = validate_pipeline(defn)
    assert report.ok, report.problems
    assert report.warnings == [] and report.tables == {"shop.ok": "shop.ok"}
