"""Our own binlog event layer (``sparkcdc.mysql.binlog.protocol``) against the python-mysql-replication
based reference (tests/support/library_reader.py): the same records, offsets and GTIDs on the all-types
table, on randomized rows, on events larger than 16 MB (several packets), across rotations,
resumed inside transactions, and with the binlog checksum off, on, and changing between
files; its table-map parse equals the library's."""

from __future__ import annotations

import os
import random
import struct
import time
from dataclasses import replace

import pymysql
import pytest
from binlog_support import (
    FILE,
    ROWS_TYPE,
    Binlog,
    SyntheticReader,
    compressed,
    mariadb_gtid_body,
    query_body,
    rows_body,
    table_map_body,
)
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from library_reader import LibraryBinlogReader
from rows_support import (
    FUZZ_BINLOG_COLUMNS,
    FUZZ_COLUMNS,
    RANDOM_DDL,
    assert_rows_same,
    binlog_column,
    fuzz_image,
    random_rows,
    write_random_rows,
)
from server_support import seq
from types_support import cdc, expected_all_types, insert_all_types

from sparkcdc.core.records import ChangeRecord
from sparkcdc.core.schema import Column, TableId, TableSchema
from sparkcdc.mysql.binlog import fastdecode as F
from sparkcdc.mysql.binlog import protocol as E
from sparkcdc.mysql.binlog import reader as B
from sparkcdc.mysql.binlog.protocol import dump_stream as D
from sparkcdc.mysql.binlog.protocol.codes import ColumnType as CT
from sparkcdc.mysql.binlog.reader import BinlogReader
from sparkcdc.mysql.binlog.row_decoding import PyRowDecoder, meta_sig
from sparkcdc.mysql.binlog.server_lookups import load_table_schema
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
    if D._C is None or not hasattr(D._C, "split_events"):
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
    monkeypatch.setattr(D, "_C", None)
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
    """Connecting is part of the reader's retries (a restarting server): at least
    ``connect.max-retries`` reconnects, then more until ``connect.timeout`` has passed (a
    failover keeps the address dark for seconds), and the failure names the offset to
    resume from."""
    from sparkcdc.core.offsets import BinlogOffset
    from sparkcdc.errors import ConnectionFailed
    from sparkcdc.testing.mariadb import free_port

    def attempts(timeout: float) -> tuple[int, float, BinlogReader, ConnectionFailed]:
        conn = B.ConnectionOptions(hostname="127.0.0.1", port=free_port(),
                                   connect_timeout=timeout, max_retries=2)
        r = BinlogReader(conn, 7620, set(), "mariadb")  # (the loop's retries)
        opened: list[int] = []
        real = r._open
        monkeypatch.setattr(r, "_open", lambda *a, **k: opened.append(1) or real(*a, **k))
        start = BinlogOffset("binlog.000001", 4)
        t0 = time.monotonic()
        with pytest.raises(ConnectionFailed, match="binlog.000001:4") as e:
            list(r.read_window(start, BinlogOffset("binlog.000001", 400)))
        return len(opened), time.monotonic() - t0, r, e.value

    # a connect.timeout shorter than the retries: connect.max-retries (2) reconnects, no more
    n, took, r, err = attempts(0.05)
    assert err.retryable and n == 3 and r.reconnects == 2 and took < 1.0
    # a longer one: refused attempts go on, the pauses growing (0.1, 0.2, 0.4, 0.8, then at
    # most up to connect.timeout), until 2.5 s have passed since the first one
    n, took, r, err = attempts(2.5)
    # (6 attempts when each refusal is instant; a slow machine may fit one fewer)
    assert err.retryable and n >= 5 and r.reconnects == n - 1 and 2.5 <= took < 4.0, (n, took)
    assert "connect.timeout 2.5s" in err.message and "connect.timeout" in err.fix
    # a reader that asks the server its kind first names the offset too
    conn = B.ConnectionOptions(hostname="127.0.0.1", port=free_port(), connect_timeout=0.05,
                               max_retries=2)
    with pytest.raises(ConnectionFailed, match="binlog.000001:4"):
        list(BinlogReader(conn, 7621, set()).read_window(BinlogOffset("binlog.000001", 4),
                                                         BinlogOffset("binlog.000001", 400)))


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
    if D._C is None or not hasattr(D._C, "split_events"):
        pytest.skip("the compiled splitter is not built")  # pragma: no cover
    seq, buf = start_seq, b""
    for k, p in enumerate(payloads):
        seq = (seq + (seqs[k] if k < len(seqs) else 1)) & 0xFF
        buf += _packet(seq, p)
    buf = buf[:cut] if cut < len(buf) else buf
    def compiled(buf, pos, seq):  # its events are read where they are: listed, as tuples
        evs, *rest = D._C.split_events(buf, pos, seq)
        return (list(evs), *rest)

    for pos in (0, min(3, len(buf))):
        assert compiled(buf, pos, (start_seq + 1) & 0xFF) == \
            D.split_events(buf, pos, (start_seq + 1) & 0xFF)
    # a 16 MB packet header is left to the caller
    big = b"\xff\xff\xff" + bytes([1]) + b"\0"
    assert compiled(big, 0, 1) == D.split_events(big, 0, 1) == ([], 0, 1, 2)


