"""Resuming a binlog read after a failover: a real MariaDB primary and its GTID replica behind
one address (a proxy, as a virtual IP or a load balancer gives it). The primary is stopped,
the replica promoted, the address pointed at it; offsets of the primary's binlog are then
found in the replica's by their GTID state, each change read once."""

from __future__ import annotations

import itertools
import time

import pytest
from failover_support import FAILOVER_DB, FAILOVER_PASSWORD

from sparkcdc.core.offsets import BinlogOffset
from sparkcdc.core.schema import TableId
from sparkcdc.errors import BinlogUnavailable, OffsetError
from sparkcdc.mysql.binlog.reader import BinlogReader, load_table_schema
from sparkcdc.mysql.connection import ConnectionOptions
from sparkcdc.mysql.offsets import current_offset
from sparkcdc.testing.mariadb import MariaDBSandbox, caught_up, promote
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
    caught_up(primary, replica)
    primary.stop()
    promote(replica)
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
    replica.execute("STOP SLAVE")  # it misses what comes next
    primary.execute(*(f"INSERT INTO {DB}.t VALUES ({i}, 'p')" for i in range(3)))
    seen = current_offset(conn)  # the pipeline has read up to here
    primary.stop()
    promote(replica)
    proxy.upstream = (replica.info.host, replica.info.port)
    proxy.cut_all()
    schemas = {TableId(DB, "t"): load_table_schema(conn, TableId(DB, "t"))}
    with pytest.raises(OffsetError, match="lacks transactions") as e:
        list(BinlogReader(conn, 7305, schemas).read_window(seen, current_offset(conn)))
    assert "sparkcdc snapshot" in e.value.fix
    # written to since, it has higher sequence numbers than the checkpoint, of another
    # history: still refused, never read from a point that only looks right
    replica.execute(*(f"INSERT INTO {DB}.t VALUES ({i}, 'r')" for i in range(10, 16)))
    with pytest.raises(OffsetError, match="does not have the transactions"):
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
    caught_up(primary, replica)
    replica.execute("FLUSH BINARY LOGS")
    last = replica.query("SHOW MASTER STATUS")[0][0]
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
    caught_up(primary, replica)
    primary.stop()
    promote(replica)
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
