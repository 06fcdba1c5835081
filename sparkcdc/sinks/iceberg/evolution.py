"""Schema evolution of an Iceberg target: in metadata (columns have ids), add, drop, rename
and the spec's type promotions, in one commit; ``copy`` rewrites the table's rows after
it."""

from __future__ import annotations

import pyarrow as pa

from sparkcdc.sinks.evolution import Change, ChangeKind, arrow_change
from sparkcdc.sinks.iceberg.storage import storage_table


def _stored(t: pa.DataType) -> pa.DataType:
    return storage_table(pa.table({"c": pa.array([], t)})).schema.field("c").type


def promotable(old: pa.DataType, new: pa.DataType) -> bool:
    """Iceberg's allowed type promotions (the spec): int -> long, float -> double, and a
    decimal's precision widened with the same scale."""
    if old == new:
        return True
    if pa.types.is_int32(old) and pa.types.is_int64(new):
        return True
    if pa.types.is_float32(old) and pa.types.is_float64(new):
        return True
    return (pa.types.is_decimal(old) and pa.types.is_decimal(new) and old.scale == new.scale
            and new.precision >= old.precision)


def can_change(change: Change, current: pa.DataType | None) -> bool:
    if change.kind is ChangeKind.RETYPE and current is not None:
        return promotable(current, _stored(change.column_type))
    return True


def refusal_note(change: Change) -> str:
    if change.kind is ChangeKind.RETYPE:
        return ("Iceberg changes a type only by its promotions: int to long, float to "
                "double, a wider decimal")
    return ""


def _exists(sink) -> bool:
    return sink.catalog().table_exists(sink.config.identifier)


def stored_columns(sink) -> pa.Schema | None:
    if not _exists(sink):
        return None
    return sink.catalog().load_table(sink.config.identifier).schema().as_arrow()


def evolve(sink, changes: list[Change], keys: tuple[str, ...]) -> None:
    t = sink.catalog().load_table(sink.config.identifier)
    with t.transaction() as tx, tx.update_schema() as u:
        for c in changes:
            if c.kind in (ChangeKind.ADD, ChangeKind.RETYPE):
                u.union_by_name(pa.schema([pa.field(c.name, _stored(c.column_type))]))
            elif c.kind is ChangeKind.DROP:
                u.delete_column(c.name)
            elif c.kind is ChangeKind.RENAME:
                u.rename_column(c.name, c.target_name)
    copies = [c for c in changes if c.kind is ChangeKind.COPY]
    if copies:
        t = sink.catalog().load_table(sink.config.identifier)
        data = t.scan().to_arrow()
        for c in copies:
            data = arrow_change(data, c, _stored)
        with t.transaction() as tx:
            tx.overwrite(data.cast(t.schema().as_arrow()))


def empty(sink) -> None:
    if _exists(sink):
        sink.catalog().load_table(sink.config.identifier).delete()  # all rows
