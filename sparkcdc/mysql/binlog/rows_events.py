"""The rows events the reader's loop does not hand whole to the compiled decoder, and the
checks every rows event may need: a columns-present bitmap that lacks a column (named),
MySQL's partial JSON updates with real diffs, MariaDB's compressed events
(``log_bin_compress``), and any event for a decoder that takes only row images
(``RowDecoder.decode_rows``: the Python decoder, a user's own). The loop itself
(``reader.BinlogReader._consume``) stays one function, so what is rare lives here.
"""

from __future__ import annotations

from typing import Any

from sparkcdc.core.schema import TableSchema
from sparkcdc.errors import DecodeError
from sparkcdc.mysql.binlog import protocol as E
from sparkcdc.mysql.binlog.read_state import ReadState
from sparkcdc.mysql.binlog.row_decoding import RowDecoder

__all__ = ["check_present", "compressed_query", "corrupt", "decode_compressed",
           "decode_event_py", "decode_partial"]

BIG_EVENT = 1 << 20  # bytes; row images of bigger events go to the decoder as a memoryview


def check_present(present: int, present2: int | None, ncols: int,
                   schema: TableSchema) -> None:
    if ncols != len(schema.columns):
        raise DecodeError(
            f"{schema.table_id}: the binlog has {ncols} columns, the captured "
            f"schema {len(schema.columns)}",
            fix="the table was altered; restart capture with a new snapshot")
    for bitmap in (present, present2):
        if bitmap is None:
            continue
        for i in range(ncols):
            if not bitmap >> i & 1:
                raise DecodeError(f"{schema.table_id}: the binlog row image lacks column "
                                  f"{schema.columns[i].name!r}",
                                  fix="set binlog_row_image=FULL on the server")


def compressed_query(data: bytes, s: int, end: int, post_header: int, state: ReadState,
                     ev_start: int) -> bytes:
    """The statement of a MariaDB QUERY_COMPRESSED event (a DDL, an XA statement...)."""
    try:
        return E.compressed_query_text(data, s, end, post_header)
    except ValueError as e:
        raise corrupt("query", f"{state.file}:{ev_start}", e) from None


def corrupt(kind: str, where: str, why: Exception) -> DecodeError:
    return DecodeError(f"corrupt MariaDB compressed {kind} event at {where}: {why}",
                       fix="check the binlog file on the server (mariadb-binlog "
                           "--verify-binlog-checksum); a damaged binlog cannot be read past "
                           "this event: restart capture with a new snapshot")


def decode_partial(decoder: RowDecoder, tm: Any, schema: TableSchema, data: bytes, s: int, end: int,
                    tid_len: int) -> list[tuple[dict | None, dict | None]]:
    """A PARTIAL_UPDATE_ROWS event (``binlog_row_value_options=PARTIAL_JSON``): an
    UPDATE_ROWS v2 event whose after images may hold JSON diffs
    (``RowDecoder.decode_partial_rows``)."""
    _tid, ncols, present, present2, p = E.rows_header(data, s + 19, end, 2, True, tid_len)
    full = tm.full
    if present & full != full or present2 & full != full or ncols != tm.ncols:
        check_present(present, present2, ncols, schema)
    partial = getattr(decoder, "decode_partial_rows", None)
    if partial is None:
        raise DecodeError(f"{schema.table_id}: the row decoder "
                          f"{type(decoder).__name__} cannot apply partial JSON "
                          f"updates", fix="use the default row decoder, or set "
                                          "binlog_row_value_options='' on the server")
    return partial(tm, schema, data[p:end])

def decode_event_py(decoder: RowDecoder, tm: Any, schema: TableSchema, data: bytes, s: int, end: int,
                     tid_len: int, version: int, mode: int
                     ) -> list[tuple[dict | None, dict | None]]:
    """A rows event (header at ``data[s]``, ``end`` without the checksum) through the
    decoder's ``decode_rows``: the rows header and bitmaps read here."""

    p = s + 21 + tid_len  # after the table id and the flags
    if version == 2:
        p += data[p] | data[p + 1] << 8  # extra data, its length included
    ncols = data[p]
    if ncols < 251:
        nb = (ncols + 7) >> 3
        present = int.from_bytes(data[p + 1:p + 1 + nb], "little")
        p += 1 + nb
        present2 = None
        if mode == 2:
            present2 = int.from_bytes(data[p:p + nb], "little")
            p += nb
    else:
        _tid, ncols, present, present2, p = E.rows_header(
            data, s + 19, end, version, mode == 2, tid_len)
    full = tm.full
    if present & full != full or (mode == 2 and present2 & full != full) \
            or ncols != tm.ncols:
        check_present(present, present2, ncols, schema)
    if end - s < BIG_EVENT or not getattr(decoder, "takes_buffers", False):
        return decoder.decode_rows(tm, schema, mode, data[p:end])
    with memoryview(data) as view, view[p:end] as images:  # a big event: not copied
        # a decoder that ``takes_buffers`` reads a memoryview as it reads bytes
        return decoder.decode_rows(tm, schema, mode, images)  # type: ignore[arg-type]

def decode_compressed(decoder: RowDecoder, tm: Any, schema: TableSchema, data: bytes, s: int,
                       end: int, tid_len: int, version: int, mode: int, where: str
                       ) -> list[tuple[dict | None, dict | None]]:
    """A MariaDB compressed rows event (``log_bin_compress``; header at ``data[s]``,
    ``end`` without the checksum): its header and bitmaps are read as a plain event's,
    its row images inflated (``protocol.mariadb_inflate``) and handed to the decoder's
    ``decode_rows``, the row decoding of every plain event (the compiled decoder's
    ``decode_event`` runs the same C loop after reading the header itself)."""
    _tid, ncols, present, present2, p = E.rows_header(data, s + 19, end, version,
                                                      mode == 2, tid_len)
    full = tm.full
    if present & full != full or (mode == 2 and present2 & full != full) \
            or ncols != tm.ncols:
        check_present(present, present2, ncols, schema)
    try:
        images = E.mariadb_inflate(data, p, end)
    except ValueError as e:
        raise corrupt("rows", where, e) from None
    return decoder.decode_rows(tm, schema, mode, images)
