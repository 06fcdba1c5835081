"""Flink CDC's MySQL pipeline keys that are not sparkcdc source options of their own:
each is mapped to the option that does the same here, accepted with the reason it means
nothing on Spark, or refused with what to write instead. None is silently ignored
(docs/pipelines.md lists every one).

Three groups: keys of Flink's MySQL pipeline source (``metadata.list``,
``treat-tinyint1-as-boolean.enabled``, ...), ``jdbc.properties.*`` (Connector/J URL
properties: sparkcdc does not connect through JDBC, so the few that say something about
the connection are mapped and the rest judged one by one) and ``debezium.*`` (Debezium's
MySQL connector properties, which Flink passes to its embedded engine).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from sparkcdc.errors import ConfigError

JDBC_PREFIX = "jdbc.properties."
DEBEZIUM_PREFIX = "debezium."

# Flink's readable metadata of the MySQL source (its MySqlReadableMetadata), usable in
# transforms by these names once listed in metadata.list
METADATA = ("op_ts", "database_name", "table_name", "row_kind")

# source keys of Flink's that need nothing here, and why (docs/pipelines.md, the table)
SOURCE_ACCEPTED = {
    "scan.newly-added-table.enabled": "tables created later are always picked up",
    "scan.binlog.newly-added-table.enabled": "tables created later are always picked up",
    "include-comments.enabled": "table and column comments are not copied to the targets",
    "connection.pool.size": "no pool: each Spark task opens the one connection it reads with",
    "chunk-meta.group.size": "Flink's grouping of chunk metadata sent between its operators; "
                             "sparkcdc's chunk state travels in Spark's offset log",
    "scan.incremental.close-idle-reader.enabled": "a Spark task ends when its chunk is "
                                                  "read; no reader sits idle",
    "scan.incremental.snapshot.unbounded-chunk-first.enabled": "only the order chunks are "
                                                               "read in; the result is the same",
}


@dataclass(frozen=True)
class SourceExtras:
    """What the pipeline does itself with Flink's source keys (not the mysql-cdc source)."""

    metadata: tuple[str, ...] = ()  # metadata.list: names usable in transforms
    tinyint1_as_boolean: bool = False  # treat-tinyint1-as-boolean.enabled
    compact_json: bool = False  # use.legacy.json.format: MySQL JSON text without spaces
    skipped_operations: frozenset[str] = field(default_factory=frozenset)  # c, u, d, t


def _flag(key: str, value: str) -> bool:
    v = value.strip().lower()
    if v not in ("true", "false"):
        raise ConfigError(f"'{key}' must be true or false, got {value!r}", key=key)
    return v == "true"


def metadata_list(value: str, key: str = "metadata.list") -> tuple[str, ...]:
    names = tuple(dict.fromkeys(n.strip() for n in value.split(",") if n.strip()))
    bad = [n for n in names if n not in METADATA]
    if bad:
        raise ConfigError(f"'{key}' names {', '.join(bad)}, which the MySQL source does not "
                          "offer", fix=f"the metadata are: {', '.join(METADATA)}", key=key)
    return names


# -- jdbc.properties.* ----------------------------------------------------------------------

_SSL_MODES = {"disabled": "disabled", "preferred": "preferred", "required": "required",
              "verify_ca": "verify_ca", "verify_identity": "verify_identity"}

# Connector/J properties that change nothing here, and why
JDBC_ACCEPTED = {
    "characterEncoding": "sparkcdc talks utf8mb4 and decodes each column by its own "
                         "character set",
    "useUnicode": "sparkcdc talks utf8mb4 and decodes each column by its own character set",
    "allowPublicKeyRetrieval": "sparkcdc's driver fetches the server's RSA key itself when "
                               "a password needs it without TLS",
    "autoReconnect": "sparkcdc reconnects itself (connect.max-retries, a lost binlog "
                     "connection resumes from its position)",
    "maxReconnects": "sparkcdc reconnects itself (connect.max-retries)",
    "failOverReadOnly": "the source only reads",
    "useCursorFetch": "chunks are read in parts of scan.snapshot.fetch.size rows",
    "rewriteBatchedStatements": "a write setting; the source only reads",
    "cachePrepStmts": "a statement cache setting; sparkcdc sends plain queries",
    "prepStmtCacheSize": "a statement cache setting; sparkcdc sends plain queries",
    "prepStmtCacheSqlLimit": "a statement cache setting; sparkcdc sends plain queries",
    "useServerPrepStmts": "a statement cache setting; sparkcdc sends plain queries",
    "useInformationSchema": "sparkcdc reads table definitions from information_schema",
    "nullCatalogMeansCurrent": "a JDBC metadata setting; sparkcdc does not use JDBC metadata",
}


