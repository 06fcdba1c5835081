"""Typed options of the ``postgres`` sink."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from sparkcdc.options import REQUIRED, Opt, Options
from sparkcdc.sinks.base import set_per_target

OPTIONS = {
    "host": Opt("127.0.0.1", "the server's host name or IP"),
    "port": Opt("5432", "an integer port, 1-65535"),
    "user": Opt(REQUIRED, "the user name (needs CREATE on the schema, or an existing table)"),
    "password": Opt("", "the password"),
    "database": Opt(REQUIRED, "the database name"),
    "schema": Opt("public", "the schema holding the table and _sparkcdc_batches"),
    "table": Opt(REQUIRED, "the target table's name (created from the change rows if absent)"),
    "app-id": Opt("sparkcdc", "the application id under which batch ids are recorded "
                              "in _sparkcdc_batches"),
    "connect-timeout": Opt("30", "seconds, a positive integer"),
}


@dataclass(frozen=True)
class PostgresConfig:
    user: str
    database: str
    table: str
    host: str = "127.0.0.1"
    port: int = 5432
    password: str = ""
    schema: str = "public"
    app_id: str = "sparkcdc"
    connect_timeout: int = 30

    def __repr__(self) -> str:  # never print the password
        return (f"PostgresConfig(host={self.host!r}, port={self.port}, user={self.user!r}, "
                f"database={self.database!r}, table={self.schema}.{self.table})")

    @classmethod
    def parse(cls, options: Mapping[str, Any]) -> PostgresConfig:
        o = Options("postgres sink", OPTIONS, options)
        port, timeout = o.given_integer("port", 1, 65535), o.given_integer("connect-timeout", lo=1)
        return cls(host=o.given("host"), port=port, user=o.given("user"),
                   password=o.get("password") or "", database=o.given("database"),
                   schema=o.given("schema"), table=o.given("table"), app_id=o.given("app-id"),
                   connect_timeout=timeout)


def target_options(options: Mapping[str, str], db: str, table: str) -> dict[str, str]:
    """A pipeline's PostgreSQL destination is a database: a target ``db.table`` is the
    table ``table`` in the schema ``db``, unless ``schema`` names one schema for all."""
    set_per_target("postgres", options, "table")
    return {"schema": db, **options, "table": table}
