"""The MySQL/MariaDB dialect: everything database-specific the engine needs, in one object.

Flink CDC's ``DataSourceDialect`` in spirit: the current offset, the chunk planner's probe,
the chunk read, the binlog window and the collation-aware key location. The algorithm in
``sparkcdc.core`` talks only to this; the Spark glue builds one per task from picklable
``ConnectionOptions``. Connections are opened on first use, never at construction, so the
object can be created on the driver and shipped.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from typing import TYPE_CHECKING, Any, TypeVar

from sparkcdc.core.chunking import ChunkingOptions, ChunkPlanner, is_integral_column
from sparkcdc.core.offsets import BinlogOffset
from sparkcdc.core.records import ChangeRecord
from sparkcdc.core.schema import TableId, TableSchema
from sparkcdc.core.stream_filter import FinishedSplit
from sparkcdc.core.table_events import NewSchema, TableEvent
from sparkcdc.errors import BinlogUnavailable, ConfigError
from sparkcdc.mysql import types
from sparkcdc.mysql.binlog import failover
from sparkcdc.mysql.binlog.fastdecode import default_decoder
from sparkcdc.mysql.binlog.reader import BinlogReader
from sparkcdc.mysql.binlog.server_lookups import file_start_timestamps
from sparkcdc.mysql.connection import ConnectionOptions, retry_lost
from sparkcdc.mysql.locate import Locator
from sparkcdc.mysql.offsets import current_offset, detect_flavor
from sparkcdc.mysql.snapshot import read_chunk
from sparkcdc.mysql.window_split import bound_window, split_window

if TYPE_CHECKING:  # typing.Self is 3.11's; `with` on a subclass gives the subclass
    from typing_extensions import Self

T = TypeVar("T")


class MySQLDialect:
    """``flavor``: ``"mariadb"`` or ``"mysql"``; None (the default) asks the server on first
    use (the Spark source passes what its validation found)."""

    def __init__(self, conn: ConnectionOptions, *, flavor: str | None = None,
                 server_id: int = 5400, tables: dict[TableId, TableSchema] | None = None,
                 chunking: ChunkingOptions | None = None, zero_dates_epoch: bool = False):
        if flavor not in ("mariadb", "mysql", None):
            raise ConfigError(f"flavor must be 'mariadb' or 'mysql', not {flavor!r}")
        self.conn = conn
        self._flavor = flavor
        self.server_id = server_id
        self.tables = dict(tables or {})
        self.chunking = chunking or ChunkingOptions()
        # zero-dates.not-null: epoch -- NOT NULL date columns read a zero date as the epoch,
        # on both paths alike (the snapshot's chunks, the binlog's images)
        self.zero_dates_epoch = zero_dates_epoch
        self._sql = None
        self._locator = Locator(conn)

    @property
    def flavor(self) -> str:
        if self._flavor is None:
            self._flavor = self._read("asking the server's kind", detect_flavor)
        return self._flavor

    @flavor.setter
    def flavor(self, value: str) -> None:
        self._flavor = value

    # -- connections -----------------------------------------------------------------------

    def _connection(self):
        """The dialect's SQL connection; a long-lived driver outlives server restarts and
        idle timeouts, so a dropped connection is replaced (SQL here is stateless)."""
        import pymysql

        if self._sql is not None:
            try:
                self._sql.ping(reconnect=False)
            except pymysql.err.Error:
                self._drop()
        if self._sql is None:
            self._sql = self.conn.connect()
        return self._sql

    def _cursor(self):
        return self._connection().cursor()

    def _drop(self) -> None:
        import pymysql

        if self._sql is not None:
            try:
                self._sql.close()
            except pymysql.err.Error:
                pass
            self._sql = None

    def _read(self, what: str, read: Callable[[Any], T]) -> T:
        """``read(cursor)``, a stateless read, again on a new connection when the connection
        is lost in the middle of it (``connection.retry_lost``): the ping before it cannot
        see a cut that comes after (a failover's address moved, a restart), and the Spark
        source's driver, which asks for the position every batch, would otherwise stop a
        user's query with the driver's error."""
        import pymysql

        def attempt() -> T:
            try:
                with self._cursor() as cur:
                    return read(cur)
            except (pymysql.err.OperationalError, pymysql.err.InterfaceError):
                self._drop()
                raise

        return retry_lost(self.conn, what, attempt)

    def close(self) -> None:
        if self._sql is not None:
            self._sql.close()
            self._sql = None
        self._locator.close()

    def __enter__(self) -> Self:
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    # -- SnapshotDialect -------------------------------------------------------------------

    def current_offset(self) -> BinlogOffset:
        flavor = self.flavor
        return self._read("reading the binlog position", lambda cur: current_offset(cur, flavor))

    def read_chunk(self, schema: TableSchema, start: Any, end: Any, where: str | None = None):
        table = read_chunk(self.conn, schema, start, end, where=where)
        if self.zero_dates_epoch:
            epochs = types.zero_date_epochs(schema)
            if epochs:
                table = types.epoch_for_zero_dates(table, epochs)
        return table

    def read_window(self, schema: TableSchema | None, start: BinlogOffset,
                    end: BinlogOffset, only: Iterable[TableId] | None = None,
                    table_events: bool = False, before_keys: bool = False
                    ) -> Iterator[ChangeRecord]:
        """Changes in ``[start, end)`` of one table (or of every known table if None, or of
        those in ``only``: the others' events are skipped undecoded); with
        ``table_events``, the tables' ``TableEvent``s among them (``BinlogReader``); with
        ``before_keys``, an update's before image may hold its row key alone (for a reader
        that drops update preimages: ``fastdecode.CRowDecoder``)."""

        if start >= end:
            return iter(())
        tables = {schema.table_id: schema} if schema is not None else self.tables
        if only is not None:
            tables = {t: tables[t] for t in only if t in tables}
        reader = BinlogReader(self.conn, self.server_id, tables, flavor=self.flavor,
                              decoder=default_decoder(before_keys),
                              table_events=table_events)
        if self.zero_dates_epoch:
            return self._epoch_for_zero_dates(reader.read_window(start, end), tables)
        return reader.read_window(start, end)

    def _epoch_for_zero_dates(self, records: Iterator[ChangeRecord],
                              tables: Mapping[TableId, TableSchema | None]) -> Iterator[Any]:
        """The binlog's images with the zero dates (decoded as null) of NOT NULL date
        columns set to the epoch; a schema change in the stream brings its new columns."""
        epochs: dict[TableId, dict[str, Any]] = {}
        for rec in records:
            if isinstance(rec, TableEvent):
                if isinstance(rec, NewSchema):
                    epochs[rec.table_id] = types.zero_date_epochs(rec.schema)
                yield rec
                continue
            got = epochs.get(rec.table_id)
            if got is None:
                schema = tables.get(rec.table_id) or self.tables.get(rec.table_id)
                got = epochs[rec.table_id] = (types.zero_date_epochs(schema)
                                              if schema is not None else {})
            for image in (rec.before, rec.after) if got else ():
                if image is not None:
                    for name, value in got.items():
                        if name in image and image[name] is None:
                            image[name] = value
            yield rec

    def split_window(self, start: BinlogOffset, end: BinlogOffset, split_bytes: int,
                     max_parts: int) -> list[tuple[BinlogOffset, BinlogOffset]]:
        """``[start, end)`` cut at transaction boundaries for parallel readers
        (``mysql/window_split.py``); one piece when it is small."""

        return self._read("splitting a binlog window",
                          lambda cur: split_window(cur, start, end, split_bytes, max_parts))

    def rebase(self, offset: BinlogOffset, server: str) -> BinlogOffset:
        """``offset``, a position in another server's binlog, as the same point in the binlog
        of ``server``, the one behind the address now (``binlog/failover.py``)."""
        return retry_lost(self.conn, "finding the checkpoint's place after a failover",
                          lambda: failover.rebase(self.conn.dump_kwargs(), self.server_id,
                                                  offset, server))

    def bound_window(self, start: BinlogOffset, end: BinlogOffset,
                     max_bytes: int) -> BinlogOffset:
        """Where a micro-batch starting at ``start`` ends to hold at most about
        ``max_bytes`` of binlog (``mysql/window_split.py``)."""

        return self._read("bounding a binlog window",
                          lambda cur: bound_window(cur, start, end, max_bytes))

    def in_chunk(self, schema: TableSchema, start: Any, end: Any,
                 values: Sequence[Any]) -> list[bool]:
        return self._locator.in_chunk(schema, start, end, values)

    def locate(self, schema: TableSchema, splits: Sequence[FinishedSplit],
               values: Sequence[Any]) -> list[int | None]:
        return self._locator.locate(schema, splits, values)

    # -- startup positions ------------------------------------------------------------------

    def binlog_files(self) -> list[str]:
        def read(cur) -> list[str]:
            cur.execute("SHOW BINARY LOGS")
            return [r[0] for r in cur.fetchall()]
        return self._read("listing the binlog files", read)

    def earliest_offset(self) -> BinlogOffset:
        """The start of the oldest binlog file the server still has."""
        files = self.binlog_files()
        cur = self.current_offset()
        return BinlogOffset(files[0], 4, flavor=cur.flavor) if files else cur

    def specific_offset(self, startup) -> BinlogOffset:
        """``scan.startup.specific-offset.*`` as an offset; the file must still exist."""

        if not startup.file:  # a GTID set alone: found in this server's binlog, as after a
            # failover (the first transaction the set does not hold)
            self._require_gtids(startup.gtid_set)
            here = self.current_offset()
            return self.rebase(BinlogOffset(here.file, 4, startup.skip_events,
                                            startup.skip_rows, gtid=startup.gtid_set,
                                            flavor=self.flavor), str(here.server))
        files = self.binlog_files()
        if startup.file not in files:
            raise BinlogUnavailable(
                f"binlog file {startup.file!r} of scan.startup.specific-offset.file is not on "
                f"the server (it has {files[0] if files else 'none'} .. "
                f"{files[-1] if files else 'none'})",
                fix="pick a file the server still has, or start with scan.startup.mode "
                    "'initial' to take a new snapshot")
        return BinlogOffset(startup.file, startup.pos or 4, startup.skip_events,
                            startup.skip_rows, gtid=startup.gtid_set, flavor=self.flavor,
                            server=str(self.current_offset().server))

    def _require_gtids(self, gtid_set: str) -> None:
        """A GTID start on a MySQL without GTIDs is one clear error, not a search of a
        binlog that has none (MariaDB always logs GTIDs)."""
        if self.flavor != "mysql":
            return
        with self._cursor() as cur:
            cur.execute("SELECT @@GLOBAL.gtid_mode, @@version")
            mode, version = cur.fetchone()
        mode = str(mode).upper()
        if not mode.startswith("ON"):
            from sparkcdc.mysql.validation import gtid_start_problem
            raise gtid_start_problem(f"MySQL {version}", mode, gtid_set)

    def offset_for_timestamp(self, ts_ms: int) -> BinlogOffset:
        """Where to start for ``scan.startup.timestamp-millis``: the oldest file whose
        successor was created after ``ts_ms`` (file creation times come from each file's
        first event); the reader then skips changes committed before ``ts_ms``."""

        files = self.binlog_files()
        starts = file_start_timestamps(self.conn, self.server_id, files, flavor=self.flavor)
        chosen = files[0]
        for f, t in zip(files, starts):
            if t is not None and t * 1000 <= ts_ms:
                chosen = f
        return BinlogOffset(chosen, 4, flavor=self.flavor)

    # -- planning --------------------------------------------------------------------------

    def planner(self, table_id: TableId):
        """A fresh planner and a probe for ``table_id`` (the assigner's factory)."""
        from sparkcdc.mysql.chunk_probe import MySQLKeyProbe

        schema = self.tables[table_id]
        column = schema.column(schema.chunk_key)
        planner = ChunkPlanner(table_id, integral_key=is_integral_column(column),
                               options=self.chunking)
        return planner, MySQLKeyProbe(self._connection(), schema)
