"""Is the source server set up for CDC? One check per requirement, one message per problem.

``inspect_server`` reads what is needed (variables, grants, replicas) into a ``ServerInfo``
(``server_info``, with the grants parsed by ``grants``); ``check_server`` turns it into
problems without touching the server, so every check is a pure function of what the server
said. ``validate_server`` raises the first problem (for a source starting up);
``validate_all`` returns them all (for ``sparkcdc validate``).

Each problem is a ``ServerConfigError`` whose ``fix`` is the statement or setting to change,
and whose ``check`` attribute names the check (``version``, ``log_bin``, ``binlog_format``,
``binlog_row_image``, ``binlog_row_metadata``, ``binlog_checksum``,
``binlog_transaction_compression``, ``binlog_row_value_options``, ``gtid_mode``,
``privileges``, ``server_id``).

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
from collections.abc import Sequence
from dataclasses import replace

from sparkcdc.errors import ServerConfigError
from sparkcdc.mysql.connection import ConnectionOptions
from sparkcdc.mysql.server_info import ServerInfo, read_server_info, version_text

log = logging.getLogger("sparkcdc.validate")

MIN_MYSQL = (5, 7, 0)
MIN_MARIADB = (10, 4, 0)
MAX_SERVER_ID = 2**32 - 1

_CHECKSUMS = ("NONE", "CRC32")  # the binlog checksums the event layer reads
_ROW_VALUE_OPTIONS = ("", "PARTIAL_JSON")  # binlog_row_value_options the reader applies
MIN_EXPIRE_SECONDS = 24 * 3600  # a binlog kept less than this is warned about
_GTID_FIX = ("in my.cnf under [mysqld]: gtid_mode=ON and enforce_gtid_consistency=ON, then "
             "restart; or online, without a restart: SET GLOBAL enforce_gtid_consistency = ON; "
             "then SET GLOBAL gtid_mode = OFF_PERMISSIVE; then ON_PERMISSIVE; wait until "
             "SHOW STATUS LIKE 'Ongoing_anonymous_transaction_count' says 0; then "
             "SET GLOBAL gtid_mode = ON (and SET PERSIST both, or my.cnf, to keep them)")


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
            f"needs MySQL {version_text(MIN_MYSQL[:2])}+ or MariaDB {version_text(MIN_MARIADB[:2])}+",
            f"upgrade the server to {'MariaDB' if info.is_mariadb else 'MySQL'} "
            f"{version_text(minimum[:2])} or later"))
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


def inspect_server(conn: ConnectionOptions) -> ServerInfo:
    """The server's ``ServerInfo`` (``read_server_info``); on MySQL, what ``check_warnings``
    finds is kept in its ``warnings`` too."""
    info = read_server_info(conn)
    if info.flavor == "mysql":
        info = replace(info, warnings=info.warnings + tuple(
            f"{w.message} (fix: {w.fix})" for w in check_warnings(info)))
    return info


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
