"""The server's current binlog offset: the low and high watermarks of the algorithm.

``SHOW MASTER STATUS`` gives the file and position after the last written transaction; MySQL
8.4 removed it in favour of ``SHOW BINARY LOG STATUS`` (MySQL 8.2+). MySQL reports its
executed GTID set in the same row, so both are consistent. MariaDB keeps its GTID position
in ``@@gtid_binlog_pos``, a separate read: a commit between the two reads would pair a
position with a later GTID, so the position is read again and the pair kept only when both
reads agree. Every offset names the ``@@server_id`` whose binlog its position is in, so that
a failover to another server is noticed (``core/offsets.py``).

**Every transaction before the offset is visible when it is returned.** A server writes a
transaction to the binlog, then commits it in InnoDB: between the two, the status already
counts it but no read can see it. A low watermark read in that gap, with the chunk selected
right after, would leave the transaction out of both the chunk and the chunk's window: its
row lost for good (docs/mysql-findings.md, finding 19; on MySQL one low watermark in seven
under four writers, on MariaDB one in two hundred). So the read waits for that gap to close:
MySQL's ``@@gtid_owned`` names the transactions between binlog and commit (those without a
GTID are counted by ``Ongoing_anonymous_transaction_count``), and the wait ends when they are
executed (without GTIDs, when as many transactions follow the position as the count: commits
in binlog order leave the uncommitted ones last, so the count need not reach zero); MariaDB's ``START TRANSACTION WITH CONSISTENT SNAPSHOT`` tells the binlog position
its read view holds (``binlog_snapshot_position``), and the offset is kept when that is at
or past it. Commits follow binlog order on both (``binlog_order_commits``), so the waits are
as long as a commit (an fsync, a semi-sync acknowledgement), not as long as a transaction.
"""

from __future__ import annotations

import logging
import os
import re
import time
import weakref
from collections.abc import Iterator
from typing import Any

from sparkcdc.core.offsets import BinlogOffset, file_index
from sparkcdc.errors import ServerConfigError
from sparkcdc.mysql.connection import ConnectionOptions

_PARSE_ERROR = 1064
_STABLE_ATTEMPTS = 20
_OWNER = re.compile(r"#\d+")  # @@gtid_owned's "uuid:7#12": GTID 7, owned by thread 12
_POLL_SECONDS = 0.0005
_WARN_EVERY_SECONDS = 10.0

log = logging.getLogger(__name__)


# the connections (weakly) whose server refused ``SHOW MASTER STATUS``: asked the new
# spelling first after that, so a commit wait's polls cost one round trip each, not two
_NEW_SPELLING: weakref.WeakSet = weakref.WeakSet()


def _show_status(cur) -> tuple | None:
    import pymysql

    conn = cur.connection
    if conn in _NEW_SPELLING:
        cur.execute("SHOW BINARY LOG STATUS")
    else:
        try:
            cur.execute("SHOW MASTER STATUS")
        except pymysql.err.ProgrammingError as e:  # MySQL 8.4: the old spelling is gone
            if not e.args or e.args[0] != _PARSE_ERROR:
                raise
            cur.execute("SHOW BINARY LOG STATUS")
            _NEW_SPELLING.add(conn)
    row = cur.fetchone()
    if row is None:
        return None
    return _values(row)


# variables only MariaDB has: they tell it apart whatever its version text says
MARIADB_ONLY_VARIABLES = ("gtid_domain_id", "aria_block_size")


def names_mariadb(version: object, comment: object = "", variables: Any = ()) -> bool:
    """Whether a server is MariaDB, from ``@@version``, ``@@version_comment`` and the names
    of the variables read (any container). The texts can be changed: a MariaDB started with
    ``--version=5.7.19-10.11.19-log`` (for tools that accept only MySQL, such as Debezium)
    names neither server, and read as MySQL it would be asked for MySQL's variables; a
    variable only MariaDB has settles it."""
    return ("mariadb" in f"{version or ''} {comment or ''}".lower()
            or any(name in variables for name in MARIADB_ONLY_VARIABLES))


