"""PostgreSQL through psycopg 3: one transaction per batch, bulk statements only.

Per batch, in one transaction: lock this app's row of ``_sparkcdc_batches`` (so two writers
of one target serialize) and skip the batch if it is already recorded; COPY the new rows
(``ChangeSet.split_new``: snapshot rows, first inserts) straight into the target when its key
index holds nothing in their key range; COPY the other planned rows (as COPY text built
column-wise with Arrow compute) into a temporary staging table; then ``DELETE ... USING``
the staging table for deletes, ``INSERT ... SELECT ... ON CONFLICT (keys) DO UPDATE`` for
upserts and patches (SCD type 2: ``UPDATE ... FROM`` to close versions, ``INSERT`` for new
ones); record the batch id; commit.

In a pipeline, Spark tasks load a batch's rows into staging tables instead, and the driver
applies them in one transaction with the batch id (``staging.py``; the methods under "rows
from the tasks" below): a snapshot's rows new to the target by the tasks that read them,
changes by tasks that each own a hash slice of the keys. No row goes through the driver.

Types: TINYINT/SMALLINT -> smallint, INT -> integer, BIGINT -> bigint, DECIMAL -> numeric,
FLOAT -> real, DOUBLE -> double precision, BIT(1) -> boolean, binary -> bytea, text -> text,
DATE -> date, TIME -> interval, DATETIME -> timestamp, TIMESTAMP -> timestamptz.
"""

from __future__ import annotations

import contextlib
from collections.abc import Mapping
from types import ModuleType
from typing import Any, ClassVar

import pyarrow as pa

from sparkcdc.errors import ConnectionFailed, SchemaError
from sparkcdc.sinks.base import (
    DELETE,
    END_AT,
    OP,
    PATCH,
    START_AT,
    UPSERT,
    ChangeSet,
    KeyRange,
    KeySlices,
    WriteResult,
    check_key_not_null,
    log,
)
from sparkcdc.sinks.kinds import SinkType
from sparkcdc.sinks.postgres import batches, config, evolution, staging
from sparkcdc.sinks.postgres.config import PostgresConfig
from sparkcdc.sinks.postgres.connect import connect
from sparkcdc.sinks.postgres.copy import copy_text, pg_type
from sparkcdc.sinks.postgres.keys import follow_key
from sparkcdc.sinks.sql import SQLSink, StageKind, clear_ranges, sql_capabilities

__all__ = ["PostgresSink", "copy_text", "pg_type"]  # (their home: copy.py)


