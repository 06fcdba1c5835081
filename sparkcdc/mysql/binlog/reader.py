"""Binlog windows and tails as ChangeRecords.

What the reader owns, and why:

* **Events.** The reader speaks the replication protocol itself through
  ``sparkcdc.mysql.binlog.protocol``: its own dump request, packet splitting (in C when the
  extension is built), event headers, table maps parsed once per distinct body, and row
  events handed straight to the row decoder, so no per-event work goes through
  python-mysql-replication's event classes. Those classes read the same stream in the
  tests' reference reader (tests/support/library_reader.py), which overrides ``_open`` and
  ``_consume``, the two places the event layer shows. With the compiled decoder the loop
  over events runs in C (``CRowDecoder.event_loop``, ``_fastloop.c``), which hands
  ``_consume``'s Python loop only the events it does not take; that loop is the reference.
* **Positions.** Every stream starts from an explicit file and position. Record offsets
  are the start of their transaction plus two counters (see ``sparkcdc.core.records``). ``events`` counts *every* row event of the transaction,
  captured or not, so an offset means the same thing whatever tables a later run captures.
  Events of uncaptured tables are still skipped without decoding their rows.
* **Reconnection.** The reader reconnects itself from its own last offset, dropping every
  record before the last one it yielded: no duplicates. A lost server is waited for up to
  ``connect.timeout`` (pauses 0.1, 0.2, ... 2 s; at least ``connect.max-retries`` tries), as
  the driver's planning does (``spark/source.py``): a failover keeps the address dark for
  seconds (a MySQL primary's clean stop, 9 to 12 s). Then ``ConnectionFailed``.
* **Decoding.** Row images are decoded by a swappable ``RowDecoder`` (``row_decoding.py``).
  The default (``fastdecode.default_decoder``: the compiled ``CRowDecoder``, else
  ``PyRowDecoder``) reads the
  event bytes itself, because the library's own values are lossy (negative TIME with a
  fraction, YEAR 0000, empty SET, BIT as text, TIMESTAMP as naive datetime) and the
  canonical values must equal the snapshot's (``sparkcdc.mysql.types``).
* **MySQL 8.** A compressed transaction (TRANSACTION_PAYLOAD,
  ``binlog_transaction_compression=ON``) is opened by the decoder's ``open_payload`` (the
  compiled one's in C; else ``transaction_payload``) and its events go through the same loop as if they had come one by one, each with the payload
  event's size and position: a record's offset keeps its transaction's start (the GTID
  event before the payload, else the payload) and counts its row events, so offsets stay
  unique and resume between two rows inside a payload; the XID inside commits at the
  payload's end. A PARTIAL_UPDATE_ROWS event (``binlog_row_value_options=PARTIAL_JSON``;
  MySQL then logs every UPDATE so) is an update decoded in C
  (``CRowDecoder.decode_partial_event``), its JSON diffs applied to the before image
  (``json_diff``, over trees built in C); without the compiled decoder, the decoder's
  ``decode_partial_rows``.
  docs/operations.md has both for users.
* **MariaDB's compressed events** (``log_bin_compress=ON``) are inflated only where they are
  used (a captured table's row images, a statement), then read exactly as their plain twins:
  the same decoders, positions and event counts, so an offset means the same thing with
  compression on or off. Its compressed rows events stay in the compiled event loop.
* **Checksums.** The events whose bytes are decoded (captured row events, table maps
  not seen before, compressed transactions) are checked against their CRC32 when the binlog
  has checksums (``binlog_checksum=CRC32``, both servers' default): a damaged one is read
  again from the last transaction boundary, as after a lost connection.
* **Errors.** A file the server no longer has raises ``BinlogUnavailable`` naming it;
  a corrupt MariaDB compressed event (named by its file and position) raises
  ``DecodeError`` instead of being skipped.
"""

from __future__ import annotations

import contextlib
import logging
import time
from collections.abc import Callable, Iterable, Iterator
from typing import Any

