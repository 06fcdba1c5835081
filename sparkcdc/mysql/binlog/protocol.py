"""Our own binlog event layer: the replication protocol and the events the reader needs.

``BinlogReader`` (``binlog/reader.py``) reads its streams through this module, so no
per-event work goes through python-mysql-replication's event classes:

* ``DumpStream`` registers as a replica on a pymysql connection, asks for the server's binlog
  checksum (``@master_binlog_checksum``), the MariaDB GTID capability
  (``@mariadb_slave_capability=4``) and, when tailing, a heartbeat period, then sends
  ``COM_BINLOG_DUMP`` for an explicit file and position. ``events()`` reads the socket in
  large chunks and splits them into events itself: MySQL packets (sequence checked; an event
  larger than 16 MB arrives as several packets and is joined), error packets (raised as
  pymysql errors, so the reader's error handling is unchanged), the EOF of a non-blocking
  dump, and each event's 19-byte header.
* The checksum: CRC32 events carry 4 trailing bytes. Whether they do is learned from every
  FORMAT_DESCRIPTION event (its checksum-algorithm byte), so files written with and without
  checksums can follow each other; the fake ROTATE the server sends before a file's format
  description is checked against its CRC.
* ``TableMap``: a TABLE_MAP event parsed once per distinct body (the server writes one before
  every statement's rows): column types, their metadata, and the optional metadata of
  ``binlog_row_metadata=FULL`` (names, charsets, ENUM and SET members). Its ``columns``
  carry the attribute names the row decoders read (``type``, ``max_length``, ``fsp`` ...).
* ``rows_header``: the header of WRITE/UPDATE/DELETE_ROWS v1 and v2 (table id, column count,
  the columns-present bitmaps); the row images that follow go to a row decoder as they are.
* MariaDB's compressed events (``log_bin_compress=ON``): QUERY_COMPRESSED and the six
  compressed row events are their plain twins with the statement or the row images
  compressed; ``mariadb_inflate`` restores that part, and the rest is read as the twin's.

The C extension (``_fastdecode.split_events``) splits a whole chunk of packets into events
(and their parsed headers) in one call when it is built; the pure-Python ``split_events``
produces the same events.
"""

from __future__ import annotations

import contextlib
import enum
import struct
import zlib
from collections.abc import Callable, Iterator
from typing import Any

from sparkcdc.errors import DecodeError

try:  # built by setup.py; optional
    from sparkcdc.mysql.binlog import _fastdecode as _C  # type: ignore[attr-defined]
except ImportError:  # pragma: no cover
    _C = None

# event types
UNKNOWN, START_V3, QUERY, STOP, ROTATE, INTVAR = 0, 1, 2, 3, 4, 5
RAND, USER_VAR, FORMAT_DESCRIPTION, XID = 13, 14, 15, 16
BEGIN_LOAD_QUERY, EXECUTE_LOAD_QUERY, TABLE_MAP = 17, 18, 19
WRITE_ROWS_V1, UPDATE_ROWS_V1, DELETE_ROWS_V1 = 23, 24, 25
HEARTBEAT, ROWS_QUERY = 27, 29
WRITE_ROWS_V2, UPDATE_ROWS_V2, DELETE_ROWS_V2 = 30, 31, 32
GTID, ANONYMOUS_GTID, PREVIOUS_GTIDS = 33, 34, 35
XA_PREPARE, PARTIAL_UPDATE_ROWS = 38, 39
# not a server's: a GTID (or anonymous GTID) event and the QUERY event BEGIN after it, read
# as one by the reader (``fold_begins``), of type FOLDED + the GTID event's type
FOLDED = 256
MARIADB_ANNOTATE_ROWS, MARIADB_BINLOG_CHECKPOINT, MARIADB_GTID, MARIADB_GTID_LIST = (
    160, 161, 162, 163)
