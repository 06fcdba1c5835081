"""The ``postgres`` sink: PostgreSQL through psycopg 3, COPY into a staging table, one
transaction per batch."""

from sparkcdc.sinks.postgres.config import PostgresConfig
from sparkcdc.sinks.postgres.sink import PostgresSink

__all__ = ["PostgresConfig", "PostgresSink"]