def _query_event(statement: bytes, db: bytes, status: bytes, csum: int) -> bytes:
    post = struct.pack("<IIBHH", 1, 0, len(db), 0, len(status))  # the 13-byte post-header
    return _event(E.QUERY, post + status + db + b"\0" + statement + b"\xab" * csum)


_fold_events = st.lists(st.one_of(
    st.tuples(st.sampled_from([E.GTID, E.ANONYMOUS_GTID, E.XID, E.FORMAT_DESCRIPTION,
                               E.ROTATE, E.TABLE_MAP]), st.binary(max_size=30)),
    st.tuples(st.just(E.QUERY), st.tuples(
        st.sampled_from([b"BEGIN", b"begin", b"BEGIN ", b"COMMIT", b"BEGINS", b"",
                         b"CREATE TABLE t (a INT)"]),
        st.sampled_from([b"", b"db"]), st.binary(max_size=6))),
), max_size=12)


@settings(max_examples=400, deadline=None)
@given(events=_fold_events, csum=st.sampled_from([0, 4]),
       lead=st.sampled_from([0, E.GTID, E.ANONYMOUS_GTID, E.XID]))
def test_the_two_folders_agree_and_fold_only_a_gtid_and_its_begin(events, csum, lead):
    """MySQL's GTID event and the QUERY ``BEGIN`` after it read as one event: the compiled
    folder and the Python one agree on any list of events, and fold exactly the pairs
    whose statement is ``BEGIN`` as the server writes it, until a format description or
    rotate event; after a GTID (``lead``: a compressed transaction's events), a first
    ``BEGIN`` alone."""
    if F._C is None or not hasattr(F._C, "fold_begins"):
        pytest.skip("the compiled folder is not built")  # pragma: no cover
    data, evs = b"", []
    for etype, body in events:
        ev = _query_event(*body, csum) if etype == E.QUERY else _event(etype, body)
        evs.append((7, etype, 3, len(ev), 1000, 0, len(data), len(data) + len(ev)))
        data += ev
    folded = E.fold_begins(data, evs, csum, 13, lead)
    assert F._C.fold_begins(data, evs, csum, 13, lead) == folded
    expected, i, folding = [], 0, True
    while i < len(evs):
        etype = evs[i][1]
        folding = folding and etype not in (E.FORMAT_DESCRIPTION, E.ROTATE)
        if folding and i == 0 and lead in (E.GTID, E.ANONYMOUS_GTID) and etype == E.QUERY \
                and events[0][1][0] == b"BEGIN":
            expected.append(evs[0][:1] + (E.FOLDED + E.QUERY,) + evs[0][2:])
            i += 1
        elif folding and etype in (E.GTID, E.ANONYMOUS_GTID) and i + 1 < len(evs) \
                and events[i + 1][0] == E.QUERY and events[i + 1][1][0] == b"BEGIN":
            expected.append(evs[i][:1] + (E.FOLDED + etype,) + evs[i][2:])
            i += 2
        else:
            expected.append(evs[i])
            i += 1
    assert folded == expected


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
        monkeypatch.setattr(D, "_C", None)
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


