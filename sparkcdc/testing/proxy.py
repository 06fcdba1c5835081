"""A TCP proxy on loopback that breaks connections on command, for fault-injection tests.

Why it exists: sparkcdc's promise is that nothing is lost or doubled when the network
misbehaves, and a promise like that is only worth what its tests show. Real failures --
a connection reset in the middle of a chunk read, a server that refuses connections for a
while, a slow link -- cannot be produced reliably with MariaDB alone, and mocks would test
the mocks. So the tests put this proxy between sparkcdc and a real MariaDB (the source's
``hostname``/``port`` point at the proxy) and turn faults on and off while real Spark jobs
run. Every connection sparkcdc opens goes through it: the driver's control connection, the
executors' chunk reads (connectorx) and their binlog streams.

Controls (all thread-safe, callable while traffic flows):

* ``cut_all()``: reset (RST) every open connection, both sides;
* ``refuse_for(seconds)``: new connections are reset as soon as they arrive, for a while;
* ``set_latency(seconds)``: every chunk of bytes is held that long before it is forwarded;
* ``set_bandwidth(bytes_per_second)``: each direction of each connection is throttled;
* ``cut_after(nbytes, count=1, when_sent=None)``: the next ``count`` connections that carry
  more than ``nbytes`` from the server (big reads: a chunk, a binlog window) are reset right
  there, in the middle of the transfer; with ``when_sent``, only connections whose client
  sent those bytes (a query's text), counted from then.

``stats()`` says what happened (connections, cuts, refusals, bytes), so a test can show its
fault actually hit. Plain threads, no dependencies; meant for tests, not for production.
"""

from __future__ import annotations

import socket
import struct
import threading
import time
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

if TYPE_CHECKING:  # typing.Self is 3.11's; `with` on a subclass gives the subclass
    from typing_extensions import Self

_CHUNK = 64 * 1024


def _reset(sock: socket.socket) -> None:
    """Close with RST (linger 0), as a crashed peer or a middlebox dropping state does.

    ``shutdown(SHUT_RD)`` first: it sends nothing, but wakes a pump thread blocked in
    ``recv`` on this socket. Without it, ``close()`` would only drop the descriptor while
    that ``recv`` still holds the socket open: no RST would go out, and the peer would wait
    forever on a connection that looks alive."""
    try:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
    except OSError:
        pass
    try:
        sock.shutdown(socket.SHUT_RD)
    except OSError:
        pass
    try:
        sock.close()
    except OSError:
        pass


@dataclass(eq=False)  # identity: connections live in a set
class _Conn:
    client: socket.socket
    upstream: socket.socket
    down_bytes: int = 0  # server -> client
    up_bytes: int = 0  # client -> server
    closed: bool = False
    armed_at: int | None = None  # down_bytes when a cut_after rule took this connection
    sent: bytes = b""  # the last bytes the client sent (for when_sent)

    def close(self, reset: bool) -> None:
        if self.closed:
            return
        self.closed = True
        for s in (self.client, self.upstream):
            if reset:
                _reset(s)
            else:
                try:
                    s.shutdown(socket.SHUT_RDWR)
                except OSError:
                    pass
                s.close()


@dataclass
class ProxyStats:
    accepted: int = 0
    refused: int = 0
    cut: int = 0  # connections reset by cut_all or cut_after
    cut_mid_transfer: int = 0  # of those, by cut_after
    bytes_down: int = 0
    bytes_up: int = 0
    events: list = field(default_factory=list)  # (monotonic time, what)


