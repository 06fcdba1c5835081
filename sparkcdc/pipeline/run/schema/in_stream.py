"""Schema changes that arrive inside a micro-batch of the pipeline's stream.

The source (``scan.schema-changes.in-stream``) carries a table's DDL statements, TRUNCATEs
and new schemas as event batches among its change batches (``spark/rows.event_batch``),
and decodes the rows after a change with the new schema. So one micro-batch can hold a
table's rows in several schemas. The apply side then, for that table, in binlog order:

1. walks its events: a ``ddl`` event's statement is kept for the next ``schema`` event (it
   names the renames, which the schemas alone cannot tell from a drop and an add); a
   ``schema`` event changes the target per ``schema.change.behavior``
   (``column_evolution.evolve_target``, each sink's own schema evolution); a ``truncate``
   under evolve or try_evolve marks where the target is emptied;
2. shapes every part of the rows like the target as it is now (``conform``): a column the
   target has but a part lacks is null, or the values of the column it was renamed from;
   a type the target kept is cast;
3. writes them in one commit with the batch id, after emptying the target when a TRUNCATE
   came (only the rows after it are written).

Writing all parts in the target's final shape gives the rows the same values as writing
them part by part around each change: a row before a rename carries its value into the
new name, a row before a drop loses the dropped value as the target does. And one commit
keeps one batch id per target and batch, so a batch replayed after a crash is skipped or
written whole: the target changes are idempotent (a second evolve finds nothing to do),
and an emptied target is emptied again before the same rows are written.
"""

from __future__ import annotations

from collections.abc import Mapping

import pyarrow as pa

from sparkcdc.spark.arrow_batches import prefers_large_types


def target_arrow_schema(columns: list[dict], spark=None) -> pa.Schema:
    """The Arrow schema of a target's rows: its data columns (Spark StructField JSON), then
    the metadata columns, in the types Spark's ``toArrow`` gives in ``spark``'s session (so
    a sink sees the same types whichever way the rows came)."""
    from pyspark.sql.pandas.types import from_arrow_schema, to_arrow_schema
    from pyspark.sql.types import StructField, StructType

    from sparkcdc.spark.rows import META_FIELDS

    fields = [StructField.fromJson(c) for c in columns]
    fields += from_arrow_schema(pa.schema(META_FIELDS), prefer_timestamp_ntz=True).fields
    return to_arrow_schema(StructType(fields), timezone="UTC",
                           prefers_large_types=prefers_large_types(spark))


def conform(part: pa.Table, target: pa.Schema,
            formerly: Mapping[str, list[str]] | None = None) -> pa.Table:
    """``part``'s rows in the target's columns: by name; a column the part lacks from the
    names it had before a rename (``formerly``: new name -> old names, latest first), else
    null; values cast to the target's type (a value that does not fit fails the batch
    rather than changing)."""
    if part.schema.equals(target):
        return part
    have = set(part.column_names)
    cols = []
    for f in target:
        name = f.name
        if name not in have:
            name = next((o for o in (formerly or {}).get(f.name, ()) if o in have), None)
        if name is None:
            cols.append(pa.nulls(part.num_rows, f.type))
            continue
        c = part.column(name)
        cols.append(c if c.type == f.type else c.cast(f.type))
    return pa.Table.from_arrays(cols, schema=target)


def add_renames(formerly: dict[str, list[str]], renamed) -> None:
    """Note ``(old, new)`` column renames: ``new`` was called ``old`` and whatever ``old``
    was called before."""
    for old, new in renamed:
        formerly[new] = [old, *formerly.get(old, [])]


def after_seq(rows: pa.Table, seq: int) -> pa.Table:
    """The rows after ``_seq`` ``seq`` (a TRUNCATE's place): the rows before it are gone."""
    return _by_seq(rows, seq, "greater")


def before_seq(rows: pa.Table, seq: int) -> pa.Table:
    """The rows before ``_seq`` ``seq`` (a DROP or RENAME of the table: the rows after it are
    another table's, one created under the name again)."""
    return _by_seq(rows, seq, "less")


def _by_seq(rows: pa.Table, seq: int, compare: str) -> pa.Table:
    import decimal

    import pyarrow.compute as pc

    bound = pa.scalar(decimal.Decimal(seq), rows.schema.field("_seq").type)
    return rows.filter(getattr(pc, compare)(rows.column("_seq"), bound))
