"""The current binlog offset is a safe low watermark: every transaction before it is visible
to a read started after it returns (sparkcdc/mysql/offsets.py; finding 19 in
docs/mysql-findings.md). A server writes a transaction to its binlog before it commits it,
and an offset read in between, with a chunk selected right after, lost the transaction's rows:
on MySQL one offset in seven under four writers, on MariaDB one in two hundred."""

from __future__ import annotations

import contextlib
import threading
import time

import pytest
from server_support import is_mysql

from sparkcdc.core import gtid
from sparkcdc.core.offsets import BinlogOffset
from sparkcdc.mysql.connection import ConnectionOptions
from sparkcdc.mysql.dialect import MySQLDialect
from sparkcdc.mysql.discovery import discover
from sparkcdc.mysql.offsets import current_offset
from sparkcdc.testing.mysql import MySQLSandbox, MySQLSettings


def _cdc(sb) -> ConnectionOptions:
    i = sb.info
    return ConnectionOptions(i.host, i.port, i.cdc_user, i.cdc_password)


def _count(cur, table: str) -> int:
    cur.execute(f"SELECT COUNT(*) AS n FROM {table}")
    row = cur.fetchone()
    return int(row["n"] if isinstance(row, dict) else row[0])


def _snapshot_position(cur) -> tuple[str, int]:
    """MariaDB's own word on what a read view opened now holds."""
    cur.execute("START TRANSACTION WITH CONSISTENT SNAPSHOT")
    cur.execute("SHOW STATUS LIKE 'binlog_snapshot_%'")
    got = {(r["Variable_name"] if isinstance(r, dict) else r[0]):
           (r["Value"] if isinstance(r, dict) else r[1]) for r in cur.fetchall()}
    cur.execute("COMMIT")
    return got["Binlog_snapshot_file"].rsplit("/", 1)[-1], int(got["Binlog_snapshot_position"])


def test_every_insert_before_the_offset_is_visible_right_after(server, server_db):
    """Four writers insert without a pause; the reader reads the offset (as the CDC user),
    then counts the rows at once. Afterwards the binlog tells how many inserts each offset
    covered: never more than the count that followed it. And the GTID state each offset
    carries is its position's exactly (MySQL's status row reads the set before the
    position: a transaction written, not committed, was in the position, not the set)."""
    table = f"`{server_db}`.`t`"
    server.execute(f"CREATE TABLE {table} (id BIGINT AUTO_INCREMENT PRIMARY KEY, w INT)")
    conn = _cdc(server)
    flavor = "mysql" if is_mysql(server) else "mariadb"
    start = current_offset(conn, flavor)
    stop = threading.Event()
    errors: list[BaseException] = []

    def write(w: int) -> None:
        c = server.admin_connection(server_db)
        try:
            with c.cursor() as cur:
                while not stop.is_set():
                    cur.execute(f"INSERT INTO {table} (w) VALUES (%s)", (w,))
        except BaseException as e:  # noqa: BLE001 - surfaced below
            errors.append(e)
        finally:
            c.close()

    writers = [threading.Thread(target=write, args=(w,)) for w in range(4)]
    for t in writers:
        t.start()
    probes: list[tuple[BinlogOffset, int]] = []
    behind_view = []
    try:
        with conn.connect() as c, c.cursor() as cur:
            until = time.monotonic() + 5
            while time.monotonic() < until:
                off = current_offset(cur, flavor)
                probes.append((off, _count(cur, table)))
                if flavor == "mariadb":
                    view = _snapshot_position(cur)
                    if view < (off.file, off.pos):
                        behind_view.append((off, view))
    finally:
        stop.set()
        for t in writers:
            t.join()
    assert not errors, errors
    end = current_offset(conn, flavor)

    tables = discover(conn, server_db, rf"{server_db}\.t", None, None)
    with MySQLDialect(conn, server_id=9377, tables=tables, flavor=flavor) as d:
        inserts = sorted(r.offset for r in d.read_window(None, start, end))
    assert len(probes) > 20 and len(inserts) > 1000  # the writers really ran beside the reads
    ahead, wrong_set, sets_checked = [], [], 0
    i = 0
    for off, visible in probes:  # offsets grow, so one pass over the sorted inserts
        while i < len(inserts) and inserts[i] < off:
            i += 1
        if i > visible:
            ahead.append((off, i, visible))
        # the GTID state an offset carries is exactly its transactions': the next insert
        # (its transaction starts at the offset) carries the state it starts from
        nxt = inserts[i] if i < len(inserts) else None
        if nxt is not None and (nxt.file, nxt.pos) == (off.file, off.pos):
            sets_checked += 1
            if gtid.compare(off.gtid, nxt.gtid, flavor) != 0:
                wrong_set.append((off, nxt.gtid))
    assert not ahead, f"{len(ahead)} of {len(probes)} offsets covered inserts a read right " \
                      f"after could not see, first: {ahead[0]}"
    assert not behind_view, behind_view[:3]
    assert sets_checked > len(probes) // 2, (sets_checked, len(probes))
    assert not wrong_set, f"{len(wrong_set)} of {sets_checked} offsets carry a GTID state " \
                          f"other than their position's (a failover would resume elsewhere), " \
                          f"first: {wrong_set[0]}"