MARIADB_START_ENCRYPTION = 164
# MariaDB's compressed events (log_bin_compress=ON)
QUERY_COMPRESSED = 165
WRITE_ROWS_COMPRESSED_V1, UPDATE_ROWS_COMPRESSED_V1, DELETE_ROWS_COMPRESSED_V1 = 166, 167, 168
WRITE_ROWS_COMPRESSED, UPDATE_ROWS_COMPRESSED, DELETE_ROWS_COMPRESSED = 169, 170, 171

# row event type -> (mode, version): mode 0 insert, 1 delete, 2 update (the C decoder's)
ROW_EVENTS = {
    WRITE_ROWS_V1: (0, 1), DELETE_ROWS_V1: (1, 1), UPDATE_ROWS_V1: (2, 1),
    WRITE_ROWS_V2: (0, 2), DELETE_ROWS_V2: (1, 2), UPDATE_ROWS_V2: (2, 2),
    PARTIAL_UPDATE_ROWS: (2, 2),
}
# events python-mysql-replication dropped before the reader saw them (the reader's
# only_events did not list them); they neither begin, end nor move anything
IGNORED_EVENTS = frozenset({INTVAR, RAND, USER_VAR, BEGIN_LOAD_QUERY, EXECUTE_LOAD_QUERY,
                            ROWS_QUERY, MARIADB_ANNOTATE_ROWS})
# MariaDB's compressed row events, as ROW_EVENTS (and among them): the header and bitmaps of
# their plain twins, as they are, then the row images compressed (``mariadb_inflate``).
# 166-168 have the v1 header; 169-171 the v2 one (MariaDB's format description gives them
# the v2 post-header length), though MariaDB servers write only 166-168.
COMPRESSED_ROW_EVENTS = {
    WRITE_ROWS_COMPRESSED_V1: (0, 1), DELETE_ROWS_COMPRESSED_V1: (1, 1),
    UPDATE_ROWS_COMPRESSED_V1: (2, 1), WRITE_ROWS_COMPRESSED: (0, 2),
    DELETE_ROWS_COMPRESSED: (1, 2), UPDATE_ROWS_COMPRESSED: (2, 2),
}
ROW_EVENTS.update(COMPRESSED_ROW_EVENTS)

LOG_EVENT_ARTIFICIAL = 0x20
HEADER = struct.Struct("<IBIIIH")  # timestamp, type, server id, event size, log pos, flags
MARIADB_GTID_BODY = struct.Struct("<QIB")  # sequence number, domain, flags
_COM_BINLOG_DUMP, _COM_REGISTER_SLAVE = 0x12, 0x15
_BINLOG_DUMP_NON_BLOCK = 1
_MAX_PACKET = 0xFFFFFF
_CHUNK = 1 << 18
_CR_SERVER_LOST = 2013


class ColumnType(enum.IntEnum):
    """The column types TABLE_MAP events carry (``enum_field_types``), by public name."""

    DECIMAL, TINY, SHORT, LONG, FLOAT, DOUBLE, NULL, TIMESTAMP = 0, 1, 2, 3, 4, 5, 6, 7
    LONGLONG, INT24, DATE, TIME, DATETIME, YEAR, NEWDATE, VARCHAR = 8, 9, 10, 11, 12, 13, 14, 15
    BIT, TIMESTAMP2, DATETIME2, TIME2 = 16, 17, 18, 19
    JSON, NEWDECIMAL, ENUM, SET = 245, 246, 247, 248
    TINY_BLOB, MEDIUM_BLOB, LONG_BLOB, BLOB, VAR_STRING, STRING, GEOMETRY = (
        249, 250, 251, 252, 253, 254, 255)


# the same types as plain ints, under the short names the decoders use (in definition order)
(_DECIMAL, _TINY, _SHORT, _LONG, _FLOAT, _DOUBLE, _NULL, _TIMESTAMP, _LONGLONG, _INT24, _DATE,
 _TIME, _DATETIME, _YEAR, _NEWDATE, _VARCHAR, _BIT, _TIMESTAMP2, _DATETIME2, _TIME2, _JSON,
 _NEWDECIMAL, _ENUM, _SET, _TINY_BLOB, _MEDIUM_BLOB, _LONG_BLOB, _BLOB, _VAR_STRING, _STRING,
 _GEOMETRY) = (int(t) for t in ColumnType)

