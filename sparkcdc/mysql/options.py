"""The source options, with Flink CDC's names and defaults, parsed once into a typed config.

Options arrive as strings (from Spark's ``.option()`` or a pipeline YAML). ``SourceConfig.parse``
checks every one for name, type, range and allowed values, and fails on the first problem
with one message naming the option, what it accepts, and (for an unknown name) the closest
valid name. Nothing downstream parses strings again.
"""

from __future__ import annotations

import difflib
import json
import re
import secrets
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from sparkcdc.errors import ConfigError
from sparkcdc.mysql.connection import (
    SSL_MODES,
    VERIFY_MODES,
    ConnectionOptions,
    build_ssl_context,
)
from sparkcdc.options import Opt, Options

STARTUP_MODES = ("initial", "snapshot", "latest-offset", "earliest-offset", "specific-offset",
                 "timestamp")

# name -> its default (None: unset) and what it accepts (sparkcdc/options.py)
OPTIONS: dict[str, Opt] = {
    "hostname": Opt(None, "the server's host name or IP; several, comma-separated (host or "
                         "host:port), are tried in order: a primary and its replicas"),
    "port": Opt("3306", "an integer port, 1-65535"),
    "username": Opt(None, "the user name"),
    "password": Opt("", "the password"),
    "database-name": Opt(None, "a regular expression matched against database names"),
    "table-name": Opt(None, "a regular expression matched against 'database.table'"),
    "table-name.exclude": Opt(None, "a regular expression of 'database.table' names to skip"),
    "server-id": Opt(None, "an id like '5400' or a range like '5400-5408' (one id per "
                        "concurrent binlog reader)"),
    "server-time-zone": Opt(None, "a time zone like 'UTC' or '+02:00'"),
    "scan.startup.mode": Opt("initial", "one of " + ", ".join(STARTUP_MODES)),
    "scan.startup.specific-offset.file": Opt(None, "a binlog file name like 'binlog.000003'"),
    "scan.startup.specific-offset.pos": Opt(None, "a non-negative integer position"),
    "scan.startup.specific-offset.gtid-set": Opt(None, "a GTID set / MariaDB GTID position"),
    "scan.startup.specific-offset.skip-events": Opt("0", "a non-negative integer"),
    "scan.startup.specific-offset.skip-rows": Opt("0", "a non-negative integer"),
    "scan.startup.timestamp-millis": Opt(None, "milliseconds since the epoch"),
    "scan.incremental.snapshot.chunk.size": Opt("8096", "a positive integer (rows per chunk)"),
    "scan.incremental.snapshot.chunk.key-column": Opt(
        None, "'db.table:column' entries separated by ';' (table part may be a regex)"),
    "scan.snapshot.fetch.size": Opt("1024", "a positive integer"),
    "chunk-key.even-distribution.factor.upper-bound": Opt("1000.0", "a positive number"),
    "chunk-key.even-distribution.factor.lower-bound": Opt("0.05", "a positive number"),
    "connect.timeout": Opt("30s", "a duration like '30s', '500ms', '2min': the longest opening "
                               "one connection may take, retries included"),
    "connect.max-retries": Opt("3", "a non-negative integer"),
    "heartbeat.interval": Opt("30s", "a duration like '30s'"),
    "ssl.mode": Opt("preferred", "one of " + ", ".join(SSL_MODES)),
    "ssl.ca": Opt(None, "the path of a PEM file with the CA certificate(s) that sign the "
                     "server's certificate (verify_ca, verify_identity)"),
    "ssl.cert": Opt(None, "the path of a PEM client certificate (with 'ssl.key')"),
    "ssl.key": Opt(None, "the path of the PEM private key of 'ssl.cert'"),
    "scan.incremental.snapshot.backfill.skip": Opt("false", "true or false"),
    "scan.snapshot.as-of": Opt(None, "a binlog offset as JSON (set by sparkcdc.read_snapshot)"),
    "maxRowsPerBatch": Opt(None, "a positive integer: rows admitted per micro-batch"),
    "arrow-batches": Opt("false", "true or false: each output row carries one Arrow record "
                               "batch of change rows (columns _rows, _batch) instead of one "
                               "change; sparkcdc.spark.arrow_batches.decode turns a "
                               "micro-batch back into a table on the driver"),
    "changelog-mode": Opt("all", "'all' (an update is update_preimage + update_postimage) or "
                              "'upsert' (its postimage alone, for consumers that only need "
                              "the latest row per key)"),
    "scan.binlog.max-batch-size": Opt(
        "128mb", "a size like '128mb' or a number of bytes: a micro-batch of the stream reads "
                 "at most about this much binlog, so a backlog is read in batches of bounded "
                 "memory; 0: no bound"),
    "scan.table-generations": Opt(
        None, "a JSON object of 'database.table' to an integer: a table whose number moved "
              "on since the query's checkpoint is snapshotted again, inside the running "
              "stream (sparkcdc run sets it when a target was emptied)"),
    "scan.tables.file": Opt(
        None, "a path to a JSON object of 'database.table' to an integer: the tables the "
              "stream captures and their generations, read again before every batch, so "
              "tables join, leave or are taken again inside the running query (sparkcdc "
              "run writes it for the pipeline's stream); overrides scan.table-generations"),
    "scan.schema-changes.in-stream": Opt(
        "false", "true or false (needs arrow-batches): a captured table's schema changes, "
                 "DDL statements and TRUNCATEs travel in the stream as event batches, and "
                 "its rows after a change are decoded with the new schema "
                 "(docs/spark-source.md, Schema changes in the stream)"),
    "zero-dates.not-null": Opt("null", "'null' or 'epoch': what a zero date ('0000-00-00') "
                                       "in a NOT NULL column reads as"),
    "scan.parse.online.schema.changes.enabled": Opt(
        "false", "true or false: read gh-ost's and pt-online-schema-change's work on a "
                 "captured table as an ALTER of it; their helper tables are not captured "
                 "(mysql/online_schema.py)"),
    "scan.binlog.parallel.split-size": Opt(
        "16mb", "a size like '16mb', '512kb' or a number of bytes: a micro-batch's binlog "
                "window larger than this is read by several tasks; 0 turns that off"),
}


