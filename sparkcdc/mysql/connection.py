"""Connection options for a MySQL/MariaDB source and the one place connections are opened.

Every connection sparkcdc opens to the source takes its settings from here: the control
connections (``ConnectionOptions.connect``), the binlog streams (``pymysql_kwargs``, passed to
``pymysql.connect`` by the binlog reader), and the connectorx chunk reads
(``connectorx_url``). So TLS (``ssl.mode``, ``ssl.ca``, ``ssl.cert``, ``ssl.key``, modeled on
Debezium's) and ``connect.timeout`` apply to all of them.

``hostname`` may list several servers, ``db1,db2:3307`` (a port of its own, or ``port``):
a primary and the replicas that can take over from it. They are tried in that order; the one
that answered is kept for later connections in this process until it stops answering, and
the binlog reader finds its place in that server's binlog by GTID state
(``binlog/failover.py``).

The password never appears in ``repr``, ``str`` or error messages.
"""

from __future__ import annotations

import functools
import socket
import ssl
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, TypeVar
from urllib.parse import quote

from sparkcdc.errors import AuthenticationFailed, ConnectionFailed, TLSError
from sparkcdc.mysql import server_errors

SSL_MODES = ("disabled", "preferred", "required", "verify_ca", "verify_identity")
VERIFY_MODES = ("verify_ca", "verify_identity")

_AUTH_CODES = (1044, 1045, 1698)
_INSECURE_TRANSPORT = 3159  # MySQL: require_secure_transport=ON
_CR_SSL_CONNECTION_ERROR = 2026

# (host, port) -> whether the server offered TLS, learned from pymysql connections in this
# process; ssl.mode=preferred gives connectorx TLS only where pymysql got it
_TLS_SEEN: dict[tuple[str, int], bool] = {}
# (hostname list, port) -> the index of the listed server that answered last, per process
_ACTIVE: dict[tuple[str, int], int] = {}
_CONTEXTS: dict[tuple, ssl.SSLContext] = {}
_LOCK = threading.Lock()