def detect_flavor(cur) -> str:
    """``"mariadb"`` or ``"mysql"`` (``names_mariadb``): the texts first, then, when they
    name neither, one variable only MariaDB has."""
    cur.execute("SELECT VERSION(), @@version_comment")
    version, comment = _values(cur.fetchone())
    if names_mariadb(version, comment):
        return "mariadb"
    cur.execute(f"SHOW GLOBAL VARIABLES LIKE '{MARIADB_ONLY_VARIABLES[0]}'")
    return "mariadb" if cur.fetchall() else "mysql"


def current_offset(conn_or_cursor: Any, flavor: str | None = None) -> BinlogOffset:
    """The current binlog offset (a transaction boundary) with its GTID state.

    Accepts a ``ConnectionOptions``, a pymysql connection, or a cursor. ``flavor`` is
    ``"mariadb"`` or ``"mysql"``; ``None`` asks the server.
    """

    if isinstance(conn_or_cursor, ConnectionOptions):
        with conn_or_cursor.connect() as c, c.cursor() as cur:
            return _current(cur, flavor)
    if hasattr(conn_or_cursor, "cursor") and not hasattr(conn_or_cursor, "fetchone"):
        with conn_or_cursor.cursor() as cur:
            return _current(cur, flavor)
    return _current(conn_or_cursor, flavor)


def _current(cur, flavor: str | None) -> BinlogOffset:
    flavor = flavor or detect_flavor(cur)
    if flavor not in ("mariadb", "mysql"):
        raise ValueError(f"flavor must be 'mariadb' or 'mysql', not {flavor!r}")
    row = _show_status(cur)
    if row is None:
        raise ServerConfigError(
            "the server has binary logging off (SHOW MASTER STATUS is empty)",
            fix="start the server with log_bin (and binlog_format=ROW, binlog_row_image=FULL)")
    if flavor == "mysql":
        return _mysql_offset(cur, row)
    for _ in range(_STABLE_ATTEMPTS):
        cur.execute("SELECT @@GLOBAL.gtid_binlog_pos, @@GLOBAL.server_id")
        gtid, server = _values(cur.fetchone())
        again = _show_status(cur)
        if (again is not None and again[:2] == row[:2]
                and _snapshot_position(cur) >= _file_pos(row)):
            return BinlogOffset(row[0], int(row[1]), gtid=gtid or None, flavor="mariadb",
                                server=str(server))
        row = again if again is not None else row
        time.sleep(0.001)
    # a very busy server: the position a read view holds, with its exact GTID position
    row = _snapshot_position(cur)
    cur.execute("SELECT BINLOG_GTID_POS(%s, %s), @@GLOBAL.server_id", (row[0], int(row[1])))
    got = cur.fetchone()
    gtid, server = tuple(got.values()) if isinstance(got, dict) else got
    return BinlogOffset(row[0], int(row[1]), gtid=gtid or None, flavor="mariadb",
                        server=str(server))


def _mysql_offset(cur, row: tuple) -> BinlogOffset:
    """MySQL's position once every transaction before it is visible, with the GTID set of
    exactly those transactions.

    The status row's set is read before its position, so it can lack a transaction the
    position covers (one written, not yet committed): an offset with that set resumes on
    another server (a failover) by reading the transaction again, a change doubled. Read
    again once the wait is over, the set holds every transaction before the first
    position; when the position has not moved meanwhile it is exactly theirs, and when it
    has, the transactions written since (``SHOW BINLOG EVENTS`` from the first position
    to the second, a few events) are taken out of it. A server that keeps the list from
    being read (a new file between the two reads) is asked again from its newer
    position; after a few tries the offset keeps the first set, which at worst reads one
    transaction again after a failover."""
    for _ in range(_MYSQL_ATTEMPTS):
        server, owned, mode, ordered = _commit_state(cur)
        _await_mysql_commits(cur, owned, mode, _file_pos(row), ordered=ordered)
        again = _show_status(cur)
        if (mode or "").upper() == "OFF" or again is None:
            return _mysql(row, _status_gtid(row), server)
        later = _status_gtid(again)
        if _file_pos(again) == _file_pos(row):
            return _mysql(row, later, server)
        written = _gtids_between(cur, _file_pos(row), _file_pos(again))
        if written is not None:
            if written:
                cur.execute("SELECT GTID_SUBTRACT(%s, %s)", (later, ",".join(written)))
                later = str(_one(cur.fetchone()) or "").replace("\n", "")
            return _mysql(row, later, server)
        row = again
    return _mysql(row, _status_gtid(row), server)


