"""Change records: the plain, picklable values the binlog reader yields.

Ops use Debezium's letters: ``c`` insert, ``u`` update, ``d`` delete. Row images are dicts of
canonical values (see ``sparkcdc.mysql.types``), the same values the snapshot path yields.

``offset`` is the record's own position: the start of its transaction, the index of its row
event inside that transaction (``events``) and of the row inside that event (``rows``).
Record offsets are therefore totally ordered and unique, and resuming *after* a record is
``offset`` with ``rows + 1``. A binlog window ``[A, B)`` holds the records with
``A <= offset < B``; watermarks are transaction boundaries, so a transaction is always
wholly inside or wholly outside a window.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Any

from sparkcdc.core.offsets import BinlogOffset, file_index
from sparkcdc.core.schema import TableId

INSERT, UPDATE, DELETE = "c", "u", "d"

# The metadata columns every change row carries, after the table's own columns, in this
# order: the change kind (Delta's change-feed names), where it comes from, its commit time
# (null for snapshot rows) and its place in the binlog (docs/spark-source.md). Defined here
# once; the source builds them, the apply, routes and formats read them.
META_COLUMNS = ("_change_type", "_database", "_table", "_op_ts", "_seq")


@dataclass(frozen=True, slots=True)
class ChangeRecord:
    op: str
    table_id: TableId
    before: dict[str, Any] | None
    after: dict[str, Any] | None
    offset: BinlogOffset
    ts_ms: int  # commit time of the transaction, ms since the epoch (binlog header, 1 s)
    gtid: str | None = None  # the transaction's GTID, when the server has GTIDs

    def key(self, columns: tuple[str, ...], image: str) -> tuple | None:
        row = self.before if image == "before" else self.after
        return None if row is None else tuple(row[c] for c in columns)

    def next_offset(self) -> BinlogOffset:
        """Where to resume to read what follows this record."""
        return replace(self.offset, rows=self.offset.rows + 1)


@dataclass(frozen=True, slots=True)
class Heartbeat:
    """Emitted by a tailing reader when nothing was captured for a while, so offsets move."""

    offset: BinlogOffset
    ts_ms: int


# The order in which a stream's rows must be applied, as one integer that fits a
# DECIMAL(38,0): binlog file number (7 digits), position (13), row event in the
# transaction (9), row in the event (8), then a sub-order (1): 0 a snapshot row as of that
# offset (it comes before any change at the same offset), 1 a delete or an update's
# before-image, 2 an insert or an update's after-image.
SEQ_SNAPSHOT, SEQ_BEFORE, SEQ_AFTER = 0, 1, 2


def seq_number(offset: BinlogOffset, sub: int) -> int:
    f, p, e, r = file_index(offset.file), offset.pos, offset.events, offset.rows
    if f >= 10**7 or p >= 10**13 or e >= 10**9 or r >= 10**8:
        raise ValueError(f"binlog offset {offset} does not fit the _seq layout")
    return (((f * 10**13 + p) * 10**9 + e) * 10**8 + r) * 10 + sub