class FaultProxy:
    """``FaultProxy(upstream_host, upstream_port)``; ``start()`` binds ``127.0.0.1:<port>``."""

    def __init__(self, upstream_host: str, upstream_port: int, *, listen_host: str = "127.0.0.1",
                 listen_port: int = 0):
        self.upstream = (upstream_host, int(upstream_port))
        self._listen = (listen_host, listen_port)
        self._lock = threading.Lock()
        self._conns: set[_Conn] = set()
        self._stats = ProxyStats()
        self._refuse_until = 0.0
        self._latency = 0.0
        self._bandwidth: float | None = None
        self._cut_after: tuple[int, int] | None = None  # (nbytes, remaining)
        self._when_sent: bytes | None = None
        self._server: socket.socket | None = None
        self._thread: threading.Thread | None = None
        self._stopping = threading.Event()
        self.host = listen_host
        self.port = 0

    # -- lifecycle -------------------------------------------------------------------------

    def start(self) -> Self:
        srv = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        srv.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        srv.bind(self._listen)
        srv.listen(256)
        srv.settimeout(0.2)
        self._server = srv
        self.port = srv.getsockname()[1]
        self._thread = threading.Thread(target=self._accept_loop, name="fault-proxy",
                                        daemon=True)
        self._thread.start()
        return self

    def stop(self) -> None:
        self._stopping.set()
        if self._thread is not None:
            self._thread.join(5)
        if self._server is not None:
            self._server.close()
        self.cut_all(count=False)

    def __enter__(self) -> Self:
        return self.start()

    def __exit__(self, *exc) -> None:
        self.stop()

    # -- controls --------------------------------------------------------------------------

    def cut_all(self, count: bool = True) -> int:
        """Reset every open connection; returns how many."""
        with self._lock:
            conns = list(self._conns)
            self._conns.clear()
        for c in conns:
            c.close(reset=True)
        if count and conns:
            self._note(f"cut_all {len(conns)}", cut=len(conns))
        return len(conns)

    def refuse_for(self, seconds: float) -> None:
        """New connections are reset on arrival for ``seconds`` (open ones are untouched)."""
        with self._lock:
            self._refuse_until = time.monotonic() + seconds
        self._note(f"refuse_for {seconds}")

    def set_latency(self, seconds: float) -> None:
        with self._lock:
            self._latency = max(0.0, seconds)
        self._note(f"latency {seconds}")

    def set_bandwidth(self, bytes_per_second: float | None) -> None:
        with self._lock:
            self._bandwidth = bytes_per_second or None
        self._note(f"bandwidth {bytes_per_second}")

    def cut_after(self, nbytes: int, count: int = 1, when_sent: bytes | None = None) -> None:
        """The next ``count`` connections that carry ``nbytes`` more from the server (counted
        from now, or from when their client sent ``when_sent``) are reset in the middle of
        that transfer."""
        with self._lock:
            self._cut_after = (int(nbytes), int(count))
            self._when_sent = when_sent
            for c in self._conns:
                c.armed_at = None if when_sent else c.down_bytes
        self._note(f"cut_after {nbytes} x{count}")

    def clear(self) -> None:
        """No faults: no refusal, latency, throttle or pending cut."""
        with self._lock:
            self._refuse_until = 0.0
            self._latency = 0.0
            self._bandwidth = None
            self._cut_after = None
            self._when_sent = None
        self._note("clear")

    def stats(self) -> ProxyStats:
        with self._lock:
            s = self._stats
            return ProxyStats(s.accepted, s.refused, s.cut, s.cut_mid_transfer, s.bytes_down,
                              s.bytes_up, list(s.events))

    @property
    def open_connections(self) -> int:
        with self._lock:
            return len(self._conns)

    # -- internals -------------------------------------------------------------------------

    def _note(self, what: str, cut: int = 0, mid: int = 0, refused: int = 0) -> None:
        with self._lock:
            self._stats.events.append((time.monotonic(), what))
            self._stats.cut += cut
            self._stats.cut_mid_transfer += mid
            self._stats.refused += refused

    def _accept_loop(self) -> None:
        assert self._server is not None
        while not self._stopping.is_set():
            try:
                client, _ = self._server.accept()
            except TimeoutError:
                continue
            except OSError:
                return
            with self._lock:
                refusing = time.monotonic() < self._refuse_until
            # Counted before the reset: the client sees the reset at once and a test may
            # read the stats before this thread runs again.
            if refusing:
                self._note("refused", refused=1)
                _reset(client)
                continue
            try:
                upstream = socket.create_connection(self.upstream, timeout=10)
            except OSError:
                self._note("upstream unreachable", refused=1)
                _reset(client)
                continue
            upstream.settimeout(None)
            for s in (client, upstream):
                s.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
            conn = _Conn(client, upstream)
            with self._lock:
                self._conns.add(conn)
                self._stats.accepted += 1
                if self._cut_after is not None and self._when_sent is None:
                    conn.armed_at = 0
            threading.Thread(target=self._pump, args=(conn, client, upstream, False),
                             daemon=True).start()
            threading.Thread(target=self._pump, args=(conn, upstream, client, True),
                             daemon=True).start()

    def _pump(self, conn: _Conn, src: socket.socket, dst: socket.socket, down: bool) -> None:
        try:
            while True:
                with self._lock:
                    bw = self._bandwidth
                size = min(_CHUNK, max(1024, int(bw // 20))) if bw else _CHUNK
                data = src.recv(size)
                if not data:
                    break
                with self._lock:
                    latency, bw = self._latency, self._bandwidth
                if latency:
                    time.sleep(latency)
                if down and self._should_cut(conn, len(data)):
                    # forward part of it, then reset: the reader sees a torn transfer
                    try:
                        dst.sendall(data[: len(data) // 2])
                    except OSError:
                        pass
                    with self._lock:
                        self._conns.discard(conn)
                    self._note(f"cut mid-transfer after {conn.down_bytes} bytes", cut=1, mid=1)
                    conn.close(reset=True)
                    return
                if not down:
                    # armed before the query is forwarded: once it is, the server's answer
                    # may be pumped down (and counted) before this thread runs again, and
                    # arming after it would count from the answer's end
                    with self._lock:
                        conn.up_bytes += len(data)
                        self._stats.bytes_up += len(data)
                        if self._when_sent and self._cut_after and conn.armed_at is None:
                            conn.sent = (conn.sent + data)[-4096:]
                            if self._when_sent in conn.sent:
                                conn.armed_at = conn.down_bytes
                dst.sendall(data)
                if down:
                    with self._lock:
                        conn.down_bytes += len(data)
                        self._stats.bytes_down += len(data)
                if bw:
                    time.sleep(len(data) / bw)
        except OSError:
            pass
        finally:
            with self._lock:
                self._conns.discard(conn)
            # one side ended: end the other too (a normal close, not a fault)
            conn.close(reset=False)

    def _should_cut(self, conn: _Conn, n: int) -> bool:
        with self._lock:
            rule = self._cut_after
            if rule is None or conn.armed_at is None:
                return False
            nbytes, remaining = rule
            if conn.down_bytes + n - conn.armed_at < nbytes:
                return False
            remaining -= 1
            self._cut_after = (nbytes, remaining) if remaining > 0 else None
            conn.armed_at = None
            return True


__all__ = ["FaultProxy", "ProxyStats"]
