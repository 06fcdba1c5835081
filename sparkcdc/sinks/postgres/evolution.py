"""Schema evolution of a PostgreSQL target: ALTER TABLE statements in one transaction
(PostgreSQL's DDL is transactional), each written to be idempotent."""

from __future__ import annotations

import pyarrow as pa

from sparkcdc.sinks.evolution import Change, ChangeKind
from sparkcdc.sinks.postgres.copy import pg_type


def stored_columns(sink) -> pa.Schema | None:
    """Column names of the target (types as null: the sink maps them itself)."""
    conn = sink.connection()
    with conn.transaction(), conn.cursor() as cur:
        cur.execute("SELECT column_name FROM information_schema.columns WHERE "
                    "table_schema = %s AND table_name = %s ORDER BY ordinal_position",
                    (sink.config.schema, sink.config.table))
        names = [r[0] for r in cur.fetchall()]
    return pa.schema([pa.field(n, pa.null()) for n in names]) if names else None


def evolve(sink, changes: list[Change], keys: tuple[str, ...]) -> None:
    from psycopg import sql


    target = sql.Identifier(sink.config.schema, sink.config.table)
    conn = sink.connection()
    with conn.transaction(), conn.cursor() as cur:
        for c in changes:
            col = sql.Identifier(c.name)
            if c.kind is ChangeKind.ADD:
                cur.execute(sql.SQL("ALTER TABLE {} ADD COLUMN IF NOT EXISTS {} {}").format(
                    target, col, sql.SQL(pg_type(c.column_type))))
            elif c.kind is ChangeKind.DROP:
                cur.execute(sql.SQL("ALTER TABLE {} DROP COLUMN IF EXISTS {}").format(
                    target, col))
            elif c.kind is ChangeKind.RENAME:
                cur.execute(sql.SQL("ALTER TABLE {} RENAME COLUMN {} TO {}").format(
                    target, col, sql.Identifier(c.target_name)))
            elif c.kind is ChangeKind.RETYPE:
                typ = sql.SQL(pg_type(c.column_type))
                cur.execute(sql.SQL("ALTER TABLE {} ALTER COLUMN {} TYPE {} USING {}::{}")
                            .format(target, col, typ, col, typ))
            elif c.kind is ChangeKind.COPY:
                cur.execute(sql.SQL("UPDATE {} SET {} = {} WHERE {} IS NULL").format(
                    target, sql.Identifier(c.target_name), col, sql.Identifier(c.target_name)))


def empty(sink) -> None:
    from psycopg import sql

    if stored_columns(sink) is None:
        return  # not created yet
    conn = sink.connection()
    with conn.transaction(), conn.cursor() as cur:
        cur.execute(sql.SQL("DELETE FROM {}").format(
            sql.Identifier(sink.config.schema, sink.config.table)))
