"""What differs between the two source servers in a test's own SQL: the integers of MariaDB's
Sequence engine (``seq_1_to_N``), which MySQL lacks, and the spelling of the binlog status."""

from __future__ import annotations

from sparkcdc.testing.mariadb import MariaDBSandbox


def is_mysql(sb: MariaDBSandbox) -> bool:
    return sb.info.server == "mysql"


def seq(sb: MariaDBSandbox, hi: int, lo: int = 1) -> str:
    """A table of the integers ``lo``..``hi`` in column ``seq``, for ``FROM``: MariaDB's
    ``seq_<lo>_to_<hi>``; on MySQL a recursive CTE of the same name (the MySQL sandbox allows
    deep recursion)."""
    if not is_mysql(sb):
        return f"seq_{lo}_to_{hi}"
    return (f"(WITH RECURSIVE s (seq) AS (SELECT {lo} UNION ALL SELECT seq + 1 FROM s "
            f"WHERE seq < {hi}) SELECT seq FROM s) AS seq_{lo}_to_{hi}")


def binlog_status(sb: MariaDBSandbox) -> str:
    """The statement that shows the current binlog file and position (its first two columns):
    MariaDB's ``SHOW MASTER STATUS``; MySQL 8.4+ removed that spelling for
    ``SHOW BINARY LOG STATUS``."""
    return "SHOW BINARY LOG STATUS" if is_mysql(sb) else "SHOW MASTER STATUS"
