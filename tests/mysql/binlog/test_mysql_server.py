"""What only MySQL has, read by the binlog reader from a real MySQL 9.7 (issue 33):
compressed transactions (TRANSACTION_PAYLOAD), ``SHOW BINARY LOG STATUS``, a start at a
MySQL GTID set, ``caching_sha2_password`` with and without TLS, and invisible and generated
columns on both read paths (those on MariaDB too); partial JSON updates are
test_mysql_partial_json.py's."""

from __future__ import annotations

import random
import uuid

import pymysql
import pymysql._auth as pymysql_auth
import pytest
from mysql_binlog_support import binlog_events, cdc, changes, fresh_db, reader
from server_support import is_mysql

from sparkcdc.core.schema import TableId
from sparkcdc.errors import AuthenticationFailed
from sparkcdc.mysql.binlog.protocol import DumpStream
from sparkcdc.mysql.binlog.reader import BinlogReader
from sparkcdc.mysql.binlog.server_lookups import load_table_schema
from sparkcdc.mysql.connection import ConnectionOptions
from sparkcdc.mysql.dialect import MySQLDialect
from sparkcdc.mysql.offsets import current_offset
from sparkcdc.mysql.options import StartupOffset
from sparkcdc.mysql.snapshot import read_chunk
from sparkcdc.mysql.validation import validate_server
from sparkcdc.testing.mariadb import CDC_PRIVILEGES, make_tls_files
from sparkcdc.testing.mysql import MySQLSandbox, MySQLSettings

pytestmark = pytest.mark.timeout(300)


# -- compressed transactions ------------------------------------------------------------------


def _workload(sb, db) -> None:
    """Transactions of every shape: one row, many rows, several tables and statements, a big
    one, updates, deletes, a rollback; all values deterministic."""
    cte = ("WITH RECURSIVE s (n) AS (SELECT 1 UNION ALL SELECT n + 1 FROM s WHERE n < {}) "
           "SELECT n FROM s")
    sb.execute("CREATE TABLE a (id INT PRIMARY KEY, v VARCHAR(200), n BIGINT UNSIGNED)",
               "CREATE TABLE b (id BIGINT PRIMARY KEY, d DECIMAL(20,4), t DATETIME(6), "
               "x BLOB, j JSON)", database=db)
    with sb.admin_connection(db) as c, c.cursor() as cur:
        cur.execute("INSERT INTO a VALUES (1, 'one', 18446744073709551615)")
        cur.execute("INSERT INTO a SELECT n + 1, REPEAT(CHAR(65 + n % 26), n % 150), n * 7 "
                    f"FROM ({cte.format(500)}) q")
        cur.execute("INSERT INTO b SELECT n, n / 7, TIMESTAMP '2024-02-29 12:00:00' + "
                    "INTERVAL n SECOND + INTERVAL n MICROSECOND, REPEAT(x'00ff', n % 40), "
                    f"JSON_OBJECT('n', n, 'k', REPEAT('k', n % 30)) FROM ({cte.format(300)}) q")
        c.begin()
        cur.execute("UPDATE a SET v = CONCAT(v, '!') WHERE id % 3 = 0")
        cur.execute("DELETE FROM b WHERE id % 10 = 0")
        cur.execute("INSERT INTO a VALUES (10000, 'in a transaction', 0)")
        cur.execute("UPDATE b SET d = -d, j = JSON_SET(j, '$.k', 'set') WHERE id < 50")
        c.commit()
        c.begin()
        cur.execute("INSERT INTO a VALUES (20000, 'rolled back', 0)")
        c.rollback()
        c.begin()  # a big one: about 2 MB of row images before compression
        cur.execute("INSERT INTO a SELECT 100000 + n, REPEAT('z', 200), n "
                    f"FROM ({cte.format(10000)}) q")
        c.commit()
        cur.execute("UPDATE a SET n = n + 1 WHERE id >= 100000")
        cur.execute("DELETE FROM a WHERE id >= 105000")
        for i in range(20):  # small transactions, one after another
            cur.execute("UPDATE a SET v = %s WHERE id = %s", (f"small {i}", 1 + i))


def _read_all(sb, db):
    conn = cdc(sb)
    start = current_offset(conn)
    _workload(sb, db)
    end = current_offset(conn)
    return conn, start, end, list(reader(conn, db, "a", "b").read_window(start, end))


