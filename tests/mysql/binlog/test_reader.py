"""The binlog adapter against a real MariaDB: windows, offsets, resume, rotation, filtering,
tailing with heartbeats, purged files, and reconnection without duplicates."""

from __future__ import annotations

import datetime as dt
import socket
import threading
import time
from dataclasses import replace

import pymysql
import pytest
from library_reader import LibraryBinlogReader
from server_support import binlog_status, is_mysql

from sparkcdc.core.offsets import BinlogOffset
from sparkcdc.core.records import ChangeRecord, Heartbeat
from sparkcdc.core.schema import TableId
from sparkcdc.errors import BinlogUnavailable, OffsetError
from sparkcdc.mysql.binlog.reader import BinlogReader
from sparkcdc.mysql.binlog.server_lookups import load_table_schema
from sparkcdc.mysql.connection import ConnectionOptions
from sparkcdc.mysql.offsets import current_offset
from sparkcdc.testing.mariadb import MariaDBSandbox

pytestmark = pytest.mark.timeout(120)


def cdc(sb: MariaDBSandbox, **kw) -> ConnectionOptions:
    i = sb.info
    return ConnectionOptions(hostname=i.host, port=i.port, username=i.cdc_user,
                             password=i.cdc_password, **kw)


def reader(sb, db, *tables, server_id=7201, **kw) -> BinlogReader:
    conn = cdc(sb, **kw.pop("conn_kw", {}))
    schemas = {TableId(db, t): load_table_schema(conn, TableId(db, t)) for t in tables}
    return BinlogReader(conn, server_id, schemas, **kw)


def rows(records, image="after"):
    return [getattr(r, image) for r in records]


@pytest.fixture
def t(mariadb, db):
    mariadb.execute("CREATE TABLE t (id INT PRIMARY KEY, v VARCHAR(20))",
                    "CREATE TABLE u (id INT PRIMARY KEY, v VARCHAR(20))", database=db)
    return db


def test_current_offset_is_a_boundary_with_the_gtid_position(mariadb, t):
    conn = cdc(mariadb)
    flavor = mariadb.info.server if mariadb.info.server == "mysql" else "mariadb"
    mariadb.execute("INSERT INTO t VALUES (1, 'a')", database=t)
    off = current_offset(conn, flavor)
    if flavor == "mysql":  # (SPARKCDC_TEST_SOURCE=mysql) MySQL 8.4+ has only the new names
        file, pos = mariadb.query("SHOW BINARY LOG STATUS")[0][:2]
        gtid = mariadb.query("SELECT @@gtid_executed")[0][0].replace("\n", "")
    else:
        file, pos = mariadb.query("SHOW MASTER STATUS")[0][:2]
        gtid = mariadb.query("SELECT @@gtid_binlog_pos")[0][0]
    assert (off.file, off.pos) == (file, pos) and off.is_boundary
    assert off.gtid == gtid and off.gtid
    assert off.flavor == flavor
    with pymysql.connect(**conn.pymysql_kwargs()) as c:
        assert current_offset(c) == off  # a connection, flavor detected
        with c.cursor() as cur:
            assert current_offset(cur, flavor) == off


def test_inserts_updates_deletes_with_before_and_after(mariadb, t):
    conn = cdc(mariadb)
    start = current_offset(conn)
    before = time.time()
    mariadb.execute("INSERT INTO t VALUES (1, 'a'), (2, 'b')",
                    "UPDATE t SET v = 'bb' WHERE id = 2",
                    "UPDATE t SET id = 3 WHERE id = 1",
                    "DELETE FROM t WHERE id = 2", database=t)
    after = time.time()
    end = current_offset(conn)
    recs = list(reader(mariadb, t, "t").read_window(start, end))
    assert [(r.op, r.before, r.after) for r in recs] == [
        ("c", None, {"id": 1, "v": "a"}),
        ("c", None, {"id": 2, "v": "b"}),
        ("u", {"id": 2, "v": "b"}, {"id": 2, "v": "bb"}),
        ("u", {"id": 1, "v": "a"}, {"id": 3, "v": "a"}),
        ("d", {"id": 2, "v": "bb"}, None),
    ]
    assert all(r.table_id == TableId(t, "t") for r in recs)
    assert all(int(before) * 1000 <= r.ts_ms <= after * 1000 + 1000 for r in recs)
    # autocommit: each statement its own transaction, with its own GTID
    # (MariaDB's domain-server-sequence; MySQL's source uuid:number)
    source = (mariadb.query("SELECT @@server_uuid")[0][0] + ":"
              if mariadb.info.server == "mysql" else "0-")
    assert len({r.gtid for r in recs}) == 4 and all(r.gtid.startswith(source) for r in recs)
    offsets = [r.offset for r in recs]
    assert offsets == sorted(offsets) and len(set(offsets)) == len(offsets)
    assert (recs[0].offset.events, recs[0].offset.rows) == (0, 0)
    assert (recs[1].offset.events, recs[1].offset.rows) == (0, 1)
    assert recs[0].offset.pos == recs[1].offset.pos


