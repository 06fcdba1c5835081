"""Delta Lake through delta-rs: one MERGE commit per batch, carrying the batch id.

The batch id is recorded as Delta's app transaction (``txn`` action, app id + version) in the
same commit as the data, which is how Spark's own Delta writer makes ``foreachBatch``
idempotent. Deletes, upserts and patches go through one MERGE: the planned rows carry
``__op`` and each clause matches on it.

Delta has no interval type: MySQL TIME (Spark ``interval day to second``) is stored as a
``long`` of microseconds (Debezium's MicroTime).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import pyarrow as pa

from sparkcdc.errors import SchemaError
from sparkcdc.sinks import require
from sparkcdc.sinks.base import (
    END_AT,
    OP,
    ChangeSet,
    Sink,
    WriteResult,
    check_key_not_null,
    log,
    micros,
)
from sparkcdc.sinks.delta.config import DeltaConfig


def _q(name: str) -> str:
    return "`" + name.replace("`", "``") + "`"


def storage_table(t: pa.Table) -> pa.Table:
    """Arrow columns as Delta stores them (durations as int64 microseconds)."""
    for i, f in enumerate(t.schema):
        if pa.types.is_duration(f.type):
            t = t.set_column(i, pa.field(f.name, pa.int64()), micros(t.column(i)))
    return t


class DeltaSink(Sink):
    type = "delta"

    def __init__(self, config: DeltaConfig):
        self.config = config
        self._dl = require("deltalake", "delta")
        self._batches = 0

    @classmethod
    def from_options(cls, options: Mapping[str, Any]) -> DeltaSink:
        return cls(DeltaConfig.parse(options))

    def _table(self):
        dl = self._dl
        if not dl.DeltaTable.is_deltatable(self.config.path, self.config.storage_options):
            return None
        return dl.DeltaTable(self.config.path, storage_options=self.config.storage_options)

    def last_batch_id(self) -> int | None:
        t = self._table()
        return None if t is None else t.transaction_version(self.config.app_id)

    def _create(self, schema: pa.Schema):
        bad = [c for c in self.config.partition_by if c not in schema.names]
        if bad:
            raise SchemaError(f"partition columns {bad} are not target columns of {self.config.path}",
                              fix=f"partition-by takes some of: {', '.join(schema.names)}")
        log.info("creating Delta table %s", self.config.path)
        return self._dl.DeltaTable.create(
            self.config.path, schema, mode="ignore",
            partition_by=list(self.config.partition_by) or None,
            storage_options=self.config.storage_options)

    def write(self, changes: ChangeSet, batch_id: int) -> WriteResult:
        dl = self._dl
        check_key_not_null(changes)
        source = storage_table(changes.table)
        target_schema = storage_table(changes.rows()).schema
        table = self._table() or self._create(target_schema)
        last = table.transaction_version(self.config.app_id)
        if last is not None and batch_id <= last:
            return WriteResult(batch_id, skipped=True)
        props = dl.CommitProperties(
            app_transactions=[dl.Transaction(self.config.app_id, batch_id)],
            custom_metadata={"sparkcdc.batch": str(batch_id)})
        if source.num_rows == 0:
            # nothing to merge, but the batch id must still be recorded
            dl.write_deltalake(table, source.select(target_schema.names).slice(0, 0),
                               mode="append", commit_properties=props)
        else:
            self._merge(table, source, target_schema.names, changes, props)
        self._batches += 1
        if self.config.compact_every and self._batches % self.config.compact_every == 0:
            metrics = table.optimize.compact(target_size=self.config.target_file_size)
            log.info("compacted %s: %s", self.config.path, metrics)
        return WriteResult(batch_id, counts=changes.counts())

    def _merge(self, table, source: pa.Table, names: list[str], changes: ChangeSet, props):
        on = " AND ".join(f"t.{_q(k)} = s.{_q(k)}" for k in changes.keys)
        op = f"s.{_q(OP)}"
        insert = {_q(c): f"s.{_q(c)}" for c in names}
        if changes.scd_type == 2:
            m = table.merge(source, f"{on} AND t.{_q(END_AT)} IS NULL AND {op} = 'close'",
                            source_alias="s", target_alias="t", commit_properties=props)
            m = (m.when_matched_update({_q(END_AT): f"s.{_q(END_AT)}"})
                  .when_not_matched_insert(insert, predicate=f"{op} = 'version'"))
        else:
            values = [c for c in names if c not in changes.keys]
            patch = {_q(c): f"coalesce(s.{_q(c)}, t.{_q(c)})" for c in values}
            m = table.merge(source, on, source_alias="s", target_alias="t",
                            commit_properties=props)
            m = m.when_matched_delete(predicate=f"{op} = 'delete'")
            if values:
                m = (m.when_matched_update({_q(c): f"s.{_q(c)}" for c in values},
                                           predicate=f"{op} = 'upsert'")
                      .when_matched_update(patch, predicate=f"{op} = 'patch'"))
            m = m.when_not_matched_insert(insert, predicate=f"{op} <> 'delete'")
        metrics = m.execute()
        log.debug("merge into %s: %s", self.config.path, metrics)

    def read(self) -> pa.Table:
        t = self._table()
        return pa.table({}) if t is None else t.to_pyarrow_table()
