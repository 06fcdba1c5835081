"""A connection of the postgres sink: UTC, UTF-8; a refused login or an unreachable server
said as such."""

from __future__ import annotations

from types import ModuleType
from typing import Any

from sparkcdc.errors import AuthenticationFailed, ConnectionFailed
from sparkcdc.sinks.postgres.config import PostgresConfig


def connect(pg: ModuleType, c: PostgresConfig) -> Any:
    """A new connection through psycopg (``pg``)."""
    try:
        return pg.connect(
            host=c.host, port=c.port, user=c.user, password=c.password,
            dbname=c.database, connect_timeout=c.connect_timeout,
            options="-c TimeZone=UTC -c client_encoding=UTF8")
    except pg.OperationalError as e:
        text = str(e)
        if "password authentication failed" in text:
            raise AuthenticationFailed(
                f"PostgreSQL at {c.host}:{c.port} refused user {c.user!r}",
                fix="check the postgres sink's user and password") from None
        raise ConnectionFailed(f"cannot reach PostgreSQL at {c.host}:{c.port}: {text}",
                               fix="check host/port and that the server runs") from None
