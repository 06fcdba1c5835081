"""A connection of the mysql sink: UTC, strict, ``NO_BACKSLASH_ESCAPES`` (its literals rely
on it, ``text.py``), no autocommit; a refused login or an unreachable server said as such."""

from __future__ import annotations

from types import ModuleType
from typing import Any

from sparkcdc.errors import AuthenticationFailed, ConnectionFailed
from sparkcdc.sinks.mysql.config import MySQLConfig


def connect(pm: ModuleType, c: MySQLConfig) -> tuple[Any, str]:
    """A new connection through PyMySQL (``pm``) and the server's ``VERSION()``."""
    try:
        conn = pm.connect(
            host=c.hostname, port=c.port, user=c.username, password=c.password,
            charset="utf8mb4", autocommit=False, connect_timeout=c.connect_timeout,
            init_command="SET time_zone = '+00:00', "
                         "sql_mode = 'STRICT_ALL_TABLES,NO_BACKSLASH_ESCAPES,"
                         "NO_ENGINE_SUBSTITUTION'")
    except pm.err.OperationalError as e:
        if e.args and e.args[0] == 1045:
            raise AuthenticationFailed(
                f"MySQL at {c.hostname}:{c.port} refused user {c.username!r}",
                fix="check the mysql sink's username and password") from None
        raise ConnectionFailed(f"cannot reach MySQL at {c.hostname}:{c.port}: {e}",
                               fix="check hostname/port and that the server runs") from None
    with conn.cursor() as cur:
        cur.execute("SELECT VERSION()")
        version = cur.fetchone()[0]
    return conn, str(version)


def server_version(text: str) -> tuple[int, ...]:
    """``(major, minor, patch)`` of a ``VERSION()`` such as ``8.0.36`` or
    ``11.4.2-MariaDB-log``."""
    parts = []
    for p in text.split("-")[0].split(".")[:3]:
        digits = "".join(ch for ch in p if ch.isdigit())
        parts.append(int(digits or 0))
    return tuple(parts)
