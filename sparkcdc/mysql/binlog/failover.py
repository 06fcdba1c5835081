"""Finding an offset of one server in the binlog of another: resuming after a failover.

An offset's file and position belong to the server that wrote them (``BinlogOffset.server``).
When the address the pipeline reads now reaches another server, a promoted replica, the same
point in history is found by its GTID state instead (``core/gtid.py``), the way a replica
itself finds where to continue:

1. The server must hold every transaction the state holds. A replica promoted before it
   caught up lacks some of them; the targets already have those changes, which the new
   primary never had, so resuming would mix two histories. That is one clear error.
2. Each binlog file opens with the GTID state before its first transaction (MariaDB's
   GTID_LIST, MySQL's PREVIOUS_GTIDS). The newest file whose opening state is within ours
   is where our point lies; none (the files before it were purged) is another clear error.
3. That file is read from its start: each transaction whose GTID is within the state was
   read already. The first one that is not is where the stream resumes; when there is none
   it resumes at the end of the binlog. On MariaDB the state's own last GTIDs must have
   been met on the way, exactly: sequence numbers alone would not tell a server that wrote
   other transactions under the same numbers.

The skip counters of a mid-transaction offset stay as they are: they count row events and
rows of that one transaction, which the new server logged with the same events.
"""

from __future__ import annotations

from typing import Any

from sparkcdc.core import gtid as gtids
from sparkcdc.core.offsets import BinlogOffset
from sparkcdc.errors import BinlogUnavailable, OffsetError
from sparkcdc.mysql.binlog import protocol as E

_READ_TIMEOUT = 60.0


def rebase(kwargs: dict[str, Any], replica_id: int, offset: BinlogOffset,
           server: str) -> BinlogOffset:
    """``offset`` (of another server) as the same point in the binlog of the server that
    ``kwargs`` reaches, whose ``@@server_id`` is ``server``."""
    if not offset.gtid:
        raise OffsetError(
            f"the server behind the address is now server {server}, not server "
            f"{offset.server} whose binlog position {offset.file}:{offset.pos} the checkpoint "
            f"holds, and that offset carries no GTID state to find the same point here",
            fix="enable GTIDs (MySQL: gtid_mode=ON and enforce_gtid_consistency=ON; MariaDB "
                "has them always) so offsets carry them, or start over with a new checkpoint")
    file, pos = locate(kwargs, replica_id, offset.gtid, offset.flavor, server)
    return BinlogOffset(file, pos, offset.events, offset.rows, offset.gtid, offset.flavor,
                        server)


def locate(kwargs: dict[str, Any], replica_id: int, state: str, flavor: str,
           server: str) -> tuple[str, int]:
    """The file and position on this server of the first transaction not in ``state``."""
    files, executed = _server_state(kwargs, flavor)
    order = gtids.compare(executed, state, flavor)
    if order is None or order < 0:
        raise OffsetError(
            f"server {server} lacks transactions that the pipeline already read from server "
            f"before it: {gtids.missing(executed, state, flavor) or state} (its GTID state is "
            f"{executed or 'empty'}); it was promoted before it had caught up, or it is not a "
            f"replica of that server",
            fix="point the pipeline back at a server that has them, or re-load the captured "
                "tables (sparkcdc snapshot) from this one")
    first, opening = None, None
    for name in reversed(files):
        opening = _opening_state(kwargs, replica_id, name, flavor)
        c = gtids.compare(opening, state, flavor) if opening is not None else -1
        if c is not None and c <= 0:
            first = name
            break
    if first is None:
        raise BinlogUnavailable(
            f"server {server} no longer has the binlog from GTID state {state} on (its oldest "
            f"file is {files[0] if files else 'none'}): the changes since then are lost to "
            f"it",
            fix="keep binlogs longer on every server that can be promoted "
                "(binlog_expire_logs_seconds), and re-load the captured tables "
                "(sparkcdc snapshot) now")
    file, pos, unseen = _first_not_in(kwargs, replica_id, first, state, opening, flavor)
    if unseen:
        raise OffsetError(
            f"server {server} does not have the transactions {', '.join(sorted(unseen))} that "
            f"the pipeline already read from the server before it: it lacks transactions of "
            f"that history, and wrote others under the same sequence numbers (its GTID state "
            f"is {executed})",
            fix="point the pipeline back at a server that has them, or re-load the captured "
                "tables (sparkcdc snapshot) from this one")
    return file, pos