@pytest.mark.parametrize("gtid_mode", ["ON", "OFF"])
def test_mysql_offset_waits_for_a_transaction_between_binlog_and_commit(gtid_mode):
    """MySQL told to hold each group commit 300 ms between writing the binlog and committing
    (``binlog_group_commit_sync_delay``) opens the gap wide: an insert sits in the binlog,
    invisible, for 300 ms. An offset read inside the gap returns only once the insert is
    visible, with GTIDs (``@@gtid_owned`` names it) and without (a count of them)."""
    settings = MySQLSettings(gtid_mode=gtid_mode, enforce_gtid_consistency=gtid_mode,
                             extra_args=("--binlog-group-commit-sync-delay=300000",))
    with MySQLSandbox(settings, name=f"offset-gap-{gtid_mode.lower()}") as sb:
        sb.execute("CREATE DATABASE g", "CREATE TABLE g.t (id INT PRIMARY KEY)")
        conn = _cdc(sb)
        before = current_offset(conn, "mysql")
        writer = sb.admin_connection("g")

        def insert() -> None:
            with writer.cursor() as cur:
                cur.execute("INSERT INTO g.t VALUES (1)")

        t = threading.Thread(target=insert)
        t.start()
        try:
            with conn.connect() as c, c.cursor() as cur:
                deadline = time.monotonic() + 0.25
                while (_status_position(cur) == before.pos
                       and time.monotonic() < deadline):
                    time.sleep(0.005)
                assert _status_position(cur) > before.pos, "the insert never reached " \
                    "the binlog inside the gap: the test saw nothing"
                assert _count(cur, "g.t") == 0  # in the binlog, not yet visible: the gap
                off = current_offset(cur, "mysql")
                assert _count(cur, "g.t") == 1
                assert off.pos > before.pos
        finally:
            t.join()
            writer.close()


def test_mysql_offset_without_gtids_under_writes_that_never_pause(monkeypatch):
    """Without GTIDs MySQL only counts the transactions between binlog and commit
    (``Ongoing_anonymous_transaction_count``), and under writes that never pause the count
    need not reach zero: the offset waited for a zero that came only by chance. Commits
    in binlog order leave the uncommitted transactions last, so an offset is taken once as
    many transactions follow it as the count says. Sixteen writers inside the server, each
    pausing its own time between inserts, keep each group commit (held 50 ms between
    binlog and commit) overlapping the next; every offset read among them must have every
    insert the binlog holds before it visible to the count read right after it, and the
    rule must have decided offsets while the count was not zero."""
    from sparkcdc.mysql import offsets

    decided: list[tuple[int, int]] = []
    between = offsets._transactions_between

    def counted(cur, start, end, need):
        got = between(cur, start, end, need)
        decided.append((got, need))
        return got

    monkeypatch.setattr(offsets, "_transactions_between", counted)
    settings = MySQLSettings(gtid_mode="OFF", enforce_gtid_consistency="OFF",
                             extra_args=("--binlog-group-commit-sync-delay=50000",))
    with MySQLSandbox(settings, name="offset-anonymous-busy") as sb:
        sb.execute("CREATE DATABASE g",
                   "CREATE TABLE g.t (id INT AUTO_INCREMENT PRIMARY KEY, v INT)",
                   # a writer inside the server: its next insert a set pause after each commit
                   "CREATE PROCEDURE g.w(pause DOUBLE) BEGIN DECLARE i INT DEFAULT 0; "
                   "WHILE i < 100000000 DO INSERT INTO g.t (v) VALUES (i); DO SLEEP(pause); "
                   "SET i = i + 1; END WHILE; END")
        writers = [sb.admin_connection("g") for _ in range(16)]
        ids = []
        for w in writers:
            with w.cursor() as cur:
                cur.execute("SELECT CONNECTION_ID()")
                ids.append(cur.fetchone()[0])

        def write(conn, pause: float) -> None:
            with conn.cursor() as cur, contextlib.suppress(Exception):
                cur.execute("CALL g.w(%s)", (pause,))  # until its connection is killed

        threads = [threading.Thread(target=write, args=(w, k * 0.003), daemon=True)
                   for k, w in enumerate(writers)]
        for t in threads:
            t.start()
        try:
            with _cdc(sb).connect() as c, c.cursor() as cur:
                time.sleep(0.5)
                seen = []
                for _ in range(20):
                    off = current_offset(cur, "mysql")
                    seen.append((off, _count(cur, "g.t")))  # read right after it
                cur.execute(f"SHOW BINLOG EVENTS IN '{seen[-1][0].file}'")
                inserts = [int(r["End_log_pos"] if isinstance(r, dict) else r[4])
                           for r in cur.fetchall()
                           if "Write_rows" in str(r["Event_type"] if isinstance(r, dict)
                                                  else r[2])]
        finally:
            for i in ids:
                sb.execute(f"KILL {i}")
            for t in threads:
                t.join(10)
        for off, visible in seen:
            written = sum(1 for end in inserts if end <= off.pos)
            assert visible >= written > 0, \
                f"{written - visible} inserts before {off} were not visible after it"
        assert any(got >= need > 0 for got, need in decided), \
            f"no offset was taken while transactions were between binlog and commit: {decided}"