class PostgresSink(SQLSink[PostgresConfig]):
    type = SinkType.POSTGRES
    capabilities = sql_capabilities(
        "psycopg", no_layout="PostgreSQL partitions a table by range, list or hash with "
        "each partition declared, which partition-keys does not say; its tables have no "
        "free-form properties")
    drivers = ("psycopg",)
    evolution: ClassVar[ModuleType] = evolution  # its schema changes (SQLSink.empty, ...)
    option_spec = config.OPTIONS
    target_options = staticmethod(config.target_options)  # how it names a target

    @classmethod
    def from_options(cls, options: Mapping[str, Any]) -> PostgresSink:
        return cls(PostgresConfig.parse(options))

    # -- connection ----------------------------------------------------------------------

    def connection(self) -> Any:
        if self._conn is None or self._conn.closed:
            self._conn = connect(self.driver, self.config)
        return self._conn

    def close(self) -> None:
        if self._conn is not None:
            self._conn.close()
            self._conn = None

    def _ident(self, *names: str):
        return self.driver.sql.Identifier(*names)

    @property
    def _target(self):
        return self._ident(self.config.schema, self.config.table)

    def last_batch_id(self) -> int | None:
        conn = self.connection()
        with conn.transaction(), conn.cursor() as cur:
            return batches.last(cur, self.driver, self.config)

    # -- writes --------------------------------------------------------------------------

    def _create(self, cur, changes: ChangeSet) -> list[str]:
        pk = list(changes.keys) + ([START_AT] if changes.scd_type == 2 else [])
        return self._create_table(cur, changes.target_schema, pk)

    def _create_table(self, cur, schema: pa.Schema, pk: list[str]) -> list[str]:
        """The target made with ``schema``'s columns and primary key ``pk`` if absent; an
        existing one must have every column."""
        sql = self.driver.sql.SQL
        cols = [sql("{} {}").format(self._ident(f.name), sql(pg_type(f.type))) for f in schema]
        cur.execute(sql("CREATE SCHEMA IF NOT EXISTS {}").format(self._ident(self.config.schema)))
        cur.execute(sql("CREATE TABLE IF NOT EXISTS {} ({}, PRIMARY KEY ({}))").format(
            self._target, sql(", ").join(cols), sql(", ").join(map(self._ident, pk))))
        self._follow_key(cur, pk)
        cur.execute("SELECT attname FROM pg_attribute WHERE attrelid = %s::regclass "
                    "AND attnum > 0 AND NOT attisdropped",
                    (f'"{self.config.schema}"."{self.config.table}"',))
        existing = {r[0] for r in cur.fetchall()}
        missing = [n for n in schema.names if n not in existing]
        if missing:
            raise SchemaError(f"the postgres table {self.config.schema}.{self.config.table} "
                              f"lacks columns {missing}",
                              fix="add them (ALTER TABLE) or drop them with except_column_list")
        return schema.names

    def _follow_key(self, cur: Any, pk: list[str]) -> None:
        """The target's unique key made to be ``pk`` (``keys.follow_key``), asked once per
        sink and key."""
        if self._key_followed == tuple(pk):
            return
        follow_key(cur, self.driver, self.config, pk)
        self._key_followed = tuple(pk)

    def write(self, changes: ChangeSet, batch_id: int) -> WriteResult:
        check_key_not_null(changes)
        conn = self.connection()
        names = changes.target_schema.names
        try:
            return self._write(conn, changes, names, batch_id)
        except BaseException:
            self._key_followed = self._planned = None  # its change may be rolled back: asked again
            raise

    def _write(self, conn, changes: ChangeSet, names: list[str], batch_id: int) -> WriteResult:
        with conn.transaction(), conn.cursor() as cur:
            batches.ensure(cur, self.driver, self.config)
            self._create(cur, changes)
            if batch_id <= batches.lock(cur, self.driver, self.config, self.config.app_id):
                self._pending = None
                return WriteResult(batch_id, skipped=True)
            cleared = self._clear(cur, changes.replaces)
            staged = self._apply_pending(cur, batch_id)
            rest, appended = self._append_new(cur, changes, names)
            if rest.num_rows:
                self._merge(cur, rest, names)
            batches.record(cur, self.driver, self.config, self.config.app_id, batch_id)
        counts = changes.counts(appended=appended)
        if staged:
            counts["staged new rows"] = staged
        if cleared:
            counts["rows cleared"] = cleared
        return WriteResult(batch_id, counts=counts)

    def _clear(self, cur, replaces: tuple[KeyRange, ...]) -> int:
        return clear_ranges(cur, self._target.as_string(cur),
                            lambda c: self._ident(c).as_string(cur), replaces)

    def _append_new(self, cur, changes: ChangeSet, names: list[str]) -> tuple[ChangeSet, int]:
        """COPY the batch's new rows straight into the target; returns the rows left to
        merge and how many were appended.

        Safe because the target's key index is asked first, in this transaction: no target
        row has a first key column within the new rows' range, so none of their keys is
        there (``split_new`` only trusts integer, decimal and date bounds, which PostgreSQL
        orders as Arrow does). A writer outside this app's batch-id lock (another app id,
        a user) could still insert into that range before the COPY; the primary key then
        refuses the COPY, its savepoint is rolled back and every row is merged instead, so
        the result is the same, only slower."""
        if changes.scd_type != 1 or not changes.num_rows:
            return changes, 0
        sql = self.driver.sql.SQL
        key = changes.keys[0]
        # the bounds as the key column's own type: an integer column compared with a
        # numeric parameter would not use its index
        cast = sql(pg_type(changes.target_schema.field(key).type))
        query = sql("SELECT EXISTS (SELECT 1 FROM {} WHERE {} BETWEEN %s::{} AND %s::{})").format(
            self._target, self._ident(key), cast, cast)

        def may_hold(lo, hi) -> bool:
            cur.execute(query, (lo, hi))
            return cur.fetchone()[0]

        new, rest = changes.split_new(may_hold, server_compares=True)
        if not new.num_rows:
            return changes, 0
        try:
            with cur.connection.transaction():  # a savepoint
                self._copy(cur, self._target, new, names)
        except self.driver.errors.UniqueViolation as e:
            log.warning("appending %d new rows to %s collided with rows the range check "
                        "did not see (another writer?): %s; merging them instead",
                        new.num_rows, self.config.table, str(e).splitlines()[0])
            return changes, 0
        log.debug("appended %d new rows to %s", new.num_rows, self.config.table)
        return rest, new.num_rows

    def _copy(self, cur, dest, table: pa.Table, names: list[str]) -> None:
        """COPY ``table``'s ``names`` columns into ``dest`` as text, 50,000 rows a chunk
        (a chunk's text is built in memory at once)."""
        sql = self.driver.sql.SQL
        table = table.select(names)
        with cur.copy(sql("COPY {} ({}) FROM STDIN").format(
                dest, sql(", ").join(map(self._ident, names)))) as copy:
            for start in range(0, table.num_rows, 50_000):
                copy.write(copy_text(table.slice(start, 50_000)))

    def _merge(self, cur, changes: ChangeSet, names: list[str]) -> None:
        """Apply rows whose keys the target may hold, through the staging table."""
        self._stage(cur, changes, names)
        if changes.scd_type == 2:
            self._apply_scd2(cur, changes, names)
        else:
            self._apply_scd1(cur, changes, names)

    def _stage(self, cur, changes: ChangeSet, names: list[str]) -> None:
        sql = self.driver.sql.SQL
        stage = self._ident("__sparkcdc_stage")
        cur.execute(sql("DROP TABLE IF EXISTS {}").format(stage))
        cur.execute(sql("CREATE TEMP TABLE {} ON COMMIT DROP AS SELECT {}, NULL::text AS {} "
                        "FROM {} WITH NO DATA").format(
            stage, sql(", ").join(map(self._ident, names)), self._ident(OP), self._target))
        self._copy(cur, stage, changes.table, names + [OP])
        log.debug("staged %d rows for %s", changes.num_rows, self.config.table)

    def _apply_scd1(self, cur, changes: ChangeSet, names: list[str]) -> None:
        self._apply_upserts(cur, self._ident("__sparkcdc_stage"), list(changes.keys), names)

    def _apply_upserts(self, cur, stage, keys: list[str], names: list[str]) -> None:
        """The staged rows (``__op``: ``delete``, ``upsert``, ``patch``) applied."""
        sql, I = self.driver.sql.SQL, self._ident
        on = sql(" AND ").join(sql("t.{0} = s.{0}").format(I(k)) for k in keys)
        cur.execute(sql(f"DELETE FROM {{}} t USING {{}} s WHERE {{}} AND s.{{}} = '{DELETE}'").format(
            self._target, stage, on, I(OP)))
        values = [n for n in names if n not in keys]
        col_list = sql(", ").join(map(I, names))
        for op, template in ((UPSERT, "EXCLUDED.{0}"), (PATCH, "COALESCE(EXCLUDED.{0}, t.{0})")):
            if values:
                action = sql("DO UPDATE SET ") + sql(", ").join(
                    sql("{} = ").format(I(c)) + sql(template).format(I(c)) for c in values)
            else:
                action = sql("DO NOTHING")
            cur.execute(sql("INSERT INTO {} AS t ({}) SELECT {} FROM {} WHERE {} = %s "
                            "ON CONFLICT ({}) {}").format(
                self._target, col_list, col_list, stage, I(OP),
                sql(", ").join(map(I, keys)), action), (op.value,))

    def _apply_scd2(self, cur, changes: ChangeSet, names: list[str]) -> None:
        sql, I = self.driver.sql.SQL, self._ident
        stage = I("__sparkcdc_stage")
        on = sql(" AND ").join(sql("t.{0} = s.{0}").format(I(k)) for k in changes.keys)
        cur.execute(sql("UPDATE {} t SET {} = s.{} FROM {} s WHERE {} AND t.{} IS NULL "
                        "AND s.{} = 'close'").format(
            self._target, I(END_AT), I(END_AT), stage, on, I(END_AT), I(OP)))
        values = [n for n in names if n not in changes.keys and n != START_AT]
        cur.execute(sql("UPDATE {} t SET {} FROM {} s WHERE {} AND t.{} IS NULL "
                        "AND s.{} = 'amend'").format(
            self._target, sql(", ").join(sql("{0} = s.{0}").format(I(c)) for c in values),
            stage, on, I(END_AT), I(OP)))
        col_list = sql(", ").join(map(I, names))
        cur.execute(sql("INSERT INTO {} ({}) SELECT {} FROM {} WHERE {} = 'version'").format(
            self._target, col_list, col_list, stage, I(OP)))

    # -- rows from the tasks: staging tables loaded by Spark tasks (``SQLSink``,
    #    staging.py) -------------------------------------------------------------------

    def _exists(self, cur) -> bool:
        cur.execute("SELECT to_regclass(%s)", (f'"{self.config.schema}"."{self.config.table}"',))
        return cur.fetchone()[0] is not None

    def new_rows(self, changes: ChangeSet) -> pa.Table | None:
        """In a task: the rows new to the target, asked of its key index as the driver's
        append path does (``_append_new``); the keys are noted for ``write_files``."""
        self._keys = changes.keys
        if changes.scd_type != 1:
            return None
        conn = self.connection()
        with conn.transaction(), conn.cursor() as cur:
            if not self._exists(cur):
                new, rest = changes.split_new(lambda lo, hi: False, server_compares=True)
            else:
                sql = self.driver.sql.SQL
                key = changes.keys[0]
                cast = sql(pg_type(changes.target_schema.field(key).type))
                query = sql("SELECT EXISTS (SELECT 1 FROM {} WHERE {} BETWEEN %s::{} "
                            "AND %s::{})").format(self._target, self._ident(key), cast, cast)

                def may_hold(lo, hi) -> bool:
                    cur.execute(query, (lo, hi))
                    return cur.fetchone()[0]

                new, rest = changes.split_new(may_hold, server_compares=True)
        return new if rest.num_rows == 0 else None

    def ready_for_files(self, schema: pa.Schema) -> None:
        conn = self.connection()
        with conn.transaction(), conn.cursor() as cur:
            batches.ensure(cur, self.driver, self.config)

    def _load_stage(self, rows: pa.Table, batch_id: int, kind: StageKind,
                    schema: pa.Schema) -> str:
        """In a task: a new staging table holding ``rows`` (columns ``schema``'s), made
        and filled in one transaction; its name. Its columns take the target's types where
        the target exists (as the driver's staging table does), else the sink's own."""
        sql, I = self.driver.sql.SQL, self._ident
        stage = staging.name(self.config.app_id, self.config.schema, self.config.table,
                             batch_id, kind)
        dest = I(self.config.schema, stage)
        data = [n for n in schema.names if n != OP]
        conn = self.connection()
        with conn.transaction(), conn.cursor() as cur:
            if self._exists(cur):
                extra = sql(", NULL::text AS {}").format(I(OP)) if OP in schema.names \
                    else sql("")
                cur.execute(sql("CREATE UNLOGGED TABLE {} AS SELECT {}{} FROM {} "
                                "WITH NO DATA").format(dest, sql(", ").join(map(I, data)),
                                                       extra, self._target))
            else:
                cols = [sql("{} {}").format(I(f.name), sql(pg_type(f.type))) for f in schema]
                cur.execute(sql("CREATE SCHEMA IF NOT EXISTS {}").format(I(self.config.schema)))
                cur.execute(sql("CREATE UNLOGGED TABLE {} ({})").format(
                    dest, sql(", ").join(cols)))
            self._copy(cur, dest, rows, schema.names)
        return stage

    def write_files(self, rows: pa.Table, batch_id: int) -> list[dict[str, Any]]:
        """In a task: the new rows COPYed into a staging table (``staging.py``)."""
        if not rows.num_rows:
            return []
        stage = self._load_stage(rows, batch_id, staging.FILES, rows.schema)
        log.debug("staged %d new rows of %s in %s", rows.num_rows, self.config.table, stage)
        return [{"stage": stage, "rows": rows.num_rows, "keys": list(self._keys)}]

    def _check_stage(self, cur, stage: str, rows: int) -> None:
        """A staging table holds the rows its task reported; else the batch fails as
        transient (a server that restarted empties unlogged tables)."""
        cur.execute(self.driver.sql.SQL("SELECT count(*) FROM {}").format(
            self._ident(self.config.schema, stage)))
        have = cur.fetchone()[0]
        if have != rows:
            raise ConnectionFailed(
                f"staging table {self.config.schema}.{stage} holds {have} row(s), its task "
                f"loaded {rows}: the PostgreSQL server restarted since (it empties unlogged "
                "tables)", fix="transient: the stream runs the batch again")

    def commit_files(self, files: list[dict[str, Any]], schema: pa.Schema,
                     batch_id: int, final: bool = True) -> WriteResult:
        """Every task's staging table of the batch's new rows INSERTed into the target in
        the transaction that records the batch id, and dropped in it. Not ``final`` (the
        batch's other changes of the table follow): the tables are kept for that write's
        transaction (``_apply_pending``), so the batch is still one transaction: a batch
        that fails before it leaves nothing applied, and its batch id free."""
        app, done, n = self.config.app_id, False, 0
        self._pending = None
        conn = self.connection()
        try:
            with conn.transaction(), conn.cursor() as cur:
                batches.ensure(cur, self.driver, self.config)
                last = batches.lock(cur, self.driver, self.config, app)
                if batch_id > last and not final:
                    self._pending = (batch_id, files, schema)
                    return WriteResult(batch_id, counts={"staged": sum(
                        int(f["rows"]) for f in files)})
                if batch_id > last:
                    n = self._apply_files(cur, files, schema)
                    batches.record(cur, self.driver, self.config, app, batch_id)
                    done = True
        except BaseException:
            self._key_followed = self._planned = None  # its change was rolled back: asked again
            raise
        self._drop_leftovers(batch_id)
        if not done:
            return WriteResult(batch_id, skipped=True)
        return WriteResult(batch_id, counts={"upsert": n, "appended": n} if n else {})

    def _apply_files(self, cur, files: list[dict[str, Any]], schema: pa.Schema) -> int:
        """The staging tables of new rows INSERTed into the target (made if absent, its key
        the table's) and dropped; how many rows."""
        sql, I = self.driver.sql.SQL, self._ident
        keys = next((list(f["keys"]) for f in files if f.get("keys")), [])
        if keys:
            self._create_table(cur, schema, keys)
        elif files and not self._exists(cur):
            raise SchemaError(f"the postgres table {self.config.schema}.{self.config.table} "
                              "is missing and the staged rows name no key",
                              fix="create it with a primary key, or restart the pipeline")
        n = 0
        for f in files:
            stage = I(self.config.schema, f["stage"])
            self._check_stage(cur, f["stage"], int(f["rows"]))
            n += self._insert_stage(cur, stage, keys, schema.names)
            cur.execute(sql("DROP TABLE {}").format(stage))
        return n

    @contextlib.contextmanager
    def _key_kept(self):
        """A transaction that may follow the key (``_follow_key``): if it fails, the key's
        change is rolled back with it and asked again next time."""
        try:
            yield
        except BaseException:
            self._key_followed = self._planned = None
            raise

    def _apply_pending(self, cur, batch_id: int) -> int:
        """In a batch's transaction, after its batch-id check: the staging tables of its new
        rows that ``commit_files`` kept for it, applied first; how many rows."""
        pending, self._pending = self._pending, None
        if pending is None or pending[0] != batch_id:
            return 0
        return self._apply_files(cur, pending[1], pending[2])

    def _insert_stage(self, cur, stage, keys: list[str], names: list[str]) -> int:
        """A staging table of new rows INSERTed into the target under a savepoint; merged
        (``ON CONFLICT ... DO UPDATE``) if a key is there after all. Rows inserted."""
        sql, I = self.driver.sql.SQL, self._ident
        cols = sql(", ").join(map(I, names))
        try:
            with cur.connection.transaction():  # a savepoint
                cur.execute(sql("INSERT INTO {} ({}) SELECT {} FROM {}").format(
                    self._target, cols, cols, stage))
                return cur.rowcount
        except self.driver.errors.UniqueViolation as e:
            log.warning("inserting staged new rows into %s collided with rows the range "
                        "check did not see (another writer?): %s; merging them instead",
                        self.config.table, str(e).splitlines()[0])
        values = [n for n in names if n not in keys]
        action = (sql("DO UPDATE SET ") + sql(", ").join(
            sql("{0} = EXCLUDED.{0}").format(I(c)) for c in values)) if values \
            else sql("DO NOTHING")
        cur.execute(sql("INSERT INTO {} ({}) SELECT {} FROM {} ON CONFLICT ({}) {}").format(
            self._target, cols, cols, stage, sql(", ").join(map(I, keys)), action))
        return cur.rowcount

    def _make_target(self, keys: tuple[str, ...], schema: pa.Schema) -> None:
        conn = self.connection()
        try:
            with conn.transaction(), conn.cursor() as cur:
                batches.ensure(cur, self.driver, self.config)
                self._create_table(cur, schema, list(keys))  # its key follows the table's
        except BaseException:
            self._key_followed = self._planned = None  # rolled back: asked again
            raise

    def write_changes(self, slices: KeySlices, index: int, upserts: pa.Table,
                      changed_keys: pa.Table, batch_id: int,
                      replaces: tuple[KeyRange, ...] = ()) -> dict[str, Any]:
        """In a task: the slice's upserts and its deleted keys (the changed keys no upsert
        holds) COPYed into one staging table, ``__op`` telling them apart."""
        keys = [n for n in changed_keys.column_names if n in upserts.column_names]
        deleted = changed_keys.select(keys).join(upserts.select(keys), keys=keys,
                                                 join_type="left anti")
        n_up, n_del = upserts.num_rows, deleted.num_rows
        if not n_up and not n_del:
            return {"stage": None, "rows": 0, "upserts": 0, "deletes": 0}
        desc = {"keys": keys, "columns": upserts.column_names, "upserts": n_up,
                "deletes": n_del}
        ops = pa.array([UPSERT] * n_up + [DELETE] * n_del, pa.string())
        gone = pa.table({f.name: deleted[f.name] if f.name in keys
                         else pa.nulls(n_del, f.type) for f in upserts.schema})
        rows = pa.concat_tables([upserts, gone.cast(upserts.schema)]).append_column(OP, ops)
        stage = self._load_stage(rows, batch_id, staging.CHANGES, rows.schema)
        return {"stage": stage, "rows": rows.num_rows, **desc}

    def commit_changes(self, slices: KeySlices, written: list[dict[str, Any]],
                       batch_id: int, replaces: tuple[KeyRange, ...] = (),
                       new_files: list[dict[str, Any]] | None = None,
                       schema: pa.Schema | None = None) -> WriteResult:
        """Every slice's staging table applied in one transaction that records the batch
        id, and dropped in it (``DELETE ... USING``, ``INSERT ... ON CONFLICT``: the driver's
        own statements); then the batch's staging tables no commit used."""
        if new_files and schema is not None:  # kept for this transaction (_apply_pending)
            self.commit_files(new_files, schema, batch_id, final=False)
        sql, I = self.driver.sql.SQL, self._ident
        done, staged, cleared = False, 0, 0
        conn = self.connection()
        with self._key_kept(), conn.transaction(), conn.cursor() as cur:
            batches.ensure(cur, self.driver, self.config)
            last = batches.lock(cur, self.driver, self.config, self.config.app_id)
            if batch_id <= last:
                self._pending = None
            else:
                cleared = self._clear(cur, replaces)
                staged = self._apply_pending(cur, batch_id)
                for w in written:
                    if not w.get("stage"):
                        continue
                    stage = I(self.config.schema, w["stage"])
                    self._check_stage(cur, w["stage"], int(w["rows"]))
                    self._apply_upserts(cur, stage, list(w["keys"]), list(w["columns"]))
                    cur.execute(sql("DROP TABLE {}").format(stage))
                batches.record(cur, self.driver, self.config, self.config.app_id, batch_id)
                done = True
        return self._committed(batch_id, done, written, staged, cleared)

    def _drop_leftovers(self, batch_id: int) -> int:
        """This writer's staging tables of ``batch_id`` and of batches before it that are
        still there: no commit can use them (the batch id is recorded), so they are what
        task attempts that died left (``staging.py``). How many went."""
        start = staging.prefix(self.config.app_id, self.config.schema, self.config.table)
        conn = self.connection()
        with conn.transaction(), conn.cursor() as cur:
            cur.execute("SELECT tablename FROM pg_tables WHERE schemaname = %s "
                        "AND left(tablename, %s) = %s",
                        (self.config.schema, len(start), start))
            old = [r[0] for r in cur.fetchall()
                   if (b := staging.batch_of(r[0], start)) is not None and b <= batch_id]
            for stage in old:
                cur.execute(self.driver.sql.SQL("DROP TABLE IF EXISTS {}").format(
                    self._ident(self.config.schema, stage)))
        if old:
            log.info("%s.%s: %d staging table(s) of batch %d or before no commit used, "
                     "dropped", self.config.schema, self.config.table, len(old), batch_id)
        return len(old)

    # -- reads ---------------------------------------------------------------------------

    def read(self) -> pa.Table:
        conn = self.connection()
        with conn.transaction(), conn.cursor() as cur:
            cur.execute("SELECT to_regclass(%s)", (f'"{self.config.schema}"."{self.config.table}"',))
            if cur.fetchone()[0] is None:
                return pa.table({})
            cur.execute(self.driver.sql.SQL("SELECT * FROM {}").format(self._target))
            names = [d.name for d in cur.description]
            rows = cur.fetchall()
        return pa.table({n: pa.array([r[i] for r in rows]) for i, n in enumerate(names)})
