"""Is the source server set up for CDC? One check per requirement, one message per problem.

``inspect_server`` reads what is needed (variables, grants, replicas) into a ``ServerInfo``;
``check_server`` turns it into problems without touching the server, so every check is a pure
function of what the server said. ``validate_server`` raises the first problem (for a source
starting up); ``validate_all`` returns them all (for ``sparkcdc validate``).

Each problem is a ``ServerConfigError`` whose ``fix`` is the statement or setting to change,
and whose ``check`` attribute names the check (``version``, ``log_bin``, ``binlog_format``,
``binlog_row_image``, ``binlog_row_metadata``, ``binlog_checksum``,
``binlog_transaction_compression``, ``binlog_row_value_options``, ``gtid_mode``,
``privileges``, ``server_id``). Grants can carry password hashes: they are parsed, never
echoed.

Warnings (``check_warnings``, MySQL only; listed or logged by ``validate_all``, kept in
``ServerInfo.warnings`` by ``inspect_server``) name settings that CDC works with but that
cost something an operator should decide on: ``gtid_mode`` not ON (no failover, no GTID
start; an error instead when the start asks for a GTID set),
``enforce_gtid_consistency`` not ON while GTIDs are being turned on, and a
``binlog_expire_logs_seconds`` shorter than a day. Each has its ``check`` and its fix.

Settings sparkcdc reads, so never reported: MySQL 8's compressed transactions
(``binlog_transaction_compression=ON``, zstd; a problem only when the ``zstandard`` package
is missing), partial JSON updates (``binlog_row_value_options=PARTIAL_JSON``, applied to the
full before image), ``binlog_checksum`` NONE or CRC32, encrypted binlogs (MySQL
``binlog_encryption``, MariaDB ``encrypt_binlog``: the server decrypts what it sends to a
replica), and MariaDB's compressed binlog (``log_bin_compress=ON``, zlib).
"""

from __future__ import annotations

import importlib.util
import logging
import re
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from typing import Any

import pymysql

from sparkcdc.errors import ServerConfigError
from sparkcdc.mysql.connection import ConnectionOptions

log = logging.getLogger("sparkcdc.validate")

MIN_MYSQL = (5, 7, 0)
MIN_MARIADB = (10, 4, 0)
MAX_SERVER_ID = 2**32 - 1

_VARIABLES = ("version", "version_comment", "server_id", "log_bin", "binlog_format",
              "binlog_row_image", "binlog_row_metadata", "gtid_mode", "gtid_executed",
              "gtid_binlog_pos", "aria_block_size", "gtid_domain_id", "binlog_checksum",
              "binlog_transaction_compression", "binlog_row_value_options", "encrypt_binlog",
              "binlog_encryption", "enforce_gtid_consistency", "binlog_expire_logs_seconds",
              "binlog_expire_logs_auto_purge", "expire_logs_days")
_CHECKSUMS = ("NONE", "CRC32")  # the binlog checksums the event layer reads
_ROW_VALUE_OPTIONS = ("", "PARTIAL_JSON")  # binlog_row_value_options the reader applies
MIN_EXPIRE_SECONDS = 24 * 3600  # a binlog kept less than this is warned about
_GTID_FIX = ("in my.cnf under [mysqld]: gtid_mode=ON and enforce_gtid_consistency=ON, then "
             "restart; or online, without a restart: SET GLOBAL enforce_gtid_consistency = ON; "
             "then SET GLOBAL gtid_mode = OFF_PERMISSIVE; then ON_PERMISSIVE; wait until "
             "SHOW STATUS LIKE 'Ongoing_anonymous_transaction_count' says 0; then "
             "SET GLOBAL gtid_mode = ON (and SET PERSIST both, or my.cnf, to keep them)")


# -- versions ----------------------------------------------------------------------------------


