"""Our own binlog event layer (``sparkcdc.mysql.binlog.protocol``) against the python-mysql-replication
based reference (tests/library_reader.py): the same records, offsets and GTIDs on the all-types
table, on randomized rows, on events larger than 16 MB (several packets), across rotations,
resumed inside transactions, and with the binlog checksum off, on, and changing between
files; its table-map parse equals the library's."""

from __future__ import annotations

import os
import struct

import pymysql
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from library_reader import LibraryBinlogReader
from rows_support import RANDOM_DDL, assert_rows_same, random_rows, write_random_rows
from types_support import cdc, expected_all_types, insert_all_types

from sparkcdc.core.records import ChangeRecord
from sparkcdc.core.schema import TableId
from sparkcdc.mysql.binlog import fastdecode as F
from sparkcdc.mysql.binlog import protocol as E
from sparkcdc.mysql.binlog import reader as B
from sparkcdc.mysql.binlog.reader import BinlogReader, load_table_schema
from sparkcdc.mysql.binlog.row_decoding import PyRowDecoder, meta_sig
from sparkcdc.mysql.offsets import current_offset
from sparkcdc.testing.mariadb import MariaDBSandbox, ServerSettings

pytestmark = pytest.mark.timeout(300)


def both(conn, tables, start, end, decoder=F.CRowDecoder, server_id=7601):
    """(reference through the library's events, ours) for one window."""
    ref = list(LibraryBinlogReader(conn, server_id, tables, decoder=decoder())
               .read_window(start, end))
    ours = list(BinlogReader(conn, server_id + 1, tables, decoder=decoder())
                .read_window(start, end))
    return ref, ours


def assert_same_records(ours, ref):
    assert len(ours) == len(ref)
    assert ours == ref  # ops, tables, offsets (compared by position)
    assert [(r.offset.to_json(), r.gtid, r.ts_ms, r.op, r.table_id) for r in ours] == \
        [(r.offset.to_json(), r.gtid, r.ts_ms, r.op, r.table_id) for r in ref]
    assert_rows_same([(r.before, r.after) for r in ours], [(r.before, r.after) for r in ref])


@pytest.mark.parametrize("decoder", [F.CRowDecoder, PyRowDecoder])
def test_all_types_equal_the_library_reference(mariadb, db, decoder):
    conn = cdc(mariadb)
    mariadb.execute("CREATE TABLE other (id INT PRIMARY KEY, v TEXT)", database=db)
    start = current_offset(conn)
    insert_all_types(mariadb, db)
    mariadb.execute("INSERT INTO other VALUES (1, 'x')",
                    "UPDATE all_types SET y = 1999 WHERE id <> 1",
                    "UPDATE all_types SET id = id + 10",
                    "ALTER TABLE other ADD COLUMN w INT",
                    "INSERT INTO other VALUES (2, 'y', 3)",
                    "DELETE FROM all_types WHERE id = 13", database=db)
    end = current_offset(conn)
    schema = load_table_schema(conn, TableId(db, "all_types"))
    ref, ours = both(conn, {schema.table_id: schema}, start, end, decoder)
    assert [r.op for r in ref] == ["c"] * 4 + ["u"] * 3 + ["u"] * 4 + ["d"]
    assert_same_records(ours, ref)
    assert [r.after for r in ours[:4]] == expected_all_types()


@settings(max_examples=15, deadline=None,
          suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow])
@given(rows=random_rows, new_rows=random_rows)
def test_randomized_rows_equal_the_library_reference(mariadb, db, rows, new_rows):
    conn, schema, start, end = write_random_rows(mariadb, db, rows, new_rows,
                                                 one_transaction=True)
    ref, ours = both(conn, {schema.table_id: schema}, start, end)
    assert len(ref) == len(rows) + min(len(rows), len(new_rows)) + (len(rows) + 1) // 2
    assert_same_records(ours, ref)
    # resumed from inside the transaction: exactly the rest
    k = len(ours) // 2
    again = list(BinlogReader(conn, 7603, {schema.table_id: schema})
                 .read_window(ours[k].offset, end))
    assert again == ours[k:]


