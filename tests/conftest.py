"""Shared fixtures: one real MariaDB, one MySQL, one PostgreSQL, one Kafka broker and one
SparkSession per test session (each started when a test first asks for it).

tests/ mirrors the package: the test of ``sparkcdc/x/y.py`` is ``tests/x/test_y.py``; the
suites that cross rooms (faults, the CLI) have folders or files of their own."""

from __future__ import annotations

import os
import subprocess
import sys
import uuid

import pytest
from failover_support import FAILOVER_DB, FAILOVER_PASSWORD, FAILOVER_USER, tools

from sparkcdc.errors import SandboxError
from sparkcdc.testing import mysql as mysql_sandbox
from sparkcdc.testing.mariadb import MariaDBSandbox, _find_binary
from sparkcdc.testing.mysql import MySQLSandbox, MySQLSettings


def _binary_version(args: list[str], **kwargs) -> str:
    try:
        p = subprocess.run(args, capture_output=True, text=True, timeout=30, check=False,
                           **kwargs)
    except (OSError, subprocess.SubprocessError) as e:
        return f"not runnable ({e})"
    return (p.stdout or p.stderr).strip().splitlines()[0] if p.returncode == 0 else \
        f"not runnable: {(p.stderr or p.stdout).strip()[-200:]}"


def pytest_report_header(config):
    """The source servers the tests run against, as their binaries report themselves."""
    try:
        mariadb_version = _binary_version([_find_binary("mariadbd", "mysqld"), "--version"])
    except SandboxError as e:
        mariadb_version = f"not installed ({e.fix})"
    root = mysql_sandbox.mysql_root()
    if mysql_sandbox.installed():
        mysql_version = _binary_version(["chroot", str(root), mysql_sandbox.MYSQLD, "--version"])
    else:
        mysql_version = f"not installed in {root} (make setup)"
    return [f"source servers: MariaDB: {mariadb_version}",
            f"                MySQL: {mysql_version}"]


SOURCE_ENV = "SPARKCDC_TEST_SOURCE"


def pytest_addoption(parser):
    parser.addoption(
        "--source-tests-only", action="store_true",
        help="run only the tests that use the session's source server (the `mariadb` "
             "fixture, directly or through `db`, the `failover_pair` or `own_source`); with "
             "SPARKCDC_TEST_SOURCE=mysql, what `make test-mysql` runs: the rest does the "
             "same on either server")


def pytest_collection_modifyitems(config, items):
    if not config.getoption("--source-tests-only"):
        return
    source_fixtures = {"mariadb", "failover_pair", "own_source"}
    keep = [i for i in items if source_fixtures & set(getattr(i, "fixturenames", ()))]
    config.hook.pytest_deselected(items=[i for i in items if i not in keep])
    items[:] = keep


@pytest.fixture(scope="session")
def mariadb():
    """One CDC-ready MariaDB server for the whole test session. With
    ``SPARKCDC_TEST_SOURCE=mysql`` it is a MySQL 9.7 instead: the tests written for MariaDB
    then run against MySQL as they are (how docs/mysql-findings.md was made: a failure is either
    sparkcdc's on MySQL or MariaDB-only SQL in the test)."""
    source = os.environ.get(SOURCE_ENV, "mariadb")
    if source not in ("mariadb", "mysql"):
        raise pytest.UsageError(f"{SOURCE_ENV}={source!r}: use mariadb or mysql")
    cls = MySQLSandbox if source == "mysql" else MariaDBSandbox
    with cls(name="tests") as sb:
        yield sb


@pytest.fixture(scope="session")
def own_source():
    """The sandbox class of the session's source server (MariaDB, or MySQL 9.7 with
    ``SPARKCDC_TEST_SOURCE=mysql``), for a test that needs a server of its own (it purges
    the binlog other tests' checkpoints point into): ``with own_source(name="purge") as sb``.
    A test using it is one of the source's tests (``--source-tests-only``)."""
    return MySQLSandbox if os.environ.get(SOURCE_ENV, "mariadb") == "mysql" else MariaDBSandbox


@pytest.fixture(scope="session")
def mariadb_compressed():
    """A second CDC-ready MariaDB that compresses its binlog (``log_bin_compress=ON``) from
    the smallest length it allows (10 bytes) on: every row event and statement but the
    shortest is written compressed. Started by the first test that asks for it."""
    from sparkcdc.testing.mariadb import ServerSettings

    settings = ServerSettings(extra_args=("--log-bin-compress=ON",
                                          "--log-bin-compress-min-len=10"))
    with MariaDBSandbox(name="tests-compressed", settings=settings) as sb:
        yield sb


@pytest.fixture(scope="session")
def mysql_server():
    """One CDC-ready MySQL 9.7 server (GTIDs on) for the whole test session, started by the
    first test that asks for it (sparkcdc/testing/mysql.py; `make setup` installs it)."""
    with MySQLSandbox(name="tests-mysql") as sb:
        yield sb


