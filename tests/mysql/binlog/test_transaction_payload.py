"""MySQL 8 compressed transactions (TRANSACTION_PAYLOAD, ``binlog_transaction_compression``)
from real server bytes published by other binlog readers (fixtures/mysql8/README.md), read
by the payload decoder and then by ``BinlogReader`` with both row decoders: the values
their tests assert, offsets that stay unique and resume exactly inside a payload, and
window ends that cut a payload between rows."""

from __future__ import annotations

import datetime as dt
import time

import pytest
import zstandard
from replay_support import (
    Binlog,
    ReplayReader,
    anonymous_gtid,
    fixture,
    inner,
    offset,
    packed,
    payload_body,
    query,
    xid,
)

from sparkcdc.core.records import DELETE, INSERT, UPDATE
from sparkcdc.core.schema import Column, TableId, TableSchema
from sparkcdc.errors import ConnectionFailed, DecodeError
from sparkcdc.mysql.binlog import fastdecode as F
from sparkcdc.mysql.binlog import protocol as E
from sparkcdc.mysql.binlog import transaction_payload as P
from sparkcdc.mysql.binlog.row_decoding import PyRowDecoder

DECODERS = [F.CRowDecoder, PyRowDecoder] if F.available() else [PyRowDecoder]

# -- mysql-binlog-connector-java: TransactionPayloadEventDataDeserializerTest.DATA --------

MOVIES = TableSchema(TableId("demo", "movies"), tuple(
    Column(n, t, True, "utf8mb4", "utf8mb4_0900_ai_ci" if t != "int" else None)
    for n, t in [("id", "int"), ("title", "varchar(256)"), ("year", "int"),
                 ("country", "varchar(256)"), ("genre", "varchar(256)"),
                 ("actors", "varchar(1024)"), ("director", "varchar(512)"),
                 ("composer", "varchar(256)"), ("screenwriter", "varchar(256)"),
                 ("cinematographer", "varchar(256)"), ("production_company", "varchar(256)")]),
    ("id",), "id")
ACTORS = ("Claudia Cardinale|Charles Bronson|Henry Fonda|Gabriele Ferzetti|Frank Wolff|"
          "Al Mulock|Jason Robards|Woody Strode|Jack Elam|Lionel Stander|Paolo Stoppa|"
          "Keenan Wynn|Aldo Sambrell")
BEFORE = dict(zip(MOVIES.column_names, [
    1, "Once Upon a Time in the West", 1968, "Italy", "Western", ACTORS, "Sergio Leone",
    "Ennio Morricone", "Sergio Leone|Sergio Donati|Dario Argento|Bernardo Bertolucci",
    "Tonino Delli Colli", "Paramount Pictures"]))
AFTER = dict(BEFORE, genre="Western|Action")


def test_the_payload_header_and_events_the_java_reader_asserts():
    body = fixture("connector-java-transaction-payload.hex")
    compression, size, uncompressed, start = P.read_header(body)
    assert (compression, size, uncompressed) == (P.ZSTD, 451, 960)
    assert len(body) - start == 451
    data, evs = P.inner_events(body, size=500, log_pos=9000)
    assert [h[1] for h in evs] == [E.QUERY, E.TABLE_MAP, E.UPDATE_ROWS_V2, E.XID]
    assert sum(h[7] - h[6] for h in evs) == len(data) == 960  # no checksums inside
    # each inner event carries the payload event's size and position, its own header's rest
    assert {(h[3], h[4]) for h in evs} == {(500, 9000)}
    assert {(h[0], h[2]) for h in evs} == {(1646406641, 223344)}
    assert E.query_text(data, evs[0][6], evs[0][7], 13) == b"BEGIN"
    tm = E.parse_table_map(data[evs[1][6] + 19:evs[1][7]], "mysql")
    assert (tm.table_id, tm.schema, tm.table, tm.ncols) == (84, "demo", "movies", 11)
    assert int.from_bytes(data[evs[3][6] + 19:evs[3][7]], "little") == 31  # xid=31
    # with a checksummed stream each event is followed by 4 bytes, stripped like a CRC
    data4, evs4 = P.inner_events(body, size=500, log_pos=9000, csum=4)
    assert [data4[a:b - 4] for *_, a, b in evs4] == [data[a:b] for *_, a, b in evs]