def parse_server_ids(value: str | None) -> tuple[int, ...]:
    """'5400' or '5400-5408' -> ids. Unset: a random range of 9 high ids, so two queries
    started without the option do not clash with each other or with real replicas."""
    if value is None:
        base = 1_000_000_000 + secrets.randbelow(2_000_000_000)
        return tuple(range(base, base + 9))
    m = re.fullmatch(r"\s*(\d+)\s*(?:-\s*(\d+))?\s*", value)
    if not m:
        raise ConfigError(f"option 'server-id' has the malformed value {value!r}",
                          fix="use an id like '5400' or a range like '5400-5408'",
                          key="server-id")
    lo = int(m.group(1))
    hi = int(m.group(2)) if m.group(2) else lo
    if not (1 <= lo <= hi <= 4294967295):
        raise ConfigError(f"option 'server-id' range {value!r} is invalid",
                          fix="ids are 1-4294967295 and a range is 'low-high' with low <= high",
                          key="server-id")
    return tuple(range(lo, hi + 1))


def _tls_options(o: Options) -> dict[str, Any]:
    """ssl.mode / ssl.ca / ssl.cert / ssl.key, checked together; files must be readable
    (on the driver here, and at the same path on every executor)."""
    get = o.get
    mode = (get("ssl.mode") or "").strip().lower().replace("-", "_")
    if mode not in SSL_MODES:
        close = difflib.get_close_matches(mode, SSL_MODES, n=1, cutoff=0.4)
        raise ConfigError(f"option 'ssl.mode' has the unknown value {get('ssl.mode')!r}",
                          fix=f"use one of {', '.join(SSL_MODES)}"
                              + (f" (did you mean '{close[0]}'?)" if close else ""),
                          key="ssl.mode")
    ca, cert, key = get("ssl.ca") or None, get("ssl.cert") or None, get("ssl.key") or None
    if mode in VERIFY_MODES and not ca:
        raise ConfigError(f"ssl.mode '{mode}' needs 'ssl.ca'",
                          fix="set 'ssl.ca' to the PEM file of the CA that signed the server's "
                              "certificate (the server's ssl_ca)")
    if mode == "disabled" and (ca or cert or key):
        raise ConfigError("ssl.mode 'disabled' turns TLS off, but ssl.ca/ssl.cert/ssl.key are set",
                          fix="remove the ssl.* file options or choose another ssl.mode")
    if ca and mode not in VERIFY_MODES:
        raise ConfigError(f"'ssl.ca' is set but ssl.mode '{mode}' does not check the server's "
                          f"certificate",
                          fix="use ssl.mode 'verify_ca' or 'verify_identity' to verify with it")
    if cert and mode == "preferred":
        raise ConfigError("a client certificate ('ssl.cert') needs TLS, but ssl.mode "
                          "'preferred' may connect without it",
                          fix="use ssl.mode 'verify_ca' or 'verify_identity' (or 'required')")
    if bool(cert) != bool(key):
        raise ConfigError("'ssl.cert' and 'ssl.key' go together (a client certificate and its "
                          "private key)", fix="set both or neither")
    for name, path in (("ssl.ca", ca), ("ssl.cert", cert), ("ssl.key", key)):
        if path is None:
            continue
        try:
            with open(path, "rb") as f:
                f.read(1)
        except OSError as e:
            raise ConfigError(f"option '{name}': cannot read {path!r} ({e.strerror})",
                              fix=f"'{name}' accepts {OPTIONS[name].accepts}; it must be readable "
                                  "by the driver and at the same path on every executor",
                              key=name) from None
    if mode not in ("disabled", "preferred"):
        try:
            build_ssl_context(mode, ca, cert, key)
        except (OSError, ValueError) as e:  # ssl.SSLError is an OSError
            raise ConfigError(f"the TLS files are not usable: {e} (ssl.ca={ca}, "
                              f"ssl.cert={cert}, ssl.key={key})",
                              fix="ssl.ca and ssl.cert must be PEM certificates, ssl.key the "
                                  "PEM private key matching ssl.cert") from None
    return {"ssl_mode": mode, "ssl_ca": ca, "ssl_cert": cert, "ssl_key": key}