def parse_version(version: str, version_comment: str = "", *,
                  mariadb: bool | None = None) -> tuple[str, tuple[int, int, int]]:
    """``(flavor, (major, minor, patch))`` from ``@@version``.

    MariaDB can report a MySQL-looking prefix: ``5.5.5-10.11.19-MariaDB`` on the wire, or
    ``5.7.19-10.11.19-log`` when started with ``--version`` to please tools that expect
    MySQL 5.7. For MariaDB the first ``x.y.z`` with ``x >= 10`` is the real version.
    ``mariadb`` overrides flavor detection (the caller may know from server variables).
    """
    triples = [tuple(int(p) for p in m) for m in re.findall(r"(\d+)\.(\d+)\.(\d+)", version)]
    if not triples:
        m = re.match(r"\s*(\d+)\.(\d+)", version)
        if not m:
            raise ServerConfigError(
                f"cannot read the server version from {version!r}",
                fix="sparkcdc supports MySQL 5.7+ and MariaDB 10.4+; report this version "
                    "string if your server is one of them")
        triples = [(int(m.group(1)), int(m.group(2)), 0)]
    if mariadb is None:
        mariadb = "mariadb" in version.lower() or "mariadb" in version_comment.lower()
    if mariadb:
        real = next((t for t in triples if t[0] >= 10), triples[0])
        return "mariadb", real  # type: ignore[return-value]
    return "mysql", triples[0]  # type: ignore[return-value]


def _fmt(v: Sequence[int]) -> str:
    return ".".join(map(str, v))


# -- grants ------------------------------------------------------------------------------------

_IDENT = r"(?:`(?:[^`]|``)*`|[^\s.`]+|\*)"
_GRANT_ON = re.compile(
    r"^GRANT\s+(?P<privs>.+?)\s+ON\s+(?:(?:TABLE|FUNCTION|PROCEDURE|PACKAGE(?:\s+BODY)?)\s+)?"
    rf"(?P<db>{_IDENT})\.(?P<tbl>{_IDENT})\s+TO\s+", re.IGNORECASE | re.DOTALL)
_GRANT_ROLE = re.compile(r"^GRANT\s+(?P<roles>.+?)\s+TO\s+", re.IGNORECASE | re.DOTALL)


def _unquote(ident: str) -> str:
    return ident[1:-1].replace("``", "`") if ident.startswith("`") else ident


def _split_privileges(s: str) -> list[str]:
    out: list[str] = []
    cur: list[str] = []
    depth = 0
    for ch in s:
        if ch == "(":
            depth += 1
        elif ch == ")":
            depth -= 1
        if ch == "," and depth == 0:
            out.append("".join(cur))
            cur = []
        else:
            cur.append(ch)
    out.append("".join(cur))
    return [" ".join(p.split()).upper() for p in out if p.strip()]


def _normalize(priv: str) -> str | None:
    if "(" in priv:  # column grants (SELECT (a, b)) do not allow SELECT *
        return None
    if priv in ("ALL", "ALL PRIVILEGES"):
        return "ALL"
    if priv == "BINLOG MONITOR":  # MariaDB 10.5+ name of REPLICATION CLIENT
        return "REPLICATION CLIENT"
    return priv


@dataclass(frozen=True)
class Grants:
    """What ``SHOW GRANTS`` says, by scope; database patterns keep MySQL's ``%``/``_``."""

    global_privileges: frozenset[str] = frozenset()
    database_privileges: tuple[tuple[str, frozenset[str]], ...] = ()  # (db pattern, privs)
    table_privileges: tuple[tuple[str, str, frozenset[str]], ...] = ()  # (db, table, privs)
    roles: tuple[str, ...] = ()

    def merged(self, other: Grants) -> Grants:
        return Grants(self.global_privileges | other.global_privileges,
                      self.database_privileges + other.database_privileges,
                      self.table_privileges + other.table_privileges, self.roles)

    def has_global(self, priv: str, *also: str) -> bool:
        return bool({"ALL", priv, *also} & self.global_privileges)

    def can_select(self, database: str) -> bool:
        if self.has_global("SELECT"):
            return True
        for pattern, privs in self.database_privileges:
            if {"ALL", "SELECT"} & privs and _db_pattern(pattern).fullmatch(database):
                return True
        # table-level SELECT: discovery sees (and captures) only those tables
        return any(db == database and {"ALL", "SELECT"} & privs
                   for db, _t, privs in self.table_privileges)

    def can_select_anything(self) -> bool:
        return self.has_global("SELECT") or any(
            {"ALL", "SELECT"} & p for _d, p in self.database_privileges) or any(
            {"ALL", "SELECT"} & p for _d, _t, p in self.table_privileges)


