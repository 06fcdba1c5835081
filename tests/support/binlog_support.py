"""Synthetic MariaDB binlogs for the event layer's tests: events built byte by byte (format
description, GTID, TABLE_MAP, rows events v1 and v2, QUERY, XID, and MariaDB's compressed
twins of the rows and query events, as ``log_bin_compress=ON`` writes them), served to the
real ``BinlogReader`` through its real ``DumpStream`` from in-memory bytes instead of a
socket, so the whole read path (splitter, event loop, decoders) runs on them.

``Binlog`` lays the events out at their positions in one file; ``SyntheticReader`` streams
them from any position the way a server does (the format description first, marked
artificial, when the dump starts later in the file).
"""

from __future__ import annotations

import struct
import zlib

from sparkcdc.mysql.binlog import protocol as E
from sparkcdc.mysql.binlog.protocol.codes import ColumnType as CT
from sparkcdc.mysql.binlog.reader import BinlogReader
from sparkcdc.mysql.connection import ConnectionOptions

FILE = "binlog.000001"
SERVER_ID = 3

# the post-header lengths of a MariaDB format description, by event type (1-based)
_POST = {E.QUERY: 13, E.ROTATE: 8, E.FORMAT_DESCRIPTION: 0, E.TABLE_MAP: 8,
         E.MARIADB_GTID: 19, E.QUERY_COMPRESSED: 13}
_POST.update({t: 8 for t in (E.WRITE_ROWS_V1, E.UPDATE_ROWS_V1, E.DELETE_ROWS_V1,
                             E.WRITE_ROWS_COMPRESSED_V1, E.UPDATE_ROWS_COMPRESSED_V1,
                             E.DELETE_ROWS_COMPRESSED_V1)})
_POST.update({t: 10 for t in (E.WRITE_ROWS_V2, E.UPDATE_ROWS_V2, E.DELETE_ROWS_V2,
                              E.WRITE_ROWS_COMPRESSED, E.UPDATE_ROWS_COMPRESSED,
                              E.DELETE_ROWS_COMPRESSED)})

# rows event type by (mode, version, compressed)
ROWS_TYPE = {(mode, version, t in E.COMPRESSED_ROW_EVENTS): t
             for t, (mode, version) in E.ROW_EVENTS.items() if t != E.PARTIAL_UPDATE_ROWS}


