"""Row decoding: how the bytes of a row image become canonical values, column by column.

A ``RowDecoder`` turns one row event's images into dicts of values equal to what the
snapshot reads for the same row (``sparkcdc.mysql.types``). ``PyRowDecoder`` plans one small
field decoder per column from the TABLE_MAP's metadata and the captured schema, then walks
the bytes; the compiled ``fastdecode.CRowDecoder`` makes the same choices in C and falls
back to these plans for what it does not handle. (The tests' reference reader,
tests/support/library_reader.py, adds ``LibraryRowDecoder``: python-mysql-replication's own values,
lossy, made canonical.)
Each column's own decoder is ``field_decoders``'. The binlog reader (``reader.py``) and
the compiled decoder's wrapper (``fastdecode.py``) import this module; it imports neither.
"""

from __future__ import annotations

import struct
from typing import Any, Protocol

from sparkcdc.core.records import DELETE, INSERT, UPDATE
from sparkcdc.core.schema import TableSchema
from sparkcdc.errors import DecodeError
from sparkcdc.mysql.binlog import json_diff
from sparkcdc.mysql.binlog.field_decoders import Field as _Field
from sparkcdc.mysql.binlog.field_decoders import field_decoder
from sparkcdc.mysql.binlog.protocol import _packed_int
from sparkcdc.mysql.binlog.protocol.codes import ColumnType as CT

# -- the decoder interface --------------------------------------------------------------------

class RowDecoder(Protocol):
    """Turns one row event into ``(before, after)`` canonical row dicts, in event order.

    ``decode_rows`` serves our own event layer: ``table_map`` is an ``events.TableMap``
    (``columns`` with the TABLE_MAP metadata), ``mode`` 0 insert, 1 delete, 2 update, and
    ``data`` the event's row images. ``decode`` serves the tests' reference reader
    (tests/support/library_reader.py): ``event`` is a python-mysql-replication rows event whose
    header has been read. ``schema`` is the captured table. A decoder may also have
    ``decode_partial_rows(table_map, schema, data)`` for MySQL's PARTIAL_UPDATE_ROWS events
    (both of sparkcdc's do); the reader names a decoder without it when one arrives.
    """

    def decode_rows(self, table_map: Any, schema: TableSchema, mode: int,
                    data: bytes) -> list[tuple[dict | None, dict | None]]:
        ...

    def decode(self, event: Any, schema: TableSchema) -> list[tuple[dict | None, dict | None]]:
        ...


