"""A PostgreSQL target's primary key following its source table's key (a table re-keyed on
the source): ``ON CONFLICT`` needs a unique index on exactly the key's columns."""

from __future__ import annotations

from types import ModuleType
from typing import Any

from sparkcdc.errors import SchemaError
from sparkcdc.sinks.base import log
from sparkcdc.sinks.postgres.config import PostgresConfig


def follow_key(cur: Any, pg: ModuleType, cfg: PostgresConfig, pk: list[str]) -> None:
    """The target's unique key made to be ``pk``, the table's key of now: a table re-keyed
    on the source (a new primary key: after its snapshot, its rows kept; during it, taken
    again into the emptied target) is merged by its new key. A target with a unique index
    on it (any unique index without a condition or an expression) is left as it is;
    otherwise its primary key is replaced by one on ``pk``, and the columns only the old key
    held may be null again, as in a target created for the new key. In the batch's
    transaction: a failed batch leaves the old key. ``pg``: psycopg."""
    table = pg.sql.Identifier(cfg.schema, cfg.table)
    sql, I = pg.sql.SQL, pg.sql.Identifier
    target = f'"{cfg.schema}"."{cfg.table}"'
    cur.execute("SELECT i.indisprimary, c.conname, ARRAY(SELECT a.attname FROM "
                "pg_attribute a WHERE a.attrelid = i.indrelid AND a.attnum = ANY(i.indkey)) "
                "FROM pg_index i LEFT JOIN pg_constraint c ON c.conindid = i.indexrelid "
                "AND c.conrelid = i.indrelid WHERE i.indrelid = %s::regclass "
                "AND i.indisunique AND i.indpred IS NULL AND NOT (0 = ANY(i.indkey))",
                (target,))
    found = cur.fetchall()
    if not any(set(cols) == set(pk) and len(cols) == len(pk) for _p, _c, cols in found):
        primary = [(name, cols) for is_pk, name, cols in found if is_pk]
        old = primary[0][1] if primary else []
        log.warning("the key of %s.%s becomes (%s) (it was (%s)): its primary key follows",
                    cfg.schema, cfg.table, ", ".join(pk), ", ".join(old))
        if primary:
            cur.execute(sql("ALTER TABLE {} DROP CONSTRAINT {}").format(
                table, I(primary[0][0])))
            for c in old:
                if c not in pk:
                    cur.execute(sql("ALTER TABLE {} ALTER COLUMN {} DROP NOT NULL").format(
                        table, I(c)))
        try:
            with cur.connection.transaction():  # a savepoint, for the message
                cur.execute(sql("ALTER TABLE {} ADD PRIMARY KEY ({})").format(
                    table, sql(", ").join(map(I, pk))))
        except (pg.errors.UniqueViolation, pg.errors.NotNullViolation) as e:
            raise SchemaError(
                f"the postgres table {cfg.schema}.{cfg.table} cannot take "
                f"the table's new key ({', '.join(pk)}): "
                f"{str(e).splitlines()[0]}",
                fix="its rows hold that key twice or with nulls, so they differ from the "
                    "source: empty the target table (or fix those rows) and run again"
            ) from None
