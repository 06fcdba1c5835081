"""Binlog offsets: a totally ordered position in a server's binary log.

An offset names the start of a transaction (``file``/``pos``), optionally the GTID state at
that point, and two skip counters for resuming inside a large transaction: ``events`` row
events of the transaction to skip, then ``rows`` rows of the next event. Offsets that come
from ``SHOW MASTER STATUS`` are transaction boundaries with zero counters.

Ordering is by ``(file index, pos, events, rows)``. Binlog file names are
``<basename>.<number>``; the number orders files. On one server the file position is a total
order, so GTID states are carried for resume and for operators, not for ordering there.

Across servers (a failover: the replica that took over has files of its own) a position
means nothing, so an offset also names its ``server`` (``@@server_id``) when it is known.
Two offsets of different servers order by their GTID states (``core/gtid.py``: the states of
one replication history are nested), then by the skip counters, which count row events and
rows of one transaction the same way on every server. States that are not nested do not
order at all: comparing them raises ``OffsetError``.

Offsets travel through Spark's checkpoints as JSON, so ``to_json`` builds keys in a fixed
order (Spark compares offsets as JSON strings).
"""

from __future__ import annotations

import functools
import json
import re
from dataclasses import dataclass, replace
from typing import Any

from sparkcdc.core import gtid as gtids
from sparkcdc.errors import OffsetError

_FILE_RE = re.compile(r"^(?P<base>.+)\.(?P<num>\d+)$")


@functools.lru_cache(maxsize=1024)
def file_index(name: str) -> int:
    m = _FILE_RE.match(name)
    if not m:
        raise OffsetError(f"not a binlog file name: {name!r}",
                          fix="binlog files are named like 'binlog.000042'")
    return int(m.group("num"))


@functools.total_ordering
@dataclass(frozen=True, slots=True)  # no __dict__: the binlog reader makes one per row change
class BinlogOffset:
    file: str
    pos: int
    events: int = 0  # row events of the transaction at ``pos`` already consumed
    rows: int = 0  # rows of the next row event already consumed
    gtid: str | None = None  # MySQL executed GTID set or MariaDB GTID position, at ``pos``
    flavor: str = "mariadb"  # "mariadb" | "mysql": how to read ``gtid``
    server: str | None = None  # the @@server_id whose binlog ``file``/``pos`` name

    def __post_init__(self):
        if self.pos < 0 or self.events < 0 or self.rows < 0:
            raise OffsetError(f"negative binlog offset component in {self!r}")
        file_index(self.file)

    # -- order -----------------------------------------------------------------------------

    def sort_key(self) -> tuple[int, int, int, int]:
        return (file_index(self.file), self.pos, self.events, self.rows)

    def same_server(self, other: BinlogOffset) -> bool:
        """Whether both positions are in one server's binlog (unknown servers count as
        one: offsets written before servers were recorded)."""
        return self.server is None or other.server is None or self.server == other.server

    def _cross_cmp(self, other: BinlogOffset) -> int:
        """The order of offsets of two servers: by GTID state, then the skip counters."""
        c = gtids.compare(self.gtid, other.gtid, self.flavor)
        if c is None:
            raise OffsetError(
                f"offsets {self} (server {self.server}) and {other} (server {other.server}) "
                f"cannot be ordered: "
                + ("one has no GTID state" if not (self.gtid and other.gtid) else
                   "their GTID states do not hold one another"),
                fix="the servers must share one replication history with GTIDs "
                    "(gtid_mode=ON on MySQL); otherwise start over with a new checkpoint")
        if c:
            return c
        a, b = (self.events, self.rows), (other.events, other.rows)
        return (a > b) - (a < b)

    def __lt__(self, other: BinlogOffset) -> bool:
        if not isinstance(other, BinlogOffset):
            return NotImplemented
        if not self.same_server(other):
            return self._cross_cmp(other) < 0
        return self.sort_key() < other.sort_key()

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, BinlogOffset):
            return NotImplemented
        if not self.same_server(other):
            return self._cross_cmp(other) == 0
        return self.sort_key() == other.sort_key()

    def __hash__(self) -> int:
        # equal offsets of two servers share only their counters
        return hash((self.events, self.rows))

    @property
    def is_boundary(self) -> bool:
        """True at a transaction boundary (no skip counters)."""
        return self.events == 0 and self.rows == 0

    def boundary(self) -> BinlogOffset:
        return replace(self, events=0, rows=0)

    def at_row(self, rows: int) -> BinlogOffset:
        """``replace(self, rows=rows)`` without validating again: the binlog reader builds
        one offset per row change, and a frozen dataclass's ``__init__`` is its main cost."""
        return unchecked_offset(self.file, self.pos, self.events, int(rows), self.gtid,
                                self.flavor, self.server)

    # -- JSON ------------------------------------------------------------------------------

    def to_dict(self) -> dict[str, Any]:
        # fixed key order: Spark compares offsets as JSON strings
        d = {"file": self.file, "pos": self.pos, "events": self.events, "rows": self.rows,
             "gtid": self.gtid, "flavor": self.flavor}
        if self.server is not None:  # absent in offsets written before servers were named
            d["server"] = self.server
        return d

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> BinlogOffset:
        try:
            return cls(file=str(d["file"]), pos=int(d["pos"]), events=int(d.get("events", 0)),
                       rows=int(d.get("rows", 0)), gtid=d.get("gtid"),
                       flavor=d.get("flavor", "mariadb"),
                       server=None if d.get("server") is None else str(d["server"]))
        except (KeyError, TypeError, ValueError) as e:
            raise OffsetError(f"malformed binlog offset {d!r}: {e}") from None

    def to_json(self) -> str:
        return json.dumps(self.to_dict(), separators=(",", ":"))

    @classmethod
    def from_json(cls, s: str) -> BinlogOffset:
        try:
            return cls.from_dict(json.loads(s))
        except json.JSONDecodeError as e:
            raise OffsetError(f"malformed binlog offset JSON {s!r}: {e}") from None

    def __str__(self) -> str:
        s = f"{self.file}:{self.pos}"
        if not self.is_boundary:
            s += f"+{self.events}e{self.rows}r"
        if self.gtid:
            s += f" gtid={self.gtid}"
        return s


# the fields' slot descriptors, in the order of ``unchecked_offset``'s arguments
_SET_FILE, _SET_POS, _SET_EVENTS, _SET_ROWS, _SET_GTID, _SET_FLAVOR, _SET_SERVER = (
    getattr(BinlogOffset, name).__set__
    for name in ("file", "pos", "events", "rows", "gtid", "flavor", "server"))


def unchecked_offset(file: str, pos: int, events: int, rows: int, gtid: str | None,
                     flavor: str, server: str | None) -> BinlogOffset:
    """``BinlogOffset(...)`` without validating again, for values the binlog reader made
    itself: it builds one offset per row change, and a frozen dataclass's ``__init__`` (a
    call per field, then ``__post_init__``) is the main cost of one."""
    o = object.__new__(BinlogOffset)
    _SET_FILE(o, file)
    _SET_POS(o, pos)
    _SET_EVENTS(o, events)
    _SET_ROWS(o, rows)
    _SET_GTID(o, gtid)
    _SET_FLAVOR(o, flavor)
    _SET_SERVER(o, server)
    return o
