"""Typed options of the ``delta`` sink."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from sparkcdc.sinks.base import REQUIRED, Opt, Options, sub_path

OPTIONS = {
    "path": Opt(REQUIRED, "the table's location: a local path or a URI delta-rs supports"),
    "partition-by": Opt(None, "comma-separated column names (used when the table is created)"),
    "app-id": Opt("sparkcdc", "the application id under which batch ids are recorded "
                              "(Delta's txn action); one per stream writing the table"),
    "compact-every": Opt("100", "a non-negative integer: compact small files every N batches "
                                "(0: never)"),
    "target-file-size": Opt(None, "a positive integer: bytes per file for compaction"),
}
STORAGE_PREFIX = "storage."  # storage.<key> -> delta-rs storage_options
PREFIXES = (STORAGE_PREFIX,)  # option names taken as a group


@dataclass(frozen=True)
class DeltaConfig:
    path: str
    partition_by: tuple[str, ...] = ()
    app_id: str = "sparkcdc"
    compact_every: int = 100  # a long stream of small batches must not pile up files
    target_file_size: int | None = None
    storage_options: dict[str, str] = field(default_factory=dict)

    @classmethod
    def parse(cls, options: Mapping[str, Any]) -> DeltaConfig:
        o = Options("delta", OPTIONS, options, prefixes=PREFIXES)
        return cls(path=o.text("path"), partition_by=o.names("partition-by"),
                   app_id=o.text("app-id"), compact_every=o.integer("compact-every", lo=0),
                   target_file_size=o.integer("target-file-size", lo=1),
                   storage_options=o.prefixed[STORAGE_PREFIX])


def target_options(options: Mapping[str, str], db: str, table: str) -> dict[str, str]:
    """A pipeline's Delta destination: one table per target, ``<path>/<db>/<table>``."""
    return {**options, "path": sub_path("delta", options, db, table)}
