"""MySQL 8 binlog bytes replayed through ``BinlogReader`` without a server (none runs here).

``replay`` hands the reader a fake dump stream that yields whole events as the socket
would: a FORMAT_DESCRIPTION of MySQL 8.0.27 (its post-header lengths as go-mysql's
transaction payload test records them), then the events a test gives. Events are built
from the documented formats by the small encoders below (``event``, ``gtid``, ``payload``,
``table_map``, ``rows``, ``partial_update``, and ``jsonb`` for binary JSON); the public
fixtures under ``mysql/binlog/fixtures/mysql8`` (README.md there) are read by ``fixture``.
"""

from __future__ import annotations

import struct
import zlib
from pathlib import Path

from sparkcdc.core.offsets import BinlogOffset
from sparkcdc.mysql.binlog import protocol as E
from sparkcdc.mysql.binlog.reader import BinlogReader
from sparkcdc.mysql.connection import ConnectionOptions

FIXTURES = Path(__file__).parents[1] / "mysql" / "binlog" / "fixtures" / "mysql8"
FILE = "binlog.000001"
# MySQL 8.0.27's post-header lengths by event type - 1 (go-mysql's payload test has them)
POST_HEADERS = bytes([0x38, 0xd, 0x0, 0x8, 0x0, 0x12, 0x0, 0x4, 0x4, 0x4, 0x4, 0x12, 0x0,
                      0x0, 0x5c, 0x0, 0x4, 0x1a, 0x8, 0x0, 0x0, 0x0, 0x8, 0x8, 0x8, 0x2,
                      0x0, 0x0, 0x0, 0xa, 0xa, 0xa, 0x19, 0x19, 0x0, 0x12, 0x34, 0x0, 0xa,
                      0x28, 0x0])


def fixture(name: str) -> bytes:
    """A fixture's bytes (a ``.hex`` file: hex digits, whitespace ignored)."""
    return bytes.fromhex((FIXTURES / name).read_text())


def packed(n: int) -> bytes:
    """A length-encoded integer."""
    if n < 251:
        return bytes([n])
    if n < 1 << 16:
        return b"\xfc" + n.to_bytes(2, "little")
    if n < 1 << 24:
        return b"\xfd" + n.to_bytes(3, "little")
    return b"\xfe" + n.to_bytes(8, "little")


class Binlog:
    """A binlog file's events laid out from position 4, each with its log_pos."""

    def __init__(self, checksum: bool = True, server_id: int = 1):
        self.checksum, self.server_id = checksum, server_id
        self.events: list[bytes] = []
        self.pos = 4
        body = struct.pack("<H", 4) + b"8.0.27".ljust(50, b"\0") + struct.pack("<I", 0) + \
            bytes([19]) + POST_HEADERS + bytes([1 if checksum else 0])
        self.add(E.FORMAT_DESCRIPTION, body, crc=True)  # it always has the checksum bytes

    def add(self, etype: int, body: bytes, ts: int = 1_700_000_000,
            crc: bool | None = None) -> tuple[int, int]:
        """Append an event; its (start, end) in the file."""
        crc = self.checksum if crc is None else crc
        size = 19 + len(body) + (4 if crc else 0)
        start, end = self.pos, self.pos + size
        ev = struct.pack("<IBIIIH", ts, etype, self.server_id, size, end, 0) + body
        if crc:
            ev += struct.pack("<I", zlib.crc32(ev))
        self.events.append(ev)
        self.pos = end
        return start, end


def anonymous_gtid(log: Binlog) -> tuple[int, int]:
    """MySQL 8's ANONYMOUS_GTID (gtid_mode=OFF), which starts every transaction."""
    return log.add(E.ANONYMOUS_GTID, b"\x01" + bytes(16) + bytes(8) + b"\x02" + bytes(16)
                   + b"\0" * 9)


def payload_body(events: bytes, compression: int = 0, frame: bytes | None = None) -> bytes:
    """A TRANSACTION_PAYLOAD body around ``events``: zstd-compressed for ``compression`` 0
    (or ``frame`` as the compressed bytes), as they are for any other."""
    if frame is not None:
        data = frame
    elif compression == 0:
        import zstandard

        data = zstandard.ZstdCompressor().compress(events)
    else:
        data = events
    fields = [(2, packed(compression)), (3, packed(len(events))), (1, packed(len(data)))]
    head = b"".join(packed(t) + packed(len(v)) + v for t, v in fields)
    return head + b"\0" + data


def inner(etype: int, body: bytes, ts: int = 1_700_000_000, server_id: int = 1) -> bytes:
    """An event as it sits inside a payload: log_pos 0, no checksum."""
    return struct.pack("<IBIIIH", ts, etype, server_id, 19 + len(body), 0, 0) + body


def query(sql: bytes, db: bytes = b"") -> bytes:
    """A QUERY event's body (13-byte post-header, no status variables)."""
    return struct.pack("<IIBHH", 9, 0, len(db), 0, 0) + db + b"\0" + sql


def xid(n: int) -> bytes:
    return struct.pack("<Q", n)


