"""Resuming a binlog read after a failover: a real primary and its GTID replica (MariaDB, or
MySQL 9.7 with ``SPARKCDC_TEST_SOURCE=mysql``) behind one address (a proxy, as a virtual IP or a load balancer gives it). The primary is stopped,
the replica promoted, the address pointed at it; offsets of the primary's binlog are then
found in the replica's by their GTID state, each change read once."""

from __future__ import annotations

import itertools
import struct
import time
from typing import ClassVar

import pytest
from failover_support import FAILOVER_DB, FAILOVER_PASSWORD, tools
from server_support import binlog_status, is_mysql

from sparkcdc.core.offsets import BinlogOffset
from sparkcdc.core.schema import TableId
from sparkcdc.errors import BinlogUnavailable, OffsetError
from sparkcdc.mysql.binlog import failover
from sparkcdc.mysql.binlog import protocol as E
from sparkcdc.mysql.binlog.reader import BinlogReader
from sparkcdc.mysql.binlog.server_lookups import load_table_schema
from sparkcdc.mysql.connection import ConnectionOptions
from sparkcdc.mysql.offsets import current_offset
from sparkcdc.testing.mariadb import MariaDBSandbox
from sparkcdc.testing.proxy import FaultProxy

pytestmark = pytest.mark.timeout(180)

DB, PASSWORD = FAILOVER_DB, FAILOVER_PASSWORD


@pytest.fixture
def pair(failover_pair):
    primary = failover_pair[0]
    primary.execute(f"CREATE TABLE {DB}.t (id INT PRIMARY KEY, v VARCHAR(20))")
    return failover_pair


def conn_via(proxy: FaultProxy, sb: MariaDBSandbox) -> ConnectionOptions:
    return ConnectionOptions(hostname="127.0.0.1", port=proxy.port, username="pipe",
                             password=PASSWORD, max_retries=5)


def fail_over(primary, replica, proxy) -> None:
    tools(primary).caught_up(primary, replica)
    primary.stop()
    tools(replica).promote(replica)
    proxy.upstream = (replica.info.host, replica.info.port)
    proxy.cut_all()


def test_a_window_of_the_old_primary_is_read_on_the_promoted_replica(pair):
    primary, replica, proxy = pair
    conn = conn_via(proxy, primary)
    schemas = {TableId(DB, "t"): load_table_schema(conn, TableId(DB, "t"))}
    start = current_offset(conn)
    primary.execute(*(f"INSERT INTO {DB}.t VALUES ({i}, 'p{i}')" for i in range(10)))
    # a multi-row transaction: an offset in the middle of it resumes inside it
    primary.execute(f"INSERT INTO {DB}.t VALUES (100, 'x'), (101, 'y'), (102, 'z')")
    primary_server = str(primary.info.server_id)
    assert start.server == primary_server
    first = list(BinlogReader(conn, 7301, schemas).read_window(start, current_offset(conn)))
    assert [r.after["id"] for r in first] == [*range(10), 100, 101, 102]
    mid = first[11].offset  # the second row of the multi-row insert: (101, 'y')
    assert mid.rows == 1 and mid.server == primary_server

    fail_over(primary, replica, proxy)
    replica.execute(f"UPDATE {DB}.t SET v = 'r' WHERE id = 5",
                    f"INSERT INTO {DB}.t VALUES (200, 'r200')")
    end = current_offset(conn)
    assert end.server == str(replica.info.server_id) != primary_server
    assert start < end and mid < end  # offsets of two servers order by GTID state

    again = list(BinlogReader(conn, 7302, schemas).read_window(start, end))
    assert [(r.op, (r.after or {}).get("id")) for r in again] == (
        [("c", i) for i in range(10)] + [("c", 100), ("c", 101), ("c", 102), ("u", 5),
                                         ("c", 200)])
    # records of the replica's binlog name it, and follow every offset of the primary
    assert all(r.offset.server == end.server for r in again)
    assert all(a.offset < b.offset for a, b in itertools.pairwise(again))

    rest = list(BinlogReader(conn, 7303, schemas).read_window(mid, end))
    assert [(r.op, (r.after or {}).get("id")) for r in rest] == [
        ("c", 101), ("c", 102), ("u", 5), ("c", 200)]


def test_a_tail_fails_over_in_flight(pair):
    primary, replica, proxy = pair
    conn = conn_via(proxy, primary)
    schemas = {TableId(DB, "t"): load_table_schema(conn, TableId(DB, "t"))}
    start = current_offset(conn)
    primary.execute(*(f"INSERT INTO {DB}.t VALUES ({i}, 'p')" for i in range(5)))
    reader = BinlogReader(conn, 7304, schemas)
    seen = []
    for rec in reader.tail(start, heartbeat_interval=0.5):
        if not hasattr(rec, "op"):
            continue
        seen.append(rec.after["id"])
        if rec.after["id"] == 4:
            fail_over(primary, replica, proxy)
            replica.execute(*(f"INSERT INTO {DB}.t VALUES ({i}, 'r')" for i in range(5, 8)))
        if rec.after["id"] == 7:
            break
    assert seen == list(range(8)) and reader.reconnects >= 1