_NUMERIC = frozenset({_TINY, _SHORT, _INT24, _LONG, _LONGLONG, _NEWDECIMAL, _FLOAT, _DOUBLE,
                      _YEAR})
_CHARACTER = frozenset({_STRING, _VAR_STRING, _VARCHAR, _BLOB})


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


# -- the dump stream ---------------------------------------------------------------------------

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


# -- events ----------------------------------------------------------------------------------

def has_crc(data: bytes, start: int, end: int) -> bool:
    """The event ends with the CRC32 of the rest (used for the fake ROTATE only)."""
    if end - start < 23:
        return False
    return zlib.crc32(data[start:end - 4]) == int.from_bytes(data[end - 4:end], "little")


def rotate(data: bytes, start: int, end: int, checksum: bool | None) -> tuple[str, int]:
    """(next file, position) of a ROTATE event; ``checksum`` None: find out from the CRC."""
    if checksum is None:
        checksum = has_crc(data, start, end)
    stop = end - 4 if checksum else end
    pos = int.from_bytes(data[start + 19:start + 27], "little")
    return bytes(data[start + 27:stop]).decode(), pos


def mariadb_gtid_list(data: bytes, start: int, end: int) -> list[str]:
    b = start + 19
    count = int.from_bytes(data[b:b + 4], "little") & 0x0FFFFFFF  # top 4 bits: flags
    out = []
    b += 4
    for _ in range(count):
        domain, server, seq = struct.unpack_from("<IIQ", data, b)
        out.append(f"{domain}-{server}-{seq}")
        b += 16
    return out


def _uuid(sid: bytes) -> str:
    h = sid.hex()
    return f"{h[:8]}-{h[8:12]}-{h[12:16]}-{h[16:20]}-{h[20:]}"


_SIDS: dict[bytes, str] = {}  # a source's 16 bytes -> "uuid:" (one or a few per binlog)


_SID_GNO = struct.Struct("<16sQ")  # a GTID event's source id and number, after its flags


def mysql_gtid_parts(data: bytes, start: int) -> tuple[str, int]:
    """``("uuid:", gno)`` of a MySQL GTID event: one unpack, the source's text cached (the
    reader keeps both, so the GTID set grows by a number, not by parsing its text)."""
    raw, gno = _SID_GNO.unpack_from(data, start + 20)
    sid = _SIDS.get(raw)
    if sid is None:
        if len(_SIDS) >= 1024:
            _SIDS.clear()
        sid = _SIDS[raw] = _uuid(raw) + ":"
    return sid, gno


def mysql_gtid(data: bytes, start: int) -> str:
    """``uuid:gno`` of a MySQL GTID event."""
    b = start + 19
    raw = bytes(data[b + 1:b + 17])
    sid = _SIDS.get(raw)
    if sid is None:
        if len(_SIDS) >= 1024:
            _SIDS.clear()
        sid = _SIDS[raw] = _uuid(raw) + ":"
    return f"{sid}{int.from_bytes(data[b + 17:b + 25], 'little')}"


def previous_gtids(data: bytes, start: int) -> list[str]:
    """A MySQL PREVIOUS_GTIDS event as GTID set members ``uuid:1-5:7-9`` (the binlog stores
    half-open intervals)."""
    b = start + 19
    (n_sids,) = struct.unpack_from("<Q", data, b)
    b += 8
    out = []
    for _ in range(n_sids):
        sid = _uuid(bytes(data[b:b + 16]))
        (n,) = struct.unpack_from("<Q", data, b + 16)
        b += 24
        parts = [sid]
        for _ in range(n):
            lo, hi = struct.unpack_from("<QQ", data, b)
            b += 16
            parts.append(f"{lo}-{hi - 1}" if hi - 1 != lo else f"{lo}")
        out.append(":".join(parts))
    return out