def _jdbc(name: str, value: str, key: str, out: dict[str, str], extras: dict) -> None:
    """One Connector/J property: into ``out`` (sparkcdc source options) or ``extras``."""
    v = value.strip()
    if name in JDBC_ACCEPTED:
        return
    if name == "sslMode":
        if v.lower() not in _SSL_MODES:
            raise ConfigError(f"'{key}' has the unknown value {value!r}",
                              fix="DISABLED, PREFERRED, REQUIRED, VERIFY_CA or "
                                  "VERIFY_IDENTITY", key=key)
        extras.setdefault("tls", {})[name] = (v.lower(), key)
    elif name in ("useSSL", "requireSSL", "verifyServerCertificate"):
        extras.setdefault("tls", {})[name] = (_flag(key, v), key)
    elif name in ("serverTimezone", "connectionTimeZone"):
        if v.upper() not in ("LOCAL", "SERVER"):
            _set(out, "server-time-zone", v, key)
    elif name == "connectTimeout":
        if not v.isdigit():
            raise ConfigError(f"'{key}' must be milliseconds, got {value!r}", key=key)
        _set(out, "connect.timeout", f"{int(v)}ms", key)
    elif name == "defaultFetchSize":
        if not v.isdigit() or int(v) < 1:
            raise ConfigError(f"'{key}' must be a positive number of rows, got {value!r}",
                              key=key)
        _set(out, "scan.snapshot.fetch.size", v, key)
    elif name == "zeroDateTimeBehavior":
        if v.replace("_", "").lower() != "converttonull":
            raise ConfigError(f"'{key}' is {value!r}, but sparkcdc reads zero dates as null "
                              "(docs/types.md)",
                              fix="remove it, or set CONVERT_TO_NULL", key=key)
    elif name == "tinyInt1isBit":
        extras.setdefault("tinyint1_as_boolean", (_flag(key, v), key))
    elif name in ("trustCertificateKeyStoreUrl", "clientCertificateKeyStoreUrl",
                  "trustCertificateKeyStorePassword", "clientCertificateKeyStorePassword"):
        raise ConfigError(f"'{key}': sparkcdc takes PEM files, not Java key stores",
                          fix="export the certificates as PEM and set ssl.ca (and ssl.cert, "
                              "ssl.key for a client certificate)", key=key)
    else:
        raise ConfigError(f"'{key}': the Connector/J property {name!r} has no equivalent here "
                          "(sparkcdc does not connect through JDBC)",
                          fix="remove it; the properties sparkcdc maps or accepts are listed "
                              "in docs/pipelines.md", key=key)


def _jdbc_ssl_mode(tls: dict) -> tuple[str | None, str]:
    """``ssl.mode`` from Connector/J's TLS properties (``name -> (value, key)``), read as it
    reads them together: ``sslMode`` first; else ``useSSL``/``requireSSL`` (false: no TLS;
    true: TLS, verified with ``verifyServerCertificate``)."""
    if "sslMode" in tls:
        mode, key = tls["sslMode"]
        return _SSL_MODES[mode], key
    use = tls.get("useSSL") or tls.get("requireSSL")
    verify = tls.get("verifyServerCertificate")
    if use is not None and not use[0] and "requireSSL" not in tls:
        return "disabled", use[1]
    if verify is not None and verify[0]:
        return "verify_ca", verify[1]
    if use is not None and use[0] or tls.get("requireSSL", (False,))[0]:
        return "required", (use or tls["requireSSL"])[1]
    return None, ""


# -- debezium.* -----------------------------------------------------------------------------

