"""A pipeline YAML, parsed into plain definitions before anything runs (docs/pipelines.md).

The file follows Flink CDC 3.x: ``source``, ``sink``, ``route``, ``transform``, ``pipeline``.
The YAML is composed into nodes first, so every value keeps the line it came from and every
error names the file, the line and the key (``pipeline.yaml:7: 'source.port': ...``).
``${VAR}`` (or ``${VAR:-default}``) in a value is replaced from the environment.
"""

from __future__ import annotations

import difflib
import os
import re
from collections.abc import Mapping
from dataclasses import replace
from pathlib import Path
from typing import Any

import yaml

from sparkcdc.errors import ConfigError
from sparkcdc.mysql.port import OPTIONS as SOURCE_OPTIONS
from sparkcdc.mysql.port import SourceConfig
from sparkcdc.options import duration_seconds
from sparkcdc.pipeline.definition import flink_keys
from sparkcdc.pipeline.definition.model import (
    BEHAVIORS,
    CONVERTERS,
    PIPELINE_ACCEPTED,
    PIPELINE_KEYS,
    PIPELINE_REFUSED,
    ROUTE_KEYS,
    SCHEMA_CHANGE_ENABLED,
    SECTIONS,
    SOURCE_DERIVED,
    SOURCE_OWN,
    TRANSFORM_KEYS,
    PipelineDef,
    PipelineSettings,
    RouteDef,
    SinkDef,
    SourceDef,
    TablePattern,
    TransformDef,
)
from sparkcdc.pipeline.definition.targets import check_sink_options, check_table_creation
from sparkcdc.sinks import SinkType, sink_class, sink_types

_ENV = re.compile(r"\$\{([A-Za-z_][A-Za-z0-9_]*)(?::-([^}]*))?\}")


class _Reader:
    """Walks composed YAML nodes, keeping each key's line for error messages."""

    def __init__(self, path: str, env: Mapping[str, str]):
        self.path = path
        self.env = env
        self.lines: dict[str, int] = {}

    def error(self, key: str, line: int, message: str, fix: str | None = None) -> ConfigError:
        return ConfigError(f"{self.path}:{line}: '{key}': {message}", fix=fix)

    def mapping(self, node: yaml.Node, key: str) -> dict[str, tuple[yaml.Node, int]]:
        line = node.start_mark.line + 1
        if not isinstance(node, yaml.MappingNode):
            raise self.error(key or "(top level)", line, "expected a mapping of keys to values")
        out: dict[str, tuple[yaml.Node, int]] = {}
        for k, v in node.value:
            if not isinstance(k, yaml.ScalarNode):
                raise self.error(key, k.start_mark.line + 1, "keys must be plain text")
            name = k.value
            kline = k.start_mark.line + 1
            full = f"{key}.{name}" if key else name
            if name in out:
                raise self.error(full, kline, "appears twice", fix="keep one of the two")
            out[name] = (v, kline)
            self.lines[full] = kline
        return out

    def scalar(self, node: yaml.Node, key: str, line: int) -> str:
        if isinstance(node, yaml.ScalarNode):
            if node.tag.endswith(":null"):
                return ""
            return self.substitute(node.value, key, node.start_mark.line + 1)
        if isinstance(node, yaml.SequenceNode) and all(
                isinstance(n, yaml.ScalarNode) for n in node.value):
            return ",".join(self.substitute(n.value, key, n.start_mark.line + 1)
                            for n in node.value)
        raise self.error(key, line, "expected a single value, not a mapping")

    def substitute(self, value: str, key: str, line: int) -> str:
        def one(m: re.Match) -> str:
            name, default = m.group(1), m.group(2)
            if name in self.env:
                return self.env[name]
            if default is not None:
                return default
            raise self.error(key, line, f"the environment variable {name} is not set",
                             fix=f"export {name}=... before running, or write "
                                 f"${{{name}:-default}}")
        return _ENV.sub(one, value)

    def unknown(self, key: str, line: int, name: str, known) -> ConfigError:
        close = difflib.get_close_matches(name, list(known), n=1, cutoff=0.5)
        hint = f"did you mean '{close[0]}'? " if close else ""
        return self.error(key, line, "unknown key",
                          fix=f"{hint}accepted here: {', '.join(sorted(known))}")


