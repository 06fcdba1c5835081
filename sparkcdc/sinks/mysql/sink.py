"""MySQL and MariaDB targets through PyMySQL: one transaction per batch, bulk statements.

Per batch, in one InnoDB transaction: lock this app's row of ``_sparkcdc_batches`` and skip
the batch if it is already recorded; plain multi-row ``INSERT`` for the new rows
(``ChangeSet.split_new``: snapshot rows, first inserts) when the target's primary key holds
nothing in their key range; ``DELETE ... WHERE key IN (...)`` for deletes; multi-row
``INSERT ... ON DUPLICATE KEY UPDATE`` for the other upserts and patches (SCD type 2: stage
the closes in a temporary table and ``UPDATE ... JOIN`` it, then multi-row ``INSERT`` the
versions); record the batch id; commit.

Statements are built column-wise with Arrow compute (no per-row Python formatting for the
common types), with ``NO_BACKSLASH_ESCAPES`` so string literals need only quote doubling.

Types: as in MySQL, except TIMESTAMP -> DATETIME(6) holding UTC (TIMESTAMP's range ends in
2038), text -> LONGTEXT (VARCHAR(255) in keys), binary -> LONGBLOB (VARBINARY(255) in keys),
TIME -> TIME(6). The table's collation is utf8mb4_bin: keys compare as Spark compares them.

In a pipeline, Spark tasks load a batch's rows into staging tables of the target's database
with multi-row INSERTs (a snapshot's new rows where they were read, changes by hash slices
of the keys), and the driver applies the ones they reported in one transaction with the
batch id, as the PostgreSQL sink does (``sinks/postgres/staging.py``; "rows from the tasks"
below). MySQL's DDL commits implicitly, so the staging tables are dropped just after that
transaction, not in it; a batch found committed drops them all the same.
"""

from __future__ import annotations

from collections.abc import Mapping
from types import ModuleType
from typing import Any, ClassVar

import pyarrow as pa

from sparkcdc.errors import ConnectionFailed, SchemaError
from sparkcdc.sinks.base import (
    AMEND,
    BATCHES_TABLE,
    CLOSE,
    DELETE,
    END_AT,
    OP,
    PATCH,
    START_AT,
    UPSERT,
    VERSION,
    ChangeSet,
    KeyRange,
    KeySlices,
    WriteResult,
    check_key_not_null,
    log,
)
from sparkcdc.sinks.kinds import SinkType
from sparkcdc.sinks.mysql import config, evolution
from sparkcdc.sinks.mysql.config import MySQLConfig
from sparkcdc.sinks.mysql.connect import connect, server_version
from sparkcdc.sinks.mysql.keys import follow_key
from sparkcdc.sinks.mysql.text import chunks, literals, mysql_type, q, row_tuples
from sparkcdc.sinks.sql import (
    SQLSink,
    StageKind,
    clear_ranges,
    sql_capabilities,
    staging_batch,
    staging_name,
    staging_prefix,
)

__all__ = ["MySQLSink", "mysql_type"]  # (mysql_type's home: text.py)


