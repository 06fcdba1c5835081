"""The server's current binlog offset: the low and high watermarks of the algorithm.

``SHOW MASTER STATUS`` gives the file and position after the last written transaction; MySQL
8.4 removed it in favour of ``SHOW BINARY LOG STATUS`` (MySQL 8.2+). MySQL reports its
executed GTID set in the same row, so both are consistent. MariaDB keeps its GTID position
in ``@@gtid_binlog_pos``, a separate read: a commit between the two reads would pair a
position with a later GTID, so the position is read again and the pair kept only when both
reads agree. Every offset names the ``@@server_id`` whose binlog its position is in, so that
a failover to another server is noticed (``core/offsets.py``).
"""

from __future__ import annotations

import time
from typing import Any

from sparkcdc.core.offsets import BinlogOffset
from sparkcdc.errors import ServerConfigError
from sparkcdc.mysql.connection import ConnectionOptions

_PARSE_ERROR = 1064
_STABLE_ATTEMPTS = 20


def _show_status(cur) -> tuple | None:
    import pymysql

    try:
        cur.execute("SHOW MASTER STATUS")
    except pymysql.err.ProgrammingError as e:  # MySQL 8.4: the old spelling is gone
        if not e.args or e.args[0] != _PARSE_ERROR:
            raise
        cur.execute("SHOW BINARY LOG STATUS")
    row = cur.fetchone()
    if row is None:
        return None
    return tuple(row.values()) if isinstance(row, dict) else tuple(row)


def detect_flavor(cur) -> str:
    cur.execute("SELECT VERSION()")
    row = cur.fetchone()
    version = next(iter(row.values())) if isinstance(row, dict) else row[0]
    return "mariadb" if "mariadb" in str(version).lower() else "mysql"


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
        gtid = (row[4] or "").replace("\n", "") if len(row) > 4 else ""
        cur.execute("SELECT @@GLOBAL.server_id")
        return BinlogOffset(row[0], int(row[1]), gtid=gtid or None, flavor="mysql",
                            server=str(_one(cur.fetchone())))
    for _ in range(_STABLE_ATTEMPTS):
        cur.execute("SELECT @@GLOBAL.gtid_binlog_pos, @@GLOBAL.server_id")
        got = cur.fetchone()
        gtid, server = tuple(got.values()) if isinstance(got, dict) else got
        again = _show_status(cur)
        if again is not None and again[:2] == row[:2]:
            return BinlogOffset(row[0], int(row[1]), gtid=gtid or None, flavor="mariadb",
                                server=str(server))
        row = again if again is not None else row
        time.sleep(0.001)
    # a very busy server: ask it for the exact GTID position of the file and position
    cur.execute("SELECT BINLOG_GTID_POS(%s, %s), @@GLOBAL.server_id", (row[0], int(row[1])))
    got = cur.fetchone()
    gtid, server = tuple(got.values()) if isinstance(got, dict) else got
    return BinlogOffset(row[0], int(row[1]), gtid=gtid or None, flavor="mariadb",
                        server=str(server))


def _one(row: Any) -> Any:
    return next(iter(row.values())) if isinstance(row, dict) else row[0]


__all__ = ["current_offset", "detect_flavor"]