def _db_pattern(pattern: str) -> re.Pattern:
    """A database name in a grant may hold LIKE wildcards; ``\\_`` and ``\\%`` are literal."""
    out, i = [], 0
    while i < len(pattern):
        ch = pattern[i]
        if ch == "\\" and i + 1 < len(pattern):
            out.append(re.escape(pattern[i + 1]))
            i += 2
            continue
        out.append(".*" if ch == "%" else "." if ch == "_" else re.escape(ch))
        i += 1
    return re.compile("".join(out), re.IGNORECASE | re.DOTALL)


def parse_grants(lines: Iterable[str]) -> Grants:
    """Parse ``SHOW GRANTS`` rows (MySQL and MariaDB spellings); unknown lines are skipped."""
    glob: set[str] = set()
    dbs: list[tuple[str, frozenset[str]]] = []
    tables: list[tuple[str, str, frozenset[str]]] = []
    roles: list[str] = []
    for line in lines:
        m = _GRANT_ON.match(line.strip())
        if m:
            privs = frozenset(p for p in map(_normalize, _split_privileges(m["privs"])) if p)
            db, tbl = m["db"], m["tbl"]
            if db == "*" and tbl == "*":
                glob |= privs
            elif tbl == "*":
                dbs.append((_unquote(db), privs))
            elif db != "*":
                tables.append((_unquote(db), _unquote(tbl), privs))
            continue
        m = _GRANT_ROLE.match(line.strip())
        if m and " ON " not in m["roles"].upper():
            roles.extend(r.strip() for r in m["roles"].split(",") if r.strip())
    return Grants(frozenset(glob), tuple(dbs), tuple(tables), tuple(roles))


# -- the server --------------------------------------------------------------------------------


@dataclass(frozen=True)
class ServerInfo:
    flavor: str  # "mariadb" | "mysql"
    version: tuple[int, int, int]
    version_string: str
    server_id: int
    log_bin: bool
    binlog_format: str | None
    binlog_row_image: str | None
    binlog_row_metadata: str | None  # None: the server predates the variable
    gtid_mode: str | None  # MySQL's @@gtid_mode; "ON" on MariaDB, which always logs GTIDs
    gtid_position: str | None  # MySQL @@gtid_executed, MariaDB @@gtid_binlog_pos
    user: str  # CURRENT_USER(), as 'name'@'host'
    grants: Grants = field(default_factory=Grants, repr=False)
    roles_unreadable: bool = False  # roles are granted but their privileges are unknown
    replica_server_ids: tuple[int, ...] | None = None  # None: the server would not say
    warnings: tuple[str, ...] = ()
    # None where the server has no such variable
    binlog_checksum: str | None = None
    binlog_transaction_compression: str | None = None  # MySQL 8.0.20+
    binlog_row_value_options: str | None = None  # MySQL 8.0.3+: "" or "PARTIAL_JSON"
    binlog_encryption: str | None = None  # MySQL encryption, MariaDB encrypt_binlog
    enforce_gtid_consistency: str | None = None  # MySQL: ON, OFF or WARN
    # MySQL: how long binlogs are kept (binlog_expire_logs_seconds, or expire_logs_days on
    # MySQL 8.0 when the former is 0); 0: forever; None: unknown
    binlog_expire_seconds: int | None = None
    binlog_auto_purge: bool = True  # MySQL 8.0.29+ binlog_expire_logs_auto_purge

    @property
    def is_mariadb(self) -> bool:
        return self.flavor == "mariadb"

    @property
    def replication_client_name(self) -> str:
        """The privilege's name on this server (MariaDB 10.5 renamed it)."""
        return ("BINLOG MONITOR" if self.is_mariadb and self.version >= (10, 5, 0)
                else "REPLICATION CLIENT")

    def describe(self) -> str:
        return f"{'MariaDB' if self.is_mariadb else 'MySQL'} {_fmt(self.version)}"