def test_events_larger_than_16_mb_arrive_as_several_packets(mariadb, db):
    conn = cdc(mariadb)
    mariadb.execute("CREATE TABLE big (id INT PRIMARY KEY, b LONGBLOB, t LONGTEXT)",
                    database=db)
    blob = os.urandom(1 << 20) * 20  # 20 MiB: one row event of two packets
    text = "é" * (9 << 20)  # 18 MiB of UTF-8
    start = current_offset(conn)
    with mariadb.admin_connection(db) as c, c.cursor() as cur:
        cur.execute("INSERT INTO big VALUES (1, %s, 'small')", (blob,))
        cur.execute("INSERT INTO big VALUES (2, 'x', %s)", (text,))
        cur.execute("UPDATE big SET b = CONCAT(b, 'tail') WHERE id = 1")  # ~40 MiB event
        cur.execute("INSERT INTO big VALUES (3, 'after', 'the big ones')")
    end = current_offset(conn)
    schema = load_table_schema(conn, TableId(db, "big"))
    r = BinlogReader(conn, 7604, {schema.table_id: schema})
    recs = list(r.read_window(start, end))
    assert [x.op for x in recs] == ["c", "c", "u", "c"]
    assert recs[0].after["b"] == blob and recs[1].after["t"] == text
    assert recs[2].before["b"] == blob and recs[2].after["b"] == blob + b"tail"
    assert recs[3].after == {"id": 3, "b": b"after", "t": "the big ones"}
    ref = list(LibraryBinlogReader(conn, 7605, {schema.table_id: schema})
               .read_window(start, end))
    assert recs == ref and [x.after for x in recs] == [x.after for x in ref]
    # the record after the big events, resumed from its own offset
    assert list(r.read_window(recs[3].offset, end)) == recs[3:]


def test_the_pure_python_splitter_equals_the_compiled_one(mariadb, db, monkeypatch):
    if E._C is None or not hasattr(E._C, "split_events"):
        pytest.skip("the compiled splitter is not built")  # pragma: no cover
    conn = cdc(mariadb)
    mariadb.execute("CREATE TABLE s (id INT PRIMARY KEY, v VARCHAR(200))", database=db)
    start = current_offset(conn)
    with mariadb.admin_connection(db) as c, c.cursor() as cur:
        for i in range(3000):
            cur.execute("INSERT INTO s VALUES (%s, %s)", (i, "v" * (i % 200)))
        cur.execute("FLUSH BINARY LOGS")
        cur.execute("UPDATE s SET v = 'z' WHERE id < 1500")
    end = current_offset(conn)
    schema = load_table_schema(conn, TableId(db, "s"))
    compiled = list(BinlogReader(conn, 7606, {schema.table_id: schema}).read_window(start, end))
    monkeypatch.setattr(E, "_C", None)
    python = list(BinlogReader(conn, 7607, {schema.table_id: schema}).read_window(start, end))
    assert compiled == python and len(python) == 4500
    assert [x.after for x in compiled] == [x.after for x in python]


def test_table_maps_equal_the_librarys(mariadb, db):
    """Column types, metadata, names and ENUM/SET members of every table map of the
    all-types table and the randomized table, parsed by us and by the library."""
    from pymysqlreplication import BinLogStreamReader
    from pymysqlreplication.row_event import TableMapEvent

    conn = cdc(mariadb)
    mariadb.execute(RANDOM_DDL.format(t="rt"), database=db)
    start = current_offset(conn)
    insert_all_types(mariadb, db)
    mariadb.execute("INSERT INTO rt (id) VALUES (1)", database=db)
    end = current_offset(conn)
    i = mariadb.info
    lib = BinLogStreamReader(
        connection_settings={"host": i.host, "port": i.port, "user": i.cdc_user,
                             "password": i.cdc_password},
        server_id=7608, resume_stream=True, blocking=False, log_file=start.file,
        log_pos=start.pos, only_events=[TableMapEvent])
    want = []
    try:
        for ev in lib:
            if ev.packet.log_pos > end.pos:
                break
            want.append((ev.schema, ev.table, [(c.name, meta_sig(c)) for c in ev.columns]))
    finally:
        lib.close()
    base = {k: v for k, v in conn.pymysql_kwargs().items()
            if k not in ("database", "autocommit", "init_command")}
    stream = E.DumpStream(base, 7609, start.file, start.pos, blocking=False, heartbeat=None,
                          read_timeout=30)
    got = []
    try:
        stream.connect()
        csum = 4 if stream.checksum else 0
        for data, evs in stream.batches():
            for _ts, etype, _sid, _size, log_pos, _fl, s, e in evs:
                if etype == E.TABLE_MAP and log_pos <= end.pos:
                    tm = E.parse_table_map(bytes(data[s + 19:e - csum]))
                    got.append((tm.schema, tm.table,
                                [(c.name, meta_sig(c)) for c in tm.columns]))
    finally:
        stream.close()
    assert got == want and {t for _, t, _ in got} == {"all_types", "rt"}