# -- MariaDB's compressed events (log_bin_compress=ON), byte by byte --------------------------

_FUZZ = TableSchema(TableId("f", "z"), FUZZ_COLUMNS, ("c0",), "c0")
_Z_ID, _OTHER_ID = 70, 71


def _fuzz_binlog(events, mode, version, *, compress, checksum=True, extra_len_bytes=0):
    """One transaction of rows events of the FUZZ table (``events``: the row images of each),
    each followed by a one-row event of an uncaptured table, then a DDL on its own."""
    b = Binlog(checksum)
    b.add(E.MARIADB_GTID, mariadb_gtid_body(41))
    b.add(E.TABLE_MAP, table_map_body(_Z_ID, "f", "z", FUZZ_BINLOG_COLUMNS))
    b.add(E.TABLE_MAP, table_map_body(_OTHER_ID, "f", "other", [binlog_column(CT.LONG)]))
    for images in events:
        b.add(ROWS_TYPE[mode, version, compress],
              rows_body(_Z_ID, len(FUZZ_COLUMNS), mode, version, b"".join(images),
                        compress=compress, extra_len_bytes=extra_len_bytes))
        b.add(ROWS_TYPE[0, version, compress],
              rows_body(_OTHER_ID, 1, 0, version, b"\0" + struct.pack("<i", 5),
                        compress=compress))
    b.add(E.XID, struct.pack("<Q", 9))
    b.add(E.MARIADB_GTID, mariadb_gtid_body(42, standalone=True))
    b.add(E.QUERY_COMPRESSED if compress else E.QUERY,
          query_body(b"ALTER TABLE z ADD COLUMN q INT", "f", compress=compress))
    return b


def _read(binlog, decoder, start=None, **kw):
    """(records, or the DecodeError's message) of the whole synthetic file."""
    from sparkcdc.core.offsets import BinlogOffset
    from sparkcdc.errors import DecodeError

    r = SyntheticReader(binlog, {_FUZZ.table_id: _FUZZ}, decoder=decoder(), **kw)
    try:
        return list(r.read_window(start or BinlogOffset(FILE, 4), BinlogOffset(FILE, binlog.pos)))
    except DecodeError as e:
        return str(e)


@settings(max_examples=150, deadline=None)
@given(events=st.lists(st.lists(fuzz_image(), min_size=1, max_size=4), min_size=1, max_size=3),
       mode=st.sampled_from([0, 1, 2]), version=st.sampled_from([1, 2]),
       checksum=st.booleans(), extra_len_bytes=st.integers(0, 2), k=st.integers(0, 20))
