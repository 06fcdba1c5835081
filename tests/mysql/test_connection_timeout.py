"""An unreachable source fails within connect.timeout with one clear message.

Two deterministic stand-ins for an unreachable host on loopback: a socket that listens (the
kernel completes the TCP handshake) but never answers, and a port nothing listens on.
Timing is asserted only against a generous bound.
"""

from __future__ import annotations

import socket
import time

import pytest

import sparkcdc
from sparkcdc.errors import ConnectionFailed
from sparkcdc.mysql.options import SourceConfig
from sparkcdc.testing.mariadb import free_port

SECRET = "s3cret-pw-not-in-messages"


@pytest.fixture
def silent_port():
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        s.listen(16)  # never accept(): connects succeed, nothing is ever sent
        yield s.getsockname()[1]


def _opts(port: int, **extra: str) -> dict[str, str]:
    return {"hostname": "127.0.0.1", "port": str(port), "username": "cdc",
            "password": SECRET, "database-name": "d", "table-name": "d\\.t",
            "connect.timeout": "2s", **extra}


def test_silent_server_times_out(silent_port):
    conn = SourceConfig.parse(_opts(silent_port)).connection
    t0 = time.monotonic()
    with pytest.raises(ConnectionFailed) as e:
        conn.connect()
    took = time.monotonic() - t0
    msg = str(e.value)
    assert f"cdc@127.0.0.1:{silent_port}" in msg and "within connect.timeout 2s" in msg
    assert "did not answer" in msg and "connect.timeout" in e.value.fix
    assert SECRET not in msg
    assert took < 30  # the 2 s budget, retries included; generous for a loaded machine


def test_closed_port_is_refused(spark):
    port = free_port()  # nothing listens there
    conn = SourceConfig.parse(_opts(port, **{"connect.max-retries": "2"})).connection
    with pytest.raises(ConnectionFailed) as e:
        conn.connect()
    assert "connection refused" in str(e.value) and "3 attempts" in str(e.value)
    # the same through the Spark source: one message, at load()
    sparkcdc.register(spark)
    t0 = time.monotonic()
    with pytest.raises(Exception) as e:
        spark.read.format("mysql-cdc").options(**_opts(port)).load()
    assert "connection refused" in str(e.value) and f"127.0.0.1:{port}" in str(e.value)
    assert SECRET not in str(e.value)
    assert time.monotonic() - t0 < 60


def test_connectorx_gets_the_timeout():
    opts = _opts(3306, **{"connect.timeout": "1500ms", "ssl.mode": "disabled"})
    conn = SourceConfig.parse(opts).connection
    assert "tcp_connect_timeout_ms=1500" in conn.connectorx_url()
    assert conn.pymysql_kwargs()["connect_timeout"] == 1.5
