"""The events that move the reader, read from their bytes: rotations, GTIDs, statements and
format descriptions.

The reader keeps its place in the binlog by these: a ROTATE names the next file, the GTID
events (MySQL's, MariaDB's, their lists) name transactions, a QUERY event carries a
statement (MariaDB's QUERY_COMPRESSED one compressed: ``mariadb_inflate``, which also opens
MariaDB's compressed row events), and each FORMAT_DESCRIPTION says whether the events after
it carry a CRC32 and how long each type's post-header is. MySQL's GTID event and the
QUERY ``BEGIN`` after it are read as one (``fold_begins``, the twin of the compiled folder),
so the reader takes as many steps per transaction as on MariaDB. They read the bytes
``DumpStream.batches`` handed over, where the event starts (its 19-byte header first).
"""

from __future__ import annotations

import struct
import zlib

from sparkcdc.errors import DecodeError
from sparkcdc.mysql.binlog.protocol.codes import (
    ANONYMOUS_GTID,
    FOLDED,
    FORMAT_DESCRIPTION,
    GTID,
    QUERY,
    ROTATE,
)


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
    sid, gno = mysql_gtid_parts(data, start)
    return f"{sid}{gno}"


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
    its output is one ``bytes`` object that goes to the row decoders as it is. The compiled
    event loop inflates with that same library from C (``_fastpayload.c``'s
    ``fp_inflate_mariadb``, no Python call per event) and calls this function only for a
    part it could not inflate exactly, so that the fault is named here, once
    (docs/mysql-findings.md, finding 21)."""
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