def test_gtid_and_query_parsers_on_mysql_events():
    """MySQL's GTID and PREVIOUS_GTIDS events (not written by the MariaDB sandbox)."""
    sid = bytes(range(16))
    hdr = struct.pack("<IBIIIH", 1, E.GTID, 1, 19 + 42, 100, 0)
    gtid = hdr + b"\x01" + sid + struct.pack("<Q", 42) + b"\x02" + b"\0" * 16
    assert E.mysql_gtid(gtid, 0) == "00010203-0405-0607-0809-0a0b0c0d0e0f:42"
    body = struct.pack("<Q", 2) + sid + struct.pack("<QQQ", 1, 1, 6) + \
        sid[::-1] + struct.pack("<QQQQQ", 2, 1, 3, 7, 8)
    prev = struct.pack("<IBIIIH", 1, E.PREVIOUS_GTIDS, 1, 19 + len(body), 0, 0) + body
    assert E.previous_gtids(prev, 0) == ["00010203-0405-0607-0809-0a0b0c0d0e0f:1-5",
                                         "0f0e0d0c-0b0a-0908-0706-050403020100:1-2:7"]
    q = struct.pack("<IIBHH", 9, 0, 2, 0, 3) + b"abc" + b"db\0" + b"  begin \n"
    ev = struct.pack("<IBIIIH", 1, E.QUERY, 1, 19 + len(q), 0, 0) + q
    assert E.query_text(ev, 0, len(ev), 13) == b"begin"


@pytest.fixture(scope="module")
def no_checksum(tmp_path_factory):
    """A server writing binlogs without checksums (and switched to CRC32 by a test)."""
    settings = ServerSettings(extra_args=("--binlog-checksum=NONE",))
    with MariaDBSandbox(name="events-nocrc", settings=settings,
                        base_dir=tmp_path_factory.mktemp("nocrc")) as sb:
        sb.execute("CREATE DATABASE s", "CREATE TABLE s.t (id INT PRIMARY KEY, v VARCHAR(20))")
        yield sb


def test_checksum_off_then_on_between_files(no_checksum):
    sb = no_checksum
    conn = cdc(sb)
    assert sb.query("SELECT @@global.binlog_checksum")[0][0] == "NONE"
    start = current_offset(conn)
    sb.execute("INSERT INTO s.t VALUES (0, 'all off')", "UPDATE s.t SET v = 'off' WHERE id = 0")
    mid = current_offset(conn)
    schema = load_table_schema(conn, TableId("s", "t"))
    ref, ours = both(conn, {schema.table_id: schema}, start, mid, server_id=7614)
    assert [x.after["v"] for x in ours] == ["all off", "off"]
    assert_same_records(ours, ref)
    sb.execute("DELETE FROM s.t")
    start = current_offset(conn)
    sb.execute("INSERT INTO s.t VALUES (1, 'no crc')", "INSERT INTO s.t VALUES (2, 'no crc')")
    sb.execute("SET GLOBAL binlog_checksum = CRC32")  # rotates to a file with checksums
    sb.execute("INSERT INTO s.t VALUES (3, 'crc')", "UPDATE s.t SET v = 'crc too'")
    end = current_offset(conn)
    assert end.file != start.file
    try:
        # (python-mysql-replication cannot read this window: it takes the checksum from the
        # server's current setting, not from each file's format description)
        r = BinlogReader(conn, 7610, {schema.table_id: schema})
        ours = list(r.read_window(start, end))
        assert [(x.op, x.after["v"]) for x in ours] == [
            ("c", "no crc"), ("c", "no crc"), ("c", "crc"), ("u", "crc too"),
            ("u", "crc too"), ("u", "crc too")]
        assert [x.offset.file for x in ours] == [start.file] * 2 + [end.file] * 4
        for k in range(len(ours)):
            assert list(r.read_window(ours[k].offset, end)) == ours[k:]
        # a stream that starts in the file without checksums while the server has them on
        it = BinlogReader(conn, 7612, {schema.table_id: schema}).tail(start,
                                                                      heartbeat_interval=0.2)
        try:
            got = []
            for x in it:
                if isinstance(x, ChangeRecord):
                    got.append(x)
                    if len(got) == 6:
                        break
        finally:
            it.close()
        assert got == ours
    finally:
        sb.execute("SET GLOBAL binlog_checksum = NONE")