# Debezium properties that change nothing here, and why
DEBEZIUM_ACCEPTED = {
    "snapshot.locking.mode": "the snapshot takes no locks (lock-free incremental snapshot)",
    "min.row.count.to.stream.results": "chunks are always read in parts of "
                                       "scan.snapshot.fetch.size rows",
    "max.batch.size": "the size of Debezium's queue to Flink; micro-batches are bounded by "
                      "scan.binlog.max-batch-size",
    "max.queue.size": "the size of Debezium's queue to Flink; micro-batches are bounded by "
                      "scan.binlog.max-batch-size",
    "max.queue.size.in.bytes": "the size of Debezium's queue to Flink; micro-batches are "
                               "bounded by scan.binlog.max-batch-size",
    "poll.interval.ms": "Debezium's queue polling; the pipeline's trigger.interval paces "
                        "micro-batches",
    "include.schema.changes": "schema changes travel in the stream (schema.change.behavior)",
    "tombstones.on.delete": "Kafka tombstones; nothing here is a Kafka topic of Debezium's",
    "database.server.name": "names Debezium's Kafka topics; none here",
    "topic.prefix": "names Debezium's Kafka topics; none here",
    "connect.keep.alive": "sparkcdc keeps its binlog connection alive and resumes it",
    "connect.keep.alive.interval.ms": "sparkcdc keeps its binlog connection alive and "
                                      "resumes it",
    "include.query": "the statement text is not carried (Flink's pipeline does not carry it "
                     "either)",
}
DEBEZIUM_ACCEPTED_PREFIXES = {
    "database.history.": "Debezium's schema history store; sparkcdc keeps table schemas in "
                         "its checkpoint and reads them from the binlog's table maps",
    "schema.history.internal.": "Debezium's schema history store; sparkcdc keeps table "
                                "schemas in its checkpoint and reads them from the binlog's "
                                "table maps",
}
# property -> (the value sparkcdc's behavior equals, what to do for the others)
DEBEZIUM_ONLY = {
    "decimal.handling.mode": ("precise", ("DECIMAL arrives as an exact decimal; CAST it in a "
                                          "transform projection for another type")),
    "bigint.unsigned.handling.mode": ("precise", ("BIGINT UNSIGNED arrives as DECIMAL(20,0); "
                                                  "CAST it in a transform projection")),
    "time.precision.mode": ("adaptive_time_microseconds",
                            "times arrive with microseconds (docs/types.md)"),
    "binary.handling.mode": ("bytes", ("binary values arrive as bytes; base64() or hex() them "
                                       "in a transform projection")),
    "event.deserialization.failure.handling.mode": (
        "fail", ("an event that cannot be read stops the pipeline: skipping it would lose "
                 "changes")),
    "inconsistent.schema.handling.mode": (
        "fail", ("a row that does not fit its table's schema stops the pipeline: skipping it "
                 "would lose changes")),
    "provide.transaction.metadata": ("false", "there is no transaction topic"),
    "enable.time.adjuster": ("true", "two-digit years are read as the server stores them"),
}
_SNAPSHOT_MODES = {"initial": "initial", "when_needed": "initial", "initial_only": "snapshot",
                   "never": "earliest-offset", "schema_only": "latest-offset",
                   "no_data": "latest-offset"}
_SKIPPABLE = ("c", "u", "d", "t")


def _debezium(name: str, value: str, key: str, out: dict[str, str], extras: dict) -> None:
    v = value.strip()
    if name in DEBEZIUM_ACCEPTED or name.startswith(tuple(DEBEZIUM_ACCEPTED_PREFIXES)):
        return
    if name in DEBEZIUM_ONLY:
        want, why = DEBEZIUM_ONLY[name]
        if v.lower() != want:
            raise ConfigError(f"'{key}' is {value!r}, which sparkcdc does not do: {why}",
                              fix=f"remove it (or set {want})", key=key)
        return
    if name == "snapshot.mode":
        mode = _SNAPSHOT_MODES.get(v.lower())
        if mode is None:
            raise ConfigError(f"'{key}' is {value!r}, which has no equivalent here",
                              fix="use scan.startup.mode (initial, snapshot, latest-offset, "
                                  "earliest-offset, specific-offset, timestamp)", key=key)
        _set(out, "scan.startup.mode", mode, key)
    elif name == "snapshot.fetch.size":
        _set(out, "scan.snapshot.fetch.size", v, key)
    elif name == "heartbeat.interval.ms":
        _set(out, "heartbeat.interval", f"{v}ms", key)
    elif name == "connect.timeout.ms":
        _set(out, "connect.timeout", f"{v}ms", key)
    elif name == "database.ssl.mode":
        mode = _SSL_MODES.get(v.lower())
        if mode is None:
            raise ConfigError(f"'{key}' has the unknown value {value!r}",
                              fix="disabled, preferred, required, verify_ca or "
                                  "verify_identity", key=key)
        _set(out, "ssl.mode", mode, key)
    elif name == "skipped.operations":
        ops = {o.strip().lower() for o in v.split(",") if o.strip()} - {"none"}
        bad = sorted(ops - set(_SKIPPABLE))
        if bad:
            raise ConfigError(f"'{key}' names {', '.join(bad)}, which is not an operation",
                              fix="c (inserts), u (updates), d (deletes), t (truncates) or "
                                  "none", key=key)
        extras["skipped_operations"] = (frozenset(ops), key)
    elif name.startswith(("database.ssl.keystore", "database.ssl.truststore")):
        raise ConfigError(f"'{key}': sparkcdc takes PEM files, not Java key stores",
                          fix="export the certificates as PEM and set ssl.ca (and ssl.cert, "
                              "ssl.key for a client certificate)", key=key)
    elif name in ("database.include.list", "database.exclude.list", "table.include.list",
                  "table.exclude.list", "database.whitelist", "table.whitelist"):
        raise ConfigError(f"'{key}': the pipeline selects its tables with 'tables'",
                          fix="use tables and tables.exclude", key=key)
    elif name.startswith(("column.include.list", "column.exclude.list", "column.mask.",
                          "column.truncate.", "column.propagate.")):
        raise ConfigError(f"'{key}': columns are shaped by transforms here",
                          fix="leave the column out (or mask it) in a transform projection",
                          key=key)
    else:
        raise ConfigError(f"'{key}': the Debezium property {name!r} has no equivalent here",
                          fix="remove it; the properties sparkcdc maps or accepts are listed "
                              "in docs/pipelines.md", key=key)