def _account(current_user: str) -> str:
    name, _, host = current_user.rpartition("@")
    if not name:
        name, host = current_user, "%"
    return f"'{name}'@'{host}'"


def inspect_server(conn: ConnectionOptions) -> ServerInfo:
    """Read the server's CDC-relevant state with the CDC user's own connection."""
    with conn.connect() as c, c.cursor() as cur:
        marks = ",".join(["%s"] * len(_VARIABLES))
        cur.execute(f"SHOW GLOBAL VARIABLES WHERE Variable_name IN ({marks})", _VARIABLES)
        v = {str(k).lower(): val for k, val in cur.fetchall()}
        cur.execute("SELECT CURRENT_USER()")
        user = _account(cur.fetchone()[0])
        cur.execute("SHOW GRANTS")
        grants = parse_grants(r[0] for r in cur.fetchall())
        warnings: list[str] = []
        roles_unreadable = False
        if grants.roles:
            try:  # MariaDB: a granted role's grants are visible to its grantee
                for role in grants.roles:
                    cur.execute(f"SHOW GRANTS FOR {role}")
                    grants = grants.merged(parse_grants(r[0] for r in cur.fetchall()))
            except pymysql.err.MySQLError:
                try:  # MySQL 8: the current user may expand its own roles
                    cur.execute(f"SHOW GRANTS FOR CURRENT_USER() USING {', '.join(grants.roles)}")
                    grants = grants.merged(parse_grants(r[0] for r in cur.fetchall()))
                except pymysql.err.MySQLError:
                    roles_unreadable = True
        if roles_unreadable:
            warnings.append("the user holds roles whose privileges could not be read, so "
                            "missing privileges are reported as warnings only")
        replicas = _replica_ids(cur)

    is_maria = ("aria_block_size" in v or "gtid_domain_id" in v
                or "mariadb" in str(v.get("version", "")).lower()
                or "mariadb" in str(v.get("version_comment", "")).lower())
    flavor, version = parse_version(str(v.get("version", "")), str(v.get("version_comment", "")),
                                    mariadb=is_maria)
    meta = v.get("binlog_row_metadata")
    if meta is None:
        warnings.append(
            f"binlog_row_metadata does not exist on {flavor} {_fmt(version)} (MySQL 8.0.1+, "
            "MariaDB 10.5+): the binlog carries no column names, so they are taken from "
            "information_schema; capture is correct only while the captured tables' columns "
            "do not change between the snapshot and the events read")
    if replicas is None:
        warnings.append(
            "could not list the server's replicas (SHOW REPLICA HOSTS needs REPLICATION "
            "MASTER ADMIN on MariaDB 10.5.9+, REPLICATION SLAVE on MySQL), so a server-id "
            "clash with a replica was not checked")
    info = ServerInfo(
        flavor=flavor, version=version, version_string=str(v.get("version", "")),
        server_id=int(v.get("server_id") or 0),
        log_bin=str(v.get("log_bin", "OFF")).upper() in ("ON", "1"),
        binlog_format=_upper(v.get("binlog_format")),
        binlog_row_image=_upper(v.get("binlog_row_image")),
        binlog_row_metadata=_upper(meta),
        gtid_mode="ON" if flavor == "mariadb" else _upper(v.get("gtid_mode")),
        gtid_position=(v.get("gtid_binlog_pos") if flavor == "mariadb"
                       else v.get("gtid_executed")) or None,
        user=user, grants=grants, roles_unreadable=roles_unreadable,
        replica_server_ids=replicas, warnings=tuple(warnings),
        binlog_checksum=_upper(v.get("binlog_checksum")),
        binlog_transaction_compression=_upper(v.get("binlog_transaction_compression")),
        binlog_row_value_options=_upper(v.get("binlog_row_value_options")),
        binlog_encryption=_upper(v.get("binlog_encryption", v.get("encrypt_binlog"))),
        enforce_gtid_consistency=_upper(v.get("enforce_gtid_consistency")),
        binlog_expire_seconds=_expire_seconds(v),
        binlog_auto_purge=str(v.get("binlog_expire_logs_auto_purge", "ON")).upper()
        in ("ON", "1"))
    if info.flavor == "mysql":
        from dataclasses import replace
        info = replace(info, warnings=info.warnings + tuple(
            f"{w.message} (fix: {w.fix})" for w in check_warnings(info)))
    return info


