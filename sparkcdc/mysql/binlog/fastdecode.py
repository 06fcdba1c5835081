"""The compiled row decoder: per-table plans built once, whole events decoded in C.

``CRowDecoder`` plugs in behind ``row_decoding.RowDecoder``. For each table map it compiles a
plan once (one small spec per column, from the TABLE_MAP metadata and the captured schema,
checked exactly as ``PyRowDecoder`` checks them) and hands every row event of that table to
``_fastdecode.decode``, which walks all of the event's row images in C and returns the same
canonical values as ``PyRowDecoder`` (``tests/mysql/binlog/test_fastdecode.py`` holds them equal on the
all-types table and on randomized rows). Rows of uncaptured tables never reach a decoder.

MySQL's own work is compiled too: binary JSON printed as the server prints it
(``_fastjson.c``, the text of ``json_binary``), PARTIAL_UPDATE_ROWS events whole with their
JSON diffs applied (``_fastjsondiff.c``, the twin of ``json_diff``, which takes what the C code
leaves: a diff the server would reject, a malformed value, a path it does not read alike; then
over trees the C code builds and prints, ``apply_json_diffs``), and compressed transactions
opened (``open_payload``: the header and the inner events in ``_fastpayload.c``; zstd, in the
event loop, by the system's libzstd when there is one, else, and in ``open_payload``, by the
``zstandard`` package). The Python modules stay the reference: tests/mysql/binlog/
test_fastjson.py and test_json_diff.py run both on the same bytes.

So is the reader's loop over events (``event_loop``, ``_fastloop.c``): the events every
transaction has (GTIDs, BEGIN, table maps, captured rows events, XIDs, payloads) are taken
in C, records made there, and everything else handed to the reader's Python loop, which
stays the reference (and the whole loop of ``PyRowDecoder``, or of ``loop_in_c = False``).

The extension is built by ``pip install -e .`` (``setup.py``, optional). When it is absent,
``default_decoder()`` falls back to ``PyRowDecoder``; ``SPARKCDC_ROW_DECODER`` (``c`` or
``py``) picks one explicitly, e.g. to compare them.
"""

from __future__ import annotations

import os
from decimal import Decimal
from typing import Any

from sparkcdc.core.offsets import BinlogOffset
from sparkcdc.core.records import DELETE, INSERT, UPDATE, ChangeRecord
from sparkcdc.core.schema import Column, TableSchema
from sparkcdc.errors import ConfigError, DecodeError
from sparkcdc.mysql import types as T
from sparkcdc.mysql.binlog import field_decoders as FD
from sparkcdc.mysql.binlog import json_binary as J
from sparkcdc.mysql.binlog import json_diff
from sparkcdc.mysql.binlog import protocol as E
from sparkcdc.mysql.binlog import row_decoding as R
from sparkcdc.mysql.binlog import transaction_payload as P
from sparkcdc.mysql.binlog.protocol.codes import ColumnType

try:  # built by setup.py; optional
    from sparkcdc.mysql.binlog import _fastdecode as _C  # type: ignore[attr-defined]
except ImportError:  # pragma: no cover - exercised by the fallback test through a seam
    _C = None

# op codes of the compiled specs (_fastcols.h)
OP_INT, OP_UINT, OP_UINT64, OP_FLOAT, OP_DOUBLE, OP_YEAR, OP_DECIMAL = 1, 2, 3, 4, 5, 6, 7
OP_TEXT, OP_BYTES, OP_ENUM, OP_SET, OP_GEOMETRY, OP_CALL, OP_BIT1, OP_BITS = (
    8, 9, 10, 11, 12, 13, 14, 15)
OP_DATE, OP_TIME2, OP_DATETIME2, OP_TIMESTAMP2, OP_TIME, OP_DATETIME, OP_TIMESTAMP = (
    16, 17, 18, 19, 20, 21, 22)
OP_JSON = 23
# an extension built before these lacks them: JSON then goes through json_binary
# (OP_CALL), payloads through transaction_payload
JSON_IN_C = _C is not None and hasattr(_C, "json_text")
PAYLOAD_IN_C = _C is not None and hasattr(_C, "payload_events")
# payloads' zstd decompressed in C by the system's libzstd (looked up at run time: Debian's
# dpkg needs it, so every Debian has it), by the zstandard package where it is not
ZSTD_IN_C = _C is not None and hasattr(_C, "zstd_in_c") and bool(_C.zstd_in_c())
# partial JSON updates applied in C (_fastjsondiff.c), json_diff taking what it leaves; a
# test sets it False (before a decoder is made) to read them with json_diff, the reference
DIFFS_IN_C = _C is not None and hasattr(_C, "json_apply_diffs")
LOOP_IN_C = _C is not None and hasattr(_C, "Loop")

