"""A MySQL GTID set the binlog reader grows by one GTID per transaction, cheaply.

The reader keeps the GTID state at every transaction boundary (each record's offset
carries the set before its transaction, to resume from and to find its place after a
failover). Parsing the set's text and merging one GTID into it with
python-mysql-replication's ``GtidSet`` took a third of the reader's time on MySQL (a deep
copy of the set per transaction). Here the set is parsed once, kept as intervals per
source (``uuid`` or ``uuid:tag``, MySQL 8.3+'s tagged GTIDs), and the next GTID of a
source, the usual case, extends its last interval; only that source's text is written
again. The text is the library's (``uuid:1-5:7,uuid2:1-3``: members in the order first
seen, intervals sorted, no spaces), so offsets read the same as before.
"""

from __future__ import annotations

__all__ = ["GtidSet"]


class GtidSet:
    """A mutable MySQL GTID set; ``add`` one GTID, ``str`` for its text."""

    __slots__ = ("_fast", "_intervals", "_order", "_parts", "_stale", "_text")

    def __init__(self, text: str | None = None) -> None:
        # source key ("uuid" or "uuid:tag") -> sorted closed intervals [lo, hi]
        self._intervals: dict[str, list[list[int]]] = {}
        self._parts: dict[str, str] = {}  # uuid -> its member's text
        self._order: list[str] = []  # uuids in the order first seen
        self._text: str | None = None
        # the next GTID of the source last added to, without a tag: ("uuid:", its last
        # interval, the text before that interval's end, the text after it)
        self._fast: tuple[str, list[int], str, str] | None = None
        self._stale = False  # the fast path moved _fast's interval: its part is not redone
        if text:
            for member in text.split(","):
                member = member.strip(" \n\t")
                if member:
                    self._parse_member(member)
            for sid in self._order:
                self._render(sid)

    @classmethod
    def of_members(cls, members: list[str]) -> GtidSet:
        return cls(",".join(members))

    def _parse_member(self, member: str) -> None:
        legs = member.split(":")
        sid = legs[0].lower()
        if len(sid) != 36 or sid.count("-") != 4:
            raise ValueError(f"not a MySQL GTID set member: {member!r}")
        key = sid
        if sid not in self._parts:
            self._order.append(sid)
            self._parts[sid] = ""
        for leg in legs[1:]:
            leg = leg.strip()
            lo, dash, hi = leg.partition("-")
            if lo.isdigit() and (not dash or hi.isdigit()):
                self._insert(key, int(lo), int(hi) if dash else int(lo))
            elif leg and not dash:  # a tag: the intervals after it are that tag's
                key = f"{sid}:{leg.lower()}"
                self._intervals.setdefault(key, [])
            else:
                raise ValueError(f"not a MySQL GTID set member: {member!r}")

    def _insert(self, key: str, lo: int, hi: int) -> bool:
        """Add ``[lo, hi]`` to the source's intervals; whether anything changed."""
        ivs = self._intervals.setdefault(key, [])
        if ivs:
            last = ivs[-1]
            if lo == last[1] + 1:  # the next GTID (or run) of the source: the usual case
                last[1] = hi
                return True
            if last[0] <= lo and hi <= last[1]:
                return False
        # anywhere else: merge with every overlapping or touching interval
        out: list[list[int]] = []
        placed, changed = False, True
        for a, b in ivs:
            if b + 1 < lo:
                out.append([a, b])
            elif hi + 1 < a:
                if not placed:
                    out.append([lo, hi])
                    placed = True
                out.append([a, b])
            else:
                if a <= lo and hi <= b:
                    changed = False
                lo, hi = min(a, lo), max(b, hi)
        if not changed:
            return False  # (the lists stay: _fast may hold the last one)
        if not placed:
            out.append([lo, hi])
        self._intervals[key] = out
        return True

    def _render(self, sid: str) -> None:
        legs = [sid]
        untagged = self._intervals.get(sid)
        if untagged:
            legs.extend(f"{a}-{b}" if a != b else str(a) for a, b in untagged)
        tagged = sorted(k for k in self._intervals if k.startswith(sid + ":"))
        for key in tagged:
            ivs = self._intervals[key]
            if ivs:
                legs.append(key[len(sid) + 1:])
                legs.extend(f"{a}-{b}" if a != b else str(a) for a, b in ivs)
        self._parts[sid] = ":".join(legs)
        self._text = None

    def add(self, gtid: str) -> bool:
        """Add one GTID (``uuid:N`` or ``uuid:tag:N``); whether the set changed."""
        fast = self._fast
        if fast is not None and gtid.startswith(fast[0]):
            number = gtid[len(fast[0]):]
            if number.isdigit():
                return self.add_next(fast[0], int(number))
        return self._add(gtid)

    def add_next(self, sid: str, n: int) -> bool:
        """``add(f"{sid}{n}")`` for an untagged GTID given as its source (``"uuid:"``, as
        ``protocol.mysql_gtid_parts`` gives it) and number: the usual next GTID of the last
        source without a parse."""
        fast = self._fast
        if fast is not None and n == fast[1][1] + 1 and fast[0] == sid:  # two concatenations
            fast[1][1] = n
            self._text = f"{fast[2]}{n}{fast[3]}"
            self._stale = True
            return True
        return self._add(f"{sid}{n}")

    def fast_next(self) -> tuple[str, int, str, str] | None:
        """For a loop outside Python (the reader's in C, ``_faststate.c``): the source
        (``"uuid:"``) whose next GTID is cheap, its last number, and the set's text before
        and after that number once the next one is added; None when there is none yet."""
        fast = self._fast
        return None if fast is None else (fast[0], fast[1][1], fast[2], fast[3])

    def extend_fast(self, n: int, text: str) -> None:
        """What that loop did: ``add_next`` of the ``fast_next`` source's numbers up to
        ``n``, each the next one, the set's text now ``text``."""
        fast = self._fast
        if fast is None or n <= fast[1][1]:
            raise ValueError(f"extend_fast({n}): not the next numbers of the set's last source")
        fast[1][1] = n
        self._text = text
        self._stale = True

    def _add(self, gtid: str) -> bool:
        if self._stale and self._fast is not None:
            self._stale = False
            text = self._text
            self._render(self._fast[0][:-1])
            self._text = text
        sid, _, rest = gtid.partition(":")
        tag, _, number = rest.rpartition(":")
        n = int(number)
        sid = sid.lower()
        key = f"{sid}:{tag.lower()}" if tag else sid
        if sid not in self._parts:
            self._order.append(sid)
            self._parts[sid] = sid
        if self._insert(key, n, n):
            self._render(sid)
            self._fast = self._fast_path(sid) if not tag else None
            return True
        return False

    def _fast_path(self, sid: str) -> tuple[str, list[int], str, str] | None:
        """``_fast`` for ``sid``: its set's text cut around its last untagged interval's end."""
        ivs = self._intervals.get(sid)
        if not ivs:
            return None
        last = ivs[-1]
        legs = [sid, *(f"{a}-{b}" if a != b else str(a) for a, b in ivs[:-1]), f"{last[0]}-"]
        head = ":".join(legs)
        tagged = self._parts[sid][len(sid):]  # ":1-5:7-9:tag:1-3" -> after the untagged ones
        untagged = ":".join(f"{a}-{b}" if a != b else str(a) for a, b in ivs)
        tail = tagged[len(untagged) + 1:]
        parts = [self._parts[x] for x in self._order if ":" in self._parts[x]]
        at = [x for x in self._order if ":" in self._parts[x]].index(sid)
        before = ",".join(parts[:at])
        after = ",".join(parts[at + 1:])
        return (sid + ":", last, (before + "," if before else "") + head,
                tail + ("," + after if after else ""))

    def __contains__(self, gtid: str) -> bool:
        sid, _, rest = gtid.partition(":")
        tag, _, number = rest.rpartition(":")
        key = f"{sid.lower()}:{tag.lower()}" if tag else sid.lower()
        n = int(number)
        return any(a <= n <= b for a, b in self._intervals.get(key, ()))

    def __str__(self) -> str:
        if self._text is None:
            self._text = ",".join(p for p in (self._parts[s] for s in self._order)
                                  if ":" in p)
        return self._text

    def __repr__(self) -> str:
        return f"GtidSet({str(self)!r})"