def _expire_seconds(v: dict) -> int | None:
    """How long the server keeps binlogs, in seconds (0: forever); None if it does not say.
    MySQL 8.0 uses ``expire_logs_days`` when ``binlog_expire_logs_seconds`` is 0."""
    try:
        seconds = int(v["binlog_expire_logs_seconds"])
    except (KeyError, TypeError, ValueError):
        seconds = None
    try:
        days = int(float(v["expire_logs_days"]))
    except (KeyError, TypeError, ValueError):
        days = None
    if seconds:
        return seconds
    if days:
        return days * 86400
    return seconds if seconds is not None else (0 if days == 0 else None)


def _upper(v: Any) -> str | None:
    return None if v is None else str(v).upper()


def _replica_ids(cur) -> tuple[int, ...] | None:
    # MariaDB 10.5+: SHOW REPLICA HOSTS; MySQL 8.0.22+: SHOW REPLICAS (8.4 removed SHOW SLAVE
    # HOSTS); older servers: SHOW SLAVE HOSTS
    for stmt in ("SHOW REPLICA HOSTS", "SHOW REPLICAS", "SHOW SLAVE HOSTS"):
        try:
            cur.execute(stmt)
        except pymysql.err.MySQLError:
            continue
        names = [d[0].lower() for d in cur.description or ()]
        col = names.index("server_id") if "server_id" in names else 0
        return tuple(int(r[col]) for r in cur.fetchall())
    return None


# -- the checks --------------------------------------------------------------------------------


def _problem(check: str, message: str, fix: str) -> ServerConfigError:
    err = ServerConfigError(message, fix=fix)
    err.check = check  # type: ignore[attr-defined]
    return err


