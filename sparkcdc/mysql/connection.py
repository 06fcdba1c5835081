"""Connection options for a MySQL/MariaDB source and the one place connections are opened.

The password never appears in ``repr``, ``str`` or error messages.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from typing import Any
from urllib.parse import quote

from sparkcdc.errors import AuthenticationFailed, ConnectionFailed


@dataclass(frozen=True)
class ConnectionOptions:
    hostname: str
    port: int = 3306
    username: str = "root"
    password: str = field(default="", repr=False)
    connect_timeout: float = 30.0
    max_retries: int = 3
    server_time_zone: str | None = None  # e.g. "UTC" or "+02:00"; None: the server's

    def __str__(self) -> str:
        return f"{self.username}@{self.hostname}:{self.port}"

    def pymysql_kwargs(self, database: str | None = None) -> dict[str, Any]:
        kw: dict[str, Any] = dict(host=self.hostname, port=self.port, user=self.username,
                                  password=self.password, database=database,
                                  connect_timeout=max(1, int(self.connect_timeout)),
                                  charset="utf8mb4", autocommit=True)
        if self.server_time_zone:
            kw["init_command"] = f"SET time_zone = '{_tz_literal(self.server_time_zone)}'"
        return kw

    def connect(self, database: str | None = None, **extra: Any):
        """A pymysql connection; retries transient failures ``max_retries`` times."""
        import pymysql

        last: Exception | None = None
        for attempt in range(self.max_retries + 1):
            try:
                return pymysql.connect(**self.pymysql_kwargs(database), **extra)
            except pymysql.err.OperationalError as e:
                code = e.args[0] if e.args else None
                if code in (1045, 1044, 1698):
                    raise AuthenticationFailed(
                        f"the server {self} refused user {self.username!r} ({code})",
                        fix="check the username and password options") from None
                last = e
                if attempt < self.max_retries:
                    time.sleep(min(0.2 * 2 ** attempt, 2.0))
        raise ConnectionFailed(
            f"cannot connect to {self} after {self.max_retries + 1} attempts: {last}",
            fix="check hostname and port, that the server runs, and connect.timeout") from None

    def connectorx_url(self, database: str | None = None) -> str:
        return (f"mysql://{quote(self.username, safe='')}:{quote(self.password, safe='')}"
                f"@{self.hostname}:{self.port}/{quote(database or '', safe='')}")


def _tz_literal(tz: str) -> str:
    return tz.replace("'", "")