def test_a_server_that_is_down_is_retried_then_reported(monkeypatch):
    """Connecting is part of the reader's bounded retries (a restarting server), and the
    failure names the offset to resume from."""
    from sparkcdc.core.offsets import BinlogOffset
    from sparkcdc.errors import ConnectionFailed
    from sparkcdc.testing.mariadb import free_port

    conn = B.ConnectionOptions(hostname="127.0.0.1", port=free_port(), connect_timeout=1,
                               max_retries=2)
    r = BinlogReader(conn, 7620, set())
    opened = []
    real = r._open
    monkeypatch.setattr(r, "_open", lambda *a, **k: opened.append(1) or real(*a, **k))
    start = BinlogOffset("binlog.000001", 4)
    with pytest.raises(ConnectionFailed, match="binlog.000001:4") as e:
        list(r.read_window(start, BinlogOffset("binlog.000001", 400)))
    assert e.value.retryable and len(opened) == 3 and r.reconnects == 2


@pytest.mark.parametrize("decoder", [F.CRowDecoder, PyRowDecoder])
def test_a_row_image_without_every_column_is_named(mariadb, db, decoder):
    """binlog_row_image=MINIMAL (a session can set it): the missing column is named, on both
    event layers alike."""
    from sparkcdc.errors import DecodeError

    conn = cdc(mariadb)
    mariadb.execute("CREATE TABLE m (id INT PRIMARY KEY, a INT, b VARCHAR(10))", database=db)
    mariadb.execute("INSERT INTO m VALUES (1, 1, 'x')", database=db)
    start = current_offset(conn)
    with mariadb.admin_connection(db) as c, c.cursor() as cur:
        cur.execute("SET SESSION binlog_row_image = 'MINIMAL'")
        cur.execute("UPDATE m SET a = 2 WHERE id = 1")
    end = current_offset(conn)
    schema = load_table_schema(conn, TableId(db, "m"))
    errors = []
    for layer in ("native", "library"):
        reader = BinlogReader if layer == "native" else LibraryBinlogReader
        r = reader(conn, 7630, {schema.table_id: schema}, decoder=decoder())
        with pytest.raises(DecodeError, match="lacks column 'a'|lacks column 'b'") as e:
            list(r.read_window(start, end))
        errors.append(str(e.value))
    assert errors[0] == errors[1] and "binlog_row_image=FULL" in errors[0]


def _packet(seq: int, payload: bytes) -> bytes:
    return len(payload).to_bytes(3, "little") + bytes([seq & 0xFF]) + payload


def _event(etype: int, body: bytes, log_pos: int = 1000) -> bytes:
    return struct.pack("<IBIIIH", 7, etype, 3, 19 + len(body), log_pos, 0) + body


_payloads = st.lists(st.one_of(
    st.binary(max_size=40).map(lambda b: b"\0" + _event(E.QUERY, b)),  # events
    st.just(b"\xfe\0\0\0\0"),  # EOF
    st.just(b"\xff\x14\x04#HY000boom"),  # an error
    st.binary(min_size=1, max_size=25),  # anything
), max_size=8)


@settings(max_examples=300, deadline=None)
@given(payloads=_payloads, seqs=st.lists(st.integers(0, 3), max_size=8),
       cut=st.integers(0, 400), start_seq=st.integers(0, 255))
def test_the_two_splitters_agree_on_any_bytes(payloads, seqs, cut, start_seq):
    if E._C is None or not hasattr(E._C, "split_events"):
        pytest.skip("the compiled splitter is not built")  # pragma: no cover
    seq, buf = start_seq, b""
    for k, p in enumerate(payloads):
        seq = (seq + (seqs[k] if k < len(seqs) else 1)) & 0xFF
        buf += _packet(seq, p)
    buf = buf[:cut] if cut < len(buf) else buf
    for pos in (0, min(3, len(buf))):
        assert E._C.split_events(buf, pos, (start_seq + 1) & 0xFF) == \
            E.split_events(buf, pos, (start_seq + 1) & 0xFF)
    # a 16 MB packet header is left to the caller
    big = b"\xff\xff\xff" + bytes([1]) + b"\0"
    assert E._C.split_events(big, 0, 1) == E.split_events(big, 0, 1) == ([], 0, 1, 2)