def test_compressed_rows_events_give_the_records_of_their_plain_twins(
        events, mode, version, checksum, extra_len_bytes, k):
    """The same random row images of every type as plain and as compressed rows events
    (v1 and v2 layouts, inserts, updates, deletes, with and without checksums, length fields
    of every size): the same records, offsets and errors, through the compiled decoder and
    the pure-Python one alike; resuming from a record's offset in the compressed binlog
    gives exactly the records from it on."""
    if mode == 2:  # an update's images come in pairs
        events = [imgs[:len(imgs) // 2 * 2] for imgs in events]
        events = [imgs for imgs in events if imgs]
        if not events:
            return
    plain = _fuzz_binlog(events, mode, version, compress=False, checksum=checksum)
    packed = _fuzz_binlog(events, mode, version, compress=True, checksum=checksum,
                          extra_len_bytes=min(extra_len_bytes, 1))
    assert ROWS_TYPE[mode, version, True] in {t for _at, t, _ev in packed.events}
    got = {}
    for decoder in (F.CRowDecoder, PyRowDecoder):
        want, z = _read(plain, decoder), _read(packed, decoder)
        if isinstance(want, str):  # text not valid in its charset: the same error
            assert z == want and "malformed row event" in want
            got[decoder] = want
            continue
        assert [(r.op, r.offset, r.gtid, r.ts_ms) for r in z] == \
            [(r.op, r.offset, r.gtid, r.ts_ms) for r in want]
        assert [r.offset.to_json() for r in z] == [r.offset.to_json() for r in want]
        assert_rows_same([(r.before, r.after) for r in z], [(r.before, r.after) for r in want])
        n = sum(len(imgs) // (2 if mode == 2 else 1) for imgs in events)
        assert len(z) == n and {r.op for r in z} == {"cdu"[mode]}
        assert [r.offset.events for r in z] == sorted(r.offset.events for r in z)
        i = k % len(z)
        again = _read(packed, decoder, z[i].offset)
        assert [r.offset for r in again] == [r.offset for r in z[i:]]
        assert_rows_same([(r.before, r.after) for r in again],
                         [(r.before, r.after) for r in z[i:]])
        got[decoder] = z
    c, py = got[F.CRowDecoder], got[PyRowDecoder]
    if isinstance(c, str) or isinstance(py, str):
        assert isinstance(c, str) and isinstance(py, str)
    else:
        assert_rows_same([(r.before, r.after) for r in c], [(r.before, r.after) for r in py])


def test_compressed_statements_are_read_as_plain_ones():
    """A compressed DDL gives the table event of the plain one, at the same offset, and a
    compressed COMMIT (MariaDB compresses any statement of log_bin_compress_min_len bytes or
    more) ends its transaction as the plain one does."""
    from sparkcdc.core.offsets import BinlogOffset

    schema = TableSchema(TableId("f", "t"), (Column("id", "int(11)", False),), ("id",), "id")
    out = []
    for compress in (False, True):
        q = E.QUERY_COMPRESSED if compress else E.QUERY
        b = Binlog()
        b.add(E.MARIADB_GTID, mariadb_gtid_body(1, standalone=True))
        b.add(q, query_body(b"  ALTER TABLE t ADD COLUMN w INT, ALGORITHM=INSTANT ", "f",
                            compress=compress))
        b.add(E.MARIADB_GTID, mariadb_gtid_body(2))
        b.add(q, query_body(b"BEGIN", compress=compress))
        b.add(E.TABLE_MAP, table_map_body(5, "f", "t", [binlog_column(CT.LONG)]))
        b.add(ROWS_TYPE[0, 1, compress], rows_body(5, 1, 0, 1, b"\0" + struct.pack("<i", 7),
                                                    compress=compress))
        b.add(q, query_body(b"COMMIT", compress=compress))
        mid = b.pos
        b.add(E.MARIADB_GTID, mariadb_gtid_body(3, standalone=True))
        b.add(q, query_body(b"TRUNCATE TABLE t", "f", compress=compress))
        r = SyntheticReader(b, {schema.table_id: schema}, table_events=True)
        got = list(r.read_window(BinlogOffset(FILE, 4), BinlogOffset(FILE, b.pos)))
        assert [type(x).__name__ for x in got] == ["SchemaChanged", "ChangeRecord",
                                                   "TableTruncated"]
        assert got[0].ddl.statement == "ALTER TABLE t ADD COLUMN w INT, ALGORITHM=INSTANT"
        assert got[1].after == {"id": 7} and got[2].statement == "TRUNCATE TABLE t"
        # the COMMIT ended the transaction: a window ending after it holds its row
        assert list(r.read_window(BinlogOffset(FILE, 4), BinlogOffset(FILE, mid))) == got[:2]
        out.append([(replace(x, offset=None), x.offset.events, x.offset.rows) for x in got])
    # the same, positions aside (the compressed statements are shorter or longer)
    assert out[0] == out[1]


@pytest.mark.parametrize("damage,why", [
    (lambda z: z[:-6], "cut short"),
    (lambda z: z[:8] + bytes([z[8] ^ 0xFF]) + z[9:], "zlib stream is corrupt"),
    (lambda z: bytes([0x90 | z[0] & 7]) + z[1:], "compression algorithm 1 is unknown"),
    (lambda z: bytes([z[0] & 0x7F]) + z[1:], "does not mark a compressed part"),
    (lambda z: b"\x85" + z[1:], "length field of 5 bytes"),
    (lambda z: b"\x81\x00" + z[2:], "uncompressed length is 0"),
    (lambda z: bytes([z[0], z[1] + 1]) + z[2:], "inflates to 30 bytes, not the 31"),
    (lambda z: bytes([z[0], z[1] - 1]) + z[2:], "more than the 29 bytes"),
    (lambda z: z + b"junk", "4 bytes follow its zlib stream"),
    (lambda z: b"", "compressed part is missing"),
])
@pytest.mark.parametrize("decoder", [F.CRowDecoder, PyRowDecoder])
def test_a_corrupt_compressed_event_is_one_decode_error_naming_it(damage, why, decoder):
    """Each way the compressed part of a rows event or a statement can be wrong: one
    DecodeError naming the event's file and position and what is wrong; the same damage to
    an uncaptured table's rows event is never read."""
    from sparkcdc.core.offsets import BinlogOffset
    from sparkcdc.errors import DecodeError

    schema = TableSchema(TableId("f", "t"), (Column("id", "int(11)", False),
                                             Column("v", "varchar(40)", True, "utf8mb4")),
                         ("id",), "id")
    cols = [binlog_column(CT.LONG), binlog_column(CT.VARCHAR, max_length=160)]
    images = b"\0" + struct.pack("<i", 1) + b"\x18" + b"a" * 24  # 30 bytes
    z = compressed(images)
    assert z[1] == 30
    for where in ("rows", "query", "uncaptured"):
        b = Binlog()
        b.add(E.MARIADB_GTID, mariadb_gtid_body(1))
        b.add(E.TABLE_MAP, table_map_body(5, "f", "t" if where != "uncaptured" else "u", cols))
        head = rows_body(5, 2, 0, 1, b"")
        body = head + damage(z) if where != "query" else head + z
        at = b.add(E.WRITE_ROWS_COMPRESSED_V1, body)
        b.add(E.XID, struct.pack("<Q", 1))
        if where == "query":
            b.add(E.MARIADB_GTID, mariadb_gtid_body(2, standalone=True))
            statement = compressed(b"DROP TABLE f.t, f.t, f.t, f.t;")  # 30 bytes too
            at = b.add(E.QUERY_COMPRESSED, query_body(b"", "f") + damage(statement))
        r = SyntheticReader(b, {schema.table_id: schema}, decoder=decoder())
        window = (BinlogOffset(FILE, 4), BinlogOffset(FILE, b.pos))
        if where == "uncaptured":
            assert list(r.read_window(*window)) == []
            continue
        with pytest.raises(DecodeError) as e:
            list(r.read_window(*window))
        msg = str(e.value)
        assert f"corrupt MariaDB compressed {where} event at {FILE}:{at}: " in msg, msg
        assert why in msg, msg
        assert "--verify-binlog-checksum" in msg


# -- against a server with log_bin_compress=ON -------------------------------------------------

_BLOB = random.Random(17).randbytes(17 << 20)  # incompressible: a compressed event of 17 MiB
_TEXT = "é" * (5 << 20)  # 10 MiB of UTF-8 that compresses to almost nothing


def _workload(sb, db, pause_compression=False):
    """The same changes on any server, with the CDC options, the table's schema and the
    offsets around them: single and multi-event inserts, updates and deletes in one
    transaction, a row of 27 MiB, an XA transaction, a column added, a TRUNCATE. With
    ``pause_compression`` the server's log_bin_compress is off for the column added and the
    update after it (the binlog mixes compressed and plain events)."""
    sb.execute(f"CREATE DATABASE IF NOT EXISTS `{db}`")
    sb.execute("CREATE TABLE w (id INT PRIMARY KEY, v VARCHAR(100), n INT, b LONGBLOB, "
               "t LONGTEXT)", "CREATE TABLE other (id INT PRIMARY KEY, v VARCHAR(100))",
               database=db)
    conn = cdc(sb)
    start = current_offset(conn)
    with sb.admin_connection(db) as c, c.cursor() as cur:
        cur.execute("INSERT INTO w (id, v, n) VALUES (1, 'one', 1), (2, 'two', 2)")
        cur.execute("INSERT INTO w (id, v, n) SELECT seq, CONCAT('row ', seq), seq "
                    f"FROM {seq(sb, 3000, 3)}")  # several row events
        cur.execute("BEGIN")
        cur.execute("INSERT INTO other VALUES (1, 'uncaptured, counted')")
        cur.execute("UPDATE w SET v = CONCAT(v, ' updated'), n = -n WHERE id % 7 = 0")
        cur.execute("DELETE FROM w WHERE id % 11 = 0")
        cur.execute("COMMIT")
        cur.execute("INSERT INTO w VALUES (5000, 'big', 0, %s, %s)", (_BLOB, _TEXT))
        cur.execute("UPDATE w SET t = CONCAT(t, 'x'), n = 1 WHERE id = 5000")
        cur.execute("XA START 'sparkcdc-xa'")
        cur.execute("INSERT INTO w (id, v, n) VALUES (6000, 'in xa', 6)")
        cur.execute("XA END 'sparkcdc-xa'")
        cur.execute("XA PREPARE 'sparkcdc-xa'")
        cur.execute("XA COMMIT 'sparkcdc-xa'")
        if pause_compression:
            cur.execute("SET GLOBAL log_bin_compress = OFF")
        try:
            cur.execute("ALTER TABLE w ADD COLUMN z INT DEFAULT 7")
            cur.execute("UPDATE w SET z = 8, n = 2 WHERE id IN (1, 2)")
        finally:
            if pause_compression:
                cur.execute("SET GLOBAL log_bin_compress = ON")
        cur.execute("DELETE FROM w WHERE id = 5000")
        cur.execute("TRUNCATE TABLE other")
        cur.execute("INSERT INTO w (id, v, n, z) VALUES (7000, 'last', 7, 9)")
    end = current_offset(conn)
    sb.execute("ALTER TABLE w DROP COLUMN z", database=db)  # the schema of the start again
    schema = load_table_schema(conn, TableId(db, "w"))
    return conn, schema, start, end


def _event_types(conn, start, end) -> set[int]:
    """The types of the events of a window (in one file)."""
    assert start.file == end.file
    base = {k: v for k, v in conn.pymysql_kwargs().items()
            if k not in ("database", "autocommit", "init_command")}
    stream = E.DumpStream(base, 7650, start.file, start.pos, blocking=False, heartbeat=None,
                          read_timeout=60)
    seen = set()
    try:
        for _data, evs in stream.batches():
            seen.update(h[1] for h in evs if 0 < h[4] <= end.pos)
    finally:
        stream.close()
    return seen


@pytest.fixture(scope="module")
def twin_windows(mariadb_compressed):
    """``_workload`` on the compressing MariaDB twice, in two databases: once with
    log_bin_compress off throughout (the plain twin), once with it on (off for a while
    halfway). Both on MariaDB whatever the session's source server: the compression is
    MariaDB's, and MySQL splits row events elsewhere."""
    import uuid

    sb = mariadb_compressed
    plain_db, packed_db = f"z_{uuid.uuid4().hex[:10]}", f"z_{uuid.uuid4().hex[:10]}"
    try:
        sb.execute("SET GLOBAL log_bin_compress = OFF")
        try:
            plain = _workload(sb, plain_db)
        finally:
            sb.execute("SET GLOBAL log_bin_compress = ON")
        yield plain, _workload(sb, packed_db, pause_compression=True)
    finally:
        for db in (plain_db, packed_db):
            sb.execute(f"DROP DATABASE IF EXISTS `{db}`")


def _comparable(items):
    """A window's records and table events without what differs between two runs of the
    workload (the database's name, positions, GTIDs and commit times): kind, table, images,
    what an event says, events and rows."""
    out = []
    for x in items:
        if isinstance(x, ChangeRecord):
            out.append((x.op, x.table_id.table, x.before, x.after, x.offset.events,
                        x.offset.rows))
        else:
            said = {k: v for k, v in x.to_dict().items() if k not in ("offset", "op_ts_ms")}
            named = str(said).replace(x.table_id.database, "<db>")
            out.append((type(x).__name__, named, x.offset.events))
    return out


@pytest.mark.parametrize("decoder", [F.CRowDecoder, PyRowDecoder])
def test_a_compressing_server_gives_the_records_of_an_uncompressed_one(
        mariadb_compressed, twin_windows, decoder):
    """The same changes on a server with log_bin_compress=ON (switched off and on again
    halfway) and one without: the same records and table events (every row event and
    statement but the shortest compressed),
    the rows the table holds, and every record offset resumes to exactly the rest.
    python-mysql-replication cannot read the compressed window: the reference refuses it."""
    from sparkcdc.errors import DecodeError

    z = mariadb_compressed
    assert z.query("SELECT @@log_bin_compress, @@log_bin_compress_min_len")[0] == (1, 10)
    plain, packed = twin_windows
    conn, schema, start, end = packed
    assert {E.QUERY_COMPRESSED, E.WRITE_ROWS_COMPRESSED_V1, E.UPDATE_ROWS_COMPRESSED_V1,
            E.DELETE_ROWS_COMPRESSED_V1,
            E.QUERY, E.UPDATE_ROWS_V1} <= _event_types(conn, start, end)  # and paused
    assert not _event_types(plain[0], plain[2], plain[3]) & set(range(165, 172))
    got = {}
    for name, (c, sch, s, e) in (("plain", plain), ("packed", packed)):
        r = BinlogReader(c, 7651, {sch.table_id: sch}, decoder=decoder(), table_events=True)
        got[name] = (r, list(r.read_window(s, e)))
    recs = got["packed"][1]
    assert _comparable(recs) == _comparable(got["plain"][1])
    rows = [x for x in recs if isinstance(x, ChangeRecord)]
    assert len(rows) == 3000 + 3000 // 7 + 3000 // 11 + 1 + 1 + 1 + 2 + 1 + 1
    assert {x.kind for x in recs if not isinstance(x, ChangeRecord)} == {"ddl", "schema"}
    big = [x for x in rows if (x.after or x.before)["id"] == 5000]
    assert big[0].after["b"] == _BLOB and big[1].after["t"] == _TEXT + "x"
    # replayed, the records hold what the table holds
    table: dict = {}
    for x in rows:
        if x.before is not None:
            del table[x.before["id"]]
        if x.after is not None:
            table[x.after["id"]] = tuple(x.after[k] for k in ("v", "n", "b", "t"))
    held = z.query("SELECT id, v, n, b, t FROM w", database=schema.table_id.database)
    assert table == {r[0]: tuple(r[1:]) for r in held} and len(table) > 2500
    # offsets mean the same thing: each record offset resumes to exactly the rest (read by
    # a new reader, which starts from the schema of the start again)
    firsts = [i for i in range(1, len(rows)) if rows[i].offset.events != rows[i - 1].offset.events]
    for k in sorted({0, 1, 2, len(rows) - 1, *firsts[:8], *firsts[-6:]}):
        r = BinlogReader(conn, 7651, {schema.table_id: schema}, decoder=decoder(),
                         table_events=True)
        again = [x for x in r.read_window(rows[k].offset, end) if isinstance(x, ChangeRecord)]
        assert _comparable(again) == _comparable(rows[k:]), k
    with pytest.raises(DecodeError, match="python-mysql-replication does not decode"):
        list(LibraryBinlogReader(conn, 7652, {schema.table_id: schema}).read_window(start, end))