class PyRowDecoder:
    """Decodes row images from the event's bytes straight into canonical values."""

    def __init__(self) -> None:
        self._plans: dict[tuple, list[_Field]] = {}
        self._by_map: dict[Any, tuple[TableSchema, list[_Field]]] = {}

    def decode(self, event: Any, schema: TableSchema) -> list[tuple[dict | None, dict | None]]:
        from pymysqlreplication.row_event import PartialUpdateRowsEvent, UpdateRowsEvent

        if isinstance(event, PartialUpdateRowsEvent):
            raise DecodeError(f"{schema.table_id}: partial JSON updates cannot be decoded",
                              fix="set binlog_row_value_options='' on the server")
        plan = self._plan(event, schema)
        ncols = len(schema.columns)
        all_present(event.columns_present_bitmap, ncols, schema)
        update = isinstance(event, UpdateRowsEvent)
        if update:
            all_present(event.columns_present_bitmap2, ncols, schema)
        delete = op_of(event) == DELETE
        pkt = event.packet
        data = pkt.read(event.event_size - pkt.read_bytes)
        return self._decode_data(plan, schema, data, update, delete)

    def decode_rows(self, table_map: Any, schema: TableSchema, mode: int,
                    data: bytes) -> list[tuple[dict | None, dict | None]]:
        """The row images of one rows event (``data``: after its header and bitmaps) for
        our own event layer (``sparkcdc.mysql.binlog.protocol``); ``mode`` 0 insert, 1 delete,
        2 update."""
        plan = self._plan_of(table_map, schema)
        return self._decode_data(plan, schema, data, mode == 2, mode == 1)

    def _plan_of(self, table_map: Any, schema: TableSchema):
        """The decoding plan of a table map read with ``schema``, kept per table map (at
        most 1,024 of them)."""
        hit = self._by_map.get(table_map)
        if hit is not None and hit[0] is schema:
            return hit[1]
        plan = self._plan_for(table_map.columns, schema)
        if len(self._by_map) > 1024:
            self._by_map.clear()
        self._by_map[table_map] = (schema, plan)
        return plan

    def decode_partial_rows(self, table_map: Any, schema: TableSchema,
                            data: bytes) -> list[tuple[dict | None, dict | None]]:
        """The row images of a PARTIAL_UPDATE_ROWS event (``data``: after its header and
        bitmaps): each row is a before image, the shared image (``value_options``, then one
        bit per JSON column of the table when PARTIAL_JSON is on) and an after image whose
        JSON columns with their bit set hold diffs, applied here to the before image's
        value (``json_diff``). The compiled decoder hands here the events whose rows hold
        diffs (JSON_SET/JSON_REPLACE/JSON_REMOVE updates)."""
        plan = self._plan_of(table_map, schema)
        names = schema.column_names
        nbits = (len(names) + 7) // 8
        json_cols = [i for i, c in enumerate(table_map.columns) if c.type == CT.JSON]
        sizes = {i: table_map.columns[i].length_size for i in json_cols}
        pos, end = 0, len(data)
        out: list[tuple[dict | None, dict | None]] = []
        try:
            while pos < end:
                before, pos, raw = _partial_before(data, pos, plan, names, nbits, sizes)
                options, pos = _packed_int(data, pos)
                partial = set()
                if options & 1:  # PARTIAL_JSON_UPDATES: one bit per JSON column
                    nb = (len(json_cols) + 7) // 8
                    bits = int.from_bytes(data[pos:pos + nb], "little")
                    pos += nb
                    partial = {c for k, c in enumerate(json_cols) if bits >> k & 1}
                after, pos = _partial_after(data, pos, plan, names, nbits, sizes, partial,
                                            raw)
                out.append((before, after))
        except (IndexError, struct.error, ValueError) as e:
            raise DecodeError(f"{schema.table_id}: malformed partial update event at byte "
                              f"{pos}: {e}",
                              fix="the table's binlog metadata and schema disagree; if the "
                                  "table was altered, restart capture with a new snapshot") \
                from None
        return out

    def _decode_data(self, plan: list[_Field], schema: TableSchema, data: bytes,
                     update: bool, delete: bool) -> list[tuple[dict | None, dict | None]]:
        names = schema.column_names
        nbits = (len(names) + 7) // 8
        pos, end = 0, len(data)
        out: list[tuple[dict | None, dict | None]] = []
        try:
            while pos < end:
                img, pos = _image(data, pos, plan, names, nbits)
                if update:
                    after, pos = _image(data, pos, plan, names, nbits)
                    out.append((img, after))
                else:
                    out.append((img, None) if delete else (None, img))
        except (IndexError, struct.error, ValueError) as e:
            raise DecodeError(f"{schema.table_id}: malformed row event at byte {pos}: {e}",
                              fix="the table's binlog metadata and schema disagree; if the "
                                  "table was altered, restart capture with a new snapshot") \
                from None
        return out

    def _plan(self, event: Any, schema: TableSchema) -> list[_Field]:
        return self._plan_for(event.columns, schema)

    def _plan_for(self, cols: list, schema: TableSchema) -> list[_Field]:
        sig = (schema.table_id, tuple(c.column_type for c in schema.columns),
               tuple(meta_sig(c) for c in cols))
        plan = self._plans.get(sig)
        if plan is None:
            check_columns(cols, schema)
            plan = [field_decoder(bc, sc) for bc, sc in zip(cols, schema.columns)]
            if len(self._plans) > 1024:
                self._plans.clear()
            self._plans[sig] = plan
        return plan


