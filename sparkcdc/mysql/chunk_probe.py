"""The MySQL/MariaDB ``KeyProbe``: the chunk planner's questions, answered by indexed queries.

Every comparison of keys happens in SQL, so string keys follow the column's collation
(``'a' = 'A'`` and ``'e' = 'é'`` under ``utf8mb4_general_ci``) and the chunks the planner
cuts are exactly the ranges the reader's ``WHERE k >= %s AND k < %s`` will select. Bound
values travel as query parameters, never spliced into SQL. A composite primary key is cut on
its first column (Flink CDC's behaviour); the chunk key comes from discovery.
"""

from __future__ import annotations

import contextlib
import logging
from collections.abc import Iterator
from typing import Any

import pymysql

from sparkcdc.core.chunking import ChunkEnd
from sparkcdc.core.schema import TableSchema, quote_ident
from sparkcdc.errors import ConnectionFailed, SchemaError, ServerConfigError
from sparkcdc.mysql.connection import ConnectionOptions

log = logging.getLogger(__name__)

_LOST = {2006, 2013, 2055}  # server gone away, lost connection, lost at handshake


class MySQLKeyProbe:
    """Answers ``KeyProbe`` questions for one table over an open pymysql connection."""

    def __init__(self, connection: pymysql.connections.Connection, schema: TableSchema, *,
                 window_functions: bool | None = None):
        self.connection = connection
        self.schema = schema
        self.table = schema.table_id.quoted()
        self.key = quote_ident(schema.chunk_key)
        # None: find out on first use (MySQL 5.7 has no ROW_NUMBER())
        self.window_functions = window_functions

    @classmethod
    @contextlib.contextmanager
    def open(cls, options: ConnectionOptions, schema: TableSchema) -> Iterator[MySQLKeyProbe]:
        conn = options.connect()
        try:
            yield cls(conn, schema)
        finally:
            conn.close()

    # -- SQL -------------------------------------------------------------------------------

    def _rows(self, sql: str, args: tuple = ()) -> list[tuple]:
        try:
            with self.connection.cursor() as cur:
                cur.execute(sql, args)
                return list(cur.fetchall())
        except pymysql.err.MySQLError as e:
            raise self._translate(e) from e

    def _translate(self, e: pymysql.err.MySQLError) -> Exception:
        code = e.args[0] if e.args else None
        t = self.schema.table_id
        if code in _LOST:
            return ConnectionFailed(f"lost the connection while planning chunks of {t}: {e}",
                                    fix="the query retries; check the server if it persists")
        if code == 1146:
            return SchemaError(f"table {t} no longer exists while planning its chunks",
                               fix="remove it from table-name, or restart the capture")
        if code == 1054:
            return SchemaError(
                f"chunk key column {self.schema.chunk_key!r} of {t} no longer exists",
                fix="set scan.incremental.snapshot.chunk.key-column to an existing column")
        if code in (1142, 1143, 1044):
            return ServerConfigError(
                f"the CDC user may not read {t}: {e.args[1] if len(e.args) > 1 else e}",
                fix=f"GRANT SELECT ON {quote_ident(t.database)}.* TO <the CDC user>")
        return e

    # -- KeyProbe --------------------------------------------------------------------------

    def min_max(self) -> tuple[Any, Any] | None:
        lo, hi = self._rows(f"SELECT MIN({self.key}), MAX({self.key}) FROM {self.table}")[0]
        return None if lo is None else (lo, hi)

    def row_count(self) -> int:
        """InnoDB's estimate: it can be far off, and 0 for a table filled moments ago (stats
        are refreshed in the background); the planner then walks, which needs no count."""
        rows = self._rows("SELECT TABLE_ROWS FROM information_schema.TABLES "
                          "WHERE TABLE_SCHEMA = %s AND TABLE_NAME = %s",
                          (self.schema.table_id.database, self.schema.table_id.table))
        return int(rows[0][0] or 0) if rows else 0

    def next_chunk_end(self, start: Any, chunk_size: int) -> ChunkEnd | None:
        k, t = self.key, self.table
        if start is None:
            rows = self._rows(f"SELECT {k} FROM {t} WHERE {k} IS NOT NULL ORDER BY {k} "
                              f"LIMIT 1 OFFSET %s", (chunk_size,))
            return ChunkEnd(rows[0][0], True) if rows else None
        # the server says whether the key moved past start: equality follows its collation
        rows = self._rows(f"SELECT {k}, {k} > %s FROM {t} WHERE {k} >= %s ORDER BY {k} "
                          f"LIMIT 1 OFFSET %s", (start, start, chunk_size))
        return ChunkEnd(rows[0][0], bool(rows[0][1])) if rows else None

    def next_key_after(self, value: Any) -> Any | None:
        return self._rows(f"SELECT MIN({self.key}) FROM {self.table} WHERE {self.key} > %s",
                          (value,))[0][0]

    def sample(self, after: Any, every: int, limit: int) -> list[Any]:
        if self.window_functions is not False:
            try:
                keys = self._sample_window(after, every, limit)
            except pymysql.err.MySQLError as e:
                no_window = (isinstance(e, pymysql.err.ProgrammingError) and e.args
                             and e.args[0] == 1064 and self.window_functions is None)
                if not no_window:  # 1064 on first use: no ROW_NUMBER (MySQL 5.7)
                    raise self._translate(e) from e
                log.info("server has no window functions; sampling %s by walking",
                         self.schema.table_id)
                self.window_functions = False
            else:
                self.window_functions = True
                return keys
        return self._sample_walk(after, every, limit)

    def _sample_window(self, after: Any, every: int, limit: int) -> list[Any]:
        # rows >= after, numbered in key order; keep rows every, 2*every, ... (0-based);
        # GROUP BY and "> after" drop keys equal by the collation
        k, t = self.key, self.table
        where, args = (f"WHERE {k} IS NOT NULL", ()) if after is None else (
            f"WHERE {k} >= %s", (after,))
        outer, oargs = ("", ()) if after is None else ("AND ck > %s", (after,))
        sql = (f"SELECT ck FROM (SELECT ck, ROW_NUMBER() OVER (ORDER BY ck) AS rn FROM "
               f"(SELECT {k} AS ck FROM {t} {where} ORDER BY {k} LIMIT %s) w) x "
               f"WHERE MOD(rn - 1, %s) = 0 AND rn > 1 {outer} GROUP BY ck ORDER BY ck")
        with self.connection.cursor() as cur:
            cur.execute(sql, (*args, every * limit + 1, every, *oargs))
            return [r[0] for r in cur.fetchall()]

    def _sample_walk(self, after: Any, every: int, limit: int) -> list[Any]:
        keys: list[Any] = []
        cursor = after
        while len(keys) < limit:
            nxt = self.next_chunk_end(cursor, every)
            if nxt is None:
                break
            key = nxt.key if nxt.after_start else self.next_key_after(cursor)
            if key is None:
                break
            keys.append(key)
            cursor = key
        return keys