_INSERT, _DELETE, _UPDATE = 0, 1, 2
_Spec = tuple[int, int, int, int, Any]


def available() -> bool:
    """True when the C extension was built."""
    return _C is not None


def default_decoder(before_keys: bool = False) -> R.RowDecoder:
    """The fastest decoder this installation has (``SPARKCDC_ROW_DECODER`` overrides).
    ``before_keys``: an update's before image may hold its key columns alone, unless the
    update changes the key (the compiled decoder's plans; ``CRowDecoder``)."""
    choice = os.environ.get("SPARKCDC_ROW_DECODER", "").strip().lower()
    if choice in ("", "auto"):
        return CRowDecoder(before_keys) if available() else R.PyRowDecoder()
    if choice == "c":
        return CRowDecoder(before_keys)
    if choice == "py":
        return R.PyRowDecoder()
    raise ConfigError(f"SPARKCDC_ROW_DECODER={choice!r} is not a row decoder",
                      fix="use 'c', 'py' or leave it unset")


class CRowDecoder:
    """``RowDecoder`` over the C extension. With ``before_keys`` an update's before image
    holds its row key's columns alone (the whole image when the update changes the key):
    for a reader whose consumer drops update preimages (``changelog-mode: upsert``, the
    pipeline's), which then needs a before image only to see whether the key moved; its
    other values (a DECIMAL, a DATETIME: Python objects each) were made and thrown away at
    every update. MySQL's partial updates (``binlog_row_value_options=PARTIAL_JSON``, under
    which every UPDATE is logged so) likewise: a JSON column's before bytes are kept for its
    diffs, printed only when the update left it alone."""

    takes_buffers = True  # decode_rows accepts a memoryview (big events are not copied)
    # decode_event: a whole rows event in one C call (an extension built before it lacks it)
    event_in_c = _C is not None and hasattr(_C, "decode_event")
    # decode_partial_event: PARTIAL_UPDATE_ROWS events whose rows hold no JSON diff in C
    partial_in_c = event_in_c and hasattr(_C, "PARTIAL_UPDATES")

    def __init__(self, before_keys: bool = False) -> None:
        if _C is None:
            raise ConfigError("the compiled row decoder (sparkcdc.mysql.binlog._fastdecode) is not "
                              "built", fix="install gcc and the Python headers "
                              "(python3-dev), then `pip install -e .` again")
        self._plans: dict[tuple, tuple[Any, int]] = {}  # signature -> (plan, full bitmap)
        self.before_keys = before_keys
        # the library builds one column list per TABLE_MAP event: the last one seen per
        # table spares computing the signature again for every row event that follows it
        self._last: dict[Any, tuple[Any, TableSchema, Any, int]] = {}
        self._by_map: dict[Any, tuple[TableSchema, Any]] = {}  # events.TableMap -> plan
        self._py: R.PyRowDecoder | None = None  # partial JSON updates (decode_partial_rows)
        self._njson: dict[Any, int] = {}  # events.TableMap -> its number of JSON columns
        self._dctx: Any = None  # zstandard.ZstdDecompressor, made at the first payload
        if not PAYLOAD_IN_C:
            self.open_payload = P.open_payload  # type: ignore[method-assign]
        # MySQL's GTID event and its BEGIN as one event (protocol.fold_begins), in one C call
        # per batch of events (the Python loop's; the loop in C reads the BEGIN itself)
        self.fold_begins = getattr(_C, "fold_begins", E.fold_begins)
        self.loop_in_c = LOOP_IN_C  # False: the reader's Python loop (to compare them)
        self.zstd_in_c = ZSTD_IN_C  # False: the loop's payloads through zstandard (likewise)

    def event_loop(self, state: Any, maps: dict, cache: dict, schemas: dict,
                   fitted: dict | None, end_key: tuple | None, heartbeat: float | None,
                   beat: list[float], flavor: str, csum: int, query_post: int,
                   tid_len: int) -> Any:
        """The reader's loop in C over one stream (``_fastdecode.Loop``), given what
        ``BinlogReader._consume`` keeps: its ``ReadState``, the file's table maps by id, the
        parsed maps by body, the captured schemas, the table maps their schemas fit (None
        without table events), the window's end key, the heartbeat and its last time, and
        what the format description said. ``loop.events(data, events)`` then reads a batch;
        None when ``loop_in_c`` is off (or the extension predates the loop)."""
        if not self.loop_in_c:
            return None
        return _C.Loop(state, maps, cache, schemas, fitted, self, end_key, heartbeat, beat,
                       flavor, ChangeRecord, BinlogOffset, (INSERT, DELETE, UPDATE), csum,
                       query_post, tid_len)

    def decode(self, event: Any, schema: TableSchema) -> list[tuple[dict | None, dict | None]]:
        from pymysqlreplication.row_event import (
            DeleteRowsEvent,
            PartialUpdateRowsEvent,
            UpdateRowsEvent,
        )

        if isinstance(event, PartialUpdateRowsEvent):
            raise DecodeError(f"{schema.table_id}: partial JSON updates cannot be decoded",
                              fix="set binlog_row_value_options='' on the server")
        cols = event.columns
        hit = self._last.get(event.table_id)
        if hit is not None and hit[0] is cols and hit[1] is schema:
            plan, full = hit[2], hit[3]
        else:
            plan, full = self._plan(cols, schema)
            if len(self._last) > 1024:
                self._last.clear()
            self._last[event.table_id] = (cols, schema, plan, full)
        mode = _UPDATE if isinstance(event, UpdateRowsEvent) else (
            _DELETE if isinstance(event, DeleteRowsEvent) else _INSERT)
        ncols = len(schema.columns)
        if int.from_bytes(event.columns_present_bitmap, "little") & full != full:
            R.all_present(event.columns_present_bitmap, ncols, schema)
        if mode == _UPDATE and \
                int.from_bytes(event.columns_present_bitmap2, "little") & full != full:
            R.all_present(event.columns_present_bitmap2, ncols, schema)
        pkt = event.packet
        data = pkt.read(event.event_size - pkt.read_bytes)
        try:
            return _C.decode(plan, data, mode)
        except ValueError as e:  # truncated values, bad text (UnicodeDecodeError)
            raise _malformed(schema, e) from None

    def _plan_for(self, table_map: Any, schema: TableSchema) -> Any:
        """The compiled plan of a parsed table map, kept per map (bounded) while the schema
        it was compiled against is the same object."""
        hit = self._by_map.get(table_map)
        if hit is not None and hit[0] is schema:
            return hit[1]
        plan = self._plan(table_map.columns, schema)[0]
        if len(self._by_map) > 1024:
            self._by_map.clear()
        self._by_map[table_map] = (schema, plan)
        return plan

    def decode_event(self, table_map: Any, schema: TableSchema, data: bytes, start: int,
                     end: int, table_id_len: int, version: int, mode: int
                     ) -> list[tuple[dict | None, dict | None]] | None:
        """A whole rows event (body at ``data[start:end]``) in one C call: header, bitmaps
        and row images. None when a columns-present bitmap lacks a column (the caller
        names it)."""
        plan = self._plan_for(table_map, schema)
        try:
            return _C.decode_event(plan, data, start, end, table_id_len, version, mode)
        except ValueError as e:  # truncated values, bad text (UnicodeDecodeError)
            raise _malformed(schema, e) from None

    def decode_rows(self, table_map: Any, schema: TableSchema, mode: int,
                    data: bytes) -> list[tuple[dict | None, dict | None]]:
        """The row images of one rows event for our own event layer
        (``sparkcdc.mysql.binlog.protocol``): ``data`` starts after the event's bitmaps; ``mode``
        0 insert, 1 delete, 2 update."""
        plan = self._plan_for(table_map, schema)
        try:
            return _C.decode(plan, data, mode)
        except ValueError as e:  # truncated values, bad text (UnicodeDecodeError)
            raise _malformed(schema, e) from None

    def decode_partial_event(self, table_map: Any, schema: TableSchema, data: bytes,
                             start: int, end: int, table_id_len: int
                             ) -> list[tuple[dict | None, dict | None]] | None:
        """A whole PARTIAL_UPDATE_ROWS event (``binlog_row_value_options=PARTIAL_JSON``) in
        one C call, as ``decode_event`` an update: with PARTIAL_JSON on, MySQL logs *every*
        UPDATE so, JSON column or not, and a row's after image is a plain full image unless
        a JSON column holds a diff, which the C loop hands to ``apply_json_diffs``. None
        when a column is missing (or the extension predates JSON in C and a diff is there):
        the caller then takes ``decode_partial_rows``."""
        plan = self._plan_for(table_map, schema)
        njson = self._njson.get(table_map)
        if njson is None:
            njson = sum(1 for c in table_map.columns if c.type == ColumnType.JSON)
            if len(self._njson) > 1024:
                self._njson.clear()
            self._njson[table_map] = njson
        try:
            return _C.decode_event(plan, data, start, end, table_id_len, 2, 3, njson)
        except ValueError as e:  # truncated values, bad text (UnicodeDecodeError)
            raise _malformed(schema, e) from None

    def open_payload(self, data: bytes, start: int, end: int, size: int, log_pos: int,
                     csum: int) -> tuple[bytes, list[tuple]]:
        """``transaction_payload.open_payload`` with the header read and the events split in
        C (one call each), and one zstd decompressor kept for the reader's payloads."""
        try:
            compression, _size, uncompressed, p = _C.payload_header(data, start, end)
        except ValueError as e:
            raise DecodeError(str(e), fix=P.REPORT) from None
        if compression == P.ZSTD and self._dctx is None:
            self._dctx = P.decompressor()
        with memoryview(data) as view, view[p:end] as payload:
            events = P.uncompress(compression, payload, uncompressed, self._dctx)
        try:
            return _C.payload_events(events, size, log_pos, csum)
        except ValueError as e:
            raise DecodeError(str(e), fix=P.REPORT) from None

    def decode_partial_rows(self, table_map: Any, schema: TableSchema,
                            data: bytes) -> list[tuple[dict | None, dict | None]]:
        """A PARTIAL_UPDATE_ROWS event's images, through ``PyRowDecoder``: what
        ``decode_partial_event`` leaves (see there)."""
        if self._py is None:
            self._py = R.PyRowDecoder()
        return self._py.decode_partial_rows(table_map, schema, data)

    def _plan(self, cols: list, schema: TableSchema) -> tuple[Any, int]:
        sig = (schema.table_id, tuple(c.column_type for c in schema.columns),
               tuple(R.meta_sig(c) for c in cols))
        got = self._plans.get(sig)
        if got is None:
            got = (compile_plan(cols, schema, self.before_keys),
                   (1 << len(schema.columns)) - 1)
            if len(self._plans) > 1024:
                self._plans.clear()
            self._plans[sig] = got
        return got


