"""The dump stream: one connection registered as a replica, and the events it is sent.

``DumpStream`` registers as a replica on a pymysql connection, asks for the server's binlog
checksum (``@master_binlog_checksum``), the MariaDB GTID capability
(``@mariadb_slave_capability=4``) and, when tailing, a heartbeat period, then sends
``COM_BINLOG_DUMP`` for an explicit file and position. ``batches()`` reads the socket in
large chunks and splits them into events itself: MySQL packets (sequence checked; an event
larger than 16 MB arrives as several packets and is joined), error packets (raised as
pymysql errors, so the reader's error handling is unchanged), the EOF of a non-blocking
dump, and each event's 19-byte header. A damaged event (``checksum_mismatch``) and a broken
connection are both a lost connection to the reader, which reads again from its last
transaction boundary.

The C extension (``_fastdecode.split_events``) splits a whole chunk of packets into events
(and their parsed headers) in one call when it is built; the pure-Python ``split_events``
produces the same events. What the events say is read by ``events`` and ``table_map``.
"""

from __future__ import annotations

import contextlib
import struct
import zlib
from collections.abc import Callable, Iterator
from typing import Any

from sparkcdc.mysql.binlog.protocol.codes import HEADER

try:  # built by setup.py; optional
    from sparkcdc.mysql.binlog import _fastdecode as _C  # type: ignore[attr-defined]
except ImportError:  # pragma: no cover
    _C = None

_COM_BINLOG_DUMP, _COM_REGISTER_SLAVE = 0x12, 0x15
_BINLOG_DUMP_NON_BLOCK = 1
_MAX_PACKET = 0xFFFFFF
_CHUNK = 1 << 18
_CR_SERVER_LOST = 2013


def _lost(why: str) -> Exception:
    import pymysql

    return pymysql.err.OperationalError(_CR_SERVER_LOST,
                                        f"Lost connection to server during binlog dump "
                                        f"({why})")


def checksum_mismatch(data: Any, start: int, end: int) -> bool:
    """Whether the event at ``data[start:end]`` (its CRC32 in its last 4 bytes) was damaged
    on its way here."""
    body = data[start:end - 4] if end - start < 1 << 20 else memoryview(data)[start:end - 4]
    return zlib.crc32(body) != int.from_bytes(data[end - 4:end], "little")


def corrupt_event(where: str) -> Exception:
    """A damaged event (its checksum does not match): read as a lost connection, so the
    reader reads again from its last transaction boundary (a binlog file that is itself
    damaged fails after the reader's retries, with this message)."""
    return _lost(f"the event at {where} does not match its checksum: its bytes were damaged "
                 "on the way (a binlog damaged on the server fails again: check it with "
                 "mysqlbinlog --verify-binlog-checksum)")



