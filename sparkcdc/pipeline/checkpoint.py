"""The pipeline's checkpoint directory: its state file and Spark's offset logs.

Layout under ``pipeline.checkpoint.location``::

    pipeline.json                 the pipeline state: per source table its target, schema,
                                  generation and where that generation started
    streams/<db.table>/g<N>/      Spark's checkpoint of the table's stream, generation N
    live/<db.table>.json          what the running runner last saw (rows, rates, pid)

Spark writes ``offsets/<batch>`` before it runs a batch (a version line, a metadata line,
then one JSON line per source: our offset, with ``pos``, ``phase``, ``chunks_done``...) and
``commits/<batch>`` after it. Reading them needs no Spark and no running query.
"""

from __future__ import annotations

import json
import os
import tempfile
import urllib.parse
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

STATE_VERSION = 1


def stream_key(table: str) -> str:
    return urllib.parse.quote(table, safe="._-")


def write_json(path: Path, data: Any) -> None:
    """Atomically (write to a temporary file, then rename)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=".tmp-", dir=path.parent)
    with os.fdopen(fd, "w") as f:
        json.dump(data, f, indent=1, sort_keys=True)
    os.replace(tmp, path)


def read_json(path: Path) -> Any:
    try:
        return json.loads(path.read_text())
    except (OSError, ValueError):
        return None


@dataclass
class TableState:
    """One source table in the pipeline state."""

    table: str
    target: str
    generation: int = 0
    schema: dict | None = None  # TableSchema.to_dict() the generation was started with
    start: dict = field(default_factory=lambda: {"mode": "initial"})
    status: str = "active"  # active | dropped | failed
    batch_base: int = 0  # sink batch id = batch_base + Spark's batch id of this generation
    app_id: str = ""  # the sink's application id for this table (all generations)
    columns: list | None = None  # the target's data columns (Spark StructField JSON)
    gap: dict | None = None  # old-schema rows before a DDL, still to apply
    ddl_seen: dict | None = None  # end of the last TRUNCATE handled (binlog offset)
    note: str = ""

    def to_dict(self) -> dict:
        return dict(self.__dict__)

    @classmethod
    def from_dict(cls, d: dict) -> TableState:
        return cls(**d)


class Checkpoint:
    def __init__(self, root: str | os.PathLike):
        self.root = Path(root)

    # -- pipeline state --------------------------------------------------------------------

    @property
    def state_path(self) -> Path:
        return self.root / "pipeline.json"

    def load_tables(self) -> dict[str, TableState]:
        data = read_json(self.state_path) or {}
        return {k: TableState.from_dict(v) for k, v in data.get("tables", {}).items()}

    def save_tables(self, name: str, tables: dict[str, TableState]) -> None:
        write_json(self.state_path, {"version": STATE_VERSION, "name": name,
                                     "tables": {k: v.to_dict() for k, v in tables.items()}})

    def stream_dir(self, table: str, generation: int) -> Path:
        return self.root / "streams" / stream_key(table) / f"g{generation}"

    def live_path(self, table: str) -> Path:
        return self.root / "live" / f"{stream_key(table)}.json"

    # -- Spark's logs ----------------------------------------------------------------------

    @staticmethod
    def _batches(d: Path) -> list[int]:
        if not d.is_dir():
            return []
        return sorted(int(p.name) for p in d.iterdir() if p.name.isdigit())

    def offset(self, table: str, generation: int, batch: int) -> dict | None:
        """Our source offset at the end of ``batch`` (None if Spark did not plan it)."""
        return read_offset(self.stream_dir(table, generation), batch)

    def last_planned(self, table: str, generation: int) -> int | None:
        b = self._batches(self.stream_dir(table, generation) / "offsets")
        return b[-1] if b else None

    def last_committed(self, table: str, generation: int) -> int | None:
        b = self._batches(self.stream_dir(table, generation) / "commits")
        return b[-1] if b else None


def read_offset(stream_dir: Path, batch: int) -> dict | None:
    try:
        lines = (stream_dir / "offsets" / str(batch)).read_text().splitlines()
    except OSError:
        return None
    for line in lines[2:]:  # "v1", Spark's metadata, then one line per source
        line = line.strip()
        if line.startswith("{") and '"assigner"' in line:
            return json.loads(line)
    return None