def check_server(info: ServerInfo, server_ids: Sequence[int] | None = None,
                 databases: Sequence[str] | None = None, *,
                 gtid_start: str | None = None) -> list[ServerConfigError]:
    """Every problem with ``info`` for CDC, in the order a DBA would fix them.
    ``gtid_start``: the GTID set the capture is to start from
    (``scan.startup.specific-offset.gtid-set``), which needs a server logging GTIDs."""
    problems: list[ServerConfigError] = []
    minimum = MIN_MARIADB if info.is_mariadb else MIN_MYSQL
    if info.version < minimum:
        problems.append(_problem(
            "version",
            f"{info.describe()} ({info.version_string!r}) is too old for sparkcdc, which "
            f"needs MySQL {_fmt(MIN_MYSQL[:2])}+ or MariaDB {_fmt(MIN_MARIADB[:2])}+",
            f"upgrade the server to {'MariaDB' if info.is_mariadb else 'MySQL'} "
            f"{_fmt(minimum[:2])} or later"))
    if not info.log_bin:
        problems.append(_problem(
            "log_bin", f"binary logging is off on {info.describe()} (log_bin=OFF): there is "
            "no binlog to capture changes from",
            "start the server with --log-bin (in my.cnf under [mysqld]: log_bin=mysql-bin, "
            "binlog_format=ROW, server_id=<unique id>) and restart it"))
    if info.binlog_format != "ROW":
        problems.append(_problem(
            "binlog_format", f"binlog_format is {info.binlog_format} but CDC needs ROW: "
            "statement-based events do not carry the changed rows",
            "SET GLOBAL binlog_format = 'ROW'; and binlog_format=ROW in my.cnf so it survives "
            "a restart (sessions already open keep the old format until they reconnect)"))
    if info.binlog_row_image != "FULL":
        partial = (" (and partial JSON updates, binlog_row_value_options=PARTIAL_JSON, "
                   "need the full before image to apply to)"
                   if info.binlog_row_value_options == "PARTIAL_JSON" else "")
        problems.append(_problem(
            "binlog_row_image", f"binlog_row_image is {info.binlog_row_image} but CDC needs "
            "FULL: without full before- and after-images, updates and deletes cannot be "
            f"replayed exactly{partial}",
            "SET GLOBAL binlog_row_image = 'FULL'; and binlog_row_image=FULL in my.cnf"))
    if info.binlog_row_metadata is not None and info.binlog_row_metadata != "FULL":
        problems.append(_problem(
            "binlog_row_metadata", f"binlog_row_metadata is {info.binlog_row_metadata} but "
            "CDC needs FULL: the binlog must name the columns so events decode correctly "
            "even after a schema change",
            "SET GLOBAL binlog_row_metadata = 'FULL'; and binlog_row_metadata=FULL in my.cnf"))
    problems.extend(_event_problems(info))
    if gtid_start and not _logs_gtids(info):
        problems.append(gtid_start_problem(info.describe(), info.gtid_mode, gtid_start))
    problems.extend(_privilege_problems(info, databases))
    problems.extend(_server_id_problems(info, server_ids))
    return problems


def _event_problems(info: ServerInfo) -> list[ServerConfigError]:
    """Binlog settings whose events sparkcdc could not read here."""
    problems = []
    if info.binlog_checksum is not None and info.binlog_checksum not in _CHECKSUMS:
        problems.append(_problem(
            "binlog_checksum", f"binlog_checksum is {info.binlog_checksum}, which sparkcdc "
            f"cannot verify or strip (it reads {' and '.join(_CHECKSUMS)})",
            "SET GLOBAL binlog_checksum = 'CRC32'; and binlog_checksum=CRC32 in my.cnf"))
    if info.binlog_transaction_compression == "ON" and \
            importlib.util.find_spec("zstandard") is None:
        problems.append(_problem(
            "binlog_transaction_compression", "binlog_transaction_compression is ON, so "
            "transactions are written zstd-compressed, and the zstandard package is not "
            "installed where sparkcdc runs",
            "pip install zstandard (a dependency of sparkcdc; every Spark executor needs "
            "it too), or SET GLOBAL binlog_transaction_compression = OFF"))
    if info.binlog_row_value_options is not None and \
            info.binlog_row_value_options not in _ROW_VALUE_OPTIONS:
        problems.append(_problem(
            "binlog_row_value_options", f"binlog_row_value_options is "
            f"{info.binlog_row_value_options}, which sparkcdc cannot read (it applies "
            "'' and PARTIAL_JSON, JSON columns logged as changes to the before image)",
            "SET GLOBAL binlog_row_value_options = ''; (or 'PARTIAL_JSON') and "
            "binlog_row_value_options='' in my.cnf"))
    return problems


def _logs_gtids(info: ServerInfo) -> bool:
    """Whether new transactions get GTIDs (MariaDB always; MySQL with gtid_mode ON or
    ON_PERMISSIVE)."""
    return info.is_mariadb or (info.gtid_mode or "").startswith("ON")


def gtid_start_problem(server: str, gtid_mode: str | None, gtid_set: str) -> ServerConfigError:
    """The error for a start at a GTID set on a MySQL that logs no GTIDs (also raised by
    ``MySQLDialect.specific_offset`` when a stream starts)."""
    shown = gtid_set if len(gtid_set) <= 80 else gtid_set[:77] + "..."
    return _problem(
        "gtid_mode", f"the start position is a GTID set ({shown}, "
        f"scan.startup.specific-offset.gtid-set) but {server} has gtid_mode={gtid_mode}: its "
        "binlog holds no GTIDs to find that position by",
        "start from a binlog file and position instead (scan.startup.specific-offset.file "
        "and .pos), or turn GTIDs on: " + _GTID_FIX)