def split_patterns(text: str) -> list[str]:
    """Split a comma-separated pattern list, ignoring commas inside (), [] and {}."""
    out, depth, cur, esc = [], 0, [], False
    for ch in text:
        if esc:
            cur.append(ch)
            esc = False
            continue
        if ch == "\\":
            cur.append(ch)
            esc = True
            continue
        if ch in "([{":
            depth += 1
        elif ch in ")]}":
            depth -= 1
        if ch == "," and depth == 0:
            out.append("".join(cur).strip())
            cur = []
        else:
            cur.append(ch)
    out.append("".join(cur).strip())
    return [p for p in out if p]


def parse_table_pattern(text: str) -> TablePattern:
    """``db.table`` in Flink's syntax (see ``TablePattern``); raises ValueError."""
    parts: list[list[str]] = [[]]
    i = 0
    while i < len(text):
        ch = text[i]
        if ch == "\\" and i + 1 < len(text):
            nxt = text[i + 1]
            parts[-1].append("." if nxt == "." else ch + nxt)
            i += 2
            continue
        if ch == "." and len(parts) == 1:
            parts.append([])
        else:
            parts[-1].append(ch)
        i += 1
    if len(parts) != 2 or not parts[0] or not parts[1]:
        raise ValueError(f"{text!r} is not 'database.table'")
    db, table = "".join(parts[0]), "".join(parts[1])
    for part in (db, table):
        re.compile(part)
    return TablePattern(text, db, table)


def _patterns(r: _Reader, node: yaml.Node, key: str, line: int) -> tuple[TablePattern, ...]:
    text = r.scalar(node, key, line)
    if not text.strip():
        raise r.error(key, line, "is empty", fix="e.g. 'shop.orders' or 'shop.\\.*'")
    out = []
    for p in split_patterns(text):
        try:
            out.append(parse_table_pattern(p))
        except (ValueError, re.error) as e:
            raise r.error(key, line, f"bad table pattern {p!r}: {e}",
                          fix="write 'database.table' regexes; the first '.' separates them "
                              "and '\\.' is the regex dot, e.g. 'shop.orders_\\.*'") from None
    return tuple(out)


def _kafka_source(r: _Reader, m: dict, line: int) -> SourceDef:
    """``type: kafka``: topics of change events (pipeline/kafka/reader.py), its options
    checked now, each error at its line."""
    from sparkcdc.pipeline.definition.kafka_source import KafkaSourceConfig

    opts = {name: r.scalar(v, f"source.{name}", kline) for name, (v, kline) in m.items()
            if name not in ("type", "name")}
    try:
        KafkaSourceConfig.parse(opts)
    except ConfigError as e:
        name = e.key or next(iter(opts), "type")
        raise r.error(f"source.{name}", r.lines.get(f"source.{name}", line), e.message,
                      fix=e.fix) from None
    tables = tuple(parse_table_pattern(p) for p in split_patterns(opts["tables"])) \
        if opts.get("tables") else ()
    return SourceDef("kafka", opts, tables, (), line)