def _statement_at(data: bytes, start: int, post_header: int) -> int:
    """Where the statement of a QUERY (or QUERY_COMPRESSED) event starts."""
    b = start + 19
    return b + post_header + (data[b + 11] | data[b + 12] << 8) + data[b + 8] + 1


def fold_begins(data: bytes, events: list[tuple], csum: int, query_post: int, lead: int = 0
                ) -> list[tuple]:
    """``events`` with each MySQL GTID (or anonymous GTID) event and the QUERY event
    ``BEGIN`` right after it as one event of type ``FOLDED`` + the GTID's (the GTID event's
    fields): the Python twin of the compiled ``fold_begins``, which the reader uses. The
    BEGIN event moves nothing (the transaction began at its GTID); MariaDB has no such
    pair, so folded, the reader's loop takes as many steps per transaction on both
    servers. Nothing is folded after a FORMAT_DESCRIPTION or ROTATE event (``csum`` and
    ``query_post`` may change there). ``lead``: the type of the event just before the list
    (a TRANSACTION_PAYLOAD's events follow their GTID event): after a GTID, a first event
    ``BEGIN`` becomes one of type ``FOLDED`` + QUERY."""
    def begin(q: tuple) -> bool:
        return q[1] == QUERY and q[6] + 19 + 13 <= q[7] and \
            data[_statement_at(data, q[6], query_post):q[7] - csum] == b"BEGIN"

    out: list[tuple] = []
    folding, i, n = True, 0, len(events)
    while i < n:
        ev = events[i]
        if ev[1] in (FORMAT_DESCRIPTION, ROTATE):
            folding = False
        if folding and i == 0 and lead in (GTID, ANONYMOUS_GTID) and begin(ev):
            out.append(ev[:1] + (FOLDED + QUERY,) + ev[2:])
            i += 1
            continue
        if folding and ev[1] in (GTID, ANONYMOUS_GTID) and i + 1 < n and begin(events[i + 1]):
            out.append(ev[:1] + (FOLDED + ev[1],) + ev[2:])
            i += 2
            continue
        out.append(ev)
        i += 1
    return out


def query_text(data: bytes, start: int, end: int, post_header: int) -> bytes:
    """The statement of a QUERY event (``end`` without the checksum), stripped."""
    return bytes(data[_statement_at(data, start, post_header):end]).strip()


def compressed_query_text(data: bytes, start: int, end: int, post_header: int) -> bytes:
    """The statement of a MariaDB QUERY_COMPRESSED event, stripped: the event is a QUERY
    event whose statement is compressed (``mariadb_inflate``). MariaDB's replicas turn it
    into a QUERY event by inflating the statement in place and keep the rest, so it is read
    with the QUERY event's post-header length (``query_db`` reads its database as is).
    Raises ``ValueError`` saying what is wrong."""
    return mariadb_inflate(data, _statement_at(data, start, post_header), end).strip()