from sparkcdc import heap
from sparkcdc.core.offsets import BinlogOffset
from sparkcdc.core.records import DELETE, INSERT, UPDATE, ChangeRecord, Heartbeat
from sparkcdc.core.schema import TableId, TableSchema
from sparkcdc.core.table_events import NewSchema, TableEvent
from sparkcdc.errors import ConnectionFailed, DecodeError, OffsetError, SchemaError, SparkCDCError
from sparkcdc.mysql import ddl, ddl_events
from sparkcdc.mysql.binlog import failover, schema_at
from sparkcdc.mysql.binlog import protocol as E
from sparkcdc.mysql.binlog import rows_events as RE
from sparkcdc.mysql.binlog import transaction_payload as P
from sparkcdc.mysql.binlog.event_records import event_records, offset_at
from sparkcdc.mysql.binlog.fastdecode import default_decoder
from sparkcdc.mysql.binlog.protocol import DumpStream
from sparkcdc.mysql.binlog.read_state import ReadState
from sparkcdc.mysql.binlog.row_decoding import (
    RowDecoder,
    meta_sig,
)
from sparkcdc.mysql.binlog.server_lookups import dump_failure, load_table_schema, server_flavor
from sparkcdc.mysql.connection import ConnectionOptions

log = logging.getLogger(__name__)

_LOG_EVENT_ARTIFICIAL = 0x20


# -- the reader --------------------------------------------------------------------------------

# schemas resolved from table maps, per process (BinlogReader._schema_of_map)
_RESOLVED: dict[tuple, TableSchema] = {}

_OPS = (INSERT, DELETE, UPDATE)  # by the event layer's mode: 0 insert, 1 delete, 2 update


def _with_payloads(batches: Iterable[tuple[bytes, list]], pending: list[tuple[bytes, Any]]
                   ) -> Iterator[tuple[bytes, Any]]:
    """The stream's batches, each as ``(data, iterator over its events)``; after a batch
    whose loop stopped at a TRANSACTION_PAYLOAD (``_consume``), what that loop left in
    ``pending``: the payload's own events (``transaction_payload.inner_events``), then the
    rest of the batch, so a compressed transaction reads exactly as if its events had come
    one by one. Costs one step per batch, nothing per event."""
    for data, evs in batches:
        yield data, iter(evs)
        while pending:
            yield pending.pop()


def _outside_txn(state: ReadState, pos: int) -> DecodeError:
    return DecodeError(f"row event outside a transaction at {state.file}:{pos}",
                       fix="start from a transaction boundary (an offset "
                           "from SHOW MASTER STATUS or from a record)")


class _Reconnect(Exception):
    """The library tried to reconnect on its own; the adapter restarts from its offset."""


