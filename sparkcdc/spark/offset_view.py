"""What a checkpointed offset of the ``mysql-cdc`` source says, for readers outside the
source: the pipeline's runner, ``status`` and ``verify``. They read Spark's offset log
(``offsets/<batch>``) without Spark and ask these accessors, never the JSON's layout.

The offset itself is written by ``spark/source.py`` (``SourceOffset``): the binlog position
the batch ends at, the assigner's state (per table: phase, chunks done, planner cursor) and
the chunks the batch read. Importing this module starts no Spark.
"""

from __future__ import annotations

import json
from decimal import Decimal
from pathlib import Path
from typing import Any

from sparkcdc.core.chunking import decode_value
from sparkcdc.core.offsets import BinlogOffset


def read_offset(stream_dir: Path, batch: int) -> dict | None:
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
                return d
    return None


def position(offset: dict) -> BinlogOffset:
    """The binlog position the batch ends at."""
    return BinlogOffset.from_dict(offset["pos"])


def table_entry(offset: dict, table: str) -> dict:
    """One table's assigner state ({} when absent). An offset of the pipeline's stream
    lists every table, and each table asks: the index is built once per offset (kept in
    the dict under a key no offset has)."""
    index = offset.get("__by_table")
    if index is None:
        index = offset["__by_table"] = {t.get("table"): t for t in
                                        offset.get("assigner", {}).get("tables", [])}
    return index.get(table) or {}


def tables_read(offset: dict) -> set[str]:
    """The tables (``db.table``) whose chunks the batch reads."""
    return {f"{c['database']}.{c['table']}" for c in offset.get("batch_chunks") or ()}


def reread_ranges(offset: dict, table: str) -> list[tuple[Any, Any]]:
    """The ``[start, end)`` (None: unbounded) of each chunk of ``table`` the batch reads
    again whole (``sparkcdc snapshot`` with no condition: the assigner's rereads), in key
    order; a chunk read again in part (``--where``) is not among them. Indexed once per
    offset, as ``table_entry``."""
    index = offset.get("__rereads")
    if index is None:
        index = offset["__rereads"] = {}
        for c in offset.get("batch_chunks") or ():
            if c.get("where") == "":
                index.setdefault(f"{c['database']}.{c['table']}", []).append(
                    (decode_value(c["start"]), decode_value(c["end"])))
    return list(index.get(table, ()))


def table_phase(offset: dict, table: str) -> str:
    """``planning``/``snapshotting``/``done`` of one table ("" when absent)."""
    return table_entry(offset, table).get("phase", "")


def table_chunks_done(offset: dict, table: str) -> int:
    """The chunks of one table read by the end of the batch."""
    return int(table_entry(offset, table).get("chunks_done") or 0)


def chunks_total(offset: dict, table: str, done: int) -> int | None:
    """The table's number of chunks when its planner can tell (even splitting), else None."""
    t = table_entry(offset, table)
    if not t:
        return None
    if t.get("phase") == "done":
        return int(t.get("chunks_done") or done)
    p = t.get("planner") or {}
    try:
        if str(p.get("strategy", "")).startswith("even") and p.get("step"):
            lo, hi = decode_value(p.get("min")), decode_value(p.get("max"))
            return max(done, int((Decimal(hi) - Decimal(lo)) / Decimal(p["step"])) + 1)
    except (TypeError, ValueError, ArithmeticError):
        return None
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