def mariadb_inflate(data: bytes, p: int, end: int) -> bytes:
    """The compressed part of a MariaDB compressed event (``data[p:end]``, without the
    checksum) inflated: a row event's row images, a query event's statement.

    The part is one header byte (its high bit set; bits 4-6 the algorithm, 0 for zlib, the
    only one MariaDB has; bits 0-2 how many bytes of uncompressed length follow, 1 to 4),
    the uncompressed length (big-endian), then one zlib stream that inflates to exactly that
    length. Anything else raises ``ValueError`` saying what is wrong (the reader names the
    event's file and position).

    Python's zlib does the inflate: it is the C library the server compresses with, and
    its output is one ``bytes`` object that goes to the row decoders as it is, so inflating
    in ``_fastdecode.c`` would save one call per event and add a build dependency."""
    if end - p < 2:
        raise ValueError("the compressed part is missing")
    head = data[p]
    lenlen = head & 0x07
    if not head & 0x80:
        raise ValueError(f"its first byte 0x{head:02x} does not mark a compressed part")
    if head & 0x70:
        raise ValueError(f"compression algorithm {(head >> 4) & 7} is unknown (MariaDB "
                         f"writes 0, zlib)")
    if not 1 <= lenlen <= 4 or end - p < 1 + lenlen:
        raise ValueError(f"its length field of {lenlen} bytes is malformed")
    n = int.from_bytes(data[p + 1:p + 1 + lenlen], "big")
    if n == 0:
        raise ValueError("its uncompressed length is 0")
    z = zlib.decompressobj()
    try:
        with memoryview(data) as view, view[p + 1 + lenlen:end] as body:
            out = z.decompress(body, n)
        # n bytes out: only the stream's end (its checksum) may be left
        if not z.eof and z.decompress(z.unconsumed_tail, 1):
            raise ValueError(f"it inflates to more than the {n} bytes its header says")
    except zlib.error as e:
        raise ValueError(f"its zlib stream is corrupt ({e})") from None
    if not z.eof:
        raise ValueError("its zlib stream is cut short")
    if len(out) != n:
        raise ValueError(f"it inflates to {len(out)} bytes, not the {n} its header says")
    if z.unused_data:
        raise ValueError(f"{len(z.unused_data)} bytes follow its zlib stream")
    return out


def query_db(data: bytes, start: int, post_header: int) -> str | None:
    """The default database of a QUERY event (``USE db`` when it ran), None if none."""
    b = start + 19
    db_len = data[b + 8]
    if not db_len:
        return None
    p = b + post_header + (data[b + 11] | data[b + 12] << 8)
    return bytes(data[p:p + db_len]).decode("utf-8", "replace")


def format_description(data: bytes, start: int, end: int) -> tuple[bool, bytes]:
    """(checksum on, post-header lengths by event type - 1) of a FORMAT_DESCRIPTION."""
    b = start + 19
    header_len = data[b + 56]
    if header_len != 19:
        raise DecodeError(f"binlog events with a {header_len}-byte header are not supported")
    # checksum-aware servers (MySQL 5.6.1+, MariaDB 5.3+) always end it with the algorithm
    # byte and 4 checksum bytes
    return data[end - 5] == 1, bytes(data[b + 57:end - 5])


# -- table maps --------------------------------------------------------------------------------

class ColumnMeta:
    """One column of a table map, with the attribute names the row decoders read."""

    __slots__ = (
        "bits",
        "bytes",
        "character_set_name",
        "charset_id",
        "decimals",
        "enum_values",
        "fsp",
        "length_size",
        "max_length",
        "name",
        "precision",
        "set_values",
        "size",
        "type",
        "unsigned",
    )

    def __init__(self, type_: int):
        self.type = type_
        self.name: str | None = None
        self.max_length: int | None = None
        self.length_size: int | None = None
        self.fsp: int | None = None
        self.precision: int | None = None
        self.decimals: int | None = None
        self.bits: int | None = None
        self.bytes: int | None = None
        self.size: int | None = None
        self.enum_values: list[str] | None = None
        self.set_values: list[str] | None = None
        self.character_set_name: str | None = None
        self.charset_id: int | None = None
        self.unsigned = False

    def __repr__(self) -> str:
        return f"ColumnMeta({self.type}, {self.name!r})"


class TableMap:
    """A parsed TABLE_MAP event."""

    __slots__ = (
        "__weakref__",
        "columns",
        "full",
        "key",
        "ncols",
        "schema",
        "table",
        "table_id",
    )

    def __init__(self, table_id: int, schema: str, table: str, columns: list[ColumnMeta]):
        self.table_id = table_id
        self.schema = schema
        self.table = table
        self.key = (schema, table)
        self.columns = columns
        self.ncols = len(columns)
        self.full = (1 << self.ncols) - 1  # every column present

    def __repr__(self) -> str:
        return f"TableMap({self.table_id}, {self.schema}.{self.table}, {self.ncols} columns)"


