"""Change rows carried through Spark as whole Arrow record batches.

Spark moves a Python source's rows into the JVM one by one (its row format), and a consumer
that reads them back as Arrow on the driver pays the way back too: in a pipeline that
collects every micro-batch to the driver for a sink's writer, that round trip cost more than
reading MySQL. With ``arrow-batches`` each output row of the source is one Arrow record
batch, serialized in Arrow's IPC stream format: ``_rows`` (its row count) and ``_batch``
(the bytes). Spark then moves a few hundred rows per micro-batch instead of millions, and
``decode`` gives the driver the batches exactly as the readers built them: same types, same
values, nothing re-encoded (IPC is Arrow's own lossless format).

The batches hold the source's usual ``columns`` shape (the table's typed columns, then the
metadata columns). ``spark_arrow_schema`` names the Arrow schema Spark's ``toArrow`` would
have given those rows, so a sink sees the same types whichever way the rows came.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import pyarrow as pa

from sparkcdc.core.table_events import TableEvent

SCHEMA = pa.schema([pa.field("_rows", pa.int64(), nullable=False),
                    pa.field("_batch", pa.binary(), nullable=False)])


def to_ipc(data: pa.RecordBatch | pa.Table) -> pa.Buffer:
    """``data`` in Arrow's IPC stream format (lossless, schema and metadata included)."""
    sink = pa.BufferOutputStream()
    with pa.ipc.new_stream(sink, data.schema) as w:
        w.write(data)
    return sink.getvalue()


def from_ipc(data) -> pa.Table:
    """A table back from ``to_ipc``'s bytes."""
    return pa.ipc.open_stream(data).read_all()


def encode(batch: pa.RecordBatch) -> pa.RecordBatch:
    """One output row holding ``batch`` as IPC stream bytes (no copy of the bytes)."""
    buf = to_ipc(batch)
    offsets = pa.py_buffer(pa.array([0, buf.size], pa.int32()).buffers()[1])
    payload = pa.Array.from_buffers(pa.binary(), 1, [None, offsets, buf])
    return pa.RecordBatch.from_arrays([pa.array([batch.num_rows], pa.int64()), payload],
                                      schema=SCHEMA)


def decode(rows: pa.Table, schema: pa.Schema | None = None) -> pa.Table:
    """The change rows of a collected micro-batch (``df.toArrow()`` of the source's rows).
    ``schema`` is the shape to expect (needed when there are no rows), and the result is
    cast to it."""
    tables = _payloads(rows)
    if not tables:
        if schema is None:
            raise ValueError("no batches to decode and no schema to give the empty table")
        return schema.empty_table()
    t = pa.concat_tables(tables) if len(tables) > 1 else tables[0]
    return t.cast(schema) if schema is not None and not t.schema.equals(schema) else t


def _payloads(rows: pa.Table) -> list[pa.Table]:
    """The record batches a collected micro-batch carries, each back as a table."""
    return [from_ipc(v) for v in rows.column("_batch").to_pylist()]


def spark_arrow_schema(source_schema: pa.Schema, spark=None) -> pa.Schema:
    """The Arrow schema ``toArrow`` gives rows of ``source_schema`` once they passed through
    Spark (its types, UTC timestamps, large strings if the session prefers them)."""
    from pyspark.sql.pandas.types import from_arrow_schema, to_arrow_schema

    spark_schema = from_arrow_schema(source_schema, prefer_timestamp_ntz=True)
    return to_arrow_schema(spark_schema, timezone="UTC",
                           prefers_large_types=prefers_large_types(spark))


def prefers_large_types(spark=None) -> bool:
    """Whether ``spark``'s ``toArrow`` gives large strings and binaries."""
    return spark is not None and spark.conf.get(
        "spark.sql.execution.arrow.useLargeVarTypes", "false") == "true"


@dataclass
class TableChanges:
    """One table's part of a collected micro-batch: its change rows as they came, one table
    per schema it had (``parts``), and the events of the table among them (``events``,
    typed: ``core/table_events.py``) when the stream carries schema changes."""

    parts: list[pa.Table] = field(default_factory=list)
    events: list[TableEvent] = field(default_factory=list)

    def rows(self) -> pa.Table:
        """All the rows in one table (the parts share one schema when no event changed it)."""
        if not self.parts:
            raise ValueError("no rows")
        return pa.concat_tables(self.parts) if len(self.parts) > 1 else self.parts[0]


def decode_tables(rows: pa.Table) -> dict[str, TableChanges]:
    """The change rows and events of a collected micro-batch of several tables, per
    ``db.table``, in the order the batches came. In the ``tables`` shape each record batch
    holds one table in its own columns; in the ``columns`` shape (tables of one schema) a
    batch may mix them, and is split by its ``_database`` and ``_table`` columns."""
    import pyarrow.compute as pc

    from sparkcdc.spark.rows import batch_event

    out: dict[str, TableChanges] = {}
    for t in _payloads(rows):
        if not t.num_rows:
            ev = batch_event(t.schema)
            if ev is not None:
                out.setdefault(str(ev.table_id), TableChanges()).events.append(ev)
            continue
        names = pc.binary_join_element_wise(t["_database"], t["_table"], ".")
        kinds = pc.unique(names)
        if len(kinds) == 1:
            _add_part(out.setdefault(kinds[0].as_py(), TableChanges()), t)
            continue
        for name in kinds.to_pylist():
            _add_part(out.setdefault(name, TableChanges()), t.filter(pc.equal(names, name)))
    return out


def _add_part(changes: TableChanges, t: pa.Table) -> None:
    """Rows of one schema join the last part of that schema: a table whose schema did not
    change in the batch has one part."""
    t = t.replace_schema_metadata(None)
    for i, p in enumerate(changes.parts):
        if p.schema.equals(t.schema):
            changes.parts[i] = pa.concat_tables([p, t])
            return
    changes.parts.append(t)