@dataclass(frozen=True)
class StartupOffset:
    file: str | None = None
    pos: int | None = None
    gtid_set: str | None = None
    skip_events: int = 0
    skip_rows: int = 0
    timestamp_ms: int | None = None


@dataclass(frozen=True)
class SourceConfig:
    connection: ConnectionOptions
    database_name: str
    table_name: str
    table_exclude: str | None
    server_ids: tuple[int, ...]
    startup_mode: str
    startup: StartupOffset
    chunk_size: int
    chunk_key_columns: str | None
    fetch_size: int
    factor_upper: float
    factor_lower: float
    heartbeat_interval: float
    backfill_skip: bool
    max_rows_per_batch: int | None
    raw: Mapping[str, str] = field(default_factory=dict, repr=False, compare=False)
    binlog_split_bytes: int = 16 * 1024**2  # 0: a micro-batch's window is never split
    binlog_batch_bytes: int = 128 * 1024**2  # 0: a stream batch reads its whole backlog
    preimages: bool = True  # changelog-mode 'all'; 'upsert' leaves update preimages out
    arrow_batches: bool = False  # output rows are whole Arrow record batches (IPC bytes)
    table_generations: Mapping[str, int] = field(default_factory=dict)  # db.table -> number
    table_events: bool = False  # scan.schema-changes.in-stream
    tables_file: str | None = None  # scan.tables.file
    online_schema_changes: bool = False  # scan.parse.online.schema.changes.enabled
    zero_dates_epoch: bool = False  # zero-dates.not-null: epoch

    @classmethod
    def parse(cls, options: Mapping[str, Any]) -> SourceConfig:
        o = Options(None, OPTIONS, options, fold_case=True, ignore=("path",),
                    docs="see docs/spark-source.md for the options", strict_flags=True)
        get = o.get

        mode = (get("scan.startup.mode") or "").strip().lower()
        if mode not in STARTUP_MODES:
            close = difflib.get_close_matches(mode, STARTUP_MODES, n=1, cutoff=0.4)
            raise ConfigError(
                f"option 'scan.startup.mode' has the unknown value {mode!r}",
                fix=f"use one of {', '.join(STARTUP_MODES)}"
                    + (f" (did you mean '{close[0]}'?)" if close else ""),
                key="scan.startup.mode")

        startup = StartupOffset()
        if mode == "specific-offset":
            file = get("scan.startup.specific-offset.file")
            gtid = get("scan.startup.specific-offset.gtid-set")
            pos = get("scan.startup.specific-offset.pos")
            if not file and not gtid:
                raise ConfigError(
                    "scan.startup.mode 'specific-offset' needs a position",
                    fix="set 'scan.startup.specific-offset.file' and '.pos' "
                        "(or '.gtid-set')", key="scan.startup.mode")
            if file and pos is None:
                raise ConfigError("option 'scan.startup.specific-offset.pos' is required with "
                                  "'scan.startup.specific-offset.file'",
                                  key="scan.startup.specific-offset.pos")
            startup = StartupOffset(
                file=file, pos=o.integer("scan.startup.specific-offset.pos", 0) if pos else None,
                gtid_set=gtid,
                skip_events=o.integer("scan.startup.specific-offset.skip-events", 0) or 0,
                skip_rows=o.integer("scan.startup.specific-offset.skip-rows", 0) or 0)
        elif mode == "timestamp":
            o.required("scan.startup.timestamp-millis")
            startup = StartupOffset(timestamp_ms=o.integer("scan.startup.timestamp-millis", 0))

        tls = _tls_options(o)
        timeout = o.duration("connect.timeout")
        if timeout <= 0:
            raise o.bad("connect.timeout", "must be positive")
        conn = ConnectionOptions(
            hostname=o.required("hostname"),
            port=o.integer("port", 1, 65535) or 3306,
            username=o.required("username"),
            password=get("password") or "",
            connect_timeout=timeout,
            max_retries=o.integer("connect.max-retries", 0, 100) or 0,
            server_time_zone=get("server-time-zone"),
            **tls,
        )
        lower = o.positive_number("chunk-key.even-distribution.factor.lower-bound")
        upper = o.positive_number("chunk-key.even-distribution.factor.upper-bound")
        if lower > upper:
            raise ConfigError("the even-distribution factor lower bound exceeds the upper bound",
                              fix="'chunk-key.even-distribution.factor.lower-bound' must be <= "
                                  "'...upper-bound'",
                              key="chunk-key.even-distribution.factor.lower-bound")
        o.required("database-name")
        o.required("table-name")
        return cls(
            connection=conn,
            database_name=o.regex("database-name") or "",
            table_name=o.regex("table-name") or "",
            table_exclude=o.regex("table-name.exclude"),
            server_ids=parse_server_ids(get("server-id")),
            startup_mode=mode,
            startup=startup,
            chunk_size=o.integer("scan.incremental.snapshot.chunk.size", 1) or 1,
            chunk_key_columns=get("scan.incremental.snapshot.chunk.key-column"),
            fetch_size=o.integer("scan.snapshot.fetch.size", 1) or 1,
            factor_upper=upper, factor_lower=lower,
            heartbeat_interval=o.duration("heartbeat.interval"),
            backfill_skip=o.flag("scan.incremental.snapshot.backfill.skip"),
            max_rows_per_batch=(o.integer("maxRowsPerBatch", 1) if get("maxRowsPerBatch")
                                else None),
            raw={k: v for k, v in o.raw.items() if k != "password"},
            binlog_split_bytes=o.size("scan.binlog.parallel.split-size"),
            binlog_batch_bytes=o.size("scan.binlog.max-batch-size"),
            preimages=o.choice("changelog-mode", ("all", "upsert")) == "all",
            arrow_batches=o.flag("arrow-batches"),
            table_generations=_generations(get("scan.table-generations")),
            table_events=_table_events(o),
            tables_file=get("scan.tables.file") or None,
            online_schema_changes=o.flag("scan.parse.online.schema.changes.enabled"),
            # blank is 'null' too: YAML reads an unquoted null as no value
            zero_dates_epoch=bool((o.get("zero-dates.not-null") or "").strip())
            and o.choice("zero-dates.not-null", ("null", "epoch")) == "epoch",
        )


def _table_events(o: Options) -> bool:
    on = o.flag("scan.schema-changes.in-stream")
    if on and not o.flag("arrow-batches"):
        raise ConfigError("option 'scan.schema-changes.in-stream' needs 'arrow-batches': rows "
                          "of one table before and after a change have different columns",
                          fix="set arrow-batches to true too",
                          key="scan.schema-changes.in-stream")
    return on


def _generations(value: str | None) -> dict[str, int]:
    if not value:
        return {}
    try:
        d = json.loads(value)
        if isinstance(d, dict) and all(isinstance(v, int) and v >= 0 for v in d.values()):
            return {str(k): int(v) for k, v in d.items()}
    except ValueError:
        pass
    raise ConfigError(f"option 'scan.table-generations' is not a JSON object of table names "
                      f"to non-negative integers: {value[:200]!r}",
                      fix='write it like {"shop.orders": 1}', key="scan.table-generations")