def _source(r: _Reader, node: yaml.Node, line: int) -> SourceDef:
    m = r.mapping(node, "source")
    if "type" in m and r.scalar(m["type"][0], "source.type", m["type"][1]).strip().lower() \
            == "kafka":
        return _kafka_source(r, m, line)
    known = (set(SOURCE_OPTIONS) | set(SOURCE_OWN) | set(flink_keys.SOURCE_ACCEPTED)
             | {SCHEMA_CHANGE_ENABLED, "metadata.list", "treat-tinyint1-as-boolean.enabled",
                "use.legacy.json.format"})
    opts: dict[str, str] = {}
    flink: dict[str, str] = {}
    tables: tuple[TablePattern, ...] = ()
    exclude: tuple[TablePattern, ...] = ()
    stype = "mysql"
    schema_changes: bool | None = None
    for name, (v, kline) in m.items():
        key = f"source.{name}"
        if name in SOURCE_DERIVED:
            raise r.error(key, kline, "is set by the pipeline from 'tables'",
                          fix="select tables with 'tables' (and 'tables.exclude')")
        if name not in known and not flink_keys.is_flink_key(name):
            raise r.unknown(key, kline, name, known)
        if name == "type":
            stype = r.scalar(v, key, kline).strip().lower()
            if stype not in ("mysql", "mariadb"):
                raise r.error(key, kline, f"unsupported source type {stype!r}",
                              fix="use type: mysql (MariaDB is served by the same source) "
                                  "or type: kafka (topics of change events)")
        elif name == "tables":
            tables = _patterns(r, v, key, kline)
        elif name == "tables.exclude":
            exclude = _patterns(r, v, key, kline)
        elif name == "name":
            continue
        elif flink_keys.is_flink_key(name):
            flink[name] = r.scalar(v, key, kline)
        elif name == SCHEMA_CHANGE_ENABLED:
            flag = r.scalar(v, key, kline).strip().lower()
            if flag not in ("true", "false"):
                raise r.error(key, kline, f"{flag!r} is not true or false",
                              fix="true (the default) or false (schema changes are not applied: "
                                  "schema.change.behavior ignore)")
            schema_changes = flag == "true"
        else:
            opts[name] = r.scalar(v, key, kline)
    if not tables:
        raise r.error("source.tables", line, "is required",
                      fix="e.g. tables: shop.\\.* (every table of database shop)")
    for req in ("hostname", "username"):
        if req not in opts:
            raise r.error(f"source.{req}", line, "is required",
                          fix=f"'{req}' accepts {SOURCE_OPTIONS[req].accepts}")
    try:
        extras = flink_keys.translate(flink, opts)
    except ConfigError as e:
        name = e.key or next(iter(flink), "type")
        raise r.error(f"source.{name}", r.lines.get(f"source.{name}", line), e.message,
                      fix=e.fix) from None
    _check_source_options(r, opts)
    return SourceDef(stype, opts, tables, exclude, line, schema_changes, extras)


def _check_source_options(r: _Reader, opts: dict[str, str]) -> None:
    """Parse the options once now, so a malformed value fails at its own line."""

    trial = {**opts, "database-name": "x", "table-name": "x"}
    try:
        SourceConfig.parse(trial)
    except ConfigError as e:
        name = e.key if e.key in opts else next(iter(opts))
        raise r.error(f"source.{name}", r.lines.get(f"source.{name}", 1), e.message,
                      fix=e.fix) from None


def _resolve(base: Path, value: str) -> str:
    if "://" in value or os.path.isabs(value):
        return value
    return str((base / value).resolve())


def _sink(r: _Reader, node: yaml.Node, line: int, base: Path) -> SinkDef:
    m = r.mapping(node, "sink")
    if "type" not in m:
        raise r.error("sink.type", line, "is required", fix=f"one of {', '.join(sink_types())}")
    tnode, tline = m["type"]
    try:
        stype = SinkType.parse(r.scalar(tnode, "sink.type", tline).strip().lower())
    except ConfigError as e:
        raise r.error("sink.type", tline, e.message, fix=e.fix) from None
    paths = sink_class(stype).path_options  # a local path, relative to the YAML's folder
    opts = {}
    for name, (v, kline) in m.items():
        if name in ("type", "name"):
            continue
        opts[name] = r.scalar(v, f"sink.{name}", kline)
        if name in paths:
            opts[name] = _resolve(base, opts[name])

    try:
        check_sink_options(stype, opts)
    except ConfigError as e:
        name = e.key if e.key in opts else "type"
        raise r.error(f"sink.{name}", r.lines.get(f"sink.{name}", line), e.message,
                      fix=e.fix) from None
    return SinkDef(stype, opts, line)