class DumpStream:
    """One ``COM_BINLOG_DUMP`` from ``file:pos`` on its own pymysql connection."""

    def __init__(self, connect_kwargs: dict[str, Any], server_id: int, file: str, pos: int, *,
                 blocking: bool, heartbeat: float | None, read_timeout: float,
                 where: Callable[[str], tuple[str, int]] | None = None):
        self._args = (dict(connect_kwargs, read_timeout=read_timeout), server_id, file, pos,
                      blocking, heartbeat, read_timeout)
        self.connection: Any = None
        self.checksum = False  # the server's binlog_checksum at connect (before any FD event)
        self.server: str | None = None  # the @@server_id the connection reached
        # given that server id, the file and position to dump from (instead of file, pos):
        # after a failover the reader finds its point in the new server's binlog first
        self._where = where
        self._closed = False

    def connect(self) -> None:
        """Open the connection and send the dump request (once; ``batches`` does it too).
        Connection errors are pymysql's, raised here, inside the reader's retry loop."""
        import pymysql

        if self.connection is not None:
            return
        if self._closed:
            raise _lost("the stream is closed")
        kwargs, server_id, file, pos, blocking, heartbeat, read_timeout = self._args
        try:
            self.connection = pymysql.connect(**kwargs)
        except RuntimeError as e:  # caching_sha2_password without TLS nor cryptography
            from sparkcdc.mysql.connection import rsa_unavailable

            raise rsa_unavailable(e, f"{kwargs.get('user')}@{kwargs.get('host')}:"
                                     f"{kwargs.get('port')}", str(kwargs.get("user"))) or e

        try:
            with self.connection.cursor() as cur:
                cur.execute("SELECT @@global.binlog_checksum, @@global.server_id")
                row = cur.fetchone()
                alg = str(row[0] or "NONE").upper()
                self.server = str(row[1])
                cur.execute("SET @master_binlog_checksum = @@global.binlog_checksum, "
                            "@source_binlog_checksum = @@global.binlog_checksum, "
                            "@mariadb_slave_capability = 4")
                if heartbeat is not None:
                    # nanoseconds; at most half the read timeout, so an idle stream never
                    # times out between two heartbeats
                    period = int(min(heartbeat, read_timeout / 2.0, 4294967.0) * 1e9)
                    cur.execute("SET @master_heartbeat_period = %s, "
                                "@source_heartbeat_period = %s", (period, period))
            self.checksum = alg != "NONE"
            if self._where is not None:  # the reader places the dump on this server
                file, pos = self._where(self.server)
            self._command(_COM_REGISTER_SLAVE, struct.pack("<I", server_id) + b"\0\0\0"
                          + struct.pack("<HII", 0, 0, 0))
            self.connection._read_ok_packet()
            flags = 0 if blocking else _BINLOG_DUMP_NON_BLOCK
            self._command(_COM_BINLOG_DUMP, struct.pack("<IHI", pos, flags, server_id)
                          + file.encode())
            self.connection._sock.settimeout(read_timeout)
        except BaseException:
            self.close()
            raise

    def _command(self, command: int, payload: bytes) -> None:
        self.connection._execute_command(command, payload)

    def close(self) -> None:
        self._closed = True
        c = self.connection
        if c is not None:
            self.connection = None
            with contextlib.suppress(Exception):  # closing a broken connection
                c._force_close()

    def batches(self) -> Iterator[tuple[bytes, list[tuple]]]:
        """``(data, events)`` for each chunk read from the socket; each event is
        ``(timestamp, type, server_id, event_size, log_pos, flags, start, end)`` with its
        bytes (header and body, checksum included) at ``data[start:end]``. Returns at the EOF
        of a non-blocking dump; a lost connection or an error packet raises pymysql's error.
        """
        self.connect()
        rfile = self.connection._rfile
        split = _C.split_events if _C is not None and hasattr(_C, "split_events") \
            else split_events
        buf, p, seq = b"", 0, 1
        while True:
            evs, p, seq, status = split(buf, p, seq)
            if evs:
                yield buf, evs
            if status == 0:  # the packet at p is not complete: read (at least) the rest
                have = len(buf) - p
                need = 4 if have < 4 else 4 + (buf[p] | buf[p + 1] << 8 | buf[p + 2] << 16)
                buf, p = _more(buf, p, need, rfile)
                continue
            # the packet at p: an error, the EOF, an event of 16 MB or more, or malformed
            n = buf[p] | buf[p + 1] << 8 | buf[p + 2] << 16
            if buf[p + 3] != seq:
                raise _lost(f"packet sequence {buf[p + 3]}, expected {seq}")
            if len(buf) - p - 4 < min(n, _MAX_PACKET):
                buf, p = _more(buf, p, 4 + n, rfile)
            a = p + 4
            head = buf[a] if n else 0xFE
            if head == 0xFE and n < 9:
                return  # the end of a non-blocking dump
            if head == 0xFF:
                _raise_error(buf[a:a + n])
            if head != 0 or n < 20:
                raise _lost(f"unexpected packet 0x{head:02x} of {n} bytes")
            seq = (seq + 1) & 0xFF
            p = a + n
            if n < _MAX_PACKET:
                yield buf, [HEADER.unpack_from(buf, a + 1) + (a + 1, p)]
                continue
            # an event of 16 MB or more: packets of 2^24-1 bytes until a shorter one
            parts = [buf[a + 1:p]]
            while True:
                if len(buf) - p < 4:
                    buf, p = _more(buf, p, 4, rfile)
                n = buf[p] | buf[p + 1] << 8 | buf[p + 2] << 16
                if buf[p + 3] != seq:
                    raise _lost(f"packet sequence {buf[p + 3]}, expected {seq}")
                seq = (seq + 1) & 0xFF
                if len(buf) - p - 4 < n:
                    buf, p = _more(buf, p, n + 4, rfile)
                parts.append(buf[p + 4:p + 4 + n])
                p += 4 + n
                if n < _MAX_PACKET:
                    break
            data = b"".join(parts)
            del parts  # one copy of a big event in memory, not two
            yield data, [HEADER.unpack_from(data, 0) + (0, len(data))]


def split_events(buf: bytes, p: int, seq: int) -> tuple[list[tuple], int, int, int]:
    """The pure-Python twin of ``_fastdecode.split_events``: the whole, plain event packets
    of ``buf`` from ``p`` (see ``DumpStream.batches``). status 0: the packet at ``p`` is
    incomplete; 2: the caller handles the packet at ``p`` itself."""
    out: list[tuple] = []
    end = len(buf)
    unpack = HEADER.unpack_from
    while end - p >= 4:
        n = buf[p] | buf[p + 1] << 8 | buf[p + 2] << 16
        if buf[p + 3] != seq or n >= _MAX_PACKET:
            return out, p, seq, 2
        if end - p - 4 < n:
            break
        if n < 20 or buf[p + 4] != 0:
            return out, p, seq, 2
        h = unpack(buf, p + 5)
        if h[3] != n - 1:
            return out, p, seq, 2
        out.append(h + (p + 5, p + 4 + n))
        seq = (seq + 1) & 0xFF
        p += 4 + n
    return out, p, seq, 0


def _more(buf: bytes, p: int, n: int, rfile: Any) -> tuple[bytes, int]:
    """``buf[p:]`` extended to at least ``n`` bytes from the socket."""
    rest = buf[p:]
    need = n - len(rest)
    parts = [rest]
    try:
        while need > 0:
            chunk = rfile.read1(max(need, _CHUNK))
            if not chunk:
                raise _lost("the server closed the connection")
            parts.append(chunk)
            need -= len(chunk)
    except TimeoutError:
        raise _lost("read timed out") from None
    except OSError as e:
        raise _lost(str(e)) from None
    return b"".join(parts), 0


def _raise_error(payload: bytes) -> None:
    from pymysql import err

    err.raise_mysql_exception(bytes(payload))
    raise _lost("error packet")  # pragma: no cover - raise_mysql_exception always raises

