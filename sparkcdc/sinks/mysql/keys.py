"""A MySQL target's primary key following its source table's key (a table re-keyed on the
source): ``ON DUPLICATE KEY UPDATE`` matches by the target's unique keys, so a target still
keyed the old way would merge two rows of one old key into one."""

from __future__ import annotations

from types import ModuleType
from typing import Any

import pyarrow as pa

from sparkcdc.errors import SchemaError
from sparkcdc.sinks.base import log
from sparkcdc.sinks.mysql.config import MySQLConfig
from sparkcdc.sinks.mysql.text import mysql_type, q


def follow_key(cur: Any, pm: ModuleType, cfg: MySQLConfig, pk: list[str],
               schema: pa.Schema) -> None:
    """The target's unique key made to be ``pk``, the table's key of now: a table re-keyed
    on the source (a new primary key: after its snapshot, its rows kept; during it, taken
    again into the emptied target) is merged by its new key, and ``ON DUPLICATE KEY UPDATE``
    by the old one would make two rows of one old key one. A target with a unique index on
    exactly those columns (whole, not a prefix) is left as it is; otherwise its primary key
    is replaced by one on ``pk``, its columns typed as a target created for the new key
    types them (key columns NOT NULL, text as VARCHAR(255)), in one ALTER TABLE, which
    commits on its own before the batch's transaction. ``pm``: PyMySQL."""
    target = f"{q(cfg.database)}.{q(cfg.table)}"
    cur.execute("SELECT index_name, column_name, sub_part FROM information_schema.statistics "
                "WHERE table_schema = %s AND table_name = %s AND non_unique = 0 "
                "ORDER BY index_name, seq_in_index",
                (cfg.database, cfg.table))
    indexes: dict[str, list[str | None]] = {}
    for name, column, sub_part in cur.fetchall():
        indexes.setdefault(name, []).append(None if sub_part is not None else column)
    if not any(set(cols) == set(pk) and len(cols) == len(pk) for cols in indexes.values()):
        old = [c for c in indexes.get("PRIMARY", []) if c is not None]
        log.warning("the key of %s.%s becomes (%s) (it was (%s)): its primary key follows",
                    cfg.database, cfg.table, ", ".join(pk), ", ".join(old))
        parts = ["DROP PRIMARY KEY"] if "PRIMARY" in indexes else []
        for f in schema:
            if f.name in pk:
                parts.append(f"MODIFY COLUMN {q(f.name)} {mysql_type(f.type, True)} NOT NULL")
            elif f.name in old:
                parts.append(f"MODIFY COLUMN {q(f.name)} {mysql_type(f.type)} NULL")
        parts.append(f"ADD PRIMARY KEY ({', '.join(map(q, pk))})")
        try:
            cur.execute(f"ALTER TABLE {target} " + ", ".join(parts))
        except pm.err.MySQLError as e:
            if not e.args or e.args[0] not in (1062, 1138, 1171, 1265, 1406):
                raise
            raise SchemaError(
                f"the mysql table {cfg.database}.{cfg.table} cannot take "
                f"the table's new key ({', '.join(pk)}): {e.args[-1]}",
                fix="its rows hold that key twice, with nulls or too long, so they differ "
                    "from the source: empty the target table (or fix those rows) and run "
                    "again") from None
