"""What a binlog reader asks its server besides the stream: a table's schema (from
information_schema, for readers given only table ids), which server it is (for a start
offset that does not say), when each binlog file started
(its first event's time: how far back a server's binlog reaches, for ``validate`` and the
start-up's retention check), which files it has (to name them when the one a read needs is
gone: ``binlog_error``), and what a failed dump means (``dump_failure``).
"""

from __future__ import annotations

from sparkcdc.core.offsets import BinlogOffset
from sparkcdc.core.schema import Column, TableId, TableSchema
from sparkcdc.errors import (
    AuthenticationFailed,
    BinlogUnavailable,
    OffsetError,
    SchemaError,
    ServerConfigError,
    SparkCDCError,
)
from sparkcdc.mysql import server_errors
from sparkcdc.mysql.binlog import protocol as E
from sparkcdc.mysql.connection import ConnectionOptions
from sparkcdc.mysql.offsets import detect_flavor

__all__ = ["binlog_error", "dump_failure", "file_start_timestamps", "load_table_schema",
           "server_flavor"]


def server_flavor(conn: ConnectionOptions) -> str:
    """``"mariadb"`` or ``"mysql"``: how to read this server's binlog. A file-and-position
    offset (no GTID state) says ``mariadb`` whoever made it; read as MariaDB's, a MySQL
    binlog fails at its next file's previous-GTIDs event."""
    with conn.connect() as c, c.cursor() as cur:
        return detect_flavor(cur)


def load_table_schema(conn: ConnectionOptions, table_id: TableId) -> TableSchema:
    """A table's schema from information_schema (for readers given only table ids)."""
    with conn.connect() as c, c.cursor() as cur:
        cur.execute(
            "SELECT COLUMN_NAME, COLUMN_TYPE, IS_NULLABLE, CHARACTER_SET_NAME, COLLATION_NAME "
            "FROM information_schema.COLUMNS WHERE TABLE_SCHEMA = %s AND TABLE_NAME = %s "
            "ORDER BY ORDINAL_POSITION", (table_id.database, table_id.table))
        cols = tuple(Column(n, t, nl == "YES", cs, co) for n, t, nl, cs, co in cur.fetchall())
        cur.execute(
            "SELECT COLUMN_NAME FROM information_schema.STATISTICS WHERE TABLE_SCHEMA = %s "
            "AND TABLE_NAME = %s AND INDEX_NAME = 'PRIMARY' ORDER BY SEQ_IN_INDEX",
            (table_id.database, table_id.table))
        pk = tuple(r[0] for r in cur.fetchall())
    if not cols:
        raise SchemaError(f"table {table_id} does not exist or is not visible to "
                          f"{conn.username!r}", fix="check the table name and SELECT grants")
    return TableSchema(table_id, cols, pk, pk[0] if pk else cols[0].name)


def file_start_timestamps(conn: ConnectionOptions, server_id: int, files: list[str], *,
                          flavor: str = "mariadb") -> list[int | None]:
    """When each binlog file was started (epoch seconds of its first event); None if gone."""
    import pymysql


    base = conn.dump_kwargs()
    out: list[int | None] = []
    for f in files:
        ts: int | None = None
        stream = E.DumpStream(base, server_id, f, 4, blocking=False, heartbeat=None,
                              read_timeout=30)
        try:
            for _data, evs in stream.batches():
                first = next((h for h in evs if h[1] == E.FORMAT_DESCRIPTION and h[4]), None)
                if first is not None:
                    ts = first[0]
                    break
        except pymysql.err.MySQLError as e:
            if server_errors.code(e) != server_errors.BINLOG_ERROR:
                raise
        finally:
            stream.close()
        out.append(ts)
    return out


def dump_failure(conn: ConnectionOptions, e: Exception, resume: BinlogOffset) -> str:
    """Why a binlog dump from ``resume`` failed, as the reader logs it before reconnecting,
    when another try may succeed (a lost connection); raised as a typed error when no try
    can: the binlog's own error (``binlog_error``), a refused user, a missing grant, or an
    exception that is not the server's at all."""
    code = server_errors.code(e)
    if code == server_errors.BINLOG_ERROR:
        raise binlog_error(conn, e, resume) from None
    if code in (1045, 1044, 1698):
        raise AuthenticationFailed(
            f"the server {conn} refused user {conn.username!r} for binlog reading ({code})",
            fix="check the username and password options") from None
    if code in (1227, 1142):
        raise ServerConfigError(
            f"user {conn.username!r} may not read the binlog of {conn}",
            fix="GRANT REPLICATION SLAVE, REPLICATION CLIENT ON *.* TO the user") from None
    if not server_errors.lost(e):
        raise e
    return f"the binlog connection failed ({code}): {server_errors.first_line(e)}"


def binlog_error(conn: ConnectionOptions, e: Exception, resume: BinlogOffset) -> Exception:
    """What the server's binlog error to a dump from ``resume`` means: the file is gone
    (``BinlogUnavailable``, naming the files the server has), or the offset is not one it
    can stream from."""
    msg = server_errors.first_line(e)
    low = msg.lower()
    if "could not find" in low or "purged" in low or "not found" in low:
        files = _server_files(conn)
        have = f"{files[0]} .. {files[-1]}" if files else "no binlog files"
        return BinlogUnavailable(
            f"binlog file {resume.file!r} is no longer on the server {conn} (it has "
            f"{have}); cannot read from {resume}: {msg}",
            fix="raise the server's binlog retention (binlog_expire_logs_seconds / "
                "expire_logs_days) and restart capture with a new snapshot")
    return OffsetError(f"the server {conn} cannot stream from {resume}: {msg}",
                       fix="resume from an offset the reader produced or from "
                           "SHOW MASTER STATUS")


def _server_files(conn: ConnectionOptions) -> list[str]:
    import pymysql

    try:
        with conn.connect() as c, c.cursor() as cur:
            cur.execute("SHOW BINARY LOGS")
            return [r[0] for r in cur.fetchall()]
    except (SparkCDCError, pymysql.err.MySQLError):  # only for the message
        return []
