"""GTID states, and how two of them order: what lets an offset outlive its server.

A binlog file and position name a point in *one* server's binlog. After a failover the
replica that takes over has written its own files, so the old position means nothing
there. The GTID state at that point does: the replica received the same transactions under
the same GTIDs (``log_slave_updates``), so "everything up to this state" names the same
point in history on every server of the topology.

Two spellings, one idea:

* **MariaDB** GTID positions list the last ``domain-server-seq`` of each replication domain;
  within a domain sequence numbers only grow, whichever server wrote them, so a position is
  a vector of sequence numbers by domain.
* **MySQL** executed GTID sets list ``uuid:interval[:interval...]`` by originating server;
  a state is a set of ``(uuid, gno)`` pairs.

States of one history are nested: a later state holds every transaction of an earlier one.
``compare`` orders two states by that inclusion, and says ``None`` when neither holds the
other: the two servers do not share one history, and no position on one names a point on
the other.
"""

from __future__ import annotations

import re

from sparkcdc.errors import OffsetError

_MYSQL_INTERVAL = re.compile(r"^(\d+)(?:-(\d+))?$")


def mariadb_position(gtid: str) -> dict[int, int]:
    """``"0-1-150,1-5-20"`` as ``{domain: seq}``."""
    out: dict[int, int] = {}
    for part in gtid.split(","):
        part = part.strip()
        if not part:
            continue
        try:
            domain, _server, seq = (int(x) for x in part.split("-"))
        except ValueError:
            raise OffsetError(f"not a MariaDB GTID position: {gtid!r}",
                              fix="a position lists domain-server-seq triples, "
                                  "like '0-1-150'") from None
        out[domain] = max(seq, out.get(domain, 0))
    return out


def mysql_set(gtid: str) -> dict[str, list[tuple[int, int]]]:
    """``"uuid:1-5:7,uuid2:3"`` as ``{uuid: [(first, last), ...]}``, intervals merged."""
    out: dict[str, list[tuple[int, int]]] = {}
    for member in gtid.replace("\n", "").split(","):
        member = member.strip()
        if not member:
            continue
        sid, *ranges = member.split(":")
        intervals = out.setdefault(sid.strip().lower(), [])
        for r in ranges:
            m = _MYSQL_INTERVAL.match(r.strip())
            if m is None:
                raise OffsetError(f"not a MySQL GTID set: {gtid!r}",
                                  fix="a set lists uuid:first-last members, like "
                                      "'3e11fa47-71ca-11e1-9e33-c80aa9429562:1-5'")
            lo = int(m.group(1))
            intervals.append((lo, int(m.group(2) or lo)))
    for sid, intervals in out.items():
        intervals.sort()
        merged: list[tuple[int, int]] = []
        for lo, hi in intervals:
            if merged and lo <= merged[-1][1] + 1:
                merged[-1] = (merged[-1][0], max(hi, merged[-1][1]))
            else:
                merged.append((lo, hi))
        out[sid] = merged
    return out


def _mysql_within(a: dict[str, list[tuple[int, int]]],
                  b: dict[str, list[tuple[int, int]]]) -> bool:
    """Every transaction of ``a`` is in ``b``."""
    for sid, intervals in a.items():
        have = b.get(sid, [])
        for lo, hi in intervals:
            if not any(blo <= lo and hi <= bhi for blo, bhi in have):
                return False
    return True


def compare(a: str | None, b: str | None, flavor: str) -> int | None:
    """-1, 0 or 1 as state ``a`` comes before, equals or follows ``b``; ``None`` when
    neither holds the other (or one is unknown)."""
    if a is None or b is None:
        return None
    if flavor == "mariadb":
        pa, pb = mariadb_position(a), mariadb_position(b)
        domains = pa.keys() | pb.keys()
        less = any(pa.get(d, 0) < pb.get(d, 0) for d in domains)
        more = any(pa.get(d, 0) > pb.get(d, 0) for d in domains)
    else:
        sa, sb = mysql_set(a), mysql_set(b)
        less = not _mysql_within(sb, sa)  # b has a transaction a lacks
        more = not _mysql_within(sa, sb)
    if less and more:
        return None
    return -1 if less else 1 if more else 0


def contains(state: str | None, gtid: str, flavor: str) -> bool:
    """Whether the transaction ``gtid`` (``d-s-n`` or ``uuid:n``) is within ``state``."""
    if not state:
        return False
    if flavor == "mariadb":
        domain, _server, seq = (int(x) for x in gtid.split("-"))
        return seq <= mariadb_position(state).get(domain, 0)
    sid, _, gno = gtid.rpartition(":")
    n = int(gno)
    return any(lo <= n <= hi for lo, hi in mysql_set(state).get(sid.lower(), []))


def missing(have: str | None, want: str | None, flavor: str) -> str:
    """What of ``want`` is not in ``have``, spelled for a message (empty when nothing)."""
    if not want:
        return ""
    if flavor == "mariadb":
        ph, pw = mariadb_position(have or ""), mariadb_position(want)
        return ", ".join(f"domain {d} up to seq {s} (the server has {ph.get(d, 0)})"
                         for d, s in sorted(pw.items()) if s > ph.get(d, 0))
    sh, sw = mysql_set(have or ""), mysql_set(want)
    out = []
    for sid, intervals in sorted(sw.items()):
        if not _mysql_within({sid: intervals}, sh):
            out.append(sid + ":" + ":".join(f"{lo}-{hi}" for lo, hi in intervals))
    return ", ".join(out)


__all__ = ["compare", "contains", "mariadb_position", "missing", "mysql_set"]