def _movies_log(checksum: bool):
    log = Binlog(checksum=checksum)
    gtid_at, _ = anonymous_gtid(log)
    _at, payload_end = log.add(P.TRANSACTION_PAYLOAD,
                               fixture("connector-java-transaction-payload.hex"))
    anonymous_gtid(log)  # a second, uncompressed transaction
    log.add(E.QUERY, query(b"BEGIN"))
    log.add(E.XID, xid(32))
    return log, gtid_at, payload_end


@pytest.mark.parametrize("decoder", DECODERS)
@pytest.mark.parametrize("checksum", [True, False])
def test_a_compressed_update_reads_as_the_java_reader_asserts(decoder, checksum):
    log, gtid_at, payload_end = _movies_log(checksum)
    reader = ReplayReader(log, {MOVIES.table_id: MOVIES}, decoder())
    recs = list(reader.read_window(offset(4), offset(log.pos)))
    assert [(r.op, r.before, r.after) for r in recs] == [(UPDATE, BEFORE, AFTER)]
    r = recs[0]
    # the transaction starts at its GTID event, before the payload; its first row event
    assert (r.offset.file, r.offset.pos, r.offset.events, r.offset.rows) == \
        ("binlog.000001", gtid_at, 0, 0)
    assert r.ts_ms == 1_700_000_000 * 1000  # the GTID event's time starts the transaction
    # the commit inside the payload ends the transaction at the payload's end: a window
    # ending there holds the record, one starting there does not
    assert [x.after for x in reader.read_window(offset(4), offset(payload_end))] == [AFTER]
    assert list(reader.read_window(offset(payload_end), offset(log.pos))) == []
    # resuming from the record's own offset yields it again, from one row later nothing
    assert [x.after for x in reader.read_window(r.offset, offset(log.pos))] == [AFTER]
    assert list(reader.read_window(r.offset.at_row(1), offset(log.pos))) == []


# -- go-mysql: transaction_payload_event_test.go, TestTransactionPayloadEventDecode -------

LARGE = TableSchema(TableId("compression_test", "large_data"), (
    Column("id", "int"), Column("data", "longtext", True, "utf8mb4", "utf8mb4_0900_ai_ci"),
    Column("ts", "timestamp")), ("id",), "id")
HEX1 = "48c422ef6da081399cc383f42fb949b75a30c38bbb15366c137d527f0dbaaf5c" * 10
HEX2 = "9b32e8e9dda3efc1fae091c8870faafdda1f6b96e64d88760bf229e73401fcae" * 10
TS1 = dt.datetime.fromtimestamp(0x67E671B6, dt.timezone.utc)  # 2025-03-28 09:53:58 UTC
TS2 = dt.datetime.fromtimestamp(0x67E671D5, dt.timezone.utc)


def _go_mysql_body() -> bytes:
    """go-mysql publishes the zstd frame only: the header around it is ours (P.read_header
    documents the format), its sizes the frame's own."""
    frame = fixture("go-mysql-transaction-payload-zstd.hex")
    size = len(zstandard.ZstdDecompressor().decompressobj().decompress(frame))
    return (b"\2" + packed(1) + b"\0" + b"\3" + packed(len(packed(size))) + packed(size)
            + b"\1" + packed(len(packed(len(frame)))) + packed(len(frame)) + b"\0" + frame)


def test_the_events_go_mysql_asserts():
    data, evs = P.inner_events(_go_mysql_body(), size=1, log_pos=2)
    assert [h[1] for h in evs] == [E.QUERY, E.TABLE_MAP, E.WRITE_ROWS_V2, E.TABLE_MAP,
                                   E.UPDATE_ROWS_V2, E.TABLE_MAP, E.DELETE_ROWS_V2, E.XID]
    assert E.query_db(data, evs[0][6], 13) == "compression_test"


def _large_log():
    log = Binlog()
    payload_at, payload_end = log.add(P.TRANSACTION_PAYLOAD, _go_mysql_body())
    return log, payload_at, payload_end


EXPECTED = [  # (op, before, after) of the four rows, derived from the event bytes
    (INSERT, None, {"id": 2, "data": HEX2, "ts": TS2}),
    (UPDATE, {"id": 1, "data": HEX1, "ts": TS1}, {"id": 1, "data": "updated", "ts": TS1}),
    (UPDATE, {"id": 2, "data": HEX2, "ts": TS2}, {"id": 2, "data": "updated", "ts": TS2}),
    (DELETE, {"id": 1, "data": "updated", "ts": TS1}, None),
]


