"""Apache Iceberg through pyiceberg: one transaction (one snapshot commit) per batch.

Per batch, in one pyiceberg transaction: read the rows whose key lies in the range of the
batch's keys, delete that range (copy-on-write), append back the untouched rows with the new
and patched ones (SCD2: closed versions), and set the table property
``sparkcdc.batch-id.<app-id>``, so data and batch id commit together.

Iceberg has no 8/16-bit integers (stored as ``int``) and no interval type: MySQL TIME
(Spark ``interval day to second``) is stored as a ``long`` of microseconds.
"""

from __future__ import annotations

import datetime as dt
import threading
from collections.abc import Mapping
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc

from sparkcdc.sinks import require
from sparkcdc.sinks.base import (
    CLOSE,
    DELETE,
    END_AT,
    PATCH,
    UPSERT,
    VERSION,
    ChangeSet,
    Sink,
    WriteResult,
    check_key_not_null,
    log,
    micros,
)
from sparkcdc.sinks.iceberg.config import IcebergConfig


def storage_table(t: pa.Table) -> pa.Table:
    """Arrow columns as Iceberg stores them: small ints widened, durations as microseconds,
    every field nullable (Iceberg refuses optional data for required columns)."""
    cols, fields = [], []
    for f, c in zip(t.schema, t.columns):
        if pa.types.is_duration(f.type):
            c, typ = micros(c), pa.int64()
        elif pa.types.is_int8(f.type) or pa.types.is_int16(f.type):
            c, typ = pc.cast(c, pa.int32()), pa.int32()
        else:
            typ = f.type
        cols.append(c)
        fields.append(pa.field(f.name, typ, nullable=True))
    return pa.Table.from_arrays(cols, schema=pa.schema(fields))


_CATALOG_LOCK = threading.Lock()

class IcebergSink(Sink):
    type = "iceberg"

    def __init__(self, config: IcebergConfig):
        self.config = config
        require("pyiceberg", "iceberg")
        self._catalog = None

    @classmethod
    def from_options(cls, options: Mapping[str, Any]) -> IcebergSink:
        return cls(IcebergConfig.parse(options))

    def catalog(self):
        if self._catalog is None:
            from pyiceberg.catalog import load_catalog

            # A pipeline runs one stream per table, each with its own sink, in one process:
            # a SQL catalog creates its tables on first load, and two first loads at once
            # race ("table iceberg_tables already exists"). Load one at a time.
            with _CATALOG_LOCK:
                self._catalog = load_catalog(self.config.catalog_name,
                                             **self.config.catalog_properties)
        return self._catalog

    def _table(self):
        from pyiceberg.exceptions import NoSuchTableError

        try:
            return self.catalog().load_table(self.config.identifier)
        except NoSuchTableError:
            return None

    def last_batch_id(self) -> int | None:
        t = self._table()
        v = None if t is None else t.properties.get(self.config.batch_property)
        return None if v is None else int(v)

    def _create(self, schema: pa.Schema):
        cat = self.catalog()
        cat.create_namespace_if_not_exists(self.config.namespace)
        log.info("creating Iceberg table %s", ".".join(self.config.identifier))
        return cat.create_table_if_not_exists(self.config.identifier, schema=schema)

    def write(self, changes: ChangeSet, batch_id: int) -> WriteResult:
        check_key_not_null(changes)
        schema = storage_table(changes.rows()).schema
        table = self._table() or self._create(schema)
        last = table.properties.get(self.config.batch_property)
        if last is not None and batch_id <= int(last):
            return WriteResult(batch_id, skipped=True)
        keys = list(changes.keys)
        arrow_schema = table.schema().as_arrow()
        with table.transaction() as tx:
            if changes.num_rows:
                ops = (CLOSE,) if changes.scd_type == 2 else (UPSERT, PATCH, DELETE)
                key_schema = pa.schema([arrow_schema.field(k) for k in keys])
                touched = _distinct(storage_table(changes.key_rows(*ops)).select(keys)
                                    .cast(key_schema), keys)
                # copy-on-write by key range: read the rows in the touched keys' range, keep
                # the untouched ones, and rewrite the range (a filter of two literals; one
                # literal per key makes pyiceberg's expression binding the bottleneck)
                span = _key_range(touched, keys[0])
                current = (table.scan(row_filter=span).to_arrow().cast(arrow_schema)
                           if table.current_snapshot() is not None else arrow_schema.empty_table())
                keep = current.join(touched, keys, join_type="left anti")
                hit = current.join(touched, keys, join_type="left semi")
                if changes.scd_type == 1:
                    new_rows = [storage_table(changes.rows(UPSERT)).cast(arrow_schema),
                                _patched(storage_table(changes.rows(PATCH)).cast(arrow_schema),
                                         hit, keys)]
                else:
                    is_open = pc.is_null(hit[END_AT])
                    closes = storage_table(changes.key_rows(CLOSE)).cast(
                        pa.schema([arrow_schema.field(n) for n in keys + [END_AT]]))
                    new_rows = [hit.filter(pc.invert(is_open)),
                                _closed(hit.filter(is_open), closes, keys),
                                storage_table(changes.rows(VERSION)).cast(arrow_schema)]
                rows = pa.concat_tables([keep.select(arrow_schema.names)]
                                        + [r.select(arrow_schema.names) for r in new_rows])
                if current.num_rows:
                    tx.delete(span)
                if rows.num_rows:
                    tx.append(rows.cast(arrow_schema))
            tx.set_properties({self.config.batch_property: str(batch_id)})
        return WriteResult(batch_id, counts=changes.counts())

    def read(self) -> pa.Table:
        t = self._table()
        return pa.table({}) if t is None else t.scan().to_arrow()


def _distinct(t: pa.Table, keys: list[str]) -> pa.Table:
    return t.group_by(keys, use_threads=False).aggregate([]).select(keys)


def _key_range(touched: pa.Table, key: str):
    """Rows whose first key column lies between the touched keys' least and greatest."""
    from pyiceberg.expressions import AlwaysTrue, And, GreaterThanOrEqual, LessThanOrEqual

    col = touched[key]
    if pa.types.is_boolean(col.type) or pa.types.is_binary(col.type):
        return AlwaysTrue()
    lo, hi = pc.min(col).as_py(), pc.max(col).as_py()
    if isinstance(lo, dt.date):  # dates and timestamps as ISO text
        lo, hi = lo.isoformat(), hi.isoformat()
    return And(GreaterThanOrEqual(key, lo), LessThanOrEqual(key, hi))


def _patched(patches: pa.Table, current: pa.Table, keys: list[str]) -> pa.Table:
    """Patch rows with their nulls filled from the current rows (left join on the keys)."""
    if current.num_rows == 0 or patches.num_rows == 0:
        return patches
    values = [c for c in patches.column_names if c not in keys]
    cur = current.select(keys + values).rename_columns(keys + [f"__cur_{c}" for c in values])
    joined = patches.join(cur, keys, join_type="left outer")
    cols = [joined[c] if c in keys else pc.coalesce(joined[c], joined[f"__cur_{c}"])
            for c in patches.column_names]
    return pa.Table.from_arrays(cols, schema=patches.schema)


def _closed(current: pa.Table, closes: pa.Table, keys: list[str]) -> pa.Table:
    """The open versions with ``__END_AT`` set from the close rows."""
    if current.num_rows == 0:
        return current
    ends = closes.rename_columns(keys + ["__new_end"])
    joined = current.drop_columns([END_AT]).join(ends, keys, join_type="inner")
    joined = joined.rename_columns([END_AT if c == "__new_end" else c
                                    for c in joined.column_names])
    return joined.select(current.column_names)