def _list(r: _Reader, node: yaml.Node, key: str) -> list[tuple[yaml.Node, int, str]]:
    if isinstance(node, yaml.MappingNode):  # a single entry is fine too
        items = [node]
    elif isinstance(node, yaml.SequenceNode):
        items = node.value
    elif isinstance(node, yaml.ScalarNode) and node.tag.endswith(":null"):
        return []
    else:
        raise r.error(key, node.start_mark.line + 1, "expected a list of entries")
    return [(n, n.start_mark.line + 1, f"{key}[{i}]") for i, n in enumerate(items)]


def _routes(r: _Reader, node: yaml.Node) -> tuple[RouteDef, ...]:
    out = []
    for n, line, key in _list(r, node, "route"):
        m = r.mapping(n, key)
        for name, (_v, kline) in m.items():
            if name not in ROUTE_KEYS:
                raise r.unknown(f"{key}.{name}", kline, name, ROUTE_KEYS)
        for req in ("source-table", "sink-table"):
            if req not in m:
                raise r.error(f"{key}.{req}", line, "is required",
                              fix="a route needs source-table (a pattern) and sink-table")
        src = _patterns(r, m["source-table"][0], f"{key}.source-table", m["source-table"][1])
        if len(src) != 1:
            raise r.error(f"{key}.source-table", m["source-table"][1],
                          "takes one pattern", fix="write one route per pattern")
        sink_table = r.scalar(m["sink-table"][0], f"{key}.sink-table", m["sink-table"][1])
        symbol = (r.scalar(m["replace-symbol"][0], f"{key}.replace-symbol",
                           m["replace-symbol"][1]) if "replace-symbol" in m else None)
        desc = (r.scalar(m["description"][0], f"{key}.description", m["description"][1])
                if "description" in m else None)
        groups = src[0].compiled().groups
        for ref in re.findall(r"\$(\d+)", sink_table):
            if int(ref) > groups or int(ref) == 0:
                raise r.error(f"{key}.sink-table", m["sink-table"][1],
                              f"refers to ${ref} but source-table has {groups} group(s)",
                              fix="capture with parentheses in source-table, e.g. "
                                  "'shop.orders_(\\d+)' and use $1")
        if "." not in sink_table.replace(symbol or "\0", "x"):
            raise r.error(f"{key}.sink-table", m["sink-table"][1],
                          f"{sink_table!r} is not 'database.table'",
                          fix="name the target as database.table")
        out.append(RouteDef(src[0], sink_table, symbol, desc, line))
    return tuple(out)


def _names(text: str) -> tuple[str, ...]:
    return tuple(p.strip() for p in text.split(",") if p.strip())


def _table_options(text: str, delimiter: str) -> dict[str, str]:
    """Flink's ``table-options``: ``key=value`` pairs split by ``delimiter``."""
    out = {}
    for part in text.split(delimiter):
        if not part.strip():
            continue
        k, eq, v = part.partition("=")
        if not eq or not k.strip():
            raise ValueError(f"{part.strip()!r} is not key=value")
        out[k.strip()] = v.strip()
    return out


