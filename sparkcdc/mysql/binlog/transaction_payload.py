"""MySQL 8's TRANSACTION_PAYLOAD event (``binlog_transaction_compression=ON``): one whole
transaction's events, compressed, in one event.

The body is a header of fields, each a length-encoded type, a length-encoded length and a
value (a length-encoded integer for the known fields): 1 the payload's size, 2 the
compression type (0 zstd, 255 none), 3 the uncompressed size; type 0 ends the header and
the payload follows. Uncompressed, the payload is ordinary events one after the other, each
with its 19-byte header and without a checksum (the outer event carries the checksum);
their ``log_pos`` is 0, as they have no place of their own in the file.

``inner_events`` gives them to the reader as if they had come one by one from the dump
stream, each with the *payload event's* size and log position (see ``inner_events``), so
the reader's offsets, transaction boundaries and resumption work unchanged: a transaction
inside a payload starts at its GTID event (before the payload) or, with no GTID, at the
payload event; its row events are counted in ``events`` as anywhere else; its XID commits
at the payload event's end. docs/operations.md describes it for users.

Decompression uses the ``zstandard`` package (a dependency of sparkcdc), loaded the first
time a payload arrives.
"""

from __future__ import annotations

from typing import Any

from sparkcdc.errors import DecodeError
from sparkcdc.mysql.binlog.protocol import HEADER, _packed_int

TRANSACTION_PAYLOAD = 40
# set in the flags of the events inner_events returns (event flags are 16 bits): they carry
# no checksum of their own (the payload event's covers them), so none is verified
IN_PAYLOAD = 1 << 16
_SIZE, _COMPRESSION, _UNCOMPRESSED = 1, 2, 3
ZSTD, NONE = 0, 255
_zstd: Any = None


def read_header(body: bytes) -> tuple[int, int, int | None, int]:
    """(compression type, payload size, uncompressed size or None, where the payload
    starts) of a payload event's body (after the event header, without the checksum)."""
    p, end = 0, len(body)
    size = compression = uncompressed = None
    try:
        while True:
            field, p = _packed_int(body, p)
            if field == 0:
                break
            length, p = _packed_int(body, p)
            stop = p + length
            if stop > end:
                raise DecodeError("a TRANSACTION_PAYLOAD header field runs past the event",
                                  fix=REPORT)
            if field in (_SIZE, _COMPRESSION, _UNCOMPRESSED):
                value, q = _packed_int(body, p)
                if q != stop:
                    raise DecodeError(f"TRANSACTION_PAYLOAD header field {field} has "
                                      f"{length} bytes for a {q - p}-byte value", fix=REPORT)
                if field == _SIZE:
                    size = value
                elif field == _COMPRESSION:
                    compression = value
                else:
                    uncompressed = value
            p = stop  # a field this reader does not know: skipped by its length
    except IndexError:
        raise DecodeError("a TRANSACTION_PAYLOAD header ends early", fix=REPORT) from None
    if size is None or compression is None:
        raise DecodeError("a TRANSACTION_PAYLOAD header without its payload size or "
                          "compression type", fix=REPORT)
    if p + size != end:
        raise DecodeError(f"a TRANSACTION_PAYLOAD of {size} bytes in {end - p} bytes",
                          fix=REPORT)
    return compression, size, uncompressed, p


def decompress(body: bytes) -> bytes:
    """The events a payload event's body holds, uncompressed."""
    compression, _size, uncompressed, p = read_header(body)
    return uncompress(compression, body[p:], uncompressed)


def uncompress(compression: int, payload: bytes | memoryview, uncompressed: int | None,
               dctx: Any = None) -> bytes:
    """A payload's bytes uncompressed as its header says (``dctx``: a
    ``zstandard.ZstdDecompressor`` to reuse, from ``decompressor()``)."""
    if compression == NONE:
        out = bytes(payload)
    elif compression == ZSTD:
        out = _unzstd(payload, dctx)
    else:
        raise DecodeError(f"a TRANSACTION_PAYLOAD compressed with algorithm {compression}, "
                          f"which sparkcdc does not know",
                          fix="set binlog_transaction_compression=OFF on the server, or "
                              "upgrade sparkcdc")
    if uncompressed is not None and len(out) != uncompressed:
        raise DecodeError(f"a TRANSACTION_PAYLOAD uncompressed to {len(out)} bytes, its "
                          f"header says {uncompressed}", fix=REPORT)
    return out


