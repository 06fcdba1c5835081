"""The reference reader the binlog tests compare sparkcdc's own event layer with: the same
``BinlogReader`` (positions, transactions, reconnects, filtering), reading the stream
through python-mysql-replication's event classes instead of ``mysql/binlog/protocol/``,
and ``LibraryRowDecoder``, the library's own row values made canonical.

It overrides the reader's two seams, ``_open`` and ``_consume``; nothing in sparkcdc uses
it. The library opens the stream with ``is_mariadb=False`` on both flavors (its MariaDB
mode ignores the file and position), its silent reconnect is refused (the reader
reconnects from its own offset), and ``tablemap_cache`` has it parse each distinct table
map once.
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from typing import Any

import tablemap_cache

from sparkcdc.core.offsets import BinlogOffset
from sparkcdc.core.records import DELETE, ChangeRecord, Heartbeat
from sparkcdc.core.schema import TableSchema
from sparkcdc.errors import DecodeError
from sparkcdc.mysql import types as T
from sparkcdc.mysql.binlog.event_records import event_records
from sparkcdc.mysql.binlog.protocol.dump_stream import corrupt_event
from sparkcdc.mysql.binlog.read_state import ReadState
from sparkcdc.mysql.binlog.reader import (
    _LOG_EVENT_ARTIFICIAL,
    BinlogReader,
    _outside_txn,
    _Reconnect,
)
from sparkcdc.mysql.binlog.row_decoding import op_of

_ANONYMOUS_GTID = 0x22  # MySQL's anonymous GTID event: no GTID to keep
# MariaDB's compressed events (log_bin_compress=ON): python-mysql-replication (1.0.17, the
# newest release) has no classes for them and hands them over as NotImplementedEvent, so
# the reference refuses them rather than skip their rows (and DDL); the tests compare the
# reader on a compressing server with an uncompressed one instead
_LIBRARY_CANNOT = {t: "MariaDB compressed events (log_bin_compress=ON), which "
                      "python-mysql-replication does not decode"
                   for t in range(165, 172)}


class LibraryBinlogReader(BinlogReader):
    """``BinlogReader`` over python-mysql-replication's events."""

    def _consume(self, stream, state: ReadState, end: BinlogOffset | None,
                 heartbeat: float | None, beat: list[float]
                 ) -> Iterator[ChangeRecord | Heartbeat]:
        from pymysqlreplication.event import (
            GtidEvent,
            HeartbeatLogEvent,
            MariadbGtidEvent,
            MariadbGtidListEvent,
            NotImplementedEvent,
            PreviousGtidsEvent,
            QueryEvent,
            RotateEvent,
            XAPrepareEvent,
            XidEvent,
        )
        from pymysqlreplication.row_event import RowsEvent, TableMapEvent

        end_key = end.sort_key() if end is not None else None
        low_key = state.low_key
        flavor = self.flavor

        def reached(key: tuple) -> bool:
            return end_key is not None and key >= end_key

        def beat_due() -> bool:
            return heartbeat is not None and time.monotonic() - beat[0] >= heartbeat

        def make_beat() -> Heartbeat:
            beat[0] = time.monotonic()
            return Heartbeat(state.boundary(), int(time.time() * 1000))

        if reached(state.key(state.boundary_pos)):
            state.done = True
            return
        while True:
            ev = stream.fetchone()
            if ev is None:
                return  # EOF of a non-blocking dump
            hdr = ev.packet
            if isinstance(ev, HeartbeatLogEvent):
                if heartbeat is not None and not state.in_txn:
                    yield make_beat()
                continue
            if isinstance(ev, RotateEvent):
                if state.in_txn:  # transactions never span files
                    raise DecodeError(f"binlog rotated from {state.file} to {ev.next_binlog} "
                                      f"inside a transaction")
                state.set_file(ev.next_binlog, ev.position)
                if reached(state.key(state.boundary_pos)):
                    state.done = True
                    return
                continue
            if hdr.log_pos == 0 or hdr.flags & _LOG_EVENT_ARTIFICIAL:
                continue  # the dump's fake format description: no position of its own
            state.progress += 1
            ev_start, ev_end = hdr.log_pos - hdr.event_size, hdr.log_pos

            if isinstance(ev, RowsEvent):
                if not state.in_txn:
                    raise _outside_txn(state, ev_start)
                e = state.events
                state.events += 1
                key = state.key(state.txn_pos, e)
                if reached(key):
                    state.done = True
                    return
                schema = self._schema(ev.schema, ev.table)
                if schema is None or key[:3] < low_key[:3]:
                    continue  # uncaptured, or wholly before the start: never decoded
                if ev._is_event_valid is False:  # as the native layer: read again, not decoded
                    raise corrupt_event(f"{state.file}:{ev_start}")
                decoded = self.decoder.decode(ev, schema)
                recs, low_key, cut = event_records(state, key, decoded, op_of(ev),
                                                    schema.table_id, end_key, flavor)
                yield from recs
                state.low_key = low_key
                if cut:
                    state.done = True
                    return
                continue
            if isinstance(ev, TableMapEvent):
                continue
            if isinstance(ev, MariadbGtidEvent):
                if reached(state.key(ev_start)):
                    state.done = True
                    return
                state.begin(ev_start, ev.gtid, ev.timestamp, explicit=not ev.flags & 1)
                continue
            if isinstance(ev, GtidEvent) or (isinstance(ev, NotImplementedEvent)
                                              and ev.event_type == _ANONYMOUS_GTID):
                if reached(state.key(ev_start)):
                    state.done = True
                    return
                gtid = ev.gtid if isinstance(ev, GtidEvent) else None
                state.begin(ev_start, gtid, ev.timestamp, explicit=False)
                continue
            if isinstance(ev, NotImplementedEvent):
                if ev.event_type in _LIBRARY_CANNOT:
                    raise DecodeError(
                        f"{_LIBRARY_CANNOT[ev.event_type]} at {state.file}:{ev_start}",
                        fix="compare with a server that does not compress its binlog")
                if not state.in_txn:
                    state.boundary_pos = ev_end
            elif isinstance(ev, QueryEvent):
                q = ev.query.strip().upper()
                if q == "BEGIN" or q.startswith("XA START"):
                    if not state.in_txn:
                        if reached(state.key(ev_start)):
                            state.done = True
                            return
                        state.begin(ev_start, None, ev.timestamp, explicit=True)
                    state.explicit = True
                elif q in ("COMMIT", "ROLLBACK") or not (state.in_txn and state.explicit):
                    state.commit(ev_end)  # the end of a transaction, or a DDL on its own
            elif isinstance(ev, (XidEvent, XAPrepareEvent)):
                state.commit(ev_end)
            elif isinstance(ev, MariadbGtidListEvent):
                state.set_gtid_list([g.gtid for g in ev.gtid_list])
                state.boundary_pos = ev_end
            elif isinstance(ev, PreviousGtidsEvent):
                state.set_gtid_list([g for g in ev._previous_gtids.split(",") if g])
                state.boundary_pos = ev_end
            elif not state.in_txn:
                state.boundary_pos = ev_end  # format description, checkpoint...
            if not state.in_txn:
                bkey = state.key(state.boundary_pos)
                if reached(bkey):
                    state.done = True
                    return
                if bkey > low_key:
                    state.low_key = low_key = bkey
                if beat_due():
                    yield make_beat()

    # -- plumbing --------------------------------------------------------------------------

    def _open(self, start: BinlogOffset, *, blocking: bool, heartbeat: float | None,
              where=None):  # one server: the reference reader never fails over
        from pymysqlreplication import BinLogStreamReader
        from pymysqlreplication.event import (
            FormatDescriptionEvent,
            GtidEvent,
            HeartbeatLogEvent,
            MariadbBinLogCheckPointEvent,
            MariadbGtidEvent,
            MariadbGtidListEvent,
            MariadbStartEncryptionEvent,
            NotImplementedEvent,
            PreviousGtidsEvent,
            QueryEvent,
            RotateEvent,
            StopEvent,
            XAPrepareEvent,
            XidEvent,
        )
        from pymysqlreplication.row_event import (
            DeleteRowsEvent,
            PartialUpdateRowsEvent,
            TableMapEvent,
            UpdateRowsEvent,
            WriteRowsEvent,
        )

        base = self.conn.pymysql_kwargs()
        base.pop("database", None)
        base.pop("autocommit", None)
        base.pop("init_command", None)  # the session time zone does not matter here
        read_timeout = self.read_timeout
        if heartbeat is not None:
            read_timeout = max(3 * heartbeat, 10.0)
        settings = dict(base, read_timeout=read_timeout)
        opened = [0]

        def connect(**kw: Any):
            # the library's control connection (information_schema) may open once; its
            # stream connection only once: a second one would be a silent reconnect
            if kw.get("db") == "information_schema":
                kw.pop("read_timeout", None)
                ctl = _connect_renaming_db(**kw)
                tablemap_cache.enable(ctl)  # each distinct TABLE_MAP parsed once
                return ctl
            if opened[0]:
                raise _Reconnect()
            opened[0] += 1
            return _connect_renaming_db(**kw)

        return BinLogStreamReader(
            connection_settings=settings, server_id=self.server_id,
            resume_stream=True, blocking=blocking, log_file=start.file, log_pos=start.pos,
            # every event that can sit between transactions moves the boundary, so the
            # window end and heartbeats land exactly on SHOW MASTER STATUS positions
            only_events=[RotateEvent, XidEvent, QueryEvent, GtidEvent, MariadbGtidEvent,
                         MariadbGtidListEvent, PreviousGtidsEvent, XAPrepareEvent,
                         HeartbeatLogEvent, TableMapEvent, WriteRowsEvent, UpdateRowsEvent,
                         DeleteRowsEvent, PartialUpdateRowsEvent, NotImplementedEvent,
                         FormatDescriptionEvent, MariadbBinLogCheckPointEvent, StopEvent,
                         MariadbStartEncryptionEvent],
            # CRC32 checked (the library logs a mismatch, _consume reads the event again): MySQL
            # goes on sending after a socket's shutdown, and Linux may deliver part of it
            # (docs/mysql-findings.md, finding 7)
            verify_checksum=True,
            filter_non_implemented_events=False, freeze_schema=False, is_mariadb=False,
            slave_heartbeat=heartbeat, pymysql_wrapper=connect, enable_logging=False)


def _connect_renaming_db(**kw: Any):
    """pymysql.connect for the library, which still passes the deprecated ``db``."""
    import pymysql

    if "db" in kw:
        kw["database"] = kw.pop("db")
    return pymysql.connect(**kw)


class LibraryRowDecoder:
    """Uses the library's own row values, then ``types.canonical_row``. Lossy for negative
    TIME with fractions (see ``MySQLType.from_library``); kept to compare with."""

    def decode(self, event: Any, schema: TableSchema) -> list[tuple[dict | None, dict | None]]:
        out: list[tuple[dict | None, dict | None]] = []
        for row in event.rows:
            if "values" in row:
                img = T.canonical_row(schema, row["values"], row.get("none_sources"))
                out.append((img, None) if op_of(event) == DELETE else (None, img))
            else:
                out.append((T.canonical_row(schema, row["before_values"],
                                            row.get("before_none_sources")),
                            T.canonical_row(schema, row["after_values"],
                                            row.get("after_none_sources"))))
        return out