def check_warnings(info: ServerInfo) -> list[ServerConfigError]:
    """Settings CDC works with but that an operator should know the cost of, each a
    ``ServerConfigError`` with its ``check`` and fix (not raised; MySQL only: MariaDB
    always logs GTIDs, and its retention is left as it was)."""
    if info.is_mariadb or not info.log_bin:
        return []
    warnings = []
    mode = info.gtid_mode or ""
    if mode in ("OFF", "OFF_PERMISSIVE"):
        warnings.append(_problem(
            "gtid_mode", f"gtid_mode is {mode} on {info.describe()}: transactions carry no "
            "GTIDs, so sparkcdc reads by binlog file and position only; following a failover "
            "to a promoted replica (whose file positions differ) and a GTID start position "
            "(scan.startup.specific-offset.gtid-set) need gtid_mode=ON", _GTID_FIX))
    elif mode == "ON_PERMISSIVE":
        warnings.append(_problem(
            "gtid_mode", f"gtid_mode is ON_PERMISSIVE on {info.describe()}: transactions "
            "replicated from a server without GTIDs are still logged without one, and a "
            "failover cannot find its position past such a transaction",
            "finish turning GTIDs on: once SHOW STATUS LIKE "
            "'Ongoing_anonymous_transaction_count' says 0 on every server, SET GLOBAL "
            "enforce_gtid_consistency = ON; SET GLOBAL gtid_mode = ON (and gtid_mode=ON, "
            "enforce_gtid_consistency=ON in my.cnf)"))
    consistency = info.enforce_gtid_consistency
    if mode.endswith("PERMISSIVE") and consistency not in (None, "ON"):
        warnings.append(_problem(
            "enforce_gtid_consistency", f"enforce_gtid_consistency is {consistency} while "
            f"gtid_mode is {mode}: gtid_mode cannot be set to ON (which failover and GTID "
            "start positions need) until statements that GTIDs cannot log safely are refused",
            "SET GLOBAL enforce_gtid_consistency = WARN; fix what the error log then reports, "
            "then SET GLOBAL enforce_gtid_consistency = ON; and "
            "enforce_gtid_consistency=ON in my.cnf"))
    expire = info.binlog_expire_seconds
    if expire and expire < MIN_EXPIRE_SECONDS and info.binlog_auto_purge:
        warnings.append(_problem(
            "binlog_expire_logs_seconds", f"binlog_expire_logs_seconds is {expire} "
            f"({_duration(expire)}): a pipeline stopped longer than that (or slower than "
            "the server by that much) finds its position purged and must snapshot again",
            "keep binlogs longer than the pipeline is ever stopped plus its catch-up, at "
            "least a day: SET PERSIST binlog_expire_logs_seconds = 604800; (7 days) or "
            "binlog_expire_logs_seconds=604800 in my.cnf (on RDS: CALL "
            "mysql.rds_set_configuration('binlog retention hours', 168))"))
    return warnings


def _duration(seconds: int) -> str:
    if seconds < 120:
        return f"{seconds} s"
    if seconds < 7200:
        return f"{seconds // 60} min"
    return f"{seconds / 3600:.3g} h"