def test_window_bounds_are_exact(mariadb, t):
    conn = cdc(mariadb)
    o0 = current_offset(conn)
    mariadb.execute("INSERT INTO t VALUES (1, 'before')", database=t)
    o1 = current_offset(conn)
    mariadb.execute("INSERT INTO t VALUES (2, 'in')", "INSERT INTO t VALUES (3, 'in')",
                    database=t)
    o2 = current_offset(conn)
    mariadb.execute("INSERT INTO t VALUES (4, 'after')", database=t)
    o3 = current_offset(conn)
    r = reader(mariadb, t, "t")
    assert [x["id"] for x in rows(r.read_window(o1, o2))] == [2, 3]
    assert [x["id"] for x in rows(r.read_window(o0, o3))] == [1, 2, 3, 4]
    assert [x["id"] for x in rows(r.read_window(o2, o3))] == [4]
    assert list(r.read_window(o1, o1)) == []
    assert list(r.read_window(o2, o1)) == []
    # the records' own offsets are windows too: [start of 3, o3) holds 3 and 4
    recs = list(r.read_window(o0, o3))
    assert [x["id"] for x in rows(r.read_window(recs[2].offset, o3))] == [3, 4]
    assert [x["id"] for x in rows(r.read_window(o0, recs[2].offset))] == [1, 2]
    assert all(o0 <= x.offset < o3 for x in recs)


def test_resume_inside_a_transaction_skips_exactly_the_consumed_rows(mariadb, t):
    """One transaction: uncaptured rows, a statement big enough to span several row events,
    more uncaptured rows, then small statements. Every record offset (and every next
    offset) resumes to exactly the remaining records; every record offset as an end stops
    exactly before it."""
    conn = cdc(mariadb)
    start = current_offset(conn)
    big = ", ".join(f"({i}, '{'x' * 15}')" for i in range(10, 1500))
    with mariadb.admin_connection(t) as c, c.cursor() as cur:
        cur.execute("BEGIN")
        cur.execute("INSERT INTO u VALUES (1, 'u1'), (2, 'u2')")
        cur.execute(f"INSERT INTO t VALUES {big}")
        cur.execute("INSERT INTO u VALUES (3, 'u3')")
        cur.execute("INSERT INTO t VALUES (1, 'a'), (2, 'b'), (3, 'c')")
        cur.execute("UPDATE t SET v = 'z' WHERE id IN (1, 2)")
        cur.execute("COMMIT")
    mariadb.execute("INSERT INTO t VALUES (5000, 'next txn')", database=t)
    end = current_offset(conn)
    r = reader(mariadb, t, "t")
    recs = list(r.read_window(start, end))
    assert len(recs) == 1490 + 3 + 2 + 1
    txn = [x.offset for x in recs[:-1]]
    assert len({(o.file, o.pos) for o in txn}) == 1  # one transaction
    events = sorted({o.events for o in txn})
    assert events[0] == 1  # the uncaptured insert into u was row event 0
    assert len(events) >= 4  # the big insert spanned several row events
    assert recs[-1].offset.events == 0 and recs[-1].offset.pos > txn[0].pos
    probes = sorted({0, 1, 2, 700, 1489, 1490, 1491, 1492, 1493, 1494, 1495} |
                    {i for i in range(1, len(recs)) if
                     recs[i].offset.events != recs[i - 1].offset.events})
    for k in probes:
        again = list(r.read_window(recs[k].offset, end))
        assert again == recs[k:], k
        assert list(r.read_window(recs[k].next_offset(), end)) == recs[k + 1:], k
        assert list(r.read_window(start, recs[k].offset)) == recs[:k], k