def _commit_state(cur) -> tuple[Any, str | None, str | None, bool]:
    """``@@server_id``, ``@@gtid_owned``, ``@@gtid_mode`` and whether commits follow binlog
    order (a server without ``binlog_order_commits`` is taken as not promising it)."""
    import pymysql

    try:
        cur.execute("SELECT @@GLOBAL.server_id, @@GLOBAL.gtid_owned, @@GLOBAL.gtid_mode, "
                    "@@GLOBAL.binlog_order_commits")
        server, owned, mode, ordered = _values(cur.fetchone())
        return server, owned, mode, str(ordered).upper() in ("1", "ON")
    except pymysql.err.OperationalError as e:
        if not e.args or e.args[0] != _UNKNOWN_VARIABLE:
            raise
    cur.execute("SELECT @@GLOBAL.server_id, @@GLOBAL.gtid_owned, @@GLOBAL.gtid_mode")
    server, owned, mode = _values(cur.fetchone())
    return server, owned, mode, False


def _mysql(row: tuple, gtid: str, server: Any) -> BinlogOffset:
    return BinlogOffset(row[0], int(row[1]), gtid=gtid or None, flavor="mysql",
                        server=str(server))


_MYSQL_ATTEMPTS = 5
_GTID_NEXT = re.compile(r"GTID_NEXT\s*=\s*'([0-9a-fA-F-]+(?::[0-9A-Za-z_]+)?:\d+)'")
_PAGE = 8  # events a SHOW BINLOG EVENTS asks for at a time
_MAX_EVENTS_BETWEEN = 2000
_TRUNCATED = 1220  # SHOW BINLOG EVENTS met the event being written at the binlog's end
_UNKNOWN_VARIABLE = 1193


def _gtids_between(cur, start: tuple[str, int], end: tuple[str, int]) -> list[str] | None:
    """The GTIDs of the transactions MySQL wrote from ``start`` to ``end`` (a few: the
    time of one status read), or None when they cannot be listed cheaply (another file,
    too many events)."""
    if start[0] != end[0] or end[1] < start[1]:
        return None
    found: list[str] = []
    pos = start[1]
    for event in _events_between(cur, start[0], start[1], end[1]):
        if str(event[2]).startswith("Gtid") and (m := _GTID_NEXT.search(str(event[5]))):
            found.append(m.group(1))
        pos = int(event[4])
    return found if pos >= end[1] else None


def _events_between(cur, file: str, start: int, end: int) -> Iterator[tuple]:
    """The events of one binlog file from ``start`` up to ``end`` (``_MAX_EVENTS_BETWEEN``
    at most), each ``(Log_name, Pos, Event_type, Server_id, End_log_pos, Info)``. Read a
    few at a time: the statement fails as a whole when it reaches an event still being
    written past ``end``, and then one at a time."""
    import pymysql

    pos, page, seen = start, _PAGE, 0
    while pos < end and seen < _MAX_EVENTS_BETWEEN:
        try:
            cur.execute(f"SHOW BINLOG EVENTS IN %s FROM %s LIMIT {page}", (file, pos))
            events = [_values(r) for r in cur.fetchall()]
        except pymysql.err.OperationalError as e:
            if not e.args or e.args[0] != _TRUNCATED or page == 1:
                raise
            page = 1
            continue
        if not events:
            return
        for event in events:
            if int(event[1]) >= end:
                return
            yield event
            pos = int(event[4])
        seen += len(events)


