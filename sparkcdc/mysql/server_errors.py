"""What a MySQL or MariaDB driver error means to the code that meets it: its server or
client code, whether the connection was lost, and a one-line description for a message.

The connection helpers (``connection.retry_lost``) and the binlog reader (its own
reconnects) decide on the same codes; they are written here once.
"""

from __future__ import annotations

LOST = (2006, 2013, 2055)  # server gone away, lost during a query, lost at the handshake
# the binlog reader also reconnects after a server shutdown (1053), a killed connection
# (1927) and a refused one during a restart (2003)
RECONNECT = frozenset({1053, 1927, 2003, *LOST})
BINLOG_ERROR = 1236  # the server could not read its binlog (purged file, bad position)


def code(e: BaseException) -> int | None:
    """The driver error's numeric code, or None for anything else."""
    import pymysql

    if isinstance(e, pymysql.err.MySQLError) and e.args and isinstance(e.args[0], int):
        return e.args[0]
    return None


def lost(e: BaseException) -> bool:
    """A broken connection, worth a reconnect, as opposed to a refusal or a bug."""
    import pymysql

    if isinstance(e, pymysql.err.InterfaceError):
        return True  # pymysql's "connection already closed"
    return code(e) in RECONNECT


def first_line(e: BaseException) -> str:
    """The first line of the server's message (else of the exception's text)."""
    import pymysql

    if isinstance(e, pymysql.err.MySQLError) and len(e.args) > 1:
        return str(e.args[1]).splitlines()[0] if e.args[1] else str(e.args[0])
    return (str(e).splitlines() or [type(e).__name__])[0]
