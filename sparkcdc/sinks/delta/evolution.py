"""Schema evolution of a Delta target: columns are added in the table's metadata; anything
else rewrites the table, because delta-rs cannot rename, drop or retype a column in place
(that needs Delta's column mapping, which it does not write). A table Spark's own Delta
writes (``writer: spark``) is changed by Spark (``spark_writer.evolve``). The rows are read, changed in
Arrow and written back as one overwrite commit that also replaces the schema; the app
transactions (the batch ids) stay in the log."""

from __future__ import annotations

import pyarrow as pa

from sparkcdc.sinks.delta import spark_writer
from sparkcdc.sinks.delta.storage import read_table, storage_table
from sparkcdc.sinks.evolution import Change, ChangeKind, arrow_change


def _stored(t: pa.DataType) -> pa.DataType:
    return storage_table(pa.table({"c": pa.array([], t)})).schema.field("c").type


def stored_columns(sink) -> pa.Schema | None:
    import deltalake

    cfg = sink.config
    if not deltalake.DeltaTable.is_deltatable(cfg.path, cfg.storage_options):
        return None
    t = deltalake.DeltaTable(cfg.path, storage_options=cfg.storage_options)
    return pa.schema(t.schema().to_arrow())


def evolve(sink, changes: list[Change], keys: tuple[str, ...]) -> None:
    import deltalake

    if sink.uses_spark:  # Spark's own Delta writes the table: it changes it too
        spark_writer.evolve(sink, changes)
        return
    if all(c.kind is ChangeKind.ADD for c in changes):
        _add_columns(sink, [pa.field(c.name, c.column_type) for c in changes])
        return
    cfg = sink.config
    t = deltalake.DeltaTable(cfg.path, storage_options=cfg.storage_options)
    data = read_table(t)
    for c in changes:
        data = arrow_change(data, c, _stored)
    deltalake.write_deltalake(
        t, data, mode="overwrite", schema_mode="overwrite",
        partition_by=list(t.metadata().partition_columns) or None,
        commit_properties=deltalake.CommitProperties(custom_metadata={
            "sparkcdc.schema-change": "; ".join(c.describe() for c in changes)}))


def _add_columns(sink, fields: list[pa.Field]) -> None:
    import deltalake
    from deltalake.schema import Field, Schema


    cfg = sink.config
    if not deltalake.DeltaTable.is_deltatable(cfg.path, cfg.storage_options):
        return  # created with the new columns on the first write
    t = deltalake.DeltaTable(cfg.path, storage_options=cfg.storage_options)
    stored = storage_table(pa.table({f.name: pa.array([], f.type) for f in fields})).schema
    have = set(pa.schema(t.schema().to_arrow()).names)
    delta_fields = [f for f in Schema.from_arrow(stored).fields if f.name not in have]
    if delta_fields:
        t.alter.add_columns([Field(f.name, f.type, nullable=True) for f in delta_fields])


def empty(sink) -> None:
    import deltalake

    if sink.uses_spark:
        spark_writer.empty(sink)
        return
    cfg = sink.config
    if deltalake.DeltaTable.is_deltatable(cfg.path, cfg.storage_options):
        deltalake.DeltaTable(cfg.path, storage_options=cfg.storage_options).delete()
