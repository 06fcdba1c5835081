"""What differs between the two source servers in the benches (``--server mariadb|mysql``):
the sandbox and its settings, the SQL that fills a table, the binlog status's spelling, and
the server's own tools, ``mariadb-dump`` / ``mariadb-binlog`` beside ``mysqldump`` /
``mysqlbinlog``.

MySQL's tools are those of the MySQL 9.7 root (``scripts/setup_mysql.sh`` installs Debian
unstable's ``mysql-client-core`` there beside the server): they need that root's C library,
so they run chrooted into it (``chroot ROOT mysqldump ...``, the process is the tool itself)
and reach the sandbox over TCP on 127.0.0.1, as MariaDB's tools do from the host. Files they
write (``mysqlbinlog --raw``) land under the root.
"""

from __future__ import annotations

import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from sparkcdc.testing.mariadb import MariaDBSandbox, ServerSettings
from sparkcdc.testing.mysql import MySQLSandbox, MySQLSettings, mysql_root

SERVERS = ("mariadb", "mysql")

# the bench's table (bench/throughput.py's COLUMNS_DDL) filled from integers ``seq``; the
# hex column is a SHA-2 prefix, which both servers have (MySQL 9 removed MD5)
FILL = ("SELECT seq, seq * 7, seq * 1000003, CONCAT('name-', seq), seq / 3, seq / 7, "
        "'2024-01-02 03:04:05' + INTERVAL seq SECOND, '2024-01-01' + INTERVAL (seq % 1000) DAY, "
        "seq % 100, LEFT(SHA2(seq, 256), 32), "
        "'2024-05-01 00:00:00' + INTERVAL (seq % 10000000) SECOND FROM {seq}")


def sandbox(server: str, name: str, base_dir: Path | None = None, time_zone: str | None = None,
            extra_args: tuple[str, ...] = (), fake_57: bool = False) -> MariaDBSandbox:
    """A bench's sandbox: a large buffer pool and binlog files (a bench's table and its
    changes fit in memory and in one file), the binlog not synced at each commit on
    either (MariaDB's default; MySQL's is to sync). ``fake_57``: a MariaDB that reports
    ``5.7.19-10.11.19-log`` (what Debezium's MySQL connector once needed on MariaDB); MySQL
    reports its own version, always."""
    if server == "mariadb":
        return MariaDBSandbox(ServerSettings(
            version="5.7.19-10.11.19-log" if fake_57 else None, time_zone=time_zone,
            extra_args=("--innodb-buffer-pool-size=3G", "--innodb-log-file-size=1G",
                        "--max-binlog-size=1G", *extra_args)), name=name, base_dir=base_dir)
    if server == "mysql":
        # base_dir must lie under MySQL's root: the sandbox picks its own folder there
        return MySQLSandbox(MySQLSettings(time_zone=time_zone, extra_args=(
            "--innodb-buffer-pool-size=3G", "--innodb-redo-log-capacity=1G",
            "--max-binlog-size=1G", "--sync-binlog=0", *extra_args)), name=name)
    raise SystemExit(f"unknown server {server!r} (one of {', '.join(SERVERS)})")


def seq(server: str, n: int, lo: int = 0) -> str:
    """The integers lo+1 .. lo+n as a derived table of one column ``seq``."""
    if server == "mariadb":
        return f"(SELECT seq + {lo} AS seq FROM seq_1_to_{n}) AS s"
    return (f"(WITH RECURSIVE r (seq) AS (SELECT {lo + 1} UNION ALL SELECT seq + 1 FROM r "
            f"WHERE seq < {lo + n}) SELECT seq FROM r) AS s")


def fill(sb: MariaDBSandbox, table: str, rows: int, database: str) -> None:
    """``rows`` rows of the bench's table, ids 1..rows, in statements of a million."""
    server = sb.info.server
    for lo in range(0, rows, 1_000_000):
        n = min(1_000_000, rows - lo)
        sb.execute(f"INSERT INTO {table} " + FILL.format(seq=seq(server, n, lo)),
                   database=database)


def binlog_position(sb: MariaDBSandbox) -> tuple[str, int]:
    """The server's binlog file and position now (MySQL 8.4+ removed ``SHOW MASTER
    STATUS``)."""
    spelling = "SHOW BINARY LOG STATUS" if sb.info.server == "mysql" else "SHOW MASTER STATUS"
    row = sb.query(spelling)[0]
    return str(row[0]), int(row[1])


def version(sb: MariaDBSandbox) -> str:
    return str(sb.query("SELECT VERSION()")[0][0])


def tool(server: str, name: str) -> list[str]:
    """The command of one of the server's own tools: ``dump`` or ``binlog``."""
    if server == "mariadb":
        return [{"dump": "mariadb-dump", "binlog": "mariadb-binlog"}[name]]
    binary = {"dump": "/usr/bin/mysqldump", "binlog": "/usr/bin/mysqlbinlog"}[name]
    return ["chroot", str(mysql_root()), binary]


def tool_name(server: str, name: str) -> str:
    return tool(server, name)[-1].rsplit("/", 1)[-1]


def login(sb: MariaDBSandbox) -> list[str]:
    i = sb.info
    return ["-h", i.host, "-P", str(i.port), "-u", i.admin_user, f"-p{i.admin_password}"]


def dump_command(sb: MariaDBSandbox, database: str, table: str) -> list[str]:
    """The table dumped as a consistent snapshot, row by row (to stdout)."""
    server = sb.info.server
    extra = ["--set-gtid-purged=OFF"] if server == "mysql" else []
    return [*tool(server, "dump"), *login(sb), "--single-transaction", "--quick", *extra,
            database, table]


def binlog_command(sb: MariaDBSandbox, files: list[str], start: int | None = None,
                   stop: int | None = None, raw_dir: Path | None = None) -> list[str]:
    """The server's binlog tool reading ``files`` from the server: decoded to text with the
    rows as pseudo-SQL (``-v``, to stdout), or written as they are into ``raw_dir``
    (``--raw``; for MySQL a folder under its root)."""
    server = sb.info.server
    cmd = [*tool(server, "binlog"), "--read-from-remote-server", *login(sb)]
    if start is not None:
        cmd.append(f"--start-position={start}")
    if stop is not None:
        cmd.append(f"--stop-position={stop}")
    if raw_dir is not None:
        target = raw_dir if server == "mariadb" else "/" + str(
            raw_dir.resolve().relative_to(mysql_root().resolve()))
        cmd += ["--raw", f"--result-file={target}/"]
    else:
        cmd += ["--base64-output=decode-rows", "-v"]
    return [*cmd, *files]


def raw_folder(server: str) -> Path:
    """A fresh folder a ``--raw`` read can write into (under MySQL's root for MySQL)."""
    parent = None if server == "mariadb" else mysql_root() / "tmp"
    return Path(tempfile.mkdtemp(prefix="bench-raw-", dir=parent))
