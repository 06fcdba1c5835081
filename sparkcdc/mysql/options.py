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

STARTUP_MODES = ("initial", "snapshot", "latest-offset", "earliest-offset", "specific-offset",
                 "timestamp")

# name -> (default as a string or None for "unset", description of accepted values)
OPTIONS: dict[str, tuple[str | None, str]] = {
    "hostname": (None, "the server's host name or IP"),
    "port": ("3306", "an integer port, 1-65535"),
    "username": (None, "the user name"),
    "password": ("", "the password"),
    "database-name": (None, "a regular expression matched against database names"),
    "table-name": (None, "a regular expression matched against 'database.table'"),
    "table-name.exclude": (None, "a regular expression of 'database.table' names to skip"),
    "server-id": (None, "an id like '5400' or a range like '5400-5408' (one id per "
                        "concurrent binlog reader)"),
    "server-time-zone": (None, "a time zone like 'UTC' or '+02:00'"),
    "scan.startup.mode": ("initial", "one of " + ", ".join(STARTUP_MODES)),
    "scan.startup.specific-offset.file": (None, "a binlog file name like 'binlog.000003'"),
    "scan.startup.specific-offset.pos": (None, "a non-negative integer position"),
    "scan.startup.specific-offset.gtid-set": (None, "a GTID set / MariaDB GTID position"),
    "scan.startup.specific-offset.skip-events": ("0", "a non-negative integer"),
    "scan.startup.specific-offset.skip-rows": ("0", "a non-negative integer"),
    "scan.startup.timestamp-millis": (None, "milliseconds since the epoch"),
    "scan.incremental.snapshot.chunk.size": ("8096", "a positive integer (rows per chunk)"),
    "scan.incremental.snapshot.chunk.key-column": (
        None, "'db.table:column' entries separated by ';' (table part may be a regex)"),
    "scan.snapshot.fetch.size": ("1024", "a positive integer"),
    "chunk-key.even-distribution.factor.upper-bound": ("1000.0", "a positive number"),
    "chunk-key.even-distribution.factor.lower-bound": ("0.05", "a positive number"),
    "connect.timeout": ("30s", "a duration like '30s', '500ms', '2min': the longest opening "
                               "one connection may take, retries included"),
    "connect.max-retries": ("3", "a non-negative integer"),
    "heartbeat.interval": ("30s", "a duration like '30s'"),
    "ssl.mode": ("preferred", "one of " + ", ".join(SSL_MODES)),
    "ssl.ca": (None, "the path of a PEM file with the CA certificate(s) that sign the "
                     "server's certificate (verify_ca, verify_identity)"),
    "ssl.cert": (None, "the path of a PEM client certificate (with 'ssl.key')"),
    "ssl.key": (None, "the path of the PEM private key of 'ssl.cert'"),
    "scan.incremental.snapshot.backfill.skip": ("false", "true or false"),
    "scan.snapshot.as-of": (None, "a binlog offset as JSON (set by sparkcdc.read_snapshot)"),
    "maxRowsPerBatch": (None, "a positive integer: rows admitted per micro-batch"),
    "arrow-batches": ("false", "true or false: each output row carries one Arrow record "
                               "batch of change rows (columns _rows, _batch) instead of one "
                               "change; sparkcdc.spark.arrow_batches.decode turns a "
                               "micro-batch back into a table on the driver"),
    "changelog-mode": ("all", "'all' (an update is update_preimage + update_postimage) or "
                              "'upsert' (its postimage alone, for consumers that only need "
                              "the latest row per key)"),
    "scan.binlog.max-batch-size": (
        "128mb", "a size like '128mb' or a number of bytes: a micro-batch of the stream reads "
                 "at most about this much binlog, so a backlog is read in batches of bounded "
                 "memory; 0: no bound"),
    "scan.table-generations": (
        None, "a JSON object of 'database.table' to an integer: a table whose number moved "
              "on since the query's checkpoint is snapshotted again, inside the running "
              "stream (sparkcdc run sets it when a target was emptied)"),
    "scan.tables.file": (
        None, "a path to a JSON object of 'database.table' to an integer: the tables the "
              "stream captures and their generations, read again before every batch, so "
              "tables join, leave or are taken again inside the running query (sparkcdc "
              "run writes it for the pipeline's stream); overrides scan.table-generations"),
    "scan.schema-changes.in-stream": (
        "false", "true or false (needs arrow-batches): a captured table's schema changes, "
                 "DDL statements and TRUNCATEs travel in the stream as event batches, and "
                 "its rows after a change are decoded with the new schema "
                 "(docs/spark-source.md, Schema changes in the stream)"),
    "scan.binlog.parallel.split-size": (
        "64mb", "a size like '64mb', '512kb' or a number of bytes: a micro-batch's binlog "
                "window larger than this is read by several tasks; 0 turns that off"),
}
_CANONICAL = {k.lower(): k for k in OPTIONS}


