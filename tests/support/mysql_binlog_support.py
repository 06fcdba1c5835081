"""What the MySQL-only binlog tests (``tests/mysql/binlog/test_mysql_server.py``,
``test_mysql_partial_json.py``) share: the CDC user's connection to a sandbox, a fresh
database, a reader of its tables, records as plain tuples, and the event types MySQL itself
lists."""

from __future__ import annotations

import uuid

from sparkcdc.core.schema import TableId
from sparkcdc.mysql.binlog.reader import BinlogReader
from sparkcdc.mysql.binlog.server_lookups import load_table_schema
from sparkcdc.mysql.connection import ConnectionOptions


def cdc(sb, **kw) -> ConnectionOptions:
    """The sandbox's CDC user, no retries: a test fails at once."""
    i = sb.info
    return ConnectionOptions(hostname=i.host, port=i.port, username=i.cdc_user,
                             password=i.cdc_password, max_retries=0, **kw)


def fresh_db(sb) -> str:
    name = f"t_{uuid.uuid4().hex[:10]}"
    sb.execute(f"CREATE DATABASE `{name}`")
    return name


def reader(conn, db, *tables, server_id=7401) -> BinlogReader:
    """A MySQL reader of ``tables`` of ``db``, with the default row decoder."""
    schemas = {TableId(db, t): load_table_schema(conn, TableId(db, t)) for t in tables}
    return BinlogReader(conn, server_id, schemas, flavor="mysql")


def changes(records) -> list[tuple]:
    return [(r.op, r.table_id.table, r.before, r.after) for r in records]


def binlog_events(sb, start) -> list[str]:
    """The event types MySQL itself lists from ``start`` on (inside payloads too)."""
    rows = sb.query(f"SHOW BINLOG EVENTS IN '{start.file}' FROM {start.pos}")
    return [r[2] for r in rows]