def _packed_int(d: bytes, p: int) -> tuple[int, int]:
    """A length-encoded integer at ``p``: (value, next position)."""
    c = d[p]
    if c < 251:
        return c, p + 1
    if c == 252:
        return d[p + 1] | d[p + 2] << 8, p + 3
    if c == 253:
        return int.from_bytes(d[p + 1:p + 4], "little"), p + 4
    if c == 254:
        return int.from_bytes(d[p + 1:p + 9], "little"), p + 9
    raise DecodeError(f"bad length-encoded integer 0x{c:02x} in a binlog event")


def _charset_name(collation_id: int) -> str | None:
    try:
        from pymysql.charset import charset_by_id

        return charset_by_id(collation_id).name
    except (KeyError, ImportError):
        return None


def parse_table_map(body: bytes, flavor: str = "mariadb", table_id_len: int = 6) -> TableMap:
    """A TABLE_MAP event's body (after the header, without the checksum)."""
    try:
        return _parse_table_map(body, flavor, table_id_len)
    except (IndexError, struct.error, UnicodeDecodeError) as e:
        raise DecodeError(f"malformed TABLE_MAP event: {e!r}",
                          fix="report the server version; the event could not be parsed") \
            from None


def _parse_table_map(d: bytes, flavor: str, table_id_len: int) -> TableMap:
    table_id = int.from_bytes(d[0:table_id_len], "little")
    p = table_id_len + 2  # flags
    n = d[p]
    schema = d[p + 1:p + 1 + n].decode()
    p += 1 + n + 1  # NUL
    n = d[p]
    table = d[p + 1:p + 1 + n].decode()
    p += 1 + n + 1
    ncols, p = _packed_int(d, p)
    types = d[p:p + ncols]
    p += ncols
    meta_len, p = _packed_int(d, p)
    meta_end = p + meta_len
    cols = []
    for t in types:
        c = ColumnMeta(t)
        if t == _VARCHAR:
            c.max_length = d[p] | d[p + 1] << 8
            p += 2
        elif t in (_FLOAT, _DOUBLE):
            c.size = d[p]
            p += 1
        elif t in (_TIMESTAMP2, _DATETIME2, _TIME2):
            c.fsp = d[p]
            p += 1
        elif t in (_VAR_STRING, _STRING):
            # byte 0: the real type (and, for long CHARs, two bits of the length); byte 1
            real, low = d[p], d[p + 1]
            p += 2
            if real in (_ENUM, _SET):
                c.type = real
                c.size = low
            else:
                c.max_length = (((real << 4) & 0x300) ^ 0x300) + low
        elif t in (_BLOB, _GEOMETRY, _JSON, _TINY_BLOB, _MEDIUM_BLOB, _LONG_BLOB):
            c.length_size = d[p]
            p += 1
        elif t == _NEWDECIMAL:
            c.precision, c.decimals = d[p], d[p + 1]
            p += 2
        elif t == _BIT:
            bits, nbytes = d[p], d[p + 1]
            p += 2
            c.bits = nbytes * 8 + bits
            c.bytes = (c.bits + 7) // 8
        cols.append(c)
    p = meta_end + (ncols + 7) // 8  # the NULL-able bitmap
    _optional_metadata(d, p, cols, flavor)
    return TableMap(table_id, schema, table, cols)


def _is_character(c: ColumnMeta, flavor: str) -> bool:
    return c.type in _CHARACTER or (c.type == _GEOMETRY and flavor == "mariadb")