class _Bytes:
    """A socket's bytes as pymysql's buffered reader hands them out (in small pieces)."""

    def __init__(self, data: bytes, piece: int):
        self.data, self.pos, self.piece = data, 0, piece

    def read1(self, n: int) -> bytes:
        out = self.data[self.pos:self.pos + min(n, self.piece)]
        self.pos += len(out)
        return out


@pytest.mark.parametrize("compiled", [True, False])
def test_batches_join_a_multi_packet_event_and_stop_at_eof(compiled, monkeypatch):
    if not compiled:
        monkeypatch.setattr(E, "_C", None)
    small = [_event(E.XID, struct.pack("<Q", i)) for i in range(3)]
    huge = _event(E.WRITE_ROWS_V1, os.urandom(1 << 10) * (20 << 10))  # 20 MiB
    wire, seq = b"", 1
    for ev in small[:2]:
        wire += _packet(seq, b"\0" + ev)
        seq += 1
    payload = b"\0" + huge
    while True:  # 2^24-1 byte packets, then a shorter one (maybe empty)
        part, payload = payload[:0xFFFFFF], payload[0xFFFFFF:]
        wire += _packet(seq, part)
        seq += 1
        if len(part) < 0xFFFFFF:
            break
    wire += _packet(seq, b"\0" + small[2]) + _packet(seq + 1, b"\xfe\0\0\0\0")
    stream = E.DumpStream({}, 1, "binlog.000001", 4, blocking=False, heartbeat=None,
                          read_timeout=1)
    stream.connection = type("Conn", (), {"_rfile": _Bytes(wire, 1 << 20)})()
    got = [bytes(data[h[6]:h[7]]) for data, evs in stream.batches() for h in evs]
    assert got == small[:2] + [huge] + small[2:]
    stream.connection = type("Conn", (), {"_rfile": _Bytes(wire[:-9], 1 << 20)})()
    with pytest.raises(pymysql.err.OperationalError, match="closed the connection"):
        list(stream.batches())


def test_enum_and_set_members_in_a_latin1_column(mariadb, db):
    """The binlog spells members in the column's charset (python-mysql-replication reads
    them as UTF-8 and loses 'é'); ours decode them with the charset the table map names."""
    conn = cdc(mariadb)
    mariadb.execute("CREATE TABLE le (id INT PRIMARY KEY, e ENUM('a','é','€') CHARACTER SET latin1,"
                    " s SET('x','ü') CHARACTER SET latin1)", database=db)
    start = current_offset(conn)
    mariadb.execute("INSERT INTO le VALUES (1, 'é', 'x,ü'), (2, '€', 'ü')", database=db)
    end = current_offset(conn)
    schema = load_table_schema(conn, TableId(db, "le"))
    for decoder in (F.CRowDecoder, PyRowDecoder):
        recs = list(BinlogReader(conn, 7640, {schema.table_id: schema}, decoder=decoder())
                    .read_window(start, end))
        assert [r.after for r in recs] == [{"id": 1, "e": "é", "s": "x,ü"},
                                           {"id": 2, "e": "€", "s": "ü"}]
    cols = E.parse_table_map(_first_table_map(conn, start, end)).columns
    assert cols[1].enum_values == ["", "a", "é", "€"] and cols[2].set_values == ["x", "ü"]


def _first_table_map(conn, start, end) -> bytes:
    base = {k: v for k, v in conn.pymysql_kwargs().items()
            if k not in ("database", "autocommit", "init_command")}
    stream = E.DumpStream(base, 7641, start.file, start.pos, blocking=False, heartbeat=None,
                          read_timeout=30)
    try:
        stream.connect()
        csum = 4 if stream.checksum else 0
        for data, evs in stream.batches():
            for h in evs:
                if h[1] == E.TABLE_MAP:
                    return bytes(data[h[6] + 19:h[7] - csum])
    finally:
        stream.close()
    raise AssertionError("no table map")