def test_rotation_in_the_middle_of_the_window(mariadb, t):
    conn = cdc(mariadb)
    start = current_offset(conn)
    mariadb.execute("INSERT INTO t VALUES (1, 'a')", "FLUSH BINARY LOGS",
                    "INSERT INTO t VALUES (2, 'b')", "FLUSH BINARY LOGS", database=t)
    mid = current_offset(conn)
    mariadb.execute("INSERT INTO t VALUES (3, 'c')", database=t)
    end = current_offset(conn)
    assert end.file != start.file
    r = reader(mariadb, t, "t")
    recs = list(r.read_window(start, end))
    assert [x["id"] for x in rows(recs)] == [1, 2, 3]
    assert len({x.offset.file for x in recs}) == 3
    assert [x["id"] for x in rows(r.read_window(recs[1].offset, end))] == [2, 3]
    assert [x["id"] for x in rows(r.read_window(start, mid))] == [1, 2]
    assert [x["id"] for x in rows(r.read_window(mid, end))] == [3]
    # a window that ends right at the start of a fresh file, nothing written after it
    mariadb.execute("FLUSH BINARY LOGS")
    tip = current_offset(conn)
    assert tip.file != end.file and list(r.read_window(end, tip)) == []
    assert [x["id"] for x in rows(r.read_window(start, tip))] == [1, 2, 3]
    it = r.tail(end, heartbeat_interval=0.2)
    try:  # heartbeats reach the server's position (MariaDB may add checkpoint events later)
        beat = next(x for x in it if isinstance(x, Heartbeat)
                    and x.offset == current_offset(conn))
        assert beat.offset >= tip and beat.offset.file == tip.file
    finally:
        it.close()


def test_only_captured_schema_table_pairs(mariadb, t):
    """Capture db.t and db2.u: db.u and db2.t share a schema or a table name but are out."""
    other = t + "_o"
    mariadb.execute(f"CREATE DATABASE `{other}`")
    try:
        mariadb.execute("CREATE TABLE t (id INT PRIMARY KEY, v VARCHAR(20))",
                        "CREATE TABLE u (id INT PRIMARY KEY, v VARCHAR(20))", database=other)
        conn = cdc(mariadb)
        start = current_offset(conn)
        for d in (t, other):
            mariadb.execute(f"INSERT INTO t VALUES (1, '{d}.t')",
                            f"INSERT INTO u VALUES (1, '{d}.u')", database=d)
        end = current_offset(conn)
        tables = {TableId(t, "t"): load_table_schema(conn, TableId(t, "t")),
                  TableId(other, "u"): load_table_schema(conn, TableId(other, "u"))}
        recs = list(BinlogReader(conn, 7202, tables).read_window(start, end))
        assert [(str(r.table_id), r.after["v"]) for r in recs] == [
            (f"{t}.t", f"{t}.t"), (f"{other}.u", f"{other}.u")]
        # table ids alone: the reader loads the schemas itself
        recs2 = list(BinlogReader(conn, 7202, set(tables)).read_window(start, end))
        assert recs2 == recs
    finally:
        mariadb.execute(f"DROP DATABASE `{other}`")


def test_window_stops_at_end_while_the_server_keeps_writing(mariadb, t):
    conn = cdc(mariadb)
    start = current_offset(conn)
    mariadb.execute("INSERT INTO t VALUES (1, 'a')", database=t)
    end = current_offset(conn)
    stop = threading.Event()

    def writer():
        i = 100
        while not stop.is_set():
            mariadb.execute(f"INSERT INTO t VALUES ({i}, 'later')", database=t)
            i += 1

    th = threading.Thread(target=writer)
    th.start()
    try:
        time.sleep(0.2)
        t0 = time.monotonic()
        recs = list(reader(mariadb, t, "t").read_window(start, end))
        assert time.monotonic() - t0 < 10
    finally:
        stop.set()
        th.join()
    assert [x["id"] for x in rows(recs)] == [1]