def meta_sig(c: Any) -> tuple:
    return (c.type, getattr(c, "max_length", None), getattr(c, "length_size", None),
            getattr(c, "fsp", None), getattr(c, "precision", None),
            getattr(c, "decimals", None), getattr(c, "bits", None), getattr(c, "size", None),
            tuple(getattr(c, "enum_values", None) or ()),
            tuple(getattr(c, "set_values", None) or ()))


def all_present(bitmap: bytes, ncols: int, schema: TableSchema) -> None:
    for i in range(ncols):
        if not bitmap[i >> 3] >> (i & 7) & 1:
            raise DecodeError(f"{schema.table_id}: the binlog row image lacks column "
                              f"{schema.columns[i].name!r}",
                              fix="set binlog_row_image=FULL on the server")


def _image(data: bytes, pos: int, plan: list[_Field], names: list[str],
           nbits: int) -> tuple[dict, int]:
    nulls = data[pos:pos + nbits]
    pos += nbits
    row: dict[str, Any] = {}
    for i, dec in enumerate(plan):
        if nulls[i >> 3] >> (i & 7) & 1:
            row[names[i]] = None
        else:
            row[names[i]], pos = dec(data, pos)
    return row, pos


def _partial_before(data: bytes, pos: int, plan: list[_Field], names: list[str], nbits: int,
                    sizes: dict[int, int]) -> tuple[dict, int, dict[int, bytes | None]]:
    """A before image, and the stored bytes of its JSON columns (the diffs' base)."""
    nulls = data[pos:pos + nbits]
    pos += nbits
    row: dict = {}
    raw: dict[int, bytes | None] = {}
    for i, dec in enumerate(plan):
        if nulls[i >> 3] >> (i & 7) & 1:
            row[names[i]] = raw[i] = None
            continue
        if i in sizes:
            n = int.from_bytes(data[pos:pos + sizes[i]], "little")
            raw[i] = bytes(data[pos + sizes[i]:pos + sizes[i] + n])
        row[names[i]], pos = dec(data, pos)
    return row, pos, raw


def _partial_after(data: bytes, pos: int, plan: list[_Field], names: list[str], nbits: int,
                   sizes: dict[int, int], partial: set[int],
                   raw: dict[int, bytes | None]) -> tuple[dict, int]:
    nulls = data[pos:pos + nbits]
    pos += nbits
    row: dict = {}
    for i, dec in enumerate(plan):
        if nulls[i >> 3] >> (i & 7) & 1:
            row[names[i]] = None
        elif i in partial:
            n = int.from_bytes(data[pos:pos + sizes[i]], "little")
            diffs = data[pos + sizes[i]:pos + sizes[i] + n]
            if len(diffs) != n:
                raise ValueError("a partial JSON update longer than the event")
            pos += sizes[i] + n
            row[names[i]] = json_diff.apply(raw.get(i), diffs, names[i])
        else:
            row[names[i]], pos = dec(data, pos)
    return row, pos


def op_of(event: Any) -> str:
    from pymysqlreplication.row_event import DeleteRowsEvent, UpdateRowsEvent

    if isinstance(event, UpdateRowsEvent):
        return UPDATE
    return DELETE if isinstance(event, DeleteRowsEvent) else INSERT


def check_columns(cols: list, schema: TableSchema) -> None:
    """A table map's columns (library ``Column`` objects) against the captured schema: the
    same count and, where the binlog names them, the same names."""
    if len(cols) != len(schema.columns):
        raise DecodeError(
            f"{schema.table_id}: the binlog has {len(cols)} columns, the captured "
            f"schema {len(schema.columns)}",
            fix="the table was altered; restart capture with a new snapshot")
    for bc, sc in zip(cols, schema.columns):
        if bc.name and bc.name != sc.name:
            raise DecodeError(
                f"{schema.table_id}: binlog column {bc.name!r} where the captured "
                f"schema has {sc.name!r}",
                fix="the table was altered; restart capture with a new snapshot")