def test_a_replica_behind_the_checkpoint_is_refused(pair):
    primary, replica, proxy = pair
    conn = conn_via(proxy, primary)
    replica.execute("STOP REPLICA" if is_mysql(replica) else "STOP SLAVE")  # it misses the rest
    primary.execute(*(f"INSERT INTO {DB}.t VALUES ({i}, 'p')" for i in range(3)))
    seen = current_offset(conn)  # the pipeline has read up to here
    primary.stop()
    tools(replica).promote(replica)
    proxy.upstream = (replica.info.host, replica.info.port)
    proxy.cut_all()
    schemas = {TableId(DB, "t"): load_table_schema(conn, TableId(DB, "t"))}
    with pytest.raises(OffsetError, match="lacks transactions") as e:
        list(BinlogReader(conn, 7305, schemas).read_window(seen, current_offset(conn)))
    assert "sparkcdc snapshot" in e.value.fix
    # written to since, on MariaDB it has higher sequence numbers than the checkpoint, of
    # another history: still refused, never read from a point that only looks right (MySQL
    # names the new transactions by the replica's own uuid: the primary's are still missing)
    replica.execute(*(f"INSERT INTO {DB}.t VALUES ({i}, 'r')" for i in range(10, 16)))
    missing = "lacks transactions" if is_mysql(replica) else "does not have the transactions"
    with pytest.raises(OffsetError, match=missing):
        list(BinlogReader(conn, 7305, schemas).read_window(seen, current_offset(conn)))


def test_an_offset_without_gtid_state_names_what_is_missing(pair):
    primary, replica, proxy = pair
    conn = conn_via(proxy, primary)
    schemas = {TableId(DB, "t"): load_table_schema(conn, TableId(DB, "t"))}
    here = current_offset(conn)
    bare = BinlogOffset(here.file, here.pos, server=here.server)
    fail_over(primary, replica, proxy)
    with pytest.raises(OffsetError, match="no GTID state"):
        list(BinlogReader(conn, 7306, schemas).read_window(bare, current_offset(conn)))


def test_a_replica_whose_binlog_was_purged_is_refused(pair):
    primary, replica, proxy = pair
    conn = conn_via(proxy, primary)
    seen = current_offset(conn)
    primary.execute(*(f"INSERT INTO {DB}.t VALUES ({i}, 'p')" for i in range(3)))
    tools(primary).caught_up(primary, replica)
    replica.execute("FLUSH BINARY LOGS")
    last = replica.query(binlog_status(replica))[0][0]
    deadline = time.monotonic() + 30
    while len(replica.query("SHOW BINARY LOGS")) > 1:
        # MariaDB keeps a file until InnoDB's binlog checkpoint has passed it
        assert time.monotonic() < deadline, "the replica would not purge its old binlog"
        replica.execute(f"PURGE BINARY LOGS TO '{last}'")
        time.sleep(0.1)
    fail_over(primary, replica, proxy)
    schemas = {TableId(DB, "t"): load_table_schema(conn, TableId(DB, "t"))}
    with pytest.raises(BinlogUnavailable, match="no longer has the binlog"):
        list(BinlogReader(conn, 7307, schemas).read_window(seen, current_offset(conn)))


def test_a_listed_replica_takes_over_when_the_primary_stops(pair):
    """``hostname`` lists both servers: no proxy, the reader moves on to the next one."""
    primary, replica, _proxy = pair
    conn = ConnectionOptions(
        hostname=f"127.0.0.1:{primary.info.port}, 127.0.0.1:{replica.info.port}",
        username="pipe", password=PASSWORD, max_retries=5, connect_timeout=10)
    assert conn.hosts() == [("127.0.0.1", primary.info.port), ("127.0.0.1", replica.info.port)]
    schemas = {TableId(DB, "t"): load_table_schema(conn, TableId(DB, "t"))}
    start = current_offset(conn)
    assert start.server == str(primary.info.server_id)
    primary.execute(*(f"INSERT INTO {DB}.t VALUES ({i}, 'p')" for i in range(3)))
    tools(primary).caught_up(primary, replica)
    primary.stop()
    tools(replica).promote(replica)
    replica.execute(f"INSERT INTO {DB}.t VALUES (3, 'r')")
    end = current_offset(conn)  # the first server refuses: the second answers
    assert end.server == str(replica.info.server_id)
    assert str(conn).endswith(f":{replica.info.port}")
    got = list(BinlogReader(conn, 7308, schemas).read_window(start, end))
    assert [r.after["id"] for r in got] == [0, 1, 2, 3]


