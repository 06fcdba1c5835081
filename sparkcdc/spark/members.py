"""The members file: which tables the pipeline's one stream reads, and from where.

The pipeline's run (``pipeline.run.stream``) writes it into the checkpoint whenever a table
comes or goes; the ``mysql-cdc`` source reads it at each batch (``scan.tables.file``) and
fits its plan to it without a restart. It is the one value that crosses from the driver's
pipeline to the source in the query's own process, so it crosses as this type, written
with ``to_dict`` and read with ``from_dict``, never as keys looked up on a raw dict.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import Any

from sparkcdc.core.offsets import BinlogOffset
from sparkcdc.core.schema import TableId, TableSchema

__all__ = ["Members", "Reread"]


@dataclass(frozen=True)
class Reread:
    """A table read again in part while it streams (``sparkcdc snapshot --where``): the
    request's id (a new id is a new request) and its condition."""

    id: int
    where: str

    def to_dict(self) -> dict[str, Any]:
        return {"id": self.id, "where": self.where}

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> Reread:
        return cls(int(d["id"]), str(d["where"]))


@dataclass(frozen=True)
class Members:
    """Each member's generation (a new one is the table taken again), the schema the
    pipeline discovered (the source takes it instead of discovering again), the binlog
    offset of a table that joins without a snapshot, and the tables read again in part."""

    generations: dict[TableId, int]
    schemas: dict[TableId, TableSchema] = field(default_factory=dict)
    since: dict[TableId, BinlogOffset] = field(default_factory=dict)
    rereads: dict[TableId, Reread] = field(default_factory=dict)

    def to_dict(self) -> dict[str, Any]:
        return {"generations": {str(t): g for t, g in sorted(self.generations.items())},
                "schemas": {str(t): s.to_dict() for t, s in sorted(self.schemas.items())},
                "since": {str(t): o.to_dict() for t, o in sorted(self.since.items())},
                "rereads": {str(t): r.to_dict() for t, r in sorted(self.rereads.items())}}

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> Members:
        """``to_dict``'s form (all but ``generations`` optional), or an older file's bare
        ``{table: generation}``."""
        if "generations" not in d:
            return cls({TableId.parse(t): int(g) for t, g in d.items()})
        return cls({TableId.parse(t): int(g) for t, g in d["generations"].items()},
                   {TableId.parse(t): TableSchema.from_dict(x)
                    for t, x in (d.get("schemas") or {}).items()},
                   {TableId.parse(t): BinlogOffset.from_dict(x)
                    for t, x in (d.get("since") or {}).items()},
                   {TableId.parse(t): Reread.from_dict(x)
                    for t, x in (d.get("rereads") or {}).items()})

    @classmethod
    def parse(cls, text: str) -> Members:
        return cls.from_dict(json.loads(text))