@dataclass(frozen=True)
class ConnectionOptions:
    hostname: str
    port: int = 3306
    username: str = "root"
    password: str = field(default="", repr=False)
    connect_timeout: float = 30.0
    max_retries: int = 3
    server_time_zone: str | None = None  # e.g. "UTC" or "+02:00"; None: the server's
    ssl_mode: str = "preferred"  # one of SSL_MODES
    ssl_ca: str | None = None  # PEM file of the CA(s) that sign the server's certificate
    ssl_cert: str | None = None  # PEM client certificate (with ssl_key)
    ssl_key: str | None = None

    def __str__(self) -> str:
        host, port = self.host()
        return f"{self.username}@{host}:{port}"

    # -- servers -----------------------------------------------------------------------------

    def hosts(self) -> list[tuple[str, int]]:
        """The listed servers, in order, each ``(host, port)``."""
        out = []
        for item in self.hostname.split(","):
            item = item.strip()
            if not item:
                continue
            host, sep, port = item.rpartition(":")
            if sep and port.isdigit() and "]" not in port:
                out.append((host.strip("[]"), int(port)))
            else:
                out.append((item.strip("[]"), self.port))
        return out or [(self.hostname, self.port)]

    def host(self) -> tuple[str, int]:
        """The server connections go to now: the one that answered last in this process,
        else the first listed."""
        hosts = self.hosts()
        return hosts[_ACTIVE.get((self.hostname, self.port), 0) % len(hosts)]

    def _next_host(self) -> bool:
        """Move on to the next listed server; False when there is only one."""
        n = len(self.hosts())
        if n < 2:
            return False
        key = (self.hostname, self.port)
        _ACTIVE[key] = (_ACTIVE.get(key, 0) + 1) % n
        return True

    def find_host(self) -> None:
        """Connect once, trying the listed servers in turn, so that ``host()`` names one
        that answers (a binlog stream that lost its server calls it before reconnecting)."""
        if len(self.hosts()) > 1:
            self.connect().close()

    # -- TLS ---------------------------------------------------------------------------------

    def ssl_context(self) -> ssl.SSLContext | None:
        """The client TLS context for modes that demand TLS; None for disabled/preferred."""
        if self.ssl_mode in ("disabled", "preferred"):
            return None
        key = (self.ssl_mode, self.ssl_ca, self.ssl_cert, self.ssl_key)
        with _LOCK:
            ctx = _CONTEXTS.get(key)
            if ctx is None:
                ctx = build_ssl_context(self.ssl_mode, self.ssl_ca, self.ssl_cert, self.ssl_key)
                _CONTEXTS[key] = ctx
        return ctx

    def pymysql_kwargs(self, database: str | None = None) -> dict[str, Any]:
        """Keyword arguments for ``pymysql.connect``: every pymysql connection to the source
        (control connections and binlog streams) is opened with these, TLS included."""
        host, port = self.host()
        kw: dict[str, Any] = {"host": host, "port": port, "user": self.username,
                              "password": self.password, "database": database,
                              "connect_timeout": max(0.001, float(self.connect_timeout)),
                              "charset": "utf8mb4", "autocommit": True}
        if self.server_time_zone:
            kw["init_command"] = f"SET time_zone = '{_tz_literal(self.server_time_zone)}'"
        if self.ssl_mode == "disabled":
            kw["ssl_disabled"] = True
        else:
            ctx = self.ssl_context()
            if ctx is not None:  # pymysql then refuses a server without TLS
                kw["ssl"] = ctx
            # preferred: pymysql's own default (TLS when the server offers it, unverified)
        return kw

    def dump_kwargs(self) -> dict[str, Any]:
        """``pymysql_kwargs`` for a binlog dump connection: no database, no session time
        zone (the binlog's values do not depend on it), no autocommit setting."""
        kw = self.pymysql_kwargs()
        for k in ("database", "autocommit", "init_command"):
            kw.pop(k, None)
        return kw

    def connect(self, database: str | None = None, **extra: Any):
        """A pymysql connection. ``connect.timeout`` bounds the whole attempt (TCP connect,
        handshake, TLS, authentication, retries); transient failures are retried up to
        ``max_retries`` times within it. TLS and authentication failures are not retried."""
        import pymysql

        budget = max(0.001, float(self.connect_timeout))
        deadline = time.monotonic() + budget
        read_timeout = extra.pop("read_timeout", None)
        last: BaseException | None = None
        attempts, rounds = 0, len(self.hosts())  # each retry tries every listed server
        while attempts < (self.max_retries + 1) * rounds:
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                break
            attempts += 1
            kw = dict(self.pymysql_kwargs(database), **extra)
            kw["connect_timeout"] = remaining
            # pymysql bounds only the TCP connect by connect_timeout; a server that accepts
            # and never answers would hang the handshake, so reads are bounded too until
            # the connection is up
            kw["read_timeout"] = remaining if read_timeout is None else min(remaining,
                                                                            read_timeout)
            try:
                conn = self._open(pymysql, kw)
            except RuntimeError as e:
                raise rsa_unavailable(e, str(self), self.username) or e
            except pymysql.err.OperationalError as e:
                self._raise_terminal(e)
                last = e
                # several servers: the next one at once, a pause only after a whole round
                if self._next_host() and attempts % rounds:
                    continue
                if attempts < (self.max_retries + 1) * rounds:
                    time.sleep(max(0.0, min(0.2 * 2 ** (attempts // rounds - 1), 2.0,
                                            deadline - time.monotonic())))
                continue
            conn._read_timeout = read_timeout  # pymysql applies it on the next read
            _record_tls(kw["host"], kw["port"], is_tls(conn))
            return conn
        raise ConnectionFailed(
            f"cannot connect to {self} within connect.timeout {budget:g}s "
            f"({attempts} attempt{'s' if attempts != 1 else ''}): {_describe(last)}",
            fix="check hostname and port, that the server runs and is reachable from here "
                "(firewall), and connect.timeout / connect.max-retries") from None

    def _open(self, pymysql: Any, kw: dict[str, Any]) -> Any:
        """``pymysql.connect(**kw)``, through a connection class whose ``preferred`` TLS
        context is the process's one (``_preferred_context``): PyMySQL builds its own in
        every connection's constructor, loading the system's CA certificates each time, only
        to verify nothing with them."""
        return _connection_class(pymysql)(**kw)

    def _raise_terminal(self, e: BaseException) -> None:
        """Turn authentication and TLS failures into their one clear error."""
        code = e.args[0] if e.args else None
        cause = getattr(e, "original_exception", None)
        if code in _AUTH_CODES:
            if self.ssl_mode == "disabled" and self._tls_would_authenticate():
                raise TLSError(
                    f"the server {self} refused user {self.username!r} without TLS: the "
                    f"account requires TLS (REQUIRE SSL) and ssl.mode is 'disabled'",
                    fix="set ssl.mode to 'verify_ca' or 'verify_identity' with ssl.ca (or "
                        "'required' to encrypt without checking the certificate)") from None
            raise AuthenticationFailed(
                f"the server {self} refused user {self.username!r} ({code})",
                fix="check the username and password options"
                    + (" (and whether the account requires TLS: ssl.mode)"
                       if self.ssl_mode == "disabled" else "")) from None
        if code == _INSECURE_TRANSPORT:
            raise TLSError(
                f"the server {self} requires TLS (require_secure_transport) and ssl.mode is "
                f"'{self.ssl_mode}'",
                fix="set ssl.mode to 'verify_ca' or 'verify_identity' with ssl.ca") from None
        if code == _CR_SSL_CONNECTION_ERROR:
            raise TLSError(
                f"the server {self} does not offer TLS and ssl.mode is '{self.ssl_mode}'",
                fix="enable TLS on the server (ssl_cert, ssl_key, ssl_ca in my.cnf; see "
                    "docs/operations.md) or set ssl.mode to 'preferred'") from None
        if isinstance(cause, ssl.SSLCertVerificationError):
            why = cause.verify_message or str(cause)
            if "hostname" in why.lower() or "ip address mismatch" in why.lower():
                raise TLSError(
                    f"TLS to {self}: the server's certificate does not name host "
                    f"{self.hostname!r} ({why}; ssl.mode=verify_identity)",
                    fix="connect with a hostname the certificate lists (its subjectAltName), "
                        "reissue the certificate for this name, or use ssl.mode=verify_ca"
                ) from None
            raise TLSError(
                f"TLS to {self}: the server's certificate is not trusted: {why} (ssl.ca="
                f"{self.ssl_ca}, ssl.mode={self.ssl_mode})",
                fix="set ssl.ca to the PEM file of the CA that signed the server's "
                    "certificate (the server's ssl_ca)") from None
        if isinstance(cause, ssl.SSLError):
            raise TLSError(f"TLS to {self} failed: {cause} (ssl.mode={self.ssl_mode})",
                           fix="check the server's TLS setup and ssl.* options") from None

    def _tls_would_authenticate(self) -> bool:
        """With ssl.mode=disabled and an access denial: would the same login pass with TLS?
        (MariaDB answers a REQUIRE SSL account without TLS with a plain 'access denied'.)"""
        import pymysql

        kw = self.pymysql_kwargs()
        kw.pop("ssl_disabled", None)
        kw["ssl"] = build_ssl_context("required", None, None, None)
        kw["read_timeout"] = kw["connect_timeout"]
        try:
            pymysql.connect(**kw).close()
            return True
        except pymysql.err.MySQLError:
            return False

    # -- connectorx --------------------------------------------------------------------------

    @property
    def connectorx_supported(self) -> bool:
        """connectorx cannot present a client certificate; chunk reads then go through
        pymysql (``sparkcdc.mysql.snapshot``)."""
        return not self.ssl_cert

    def _url_host(self) -> str:
        if len(self.hosts()) > 1 and (self.hostname, self.port) not in _ACTIVE:
            self.find_host()  # a fresh process (an executor): find one that answers first
        host, port = self.host()
        return f"{host}:{port}"

    def connectorx_url(self, database: str | None = None) -> str:
        """The connectorx URL, with the same TLS verification and connect timeout."""
        url = (f"mysql://{quote(self.username, safe='')}:{quote(self.password, safe='')}"
               f"@{self._url_host()}/{quote(database or '', safe='')}")
        params = [f"tcp_connect_timeout_ms={max(1, int(self.connect_timeout * 1000))}",
                  # never swap hostname:port for the unix socket the server names: behind a
                  # port forward or a proxy on localhost that is another server, or none
                  "prefer_socket=false"]
        mode = self.ssl_mode
        if mode == "preferred":
            mode = "required" if self.server_offers_tls() else "disabled"
        if mode != "disabled":
            params.append(f"ssl-mode={mode.upper()}")
        if mode in VERIFY_MODES:
            params.append(f"ssl-ca={quote(self.ssl_ca or '', safe='/')}")
        return url + "?" + "&".join(params)

    def server_offers_tls(self) -> bool:
        """Whether a pymysql connection to this server got TLS (asked once per process)."""
        key = self.host()
        if key not in _TLS_SEEN:
            self.connect().close()
        return _TLS_SEEN.get(key, False)


T = TypeVar("T")



def retry_lost(conn: ConnectionOptions, what: str, read: Callable[[], T]) -> T:
    """``read()`` -- an idempotent read that opens its own connections -- again when the
    connection is lost in the middle of it (a server restart, a network cut): up to
    ``connect.max-retries`` more times, pausing 0.5, 1, 2, 4 s. Then a retryable
    ``ConnectionFailed`` naming ``what``, never a driver's error, so that the pipeline's
    retry loops recognise it. Any other server error is raised at once."""
    import pymysql

    for attempt in range(conn.max_retries + 1):
        try:
            return read()
        except (pymysql.err.OperationalError, pymysql.err.InterfaceError) as e:
            if (isinstance(e, pymysql.err.OperationalError)
                    and server_errors.code(e) not in server_errors.LOST):
                raise
            if attempt == conn.max_retries:
                raise ConnectionFailed(
                    f"{what} on {conn} failed: the connection was lost "
                    f"({attempt + 1} attempts): {e.args[-1] if e.args else e}",
                    fix="check that the server runs and is reachable; run again") from None
            time.sleep(min(0.5 * 2 ** attempt, 4.0))
    raise AssertionError("unreachable")


def is_tls(conn: Any) -> bool:
    """Whether an open pymysql connection is encrypted."""
    return isinstance(getattr(conn, "_sock", None), ssl.SSLSocket)


def _record_tls(host: str, port: int, tls: bool) -> None:
    _TLS_SEEN[(host, port)] = tls


@functools.cache
def _connection_class(pymysql: Any) -> Any:
    """pymysql's ``Connection`` with ``preferred``'s context made once per process (made at
    first use: pymysql is imported where a connection is wanted)."""
    class Connection(pymysql.connections.Connection):
        def _create_ssl_ctx(self, sslp: Any) -> Any:
            # ``{}``: no TLS option given, pymysql's PREFERRED mode
            return _preferred_context() if sslp == {} else super()._create_ssl_ctx(sslp)

    return Connection


def _preferred_context() -> ssl.SSLContext:
    """The context pymysql would build for ``preferred`` (TLS when the server offers it,
    its certificate not checked), made once per process."""
    key = ("preferred",)
    with _LOCK:
        ctx = _CONTEXTS.get(key)
        if ctx is None:
            ctx = ssl.create_default_context()
            ctx.verify_flags &= ~getattr(ssl, "VERIFY_X509_STRICT", 0)
            ctx.check_hostname = False
            ctx.verify_mode = ssl.CERT_NONE
            _CONTEXTS[key] = ctx
    return ctx


def build_ssl_context(mode: str, ca: str | None, cert: str | None,
                      key: str | None) -> ssl.SSLContext:
    """A client context: ``required`` encrypts without checking the certificate,
    ``verify_ca`` checks it was signed by ``ca``, ``verify_identity`` also that it names the
    host. Raises ``ssl.SSLError``/``OSError`` for unreadable or malformed files."""
    ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT)
    ctx.minimum_version = ssl.TLSVersion.TLSv1_2
    if mode in VERIFY_MODES:
        ctx.load_verify_locations(cafile=ca)
        ctx.verify_mode = ssl.CERT_REQUIRED
        ctx.check_hostname = mode == "verify_identity"
        # a private CA may lack extensions X509_STRICT insists on (Python >= 3.13 sets it)
        ctx.verify_flags &= ~getattr(ssl, "VERIFY_X509_STRICT", 0)
    else:
        ctx.check_hostname = False
        ctx.verify_mode = ssl.CERT_NONE
    if cert:
        ctx.load_cert_chain(cert, keyfile=key)
    return ctx