def test_window_end_beyond_the_server_raises_instead_of_hanging(mariadb, t):
    conn = cdc(mariadb)
    start = current_offset(conn)
    mariadb.execute("INSERT INTO t VALUES (1, 'a')", database=t)
    cur = current_offset(conn)
    r = reader(mariadb, t, "t", conn_kw={"max_retries": 2})
    t0 = time.monotonic()
    with pytest.raises(OffsetError, match="before the window end"):
        list(r.read_window(start, replace(cur, pos=cur.pos + 10_000_000)))
    assert time.monotonic() - t0 < 10


def test_missing_file_raises_binlog_unavailable(mariadb, t):
    r = reader(mariadb, t, "t")
    with pytest.raises(BinlogUnavailable, match="binlog.999999") as e:
        list(r.read_window(BinlogOffset("binlog.999999", 4), BinlogOffset("binlog.999999", 99)))
    assert "no longer on the server" in str(e.value)
    assert not e.value.retryable


def test_tail_yields_records_then_heartbeats_at_the_boundary(mariadb, t):
    conn = cdc(mariadb)
    start = current_offset(conn)
    mariadb.execute("INSERT INTO t VALUES (1, 'a')", database=t)
    r = reader(mariadb, t, "t")
    it = r.tail(start, heartbeat_interval=0.3)
    try:
        first = next(it)
        assert isinstance(first, ChangeRecord) and first.after == {"id": 1, "v": "a"}
        beat = next(x for x in it if isinstance(x, Heartbeat))
        idle = current_offset(conn)
        assert beat.offset == idle and beat.offset.gtid == idle.gtid
        assert abs(beat.ts_ms - time.time() * 1000) < 5000
        # writes to uncaptured tables move the heartbeat offset on
        mariadb.execute("INSERT INTO u VALUES (1, 'x')", database=t)
        moved = current_offset(conn)
        beat2 = next(x for x in it if isinstance(x, Heartbeat) and x.offset == moved)
        assert beat2.offset > beat.offset
        mariadb.execute("INSERT INTO t VALUES (2, 'b')", database=t)
        rec = next(x for x in it if isinstance(x, ChangeRecord))
        assert rec.after == {"id": 2, "v": "b"} and rec.offset >= moved
    finally:
        it.close()


def _kill_dump_threads(mariadb) -> int:
    ids = [r[0] for r in mariadb.query(
        "SELECT ID FROM information_schema.PROCESSLIST WHERE COMMAND LIKE 'Binlog Dump%'")]
    for i in ids:
        try:
            mariadb.execute(f"KILL CONNECTION {i}")
        except pymysql.err.MySQLError:
            pass
    return len(ids)


def test_tail_reconnects_itself_without_duplicates(mariadb, t):
    conn = cdc(mariadb)
    start = current_offset(conn)
    mariadb.execute("INSERT INTO t VALUES (1, 'a')", "INSERT INTO t VALUES (2, 'b')",
                    database=t)
    r = reader(mariadb, t, "t")
    it = r.tail(start, heartbeat_interval=0.3)
    got = []
    try:
        got.append(next(it))
        assert _kill_dump_threads(mariadb) >= 1
        mariadb.execute("INSERT INTO t VALUES (3, 'c')", database=t)
        for x in it:
            if isinstance(x, ChangeRecord):
                got.append(x)
            if len(got) == 3:
                break
        assert r.reconnects >= 1
        assert _kill_dump_threads(mariadb) >= 1
        mariadb.execute("INSERT INTO t VALUES (4, 'd')", database=t)
        got.append(next(x for x in it if isinstance(x, ChangeRecord)))
    finally:
        it.close()
    assert [x.after["id"] for x in got] == [1, 2, 3, 4]
    assert r.reconnects >= 2


class _KeepsStreams:
    """A seam, not a mock: the real stream, kept so a test can break its real socket."""

    def _open(self, start, **kw):
        stream = super()._open(start, **kw)
        self.streams = getattr(self, "streams", []) + [stream]
        return stream


