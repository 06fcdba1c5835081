"""Typed options of the ``delta`` sink."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from sparkcdc.errors import ConfigError
from sparkcdc.options import REQUIRED, Opt, Options
from sparkcdc.sinks.base import set_per_target, sub_path, table_name_parts
from sparkcdc.sinks.kinds import Word

OPTIONS = {
    "path": Opt(REQUIRED, "the table's location: a local path or a URI delta-rs supports"),
    "partition-by": Opt(None, "comma-separated column names (used when the table is created)"),
    "app-id": Opt("sparkcdc", "the application id under which batch ids are recorded "
                              "(Delta's txn action); one per stream writing the table"),
    "compact-every": Opt("100", "a non-negative integer: compact small files every N batches "
                                "(0: never)"),
    "target-file-size": Opt(None, "a positive integer: bytes per file for compaction"),
    "purge-deleted-share": Opt("0.2", "a number in (0, 1]: a file whose deletion vector "
                                      "would delete at least this share of its rows is "
                                      "rewritten without them by the task of the batch that "
                                      "got it there, and at each compaction"),
    "deletion-vectors": Opt("true", "true or false: a table the sink creates gets Delta's "
                                    "deletionVectors feature, and the changes of a table that "
                                    "has it are written by Spark tasks as new rows plus "
                                    "deletion vectors (docs/sinks.md); false: no new table "
                                    "gets it"),
    "writer": Opt("auto", "auto, spark or sparkcdc: who writes the table. spark: Spark's own "
                          "Delta (delta-spark's MERGE with deletion vectors, from the "
                          "micro-batch's DataFrame), which the pipeline's Spark session must "
                          "have; sparkcdc: sparkcdc's own Delta writers (Spark tasks and "
                          "delta-rs); auto: spark when the session has Delta, else sparkcdc"),
    "catalog": Opt(None, "a Spark catalog (such as spark_catalog) that also names the table, "
                         "as 'catalog-table'; needs Delta Lake in the Spark session"),
    "catalog-table": Opt(None, "the table's name 'database.table' in 'catalog' (a pipeline "
                               "names each target so, from its route)"),
}
STORAGE_PREFIX = "storage."  # storage.<key> -> delta-rs storage_options
PROPERTY_PREFIX = "table-property."  # table-property.<key> -> the table's configuration
PREFIXES = (STORAGE_PREFIX, PROPERTY_PREFIX)  # option names taken as a group


class DeltaWriter(Word):
    """Who writes a Delta table (the option ``writer``; ``spark_writer.chosen``)."""

    AUTO = "auto"  # Spark's Delta where the session has it, else sparkcdc's
    SPARK = "spark"  # Spark's own Delta (delta-spark's MERGE)
    SPARKCDC = "sparkcdc"  # sparkcdc's writers: Spark tasks and delta-rs


WRITERS = tuple(w.value for w in DeltaWriter)


@dataclass(frozen=True)
class DeltaConfig:
    path: str
    partition_by: tuple[str, ...] = ()
    app_id: str = "sparkcdc"
    compact_every: int = 100  # a long stream of small batches must not pile up files
    target_file_size: int | None = None
    storage_options: dict[str, str] = field(default_factory=dict)
    catalog: str | None = None  # a Spark catalog naming the table too (sinks/delta/catalog.py)
    catalog_table: tuple[str, str] | None = None  # (database, table) in it
    table_properties: dict[str, str] = field(default_factory=dict)  # set when it is created
    deletion_vectors: bool = True  # a table created gets the feature (sinks/delta/changes.py)
    purge_deleted_share: float = 0.2  # files with this much deleted are rewritten (changes.purge)
    writer: DeltaWriter = DeltaWriter.AUTO  # (sinks/delta/spark_writer.py)

    @classmethod
    def parse(cls, options: Mapping[str, Any]) -> DeltaConfig:
        o = Options("delta sink", OPTIONS, options, prefixes=PREFIXES)
        catalog, name = o.text("catalog"), o.text("catalog-table")
        if bool(catalog) != bool(name):
            missing = "catalog-table" if catalog else "catalog"
            raise ConfigError(f"the delta sink's options 'catalog' and 'catalog-table' go "
                              f"together, and '{missing}' is missing",
                              fix="give both (catalog: spark_catalog, catalog-table: db.table)"
                                  ", or neither for a table known by its path alone",
                              key=missing)
        return cls(path=o.given("path"), partition_by=o.names("partition-by"),
                   app_id=o.given("app-id"), compact_every=o.given_integer("compact-every", lo=0),
                   target_file_size=o.integer("target-file-size", lo=1),
                   deletion_vectors=o.flag("deletion-vectors"),
                   purge_deleted_share=o.share("purge-deleted-share"),
                   writer=DeltaWriter(o.choice("writer", WRITERS)),
                   storage_options=o.prefixed[STORAGE_PREFIX], catalog=catalog,
                   table_properties=o.prefixed[PROPERTY_PREFIX],
                   catalog_table=_pair(table_name_parts("delta", "catalog-table", name, 2))
                   if name else None)


def _pair(parts: tuple[str, ...]) -> tuple[str, str]:
    """``table_name_parts``' two parts, typed as two."""
    database, table = parts
    return database, table


def target_options(options: Mapping[str, str], db: str, table: str) -> dict[str, str]:
    """A pipeline's Delta destination: one table per target, ``<path>/<db>/<table>``; with
    a ``catalog``, also named ``db.table`` there."""
    out = {**options, "path": sub_path("delta", options, db, table)}
    if options.get("catalog"):
        set_per_target("delta", options, "catalog-table")
        out["catalog-table"] = f"{db}.{table}"
    return out