def _server_state(kwargs: dict[str, Any], flavor: str) -> tuple[list[str], str | None]:
    import pymysql

    with pymysql.connect(**kwargs) as c, c.cursor() as cur:
        cur.execute("SHOW BINARY LOGS")
        files = [r[0] for r in cur.fetchall()]
        cur.execute("SELECT @@GLOBAL.gtid_binlog_pos" if flavor == "mariadb"
                    else "SELECT @@GLOBAL.gtid_executed")
        executed = cur.fetchone()[0]
    return files, (executed or "").replace("\n", "") or None


def _opening_state(kwargs: dict[str, Any], replica_id: int, name: str,
                   flavor: str) -> str | None:
    """The GTID state a binlog file opens with (None: the file has no such event)."""
    stream = E.DumpStream(kwargs, replica_id, name, 4, blocking=False, heartbeat=None,
                          read_timeout=_READ_TIMEOUT)
    try:
        for data, evs in stream.batches():
            for _ts, etype, _sid, _size, log_pos, _flags, s, e in evs:
                if etype == E.MARIADB_GTID_LIST:
                    return ",".join(E.mariadb_gtid_list(data, s, e))
                if etype == E.PREVIOUS_GTIDS:
                    return ",".join(E.previous_gtids(data, s))
                if etype in (E.MARIADB_GTID, E.GTID, E.ANONYMOUS_GTID):
                    return None  # a transaction came first
    finally:
        stream.close()
    return None


def _first_not_in(kwargs: dict[str, Any], replica_id: int, file: str, state: str,
                  opening: str | None, flavor: str) -> tuple[str, int, set[str]]:
    """Where the first transaction not in ``state`` starts, reading from ``file``; and, on
    MariaDB, the GTIDs ``state`` ends with that were not met before it. A MariaDB position
    names only the last GTID of each domain, and sequence numbers alone do not tell a
    server that has that transaction from one that wrote other transactions under the same
    numbers (a replica promoted before it caught up, and written to): so, as MariaDB's own
    replicas do, the exact GTID must be in the binlog before the resume point."""
    stream = E.DumpStream(kwargs, replica_id, file, 4, blocking=False, heartbeat=None,
                          read_timeout=_READ_TIMEOUT)
    end = 4
    gtid_body = E.MARIADB_GTID_BODY.unpack_from
    unseen: set[str] = set()
    if flavor == "mariadb":
        unseen = {g.strip() for g in state.split(",") if g.strip()}
        unseen -= {g.strip() for g in (opening or "").split(",")}
    try:
        for data, evs in stream.batches():
            for _ts, etype, sid, size, log_pos, flags, s, e in evs:
                if etype == E.ROTATE:
                    file, end = E.rotate(data, s, e, None)
                    continue
                if log_pos == 0 or flags & E.LOG_EVENT_ARTIFICIAL:
                    continue
                if etype == E.MARIADB_GTID:
                    seq, domain, _f = gtid_body(data, s + 19)
                    txn = f"{domain}-{sid}-{seq}"
                elif etype == E.GTID:
                    txn = E.mysql_gtid(data, s)
                elif etype == E.ANONYMOUS_GTID:
                    raise OffsetError(
                        f"{file}:{log_pos - size} holds a transaction without a GTID, so the "
                        f"point of GTID state {state} cannot be found in it",
                        fix="run every server with gtid_mode=ON")
                else:
                    end = log_pos
                    continue
                if not gtids.contains(state, txn, flavor):
                    return file, log_pos - size, unseen
                unseen.discard(txn)
                end = log_pos
    finally:
        stream.close()
    return file, end, unseen


__all__ = ["locate", "rebase"]
