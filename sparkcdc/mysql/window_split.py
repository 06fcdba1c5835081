"""Cutting a large binlog window into sub-windows that several readers decode at once.

A window ``[start, end)`` of a backlog can be read in parallel, one reader (and one
``server_id``) per sub-window, if the cuts are transaction boundaries: a record's offset is
the start of its transaction plus skip counters (``sparkcdc.core.records``), so a cut ``c``
at the start of a transaction puts every record wholly on one side of it, and the
sub-windows ``[start, c1), [c1, c2), ..., [ck, end)`` hold exactly the records of the window,
each once. Two kinds of cut are used:

* **file starts** ``(file, 4)``: transactions never span binlog files;
* **transaction starts inside a file**: the positions of ``Gtid`` (MariaDB, MySQL) or
  ``Anonymous_Gtid`` events that ``SHOW BINLOG EVENTS IN f FROM p LIMIT skip, n`` lists.
  The server walks the file itself; the driver only pages through a few hundred events
  around each cut it wants.

Cuts are placed near equal byte shares of the window (sizes from ``SHOW BINARY LOGS``);
a cut that lands a bit late is still exact, only less balanced. A cut names its server and,
on MariaDB, its GTID state, so that a failover finds it again (``binlog/failover.py``); a
window whose ends are not on the server the cursor reaches is not cut. When the server cannot be asked, the window stays whole.
"""

from __future__ import annotations

import itertools
import logging
import math
from dataclasses import dataclass, replace

from sparkcdc.core.offsets import BinlogOffset, file_index

log = logging.getLogger(__name__)

_TXN_START = {"gtid", "anonymous_gtid"}
_PAGE = 400  # events per SHOW BINLOG EVENTS page
_MAX_PAGES = 200  # per cut: a transaction larger than this many pages is not cut inside


@dataclass(frozen=True)
class _Event:
    pos: int
    end: int
    kind: str


def window_bytes(files: list[tuple[str, int]], start: BinlogOffset, end: BinlogOffset) -> int:
    """The bytes of binlog between ``start`` and ``end`` (``files``: SHOW BINARY LOGS)."""
    if start.file == end.file:
        return max(0, end.pos - start.pos)
    lo, hi = file_index(start.file), file_index(end.file)
    total = 0
    for name, size in files:
        i = file_index(name)
        if i == lo:
            total += max(0, size - start.pos)
        elif lo < i < hi:
            total += size
        elif i == hi:
            total += end.pos
    return total


def _small(start: BinlogOffset, end: BinlogOffset, limit: int) -> bool:
    """A window within one file and no larger than ``limit``: known without asking the
    server. Most micro-batches of a stream are such windows; each would otherwise cost a
    ``SHOW BINARY LOGS`` for an answer known in advance."""
    return start.file == end.file and end.pos - start.pos <= limit


def _span(cur, start: BinlogOffset, end: BinlogOffset) -> list[tuple[str, int]] | None:
    """The binlog files ``[start, end)`` lies in, with their sizes (``SHOW BINARY LOGS``), or
    None when one of its ends is in a file the server no longer has: the reader then reports
    the purged file better than a cut would. None too when an end is a position of another
    server than the one the cursor reaches (a failover): the reader finds it again by its GTID
    state (``binlog/failover.py``), and the window stays whole."""
    if start.server is not None or end.server is not None:
        cur.execute("SELECT @@GLOBAL.server_id")
        here = str(cur.fetchone()[0])
        if any(o.server not in (None, here) for o in (start, end)):
            return None
    cur.execute("SHOW BINARY LOGS")
    files = [(str(r[0]), int(r[1])) for r in cur.fetchall()]
    lo, hi = file_index(start.file), file_index(end.file)
    span = [(n, s) for n, s in files if lo <= file_index(n) <= hi]
    names = {n for n, _ in span}
    return span if start.file in names and end.file in names else None


def split_window(cur, start: BinlogOffset, end: BinlogOffset, split_bytes: int,
                 max_parts: int) -> list[tuple[BinlogOffset, BinlogOffset]]:
    """``[start, end)`` as consecutive sub-windows of about ``split_bytes`` each, at most
    ``max_parts`` of them, cut at transaction boundaries. ``cur`` is a pymysql cursor."""
    whole = [(start, end)]
    if split_bytes <= 0 or max_parts <= 1 or not start < end or _small(start, end, split_bytes):
        return whole
    import pymysql

    try:
        span = _span(cur, start, end)
        if span is None:
            return whole
        total = window_bytes(span, start, end)
        parts = min(max_parts, math.ceil(total / split_bytes))
        if parts <= 1:
            return whole
        server = start.server or end.server
        cuts = [_with_state(cur, c, server)
                for c in _cuts(cur, span, start, end, total, parts)]
    except pymysql.err.MySQLError as e:
        log.warning("binlog window %s .. %s not split (reading it whole): %s", start, end, e)
        return whole
    return list(itertools.pairwise([start] + cuts + [end]))


