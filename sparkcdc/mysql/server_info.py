"""What a source server says about itself: its flavor and version, the settings capture
depends on, the CDC user's grants, and the replicas connected to it.

``read_server_info`` reads it all into one ``ServerInfo`` with the CDC user's own
connection, once; ``validation`` checks it without touching the server again, so every
check is a pure function of what the server said.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

import pymysql

from sparkcdc.errors import ServerConfigError
from sparkcdc.mysql.connection import ConnectionOptions
from sparkcdc.mysql.grants import Grants, parse_grants
from sparkcdc.mysql.offsets import names_mariadb

_VARIABLES = ("version", "version_comment", "server_id", "log_bin", "binlog_format",
              "binlog_row_image", "binlog_row_metadata", "gtid_mode", "gtid_executed",
              "gtid_binlog_pos", "aria_block_size", "gtid_domain_id", "binlog_checksum",
              "binlog_transaction_compression", "binlog_row_value_options", "encrypt_binlog",
              "binlog_encryption", "enforce_gtid_consistency", "binlog_expire_logs_seconds",
              "binlog_expire_logs_auto_purge", "expire_logs_days")


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


def version_text(v: Sequence[int]) -> str:
    """A version as it is written: ``(8, 0, 36)`` is ``8.0.36``."""
    return ".".join(map(str, v))


@dataclass(frozen=True)
class ServerInfo:
    """What the server says about itself that capture depends on: every check of
    ``validation`` is a function of it, so none touches the server."""

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
        return f"{'MariaDB' if self.is_mariadb else 'MySQL'} {version_text(self.version)}"


def _account(current_user: str) -> str:
    name, _, host = current_user.rpartition("@")
    if not name:
        name, host = current_user, "%"
    return f"'{name}'@'{host}'"


def read_server_info(conn: ConnectionOptions) -> ServerInfo:
    """Read the server's CDC-relevant state with the CDC user's own connection: its
    variables, the user's grants (with its roles' where the server shows them) and the
    replicas connected to it. What cannot be read is noted in ``warnings``."""
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

    is_maria = names_mariadb(v.get("version"), v.get("version_comment"), v)
    flavor, version = parse_version(str(v.get("version", "")), str(v.get("version_comment", "")),
                                    mariadb=is_maria)
    meta = v.get("binlog_row_metadata")
    if meta is None:
        warnings.append(
            f"binlog_row_metadata does not exist on {flavor} {version_text(version)} (MySQL 8.0.1+, "
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