class _NativeKept(_KeepsStreams, BinlogReader):
    pass


class _LibraryKept(_KeepsStreams, LibraryBinlogReader):
    pass


def _socket_of(stream):
    """The stream's real socket: our own layer's connection, or the library's."""
    conn = getattr(stream, "connection", None) or stream._stream_connection
    return conn._sock


def _insert_transactions(server, db: str, table: str, count: int, rows: int, per: int,
                         value) -> None:
    """``count`` transactions of ``rows`` rows each (ids from 0 on, ``per`` a statement)
    into ``table`` (id, v), ``value(id)`` for v."""
    with server.admin_connection(db) as c, c.cursor() as cur:
        for base in range(0, count * rows, rows):
            cur.execute("BEGIN")
            for j in range(base, base + rows, per):
                cur.execute(f"INSERT INTO {table} VALUES " + ", ".join(
                    f"({i}, '{value(i)}')" for i in range(j, j + per)))
            cur.execute("COMMIT")


@pytest.mark.parametrize("layer", ["native", "library"])
def test_window_broken_mid_transaction_resumes_without_duplicates(mariadb, t, layer):
    conn = cdc(mariadb)
    start = current_offset(conn)
    # ~2 MB of events: more than the stream holds in its buffers when the socket breaks
    _insert_transactions(mariadb, t, "t", 3, 20000, 500, lambda i: f"row {i:08d}")
    end = current_offset(conn)
    kept = {"native": _NativeKept, "library": _LibraryKept}[layer]
    r = kept(conn, 7205, {TableId(t, "t"): load_table_schema(conn, TableId(t, "t"))})
    it = r.read_window(start, end)
    got = [next(it) for _ in range(1234)]  # inside the first transaction
    _socket_of(r.streams[-1]).shutdown(socket.SHUT_RDWR)
    got += list(it)
    assert r.reconnects >= 1 and len(r.streams) >= 2
    assert [x.after["id"] for x in got] == list(range(60000))
    assert [x.offset for x in got] == sorted({x.offset for x in got})


def test_a_window_read_waits_out_a_dark_address_then_resumes_exactly(mariadb, t):
    """A failover or a restart keeps the address dark for seconds (a MySQL primary stopped
    cleanly with a replica attached: 9 to 12 s). A window read cut mid-transaction whose
    reconnects are then refused for 3 s (longer than connect.max-retries' 0.1 + 0.2 +
    0.4 s) waits for the server, up to connect.timeout, and resumes from its own offset:
    every record once, in order, as an undisturbed read has them."""
    from sparkcdc.testing.proxy import FaultProxy

    conn = cdc(mariadb)
    start = current_offset(conn)
    mariadb.execute("CREATE TABLE w (id INT PRIMARY KEY, v VARCHAR(1000))", database=t)
    # ~18 MB: far more than sockets, the proxy and the reader's read-ahead hold when the
    # cut comes (with ~1.5 MB the reader had read the whole window before the cut)
    _insert_transactions(mariadb, t, "w", 2, 10000, 200, lambda i: f"{i:08d}{'x' * 892}")
    end = current_offset(conn)
    schemas = {TableId(t, "w"): load_table_schema(conn, TableId(t, "w"))}
    want = [(x.offset, x.op, x.after) for x in BinlogReader(conn, 7206, schemas)
            .read_window(start, end)]
    assert len(want) == 20000
    i = mariadb.info
    with FaultProxy(i.host, i.port) as proxy:
        dark = replace(conn, hostname=proxy.host, port=proxy.port, connect_timeout=15)
        assert dark.max_retries == 3
        r = BinlogReader(dark, 7206, schemas)
        it = r.read_window(start, end)
        got = [next(it) for _ in range(1234)]  # inside the first transaction
        proxy.cut_all()
        proxy.refuse_for(3)
        cut = time.monotonic()
        got += list(it)
        took = time.monotonic() - cut
        stats = proxy.stats()
        assert stats.cut == 1 and stats.refused >= 4 and r.reconnects >= 4, (stats, r.reconnects)
    assert 3.0 <= took < 10.0, took
    assert [(x.offset, x.op, x.after) for x in got] == want


