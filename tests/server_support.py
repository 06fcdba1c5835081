"""What differs between the two source servers in a test's own SQL: the integers of MariaDB's
Sequence engine (``seq_1_to_N``), which MySQL lacks."""

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