class BinlogReader:
    """Reads change records of the captured tables from one server's binlog.

    ``tables`` maps captured tables to their schemas; a plain set of ``TableId`` makes the
    reader load each schema from information_schema when its first event arrives.
    ``flavor`` is ``"mariadb"`` or ``"mysql"``; None (the default) takes each read's start
    offset's when it has a GTID state (``current_offset`` asks the server) and asks the
    server when it is a file and a position alone (which says ``mariadb`` whatever made it).
    """

    def __init__(self, conn: ConnectionOptions, server_id: int,
                 tables: dict[TableId, TableSchema] | Iterable[TableId],
                 flavor: str | None = None, decoder: RowDecoder | None = None, *,
                 read_timeout: float = 60.0, max_retries: int | None = None,
                 table_events: bool = False):
        if flavor not in ("mariadb", "mysql", None):
            raise ValueError(f"flavor must be 'mariadb' or 'mysql', not {flavor!r}")
        self.conn = conn
        self.server_id = int(server_id)
        self._flavor_of_offsets = flavor is None
        self.flavor = flavor or "mariadb"
        self.decoder = decoder or default_decoder()
        # TableEvents among the records: schema changes, DDL and TRUNCATE of captured tables
        # (records.TableEvent); each row event is then decoded by the schema its table map
        # describes (binlog/schema_at.py)
        self.table_events = table_events
        # each distinct TABLE_MAP body parsed once, across this reader's streams
        self._table_maps: dict[bytes, Any] = {}
        self.read_timeout = read_timeout
        self.max_retries = conn.max_retries if max_retries is None else max_retries
        self.connect_timeout = float(conn.connect_timeout)
        if isinstance(tables, dict):
            self._schemas: dict[tuple[str, str], TableSchema | None] = {
                (t.database, t.table): s for t, s in tables.items()}
        else:
            self._schemas = {(t.database, t.table): None for t in tables}
        self.reconnects = 0  # how often the adapter restarted a broken stream

    # -- public ----------------------------------------------------------------------------

    def read_window(self, start: BinlogOffset, end: BinlogOffset) -> Iterator[ChangeRecord]:
        """Records with ``start <= offset < end``; returns once ``end`` is reached."""
        if start.same_server(end) and start >= end:
            return  # (across a failover the server is asked first: _settle)
        yield from self._run(start, end, None)  # type: ignore[misc]

    def tail(self, start: BinlogOffset, heartbeat_interval: float = 5.0
             ) -> Iterator[ChangeRecord | Heartbeat | TableEvent]:
        """Records from ``start`` on, forever; a ``Heartbeat`` at the last transaction boundary
        whenever ``heartbeat_interval`` seconds pass without one, so callers can advance."""
        if heartbeat_interval <= 0:
            raise ValueError("heartbeat_interval must be positive")
        yield from self._run(start, None, heartbeat_interval)

    def _server_flavor(self, start: BinlogOffset) -> str:
        """The server's kind, for a start that does not say (a file and a position); a
        server out of reach is named with the offset to resume from, as the loop's own
        failures are."""
        try:
            return server_flavor(self.conn)
        except ConnectionFailed as e:
            raise ConnectionFailed(f"reading the binlog of {self.conn} from {start}: "
                                   f"{e.message}", fix=e.fix) from None

    # -- the loop --------------------------------------------------------------------------

    def _run(self, start: BinlogOffset, end: BinlogOffset | None,
             heartbeat: float | None) -> Iterator[ChangeRecord | Heartbeat | TableEvent]:
        if self._flavor_of_offsets:
            self.flavor = start.flavor if start.gtid else self._server_flavor(start)
        heap.settle()  # a few tracked objects per change: collections skip start-up's
        state = ReadState(self.flavor, start, end=end)
        failures = 0
        lost_at = 0.0  # when the first of ``failures`` happened
        beat = [time.monotonic()]  # when the last heartbeat went out
        while True:
            resume = state.restart_point()
            stream = self._open(resume, blocking=end is None, heartbeat=heartbeat,
                                where=lambda server: self._settle(state, server))
            ground = state.low_key  # grows past each boundary and record read the first time
            short = False  # the stream ended cleanly before ``end``
            try:
                yield from self._consume(stream, state, end, heartbeat, beat)
                if state.done:
                    return
                # EOF before ``end``: retry, the server may not have sent it all yet
                short = end is not None
                reason = (f"the binlog ended at {state.boundary()} before the window end {end}"
                          if short else "the server closed the binlog stream")
            except _Reconnect:
                reason = "the binlog connection was lost"
            except Exception as e:  # noqa: BLE001 - dump_failure raises all but a lost link
                reason = dump_failure(self.conn, e, resume)  # or raises what no retry mends
            finally:
                stream.close()
            if state.low_key > ground:  # (not events read again up to the last break)
                failures = 0
            if failures == 0:
                lost_at = time.monotonic()
            failures += 1
            waited = time.monotonic() - lost_at
            # an end past the binlog (short) stops after the retries, a lost server later
            if failures > self.max_retries and (short or waited >= self.connect_timeout):
                if short:
                    raise OffsetError(reason, fix="the window end must come from the server's "
                                      "current offset (SHOW MASTER STATUS)")
                raise ConnectionFailed(
                    f"reading the binlog of {self.conn} from {state.restart_point()}: {reason} "
                    f"({failures} attempts in {waited:.1f} s, connect.timeout "
                    f"{self.connect_timeout:g}s)",
                    fix="check that the server runs and is reachable; the read resumes from "
                        "this offset (a longer connect.timeout waits longer for a server that "
                        "restarts or fails over)")
            self.reconnects += 1
            log.warning("binlog reader: %s; reconnecting from %s (attempt %d, %.1f s of %g)",
                        reason, state.restart_point(), failures, waited, self.connect_timeout)
            state.restart()
            pause = min(0.1 * 2 ** (failures - 1), 2.0)  # the last ends at connect.timeout
            time.sleep(pause if failures < self.max_retries
                       else min(pause, max(0.0, self.connect_timeout - waited)))
            with contextlib.suppress(SparkCDCError):  # none answers: the dump says so
                self.conn.find_host()  # several servers listed: one that answers

    def _consume(self, stream, state: ReadState, end: BinlogOffset | None,
                 heartbeat: float | None, beat: list[float]
                 ) -> Iterator[ChangeRecord | Heartbeat | TableEvent]:
        """The loop over our own event layer (``protocol``); the tests' reference reader
        (tests/support/library_reader.py) yields the same records, offsets and boundaries over
        python-mysql-replication's events."""

        flavor = self.flavor
        # here, inside _run's retries: the server may be restarting, or be another one now
        # (the dump is placed on it first: _settle)
        stream.connect()
        end = state.end
        end_key = end.sort_key() if end is not None else None

        def reached(key: tuple) -> bool:
            return end_key is not None and key >= end_key

        def make_beat() -> Heartbeat:
            beat[0] = time.monotonic()
            return Heartbeat(state.boundary(), int(time.time() * 1000))

        if reached(state.key(state.boundary_pos)):
            state.done = True
            return
        csum = 4 if stream.checksum else 0
        query_post, tid_len = 13, 6
        maps: dict[int, Any] = {}  # table id -> TableMap, for this file
        cache = self._table_maps
        decoder = self.decoder
        decode_rows = decoder.decode_rows
        # a decoder that takes whole rows events (header, bitmaps, images) in one C call
        decode_event = (getattr(decoder, "decode_event", None)
                        if getattr(decoder, "event_in_c", False) else None)
        # PARTIAL_UPDATE_ROWS events without JSON diffs, the same way (with PARTIAL_JSON on,
        # MySQL logs every UPDATE as one, JSON column or not)
        decode_partial = (getattr(decoder, "decode_partial_event", None)
                          if getattr(decoder, "partial_in_c", False) else None)
        # a compressed transaction's events: opened in C by the compiled decoder
        open_payload = getattr(decoder, "open_payload", P.open_payload)
        row_events = E.ROW_EVENTS
        mgtid = E.MARIADB_GTID_BODY.unpack_from
        ignored = E.IGNORED_EVENTS
        schemas = self._schemas
        T_HEARTBEAT, T_ROTATE, T_FD, T_TABLE_MAP = (E.HEARTBEAT, E.ROTATE,
                                                    E.FORMAT_DESCRIPTION, E.TABLE_MAP)
        T_MGTID, T_XID, T_QUERY = E.MARIADB_GTID, E.XID, E.QUERY
        T_PARTIAL, T_PAYLOAD = E.PARTIAL_UPDATE_ROWS, P.TRANSACTION_PAYLOAD
        T_QUERY_Z, zrows = E.QUERY_COMPRESSED, E.COMPRESSED_ROW_EVENTS  # log_bin_compress
        T_LOOP = E.LOOP_RECORDS
        # the events whose bytes are decoded (captured row events, new table maps, compressed
        # transactions) are checked against their CRC32 when the binlog has one: damaged
        # bytes are read again from the last boundary rather than decoded (a payload's
        # events have none of their own: the payload's covers them)
        crc_bad, in_payload = E.checksum_mismatch, P.IN_PAYLOAD
        table_events = self.table_events
        fitted: dict[tuple[str, str], Any] = {}  # table -> the last table map its schema fits
        pending: list[tuple[bytes, Any]] = []  # a payload's events, then the rest of its batch
        batches = stream.batches()
        fold = getattr(decoder, "fold_begins", E.fold_begins) if flavor == "mysql" else None
        # the loop in C (``fastdecode.CRowDecoder.event_loop``): each batch's events, of which
        # it hands this loop only what it does not take itself (``_fastloop.c``), and LOOP_*
        loop = getattr(decoder, "event_loop", lambda *a: None)(
            state, maps, cache, schemas, fitted if table_events else None, end_key, heartbeat,
            beat, flavor, csum, query_post, tid_len)
        if loop is not None:
            batches = ((data, loop.events(data, evs)) for data, evs in batches)
        elif fold is not None:
            # MySQL's GTID event and the BEGIN after it, as one event (``fold_begins``), with
            # the checksum and QUERY post-header the loop knows when each batch starts
            batches = ((data, fold(data, evs, csum, query_post)) for data, evs in batches)
        # (whether the event has a GTID, whether its transaction has BEGIN); None: the BEGIN
        # of the transaction the GTID before it began (a compressed transaction's first event)
        gtid_parts = E.mysql_gtid_parts
        gtid_kinds: dict[int, tuple[bool, bool] | None] = {E.GTID: (True, False), E.ANONYMOUS_GTID: (False, False),
                      E.FOLDED + E.GTID: (True, True), E.FOLDED + E.ANONYMOUS_GTID: (False, True),
                      E.FOLDED + E.QUERY: None}
        for data, evs in _with_payloads(batches, pending):
            for _ts, etype, server_id, size, log_pos, flags, s, e in evs:
                if etype >= T_LOOP:  # from the loop in C
                    if etype == E.LOOP_RECORDS:
                        yield from s
                    elif etype == E.LOOP_DATA:
                        data = s  # the buffer of the events it hands next (a payload's)
                    elif etype == E.LOOP_BEAT:
                        yield make_beat()
                    else:  # E.LOOP_DONE: the window's end
                        state.done = True
                        return
                    continue
                if etype == T_HEARTBEAT:
                    if heartbeat is not None and not state.in_txn:
                        yield make_beat()
                    continue
                if etype == T_ROTATE:
                    name, pos = E.rotate(data, s, e, None)
                    if state.in_txn:  # transactions never span files
                        raise DecodeError(f"binlog rotated from {state.file} to {name} "
                                          f"inside a transaction")
                    state.set_file(name, pos)
                    maps.clear()
                    if reached(state.key(state.boundary_pos)):
                        state.done = True
                        return
                    continue
                if etype == T_FD:
                    checksum, post = E.format_description(data, s, e)
                    csum = 4 if checksum else 0
                    if len(post) >= T_QUERY:
                        query_post = post[T_QUERY - 1]
                    # 4-byte table ids: servers before 5.1.4 (and their files)
                    tid_len = 4 if len(post) >= T_TABLE_MAP and post[T_TABLE_MAP - 1] == 6 \
                        else 6
                    if loop is not None:
                        loop.formats(csum, query_post, tid_len)
                if etype in ignored or log_pos == 0 or flags & _LOG_EVENT_ARTIFICIAL:
                    continue  # e.g. the dump's fake format description: no position of its own
                state.progress += 1
                ev_end = log_pos
                rows = row_events.get(etype)
                if rows is not None:
                    if not state.in_txn:
                        raise _outside_txn(state, log_pos - size)
                    ev = state.events
                    state.events += 1
                    key = (state.fidx, state.txn_pos, ev, 0)
                    if end_key is not None and key >= end_key:
                        state.done = True
                        return
                    mode, version = rows
                    tid = int.from_bytes(data[s + 19:s + 19 + tid_len], "little")
                    tm = maps.get(tid)
                    if tm is None:
                        raise DecodeError(f"row event for table id {tid} without its "
                                          f"TABLE_MAP at {state.file}:{log_pos - size}",
                                          fix="start from a transaction boundary (an offset "
                                              "from SHOW MASTER STATUS or from a record)")
                    skey = tm.key
                    if skey not in schemas or key[:3] < state.low_key[:3]:
                        continue  # uncaptured, or wholly before the start: never decoded
                    if csum and not flags & in_payload and crc_bad(data, s, e):
                        raise E.corrupt_event(f"{state.file}:{log_pos - size}")
                    schema = schemas[skey] or self._schema(*skey)
                    if schema is None:
                        raise DecodeError(f"no schema of captured table {skey[0]}.{skey[1]} "
                                          f"at {state.file}:{log_pos - size}",
                                          fix="a bug: report it with the table's DDL")
                    if table_events and fitted.get(skey) is not tm:
                        if not schema_at.fits(tm.columns, schema):
                            schema = schemas[skey] = self._schema_of_map(tm, schema)
                            yield NewSchema(schema.table_id, offset_at(
                                state.file, state.txn_pos, ev, 0, state.txn_gtid_before,
                                flavor, state.server), state.txn_ts * 1000, schema)
                        fitted[skey] = tm
                    if etype == T_PARTIAL:
                        decoded = (None if decode_partial is None else
                                   decode_partial(tm, schema, data, s + 19, e - csum, tid_len))
                        if decoded is None:  # JSON diffs to apply (or a column missing)
                            decoded = RE.decode_partial(decoder, tm, schema, data, s, e - csum,
                                                           tid_len)
                    elif etype in zrows:  # MariaDB log_bin_compress: inflated, then as any
                        decoded = RE.decode_compressed(decoder, tm, schema, data, s, e - csum,
                                                          tid_len, version, mode,
                                                          f"{state.file}:{log_pos - size}")
                    elif decode_event is not None:  # the whole event in one C call
                        decoded = decode_event(tm, schema, data, s + 19, e - csum, tid_len,
                                               version, mode)
                        if decoded is None:  # a column is missing: name it
                            _tid, ncols, present, present2, p = E.rows_header(
                                data, s + 19, e, version, mode == 2, tid_len)
                            RE.check_present(present, present2, ncols, schema)
                            decoded = decode_rows(tm, schema, mode, data[p:e - csum])
                    else:
                        decoded = RE.decode_event_py(decoder, tm, schema, data, s, e - csum,
                                                        tid_len, version, mode)
                    recs, low_key, cut = event_records(state, key, decoded, _OPS[mode],
                                                        schema.table_id, end_key, flavor)
                    yield from recs
                    state.low_key = low_key  # (state's, not a local: the C loop moves it too)
                    if cut:
                        state.done = True
                        return
                    continue
                if etype == T_TABLE_MAP:
                    body = data[s + 19:e - csum]
                    tm = cache.get(body)
                    if tm is None:
                        if csum and not flags & in_payload and crc_bad(data, s, e):
                            raise E.corrupt_event(f"{state.file}:{log_pos - size}")
                        tm = E.parse_table_map(body, flavor, tid_len)
                        if len(cache) >= 512:
                            cache.clear()
                        cache[body] = tm
                    maps[tm.table_id] = tm
                    continue
                ev_start = log_pos - size
                if etype == T_MGTID:
                    if end_key is not None and (state.fidx, ev_start, 0, 0) >= end_key:
                        state.done = True
                        return
                    seq, domain, gflags = mgtid(data, s + 19)
                    state.begin(ev_start, f"{domain}-{server_id}-{seq}", _ts,
                                explicit=not gflags & 1)
                    continue
                kind = gtid_kinds.get(etype, ())
                if kind is None:  # a compressed transaction's BEGIN (folded)
                    state.explicit = True
                    continue
                if kind:  # MySQL's GTID, alone or with its BEGIN (folded)
                    if end_key is not None and (state.fidx, ev_start, 0, 0) >= end_key:
                        state.done = True
                        return
                    if kind[0]:
                        sid, gno = gtid_parts(data, s)
                        state.begin_mysql(ev_start, sid, gno, _ts, kind[1])
                    else:
                        state.begin(ev_start, None, _ts, explicit=kind[1])
                    continue
                if etype == T_XID or etype == E.XA_PREPARE:
                    state.commit(ev_end)
                elif etype == T_QUERY or etype == T_QUERY_Z:
                    q = E.query_text(data, s, e - csum, query_post) if etype == T_QUERY \
                        else RE.compressed_query(data, s, e - csum, query_post, state, ev_start)
                    head = q[:8].upper()
                    if head.startswith(b"BEGIN") and q.upper() == b"BEGIN" or head == b"XA START":
                        if not state.in_txn:
                            if reached(state.key(ev_start)):
                                state.done = True
                                return
                            state.begin(ev_start, None, _ts, explicit=True)
                        state.explicit = True
                    elif len(q) <= 8 and q.upper() in (b"COMMIT", b"ROLLBACK"):
                        state.commit(ev_end)
                    elif not (state.in_txn and state.explicit):  # a DDL on its own
                        if table_events:
                            yield from self._ddl_events(q, E.query_db(data, s, query_post),
                                                        state, ev_start, end_key, _ts)
                        state.commit(ev_end)
                elif etype == E.MARIADB_GTID_LIST:
                    state.set_gtid_list(E.mariadb_gtid_list(data, s, e))
                    state.boundary_pos = ev_end
                elif etype == E.PREVIOUS_GTIDS:
                    state.set_gtid_list(E.previous_gtids(data, s))
                    state.boundary_pos = ev_end
                elif etype == T_PAYLOAD:  # a compressed transaction: its events, then on
                    if csum and crc_bad(data, s, e):
                        raise E.corrupt_event(f"{state.file}:{ev_start}")
                    pending.append((data, evs))  # evs: the rest of this batch (an iterator)
                    pdata, pevs = open_payload(data, s + 19, e - csum, size, log_pos, csum)
                    if fold is not None and state.in_txn and not state.events \
                            and not state.explicit:  # right after its GTID: BEGIN folded
                        pevs = fold(pdata, pevs, csum, query_post,
                                    E.GTID if state.txn_gtid else E.ANONYMOUS_GTID)
                    pending.append((pdata, pevs))
                    break
                elif not state.in_txn:
                    state.boundary_pos = ev_end  # format description, checkpoint, stop...
                if not state.in_txn:
                    bkey = (state.fidx, state.boundary_pos, 0, 0)
                    if end_key is not None and bkey >= end_key:
                        state.done = True
                        return
                    state.low_key = max(state.low_key, bkey)
                    if heartbeat is not None and time.monotonic() - beat[0] >= heartbeat:
                        yield make_beat()

    def _ddl_events(self, q: bytes, db: str | None, state: ReadState, ev_start: int,
                    end_key: tuple | None, ts: int) -> Iterator[TableEvent]:
        """The table events of a statement on its own (a DDL), for the captured tables it
        names (``ddl_events.statement_events``: truncated, dropped, renamed, swapped or
        changed)."""
        sql = q.decode("utf-8", "replace")
        if not ddl.is_ddl(sql):
            return
        pos = state.txn_pos if state.in_txn else ev_start
        key = (state.fidx, pos, 0, 0)
        if key < state.low_key or (end_key is not None and key >= end_key):
            return
        offset = offset_at(state.file, pos, 0, 0, state.txn_gtid_before, self.flavor, state.server)
        yield from ddl_events.statement_events(sql, db, self._schemas, offset, ts * 1000)

    def _schema_of_map(self, tm: Any, old: TableSchema) -> TableSchema:
        """The schema a captured table's new table map describes (``schema_at.resolve``),
        remembered per process: each window's reader meets the same map again."""
        sig = (tm.key, tuple((c.name, c.unsigned, c.character_set_name, *meta_sig(c))
                             for c in tm.columns),
               tuple((c.name, c.column_type) for c in old.columns))
        got = _RESOLVED.get(sig)
        if got is None:
            def now() -> TableSchema | None:
                try:
                    return load_table_schema(self.conn, old.table_id)
                except SchemaError:  # dropped (or renamed) since
                    return None

            got = schema_at.resolve(tm.columns, old.table_id, [old], now)
            if len(_RESOLVED) >= 256:
                _RESOLVED.clear()
            _RESOLVED[sig] = got
            log.info("%s: its rows now have the schema %s", old.table_id,
                     ", ".join(f"{c.name} {c.column_type}" for c in got.columns))
        return got

    def _schema(self, database: str, table: str) -> TableSchema | None:
        key = (database, table)
        if key not in self._schemas:
            return None
        schema = self._schemas[key]
        if schema is None:
            schema = load_table_schema(self.conn, TableId(database, table))
            self._schemas[key] = schema
        return schema

    def _open(self, start: BinlogOffset, *, blocking: bool, heartbeat: float | None,
              where: Callable[[str], tuple[str, int]] | None = None):
        """The dump stream from ``start`` (the reference reader of the tests,
        tests/support/library_reader.py, opens python-mysql-replication's instead)."""

        read_timeout = self.read_timeout
        if heartbeat is not None:
            read_timeout = max(3 * heartbeat, 10.0)
        return DumpStream(self.conn.dump_kwargs(), self.server_id, start.file, start.pos,
                          blocking=blocking, heartbeat=heartbeat, read_timeout=read_timeout,
                          where=where)

    def _settle(self, state: ReadState, server: str) -> tuple[str, int]:
        """Where the dump starts on ``server``, the server the connection reached: the
        restart point, and the window's end, found again by their GTID states when they
        belong to another server's binlog (a failover, ``failover.py``)."""
        here = state.restart_point()
        if state.server is not None and state.server != server:
            moved = failover.rebase(self.conn.dump_kwargs(), self.server_id, here, server)
            log.warning("binlog reader: the address now reaches server %s, not server %s; "
                        "%s there is %s:%d (found by GTID state %s)", server, state.server,
                        here, moved.file, moved.pos, here.gtid)
            old = (state.fidx, here.pos)
            state.set_file(moved.file, moved.pos)
            # the records already yielded: the same counters into the same transaction
            skip = state.low_key[2:] if state.low_key[:2] == old else (0, 0)
            state.low_key = state.key(moved.pos, *skip)
            here = moved
        state.server = server
        if state.end is not None and state.end.server not in (None, server):
            state.end = failover.rebase(self.conn.dump_kwargs(), self.server_id, state.end,
                                        server)
        return here.file, here.pos


__all__ = ["BinlogReader"]