@pytest.fixture(scope="module")
def scratch(tmp_path_factory):
    """A server of its own for tests that purge binlogs or restart the server."""
    with MariaDBSandbox(name="binlog-scratch", base_dir=tmp_path_factory.mktemp("scratch")) as sb:
        sb.execute("CREATE DATABASE s", "CREATE TABLE s.t (id INT PRIMARY KEY, v VARCHAR(20))")
        yield sb


def test_purged_file_raises_binlog_unavailable_naming_it(scratch):
    conn = cdc(scratch)
    old = current_offset(conn)
    scratch.execute("INSERT INTO s.t VALUES (1, 'a')", "FLUSH BINARY LOGS",
                    "INSERT INTO s.t VALUES (2, 'b')")
    cur = current_offset(conn)
    deadline = time.monotonic() + 30
    while old.file in [r[0] for r in scratch.query("SHOW BINARY LOGS")]:
        # MariaDB keeps a file until InnoDB's binlog checkpoint has passed it
        assert time.monotonic() < deadline, "the server would not purge the old binlog"
        scratch.execute(f"PURGE BINARY LOGS TO '{cur.file}'")
        time.sleep(0.2)
    r = reader(scratch, "s", "t")
    with pytest.raises(BinlogUnavailable) as e:
        list(r.read_window(old, cur))
    assert old.file in str(e.value) and cur.file in str(e.value)
    assert "retention" in str(e.value)


def test_tail_survives_a_server_restart(scratch):
    """The server restarts under a tail: the reader retries (bounded) until it is back,
    resumes from its own offset, follows the new binlog file, and loses nothing."""
    conn = cdc(scratch, max_retries=12)
    start = current_offset(conn)
    scratch.execute("INSERT INTO s.t VALUES (100, 'before')")
    r = BinlogReader(conn, 7203, {TableId("s", "t"): load_table_schema(conn, TableId("s", "t"))})
    it = r.tail(start, heartbeat_interval=0.3)
    try:
        first = next(it)
        scratch.restart()
        scratch.execute("INSERT INTO s.t VALUES (101, 'after')")
        second = next(x for x in it if isinstance(x, ChangeRecord))
    finally:
        it.close()
    assert (first.after["id"], second.after["id"]) == (100, 101)
    assert second.offset.file != first.offset.file  # the restart rotated the binlog
    assert r.reconnects >= 1


def test_file_start_timestamps(scratch):
    from sparkcdc.mysql.binlog.server_lookups import file_start_timestamps

    files = [r[0] for r in scratch.query("SHOW BINARY LOGS")]
    ts = file_start_timestamps(cdc(scratch), 7204, files + ["binlog.999998"])
    now = dt.datetime.now().timestamp()
    assert all(x is not None and now - 3600 < x <= now + 5 for x in ts[:-1])
    assert ts == sorted(ts[:-1]) + [None]


def test_a_file_and_position_start_reads_across_files_on_either_server(server, server_db):
    """An offset of a file and a position alone (no GTID state) says ``mariadb`` whoever
    made it: a reader without a flavor asks the server, so a MySQL binlog is not read as
    MariaDB's when the window crosses into the next file (its previous-GTIDs event, before:
    a raw ``ValueError: invalid literal for int()``)."""
    server.execute("CREATE TABLE t (id INT PRIMARY KEY, v VARCHAR(20))", database=server_db)
    file, pos = server.query(binlog_status(server))[0][:2]
    server.execute("INSERT INTO t VALUES (1, 'a')", "FLUSH BINARY LOGS",
                   "INSERT INTO t VALUES (2, 'b')", database=server_db)
    end_file, end_pos = server.query(binlog_status(server))[0][:2]
    assert end_file != file
    got = list(reader(server, server_db, "t").read_window(
        BinlogOffset(file, int(pos)), BinlogOffset(end_file, int(end_pos))))
    assert rows(got) == [{"id": 1, "v": "a"}, {"id": 2, "v": "b"}]
    assert {r.offset.flavor for r in got} == {"mysql" if is_mysql(server) else "mariadb"}
    assert got[-1].offset.file == end_file and got[-1].offset.gtid  # the new file's state
