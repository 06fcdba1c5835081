"""What a checkpointed offset of the ``mysql-cdc`` source says, for readers outside the
source: the pipeline's runner, ``status`` and ``verify``. They read Spark's offset log
(``offsets/<batch>``) without Spark and ask these accessors, never the JSON's layout.

The offset itself is written by ``spark/source.py`` (``SourceOffset``): the binlog position
the batch ends at, the assigner's state (per table: phase, chunks done, planner cursor) and
the chunks the batch read. Readers get it typed (``OffsetView``, ``TableOffset``), never as
the dict to ``.get`` from; its JSON is only read here, never written. Importing this module
starts no Spark.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from decimal import Decimal
from functools import cached_property
from pathlib import Path
from typing import Any

from sparkcdc.core.chunking import decode_value
from sparkcdc.core.offsets import BinlogOffset


@dataclass(frozen=True)
class TableOffset:
    """One table's part of an offset's assigner state (an absent table: all defaults).
    ``phase``: ``planning``/``snapshotting``/``done`` ("" when absent); ``chunks_done``: its
    chunks read by the end of the batch; ``generation``: the generation of it the batch
    read; ``since``: the binlog offset (as its dict) it joined the stream at, when it joined
    streaming; ``reread_id``: the last ``sparkcdc snapshot`` request the batch took;
    ``rereading``: chunks of such a request are still to read."""

    phase: str = ""
    chunks_done: int = 0
    generation: int = 0
    since: dict | None = None
    reread_id: int = 0
    rereading: bool = False
    planner: dict | None = None

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> TableOffset:
        return cls(str(d.get("phase") or ""), int(d.get("chunks_done") or 0),
                   int(d.get("generation") or 0), d.get("since"), int(d.get("reread_id") or 0),
                   d.get("reread") is not None, d.get("planner"))

    def chunks_total(self, done: int) -> int | None:
        """The table's number of chunks when its planner can tell (even splitting), else
        None (``done``: the chunks read so far, a floor)."""
        if self.phase == "done":
            return self.chunks_done or done
        p = self.planner or {}
        try:
            if str(p.get("strategy", "")).startswith("even") and p.get("step"):
                lo, hi = decode_value(p.get("min")), decode_value(p.get("max"))
                return max(done, int((Decimal(hi) - Decimal(lo)) / Decimal(p["step"])) + 1)
        except (TypeError, ValueError, ArithmeticError):
            return None
        return None


_ABSENT = TableOffset()


class OffsetView:
    """A checkpointed offset of the source, typed where it is read: what the pipeline,
    ``status`` and ``verify`` ask of it. Built from the offset's JSON (``from_dict``; its
    dict, untouched, is ``to_dict``); each index is built once per offset, since every
    table of the pipeline's stream asks the same one."""

    def __init__(self, d: dict[str, Any]):
        self._d = d

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> OffsetView:
        return cls(d)

    def to_dict(self) -> dict[str, Any]:
        return self._d

    @property
    def position(self) -> BinlogOffset:
        """The binlog position the batch ends at."""
        return BinlogOffset.from_dict(self._d["pos"])

    @property
    def position_dict(self) -> dict | None:
        """That position as the offset holds it (None when it has none)."""
        return self._d.get("pos")

    @property
    def phase(self) -> str:
        """The offset's own phase: an offset of a table's own stream, from a checkpoint of
        before the pipeline's stream (``streaming`` once past its snapshot; else "")."""
        return str(self._d.get("phase") or "")

    def table(self, table: str) -> TableOffset:
        """One table's (``db.table``) part of the assigner state."""
        return self._tables.get(table, _ABSENT)

    @cached_property
    def _tables(self) -> dict[str, TableOffset]:
        return {t.get("table"): TableOffset.from_dict(t)
                for t in self._d.get("assigner", {}).get("tables", [])}

    @cached_property
    def tables_read(self) -> set[str]:
        """The tables (``db.table``) whose chunks the batch reads."""
        return {f"{c['database']}.{c['table']}" for c in self._d.get("batch_chunks") or ()}

    @property
    def chunk_count(self) -> int:
        """How many chunks the batch reads."""
        return len(self._d.get("batch_chunks") or ())

    def chunk_spans(self, table: str) -> list[tuple[Any, Any]]:
        """The ``[start, end)`` (None: unbounded) along the chunk key of each chunk of
        ``table`` the batch reads, whole or in part."""
        return [(decode_value(c["start"]), decode_value(c["end"]))
                for c in self._d.get("batch_chunks") or ()
                if f"{c['database']}.{c['table']}" == table]

    def reread_ranges(self, table: str) -> list[tuple[Any, Any]]:
        """The ``[start, end)`` (None: unbounded) of each chunk of ``table`` the batch
        reads again whole (``sparkcdc snapshot`` with no condition: the assigner's
        rereads), in key order; a chunk read again in part (``--where``) is not among
        them."""
        return list(self._rereads.get(table, ()))

    @property
    def reads_again(self) -> bool:
        """Whether the batch reads any chunk again (``sparkcdc snapshot``, whole or in
        part): its rows may be in the target already."""
        return bool(self.tables_read_again)

    @cached_property
    def tables_read_again(self) -> set[str]:
        """The tables (``db.table``) whose chunks the batch reads again, whole or in part:
        they stay covered while read again, so a key may be in the batch twice, as a
        change of its window and as a chunk's row (docs/algorithm.md)."""
        return {f"{c['database']}.{c['table']}" for c in self._d.get("batch_chunks") or ()
                if c.get("where") is not None}

    @cached_property
    def _rereads(self) -> dict[str, list[tuple[Any, Any]]]:
        index: dict[str, list[tuple[Any, Any]]] = {}
        for c in self._d.get("batch_chunks") or ():
            if c.get("where") == "":
                index.setdefault(f"{c['database']}.{c['table']}", []).append(
                    (decode_value(c["start"]), decode_value(c["end"])))
        return index


def read_offset(stream_dir: Path, batch: int) -> OffsetView | None:
    """Our source's offset at the end of ``batch`` in a stream's checkpoint (None if Spark
    did not plan it). Spark writes a version line, its metadata, then one JSON line per
    source; ours is the one holding an assigner."""
    try:
        lines = (stream_dir / "offsets" / str(batch)).read_text().splitlines()
    except OSError:
        return None
    for line in lines[2:]:
        line = line.strip()
        if line.startswith("{"):
            d = json.loads(line)
            if isinstance(d, dict) and "assigner" in d:
                return OffsetView.from_dict(d)
    return None


def lag_bytes(pos: dict | None, latest: dict | None) -> int | None:
    """Bytes of binlog between two positions (same file), or None when unknown (another
    file, or another server's binlog: a failover the stream has not caught up with)."""
    if not pos or not latest:
        return None
    if pos.get("server") not in (None, latest.get("server")) and latest.get("server"):
        return None
    if pos.get("file") == latest.get("file"):
        return max(0, int(latest.get("pos", 0)) - int(pos.get("pos", 0)))
    return None