class MySQLSink(SQLSink[MySQLConfig]):
    type = SinkType.MYSQL
    capabilities = sql_capabilities(
        "pymysql", no_layout="MySQL partitions a table by range, list or hash with each "
        "partition declared, and every unique key must hold the partition columns; its "
        "tables have no free-form properties")
    drivers = ("pymysql",)
    evolution: ClassVar[ModuleType] = evolution  # its schema changes (SQLSink.empty, ...)
    option_spec = config.OPTIONS
    target_options = staticmethod(config.target_options)  # how it names a target

    def __init__(self, config: MySQLConfig):
        super().__init__(config)
        self._new_alias = False  # MySQL 8.0.19+: ``AS new`` instead of VALUES()
        self._flavor: str | None = None

    @classmethod
    def from_options(cls, options: Mapping[str, Any]) -> MySQLSink:
        return cls(MySQLConfig.parse(options))

    def connection(self) -> Any:
        if self._conn is None or not self._conn.open:
            self._conn, version = connect(self.driver, self.config)
            self._flavor = "mariadb" if "mariadb" in version.lower() else "mysql"
            self._new_alias = self._flavor == "mysql" and server_version(version) >= (8, 0, 19)
        return self._conn

    def close(self) -> None:
        if self._conn is not None:
            self._conn.close()
            self._conn = None

    @property
    def _target(self) -> str:
        return f"{q(self.config.database)}.{q(self.config.table)}"

    @property
    def _batches(self) -> str:
        return f"{q(self.config.database)}.{q(BATCHES_TABLE)}"

    def _table_exists(self, cur, name: str) -> bool:
        cur.execute("SELECT 1 FROM information_schema.tables WHERE table_schema = %s "
                    "AND table_name = %s", (self.config.database, name))
        return cur.fetchone() is not None

    def last_batch_id(self) -> int | None:
        conn = self.connection()
        with conn.cursor() as cur:
            if not self._table_exists(cur, BATCHES_TABLE):
                conn.commit()
                return None
            cur.execute(f"SELECT batch_id FROM {self._batches} WHERE app_id = %s AND target = %s",
                        (self.config.app_id, self.config.table))
            row = cur.fetchone()
        conn.commit()
        return None if row is None else row[0]

    def _create(self, cur, changes: ChangeSet) -> None:
        """DDL commits implicitly in MySQL, so it runs before the batch's transaction."""
        pk = list(changes.keys) + ([START_AT] if changes.scd_type == 2 else [])
        self._create_table(cur, changes.target_schema, pk)

    def _ensure_batches(self, cur) -> None:
        cur.execute(f"CREATE DATABASE IF NOT EXISTS {q(self.config.database)}")
        cur.execute(f"CREATE TABLE IF NOT EXISTS {self._batches} (app_id VARCHAR(255) NOT NULL, "
                    "target VARCHAR(255) NOT NULL, batch_id BIGINT NOT NULL, "
                    "updated_at TIMESTAMP(6) NOT NULL DEFAULT CURRENT_TIMESTAMP(6), "
                    "PRIMARY KEY (app_id, target)) ENGINE=InnoDB DEFAULT CHARSET=utf8mb4")

    def _create_table(self, cur, schema: pa.Schema, pk: list[str]) -> None:
        """The batch-id table and the target (columns ``schema``'s, primary key ``pk``) made
        if absent; an existing target must have every column."""
        self._ensure_batches(cur)
        cols = ", ".join(f"{q(f.name)} {mysql_type(f.type, f.name in pk)}"
                         + (" NOT NULL" if f.name in pk else "")
                         for f in schema)
        cur.execute(f"CREATE TABLE IF NOT EXISTS {self._target} ({cols}, PRIMARY KEY "
                    f"({', '.join(map(q, pk))})) ENGINE=InnoDB DEFAULT CHARSET=utf8mb4 "
                    "COLLATE=utf8mb4_bin")
        self._follow_key(cur, pk, schema)
        cur.execute("SELECT column_name FROM information_schema.columns WHERE table_schema = %s "
                    "AND table_name = %s", (self.config.database, self.config.table))
        existing = {r[0] for r in cur.fetchall()}
        missing = [n for n in schema.names if n not in existing]
        if missing:
            raise SchemaError(f"the mysql table {self.config.database}.{self.config.table} "
                              f"lacks columns {missing}",
                              fix="add them (ALTER TABLE) or drop them with except_column_list")

    def _follow_key(self, cur: Any, pk: list[str], schema: pa.Schema) -> None:
        """The target's unique key made to be ``pk`` (``keys.follow_key``), asked once per
        sink and key."""
        if self._key_followed == tuple(pk):
            return
        follow_key(cur, self.driver, self.config, pk, schema)
        self._key_followed = tuple(pk)

    def write(self, changes: ChangeSet, batch_id: int) -> WriteResult:
        check_key_not_null(changes)
        conn = self.connection()
        try:
            with conn.cursor() as cur:
                self._create(cur, changes)
                conn.begin()
                cur.execute(f"INSERT IGNORE INTO {self._batches} (app_id, target, batch_id) "
                            "VALUES (%s, %s, -1)", (self.config.app_id, self.config.table))
                cur.execute(f"SELECT batch_id FROM {self._batches} WHERE app_id = %s "
                            "AND target = %s FOR UPDATE", (self.config.app_id, self.config.table))
                if batch_id <= cur.fetchone()[0]:
                    conn.rollback()
                    self._pending = None
                    return WriteResult(batch_id, skipped=True)
                # chunks read again: their ranges cleared, the batch's rows hold them anew
                cleared = clear_ranges(cur, self._target, q, changes.replaces)
                staged = self._apply_pending(cur, batch_id)
                rest, appended = self._append_new(cur, changes)
                if rest.num_rows:
                    if rest.scd_type == 2:
                        self._apply_scd2(cur, rest)
                    else:
                        self._apply_scd1(cur, rest)
                cur.execute(f"UPDATE {self._batches} SET batch_id = %s WHERE app_id = %s "
                            "AND target = %s", (batch_id, self.config.app_id, self.config.table))
            conn.commit()
        except BaseException:
            if conn.open:
                conn.rollback()
            raise
        counts = changes.counts(appended=appended)
        if staged:
            counts["staged new rows"] = staged
        if cleared:
            counts["rows cleared"] = cleared
        return WriteResult(batch_id, counts=counts)

    def _append_new(self, cur, changes: ChangeSet) -> tuple[ChangeSet, int]:
        """Plain multi-row INSERTs of the batch's new rows; returns the rows left to merge
        and how many were appended.

        Safe because the target's primary key is asked first, in this transaction: no
        target row has a first key column within the new rows' range, so none of their keys
        is there (``split_new`` only trusts integer, decimal and date bounds; text keys
        compare by the table's collation, not as Arrow does). A writer outside this app's
        batch-id lock (another app id, a user) could still insert into that range before
        these INSERTs; the primary key then refuses one (duplicate key), the savepoint is
        rolled back and every row is merged instead, so the result is the same, only
        slower. LOAD DATA LOCAL INFILE is not used: PyMySQL refuses it unless the connection
        enables ``local_infile``, and MySQL 8 servers disable it by default."""
        if changes.scd_type != 1 or not changes.num_rows:
            return changes, 0
        key = changes.keys[0]
        key_type = changes.target_schema.field(key).type

        def may_hold(lo, hi) -> bool:
            # the bounds written as the INSERTs write the key, so they compare the same way
            lo_sql, hi_sql = literals(pa.array([lo, hi], key_type)).to_pylist()
            cur.execute(f"SELECT EXISTS (SELECT 1 FROM {self._target} WHERE {q(key)} "
                        f"BETWEEN {lo_sql} AND {hi_sql})")
            return bool(cur.fetchone()[0])

        new, rest = changes.split_new(may_hold, server_compares=True)
        if not new.num_rows:
            return changes, 0
        cur.execute("SAVEPOINT sparkcdc_append")
        try:
            self._insert(cur, new, None)
        except self.driver.err.IntegrityError as e:
            if not e.args or e.args[0] != 1062:  # ER_DUP_ENTRY
                raise
            cur.execute("ROLLBACK TO SAVEPOINT sparkcdc_append")
            log.warning("appending %d new rows to %s collided with rows the range check "
                        "did not see (another writer?): %s; merging them instead",
                        new.num_rows, self.config.table, e.args[1] if len(e.args) > 1 else e)
            return changes, 0
        cur.execute("RELEASE SAVEPOINT sparkcdc_append")
        log.debug("appended %d new rows to %s", new.num_rows, self.config.table)
        return rest, new.num_rows

    def _insert(self, cur, rows: pa.Table, update: str | None) -> None:
        if rows.num_rows == 0:
            return
        head = f"INSERT INTO {self._target} ({', '.join(map(q, rows.column_names))}) VALUES "
        for values in chunks(row_tuples(rows), self.config.statement_bytes):
            cur.execute(head + values + (update or ""))

    def _upsert_clause(self, names: list[str], keys: tuple[str, ...], patch: bool) -> str:
        values = [n for n in names if n not in keys] or [keys[0]]
        new = (lambda c: f"new.{q(c)}") if self._new_alias else (lambda c: f"VALUES({q(c)})")
        expr = (lambda c: f"COALESCE({new(c)}, {q(c)})") if patch else new
        alias = " AS new" if self._new_alias else ""
        return f"{alias} ON DUPLICATE KEY UPDATE " + ", ".join(f"{q(c)} = {expr(c)}" for c in values)

    def _delete(self, cur, keys_table: pa.Table) -> None:
        if keys_table.num_rows == 0:
            return
        names = keys_table.column_names
        tuples = row_tuples(keys_table)
        lhs = q(names[0]) if len(names) == 1 else f"({', '.join(map(q, names))})"
        if len(names) == 1:
            tuples = literals(keys_table.column(0))
        for values in chunks(tuples, self.config.statement_bytes):
            cur.execute(f"DELETE FROM {self._target} WHERE {lhs} IN ({values})")

    def _apply_scd1(self, cur, changes: ChangeSet) -> None:
        names = changes.target_schema.names
        self._delete(cur, changes.key_rows(DELETE))
        self._insert(cur, changes.rows(UPSERT), self._upsert_clause(names, changes.keys, False))
        self._insert(cur, changes.rows(PATCH), self._upsert_clause(names, changes.keys, True))

    def _apply_scd2(self, cur, changes: ChangeSet) -> None:
        schema = changes.target_schema
        on = " AND ".join(f"t.{q(k)} = s.{q(k)}" for k in changes.keys)
        closes = changes.key_rows(CLOSE)
        amends = changes.rows(AMEND).drop_columns([START_AT])
        for rows, name in ((closes, "__sparkcdc_closes"), (amends, "__sparkcdc_amends")):
            if not rows.num_rows:
                continue
            stage = f"{q(self.config.database)}.{q(name)}"
            cols = ", ".join(f"{q(n)} {mysql_type(schema.field(n).type, True)}"
                             for n in rows.column_names)
            cur.execute(f"DROP TEMPORARY TABLE IF EXISTS {stage}")
            cur.execute(f"CREATE TEMPORARY TABLE {stage} ({cols}) ENGINE=InnoDB "
                        "DEFAULT CHARSET=utf8mb4 COLLATE=utf8mb4_bin")
            head = f"INSERT INTO {stage} ({', '.join(map(q, rows.column_names))}) VALUES "
            for values in chunks(row_tuples(rows), self.config.statement_bytes):
                cur.execute(head + values)
            sets = ", ".join(f"t.{q(n)} = s.{q(n)}" for n in rows.column_names
                             if n not in changes.keys)
            cur.execute(f"UPDATE {self._target} t JOIN {stage} s ON {on} "
                        f"SET {sets} WHERE t.{q(END_AT)} IS NULL")
            cur.execute(f"DROP TEMPORARY TABLE {stage}")
        self._insert(cur, changes.rows(VERSION), None)

    # -- rows from the tasks: staging tables loaded by Spark tasks (``SQLSink``) -------

    def new_rows(self, changes: ChangeSet) -> pa.Table | None:
        """In a task: the rows new to the target, asked of its primary key as the driver's
        append path does; the keys are noted for ``write_files``."""
        self._keys = changes.keys
        if changes.scd_type != 1:
            return None
        conn = self.connection()
        try:
            with conn.cursor() as cur:
                if not self._table_exists(cur, self.config.table):
                    new, rest = changes.split_new(lambda lo, hi: False, server_compares=True)
                else:
                    key = changes.keys[0]
                    key_type = changes.target_schema.field(key).type

                    def may_hold(lo, hi) -> bool:
                        lo_sql, hi_sql = literals(pa.array([lo, hi], key_type)).to_pylist()
                        cur.execute(f"SELECT EXISTS (SELECT 1 FROM {self._target} WHERE "
                                    f"{q(key)} BETWEEN {lo_sql} AND {hi_sql})")
                        return bool(cur.fetchone()[0])

                    new, rest = changes.split_new(may_hold, server_compares=True)
        finally:
            conn.commit()
        return new if rest.num_rows == 0 else None

    def ready_for_files(self, schema: pa.Schema) -> None:
        conn = self.connection()
        with conn.cursor() as cur:
            self._ensure_batches(cur)
        conn.commit()

    def _stage(self, name: str) -> str:
        return f"{q(self.config.database)}.{q(name)}"

    def _load_stage(self, rows: pa.Table, batch_id: int, kind: StageKind,
                    keys: tuple[str, ...]) -> str:
        """In a task: a new staging table holding ``rows`` (multi-row INSERTs, committed
        once all are in: the task reports it only then); its name."""
        name = staging_name(self.config.app_id, self.config.database, self.config.table,
                            batch_id, kind)
        stage = self._stage(name)
        cols = ", ".join(f"{q(f.name)} {mysql_type(f.type, f.name in keys)}"
                         for f in rows.schema)
        conn = self.connection()
        try:
            with conn.cursor() as cur:
                cur.execute(f"CREATE DATABASE IF NOT EXISTS {q(self.config.database)}")
                cur.execute(f"CREATE TABLE {stage} ({cols}) ENGINE=InnoDB "
                            "DEFAULT CHARSET=utf8mb4 COLLATE=utf8mb4_bin")
                conn.begin()
                head = f"INSERT INTO {stage} ({', '.join(map(q, rows.column_names))}) VALUES "
                for values in chunks(row_tuples(rows), self.config.statement_bytes):
                    cur.execute(head + values)
            conn.commit()
        except BaseException:
            if conn.open:
                conn.rollback()
            raise
        return name

    def write_files(self, rows: pa.Table, batch_id: int) -> list[dict[str, Any]]:
        """In a task: the new rows INSERTed into a staging table."""
        if not rows.num_rows:
            return []
        stage = self._load_stage(rows, batch_id, StageKind.FILES, self._keys)
        return [{"stage": stage, "rows": rows.num_rows, "keys": list(self._keys)}]

    def _lock_batch(self, cur, app_id: str) -> int:
        cur.execute(f"INSERT IGNORE INTO {self._batches} (app_id, target, batch_id) "
                    "VALUES (%s, %s, -1)", (app_id, self.config.table))
        cur.execute(f"SELECT batch_id FROM {self._batches} WHERE app_id = %s "
                    "AND target = %s FOR UPDATE", (app_id, self.config.table))
        return cur.fetchone()[0]

    def _record_batch(self, cur, app_id: str, batch_id: int) -> None:
        cur.execute(f"UPDATE {self._batches} SET batch_id = %s WHERE app_id = %s "
                    "AND target = %s", (batch_id, app_id, self.config.table))

    def _check_stage(self, cur, name: str, rows: int) -> None:
        cur.execute(f"SELECT count(*) FROM {self._stage(name)}")
        have = cur.fetchone()[0]
        if have != rows:
            raise ConnectionFailed(
                f"staging table {self.config.database}.{name} holds {have} row(s), its task "
                f"loaded {rows}", fix="transient: the stream runs the batch again")

    def _upsert_from(self, names: list[str], keys: list[str]) -> str:
        values = [n for n in names if n not in keys] or [keys[0]]
        return " ON DUPLICATE KEY UPDATE " + ", ".join(f"{q(c)} = s.{q(c)}" for c in values)

    def commit_files(self, files: list[dict[str, Any]], schema: pa.Schema,
                     batch_id: int, final: bool = True) -> WriteResult:
        """Every task's staging table of the batch's new rows INSERTed into the target in
        the transaction that records the batch id; then the batch's staging tables
        dropped. Not ``final``: kept for the transaction of the batch's other changes of
        the table (``_apply_pending``), as the PostgreSQL sink does."""
        app, done, n = self.config.app_id, False, 0
        self._pending = None
        keys = next((list(f["keys"]) for f in files if f.get("keys")), [])
        conn = self.connection()
        try:
            with conn.cursor() as cur:
                if files and keys:  # made if absent, its key the table's (DDL: first)
                    self._create_table(cur, schema, keys)
                elif files and not self._table_exists(cur, self.config.table):
                    raise SchemaError(f"the mysql table {self.config.database}."
                                      f"{self.config.table} is missing and the staged "
                                      "rows name no key", fix="create it with a primary "
                                      "key, or restart the pipeline")
                self._ensure_batches(cur)
                conn.begin()
                if batch_id > self._lock_batch(cur, app):
                    if not final:
                        conn.rollback()
                        self._pending = (batch_id, files, schema)
                        return WriteResult(batch_id, counts={"staged": sum(
                            int(f["rows"]) for f in files)})
                    n = self._apply_files(cur, files, schema)
                    self._record_batch(cur, app, batch_id)
                    done = True
            conn.commit()
        except BaseException:
            if conn.open:
                conn.rollback()
            raise
        self._drop_leftovers(batch_id)
        if not done:
            return WriteResult(batch_id, skipped=True)
        return WriteResult(batch_id, counts={"upsert": n, "appended": n} if n else {})

    def _apply_files(self, cur, files: list[dict[str, Any]], schema: pa.Schema) -> int:
        """In the batch's transaction: the staging tables of new rows INSERTed into the
        target (plain, or merged if a key is there after all); how many rows."""
        keys = next((list(f["keys"]) for f in files if f.get("keys")), [])
        names = schema.names
        cols = ", ".join(map(q, names))
        n = 0
        for f in files:
            stage = self._stage(f["stage"])
            self._check_stage(cur, f["stage"], int(f["rows"]))
            cur.execute("SAVEPOINT sparkcdc_append")
            try:
                n += cur.execute(f"INSERT INTO {self._target} ({cols}) SELECT {cols} "
                                 f"FROM {stage}")
            except self.driver.err.IntegrityError as e:
                if not e.args or e.args[0] != 1062:  # ER_DUP_ENTRY
                    raise
                cur.execute("ROLLBACK TO SAVEPOINT sparkcdc_append")
                log.warning("inserting staged new rows into %s collided with rows the "
                            "range check did not see; merging them", self.config.table)
                cur.execute(f"INSERT INTO {self._target} ({cols}) SELECT {cols} FROM {stage} s"
                            + self._upsert_from(names, keys))
                n += int(f["rows"])
        return n

    def _apply_pending(self, cur, batch_id: int) -> int:
        """In a batch's transaction, after its batch-id check: the staging tables of its new
        rows that ``commit_files`` kept for it, applied first; how many rows."""
        pending, self._pending = self._pending, None
        if pending is None or pending[0] != batch_id:
            return 0
        return self._apply_files(cur, pending[1], pending[2])

    def _make_target(self, keys: tuple[str, ...], schema: pa.Schema) -> None:
        conn = self.connection()
        with conn.cursor() as cur:
            self._create_table(cur, schema, list(keys))
        conn.commit()

    def write_changes(self, slices: KeySlices, index: int, upserts: pa.Table,
                      changed_keys: pa.Table, batch_id: int,
                      replaces: tuple[KeyRange, ...] = ()) -> dict[str, Any]:
        """In a task: the slice's upserts and deleted keys INSERTed into one staging table,
        ``__op`` telling them apart."""
        keys = [n for n in changed_keys.column_names if n in upserts.column_names]
        deleted = changed_keys.select(keys).join(upserts.select(keys), keys=keys,
                                                 join_type="left anti")
        n_up, n_del = upserts.num_rows, deleted.num_rows
        if not n_up and not n_del:
            return {"stage": None, "rows": 0, "upserts": 0, "deletes": 0}
        ops = pa.array([UPSERT] * n_up + [DELETE] * n_del, pa.string())
        gone = pa.table({f.name: deleted[f.name] if f.name in keys
                         else pa.nulls(n_del, f.type) for f in upserts.schema})
        rows = pa.concat_tables([upserts, gone.cast(upserts.schema)]).append_column(OP, ops)
        stage = self._load_stage(rows, batch_id, StageKind.CHANGES, tuple(keys))
        return {"stage": stage, "rows": rows.num_rows, "keys": keys,
                "columns": upserts.column_names, "upserts": n_up, "deletes": n_del}

    def commit_changes(self, slices: KeySlices, written: list[dict[str, Any]],
                       batch_id: int, replaces: tuple[KeyRange, ...] = (),
                       new_files: list[dict[str, Any]] | None = None,
                       schema: pa.Schema | None = None) -> WriteResult:
        """Every slice's staging table applied in one transaction that records the batch
        id (``DELETE ... JOIN``, ``INSERT ... SELECT ... ON DUPLICATE KEY UPDATE``); then the
        batch's staging tables dropped (after it: MySQL's DDL commits)."""
        if new_files and schema is not None:  # kept for this transaction (_apply_pending)
            self.commit_files(new_files, schema, batch_id, final=False)
        done, staged, cleared = False, 0, 0
        conn = self.connection()
        try:
            with conn.cursor() as cur:
                self._ensure_batches(cur)
                conn.begin()
                if batch_id <= self._lock_batch(cur, self.config.app_id):
                    self._pending = None
                else:
                    cleared = clear_ranges(cur, self._target, q, replaces)
                    staged = self._apply_pending(cur, batch_id)
                    for w in written:
                        if not w.get("stage"):
                            continue
                        stage = self._stage(w["stage"])
                        self._check_stage(cur, w["stage"], int(w["rows"]))
                        keys, names = list(w["keys"]), list(w["columns"])
                        # the target by its full name: an alias there needs a default
                        # database (error 1046), which the connection does not select
                        t = self._target
                        on = " AND ".join(f"{t}.{q(k)} = s.{q(k)}" for k in keys)
                        cur.execute(f"DELETE {t} FROM {t} JOIN {stage} s ON {on} "
                                    f"WHERE s.{q(OP)} = '{DELETE}'")
                        cols = ", ".join(map(q, names))
                        scols = ", ".join(f"s.{q(c)}" for c in names)
                        cur.execute(f"INSERT INTO {self._target} ({cols}) SELECT {scols} "
                                    f"FROM {stage} s WHERE s.{q(OP)} = '{UPSERT}'"
                                    + self._upsert_from(names, keys))
                    self._record_batch(cur, self.config.app_id, batch_id)
                    done = True
            conn.commit()
        except BaseException:
            self._planned = None  # the target checked again next time
            if conn.open:
                conn.rollback()
            raise
        return self._committed(batch_id, done, written, staged, cleared)

    def _drop_leftovers(self, batch_id: int) -> int:
        """This writer's staging tables of ``batch_id`` and of the batches before it: the
        ones the commit used and what task attempts that died left."""
        start = staging_prefix(self.config.app_id, self.config.database, self.config.table)
        conn = self.connection()
        with conn.cursor() as cur:
            cur.execute("SELECT table_name FROM information_schema.tables WHERE "
                        "table_schema = %s AND LEFT(table_name, %s) = %s",
                        (self.config.database, len(start), start))
            old = [r[0] for r in cur.fetchall()
                   if (b := staging_batch(r[0], start)) is not None and b <= batch_id]
            for name in old:
                cur.execute(f"DROP TABLE IF EXISTS {self._stage(name)}")
        conn.commit()
        return len(old)

    def read(self) -> pa.Table:
        conn = self.connection()
        with conn.cursor() as cur:
            if not self._table_exists(cur, self.config.table):
                conn.commit()
                return pa.table({})
            cur.execute("SELECT column_name, data_type FROM information_schema.columns "
                        "WHERE table_schema = %s AND table_name = %s ORDER BY ordinal_position",
                        (self.config.database, self.config.table))
            # FLOAT travels as text with 6 digits; as DOUBLE it arrives exactly
            cols = ", ".join(f"CAST({q(n)} AS DOUBLE) AS {q(n)}" if t.lower() == "float"
                             else q(n) for n, t in cur.fetchall())
            cur.execute(f"SELECT {cols} FROM {self._target}")
            names = [d[0] for d in cur.description]
            rows = cur.fetchall()
        conn.commit()
        return pa.table({n: pa.array([r[i] for r in rows]) for i, n in enumerate(names)})
