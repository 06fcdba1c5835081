"""Shared fixtures: one real MariaDB, one PostgreSQL, one Kafka broker and one SparkSession per
test session (each started when a test first asks for it).

tests/ mirrors the package: the test of ``sparkcdc/x/y.py`` is ``tests/x/test_y.py``; the
suites that cross rooms (faults, the CLI) have folders or files of their own."""

from __future__ import annotations

import os
import sys
import uuid

import pytest

from sparkcdc.testing.mariadb import MariaDBSandbox


@pytest.fixture(scope="session")
def mariadb():
    """One CDC-ready MariaDB server for the whole test session."""
    with MariaDBSandbox(name="tests") as sb:
        yield sb


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


@pytest.fixture(scope="session")
def kafka_broker():
    """One real Kafka broker (KRaft, one node; the jars `make setup` fetched) for the test
    session, started by the first test that asks for it."""
    from sparkcdc.testing.kafka import KafkaSandbox

    with KafkaSandbox(name="tests") as broker:
        yield broker