def duration_seconds(value: str) -> float | None:
    """Seconds, from Flink-style durations: '30s', '500ms', '2min', '1h', or plain ms; None
    when malformed."""
    m = re.fullmatch(r"\s*(\d+(?:\.\d+)?)\s*(ms|s|sec|min|m|h)?\s*", value)
    if not m:
        return None
    unit = m.group(2) or "ms"
    return float(m.group(1)) * {"ms": 0.001, "s": 1, "sec": 1, "min": 60, "m": 60,
                                "h": 3600}[unit]


def parse_duration(name: str, value: str) -> float:
    """Seconds of the duration option ``name``, or a ConfigError naming it."""
    seconds = duration_seconds(value)
    if seconds is None:
        raise ConfigError(f"option '{name}' has the malformed value {value!r}",
                          fix=f"'{name}' accepts {OPTIONS[name][1]}", key=name)
    return seconds


def _int(name: str, value: str, lo: int | None = None, hi: int | None = None) -> int:
    try:
        n = int(value.strip())
    except ValueError:
        raise ConfigError(f"option '{name}' must be an integer, got {value!r}",
                          fix=f"'{name}' accepts {OPTIONS[name][1]}", key=name) from None
    if (lo is not None and n < lo) or (hi is not None and n > hi):
        raise ConfigError(f"option '{name}' is out of range: {n}",
                          fix=f"'{name}' accepts {OPTIONS[name][1]}", key=name)
    return n


def parse_size(name: str, value: str) -> int:
    """Bytes, from '64mb', '512kb', '1gb' or a plain number of bytes."""
    m = re.fullmatch(r"\s*(\d+)\s*(b|kb|k|mb|m|gb|g)?\s*", value.lower())
    if not m:
        raise ConfigError(f"option '{name}' has the malformed value {value!r}",
                          fix=f"'{name}' accepts {OPTIONS[name][1]}", key=name)
    unit = {"b": 1, "k": 1024, "kb": 1024, "m": 1024**2, "mb": 1024**2, "g": 1024**3,
            "gb": 1024**3}[m.group(2) or "b"]
    return int(m.group(1)) * unit


def _float(name: str, value: str) -> float:
    try:
        f = float(value)
    except ValueError:
        raise ConfigError(f"option '{name}' must be a number, got {value!r}",
                          fix=f"'{name}' accepts {OPTIONS[name][1]}", key=name) from None
    if not f > 0:
        raise ConfigError(f"option '{name}' must be positive, got {value!r}", key=name)
    return f


def _bool(name: str, value: str) -> bool:
    v = value.strip().lower()
    if v not in ("true", "false"):
        raise ConfigError(f"option '{name}' must be true or false, got {value!r}", key=name)
    return v == "true"


def _choice(name: str, value: str, choices: tuple[str, ...]) -> str:
    v = value.strip().lower()
    if v not in choices:
        raise ConfigError(f"option '{name}' must be one of {', '.join(choices)}, got {value!r}",
                          fix=f"'{name}' accepts {OPTIONS[name][1]}", key=name)
    return v


def _regex(name: str, value: str) -> str:
    try:
        re.compile(value)
    except re.error as e:
        raise ConfigError(f"option '{name}' is not a valid regular expression: {value!r} ({e})",
                          fix="escape dots and other special characters, e.g. 'shop\\.orders'",
                          key=name) from None
    return value


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