def _transactions_between(cur, start: tuple[str, int], end: tuple[str, int],
                          need: int) -> int:
    """How many transactions MySQL wrote from ``start`` to ``end``, counted up to ``need``
    (each begins with its GTID event, anonymous or not), across the files between."""
    files = [start[0]]
    if end[0] != start[0]:
        cur.execute("SHOW BINARY LOGS")
        names = [str(_values(r)[0]) for r in cur.fetchall()]
        first, last = file_index(start[0]), file_index(end[0])
        files = [n for n in names if first <= file_index(n) <= last]
    count = 0
    for name in files:
        lo = start[1] if name == start[0] else 0
        hi = end[1] if name == end[0] else 1 << 62
        for event in _events_between(cur, name, lo, hi):
            if "Gtid" in str(event[2]):  # Gtid, Anonymous_Gtid, Gtid_tagged; not Previous_gtids
                count += 1
                if count >= need:
                    return count
    return count


def _status_gtid(row: tuple) -> str:
    return (row[4] or "").replace("\n", "") if len(row) > 4 else ""


def _await_mysql_commits(cur, owned: str | None, mode: str | None, start: tuple[str, int],
                         ordered: bool = True) -> None:
    """Return once every transaction MySQL wrote to its binlog before ``start`` is
    committed, so a read that starts now sees all of them (the module's docstring).
    Transactions with a GTID are named by ``@@gtid_owned`` (read after the position: one
    written before it owns its GTID until it commits) and awaited by name.

    Transactions without one (``gtid_mode`` OFF) only have a count,
    ``Ongoing_anonymous_transaction_count``: those written to the binlog and not yet
    committed (a transaction takes its anonymous ownership when it is written, at its
    commit). Under writes that never pause the count need never reach zero, so it is not
    waited for: MySQL commits in binlog order (``binlog_order_commits``, on by default),
    so the transactions not yet committed are always the binlog's last ones, and when at
    least as many transactions as the count follow ``start`` (the binlog's end read before
    the count), every one before ``start`` is committed. With ``binlog_order_commits`` off,
    or in the permissive modes where both kinds mix, the wait is for a count of zero."""

    pending = _OWNER.sub("", owned or "").replace("\n", "").strip(", ")
    anonymous = (mode or "").upper() != "ON"
    by_order = ordered and (mode or "").upper() == "OFF"
    started = warned = time.monotonic()
    while True:
        if pending:
            cur.execute("SELECT GTID_SUBSET(%s, @@GLOBAL.gtid_executed)", (pending,))
            if int(_one(cur.fetchone())) == 1:
                pending = ""
        if anonymous and not pending:
            end = _show_status(cur) if by_order else None  # before the count
            cur.execute("SHOW GLOBAL STATUS LIKE 'Ongoing_anonymous_transaction_count'")
            got = cur.fetchone()
            count = int(_values(got)[1]) if got is not None else 0
            anonymous = count > 0 and not (
                end is not None
                and _transactions_between(cur, start, _file_pos(end), count) >= count)
        if not pending and not anonymous:
            return
        now = time.monotonic()
        if now - warned >= _WARN_EVERY_SECONDS:
            warned = now
            log.warning("binlog position %s:%s: waited %.0f s for %s to commit (written to "
                        "the binlog, not yet visible); a snapshot chunk cannot start before",
                        start[0], start[1], now - started,
                        f"transactions {pending}" if pending else
                        "transactions without a GTID (gtid_mode=ON names them, so the wait "
                        "is for those alone)")
        time.sleep(_POLL_SECONDS)


def _snapshot_position(cur) -> tuple[str, int]:
    """The binlog file and position a MariaDB read view opened now holds: every
    transaction before it is committed and visible (the module's docstring)."""
    cur.execute("START TRANSACTION WITH CONSISTENT SNAPSHOT")
    try:
        cur.execute("SHOW STATUS LIKE 'binlog_snapshot_%'")
        got = dict(_values(r) for r in cur.fetchall())
    finally:
        cur.execute("COMMIT")
    return (os.path.basename(str(got["Binlog_snapshot_file"])),
            int(got["Binlog_snapshot_position"]))


def _file_pos(row: tuple) -> tuple[str, int]:
    return str(row[0]), int(row[1])


def _values(row: Any) -> tuple:
    return tuple(row.values()) if isinstance(row, dict) else tuple(row)


def _one(row: Any) -> Any:
    return next(iter(row.values())) if isinstance(row, dict) else row[0]


__all__ = ["current_offset", "detect_flavor", "names_mariadb"]