def rsa_unavailable(e: BaseException, where: str, user: str) -> AuthenticationFailed | None:
    """pymysql's bare RuntimeError when a ``caching_sha2_password`` (or ``sha256_password``)
    login needs the full exchange without TLS (the account's first login since the server
    started: nothing cached yet) and ``cryptography`` is missing to encrypt the password with
    the server's RSA key, as one clear error; None for any other RuntimeError."""
    if "cryptography" not in str(e):
        return None
    return AuthenticationFailed(
        f"the server {where} wants the full caching_sha2_password exchange for user "
        f"{user!r} on a connection without TLS (MySQL 8's default "
        "password plugin, on the account's first login since the server started), which "
        "encrypts the password with the server's RSA key and needs the 'cryptography' package",
        fix="pip install cryptography (pymysql[rsa]; on every Spark executor too), or connect "
            "with TLS (ssl.mode 'preferred', the default, or 'required'/'verify_*' with a server "
            "offering TLS)")


def _describe(e: BaseException | None) -> str:
    if e is None:
        return "no attempt could start"
    cause = getattr(e, "original_exception", None)
    if isinstance(cause, (socket.timeout, TimeoutError)):
        return "timed out (no answer from the server)"
    if isinstance(cause, ConnectionRefusedError):
        return "connection refused (nothing listens on that port)"
    if e.args and e.args[0] == 2013 and "timed out" in str(e.args[-1]):
        return "the server accepted the connection but did not answer (timed out)"
    if e.args and len(e.args) > 1:
        return f"{e.args[1]} ({e.args[0]})"
    return str(e) or type(e).__name__


def _tz_literal(tz: str) -> str:
    """The session time zone to set. UTC by any of its names is '+00:00', which every
    server knows: a named zone needs the server's time zone tables, often not loaded
    (Flink's examples say 'UTC')."""
    tz = tz.replace("'", "")
    if tz.strip().upper() in ("UTC", "GMT", "Z", "ETC/UTC", "ETC/GMT", "UCT", "ZULU"):
        return "+00:00"
    return tz
