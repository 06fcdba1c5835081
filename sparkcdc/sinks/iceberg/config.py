"""Typed options of the ``iceberg`` sink."""

from __future__ import annotations

import os
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from sparkcdc.errors import ConfigError
from sparkcdc.options import REQUIRED, Opt, Options
from sparkcdc.sinks.base import set_per_target, table_name_parts

OPTIONS = {
    "table": Opt(REQUIRED, "'namespace.table'"),
    "warehouse": Opt(None, "a local directory (or URI) for data files; with no catalog.uri "
                           "it also holds the embedded SQLite catalog"),
    "catalog-name": Opt("sparkcdc", "the catalog's name"),
    "app-id": Opt("sparkcdc", "the application id under which batch ids are recorded "
                              "(table property sparkcdc.batch-id.<app-id>)"),
    "compact-every": Opt("100", "a non-negative integer: every N batches, rewrite the "
                                "table's small data files into few (0: never)"),
    "purge-deleted-share": Opt("0.2", "a number in (0, 1]: a data file a batch would "
                                      "leave with this share of its rows deleted is "
                                      "rewritten without them by the batch's task, in the "
                                      "batch's commit"),
    "partition-by": Opt(None, "comma-separated column names: the table is created "
                              "partitioned by their values (identity partitions)"),
}
CATALOG_PREFIX = "catalog."  # catalog.<key> -> pyiceberg catalog properties (type, uri, ...)
PROPERTY_PREFIX = "table-property."  # table-property.<key> -> the table's properties
PREFIXES = (CATALOG_PREFIX, PROPERTY_PREFIX)  # option names taken as a group


@dataclass(frozen=True)
class IcebergConfig:
    namespace: str
    table: str
    catalog_name: str = "sparkcdc"
    app_id: str = "sparkcdc"
    catalog_properties: dict[str, str] = field(default_factory=dict)
    compact_every: int = 100  # a long stream of small batches must not pile up files
    partition_by: tuple[str, ...] = ()  # identity partitions, when the table is created
    table_properties: dict[str, str] = field(default_factory=dict)  # likewise
    purge_deleted_share: float = 0.2  # data files this much deleted are rewritten

    @property
    def identifier(self) -> tuple[str, str]:
        return (self.namespace, self.table)

    @property
    def batch_property(self) -> str:
        return f"sparkcdc.batch-id.{self.app_id}"

    @property
    def files_property(self) -> str:
        """Where a batch whose task files were committed before its other changes is
        recorded (the batch id proper follows with them)."""
        return f"sparkcdc.files-batch-id.{self.app_id}"

    @classmethod
    def parse(cls, options: Mapping[str, Any]) -> IcebergConfig:
        o = Options("iceberg sink", OPTIONS, options, prefixes=PREFIXES)
        ns, name = table_name_parts("iceberg", "table", o.given("table"), 2)
        props = dict(o.prefixed[CATALOG_PREFIX])
        warehouse = o.text("warehouse")
        if "uri" not in props:
            if not warehouse:
                raise ConfigError("the iceberg sink needs 'warehouse' (or catalog.uri)",
                                  fix="give warehouse=/path/to/dir for the embedded SQLite "
                                      "catalog, or catalog.type/catalog.uri for another one")
            if "://" not in warehouse:
                os.makedirs(warehouse, exist_ok=True)
                path = os.path.abspath(warehouse)
                props.setdefault("type", "sql")
                props["uri"] = f"sqlite:///{path}/catalog.db"
                warehouse = f"file://{path}"
        if warehouse:
            props.setdefault("warehouse", warehouse)
        return cls(namespace=ns, table=name, catalog_name=o.given("catalog-name"),
                   app_id=o.given("app-id"), catalog_properties=props,
                   compact_every=o.given_integer("compact-every", lo=0),
                   partition_by=o.names("partition-by"),
                   table_properties=o.prefixed[PROPERTY_PREFIX],
                   purge_deleted_share=o.share("purge-deleted-share"))


def target_options(options: Mapping[str, str], db: str, table: str) -> dict[str, str]:
    """A pipeline's Iceberg destination is a catalog: a target ``db.table`` is the table
    ``table`` in the namespace ``db``."""
    set_per_target("iceberg", options, "table")
    return {**options, "table": f"{db}.{table}"}