def _optional_metadata(d: bytes, p: int, cols: list[ColumnMeta], flavor: str) -> None:
    """binlog_row_metadata=FULL: TLV fields after the NULL bitmap."""
    end = len(d)
    chars = [c for c in cols if _is_character(c, flavor)]
    enums_sets = [c for c in cols if c.type in (_ENUM, _SET)]
    raw_members: list[tuple[ColumnMeta, list[bytes], bool]] = []  # decoded once charsets known
    while p < end:
        kind = d[p]
        length, p = _packed_int(d, p + 1)
        q, stop = p, p + length
        p = stop
        if kind == 1:  # signedness of the numeric columns, one bit each, high bit first
            i = 0
            for c in cols:
                if c.type in _NUMERIC:
                    c.unsigned = bool(d[q + (i >> 3)] & (0x80 >> (i & 7)))
                    i += 1
        elif kind in (2, 10):  # default charset (+ exceptions), of text / of ENUM and SET
            targets = chars if kind == 2 else enums_sets
            default, q = _packed_int(d, q)
            ids = [default] * len(targets)
            while q < stop:
                idx, q = _packed_int(d, q)
                cid, q = _packed_int(d, q)
                if idx < len(ids):
                    ids[idx] = cid
            for c, cid in zip(targets, ids):
                c.charset_id = cid
        elif kind in (3, 11):  # one charset per text / ENUM and SET column
            targets = chars if kind == 3 else enums_sets
            i = 0
            while q < stop and i < len(targets):
                cid, q = _packed_int(d, q)
                targets[i].charset_id = cid
                i += 1
        elif kind == 4:  # column names
            i = 0
            while q < stop and i < len(cols):
                n, q = _packed_int(d, q)
                cols[i].name = d[q:q + n].decode()
                q += n
                i += 1
        elif kind in (5, 6):  # SET / ENUM member strings
            targets = [c for c in cols if c.type == (_SET if kind == 5 else _ENUM)]
            i = 0
            while q < stop and i < len(targets):
                count, q = _packed_int(d, q)
                members = []
                for _ in range(count):
                    n, q = _packed_int(d, q)
                    members.append(d[q:q + n])
                    q += n
                raw_members.append((targets[i], members, kind == 6))
                i += 1
    for c in cols:
        if c.charset_id is not None:
            c.character_set_name = _charset_name(c.charset_id)
    for c, members, is_enum in raw_members:
        vals = [_member_text(m, c.charset_id) for m in members]
        if is_enum:
            c.enum_values = [""] + vals
        else:
            c.set_values = vals


def _member_text(raw: bytes, collation_id: int | None) -> str:
    """An ENUM/SET member in its column's charset (the ENUM_AND_SET charset metadata)."""
    codec = "utf-8"
    if collation_id is not None:
        try:
            from pymysql.charset import charset_by_id

            codec = charset_by_id(collation_id).encoding
        except (KeyError, ImportError):
            pass
    try:
        return raw.decode(codec)
    except (UnicodeDecodeError, LookupError):
        return raw.decode("latin-1")


def rows_header(data: bytes, b: int, end: int, version: int, update: bool,
                table_id_len: int = 6) -> tuple[int, int, int, int | None, int]:
    """(table id, column count, present bitmap, update's second bitmap or None, where the
    row images start) of a rows event whose body starts at ``b``."""
    table_id = int.from_bytes(data[b:b + table_id_len], "little")
    p = b + table_id_len + 2
    if version == 2:
        p += data[p] | data[p + 1] << 8  # extra data, its length included
    c = data[p]
    if c < 251:
        ncols, p = c, p + 1
    else:
        ncols, p = _packed_int(data, p)
    nb = (ncols + 7) >> 3
    present = int.from_bytes(data[p:p + nb], "little")
    p += nb
    present2 = None
    if update:
        present2 = int.from_bytes(data[p:p + nb], "little")
        p += nb
    return table_id, ncols, present, present2, p


__all__ = [
    "HEADER",
    "ROW_EVENTS",
    "ColumnMeta",
    "ColumnType",
    "DumpStream",
    "TableMap",
    "compressed_query_text",
    "mariadb_inflate",
    "parse_table_map",
    "rows_header",
]