@pytest.fixture(scope="session")
def mysql_compressed():
    """A second CDC-ready MySQL 9.7 with MySQL's space-saving binlog settings on:
    ``binlog_transaction_compression=ON`` (each transaction one zstd TRANSACTION_PAYLOAD
    event) and ``binlog_row_value_options=PARTIAL_JSON`` (JSON_SET, JSON_REPLACE and
    JSON_REMOVE logged as diffs, every UPDATE as a PARTIAL_UPDATE_ROWS event). Started by
    the first test that asks for it."""
    settings = MySQLSettings(extra_args=("--binlog-transaction-compression=ON",
                                         "--binlog-row-value-options=PARTIAL_JSON"))
    with MySQLSandbox(name="tests-mysql-compressed", settings=settings) as sb:
        yield sb


@pytest.fixture
def mysql_db(mysql_server):
    """A fresh database on the MySQL server per test; returns its name."""
    name = f"t_{uuid.uuid4().hex[:10]}"
    mysql_server.execute(f"CREATE DATABASE `{name}`")
    yield name
    mysql_server.execute(f"DROP DATABASE IF EXISTS `{name}`")


@pytest.fixture(params=["mariadb", "mysql"])
def server(request):
    """The source server, once per server: a test taking it runs on MariaDB 10.11 and on
    MySQL 9.7 (both sandboxes have one interface)."""
    return request.getfixturevalue("mariadb" if request.param == "mariadb" else "mysql_server")


@pytest.fixture
def server_db(server):
    """A fresh database on ``server`` per test; returns its name."""
    name = f"t_{uuid.uuid4().hex[:10]}"
    server.execute(f"CREATE DATABASE `{name}`")
    yield name
    server.execute(f"DROP DATABASE IF EXISTS `{name}`")


@pytest.fixture
def db(mariadb):
    """A fresh database per test; returns its name."""
    name = f"t_{uuid.uuid4().hex[:10]}"
    mariadb.execute(f"CREATE DATABASE `{name}`")
    yield name
    mariadb.execute(f"DROP DATABASE IF EXISTS `{name}`")


@pytest.fixture(scope="session")
def spark():
    """One local SparkSession tuned for 2 cores; created once (a new one costs ~7 s)."""
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    os.environ.setdefault("PYSPARK_DRIVER_PYTHON", sys.executable)
    from pyspark.sql import SparkSession

    session = (
        SparkSession.builder.master("local[2]")
        .appName("sparkcdc-tests")
        .config("spark.ui.enabled", "false")
        .config("spark.sql.shuffle.partitions", "2")
        .config("spark.default.parallelism", "2")
        .config("spark.sql.session.timeZone", "UTC")
        .config("spark.driver.memory", "2g")
        .config("spark.sql.execution.arrow.pyspark.enabled", "true")
        .config("spark.python.authenticate.socketTimeout", "120s")  # slow starts under load
        .getOrCreate()
    )
    session.sparkContext.setLogLevel("ERROR")
    yield session
    session.stop()


@pytest.fixture(scope="session")
def pg_server():
    """One real PostgreSQL server (Debian's binaries) for the test session."""
    from sparkcdc.testing.postgres import PostgresSandbox

    with PostgresSandbox() as pg:
        yield pg



@pytest.fixture
def failover_pair():
    """A primary and its GTID replica (MariaDB with ``log_slave_updates``; with
    ``SPARKCDC_TEST_SOURCE=mysql`` two MySQL 9.7, whose replicas log what they apply), a
    proxy in front of the primary (one address, as a virtual IP gives it), a CDC user
    ``pipe`` that both servers have (created on the primary after replication began) and
    database ``shop``. ``failover_support.tools`` gives the matching ``caught_up`` and
    ``promote``."""
    from sparkcdc.testing.mariadb import CDC_PRIVILEGES, ServerSettings
    from sparkcdc.testing.proxy import FaultProxy

    if os.environ.get(SOURCE_ENV, "mariadb") == "mysql":
        pair = (MySQLSandbox(name="my-primary"), MySQLSandbox(name="my-replica"))
    else:
        settings = ServerSettings(extra_args=("--log-slave-updates",))
        pair = (MariaDBSandbox(settings, name="primary"),
                MariaDBSandbox(settings, name="replica"))
    with pair[0] as primary, pair[1] as replica:
        tools(primary).replicate(primary, replica)
        primary.execute(
            f"CREATE USER '{FAILOVER_USER}'@'%' IDENTIFIED BY '{FAILOVER_PASSWORD}'",
            f"GRANT {CDC_PRIVILEGES} ON *.* TO '{FAILOVER_USER}'@'%'",
            f"CREATE DATABASE {FAILOVER_DB}")
        with FaultProxy(primary.info.host, primary.info.port) as proxy:
            yield primary, replica, proxy


@pytest.fixture(scope="session")
def kafka_broker():
    """One real Kafka broker (KRaft, one node; the jars `make setup` fetched) for the test
    session, started by the first test that asks for it."""
    from sparkcdc.testing.kafka import KafkaSandbox

    with KafkaSandbox(name="tests") as broker:
        yield broker