def bound_window(cur, start: BinlogOffset, end: BinlogOffset,
                 max_bytes: int) -> BinlogOffset:
    """The end of a window that starts at ``start`` and holds about ``max_bytes`` of binlog
    at most (the first transaction start at or after that), or ``end`` when the window is
    no larger. A micro-batch ends there, so a backlog of any size is read in batches of a
    bounded size: the driver collects a batch, and its memory must not grow with the
    backlog. Exact for the same reason as the cuts of ``split_window``."""
    import pymysql

    if max_bytes <= 0 or not start < end or _small(start, end, max_bytes):
        return end
    try:
        span = _span(cur, start, end)
        if span is None:
            return end
        total = window_bytes(span, start, end)
        if total <= max_bytes:
            return end
        cuts = _cuts(cur, span, start, end, total, math.ceil(total / max_bytes),
                     only_first=True)
        if not cuts:
            return end
        return _with_state(cur, cuts[0], start.server or end.server)
    except pymysql.err.MySQLError as e:
        log.warning("binlog window %s .. %s not bounded (reading it whole): %s", start, end, e)
        return end


def _with_state(cur, cut: BinlogOffset, server: str | None) -> BinlogOffset:
    """A cut with its server and, on MariaDB, its GTID state (``BINLOG_GTID_POS``, one
    query per cut: a few per batch of a backlog): a batch's end is where the next batch
    starts, and the records read from a cut compare across a failover by that state. MySQL
    has no such function: a failover from such a point is refused with the reason."""
    gtid = None
    if cut.flavor == "mariadb":
        cur.execute("SELECT BINLOG_GTID_POS(%s, %s)", (cut.file, cut.pos))
        gtid = cur.fetchone()[0] or None
    return replace(cut, gtid=gtid, server=server)


def _cuts(cur, span: list[tuple[str, int]], start: BinlogOffset, end: BinlogOffset,
          total: int, parts: int, only_first: bool = False) -> list[BinlogOffset]:
    """Transaction starts near ``k * total / parts``, strictly inside ``(start, end)``
    (``only_first``: the first of them alone)."""
    flavor = start.flavor
    # where each file's bytes begin in the window
    layout, acc = [], 0
    for name, size in span:
        first = start.pos if name == start.file else 4
        last = end.pos if name == end.file else size
        layout.append((name, first, last, acc))
        acc += max(0, last - first)
    cuts: list[BinlogOffset] = []
    for k in range(1, parts):
        want = k * total / parts
        for idx, (name, first, last, at) in enumerate(layout):
            if at + (last - first) <= want and idx + 1 < len(layout):
                continue
            target = first + int(want - at)
            prev = cuts[-1] if cuts else start
            floor = prev.pos if prev.file == name else first
            found = _txn_start_at_or_after(cur, name, floor, max(target, floor + 1), last)
            cut: BinlogOffset | None = None
            if found is None and idx + 1 < len(layout):
                cut = BinlogOffset(layout[idx + 1][0], 4, flavor=flavor)
            elif found is not None:
                cut = BinlogOffset(name, found, flavor=flavor)
            if cut is not None and (prev < cut < end) and (not cuts or cut != cuts[-1]):
                cuts.append(cut)
            break
        if only_first and cuts:
            break
    return cuts


def _txn_start_at_or_after(cur, file: str, known: int, target: int, limit: int) -> int | None:
    """The first transaction start in ``file`` at or after ``target`` and before ``limit``.

    ``known`` is an event start at or before ``target`` (4, the window start, or an earlier
    cut). The first page estimates the event size, so the server skips to about ``target``
    in one step; the pages after it walk forward.
    """
    pos, skip = known, 0
    for _ in range(_MAX_PAGES):
        events = _events(cur, file, pos, skip, _PAGE)
        if not events:
            if skip == 0:
                return None
            skip //= 2  # the estimate went past the end of the file
            continue
        for ev in events:
            if ev.pos >= limit:
                return None
            if ev.pos >= target and ev.kind in _TXN_START:
                return ev.pos
        last = events[-1]
        if last.end >= limit:
            return None
        pos, skip = last.end, 0
        if last.end < target and len(events) > 1:
            avg = max(1.0, (last.end - events[0].pos) / len(events))
            skip = max(0, int((target - last.end) / avg) - _PAGE // 4)
    return None


def _events(cur, file: str, pos: int, skip: int, n: int) -> list[_Event]:
    cur.execute(f"SHOW BINLOG EVENTS IN %s FROM {int(pos)} LIMIT {int(skip)}, {int(n)}",
                (file,))
    out = []
    for r in cur.fetchall():
        # Log_name, Pos, Event_type, Server_id, End_log_pos, Info
        out.append(_Event(int(r[1]), int(r[4]), str(r[2]).lower()))
    return out


__all__ = ["bound_window", "split_window", "window_bytes"]
