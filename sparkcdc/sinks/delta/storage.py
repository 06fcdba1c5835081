"""A Delta table's rows as delta-rs stores and reads them: Arrow columns in the types Delta
has (``storage_table``), and every live row of a table with deletion vectors
(``read_table``). Shared by the sink's writes, its schema evolution and the tests."""

from __future__ import annotations

from typing import Any

import pyarrow as pa

from sparkcdc.sinks.base import micros

DELETION_VECTORS = "deletionVectors"


def storage_table(t: pa.Table) -> pa.Table:
    """Arrow columns as Delta stores them (durations as int64 microseconds)."""
    for i, f in enumerate(t.schema):
        if pa.types.is_duration(f.type):
            t = t.set_column(i, pa.field(f.name, pa.int64()), micros(t.column(i)))
    return t


def has_deletion_vectors(table: Any) -> bool:
    """Whether the table's protocol has the deletionVectors feature (its readers must
    apply them)."""
    p = table.protocol()
    return DELETION_VECTORS in (p.reader_features or ())


def read_table(table: Any) -> pa.Table:
    """Every live row of a ``DeltaTable``. delta-rs' pyarrow dataset refuses tables with
    deletion vectors; its DataFusion scan applies them, so those are read through it."""
    if not has_deletion_vectors(table):
        return table.to_pyarrow_table()
    from deltalake import QueryBuilder

    schema = pa.schema(table.schema().to_arrow())
    got = pa.table(QueryBuilder().register("t", table).execute("SELECT * FROM t").read_all())
    return got.select(schema.names).cast(schema)