def inner_events(body: bytes, size: int, log_pos: int, csum: int = 0
                 ) -> tuple[bytes, list[tuple]]:
    """``(data, events)`` of a payload event's body, in the dump stream's event form
    ``(timestamp, type, server_id, size, log_pos, flags, start, end)`` with the bytes at
    ``data[start:end]``. ``size`` and ``log_pos`` are the payload event's own, so
    ``log_pos - size`` (where an event starts) is the payload's start and ``log_pos``
    (where it ends) the payload's end for every event inside. ``csum``: the stream's
    checksum length; each event is followed by that many zero bytes where the stream would
    have its checksum, so the reader strips it from these events as from any other."""
    data = decompress(body)
    events = []
    p, end = 0, len(data)
    while p < end:
        if end - p < 19:
            raise DecodeError("a TRANSACTION_PAYLOAD ends inside an event header", fix=REPORT)
        ts, etype, server_id, n, _pos, flags = HEADER.unpack_from(data, p)
        if n < 19 or p + n > end:
            raise DecodeError(f"an event of {n} bytes inside a TRANSACTION_PAYLOAD of "
                              f"{end} bytes at {p}", fix=REPORT)
        if etype == TRANSACTION_PAYLOAD:
            raise DecodeError("a TRANSACTION_PAYLOAD inside a TRANSACTION_PAYLOAD",
                              fix=REPORT)
        events.append((ts, etype, server_id, size, log_pos, flags | IN_PAYLOAD, p, p + n))
        p += n
    if csum:  # the same events, each followed by csum bytes
        pad = bytes(csum)
        out: list[bytes] = []
        at = 0
        for k, (ts, etype, server_id, _n, _lp, flags, a, b) in enumerate(events):
            out += (data[a:b], pad)
            events[k] = (ts, etype, server_id, size, log_pos, flags, at, at + b - a + csum)
            at += b - a + csum
        data = b"".join(out)
    return data, events


def open_payload(data: bytes, start: int, end: int, size: int, log_pos: int, csum: int
                 ) -> tuple[bytes, list[tuple]]:
    """``inner_events`` of the payload event whose body is ``data[start:end]`` (the
    reader's call; the compiled decoder has its own, ``CRowDecoder.open_payload``)."""
    return inner_events(data[start:end], size, log_pos, csum)


def decompressor() -> Any:
    """A ``zstandard.ZstdDecompressor`` (one per reader: it is not thread-safe), which
    ``uncompress`` reuses rather than make one per payload."""
    _load_zstd()
    return _zstd.ZstdDecompressor()


def _load_zstd() -> None:
    global _zstd
    if _zstd is None:
        try:
            import zstandard
        except ImportError:
            raise DecodeError("the binlog holds zstd-compressed transactions "
                              "(binlog_transaction_compression=ON) and the zstandard package "
                              "is not installed", fix="pip install zstandard (a dependency "
                                                      "of sparkcdc)") from None
        _zstd = zstandard


def _unzstd(payload: bytes | memoryview, dctx: Any = None) -> bytes:
    _load_zstd()
    out = []
    rest = bytes(payload)
    try:
        while rest:  # frame by frame, streamed: a frame need not record its content size
            d = (dctx or _zstd.ZstdDecompressor()).decompressobj()
            out.append(d.decompress(rest))
            if not d.eof:
                raise DecodeError("a TRANSACTION_PAYLOAD ends inside its zstd frame",
                                  fix=REPORT)
            rest = d.unused_data
    except _zstd.ZstdError as e:
        raise DecodeError(f"a TRANSACTION_PAYLOAD could not be decompressed: {e}",
                          fix=REPORT) from None
    return b"".join(out)


REPORT = "report the server version; the compressed transaction could not be read"

__all__ = ["IN_PAYLOAD", "NONE", "REPORT", "TRANSACTION_PAYLOAD", "ZSTD", "decompress",
           "decompressor", "inner_events", "open_payload", "read_header", "uncompress"]