def table_map(table_id: int, schema: bytes, table: bytes, types: bytes, meta: bytes,
              extra: bytes = b"") -> bytes:
    n = len(types)
    return (table_id.to_bytes(6, "little") + b"\1\0" + bytes([len(schema)]) + schema + b"\0"
            + bytes([len(table)]) + table + b"\0" + packed(n) + types + packed(len(meta))
            + meta + bytes((n + 7) // 8 * [0xFF]) + extra)


def rows_v2(table_id: int, ncols: int, images: bytes, update: bool) -> bytes:
    """A v2 rows event's body: every column present in every image."""
    bitmap = bytes((ncols + 7) // 8 * [0xFF])
    return (table_id.to_bytes(6, "little") + b"\1\0" + b"\2\0" + packed(ncols) + bitmap
            + (bitmap if update else b"") + images)


class _Stream:
    def __init__(self, events: list[bytes], checksum: bool):
        self.events, self.checksum = events, checksum

    def connect(self) -> None:
        pass

    def close(self) -> None:
        pass

    def batches(self):
        data = b"".join(self.events)
        evs, p = [], 0
        for ev in self.events:
            evs.append(E.HEADER.unpack_from(data, p) + (p, p + len(ev)))
            p += len(ev)
        yield data, evs


class ReplayReader(BinlogReader):
    """A ``BinlogReader`` whose every stream replays ``log`` from position 4 on."""

    def __init__(self, log: Binlog, tables, decoder, *, connect_timeout: float = 30.0,
                 **kw):
        super().__init__(ConnectionOptions("127.0.0.1", max_retries=0,
                                           connect_timeout=connect_timeout), 7001, tables,
                         flavor="mysql", decoder=decoder, **kw)
        self.log = log
        self.opened = 0  # streams opened: the first, then one per reconnect

    def _open(self, start, **kw):
        assert start.file == FILE
        self.opened += 1
        events = self.log.events
        fd = events[0]  # the format description comes first; from past it, as servers
        if start.pos > 4:  # send it: with log_pos 0 (not a position to move to)
            fd = fd[:13] + b"\0\0\0\0" + fd[17:]
            if self.log.checksum:
                fd = fd[:-4] + struct.pack("<I", zlib.crc32(fd[:-4]))
        kept, pos = [fd], 4 + len(events[0])
        for ev in events[1:]:
            if pos >= start.pos:
                kept.append(ev)
            pos += len(ev)
        return _Stream(kept, self.log.checksum)


def offset(pos: int, events: int = 0, rows: int = 0) -> BinlogOffset:
    return BinlogOffset(FILE, pos, events, rows, flavor="mysql")


# -- binary JSON, from MySQL's documented format (json_binary.h) ---------------------------

_JT = {"obj": (0, 1), "arr": (2, 3), "lit": 4, "int16": 5, "uint16": 6, "int32": 7,
       "uint32": 8, "int64": 9, "uint64": 10, "double": 11, "str": 12, "opaque": 15}
_FMT = {"int16": "<h", "uint16": "<H", "int32": "<i", "uint32": "<I", "int64": "<q",
        "uint64": "<Q", "double": "<d"}


def _varlen(n: int) -> bytes:
    out = bytearray()
    while True:
        out.append((n & 0x7F) | (0x80 if n >> 7 else 0))
        n >>= 7
        if not n:
            return bytes(out)


def jsonb(v: tuple) -> bytes:
    """A stored JSON value (type byte, then the value) of a tagged tree: ``("int16", -5)``,
    ``("double", 1.5)``, ``("str", "x")``, ``("lit", True)``, ``("opaque", 246, b"...")``,
    ``("obj", [(key, value), ...], large)`` (keys in MySQL's order), ``("arr", [...],
    large)``."""
    t, data = _encode(v)
    return bytes([t]) + data


def _encode(v: tuple) -> tuple[int, bytes]:
    kind = v[0]
    if kind in _FMT:
        return _JT[kind], struct.pack(_FMT[kind], v[1])
    if kind == "lit":
        return 4, bytes([{None: 0, True: 1, False: 2}[v[1]]])
    if kind == "str":  # text, or bytes as they are (invalid UTF-8 too)
        b = v[1] if isinstance(v[1], bytes) else v[1].encode()
        return 12, _varlen(len(b)) + b
    if kind == "opaque":
        return 15, bytes([v[1]]) + _varlen(len(v[2])) + v[2]
    items, large = v[1], v[2]
    is_obj = kind == "obj"
    osz = 4 if large else 2
    fmt = "<I" if large else "<H"
    n = len(items)
    head = 2 * osz + n * (osz + 2 if is_obj else 0) + n * (1 + osz)
    keys = [k if isinstance(k, bytes) else k.encode() for k, _ in items] if is_obj else []
    values = [x for _, x in items] if is_obj else list(items)
    body = bytearray()
    key_entries, at = bytearray(), head
    for k in keys:
        key_entries += struct.pack(fmt, at) + struct.pack("<H", len(k))
        at += len(k)
    body += b"".join(keys)
    value_entries = bytearray()
    for x in values:
        t, data = _encode(x)
        if t in (4, 5, 6) or (large and t in (7, 8)):
            value_entries += bytes([t]) + data.ljust(osz, b"\0")
        else:
            value_entries += bytes([t]) + struct.pack(fmt, at)
            body += data
            at += len(data)
    t = _JT[kind][1 if large else 0]
    return t, struct.pack(fmt, n) + struct.pack(fmt, head + len(body)) + \
        bytes(key_entries) + bytes(value_entries) + bytes(body)


# -- PARTIAL_UPDATE_ROWS, from MySQL's documented format (sql/rpl_record.h) ----------------

def json_diff(op: int, path: str, value: bytes | None = None) -> bytes:
    """One diff as ``Json_diff::write_binary`` writes it."""
    p = path.encode()
    out = bytes([op]) + packed(len(p)) + p
    return out if value is None else out + packed(len(value)) + value


def partial_row(before: bytes, after: bytes, partial_bits: bytes | None) -> bytes:
    """A row of a PARTIAL_UPDATE_ROWS event: the before image, the shared image
    (``value_options``, 1 = PARTIAL_JSON_UPDATES, then one bit per JSON column of the
    table), the after image."""
    shared = b"\0" if partial_bits is None else b"\1" + partial_bits
    return before + shared + after