def _status_position(cur) -> int:
    cur.execute("SHOW BINARY LOG STATUS")
    row = cur.fetchone()
    return int(row["Position"] if isinstance(row, dict) else row[1])


def test_a_mariadb_that_reports_a_mysql_version_is_read_as_mariadb():
    """A MariaDB started with ``--version=5.7.19-10.11.19-log`` (what Debezium's MySQL
    connector accepts) has no "MariaDB" in its version: its offsets are still MariaDB's, and
    MySQL's commit wait (``@@gtid_owned``, which MariaDB lacks) is not asked for. Failed with
    error 1193 before the flavor was settled by a MariaDB variable."""
    from sparkcdc.mysql.offsets import detect_flavor
    from sparkcdc.testing.mariadb import MariaDBSandbox, ServerSettings

    with MariaDBSandbox(ServerSettings(version="5.7.19-10.11.19-log"), name="fake-57") as sb:
        assert sb.query("SELECT VERSION()")[0][0] == "5.7.19-10.11.19-log"
        i = sb.info
        conn = ConnectionOptions(hostname=i.host, port=i.port, username=i.cdc_user,
                                 password=i.cdc_password)
        sb.execute("CREATE DATABASE d", "CREATE TABLE d.t (id INT PRIMARY KEY)",
                   "INSERT INTO d.t VALUES (1)")
        with conn.connect() as c, c.cursor() as cur:
            assert detect_flavor(cur) == "mariadb"
        here = current_offset(conn)
        assert here.flavor == "mariadb" and here.gtid and here.gtid.startswith("0-")
        assert MySQLDialect(conn).flavor == "mariadb"


def test_mysql_is_read_as_mysql(mysql_server):
    from sparkcdc.mysql.offsets import detect_flavor

    i = mysql_server.info
    conn = ConnectionOptions(hostname=i.host, port=i.port, username=i.cdc_user,
                             password=i.cdc_password)
    with conn.connect() as c, c.cursor() as cur:
        assert detect_flavor(cur) == "mysql"
    assert current_offset(conn).flavor == "mysql"


def test_mysql_84_is_asked_its_status_once_a_read(mysql_server):
    """MySQL 8.4+ refuses ``SHOW MASTER STATUS``: the connection that met the refusal asks
    ``SHOW BINARY LOG STATUS`` first after that, so the commit wait's polls cost one round
    trip, not two."""
    from sparkcdc.mysql import offsets

    i = mysql_server.info
    conn = ConnectionOptions(hostname=i.host, port=i.port, username=i.cdc_user,
                             password=i.cdc_password)

    class Asked:
        """The cursor, with every statement sent to the server noted."""

        def __init__(self, cur) -> None:
            self.cur, self.connection, self.sent = cur, cur.connection, []

        def execute(self, sql: str):
            self.sent.append(sql)
            return self.cur.execute(sql)

        def fetchone(self):
            return self.cur.fetchone()

    with conn.connect() as c, c.cursor() as cur:
        spy = Asked(cur)
        first = offsets._show_status(spy)
        assert spy.sent == ["SHOW MASTER STATUS", "SHOW BINARY LOG STATUS"]
        for _ in range(5):
            again = offsets._show_status(spy)
        with c.cursor() as other:  # the same connection, another cursor
            spy2 = Asked(other)
            offsets._show_status(spy2)
    assert first is not None and again is not None and again[0] == first[0]
    assert spy.sent[2:] == ["SHOW BINARY LOG STATUS"] * 5
    assert spy2.sent == ["SHOW BINARY LOG STATUS"]