@pytest.mark.parametrize("decoder", DECODERS)
def test_offsets_inside_a_payload_are_unique_and_resume_exactly(decoder):
    """No GTID event before this payload: the BEGIN inside it starts the transaction at
    the payload event. Every row has its own offset; a window may end, and the next one
    start, between two rows of one event inside the payload."""
    log, payload_at, payload_end = _large_log()
    reader = ReplayReader(log, {LARGE.table_id: LARGE}, decoder())
    recs = list(reader.read_window(offset(4), offset(payload_end)))
    assert [(r.op, r.before, r.after) for r in recs] == EXPECTED
    keys = [(r.offset.pos, r.offset.events, r.offset.rows) for r in recs]
    assert keys == [(payload_at, 0, 0), (payload_at, 1, 0), (payload_at, 1, 1),
                    (payload_at, 2, 0)]
    cut = offset(payload_at, 1, 1)
    first = list(reader.read_window(offset(4), cut))
    rest = list(reader.read_window(cut, offset(payload_end)))
    assert [(r.op, r.before, r.after) for r in first + rest] == EXPECTED
    assert len(first) == 2 and rest[0].offset == cut


def test_a_tail_reads_a_payload_and_beats_at_its_end():
    log, _at, payload_end = _large_log()
    # each stream ends with the replay; the reader reopens it from its last offset until
    # connect.timeout has passed (no connect.max-retries), then gives up
    reader = ReplayReader(log, {LARGE.table_id: LARGE}, PyRowDecoder(), connect_timeout=0.5)
    got: list = []
    t0 = time.monotonic()
    with pytest.raises(ConnectionFailed, match="connect.timeout 0.5s"):
        got.extend(reader.tail(offset(4), heartbeat_interval=1e-9))
    assert 0.5 <= time.monotonic() - t0 < 3.0
    # the pauses 0.1, 0.2, then the rest of the 0.5 s: each reopened stream reads no records
    # again (offsets at or before the last one yielded are dropped)
    assert reader.opened == reader.reconnects + 1 >= 3, reader.opened
    recs = [g for g in got if hasattr(g, "op")]
    assert [(r.op, r.after) for r in recs] == [(op, a) for op, _b, a in EXPECTED]
    beats = [g.offset for g in got if not hasattr(g, "op")]
    assert beats and beats[-1] == offset(payload_end)


def test_an_uncompressed_payload_and_corrupt_ones():
    events = inner(E.QUERY, query(b"BEGIN")) + inner(E.XID, xid(5))
    body = payload_body(events, compression=P.NONE)
    data, evs = P.inner_events(body, 10, 20)
    assert data == events and [h[1] for h in evs] == [E.QUERY, E.XID]
    with pytest.raises(DecodeError, match="algorithm 7"):
        P.decompress(payload_body(events, compression=7))
    frame = zstandard.ZstdCompressor().compress(events)
    with pytest.raises(DecodeError, match="ends inside its zstd frame"):
        P.decompress(payload_body(events, frame=frame[:-3]))
    with pytest.raises(DecodeError, match="could not be decompressed"):
        P.decompress(payload_body(events, frame=b"\x28\xb5\x2f\xfd" + b"junk" * 4))
    with pytest.raises(DecodeError, match="header says"):
        P.decompress(payload_body(events + b"x", frame=frame))
    with pytest.raises(DecodeError, match="bytes in"):
        P.decompress(payload_body(events)[:-1])
    with pytest.raises(DecodeError, match="inside a TRANSACTION_PAYLOAD"):
        P.inner_events(payload_body(inner(P.TRANSACTION_PAYLOAD, b"")), 1, 2)
    with pytest.raises(DecodeError, match="ends inside an event header"):
        P.inner_events(payload_body(events + b"\0" * 5, compression=P.NONE), 1, 2)


OPENERS = [P.open_payload] + ([F.CRowDecoder().open_payload] if F.PAYLOAD_IN_C else [])


