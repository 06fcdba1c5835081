"""Where a binlog reader is: its file, its last transaction boundary and the transaction
open at the moment, with the GTID state at each.

Every record's offset is its transaction's start plus two counters, and carries the GTID
state before that transaction, so a stream resumes from any record and finds its place on
another server after a failover. The reader (``reader.BinlogReader``) and the tests'
reference reader over python-mysql-replication (tests/support/library_reader.py) keep
their place in this one type, so both yield the same offsets. The GTID state grows by one
GTID per transaction: MariaDB's as its domains' last GTIDs, MySQL's as a set grown in place
(``gtid_set.GtidSet``).
"""

from __future__ import annotations

from dataclasses import dataclass, field

from sparkcdc.core.offsets import BinlogOffset, file_index
from sparkcdc.errors import OffsetError
from sparkcdc.mysql.binlog.gtid_set import GtidSet

__all__ = ["ReadState"]


@dataclass
class ReadState:
    """Where the reader is: the current file, the last boundary, the open transaction."""

    flavor: str
    low: BinlogOffset  # where reading starts
    file: str = ""
    fidx: int = 0  # file_index(file), cached: keys are built for every event
    boundary_pos: int = 4
    gtid: str | None = None  # GTID state at the boundary
    in_txn: bool = False
    txn_pos: int = 0
    txn_gtid: str | None = None  # the open transaction's own GTID
    txn_gtid_before: str | None = None  # the GTID state at its start
    txn_ts: int = 0
    explicit: bool = False  # the transaction had BEGIN (or a MariaDB non-standalone GTID)
    events: int = 0  # row events seen in the open transaction
    done: bool = False
    progress: int = 0
    low_key: tuple = ()  # yield only records at or after this key (moves past each event)
    server: str | None = None  # the @@server_id whose binlog file and pos name
    end: BinlogOffset | None = None  # where a window ends, in this server's binlog
    _mariadb_domains: dict[int, str] = field(default_factory=dict)
    # MySQL: ``gtid`` as a set the next GTID is added to in place (``gtid_set``); None
    # until the first commit needs it, and again whenever ``gtid`` is set from outside
    _mysql_set: GtidSet | None = None
    # the open transaction's MySQL GTID as its source ("uuid:") and number (``begin_mysql``)
    _txn_sid: str | None = None
    _txn_gno: int = 0

    def __post_init__(self):
        self.set_file(self.low.file, self.low.pos)
        self.gtid = self.low.gtid
        self.server = self.low.server
        self.low_key = self.low.sort_key()
        if self.flavor == "mariadb" and self.gtid:
            for g in self.gtid.split(","):
                g = g.strip()
                if not g:
                    continue
                try:
                    self._mariadb_domains[int(g.split("-")[0])] = g
                except ValueError:
                    raise OffsetError(
                        f"the offset's GTID state {self.gtid!r} is not MariaDB's "
                        "(domain-server-sequence): it reads like a MySQL GTID set",
                        fix="read a MySQL server with BinlogReader(..., flavor='mysql') "
                            "(the mysql-cdc source and pipelines detect the server)") from None

    def set_file(self, name: str, pos: int) -> None:
        self.file, self.fidx, self.boundary_pos = name, file_index(name), pos

    def boundary(self) -> BinlogOffset:
        return BinlogOffset(self.file, self.boundary_pos, gtid=self.gtid, flavor=self.flavor,
                            server=self.server)

    def restart_point(self) -> BinlogOffset:
        """A transaction boundary to restart a stream from."""
        pos = self.txn_pos if self.in_txn else self.boundary_pos
        return BinlogOffset(self.file, pos, gtid=self.txn_gtid_before if self.in_txn
                            else self.gtid, flavor=self.flavor, server=self.server)

    def restart(self) -> None:
        if self.in_txn:
            self.boundary_pos, self.gtid = self.txn_pos, self.txn_gtid_before
            self._mysql_set = None
        self.in_txn = False

    def begin(self, pos: int, gtid: str | None, ts: int, explicit: bool) -> None:
        self.in_txn, self.txn_pos, self.txn_gtid, self.txn_ts = True, pos, gtid, ts
        self.txn_gtid_before, self.explicit, self.events = self.gtid, explicit, 0
        self._txn_sid = None

    def begin_mysql(self, pos: int, sid: str, gno: int, ts: int, explicit: bool) -> None:
        """``begin`` at a MySQL GTID event given as its source (``"uuid:"``) and number
        (``protocol.mysql_gtid_parts``): the commit then grows the set by the number."""
        self.begin(pos, f"{sid}{gno}", ts, explicit)
        self._txn_sid, self._txn_gno = sid, gno

    def commit(self, end_pos: int) -> None:
        if self.in_txn and self.txn_gtid:
            self.gtid = self._merge(self.txn_gtid)
        self.in_txn = False
        self.boundary_pos = end_pos

    def _merge(self, txn_gtid: str) -> str | None:
        if self.flavor == "mariadb":
            domains = self._mariadb_domains
            try:
                domain = int(txn_gtid.partition("-")[0])
            except ValueError:
                return self.gtid
            if len(domains) <= 1 and (not domains or domain in domains):
                domains[domain] = txn_gtid  # one domain: the position is its last GTID
                return txn_gtid
            domains[domain] = txn_gtid
            return ",".join(domains[d] for d in sorted(domains))
        if self.gtid is None:
            return None  # an unknown executed set stays unknown
        # MySQL: the set grows in place by one GTID, its text rewritten only for that
        # source (a parse and a deep copy per transaction took a third of the reader's time)
        gset = self._mysql_set
        try:
            if gset is None:
                gset = self._mysql_set = GtidSet(self.gtid)
            sid = self._txn_sid
            if not (gset.add(txn_gtid) if sid is None else gset.add_next(sid, self._txn_gno)):
                return self.gtid
            return str(gset)
        except ValueError:  # not a set (or a GTID) this reader can read: kept as it was
            self._mysql_set = None
            return self.gtid

    def set_gtid_list(self, gtids: list[str]) -> None:
        """A file's GTID list (MariaDB) or previous-GTIDs set (MySQL): the state at its start."""
        if self.flavor == "mariadb":
            self._mariadb_domains = {int(g.split("-")[0]): g for g in gtids}
            self.gtid = ",".join(self._mariadb_domains[d] for d in sorted(self._mariadb_domains))
        else:
            self.gtid = ",".join(gtids) or None
            self._mysql_set = None

    def key(self, pos: int, events: int = 0, rows: int = 0) -> tuple[int, int, int, int]:
        return (self.fidx, pos, events, rows)