def _tls_options(get) -> dict[str, Any]:
    """ssl.mode / ssl.ca / ssl.cert / ssl.key, checked together; files must be readable
    (on the driver here, and at the same path on every executor)."""
    mode = get("ssl.mode").strip().lower().replace("-", "_")
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
                              fix=f"'{name}' accepts {OPTIONS[name][1]}; it must be readable "
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
    return dict(ssl_mode=mode, ssl_ca=ca, ssl_cert=cert, ssl_key=key)


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
    binlog_split_bytes: int = 64 * 1024**2  # 0: a micro-batch's window is never split
    binlog_batch_bytes: int = 128 * 1024**2  # 0: a stream batch reads its whole backlog
    preimages: bool = True  # changelog-mode 'all'; 'upsert' leaves update preimages out
    arrow_batches: bool = False  # output rows are whole Arrow record batches (IPC bytes)
    table_generations: Mapping[str, int] = field(default_factory=dict)  # db.table -> number
    table_events: bool = False  # scan.schema-changes.in-stream
    tables_file: str | None = None  # scan.tables.file

    @classmethod
    def parse(cls, options: Mapping[str, Any]) -> "SourceConfig":
        opts: dict[str, str] = {}
        for key, value in options.items():
            canon = _CANONICAL.get(str(key).lower())
            if canon is None:
                if str(key).lower() in ("path",):  # Spark's load(path) — not ours
                    continue
                close = difflib.get_close_matches(str(key).lower(), list(_CANONICAL), n=1,
                                                  cutoff=0.5)
                hint = f"did you mean '{_CANONICAL[close[0]]}'?" if close else \
                    "see docs/spark-source.md for the options"
                raise ConfigError(f"unknown option '{key}'", fix=hint)
            opts[canon] = str(value)

        def get(name: str) -> str | None:
            return opts.get(name, OPTIONS[name][0])

        def required(name: str) -> str:
            v = get(name)
            if v is None or v == "":
                raise ConfigError(f"option '{name}' is required",
                                  fix=f"set .option('{name}', ...) to {OPTIONS[name][1]}",
                                  key=name)
            return v

        mode = get("scan.startup.mode").strip().lower()
        if mode not in STARTUP_MODES:
            close = difflib.get_close_matches(mode, STARTUP_MODES, n=1, cutoff=0.4)
            raise ConfigError(
                f"option 'scan.startup.mode' has the unknown value {mode!r}",
                fix=f"use one of {', '.join(STARTUP_MODES)}"
                    + (f" (did you mean '{close[0]}'?)" if close else ""))

        startup = StartupOffset()
        if mode == "specific-offset":
            file = get("scan.startup.specific-offset.file")
            gtid = get("scan.startup.specific-offset.gtid-set")
            pos = get("scan.startup.specific-offset.pos")
            if not file and not gtid:
                raise ConfigError(
                    "scan.startup.mode 'specific-offset' needs a position",
                    fix="set 'scan.startup.specific-offset.file' and '.pos' "
                        "(or '.gtid-set')")
            if file and pos is None:
                raise ConfigError("option 'scan.startup.specific-offset.pos' is required with "
                                  "'scan.startup.specific-offset.file'",
                                  key="scan.startup.specific-offset.pos")
            startup = StartupOffset(
                file=file, pos=_int("scan.startup.specific-offset.pos", pos, 0) if pos else None,
                gtid_set=gtid,
                skip_events=_int("scan.startup.specific-offset.skip-events",
                                 get("scan.startup.specific-offset.skip-events"), 0),
                skip_rows=_int("scan.startup.specific-offset.skip-rows",
                               get("scan.startup.specific-offset.skip-rows"), 0))
        elif mode == "timestamp":
            startup = StartupOffset(timestamp_ms=_int(
                "scan.startup.timestamp-millis", required("scan.startup.timestamp-millis"), 0))

        tls = _tls_options(get)
        timeout = parse_duration("connect.timeout", get("connect.timeout"))
        if timeout <= 0:
            raise ConfigError("option 'connect.timeout' must be positive", key="connect.timeout")
        conn = ConnectionOptions(
            hostname=required("hostname"),
            port=_int("port", get("port"), 1, 65535),
            username=required("username"),
            password=get("password") or "",
            connect_timeout=timeout,
            max_retries=_int("connect.max-retries", get("connect.max-retries"), 0, 100),
            server_time_zone=get("server-time-zone"),
            **tls,
        )
        lower = _float("chunk-key.even-distribution.factor.lower-bound",
                       get("chunk-key.even-distribution.factor.lower-bound"))
        upper = _float("chunk-key.even-distribution.factor.upper-bound",
                       get("chunk-key.even-distribution.factor.upper-bound"))
        if lower > upper:
            raise ConfigError("the even-distribution factor lower bound exceeds the upper bound",
                              fix="'chunk-key.even-distribution.factor.lower-bound' must be <= "
                                  "'...upper-bound'")
        max_rows = get("maxRowsPerBatch")
        return cls(
            connection=conn,
            database_name=_regex("database-name", required("database-name")),
            table_name=_regex("table-name", required("table-name")),
            table_exclude=(_regex("table-name.exclude", get("table-name.exclude"))
                           if get("table-name.exclude") else None),
            server_ids=parse_server_ids(get("server-id")),
            startup_mode=mode,
            startup=startup,
            chunk_size=_int("scan.incremental.snapshot.chunk.size",
                            get("scan.incremental.snapshot.chunk.size"), 1),
            chunk_key_columns=get("scan.incremental.snapshot.chunk.key-column"),
            fetch_size=_int("scan.snapshot.fetch.size", get("scan.snapshot.fetch.size"), 1),
            factor_upper=upper, factor_lower=lower,
            heartbeat_interval=parse_duration("heartbeat.interval", get("heartbeat.interval")),
            backfill_skip=_bool("scan.incremental.snapshot.backfill.skip",
                                get("scan.incremental.snapshot.backfill.skip")),
            max_rows_per_batch=(_int("maxRowsPerBatch", max_rows, 1) if max_rows else None),
            raw={k: v for k, v in opts.items() if k != "password"},
            binlog_split_bytes=parse_size("scan.binlog.parallel.split-size",
                                          get("scan.binlog.parallel.split-size")),
            binlog_batch_bytes=parse_size("scan.binlog.max-batch-size",
                                          get("scan.binlog.max-batch-size")),
            preimages=_choice("changelog-mode", get("changelog-mode"), ("all", "upsert"))
            == "all",
            arrow_batches=_bool("arrow-batches", get("arrow-batches")),
            table_generations=_generations(get("scan.table-generations")),
            table_events=_table_events(get("scan.schema-changes.in-stream"),
                                       get("arrow-batches")),
            tables_file=get("scan.tables.file") or None,
        )


def _table_events(value: str | None, arrow: str | None) -> bool:
    on = _bool("scan.schema-changes.in-stream", value)
    if on and not _bool("arrow-batches", arrow):
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