@pytest.mark.parametrize("open_payload", OPENERS)
@pytest.mark.parametrize("csum", [0, 4])
def test_the_compiled_payload_opener_equals_the_reference(open_payload, csum):
    """The reader's call (``open_payload``: the body at data[start:end]) gives the reference's
    events, with and without the stream's checksum bytes, and names corrupt payloads alike."""
    events = inner(E.QUERY, query(b"BEGIN")) + inner(E.XID, xid(5))
    pad = b"\xaa" * 7  # the payload event's header before, its checksum after: not read
    for body in (payload_body(events), payload_body(events, compression=P.NONE)):
        got = open_payload(pad + body + pad, len(pad), len(pad) + len(body), 10, 20, csum)
        assert got == P.inner_events(body, 10, 20, csum)
        assert [h[1] for h in got[1]] == [E.QUERY, E.XID]
    frame = zstandard.ZstdCompressor().compress(events)
    for bad, error in [
            (payload_body(events, compression=7), "algorithm 7"),
            (payload_body(events, frame=frame[:-3]), "ends inside its zstd frame"),
            (payload_body(events + b"x", frame=frame), "header says"),
            (payload_body(events)[:-1], "bytes in"),
            (payload_body(events)[:1], "header ends early"),
            (payload_body(events)[:2], "runs past the event"),
            (payload_body(inner(P.TRANSACTION_PAYLOAD, b"")), "inside a TRANSACTION_PAYLOAD"),
            (payload_body(events + b"\0" * 5, compression=P.NONE), "inside an event header"),
            (payload_body(events[:-1] + b"\0" * 30, compression=P.NONE), "an event of")]:
        with pytest.raises(DecodeError, match=error):
            open_payload(bad, 0, len(bad), 1, 2, csum)


# -- zstd in C: the system's libzstd, looked up at run time -----------------------------------

@pytest.mark.skipif(not F.ZSTD_IN_C, reason="no libzstd.so.1 on this machine (zstandard reads)")
def test_libzstd_decompresses_as_zstandard_does():
    z = zstandard.ZstdCompressor()
    for data in (b"", b"x", bytes(range(256)) * 40, b"".join(b"%d," % i for i in range(20000))):
        assert F._C.unzstd(z.compress(data), len(data)) == data
    frames = z.compress(b"first") + z.compress(b"second")  # frames one after the other
    assert F._C.unzstd(frames, 11) == b"firstsecond"
    frame = z.compress(b"events" * 100)
    for bad, size, error in [(frame, 601, "not the size"), (frame, 599, "too small"),
                             (frame[:-3], 600, "could not be decompressed"),
                             (b"\x28\xb5\x2f\xfd" + b"junk" * 4, 600, "could not be")]:
        with pytest.raises(ValueError, match=error):
            F._C.unzstd(bad, size)


def _loop_decoder(zstd_in_c: bool) -> F.CRowDecoder:
    decoder = F.CRowDecoder()
    decoder.zstd_in_c = zstd_in_c
    return decoder


@pytest.mark.skipif(not (F.ZSTD_IN_C and F.LOOP_IN_C), reason="no libzstd or no loop in C")
def test_the_loop_in_c_decompresses_without_python_and_reads_the_same():
    """The loop in C reads a payload with libzstd: no zstandard decompressor is ever made
    (``_dctx``); with ``zstd_in_c`` off it takes the zstandard one, the path of a machine
    without libzstd. A payload libzstd refuses is handed to Python, which names it."""
    log, _at, payload_end = _large_log()
    for zstd_in_c in (True, False):
        decoder = _loop_decoder(zstd_in_c)
        reader = ReplayReader(log, {LARGE.table_id: LARGE}, decoder)
        recs = list(reader.read_window(offset(4), offset(payload_end)))
        assert [(r.op, r.before, r.after) for r in recs] == EXPECTED
        assert (decoder._dctx is None) == zstd_in_c
    events = inner(E.QUERY, query(b"BEGIN")) + inner(E.XID, xid(5))
    frame = zstandard.ZstdCompressor().compress(events)
    broken = Binlog()
    anonymous_gtid(broken)
    _at, end = broken.add(P.TRANSACTION_PAYLOAD, payload_body(events, frame=frame[:-3]))
    reader = ReplayReader(broken, {LARGE.table_id: LARGE}, _loop_decoder(True))
    with pytest.raises(DecodeError, match="TRANSACTION_PAYLOAD"):
        list(reader.read_window(offset(4), offset(end)))
