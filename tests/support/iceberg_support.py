"""Reading an Iceberg table back two independent ways: pyiceberg's scan (the sink's own
reader) and iceberg-rust's, through DataFusion (pyiceberg-core: its own manifest reading,
delete file matching and Parquet reading). A table the sink wrote must read the same
through both."""

from __future__ import annotations

import pyarrow as pa


def by_pyiceberg(table) -> pa.Table:
    return table.scan().to_arrow()


def by_iceberg_rust(table) -> pa.Table:
    """The table (a pyiceberg ``Table``, as of its metadata file) read by iceberg-rust."""
    from datafusion import SessionContext

    ctx = SessionContext()
    # pyiceberg hands DataFusion iceberg-rust's provider of the table's metadata file
    # (Table.__datafusion_table_provider__); nothing of pyiceberg's reading is used
    ctx.register_table("t", table)
    return ctx.sql("SELECT * FROM t").to_arrow_table()


def rows(t: pa.Table, names: list[str]) -> list[tuple]:
    """The rows as sorted tuples of ``names`` (each reader orders its own way)."""
    return sorted(tuple(r[n] for n in names) for r in t.select(names).to_pylist())


def orphans(table) -> list:
    """Files in the table's data and metadata folders that no snapshot of its metadata names
    (data and delete files, manifests, manifest lists; the metadata files aside): what a
    killed attempt left and nothing removed."""
    from sparkcdc.sinks.iceberg import files

    root = files.local(table.location())
    named = files.referenced(table)
    return sorted(p for p in root.rglob("*") if p.is_file()
                  and not p.name.endswith(".metadata.json") and str(p) not in named)