def compile_plan(cols: list, schema: TableSchema, before_keys: bool = False) -> Any:
    """A ``_fastdecode.Plan`` for a table map's columns (library ``Column`` objects); with
    ``before_keys`` (and a row key), an update's before image holds its key alone."""
    R.check_columns(cols, schema)
    specs = tuple(column_spec(bc, sc) for bc, sc in zip(cols, schema.columns))
    names = tuple(schema.column_names)
    keys = tuple(names.index(k) for k in schema.row_key) if before_keys else ()
    if keys:
        return _C.Plan(names, specs, Decimal, keys)
    return _C.Plan(names, specs, Decimal)


def column_spec(bc: Any, col: Column) -> _Spec:
    """The C spec of one column; the same choices as ``field_decoders.field_decoder``."""
    t, bt, mismatch = FD.column_types(bc, col)
    k = t.kind
    unsigned = t.unsigned

    def integer(nbytes: int) -> _Spec:
        return (OP_UINT if unsigned else OP_INT, nbytes, 0, 0, None)

    if bt == ColumnType.TINY:
        return integer(1)
    if bt == ColumnType.SHORT:
        return integer(2)
    if bt == ColumnType.INT24:
        return integer(3)
    if bt == ColumnType.LONG:
        return integer(4)
    if bt == ColumnType.LONGLONG:
        return (OP_UINT64, 8, 0, 0, None) if k == T.UINT64 else (OP_INT, 8, 0, 0, None)
    if bt == ColumnType.FLOAT:
        return (OP_FLOAT, 4, 0, 0, None)
    if bt == ColumnType.DOUBLE:
        return (OP_DOUBLE, 8, 0, 0, None)
    if bt == ColumnType.YEAR:
        return (OP_YEAR, 1, 0, 0, None)
    if bt == ColumnType.NEWDECIMAL:
        return (OP_DECIMAL, bc.precision, bc.decimals, int(k == T.DECIMAL_TEXT), None)
    if bt in (ColumnType.VARCHAR, ColumnType.VAR_STRING, ColumnType.STRING):
        nbytes = 2 if bc.max_length > 255 else 1
        if k == T.BINARY:
            return (OP_BYTES, nbytes, t.length if t.base == "binary" and t.length else 0, 0,
                    None)
        if k in (T.STRING, T.JSON):
            return _text(nbytes, col.charset or bc.character_set_name)
        raise mismatch()
    if bt == ColumnType.ENUM:
        members = FD.enum_members(bc.enum_values[1:] if bc.enum_values else None, t)
        return (OP_ENUM, 1 if bc.size == 1 else 2, 0, 0, tuple(members))
    if bt == ColumnType.SET:
        return (OP_SET, bc.size, 0, 0, tuple(FD.enum_members(bc.set_values, t)))
    if bt in (ColumnType.BLOB, ColumnType.TINY_BLOB, ColumnType.MEDIUM_BLOB, ColumnType.LONG_BLOB):
        if k == T.BINARY:
            return (OP_BYTES, bc.length_size, 0, 0, None)
        if k in (T.STRING, T.JSON):
            return _text(bc.length_size, col.charset or bc.character_set_name)
        raise mismatch()
    if bt == ColumnType.GEOMETRY:
        return (OP_GEOMETRY, bc.length_size, 0, 0, None)
    if bt == ColumnType.JSON:
        if JSON_IN_C:
            return (OP_JSON, bc.length_size, 0, int(DIFFS_IN_C), apply_json_diffs)
        return (OP_CALL, bc.length_size, 0, 0, FD.mysql_json)
    if bt == ColumnType.BIT:
        return (OP_BIT1 if k == T.BIT1 else OP_BITS, bc.bytes, t.nbytes, 0, None)
    if bt in (ColumnType.DATE, ColumnType.NEWDATE):
        return (OP_DATE, 3, 0, 0, None)
    if bt == ColumnType.TIME2:
        return (OP_TIME2, bc.fsp, 0, 0, None)
    if bt == ColumnType.DATETIME2:
        return (OP_DATETIME2, bc.fsp, 0, 0, None)
    if bt == ColumnType.TIMESTAMP2:
        return (OP_TIMESTAMP2, bc.fsp, 0, 0, None)
    if bt == ColumnType.TIME:
        return (OP_TIME, 3, 0, 0, None)
    if bt == ColumnType.DATETIME:
        return (OP_DATETIME, 8, 0, 0, None)
    if bt == ColumnType.TIMESTAMP:
        return (OP_TIMESTAMP, 4, 0, 0, None)
    raise DecodeError(f"column {col.name!r}: binlog type {bt} is not supported")


