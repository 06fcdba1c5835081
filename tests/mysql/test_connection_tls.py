"""TLS to the source: a MariaDB and a MySQL 9.7 with a self-signed CA, accounts that REQUIRE
SSL / X509.

An account with REQUIRE SSL is refused on any connection without TLS, so a capture that
works with it proves every connection (pymysql control connections, binlog streams,
connectorx chunk reads) used TLS. On MySQL the binlog stream goes through the reader's
event loop in C, fed by the TLS socket's reads.
"""

from __future__ import annotations

import random
import uuid

import pytest
from stream_support import stream_available

import sparkcdc
from sparkcdc.errors import ConfigError, TLSError
from sparkcdc.mysql.options import SourceConfig
from sparkcdc.testing.mariadb import CDC_PRIVILEGES, MariaDBSandbox, ServerSettings, make_tls_files
from sparkcdc.testing.mysql import MySQLSandbox, MySQLSettings

PW = "tls-" + uuid.uuid4().hex[:12]


@pytest.fixture(scope="module")
def certs(tmp_path_factory):
    base = tmp_path_factory.mktemp("tls")
    good = make_tls_files(base / "good")  # names 127.0.0.1 and localhost
    other = make_tls_files(base / "other", ca_name="another CA")
    return good, other


@pytest.fixture(scope="module", params=["mariadb", "mysql"])
def tls_server(certs, request):
    """Each test of a TLS server runs on a MariaDB and on a MySQL 9.7 serving these files."""
    good, _ = certs
    # also listening on 127.0.0.2, a name the certificate does not carry
    bind = ("--bind-address=127.0.0.1,127.0.0.2",)
    sandbox = (MySQLSandbox(MySQLSettings(tls=good, extra_args=bind), name="tls-mysql")
               if request.param == "mysql"
               else MariaDBSandbox(ServerSettings(tls=good, extra_args=bind), name="tls"))
    with sandbox as sb:
        sb.execute(f"CREATE USER tlsuser@'%' IDENTIFIED BY '{PW}' REQUIRE SSL",
                   f"GRANT {CDC_PRIVILEGES} ON *.* TO tlsuser@'%'",
                   f"CREATE USER x509user@'%' IDENTIFIED BY '{PW}' REQUIRE X509",
                   f"GRANT {CDC_PRIVILEGES} ON *.* TO x509user@'%'")
        yield sb


@pytest.fixture(scope="module", autouse=True)
def _register(spark):
    sparkcdc.register(spark)


def _opts(sb, db, host="127.0.0.1", user="tlsuser", **extra):
    base = random.randint(10_000, 4_000_000_000)
    return {"hostname": host, "port": str(sb.info.port), "username": user, "password": PW,
            "database-name": db, "table-name": f"{db}\\.t", "server-id": f"{base}-{base + 3}",
            "connect.timeout": "10s", **extra}


@pytest.fixture
def tdb(tls_server):
    name = f"t_{uuid.uuid4().hex[:10]}"
    tls_server.execute(
        f"CREATE DATABASE `{name}`",
        f"CREATE TABLE `{name}`.t (id INT PRIMARY KEY, v VARCHAR(20), d DECIMAL(12,3), "
        f"ts DATETIME(3), b VARBINARY(8), j JSON, tm TIME)",
        f"INSERT INTO `{name}`.t VALUES (1, 'one', 1.5, '2024-01-02 03:04:05.678', x'0102', "
        f"'{{\"a\": 1}}', '-01:02:03'), (2, 'twö', NULL, NULL, NULL, NULL, NULL), "
        f"(3, 'three', -7.125, '1999-12-31 23:59:59', x'', '[]', '838:59:59')")
    yield name
    tls_server.execute(f"DROP DATABASE IF EXISTS `{name}`")


def _rows(df):
    return sorted(tuple(r)[:7] for r in df.collect())


def test_tls_options_are_checked(certs, tmp_path):
    good, _ = certs
    base = {"hostname": "h", "username": "u", "database-name": "d", "table-name": "t"}

    def err(**o):
        with pytest.raises(ConfigError) as e:
            SourceConfig.parse({**base, **o})
        return str(e.value)

    assert "verify_ca" in err(**{"ssl.mode": "verfy-ca"})  # did you mean
    assert "needs 'ssl.ca'" in err(**{"ssl.mode": "verify_identity"})
    missing = str(tmp_path / "nope.pem")
    assert "cannot read" in err(**{"ssl.mode": "verify_ca", "ssl.ca": missing})
    junk = tmp_path / "junk.pem"
    junk.write_text("not a certificate")
    assert "not usable" in err(**{"ssl.mode": "verify_ca", "ssl.ca": str(junk)})
    assert "does not check" in err(**{"ssl.mode": "required", "ssl.ca": good.ca})
    assert "go together" in err(**{"ssl.mode": "required", "ssl.cert": good.client_cert})
    conn = SourceConfig.parse({**base, "ssl.mode": "VERIFY_CA", "ssl.ca": good.ca}).connection
    assert (conn.ssl_mode, conn.ssl_ca) == ("verify_ca", good.ca)
    url = conn.connectorx_url()
    assert "ssl-mode=VERIFY_CA" in url and "tcp_connect_timeout_ms=30000" in url
    assert SourceConfig.parse(base).connection.ssl_mode == "preferred"


