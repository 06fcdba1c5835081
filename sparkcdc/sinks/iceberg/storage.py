"""Arrow columns as an Iceberg table stores them (the sink's, its merge's and its schema
evolution's one rule)."""

from __future__ import annotations

import pyarrow as pa
import pyarrow.compute as pc

from sparkcdc.sinks.base import micros


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