def test_compressed_transactions_read_exactly(mysql_compressed, mysql_server):
    """The same changes from a MySQL writing every transaction as one zstd
    TRANSACTION_PAYLOAD and from one writing them plain: equal records."""
    zdb, pdb = fresh_db(mysql_compressed), fresh_db(mysql_server)
    _conn, start, _end, zrecs = _read_all(mysql_compressed, zdb)
    _conn, _s, _e, precs = _read_all(mysql_server, pdb)
    kinds = binlog_events(mysql_compressed, start)
    assert kinds.count("Transaction_payload") >= 25, set(kinds)
    assert "Transaction_payload" not in binlog_events(mysql_server, _s)
    assert len(zrecs) == len(precs) > 20000
    assert changes(zrecs) == changes(precs)
    # the target the records make equals the tables
    for table, key in (("a", "id"), ("b", "id")):
        rows: dict = {}
        for r in zrecs:
            if r.table_id.table != table:
                continue
            if r.before is not None:
                rows.pop(r.before[key])
            if r.after is not None:
                rows[r.after[key]] = r.after
        assert sorted(rows) == [r[0] for r in mysql_compressed.query(
            f"SELECT {key} FROM {table} ORDER BY {key}", database=zdb)]
    # offsets are unique and increasing, also between the rows of one payload
    offsets = [r.offset for r in zrecs]
    assert offsets == sorted(offsets) and len(set(offsets)) == len(offsets)


def test_compressed_transactions_resume_and_end_between_rows(mysql_compressed):
    db = fresh_db(mysql_compressed)
    conn, start, end, recs = _read_all(mysql_compressed, db)
    rd = reader(conn, db, "a", "b")
    rng = random.Random(33)
    for k in sorted(rng.sample(range(1, len(recs) - 1), 6)) + [len(recs) - 1]:
        # a resume from a record's offset: exactly the records from it on
        again = list(rd.read_window(recs[k].offset, end))
        assert [r.offset for r in again] == [r.offset for r in recs[k:]]
        assert changes(again) == changes(recs[k:])
        # a window ending at it: exactly the records before it
        head = list(rd.read_window(start, recs[k].offset))
        assert [r.offset for r in head] == [r.offset for r in recs[:k]]


# -- SHOW BINARY LOG STATUS, GTID sets -------------------------------------------------------


def test_current_offset_is_show_binary_log_status(mysql_server, mysql_db):
    """MySQL 8.4 removed SHOW MASTER STATUS: the offset is SHOW BINARY LOG STATUS's row,
    its executed GTID set included, read by the least-privileged CDC user."""
    conn = cdc(mysql_server)
    with pytest.raises(pymysql.err.ProgrammingError):
        mysql_server.query("SHOW MASTER STATUS")
    mysql_server.execute("CREATE TABLE t (id INT PRIMARY KEY)", "INSERT INTO t VALUES (1)",
                         database=mysql_db)
    with conn.connect() as c, c.cursor() as cur:
        cur.execute("SHOW BINARY LOG STATUS")
        file, pos, _do, _ignore, gtids = cur.fetchone()
        off = current_offset(c)
    assert (off.file, off.pos, off.gtid, off.flavor) == (file, pos, gtids.replace("\n", ""),
                                                         "mysql")
    assert off.server == str(mysql_server.info.server_id)
    uuid_ = mysql_server.query("SELECT @@server_uuid")[0][0]
    assert uuid_ in off.gtid