def test_verify_ca_batch_and_stream(spark, tls_server, tdb, certs, tmp_path):
    good, _ = certs
    opts = _opts(tls_server, tdb, **{"ssl.mode": "verify_ca", "ssl.ca": good.ca})
    df = spark.read.format("mysql-cdc").options(**opts).load()
    rows = _rows(df)
    assert [r[:2] for r in rows] == [(1, "one"), (2, "twö"), (3, "three")]

    seen: list = []

    def run():
        stream_available(spark, opts, tmp_path / "ckpt", seen)

    run()
    tls_server.execute(f"UPDATE `{tdb}`.t SET v = 'uno' WHERE id = 1",
                       f"DELETE FROM `{tdb}`.t WHERE id = 2",
                       f"INSERT INTO `{tdb}`.t (id, v) VALUES (4, 'four')")
    run()  # the binlog window, read over TLS by the REQUIRE SSL account
    changes = sorted((r["_change_type"], r["id"], r["v"]) for r in seen
                     if r["_op_ts"] is not None)
    assert changes == [("delete", 2, "twö"), ("insert", 4, "four"),
                       ("update_postimage", 1, "uno"), ("update_preimage", 1, "one")]


def test_wrong_ca_fails_with_one_clear_message(spark, tls_server, tdb, certs):
    _, other = certs
    opts = _opts(tls_server, tdb, **{"ssl.mode": "verify_ca", "ssl.ca": other.ca})
    with pytest.raises(Exception) as e:
        spark.read.format("mysql-cdc").options(**opts).load().collect()
    msg = str(e.value)
    assert "certificate is not trusted" in msg and other.ca in msg and "fix:" in msg
    assert PW not in msg


def test_verify_identity_checks_the_host_name(tls_server, tdb, certs):
    good, _ = certs
    ok = SourceConfig.parse(_opts(tls_server, tdb, **{"ssl.mode": "verify_identity",
                                                      "ssl.ca": good.ca})).connection
    ok.connect().close()
    # 127.0.0.2 reaches the same server, but its certificate names 127.0.0.1 and localhost
    other_name = _opts(tls_server, tdb, host="127.0.0.2",
                       **{"ssl.mode": "verify_identity", "ssl.ca": good.ca})
    with pytest.raises(TLSError) as e:
        SourceConfig.parse(other_name).connection.connect()
    assert "does not name host '127.0.0.2'" in str(e.value) and "verify_ca" in e.value.fix
    # verify_ca checks the signature only, so the other name is accepted
    SourceConfig.parse({**other_name, "ssl.mode": "verify_ca"}).connection.connect().close()


def test_required_without_ca(spark, tls_server, tdb):
    opts = _opts(tls_server, tdb, **{"ssl.mode": "required"})
    assert len(_rows(spark.read.format("mysql-cdc").options(**opts).load())) == 3


def test_require_ssl_account_with_tls_disabled(tls_server, tdb):
    conn = SourceConfig.parse(_opts(tls_server, tdb, **{"ssl.mode": "disabled"})).connection
    with pytest.raises(TLSError) as e:
        conn.connect()
    assert "requires TLS (REQUIRE SSL)" in str(e.value) and "ssl.mode" in e.value.fix
    assert PW not in str(e.value)


@pytest.mark.parametrize("kind", ["mariadb", "mysql"])
def test_server_without_tls(kind):
    """ssl.mode=required against a server that offers no TLS fails with the fix named, on
    both servers. MySQL makes certificates itself at its first start, so its server here is
    told to offer no TLS version at all (``--tls-version=``, MySQL 8.4's way: ``--ssl`` is
    gone); a MariaDB without ``ssl_*`` settings offers none. ``preferred`` still connects,
    in clear (caching_sha2_password then exchanges the password under the server's RSA key)."""
    sandbox = (MySQLSandbox(MySQLSettings(extra_args=("--tls-version=",)), name="notls-mysql")
               if kind == "mysql" else MariaDBSandbox(name="notls"))
    with sandbox as sb:
        opts = {**sb.source_options(), "database-name": "mysql", "table-name": "x",
                "ssl.mode": "required"}
        with pytest.raises(TLSError) as e:
            SourceConfig.parse(opts).connection.connect()
        assert "does not offer TLS" in str(e.value)
        plain = SourceConfig.parse({**opts, "ssl.mode": "preferred"}).connection.connect()
        try:
            with plain.cursor() as cur:
                cur.execute("SELECT 1")
                assert cur.fetchone() == (1,)
        finally:
            plain.close()


def test_client_certificate(spark, tls_server, tdb, certs):
    """REQUIRE X509: chunk reads go through pymysql (connectorx has no client certificates)
    and give the same rows as connectorx does for the same table."""
    good, _ = certs
    opts = _opts(tls_server, tdb, user="x509user", **{
        "ssl.mode": "verify_identity", "ssl.ca": good.ca, "ssl.cert": good.client_cert,
        "ssl.key": good.client_key})
    with_cert = spark.read.format("mysql-cdc").options(**opts).load()
    via_cx = spark.read.format("mysql-cdc").options(
        **_opts(tls_server, tdb, **{"ssl.mode": "verify_ca", "ssl.ca": good.ca})).load()
    assert with_cert.schema == via_cx.schema
    assert _rows(with_cert) == _rows(via_cx)
    no_cert = {k: v for k, v in opts.items() if k not in ("ssl.cert", "ssl.key")}
    with pytest.raises(Exception) as e:  # the server insists on the certificate
        spark.read.format("mysql-cdc").options(**no_cert).load()
    assert "x509user" in str(e.value)
