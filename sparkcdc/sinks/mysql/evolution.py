"""Schema evolution of a MySQL/MariaDB target: ALTER TABLE statements, each committing on
its own and each idempotent (a column is added only if the table lacks it, dropped only if it
has it: MySQL has no ``ADD COLUMN IF NOT EXISTS``), so a run stopped between two does the
rest again."""

from __future__ import annotations

import pyarrow as pa

from sparkcdc.sinks.evolution import Change, ChangeKind
from sparkcdc.sinks.mysql.text import mysql_type, q


def stored_columns(sink) -> pa.Schema | None:
    """Column names of the target (types as null: the sink maps them itself)."""
    conn = sink.connection()
    with conn.cursor() as cur:
        cur.execute("SELECT column_name FROM information_schema.columns WHERE "
                    "table_schema = %s AND table_name = %s ORDER BY ordinal_position",
                    (sink.config.database, sink.config.table))
        names = [r[0] for r in cur.fetchall()]
    conn.commit()
    return pa.schema([pa.field(n, pa.null()) for n in names]) if names else None


def _has_column(cur, sink, name: str) -> bool:
    cur.execute("SELECT 1 FROM information_schema.columns WHERE table_schema = %s AND "
                "table_name = %s AND column_name = %s",
                (sink.config.database, sink.config.table, name))
    return cur.fetchone() is not None


def evolve(sink, changes: list[Change], keys: tuple[str, ...]) -> None:
    target = f"{q(sink.config.database)}.{q(sink.config.table)}"
    conn = sink.connection()
    with conn.cursor() as cur:
        for c in changes:
            if c.kind is ChangeKind.ADD:
                if not _has_column(cur, sink, c.name):
                    cur.execute(f"ALTER TABLE {target} ADD COLUMN {q(c.name)} "
                                f"{mysql_type(c.column_type)}")
            elif c.kind is ChangeKind.DROP:
                if _has_column(cur, sink, c.name):
                    cur.execute(f"ALTER TABLE {target} DROP COLUMN {q(c.name)}")
            elif c.kind is ChangeKind.RENAME:
                cur.execute(f"ALTER TABLE {target} RENAME COLUMN {q(c.name)} TO "
                            f"{q(c.target_name)}")
            elif c.kind is ChangeKind.RETYPE:
                key = c.name in keys
                cur.execute(f"ALTER TABLE {target} MODIFY COLUMN {q(c.name)} "
                            f"{mysql_type(c.column_type, key)}" + (" NOT NULL" if key else ""))
            elif c.kind is ChangeKind.COPY:
                cur.execute(f"UPDATE {target} SET {q(c.target_name)} = {q(c.name)} "
                            f"WHERE {q(c.target_name)} IS NULL")
    conn.commit()


def empty(sink) -> None:
    if stored_columns(sink) is None:
        return  # not created yet
    conn = sink.connection()
    with conn.cursor() as cur:
        cur.execute(f"DELETE FROM {q(sink.config.database)}.{q(sink.config.table)}")
    conn.commit()