def compressed(payload: bytes, extra_len_bytes: int = 0) -> bytes:
    """``payload`` as MariaDB compresses it: a header byte (high bit, zlib, how many bytes
    of length follow), the length big-endian, the zlib stream. The server writes the fewest
    length bytes; ``extra_len_bytes`` more are just as valid."""
    n = len(payload)
    lenlen = max(1, (n.bit_length() + 7) // 8) + extra_len_bytes
    assert lenlen <= 4
    return bytes([0x80 | lenlen]) + n.to_bytes(lenlen, "big") + zlib.compress(payload)


def packed_int(n: int) -> bytes:
    if n < 251:
        return bytes([n])
    if n < 1 << 16:
        return b"\xfc" + n.to_bytes(2, "little")
    return b"\xfd" + n.to_bytes(3, "little")


def table_map_body(table_id: int, schema: str, table: str, columns: list) -> bytes:
    """A TABLE_MAP body for table-map columns (``rows_support.binlog_column``), without
    optional metadata: the types and the metadata ``protocol.parse_table_map`` reads."""
    types, meta = bytearray(), bytearray()
    for c in columns:
        t = c.type
        if t in (CT.ENUM, CT.SET):  # logged as STRING, the real type in the metadata
            types.append(CT.STRING)
            meta += bytes([t, c.size])
            continue
        types.append(t)
        if t == CT.VARCHAR:
            meta += c.max_length.to_bytes(2, "little")
        elif t == CT.STRING:
            assert c.max_length < 256
            meta += bytes([CT.STRING, c.max_length])
        elif t in (CT.FLOAT, CT.DOUBLE):
            meta.append(4 if t == CT.FLOAT else 8)
        elif t in (CT.TIMESTAMP2, CT.DATETIME2, CT.TIME2):
            meta.append(c.fsp)
        elif t in (CT.BLOB, CT.GEOMETRY, CT.JSON, CT.TINY_BLOB, CT.MEDIUM_BLOB, CT.LONG_BLOB):
            meta.append(c.length_size)
        elif t == CT.NEWDECIMAL:
            meta += bytes([c.precision, c.decimals])
        elif t == CT.BIT:
            meta += bytes([c.bits % 8, c.bits // 8])
    n = len(columns)
    return (table_id.to_bytes(6, "little") + b"\1\0" + bytes([len(schema)]) + schema.encode()
            + b"\0" + bytes([len(table)]) + table.encode() + b"\0" + packed_int(n)
            + bytes(types) + packed_int(len(meta)) + bytes(meta) + b"\xff" * ((n + 7) // 8))


def rows_body(table_id: int, ncols: int, mode: int, version: int, images: bytes, *,
              compress: bool = False, extra_len_bytes: int = 0) -> bytes:
    """A rows event's body: every column present; ``images`` compressed with ``compress``."""
    bitmap = b"\xff" * ((ncols + 7) // 8)
    head = table_id.to_bytes(6, "little") + b"\1\0"  # STMT_END_F
    if version == 2:
        head += b"\2\0"  # the extra data: only its own length
    head += packed_int(ncols) + bitmap + (bitmap if mode == 2 else b"")
    return head + (compressed(images, extra_len_bytes) if compress else images)


def query_body(statement: bytes, db: str = "", *, compress: bool = False) -> bytes:
    post = struct.pack("<IIBHH", 1, 0, len(db), 0, 0)
    return post + db.encode() + b"\0" + (compressed(statement) if compress else statement)


def mariadb_gtid_body(seq: int, domain: int = 0, standalone: bool = False) -> bytes:
    return struct.pack("<QIB", seq, domain, 1 if standalone else 0) + bytes(6)


def format_description_body(checksum: bool) -> bytes:
    post = bytes(_POST.get(t, 0) for t in range(1, E.DELETE_ROWS_COMPRESSED + 1))
    # the algorithm byte; the event's own 4 checksum bytes follow it (Binlog.add)
    return (struct.pack("<H", 4) + b"10.11.0-MariaDB-log".ljust(50, b"\0")
            + struct.pack("<I", 0) + bytes([19]) + post + bytes([1 if checksum else 0]))


class Binlog:
    """One binlog file's events at their positions (from 4), with CRC32s or without."""

    def __init__(self, checksum: bool = True, ts: int = 1_700_000_000):
        self.checksum, self.ts = checksum, ts
        self.events: list[tuple[int, int, bytes]] = []  # (start, type, event bytes)
        self.pos = 4
        self.add(E.FORMAT_DESCRIPTION, format_description_body(checksum), crc=True)

    def add(self, etype: int, body: bytes, *, crc: bool | None = None) -> int:
        """Appends an event; returns its start position."""
        crc = self.checksum if crc is None else crc
        start = self.pos
        size = 19 + len(body) + (4 if crc else 0)
        self.events.append((start, etype, self.event(etype, body, start + size, 0, crc)))
        self.pos += size
        return start

    def event(self, etype: int, body: bytes, log_pos: int, flags: int, crc: bool) -> bytes:
        size = 19 + len(body) + (4 if crc else 0)
        ev = struct.pack("<IBIIIH", self.ts, etype, SERVER_ID, size, log_pos, flags) + body
        return ev + struct.pack("<I", zlib.crc32(ev)) if crc else ev

    def wire(self, pos: int) -> bytes:
        """What a dump from ``pos`` sends: packets of events, then the EOF packet."""
        out, seq = [], 1
        events = [ev for start, _t, ev in self.events if start >= pos]
        if pos > 4:  # the format description again, artificial, without a position
            body = self.events[0][2][19:-4]
            events.insert(0, self.event(E.FORMAT_DESCRIPTION, body, 0, 0x20, True))
        for ev in events + [None]:
            payload = b"\xfe\0\0\0\0" if ev is None else b"\0" + ev
            out.append(len(payload).to_bytes(3, "little") + bytes([seq & 0xFF]) + payload)
            seq += 1
        return b"".join(out)


class _Socket:
    """The bytes of a dump as pymysql's reader hands them out, in pieces."""

    def __init__(self, data: bytes, piece: int = 1 << 16):
        self.data, self.pos, self.piece = data, 0, piece

    def read1(self, n: int) -> bytes:
        out = self.data[self.pos:self.pos + min(n, self.piece)]
        self.pos += len(out)
        return out


class _Connection:
    def __init__(self, data: bytes):
        self._rfile = _Socket(data)

    def _force_close(self) -> None:
        pass


class SyntheticReader(BinlogReader):
    """The real reader; its streams come from a ``Binlog`` instead of a server."""

    def __init__(self, binlog: Binlog, tables, **kw):
        # a flavor given: no server to ask (a file-and-position start asks it otherwise);
        # the synthetic binlogs are MariaDB's unless told
        kw.setdefault("flavor", "mariadb")
        super().__init__(ConnectionOptions(hostname="127.0.0.1", port=9, max_retries=0),
                         7700, tables, **kw)
        self.binlog = binlog

    def _open(self, start, **_how):  # a non-blocking dump of the whole file from ``start``
        assert start.file == FILE
        stream = E.DumpStream({}, 7700, FILE, start.pos, blocking=False, heartbeat=None,
                              read_timeout=1)
        stream.connection = _Connection(self.binlog.wire(start.pos))
        return stream