def _auto_cdc(r: _Reader, m, key: str, get) -> dict[str, Any]:
    """The AUTO CDC keys of a transform (Databricks' create_auto_cdc_flow arguments)."""
    out: dict[str, Any] = {}
    scd = get("stored-as-scd-type")
    if scd is not None:
        if scd not in ("1", "2"):
            raise r.error(f"{key}.stored-as-scd-type", m["stored-as-scd-type"][1],
                          f"{scd!r} is not 1 or 2",
                          fix="1 keeps the latest row per key, 2 keeps every version")
        out["scd_type"] = int(scd)
    for name, attr in (("track-history-column-list", "track_history"),
                       ("track-history-except-column-list", "track_history_except")):
        text = get(name)
        if text is not None:
            if out.get("scd_type", 1) != 2:
                raise r.error(f"{key}.{name}", m[name][1], "tracks history, which only SCD "
                              "type 2 keeps", fix="add stored-as-scd-type: 2")
            out[attr] = _names(text)
    if "track_history" in out and "track_history_except" in out:
        raise r.error(f"{key}.track-history-except-column-list",
                      m["track-history-except-column-list"][1],
                      "and track-history-column-list both given",
                      fix="name the tracked columns, or the untracked ones, not both")
    for name, attr in (("apply-as-deletes", "apply_as_deletes"),
                       ("apply-as-truncates", "apply_as_truncates")):
        if get(name) is not None:
            out[attr] = get(name)
    if out.get("apply_as_truncates") and out.get("scd_type", 1) == 2:
        raise r.error(f"{key}.apply-as-truncates", m["apply-as-truncates"][1],
                      "empties the target, which SCD type 2 never does (as in Databricks' "
                      "AUTO CDC)", fix="use it with stored-as-scd-type: 1")
    return out


def _transforms(r: _Reader, node: yaml.Node, sink_type: str) -> tuple[TransformDef, ...]:
    out = []
    for n, line, key in _list(r, node, "transform"):
        m = r.mapping(n, key)
        for name, (_v, kline) in m.items():
            if name not in TRANSFORM_KEYS:
                raise r.unknown(f"{key}.{name}", kline, name, TRANSFORM_KEYS)
        if "source-table" not in m:
            raise r.error(f"{key}.source-table", line, "is required")
        src = _patterns(r, m["source-table"][0], f"{key}.source-table", m["source-table"][1])
        if len(src) != 1:
            raise r.error(f"{key}.source-table", m["source-table"][1], "takes one pattern")

        # called only in this iteration; the defaults bind this entry's mapping and key
        def get(name: str, m: dict[str, tuple[yaml.Node, int]] = m,
                key: str = key) -> str | None:
            if name not in m:
                return None
            v = r.scalar(m[name][0], f"{key}.{name}", m[name][1]).strip()
            return v or None

        projection = get("projection")
        if projection is not None:  # Flink's YAML escapes a leading * as \*
            projection = projection.replace("\\*", "*")
        converter = get("converter-after-transform")
        if converter is not None and converter.upper() not in CONVERTERS:
            raise r.error(f"{key}.converter-after-transform", m["converter-after-transform"][1],
                          f"unknown converter {converter!r}", fix="SOFT_DELETE (Flink's one)")
        table_options: dict[str, str] = {}
        if get("table-options") is not None:
            try:
                table_options = _table_options(get("table-options") or "",
                                               get("table-options.delimiter") or ",")
            except ValueError as e:
                raise r.error(f"{key}.table-options", m["table-options"][1], str(e),
                              fix="write key=value pairs separated by ',' (or by "
                                  "table-options.delimiter)") from None
        elif get("table-options.delimiter") is not None:
            raise r.error(f"{key}.table-options.delimiter", m["table-options.delimiter"][1],
                          "is given without table-options", fix="add table-options")
        partition_keys = _names(get("partition-keys") or "")
        for name, wanted in (("partition-keys", partition_keys),
                             ("table-options", table_options)):
            try:
                check_table_creation(sink_type, name, wanted)
            except ConfigError as e:
                raise r.error(f"{key}.{name}", m[name][1], e.message, fix=e.fix) from None
        auto = _auto_cdc(r, m, key, get)
        t = TransformDef(src[0], projection, get("filter"), _names(get("primary-keys") or ""),
                         partition_keys, get("description"), line, table_options,
                         converter.upper() if converter else None, **auto)
        if not (t.shapes_rows or t.primary_keys or t.partition_keys or t.table_options
                or auto):
            raise r.error(key, line, "says nothing to do",
                          fix="add projection: '*, expr AS name', filter: 'expr', "
                              "primary-keys, partition-keys, table-options, "
                              "converter-after-transform or an AUTO CDC key")
        out.append(t)
    return tuple(out)