def test_a_start_at_a_mysql_gtid_set_reads_what_the_set_lacks(mysql_server, mysql_db):
    """``scan.startup.specific-offset.gtid-set`` alone: the first transaction the set does
    not hold is found in the binlog (after a FLUSH BINARY LOGS too), and the reader's
    records carry the set growing one GTID at a time."""
    sb, conn = mysql_server, cdc(mysql_server)
    sb.execute("CREATE TABLE t (id INT PRIMARY KEY, v INT)", database=mysql_db)
    sb.execute(*[f"INSERT INTO t VALUES ({i}, 0)" for i in range(1, 6)], database=mysql_db)
    seen = current_offset(conn)  # the consumer has seen everything up to here
    sb.execute("FLUSH BINARY LOGS")
    sb.execute(*[f"UPDATE t SET v = {i} WHERE id = {i}" for i in range(1, 6)],
               "INSERT INTO t VALUES (6, 6)", database=mysql_db)
    end = current_offset(conn)
    with MySQLDialect(conn, server_id=7402) as d:
        start = d.specific_offset(StartupOffset(gtid_set=seen.gtid))
        assert start.file != seen.file  # found in the next file
        recs = list(reader(conn, mysql_db, "t").read_window(start, end))
    assert [(r.op, r.after) for r in recs] == [
        *[("u", {"id": i, "v": i}) for i in range(1, 6)], ("c", {"id": 6, "v": 6})]
    uuid_ = sb.query("SELECT @@server_uuid")[0][0]
    numbers = [int(r.gtid.rpartition(":")[2]) for r in recs]
    assert all(r.gtid.startswith(uuid_ + ":") for r in recs)
    assert numbers == list(range(numbers[0], numbers[0] + 6))
    # each record's offset carries the set before its transaction: a resume from it
    # reads the same again
    again = list(reader(conn, mysql_db, "t").read_window(recs[3].offset, end))
    assert [r.after for r in again] == [r.after for r in recs[3:]]
    assert recs[0].offset.gtid.replace(" ", "") == seen.gtid.replace(" ", "")


# -- caching_sha2_password ----------------------------------------------------------------------


@pytest.fixture(scope="module")
def tls_mysql(tmp_path_factory):
    files = make_tls_files(tmp_path_factory.mktemp("mysql-tls"))
    with MySQLSandbox(MySQLSettings(tls=files), name="tls-mysql") as sb:
        yield sb, files


@pytest.mark.parametrize("tls", [True, False])
def test_caching_sha2_password_users_capture(tls_mysql, tls, monkeypatch):
    """A new caching_sha2_password account (its first login: the server has no cached hash,
    so the full authentication runs: over TLS, or with the server's RSA key without it)
    validates, reads its offset, snapshots and reads the binlog; a second login is the
    fast path."""
    sb, files = tls_mysql
    user, pw = f"sha2_{uuid.uuid4().hex[:6]}", "pw-" + uuid.uuid4().hex[:10]
    require = "REQUIRE SSL" if tls else ""
    sb.execute(f"CREATE USER '{user}'@'%' IDENTIFIED WITH caching_sha2_password BY '{pw}' "
               f"{require}", f"GRANT {CDC_PRIVILEGES} ON *.* TO '{user}'@'%'")
    assert sb.query(f"SELECT plugin FROM mysql.user WHERE user = '{user}'")[0][0] == \
        "caching_sha2_password"
    db = fresh_db(sb)
    sb.execute("CREATE TABLE t (id INT PRIMARY KEY, v VARCHAR(10))",
               "INSERT INTO t VALUES (1, 'a')", database=db)
    kw = ({"ssl_mode": "verify_identity", "ssl_ca": files.ca} if tls
          else {"ssl_mode": "disabled"})
    conn = ConnectionOptions(hostname="127.0.0.1", port=sb.info.port, username=user,
                             password=pw, max_retries=0, **kw)
    if not tls:
        # without TLS the full exchange encrypts the password with the server's RSA key,
        # which pymysql does with the cryptography package: without it, one clear error
        # (pymysql's own is a bare RuntimeError), for SQL and binlog connections alike
        monkeypatch.setattr(pymysql_auth, "_have_cryptography", False)
        with pytest.raises(AuthenticationFailed) as e:
            conn.connect()
        assert "caching_sha2_password" in e.value.message and pw not in str(e.value)
        assert "pip install cryptography" in e.value.fix and "ssl.mode" in e.value.fix
        with pytest.raises(AuthenticationFailed, match="cryptography"):
            DumpStream(conn.dump_kwargs(), 7405, "binlog.000001", 4, blocking=False,
                       heartbeat=None, read_timeout=10).connect()
        monkeypatch.undo()
        import cryptography  # noqa: F401 - a dependency (pymysql[rsa]): the login must work
    for _ in range(2):  # the full authentication, then the cached one
        info = validate_server(conn)
        assert info.flavor == "mysql"
    with conn.connect() as c, c.cursor() as cur:
        cur.execute("SHOW STATUS LIKE 'Ssl_cipher'")
        assert bool(cur.fetchone()[1]) == tls
    schema = load_table_schema(conn, TableId(db, "t"))
    assert read_chunk(conn, schema, None, None).to_pylist() == [{"id": 1, "v": "a"}]
    start = current_offset(conn)
    sb.execute("INSERT INTO t VALUES (2, 'b')", "UPDATE t SET v = 'c' WHERE id = 1",
               database=db)
    end = current_offset(conn)
    recs = list(BinlogReader(conn, 7403, {schema.table_id: schema}).read_window(start, end))
    assert [(r.op, r.after) for r in recs] == [("c", {"id": 2, "v": "b"}),
                                               ("u", {"id": 1, "v": "c"})]


