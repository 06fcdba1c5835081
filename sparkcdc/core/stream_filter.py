"""The stream filter (docs/algorithm.md, "The stream"), as a pure function of finished splits.

For a change at offset ``p`` of table ``t``, with chunk-key value ``k``:

* ``t`` not captured: drop;
* ``t``'s whole key space is finished and ``p`` is at or after the largest HW of ``t``:
  emit (the fast path, which is every event once the snapshot is over);
* else find the finished split holding ``k``: emit only if ``p`` is at or after its HW
  (earlier changes are inside its normalized rows); no finished split holds ``k``: drop
  (a chunk not yet read will contain the key's state when it is read).

Windows are half-open ``[LW, HW)`` over record offsets (see ``core.records``), so "after
HW" means ``p >= HW``.

An update is judged image by image: its before-image by the old key, its after-image by the
new one. When an update moves a row from one chunk to another, the two chunks may have
different HWs, and each side needs its own verdict (judging only the new key would leave a
stale row behind in the old chunk).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from sparkcdc.core.offsets import BinlogOffset
from sparkcdc.core.records import ChangeRecord
from sparkcdc.core.schema import TableId, TableSchema


@dataclass(frozen=True)
class FinishedSplit:
    """A chunk ``[start, end)`` whose rows were emitted normalized to ``hw``."""

    table_id: TableId
    start: Any
    end: Any
    hw: BinlogOffset


Locate = Callable[[TableSchema, Sequence[FinishedSplit], Sequence[Any]], list[int | None]]
"""For each chunk-key value, the index of the split holding it in the given list, or None.
The dialect supplies it: Python comparison for numbers, the server's collation for strings."""


@dataclass(frozen=True)
class Verdict:
    before: bool
    after: bool

    @property
    def any(self) -> bool:
        return self.before or self.after


@dataclass
class TableProgress:
    """What the filter knows of one table: its finished splits and whether they cover the
    whole key space (then the fast path applies after ``max_hw``)."""

    schema: TableSchema
    splits: list[FinishedSplit]
    complete: bool

    @property
    def max_hw(self) -> BinlogOffset | None:
        return max((s.hw for s in self.splits), default=None)


_VERDICT = {(b, a): Verdict(b, a) for b in (False, True) for a in (False, True)}
# every image passes: an insert has only an after-image, a delete only a before-image
_BY_OP = {"c": _VERDICT[False, True], "u": _VERDICT[True, True], "d": _VERDICT[True, False]}


class StreamFilter:
    """``floor``, when given, is an offset no judged record precedes (the start of the
    window being read): a table whose whole key space was finished at or before it passes
    every record on its images alone, without comparing offsets (the steady state)."""

    def __init__(self, tables: Mapping[TableId, TableProgress], locate: Locate,
                 floor: BinlogOffset | None = None):
        self.tables = tables
        self.locate = locate
        self._open = {t for t, p in tables.items()
                      if floor is not None and p.complete and (hw := p.max_hw) is not None
                      and hw <= floor}

    def judge(self, records: Sequence[ChangeRecord]) -> list[Verdict]:
        """A verdict per record; batched so string keys cost one server query per table."""
        verdicts: list[Verdict | None] = [None] * len(records)
        pending: dict[TableId, list[int]] = {}
        fast: dict[TableId, tuple | None] = {}  # the fast path's bound, once per table
        is_open, by_op = self._open, _BY_OP
        last_tid, last_open = None, False
        for i, rec in enumerate(records):
            tid = rec.table_id
            if tid is not last_tid:  # records of one table share their TableId object
                last_tid, last_open = tid, tid in is_open
            if last_open:
                verdicts[i] = by_op[rec.op]
                continue
            prog = self.tables.get(tid)
            if prog is None or not prog.splits:
                verdicts[i] = _VERDICT[False, False]
                continue
            if tid not in fast:
                hw = prog.max_hw if prog.complete else None
                fast[tid] = (hw.sort_key(), hw) if hw is not None else None
            bound = fast[tid]
            # past the table's last high watermark: in one server's binlog by position,
            # across a failover by GTID state (BinlogOffset's order)
            if bound is not None and (rec.offset.sort_key() >= bound[0]
                                      if rec.offset.same_server(bound[1])
                                      else rec.offset >= bound[1]):
                verdicts[i] = _VERDICT[rec.before is not None, rec.after is not None]
            else:
                pending.setdefault(tid, []).append(i)
        for table_id, idxs in pending.items():
            prog = self.tables[table_id]
            ck = prog.schema.chunk_key
            values: list[Any] = []
            for i in idxs:  # absent images are located too (as NULL) and then ignored
                rec = records[i]
                values.append(rec.before[ck] if rec.before is not None else None)
                values.append(rec.after[ck] if rec.after is not None else None)
            where = self.locate(prog.schema, prog.splits, values)
            for n, i in enumerate(idxs):
                rec = records[i]
                verdicts[i] = Verdict(
                    self._emit(prog, rec, rec.before, where[2 * n]),
                    self._emit(prog, rec, rec.after, where[2 * n + 1]),
                )
        return verdicts  # type: ignore[return-value]

    @staticmethod
    def _emit(prog: TableProgress, rec: ChangeRecord, image, split_idx: int | None) -> bool:
        if image is None or split_idx is None:
            return False
        return rec.offset >= prog.splits[split_idx].hw


def python_locate(schema: TableSchema, splits: Sequence[FinishedSplit],
                  values: Sequence[Any]) -> list[int | None]:
    """Locate by Python comparison: right for numbers, dates, times and binary strings,
    wrong for text under a collation (the dialect must not use it there)."""
    out: list[int | None] = []
    for v in values:
        found = None
        for i, s in enumerate(splits):
            if v is None:  # NULL sorts first in MySQL: the first chunk holds it
                if s.start is None:
                    found = i
                    break
            elif (s.start is None or v >= s.start) and (s.end is None or v < s.end):
                found = i
                break
        out.append(found)
    return out
