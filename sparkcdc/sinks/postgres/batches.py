"""A PostgreSQL target's record of applied batch ids: the ``_sparkcdc_batches`` table of its
schema, one row per app id and target, locked by the transaction that writes a batch (so
two writers of one target take turns) and set in it (so a replayed batch is skipped)."""

from __future__ import annotations

from types import ModuleType
from typing import Any

from sparkcdc.sinks.base import BATCHES_TABLE
from sparkcdc.sinks.postgres.config import PostgresConfig


def ensure(cur: Any, pg: ModuleType, cfg: PostgresConfig) -> None:
    """The table made if absent (``pg``: psycopg)."""
    cur.execute("SELECT to_regclass(%s)", (f'"{cfg.schema}"."{BATCHES_TABLE}"',))
    if cur.fetchone()[0] is not None:
        return
    # writers of several tables may create the schema at once: CREATE ... IF NOT EXISTS
    # races in PostgreSQL, so they take turns (a lock until the transaction ends)
    cur.execute("SELECT pg_advisory_xact_lock(hashtext(%s))", (cfg.schema,))
    cur.execute(pg.sql.SQL("CREATE SCHEMA IF NOT EXISTS {}").format(
        pg.sql.Identifier(cfg.schema)))
    cur.execute(pg.sql.SQL(
        "CREATE TABLE IF NOT EXISTS {} (app_id text NOT NULL, target text NOT NULL, "
        "batch_id bigint NOT NULL, updated_at timestamptz NOT NULL DEFAULT now(), "
        "PRIMARY KEY (app_id, target))").format(_table(pg, cfg)))


def last(cur: Any, pg: ModuleType, cfg: PostgresConfig) -> int | None:
    """The target's last applied batch id under its app id, or None."""
    cur.execute("SELECT to_regclass(%s)", (f'"{cfg.schema}"."{BATCHES_TABLE}"',))
    if cur.fetchone()[0] is None:
        return None
    cur.execute(pg.sql.SQL("SELECT batch_id FROM {} WHERE app_id = %s AND target = %s")
                .format(_table(pg, cfg)), (cfg.app_id, cfg.table))
    row = cur.fetchone()
    return None if row is None else int(row[0])


def lock(cur: Any, pg: ModuleType, cfg: PostgresConfig, app_id: str) -> int:
    """The app id's batch-id row locked until the transaction ends; its batch id."""
    sql = pg.sql.SQL
    cur.execute(sql("INSERT INTO {} (app_id, target, batch_id) VALUES (%s, %s, -1) "
                    "ON CONFLICT DO NOTHING").format(_table(pg, cfg)), (app_id, cfg.table))
    cur.execute(sql("SELECT batch_id FROM {} WHERE app_id = %s AND target = %s "
                    "FOR UPDATE").format(_table(pg, cfg)), (app_id, cfg.table))
    return int(cur.fetchone()[0])


def record(cur: Any, pg: ModuleType, cfg: PostgresConfig, app_id: str, batch_id: int) -> None:
    """``batch_id`` recorded as the app id's last, in the batch's transaction."""
    cur.execute(pg.sql.SQL("UPDATE {} SET batch_id = %s, updated_at = now() "
                           "WHERE app_id = %s AND target = %s").format(_table(pg, cfg)),
                (batch_id, app_id, cfg.table))


def _table(pg: ModuleType, cfg: PostgresConfig) -> Any:
    return pg.sql.Identifier(cfg.schema, BATCHES_TABLE)