# -- invisible and generated columns -----------------------------------------------------------


def test_invisible_and_generated_columns_on_both_paths(server, server_db):
    """An INVISIBLE column (left out of SELECT *), a VIRTUAL and a STORED generated column:
    the snapshot and the binlog carry all of them, with the same values."""
    sb, db = server, server_db
    conn = cdc(sb)
    sb.execute("CREATE TABLE g (id INT PRIMARY KEY, a INT, hidden VARCHAR(10) INVISIBLE, "
               "v INT AS (a * 2) VIRTUAL, s VARCHAR(20) AS (CONCAT('s', a)) STORED, "
               "z INT)", database=db)
    start = current_offset(conn)
    sb.execute("INSERT INTO g (id, a, hidden, z) VALUES (1, 10, 'h1', 5), (2, 20, NULL, 6)",
               "UPDATE g SET a = a + 1, hidden = 'h2' WHERE id = 2",
               "DELETE FROM g WHERE id = 1",
               "INSERT INTO g (id, a, hidden, z) VALUES (3, NULL, 'h3', 7)", database=db)
    end = current_offset(conn)
    assert [r[0] for r in sb.query(f"SHOW COLUMNS FROM `{db}`.g")] == [
        "id", "a", "hidden", "v", "s", "z"]
    assert len(sb.query(f"SELECT * FROM `{db}`.g")[0]) == 5  # hidden is left out
    schema = load_table_schema(conn, TableId(db, "g"))
    snapshot = sorted(read_chunk(conn, schema, None, None).to_pylist(), key=lambda r: r["id"])
    assert snapshot == [
        {"id": 2, "a": 21, "hidden": "h2", "v": 42, "s": "s21", "z": 6},
        {"id": 3, "a": None, "hidden": "h3", "v": None, "s": None, "z": 7},
    ]
    recs = list(BinlogReader(conn, 7404, {schema.table_id: schema},
                             flavor="mysql" if is_mysql(sb) else "mariadb"
                             ).read_window(start, end))
    rows: dict = {}
    for r in recs:
        if r.before is not None:
            assert rows.pop(r.before["id"]) == r.before
        if r.after is not None:
            rows[r.after["id"]] = r.after
    assert [rows[k] for k in sorted(rows)] == snapshot
    assert recs[0].after == {"id": 1, "a": 10, "hidden": "h1", "v": 20, "s": "s10", "z": 5}


# -- failover between MySQL servers -------------------------------------------------------------


@pytest.fixture
def mysql_pair():
    """A MySQL 9.7 primary and its GTID replica behind one address (a proxy, as a virtual IP
    gives it), both with the CDC user ``pipe`` (made on the primary, replicated)."""
    from sparkcdc.testing.mysql import replicate
    from sparkcdc.testing.proxy import FaultProxy

    with MySQLSandbox(name="my-primary") as primary, MySQLSandbox(name="my-replica") as replica:
        replicate(primary, replica)
        primary.execute("CREATE USER 'pipe'@'%' IDENTIFIED BY 'failover-pw'",
                        f"GRANT {CDC_PRIVILEGES} ON *.* TO 'pipe'@'%'",
                        "CREATE DATABASE shop",
                        "CREATE TABLE shop.t (id INT PRIMARY KEY, v VARCHAR(20))")
        with FaultProxy(primary.info.host, primary.info.port) as proxy:
            yield primary, replica, proxy


