"""The pipeline's checkpoint directory: its state file and Spark's offset logs.

Layout under ``pipeline.checkpoint.location``::

    pipeline.json                 the pipeline state: per source table its target, schema,
                                  generation and where that generation started
    streams/_tables/g<N>/         Spark's checkpoint of the pipeline's stream (all the tables
                                  that take it), generation N
    streams/_tables/g<N>.tables.json  its members (table -> generation), which the running
                                  source reads before every batch
    streams/<db.table>/g<N>/      a table's own stream, generation N: only in checkpoints from
                                  before every table took the pipeline's stream (read once,
                                  when the table joins it)
    live.json                     what the running runner last saw, per table (rows, rates),
                                  its pid and when it wrote it
    live/<db.table>.json          the same per table, from before live.json (read, not written)

Spark writes ``offsets/<batch>`` before it runs a batch (a version line, a metadata line,
then one JSON line per source: our offset, with ``pos``, ``phase``, ``chunks_done``...) and
``commits/<batch>`` after it. Reading them needs no Spark and no running query.
"""

from __future__ import annotations

import json
import os
import tempfile
import urllib.parse
from dataclasses import dataclass
from enum import Enum
from pathlib import Path
from typing import Any

from sparkcdc.spark.offset_view import OffsetView, read_offset

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


class CaptureStatus(str, Enum):
    """Whether the pipeline captures a table (a ``str``: the state file holds the word)."""

    ACTIVE = "active"  # captured: snapshotting or streaming
    DROPPED = "dropped"  # gone from the source (its target is kept)
    FAILED = "failed"  # its stream failed for good; a restart tries it again
    PAUSED = "paused"  # by ``sparkcdc pause``, until ``sparkcdc resume`` (``paused_at``)

    def __str__(self) -> str:  # the word, on every Python (3.12 changed mixed-in enums)
        return self.value


@dataclass(frozen=True)
class Start:
    """Where a table's generation begins: with its snapshot (no ``offset``), or at a binlog
    offset with no snapshot. ``joins``: the table joins the pipeline's stream at that
    offset (the members file's ``since``): a rename into the same target, a new primary
    key, or a table leaving a stream of its own."""

    offset: dict | None = None  # BinlogOffset.to_dict()
    joins: bool = False

    @property
    def mode(self) -> str:
        """The source's startup mode for it (``scan.startup.mode``)."""
        return "initial" if self.offset is None else "specific-offset"

    def to_dict(self) -> dict:
        if self.offset is None:
            return {"mode": "initial"}
        return {"mode": "specific-offset", "offset": self.offset,
                **({"joins": True} if self.joins else {})}

    @classmethod
    def from_dict(cls, d: dict) -> Start:
        if d.get("mode", "initial") == "initial":
            return cls()
        return cls(d["offset"], bool(d.get("joins")))


@dataclass(frozen=True)
class Gone:
    """What the pipeline's stream saw happen to a table, for the loop to follow once the
    rows before it are written: ``dropped``, ``renamed`` (to ``to``), or ``rekey``, a new
    primary key (the ``schema`` and the ``statements`` that made it), at the binlog offset
    ``at`` (event ``seq`` of its batch). ``streaming``: the table was past its snapshot."""

    kind: str
    at: dict
    seq: int
    to: str | None = None
    streaming: bool = True
    schema: dict | None = None
    statements: tuple[str, ...] = ()

    def to_dict(self) -> dict:
        return {"kind": self.kind, "at": self.at, "seq": self.seq, "to": self.to,
                "streaming": self.streaming, "schema": self.schema,
                "statements": list(self.statements)}

    @classmethod
    def from_dict(cls, d: dict) -> Gone:
        return cls(d["kind"], d["at"], int(d["seq"]), d.get("to"), bool(d.get("streaming", True)),
                   d.get("schema"), tuple(d.get("statements") or ()))


@dataclass
class TableState:
    """One source table in the pipeline state."""

    table: str
    target: str
    generation: int = 0
    schema: dict | None = None  # TableSchema.to_dict() the generation was started with
    start: Start = Start()
    status: CaptureStatus = CaptureStatus.ACTIVE
    batch_base: int = 0  # sink batch id = batch_base + Spark's batch id of this generation
    app_id: str = ""  # the sink's application id for this table (all generations)
    columns: list | None = None  # the target's data columns (Spark StructField JSON)
    # from checkpoints of before the stream carried schema changes: old-schema rows before
    # a DDL still to apply (the table joins the stream where they start), and the end of
    # the last TRUNCATE found by scanning the binlog (no longer used)
    gap: dict | None = None
    ddl_seen: dict | None = None
    pending_ddl: list | None = None  # DDL statements the stream brought before the schema
    #                                  they made (pipeline/run/schema/in_stream.py)
    gone: Gone | None = None  # dropped, renamed or re-keyed, as the pipeline's stream saw it
    note: str = ""
    paused_at: dict | None = None  # where a paused table resumes (its target's last batch end)
    reread: dict | None = None  # {"id", "where"}: read again in part (``snapshot --where``)
    # read by the pipeline stream, this generation of it; None: not yet, or, in a checkpoint
    # from before, by a stream of its own (``generation``; it joins at the next start). The
    # state file names it "group", as it always has, so older checkpoints read the same
    stream_generation: int | None = None
    targets: list | None = None  # every target when routes fan the table out (``target``
    #                              is the first); fixed when the table is first captured
    # the schema fields (schema, columns, pending_ddl) as they were when the last
    # micro-batch that changed them began, with that batch's target batch id: a replay of
    # that batch starts from them, as its first attempt did (``SchemaInStream._from_start``)
    batch_start: dict | None = None

    def to_dict(self) -> dict:
        out = {**self.__dict__, "start": self.start.to_dict(), "status": self.status.value,
               "gone": self.gone.to_dict() if self.gone is not None else None}
        out["group"] = out.pop("stream_generation")  # the state file's name for it
        return out

    @classmethod
    def from_dict(cls, d: dict) -> TableState:
        d = dict(d)
        generation = d.pop("group", None)
        return cls(**{**d, "start": Start.from_dict(d.get("start") or {}),
                      "status": CaptureStatus(d.get("status", "active")),
                      "gone": Gone.from_dict(d["gone"]) if d.get("gone") else None,
                      "stream_generation": generation})