def _set(out: dict[str, str], option: str, value: str, key: str) -> None:
    """Map onto a sparkcdc source option; two keys saying different things is an error."""
    have = out.get(option)
    if have is not None and have.strip().lower() != value.strip().lower():
        raise ConfigError(f"'{key}' means {option}: {value}, but {option} is {have} already",
                          fix=f"keep one of the two (set {option} alone)", key=key)
    out[option] = value


def translate(keys: Mapping[str, str], options: dict[str, str]) -> SourceExtras:
    """Flink's keys (``name -> value``) of the source section that are not sparkcdc options:
    mapped onto ``options`` (sparkcdc source options, changed in place), or into the
    returned ``SourceExtras``. Raises ``ConfigError`` (``key``: the YAML key) on a key that
    is refused or says the opposite of another."""
    extras: dict[str, Any] = {}  # ``tls`` holds a dict of its properties, the rest tuples
    metadata: tuple[str, ...] = ()
    tinyint: tuple[bool, str] | None = None
    compact = False
    for key, value in keys.items():
        if key in SOURCE_ACCEPTED:
            continue
        if key == "metadata.list":
            metadata = metadata_list(value, key)
        elif key == "treat-tinyint1-as-boolean.enabled":
            tinyint = (_flag(key, value), key)
        elif key == "use.legacy.json.format":
            compact = _flag(key, value)
        elif key.startswith(JDBC_PREFIX):
            _jdbc(key[len(JDBC_PREFIX):], value, key, options, extras)
        elif key.startswith(DEBEZIUM_PREFIX):
            _debezium(key[len(DEBEZIUM_PREFIX):], value, key, options, extras)
        else:
            raise ConfigError(f"unknown key '{key}'", key=key)
    if "tls" in extras:
        mode, key = _jdbc_ssl_mode(extras["tls"])
        if mode is not None:
            _set(options, "ssl.mode", mode, key)
    jdbc_tiny = extras.get("tinyint1_as_boolean")
    if tinyint and jdbc_tiny and tinyint[0] != jdbc_tiny[0]:
        raise ConfigError(f"'{jdbc_tiny[1]}' contradicts '{tinyint[1]}'",
                          fix="keep treat-tinyint1-as-boolean.enabled alone", key=jdbc_tiny[1])
    skipped = extras.get("skipped_operations")
    return SourceExtras(metadata=metadata,
                        tinyint1_as_boolean=(tinyint or jdbc_tiny or (False,))[0],
                        compact_json=compact,
                        skipped_operations=skipped[0] if skipped else frozenset())


def is_flink_key(name: str) -> bool:
    """Whether a source key is one ``translate`` takes."""
    return (name in SOURCE_ACCEPTED or name.startswith((JDBC_PREFIX, DEBEZIUM_PREFIX))
            or name in ("metadata.list", "treat-tinyint1-as-boolean.enabled",
                        "use.legacy.json.format"))