def test_a_mysql_failover_under_writes_reads_each_change_once(mysql_pair):
    """A tail through the address, under a writer; the primary stops, its replica is
    promoted and the address moved to it while the tail runs: the reader finds its point
    in the replica's binlog by its MySQL GTID set and reads every change once; a window of
    the old primary's offsets is read again on the new one."""
    import threading

    from sparkcdc.testing.mysql import caught_up, promote

    primary, replica, proxy = mysql_pair
    conn = ConnectionOptions(hostname="127.0.0.1", port=proxy.port, username="pipe",
                             password="failover-pw", max_retries=8)
    schemas = {TableId("shop", "t"): load_table_schema(conn, TableId("shop", "t"))}
    start = current_offset(conn)
    assert start.server == str(primary.info.server_id)
    written, stop = [], threading.Event()

    def writer(sb, first):
        i = first
        with sb.admin_connection("shop") as c, c.cursor() as cur:
            while not stop.is_set() and i < first + 300:
                cur.execute("INSERT INTO t VALUES (%s, 'w')", (i,))
                written.append(i)
                i += 1

    w = threading.Thread(target=writer, args=(primary, 0))
    w.start()
    seen, failed_over = [], False
    reader_ = BinlogReader(conn, 7410, schemas, flavor="mysql")
    for rec in reader_.tail(start, heartbeat_interval=0.5):
        if not hasattr(rec, "op"):  # a heartbeat: the writer may have ended since
            if failed_over and not w.is_alive() and len(seen) == len(written):
                break
            continue
        seen.append(rec.after["id"])
        if len(seen) == 100 and not failed_over:
            stop.set()
            w.join()
            caught_up(primary, replica)
            primary.stop()
            promote(replica)
            proxy.upstream = (replica.info.host, replica.info.port)
            proxy.cut_all()
            failed_over = True
            stop.clear()
            w = threading.Thread(target=writer, args=(replica, 10_000))
            w.start()
        if len(seen) == len(written) and failed_over and not w.is_alive():
            break
    w.join()
    assert seen == written  # each once, in order, across the failover
    assert reader_.reconnects >= 1
    end = current_offset(conn)
    assert end.server == str(replica.info.server_id)
    again = list(BinlogReader(conn, 7411, schemas, flavor="mysql").read_window(start, end))
    assert [r.after["id"] for r in again] == written
    assert all(r.offset.server == end.server for r in again)


# -- damaged events -------------------------------------------------------------------------------


@pytest.mark.parametrize("kind", ["rows", "table_map", "payload"])
def test_a_damaged_event_is_read_again_not_decoded(server, server_db, mysql_compressed,
                                                   monkeypatch, kind):
    """An event whose bytes do not match its CRC32 (bytes lost or changed on the way, as a
    socket shut down under MySQL's sending showed: docs/mysql-findings.md) is read again
    from the last transaction boundary, once, instead of being decoded."""
    from sparkcdc.mysql.binlog import transaction_payload as P

    if kind == "payload":
        if not is_mysql(server):
            pytest.skip("compressed transactions are MySQL's")
        sb, db = mysql_compressed, fresh_db(mysql_compressed)
    else:
        sb, db = server, server_db
    conn = ConnectionOptions(hostname=sb.info.host, port=sb.info.port,
                             username=sb.info.cdc_user, password=sb.info.cdc_password,
                             max_retries=2)
    sb.execute("CREATE TABLE t (id INT PRIMARY KEY, v VARCHAR(50))", database=db)
    start = current_offset(conn)
    sb.execute(*[f"INSERT INTO t VALUES ({i}, 'value {i}')" for i in range(20)], database=db)
    end = current_offset(conn)
    target = {"rows": (23, 30), "table_map": (19,), "payload": (P.TRANSACTION_PAYLOAD,)}[kind]
    real = DumpStream.batches
    damaged = []

    def batches(self):
        for data, evs in real(self):
            evs = list(evs)
            for ev in evs:
                if not damaged and ev[1] in target and ev[4]:
                    e = ev[7]
                    data = bytearray(data)
                    data[e - 6] ^= 0x5A  # a byte of its body
                    data = bytes(data)
                    damaged.append(ev[4])
            yield data, evs

    monkeypatch.setattr(DumpStream, "batches", batches)
    rd = reader(conn, db, "t")
    rd.flavor = "mysql" if is_mysql(sb) else "mariadb"
    recs = list(rd.read_window(start, end))
    assert damaged and rd.reconnects == 1
    assert [r.after for r in recs] == [{"id": i, "v": f"value {i}"} for i in range(20)]

