"""The source port: everything the pipeline asks of a MySQL or MariaDB source, in one place.

The pipeline (``sparkcdc.pipeline``) reaches the server only through this module, as Flink
CDC's runtime reaches a source only through its ``DataSource`` and ``MetadataAccessor``: an
import contract in ``pyproject.toml`` forbids it every other ``sparkcdc.mysql`` module. So
what the pipeline needs of a source is read here, at a glance:

* the source's options (``SourceConfig``, ``OPTIONS``) and their parts the pipeline plans
  with (``parse_server_ids``, ``parse_chunk_key_option``);
* ``MySQLSource``: the captured tables and their schemas, the server's position now, a
  table's schema now and its current rows, which columns the server filled in rows it
  already held, readiness (``validate``) and the chunked checksums ``verify`` compares;
* what a DDL statement does to a table arrives typed (``core/table_events.py``: dropped,
  renamed, truncated, swapped, changed with its column renames), built by the source's own
  SQL knowledge (``ddl_events``), never by the pipeline's; ``ddl_of`` types a statement
  a checkpoint kept as text;
* the source's column types as Arrow (``arrow_schema``, ``parse_column_type``) and its
  compiled decoder's presence (``default_decoder``, for a cluster's checks).

The Spark source (``sparkcdc.spark``) uses the same ``discover``, so a pipeline plans its
stream from what the source reads.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from typing import Any

import pyarrow as pa

from sparkcdc.core.chunking import ChunkingOptions
from sparkcdc.core.offsets import BinlogOffset
from sparkcdc.core.schema import Column, TableId, TableSchema
from sparkcdc.errors import ConfigError, SchemaError, ServerConfigError
from sparkcdc.mysql import checksums
from sparkcdc.mysql.binlog.fastdecode import default_decoder
from sparkcdc.mysql.binlog.server_lookups import load_table_schema
from sparkcdc.mysql.checksums import KeyRange as ChecksumRange
from sparkcdc.mysql.checksums import arrow_row_hashes, hashed_columns, integral_key, plan_ranges
from sparkcdc.mysql.connection import retry_lost
from sparkcdc.mysql.ddl_events import ddl_of
from sparkcdc.mysql.dialect import MySQLDialect
from sparkcdc.mysql.discovery import discover, filled_by_server, parse_chunk_key_option
from sparkcdc.mysql.offsets import current_offset, detect_flavor
from sparkcdc.mysql.options import OPTIONS, SourceConfig, parse_server_ids
from sparkcdc.mysql.snapshot import read_table
from sparkcdc.mysql.types import STRING, arrow_schema, parse_column_type
from sparkcdc.mysql.validation import validate_all, validate_server

__all__ = [
    "OPTIONS",
    "STRING",
    "ChecksumRange",
    "MySQLSource",
    "SourceConfig",
    "arrow_row_hashes",
    "arrow_schema",
    "ddl_of",
    "default_decoder",
    "hashed_columns",
    "integral_key",
    "parse_chunk_key_option",
    "parse_column_type",
    "parse_server_ids",
    "plan_ranges",
]


class MySQLSource:
    """One source of a pipeline, as its options give it: the questions the pipeline asks
    the server. Each opens what it needs and closes it; a connection lost in the middle of
    a read that can be repeated is retried (``connection.retry_lost``)."""

    def __init__(self, config: SourceConfig):
        self.config = config
        self.connection = config.connection
        self._flavor: str | None = None  # the server's kind, asked at the first position read

    # -- tables -------------------------------------------------------------------------

    def discover(self, known: dict[TableId, TableSchema] | None = None
                 ) -> tuple[dict[TableId, TableSchema], str]:
        """The server checked ready, and the captured tables (sorted) with their schemas and
        the server's flavor; tables in ``known`` keep the schema given
        (``discovery.discover``)."""
        c = self.config
        info = validate_server(self.connection, list(c.server_ids))
        chunk_keys = (dict(parse_chunk_key_option(c.chunk_key_columns))
                      if c.chunk_key_columns else None)
        tables = discover(self.connection, c.database_name, c.table_name, c.table_exclude,
                          chunk_keys, known, skip_helpers=c.online_schema_changes)
        return dict(sorted(tables.items())), info.flavor

    def visible_tables(self) -> list[tuple[str, str, str]]:
        """Every table the CDC user can see: ``(database, table, TABLE_TYPE)``."""
        with self.connection.connect() as c, c.cursor() as cur:
            cur.execute("SELECT TABLE_SCHEMA, TABLE_NAME, TABLE_TYPE FROM "
                        "information_schema.TABLES")
            return [tuple(r) for r in cur.fetchall()]

    def table_schema(self, table_id: TableId) -> TableSchema:
        """One table's schema with its chunk key, as discovery gives it (a table without
        a primary key and no chunk key configured is a ``SchemaError`` naming the fix)."""
        import re

        c = self.config
        chunk_keys = (dict(parse_chunk_key_option(c.chunk_key_columns))
                      if c.chunk_key_columns else None)
        found = discover(self.connection, re.escape(table_id.database),
                         re.escape(table_id.database) + "\\." + re.escape(table_id.table),
                         None, chunk_keys)
        return next(iter(found.values()))

    def schemas_of(self, tables: list[TableId]) -> dict[TableId, TableSchema]:
        """The schemas of ``tables`` that exist now, with the source's chunk keys; a table
        gone is left out (none found: empty)."""
        import logging
        import re

        c = self.config
        chunk_keys = (dict(parse_chunk_key_option(c.chunk_key_columns))
                      if c.chunk_key_columns else None)
        dbs = "|".join(re.escape(d) for d in sorted({t.database for t in tables}))
        names = "|".join(re.escape(t.database) + "\\." + re.escape(t.table)
                         for t in sorted(tables))
        try:
            return discover(self.connection, dbs, names, None, chunk_keys)
        except (ConfigError, SchemaError) as e:  # none of them exists (any more)
            logging.getLogger(__name__).info("tables %s: not found (%s)",
                                             ", ".join(map(str, tables)), e)
            return {}

    def schema_between_positions(self, table_id: TableId
                                 ) -> tuple[BinlogOffset, TableSchema, BinlogOffset]:
        """A table's schema now, with the binlog position read just before and just after
        it on one connection: equal positions mean no DDL came between."""
        with self.connection.connect() as c:
            before = self._offset(c)
            schema = load_table_schema(self.connection, table_id)
            after = self._offset(c)
        return before, schema, after

    def schema_now(self, table_id: TableId) -> TableSchema:
        """A table's schema as information_schema gives it now."""
        return load_table_schema(self.connection, table_id)

    def filled_by_server(self, table_id: TableId, names: list[str]) -> list[str]:
        """Which of the columns the server gave values in rows it already held when they
        were added (``discovery.filled_by_server``)."""
        return filled_by_server(self.connection, table_id, names)

    def current_rows(self, schema: TableSchema) -> Iterator[pa.Table]:
        """A table's current rows, one chunk of its key range at a time, not as of any
        binlog position (``snapshot.read_table``): for a read the binlog corrects later."""
        return read_table(self.connection, schema)

    def check_condition(self, table_id: TableId, where: str) -> str | None:
        """Why ``where`` does not run on ``table_id`` (the server's own words), or None
        when it does: a condition of ``sparkcdc snapshot --where``, tried before it is
        taken."""
        try:
            with self.connection.connect() as c, c.cursor() as cur:
                cur.execute(f"SELECT 1 FROM {table_id.quoted()} WHERE ({where}) LIMIT 0")
        except Exception as e:  # noqa: BLE001 - the server's own words are the answer
            return str(e)[:300]
        return None

    # -- positions ----------------------------------------------------------------------

    def binlog_files(self) -> list[str]:
        """The binlog files the server has now, oldest first."""
        with self.connection.connect() as c, c.cursor() as cur:
            cur.execute("SHOW BINARY LOGS")
            return [r[0] for r in cur.fetchall()]

    def position_now(self) -> BinlogOffset:
        """The server's binlog position now, read again if the connection is lost."""
        def read() -> BinlogOffset:
            with self.connection.connect() as c:
                return self._offset(c)
        return retry_lost(self.connection, "reading the binlog position", read)

    def _offset(self, connection: Any) -> BinlogOffset:
        """``current_offset`` on an open connection, the server's kind asked once per
        source rather than at every read (on MySQL that is two queries)."""
        with connection.cursor() as cur:
            if self._flavor is None:
                self._flavor = detect_flavor(cur)
            return current_offset(cur, self._flavor)

    # -- checks -------------------------------------------------------------------------

    def validate(self, databases: Sequence[str] | None = None, *,
                 server_ids: Sequence[int] | None = None, gtid_start: str | None = None,
                 warnings: list[ServerConfigError] | None = None) -> list[ServerConfigError]:
        """Every problem that keeps the server from CDC, at once (``sparkcdc validate``)."""
        return validate_all(self.connection, server_ids, databases, gtid_start=gtid_start,
                            warnings=warnings)

    def dialect(self, flavor: str, tables: dict[TableId, TableSchema],
                server_id: int | None = None) -> MySQLDialect:
        """A dialect for ``tables`` with the source's chunking; ``server_id`` names its
        binlog reader (one per concurrent reader)."""
        c = self.config
        return MySQLDialect(self.connection, flavor=flavor,
                            server_id=server_id or c.server_ids[0], tables=tables,
                            chunking=ChunkingOptions(chunk_size=c.chunk_size,
                                                     factor_lower=c.factor_lower,
                                                     factor_upper=c.factor_upper),
                            zero_dates_epoch=c.zero_dates_epoch)

    def key_bounds(self, schemas: list[TableSchema], key: str
                   ) -> tuple[int | None, int | None, int]:
        """The lowest and highest value of ``key`` and the row count over ``schemas``."""
        return checksums.key_bounds(self.connection, schemas, key)

    def range_sums(self, schemas: list[TableSchema], cols: list[Column],
                   ranges: list[ChecksumRange], key: str | None) -> dict[int, tuple[int, int]]:
        """Per range, the row count and the sum of the rows' hashes, computed by the server
        (``checksums.range_sums``)."""
        return checksums.range_sums(self.connection, schemas, cols, ranges, key,
                                    self.config.zero_dates_epoch)

    def row_hashes(self, schemas: list[TableSchema], cols: list[Column], keys: list[str],
                   ranges: list[ChecksumRange], key: str | None) -> dict:
        """Each row's key and hash in ``ranges`` (``checksums.row_hashes``)."""
        return checksums.row_hashes(self.connection, schemas, cols, keys, ranges, key,
                                    self.config.zero_dates_epoch)