def apply_json_diffs(before: bytes | None, diffs: bytes, column: str) -> str:
    """A JSON column's partial update (the stored value before it, its diff vector) as the
    text after it: ``json_diff.apply`` over trees built and printed in C."""
    return json_diff.apply(before, diffs, column, parse=_C.json_tree, render=_C.json_render)


def json_text(b: bytes) -> str:
    """``json_binary.to_text`` in C (the reference stays ``json_binary``)."""
    try:
        return _C.json_text(b)
    except ValueError as e:
        raise J.malformed(str(e).removeprefix("malformed binary JSON value (")
                          .removesuffix(")")) from None


def _text(nbytes: int, charset: str | None) -> _Spec:
    codec = FD.PY_CODECS.get((charset or "utf8mb4").lower(), "utf-8")
    if codec == "utf-8":
        return (OP_TEXT, nbytes, 0, 0, None)
    if codec == "cp1252":  # MySQL's latin1 needs the Python fallback for its 5 holes
        return (OP_TEXT, nbytes, 2, 0, FD.text_decoder(charset))
    return (OP_TEXT, nbytes, 1, 0, codec)


__all__ = ["CRowDecoder", "apply_json_diffs", "available", "column_spec", "compile_plan",
           "default_decoder", "json_text"]


def _malformed(schema: TableSchema, e: Exception) -> DecodeError:
    return DecodeError(f"{schema.table_id}: malformed row event: {e}",
                       fix="the table's binlog metadata and schema disagree; if the "
                           "table was altered, restart capture with a new snapshot")
