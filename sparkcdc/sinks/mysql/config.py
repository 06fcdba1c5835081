"""Typed options of the ``mysql`` sink."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from sparkcdc.options import REQUIRED, Opt, Options
from sparkcdc.sinks.base import set_per_target

OPTIONS = {
    "hostname": Opt(REQUIRED, "the server's host name or IP"),
    "port": Opt("3306", "an integer port, 1-65535"),
    "username": Opt(REQUIRED, "the user name (needs SELECT, INSERT, UPDATE, DELETE, CREATE, "
                              "CREATE TEMPORARY TABLES on the database)"),
    "password": Opt("", "the password"),
    "database": Opt(REQUIRED, "the target database (created if absent)"),
    "table": Opt(REQUIRED, "the target table's name (created from the change rows if absent)"),
    "app-id": Opt("sparkcdc", "the application id under which batch ids are recorded "
                              "in _sparkcdc_batches"),
    "statement-bytes": Opt("4194304", "a positive integer: the size a multi-row statement "
                                      "grows to before it is sent (below max_allowed_packet)"),
    "connect-timeout": Opt("30", "seconds, a positive integer"),
}


@dataclass(frozen=True)
class MySQLConfig:
    hostname: str
    username: str
    database: str
    table: str
    port: int = 3306
    password: str = ""
    app_id: str = "sparkcdc"
    statement_bytes: int = 4 << 20
    connect_timeout: int = 30

    def __repr__(self) -> str:  # never print the password
        return (f"MySQLConfig(hostname={self.hostname!r}, port={self.port}, "
                f"username={self.username!r}, table={self.database}.{self.table})")

    @classmethod
    def parse(cls, options: Mapping[str, Any]) -> MySQLConfig:
        o = Options("mysql sink", OPTIONS, options)
        return cls(hostname=o.given("hostname"), port=o.given_integer("port", 1, 65535),
                   username=o.given("username"), password=o.get("password") or "",
                   database=o.given("database"), table=o.given("table"),
                   app_id=o.given("app-id"),
                   statement_bytes=o.given_integer("statement-bytes", lo=1024),
                   connect_timeout=o.given_integer("connect-timeout", lo=1))


def target_options(options: Mapping[str, str], db: str, table: str) -> dict[str, str]:
    """A pipeline's MySQL destination is a server: a target ``db.table`` is that table."""
    set_per_target("mysql", options, "database", "table")
    return {**options, "database": db, "table": table}