def _pipeline(r: _Reader, node: yaml.Node | None, base: Path) -> PipelineSettings:
    if node is None:
        return PipelineSettings(checkpoint_location=_resolve(base, "checkpoints"))
    m = r.mapping(node, "pipeline")
    vals: dict[str, Any] = {}
    for name, (v, kline) in m.items():
        key = f"pipeline.{name}"
        if name in PIPELINE_ACCEPTED:
            continue
        if name in PIPELINE_REFUSED:
            why, fix = PIPELINE_REFUSED[name]
            raise r.error(key, kline, f"cannot run here: {why}", fix=fix)
        if name not in PIPELINE_KEYS:
            raise r.unknown(key, kline, name, {*PIPELINE_KEYS, *PIPELINE_ACCEPTED})
        if name == "spark":
            sm = r.mapping(v, key)
            vals["spark"] = {k: r.scalar(sv, f"{key}.{k}", sl) for k, (sv, sl) in sm.items()}
            continue
        text = r.scalar(v, key, kline).strip()
        bad = r.error(key, kline, f"malformed value {text!r}", fix=PIPELINE_KEYS[name])
        if name == "name":  # free text, as Flink's job names are ("Sync MySQL to Doris")
            if not text or re.search(r"[\x00-\x1f/\\]", text):
                raise r.error(key, kline, f"{text!r} is not a usable name",
                              fix="any text without '/', '\\' or control characters")
            vals["name"] = text
        elif name in ("parallelism", "max-rows-per-batch"):
            if not text.isdigit() or int(text) < 1:
                raise bad
            vals[name.replace("-", "_")] = int(text)
        elif name == "checkpoint.location":
            vals["checkpoint_location"] = _resolve(base, text)
        elif name in ("trigger.interval", "discovery.interval"):
            seconds = duration_seconds(text)
            if seconds is None:
                raise bad
            if seconds <= 0 and name == "discovery.interval":
                raise bad
            vals[name.replace(".", "_")] = seconds
        elif name == "schema.change.behavior":
            b = text.lower()
            if b not in BEHAVIORS:
                close = difflib.get_close_matches(b, BEHAVIORS, n=1, cutoff=0.4)
                raise r.error(key, kline, f"unknown behavior {text!r}",
                              fix=(f"did you mean '{close[0]}'? " if close else "")
                              + "one of " + ", ".join(BEHAVIORS))
            vals["schema_change_behavior"] = b
        elif name == "binlog.purged.behavior":
            if text.lower() not in ("fail", "resnapshot"):
                raise r.error(key, kline, f"unknown behavior {text!r}",
                              fix="'fail' (stop with an error) or 'resnapshot' (take the "
                                  "affected tables again)")
            vals["binlog_purged_behavior"] = text.lower()
        elif name == "local-time-zone":
            vals["local_time_zone"] = text
        elif name == "write.on":
            if text.lower() not in ("auto", "driver", "executors"):
                raise r.error(key, kline, f"unknown value {text!r}",
                              fix="'auto' (the executors on a cluster, else the driver), "
                                  "'driver' or 'executors'")
            vals["write_on"] = text.lower()
        elif name == "route-mode":
            if text.upper() not in ("ALL_MATCH", "FIRST_MATCH"):
                raise r.error(key, kline, f"unknown route mode {text!r}",
                              fix="ALL_MATCH (the default: every matching route) or "
                                  "FIRST_MATCH")
            vals["route_mode"] = text.lower()
        elif name == "execution.runtime-mode":
            if text.upper() not in ("STREAMING", "BATCH"):
                raise r.error(key, kline, f"unknown runtime mode {text!r}",
                              fix="STREAMING (the default) or BATCH")
            vals["batch"] = text.upper() == "BATCH"
        elif name == "class-cache":
            if text.lower() not in ("true", "false"):
                raise bad
            vals["class_cache"] = text.lower() == "true"
        elif name == "warm-workers":
            if text.lower() not in ("true", "false"):
                raise bad
            vals["warm_workers"] = text.lower() == "true"
        elif name == "write.snapshot-from-tasks":
            if text.lower() not in ("true", "false"):
                raise bad
            vals["snapshot_from_tasks"] = text.lower() == "true"
        elif name == "write.changes-from-tasks":
            if text.lower() not in ("true", "false"):
                raise bad
            vals["changes_from_tasks"] = text.lower() == "true"
    vals.setdefault("checkpoint_location", _resolve(base, "checkpoints"))
    return PipelineSettings(**vals)