def test_hostname_lists_servers_with_their_own_ports():
    c = ConnectionOptions(hostname="db1, db2:3307,[::1]:3308", port=3306)
    assert c.hosts() == [("db1", 3306), ("db2", 3307), ("::1", 3308)]
    assert ConnectionOptions(hostname="db1").hosts() == [("db1", 3306)]


# -- MySQL GTID sets: no MySQL server runs here, so its binlogs are built byte by byte --------

UUID_A, UUID_B = "3e11fa47-71ca-11e1-9e33-c80aa9429562", "4f22ab58-82db-22f2-8f44-d91bb8530673"


def _mysql_files():
    """Two MySQL binlog files (PREVIOUS_GTIDS, then transactions: GTID, BEGIN, XID), as a
    replica that took over would hold them: its own files, other positions."""
    from replay_support import Binlog, query, xid

    def sid(u):
        return bytes.fromhex(u.replace("-", ""))

    def previous(intervals):
        body = struct.pack("<Q", len(intervals))
        for u, ranges in intervals:
            body += sid(u) + struct.pack("<Q", len(ranges))
            for lo, hi in ranges:
                body += struct.pack("<QQ", lo, hi + 1)  # stored half-open
        return body

    files, starts = {}, {}
    for name, prev, txns in (
            ("binlog.000007", [(UUID_A, [(1, 5)])], [(UUID_A, 6), (UUID_A, 7), (UUID_A, 8)]),
            ("binlog.000008", [(UUID_A, [(1, 8)])], [(UUID_B, 1)])):
        log = Binlog()
        log.add(E.PREVIOUS_GTIDS, previous(prev))
        for u, n in txns:
            starts[f"{u}:{n}"] = (name, log.add(E.GTID, b"\x01" + sid(u) + struct.pack(
                "<Q", n) + bytes(17))[0])
            log.add(E.QUERY, query(b"BEGIN"))
            log.add(E.XID, xid(n))
        files[name] = log
    return files, starts


class _Dump:
    """A non-blocking dump over the files above: from ``file:pos`` to the end of the last."""

    files: ClassVar[dict] = {}  # the test sets the files every instance reads

    def __init__(self, _kwargs, _id, file, pos, **_kw):
        self.file, self.pos = file, pos

    def batches(self):
        names = sorted(self.files)
        for name in names[names.index(self.file):]:
            log = self.files[name]
            rotate = struct.pack("<Q", 4) + name.encode()
            events = [struct.pack("<IBIIIH", 0, E.ROTATE, 1, 19 + len(rotate), 0, 0x20) + rotate]
            at = 4
            for i, ev in enumerate(log.events):
                if i == 0 or at >= (self.pos if name == self.file else 4):
                    events.append(ev)
                at += len(ev)
            data = b"".join(events)
            evs, p = [], 0
            for ev in events:
                evs.append(E.HEADER.unpack_from(data, p) + (p, p + len(ev)))
                p += len(ev)
            yield data, evs

    def close(self):
        pass


def test_mysql_gtid_sets_find_the_point_in_another_servers_binlog(monkeypatch):
    files, starts = _mysql_files()
    _Dump.files = files
    executed = f"{UUID_A}:1-8,{UUID_B}:1"
    monkeypatch.setattr(failover.E, "DumpStream", _Dump)
    monkeypatch.setattr(failover, "_server_state", lambda kw, flavor: (sorted(files), executed))

    def locate(state):
        return failover.locate({}, 7309, state, "mysql", "2")

    assert locate(f"{UUID_A}:1-7") == starts[f"{UUID_A}:8"]  # in the older file
    assert locate(f"{UUID_A}:1-8") == starts[f"{UUID_B}:1"]  # the newer file opens with it
    end = files["binlog.000008"].pos
    assert locate(executed) == ("binlog.000008", end)  # holds everything: the end
    with pytest.raises(BinlogUnavailable, match="no longer has the binlog"):
        locate(f"{UUID_A}:1-3")  # its oldest file opens after that point
    with pytest.raises(OffsetError, match=f"lacks transactions.*{UUID_A}:1-9"):
        locate(f"{UUID_A}:1-9")
    moved = failover.rebase({}, 7309, BinlogOffset("binlog.000041", 900, 1, 2,
                                                   gtid=f"{UUID_A}:1-7", flavor="mysql",
                                                   server="1"), "2")
    assert (moved.file, moved.pos, moved.events, moved.rows, moved.server) == (
        *starts[f"{UUID_A}:8"], 1, 2, "2")