def _privilege_problems(info: ServerInfo, databases: Sequence[str] | None
                        ) -> list[ServerConfigError]:
    g = info.grants
    missing: list[str] = []
    statements: list[str] = []
    if databases:
        no_select = [d for d in databases if not g.can_select(d)]
        if no_select:
            missing.append(f"SELECT on {', '.join(no_select)}")
            statements += [f"GRANT SELECT ON `{d.replace('`', '``')}`.* TO {info.user};"
                           for d in no_select]
    elif not g.can_select_anything():
        missing.append("SELECT")
        statements.append(f"GRANT SELECT ON *.* TO {info.user};")
    global_missing = []
    if not g.has_global("REPLICATION SLAVE"):
        global_missing.append("REPLICATION SLAVE")
    also = ("SUPER",) if not info.is_mariadb else ()
    if not g.has_global("REPLICATION CLIENT", *also):
        global_missing.append(info.replication_client_name)
    if global_missing:
        missing += global_missing
        statements.append(f"GRANT {', '.join(global_missing)} ON *.* TO {info.user};")
    if not missing:
        return []
    if info.roles_unreadable:
        return []  # reported as a warning by inspect_server: a role may hold them
    return [_problem(
        "privileges", f"user {info.user} lacks {'; '.join(missing)}: CDC needs SELECT on the "
        f"captured tables, REPLICATION SLAVE to read the binlog and "
        f"{info.replication_client_name} to read binlog positions",
        "as an administrator run: " + " ".join(statements))]


def _server_id_problems(info: ServerInfo, server_ids: Sequence[int] | None
                        ) -> list[ServerConfigError]:
    ids = list(server_ids or ())
    problems = []
    bad = [i for i in ids if not 1 <= i <= MAX_SERVER_ID]
    if bad:
        problems.append(_problem(
            "server_id", f"server-id {bad[0]} is out of range: a binlog reader needs an id "
            f"between 1 and {MAX_SERVER_ID}",
            "set the server-id option to a value or range like '5400-5408'"))
    if info.server_id in ids:
        problems.append(_problem(
            "server_id", f"server-id {info.server_id} is the source server's own @@server_id; "
            "the server refuses a binlog reader with its own id",
            f"set the server-id option to another value or range (e.g. "
            f"'{_suggest(info, len(ids))}')"))
    clash = sorted(set(ids) & set(info.replica_server_ids or ()))
    if clash:
        problems.append(_problem(
            "server_id", f"server-id {', '.join(map(str, clash))} is already used by a replica "
            "connected to the server (SHOW REPLICA HOSTS); the server would disconnect one "
            "of the two readers",
            f"set the server-id option to an unused value or range (e.g. "
            f"'{_suggest(info, len(ids))}')"))
    return problems


def _suggest(info: ServerInfo, n: int) -> str:
    taken = {info.server_id, *(info.replica_server_ids or ())}
    start = 5400
    while any(i in taken for i in range(start, start + max(n, 1))):
        start += 100
    return str(start) if n <= 1 else f"{start}-{start + n - 1}"


# -- entry points ------------------------------------------------------------------------------


def validate_all(conn: ConnectionOptions, server_ids: Sequence[int] | None = None,
                 databases: Sequence[str] | None = None, *,
                 gtid_start: str | None = None,
                 warnings: list[ServerConfigError] | None = None) -> list[ServerConfigError]:
    """Every problem at once, for ``sparkcdc validate``; an empty list means ready.
    Connection and authentication failures raise: nothing else could be checked.
    The warnings (``check_warnings``) are appended to ``warnings`` when a list is given
    (``sparkcdc validate`` lists them in its report); otherwise logged, each with its fix,
    as WARNING of ``sparkcdc.validate``."""
    info = inspect_server(conn)
    found = check_warnings(info)
    if warnings is not None:
        warnings.extend(found)
    else:
        for w in found:
            log.warning("%s: %s\n    fix: %s",
                        w.check, w.message, w.fix)  # type: ignore[attr-defined]
    return check_server(info, server_ids, databases, gtid_start=gtid_start)


def validate_server(conn: ConnectionOptions, server_ids: Sequence[int] | None = None,
                    databases: Sequence[str] | None = None, *,
                    gtid_start: str | None = None) -> ServerInfo:
    """The server's ``ServerInfo`` if it is ready for CDC; else raise the first problem."""
    info = inspect_server(conn)
    problems = check_server(info, server_ids, databases, gtid_start=gtid_start)
    if problems:
        raise problems[0]
    return info