def parse_pipeline(text: str, path: str = "<string>", env: Mapping[str, str] | None = None,
                   base_dir: str | os.PathLike | None = None) -> PipelineDef:
    """Parse YAML text into a ``PipelineDef``; raises ``ConfigError`` naming key and line."""
    r = _Reader(path, os.environ if env is None else env)
    base = Path(base_dir) if base_dir else Path.cwd()
    try:
        root = yaml.compose(text)
    except yaml.YAMLError as e:
        mark = getattr(e, "problem_mark", None)
        line = mark.line + 1 if mark else 1
        raise ConfigError(f"{path}:{line}: not valid YAML: {getattr(e, 'problem', e)}",
                          fix="check the indentation and quoting around that line") from None
    if root is None:
        raise ConfigError(f"{path}:1: the pipeline file is empty",
                          fix="it needs at least 'source' and 'sink' (see docs/pipelines.md)")
    top = r.mapping(root, "")
    for name, (_v, line) in top.items():
        if name not in SECTIONS:
            raise r.unknown(name, line, name, SECTIONS)
    for req in ("source", "sink"):
        if req not in top:
            raise r.error(req, 1, "is required", fix="see docs/pipelines.md for an example")
    source = _source(r, *top["source"])
    sink = _sink(r, *top["sink"], base)
    routes = _routes(r, top["route"][0]) if "route" in top else ()
    transforms = (_transforms(r, top["transform"][0], sink.type) if "transform" in top
                  else ())
    settings = _pipeline(r, top["pipeline"][0] if "pipeline" in top else None, base)
    if source.schema_changes is False:
        if r.lines.get("pipeline.schema.change.behavior") and \
                settings.schema_change_behavior != "ignore":
            raise r.error("source.schema-change.enabled", r.lines.get(
                "source.schema-change.enabled", source.line),
                f"is false, and pipeline.schema.change.behavior is "
                f"{settings.schema_change_behavior}", fix="keep one of the two: "
                "schema-change.enabled: false is schema.change.behavior: ignore")
        settings = replace(settings, schema_change_behavior="ignore")
    if (settings.max_rows_per_batch and source.type != "kafka"
            and "maxRowsPerBatch" not in source.options):
        source.options["maxRowsPerBatch"] = str(settings.max_rows_per_batch)
    return PipelineDef(source, sink, routes, transforms, settings, path, dict(r.lines))


def load_pipeline(path: str | os.PathLike, env: Mapping[str, str] | None = None) -> PipelineDef:
    p = Path(path)
    try:
        text = p.read_text()
    except OSError as e:
        raise ConfigError(f"cannot read the pipeline file {str(p)!r}: {e.strerror}",
                          fix="pass the path of a pipeline YAML file") from None
    return parse_pipeline(text, str(p), env, p.resolve().parent)