STREAM_KEY = "_tables"  # the pipeline stream's directory (a table's key always has a dot)
# offsets kept read (``offset``): a batch asks for its own and the one before; a run of
# days kept every one it had read, each with every table's assigner state
_OFFSETS_KEPT = 64


class Checkpoint:
    def __init__(self, root: str | os.PathLike):
        self.root = Path(root)
        self._offsets: dict[tuple[Path, int], OffsetView] = {}  # the latest read, in order

    # -- pipeline state --------------------------------------------------------------------

    @property
    def spark_log(self) -> Path:
        """Spark's own warnings and errors of the runs (pipeline/launch/log4j2.properties)."""
        return self.root / "logs" / "spark.log"

    @property
    def state_path(self) -> Path:
        return self.root / "pipeline.json"

    def load_tables(self) -> dict[str, TableState]:
        data = read_json(self.state_path) or {}
        return {k: TableState.from_dict(v) for k, v in data.get("tables", {}).items()}

    def load_stream_generation(self) -> int:
        """The generation of the pipeline stream (0 before the first)."""
        return int((read_json(self.state_path) or {}).get("group", 0))

    def save_tables(self, name: str, tables: dict[str, TableState],
                    stream_generation: int = 0) -> None:
        write_json(self.state_path, {"version": STATE_VERSION, "name": name,
                                     "group": stream_generation,
                                     "tables": {k: v.to_dict() for k, v in tables.items()}})

    def pipeline_stream_dir(self, generation: int) -> Path:
        """Spark's checkpoint of the pipeline stream's generation ``generation``."""
        return self.root / "streams" / STREAM_KEY / f"g{generation}"

    def members_path(self, generation: int) -> Path:
        """The tables the pipeline's stream reads, and their generations (the source's
        ``scan.tables.file``): beside its Spark checkpoint, rewritten as tables come and go."""
        return self.root / "streams" / STREAM_KEY / f"g{generation}.tables.json"

    def stream_dir(self, st: TableState) -> Path:
        """Spark's checkpoint of the stream that reads ``st``: the pipeline's or its own."""
        if st.stream_generation is not None:
            return self.pipeline_stream_dir(st.stream_generation)
        return self.root / "streams" / stream_key(st.table) / f"g{st.generation}"

    def write_live(self, pid: int, updated: float, tables: dict[str, dict]) -> None:
        """``live.json``: the run's pid, when it wrote, and each table's entry. One file for
        the whole run: a file per table cost a 1,000-table run a thousand writes every five
        seconds, a third of its driver's time (docs/benchmarks.md, "Whole databases")."""
        write_json(self.root / "live.json", {"pid": pid, "updated": updated, "tables": tables})

    def read_live(self) -> Live:
        """What ``live.json`` holds (empty when no run wrote it)."""
        got = read_json(self.root / "live.json")
        if not isinstance(got, dict):
            return Live(self, 0, 0.0, {})
        return Live(self, int(got.get("pid") or 0), float(got.get("updated") or 0.0),
                    dict(got.get("tables") or {}))

    # -- Spark's logs ----------------------------------------------------------------------

    @staticmethod
    def _batches(d: Path) -> list[int]:
        if not d.is_dir():
            return []
        return sorted(int(p.name) for p in d.iterdir() if p.name.isdigit())

    def offset(self, st: TableState, batch: int) -> OffsetView | None:
        """Our source offset at the end of ``batch`` of the stream reading ``st`` (None if
        Spark did not plan it). Spark never rewrites an offset file, and every table of the
        pipeline's stream asks for the same ones: each is read once."""
        key = (self.stream_dir(st), batch)
        off = self._offsets.get(key)
        if off is None:
            off = read_offset(*key)
            if off is not None:
                self._offsets[key] = off
                while len(self._offsets) > _OFFSETS_KEPT:  # a long run's: the oldest go
                    self._offsets.pop(next(iter(self._offsets)))
        return off

    def last_planned(self, st: TableState) -> int | None:
        return self._last(self.stream_dir(st) / "offsets")

    def last_committed(self, st: TableState) -> int | None:
        return self._last(self.stream_dir(st) / "commits")

    def stream_last_planned(self, generation: int) -> int | None:
        return self._last(self.pipeline_stream_dir(generation) / "offsets")

    def _last(self, d: Path) -> int | None:
        b = self._batches(d)
        return b[-1] if b else None


@dataclass(frozen=True)
class Live:
    """A run's ``live.json`` as read: ``entry(table)`` gives a table's, with the run's
    ``pid`` and ``updated`` in it, or an older checkpoint's ``live/<table>.json``."""

    ckpt: Checkpoint
    pid: int
    updated: float
    tables: dict[str, dict]

    def entry(self, table: str) -> dict:
        got = self.tables.get(table)
        if got is not None:
            return {**got, "pid": self.pid, "updated": self.updated}
        return read_json(self.ckpt.root / "live" / f"{stream_key(table)}.json") or {}
