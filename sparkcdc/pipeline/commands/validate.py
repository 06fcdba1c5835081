"""``sparkcdc validate``: every problem that would stop a pipeline, each with its fix.

Checks, in order, collecting all problems rather than stopping at the first: the YAML
(parsed before this runs), the connection, the server's CDC settings and the user's
privileges (``sparkcdc.mysql.validation.validate_all``, with the start position's GTID set
when the pipeline starts at one), the matched tables and their keys
(each table discovered on its own, so one keyless table does not hide another), routes
(shards merged into one target must have the same columns), transforms (primary keys),
server ids, and the sink (reachable, options accepted). Settings CDC works with but whose
cost an operator should know (MySQL's ``gtid_mode``, a short binlog retention) are the
report's warnings, listed with their fixes: not problems.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field

from sparkcdc.core.schema import TableId
from sparkcdc.errors import SparkCDCError
from sparkcdc.mysql.port import MySQLSource, SourceConfig, parse_server_ids
from sparkcdc.pipeline.commands.console import make_console
from sparkcdc.pipeline.definition import PipelineDef, targets
from sparkcdc.pipeline.definition.routing import targets_of, transform_of
from sparkcdc.sinks import sink_class


@dataclass(frozen=True)
class Problem:
    what: str
    message: str
    fix: str | None = None


@dataclass
class Report:
    problems: list[Problem]
    tables: dict[str, str]  # source table -> target
    server: str = ""
    warnings: list[Problem] = field(default_factory=list)  # not problems: ok stays True

    @property
    def ok(self) -> bool:
        return not self.problems


def _problem(what: str, e: Exception) -> Problem:
    if isinstance(e, SparkCDCError):
        return Problem(what, e.message, e.fix)
    return Problem(what, str(e).splitlines()[0] if str(e) else type(e).__name__)


def _matches(db: str, table: str, db_re: re.Pattern, tbl_re: re.Pattern,
             ex_re: re.Pattern | None) -> bool:
    """Whether ``source.tables`` (and not ``tables.exclude``) selects ``db.table``, as the
    source's discovery decides it (the table regex may match ``db.table`` or the name)."""
    full = f"{db}.{table}"
    if not db_re.fullmatch(db) or not (tbl_re.fullmatch(full) or tbl_re.fullmatch(table)):
        return False
    return not (ex_re and ex_re.fullmatch(full))


def validate_pipeline(defn: PipelineDef) -> Report:
    report = Report([], {})
    config = SourceConfig.parse(defn.source.options_for())
    conn = config.connection
    source = MySQLSource(config)
    try:
        visible = source.visible_tables()
    except Exception as e:  # noqa: BLE001 - validate reports every problem it finds
        report.problems.append(_problem(f"connection to {conn.hostname}:{conn.port}", e))
        return report
    db_re = re.compile(defn.source.database_regex)
    tbl_re = re.compile(defn.source.table_regex)
    ex_re = re.compile(defn.source.exclude_regex) if defn.source.exclude_regex else None
    matched = sorted({(d, t) for d, t, ty in visible
                      if ty in ("BASE TABLE", "SYSTEM VERSIONED") and _matches(d, t, db_re, tbl_re, ex_re)})
    databases = sorted({d for d, _ in matched})
    gtid_start = config.startup.gtid_set if config.startup_mode == "specific-offset" else None
    warnings: list = []
    try:
        for p in source.validate(databases or None, gtid_start=gtid_start,
                                 warnings=warnings):
            report.problems.append(Problem(f"server ({getattr(p, 'check', 'settings')})",
                                           p.message, p.fix))
        report.warnings.extend(Problem(f"server ({getattr(w, 'check', 'settings')})",
                                       w.message, w.fix) for w in warnings)
    except Exception as e:  # noqa: BLE001 - reported, as every problem validate finds
        report.problems.append(_problem("server", e))
        return report
    if not matched:
        patterns = ", ".join(p.text for p in defn.source.tables)
        report.problems.append(Problem(
            f"source.tables ({defn.where('source.tables')})",
            f"no table visible to {conn.username!r} matches {patterns}",
            "fix the patterns (the first '.' separates database and table; '\\.' is the "
            "regex dot), or grant SELECT on the database to the CDC user"))
    schemas = {}
    for d, t in matched:
        name = f"{d}.{t}"
        try:
            schemas[name] = source.table_schema(TableId(d, t))
        except Exception as e:  # noqa: BLE001 - reported; the other tables are checked
            report.problems.append(_problem(f"table {name}", e))
        report.tables[name] = ", ".join(targets_of(defn, name))
    _check_routes(defn, schemas, report)
    _check_transforms(defn, schemas, report)
    pool = defn.source.options.get("server-id")
    if pool:
        # one stream for the pipeline, and one per table with a transform (its own)
        own = sum(1 for d, t in matched if transform_of(defn, f"{d}.{t}"))
        streams = own + (1 if len(matched) > own else 0)
        need = streams * (defn.pipeline.parallelism + 1)
        have = len(parse_server_ids(pool))
        if have < need:
            report.problems.append(Problem(
                f"source.server-id ({defn.where('source.server-id')})",
                f"{have} server ids for {streams} stream(s) of "
                f"{defn.pipeline.parallelism + 1} ids each (parallelism + 1)",
                f"give a range of at least {need} ids, or remove server-id to use random ids"))
    _check_sink(defn, report)
    return report


def _check_routes(defn: PipelineDef, schemas: dict, report: Report) -> None:
    by_target: dict[str, list[str]] = {}
    for table in report.tables:
        for target in targets_of(defn, table):
            by_target.setdefault(target, []).append(table)
    for target, tables in by_target.items():
        if len(tables) < 2 or any((t := transform_of(defn, x)) and t.shapes_rows
                                  for x in tables):
            continue
        shapes = {t: [(c.name, c.column_type) for c in schemas[t].columns]
                  for t in tables if t in schemas}
        first = next(iter(shapes.values()), None)
        odd = [t for t, s in shapes.items() if s != first]
        if odd:
            report.problems.append(Problem(
                f"route to {target}",
                f"tables merged into {target} differ in columns: {', '.join(odd)} vs "
                f"{tables[0]}", "give the shards the same columns, or project them to the "
                "same columns with a transform"))
        if not sink_class(defn.sink.type).capabilities.shares_targets:
            report.problems.append(Problem(
                f"route to {target}", f"the {defn.sink.type} sink cannot merge several "
                "tables into one target", "route them to separate targets, or use another "
                "sink"))


def _check_transforms(defn: PipelineDef, schemas: dict, report: Report) -> None:
    for table, schema in schemas.items():
        t = transform_of(defn, table)
        if not schema.primary_key and not (t and t.primary_keys):
            report.problems.append(Problem(
                f"table {table}", f"{table} has no primary key, so its target has no key to "
                "apply changes by", f"add a transform for {table} with primary-keys: the "
                "columns that identify a row (or add a primary key to the table)"))
        if t is None:
            continue
        if t.primary_keys and not t.projection:
            missing = [k for k in t.primary_keys if k not in schema.column_names]
            if missing:
                report.problems.append(Problem(
                    f"transform of {table} ({defn.path}:{t.line})",
                    f"primary-keys {missing} are not columns of {table}",
                    f"its columns: {', '.join(schema.column_names)}"))


def _check_sink(defn: PipelineDef, report: Report) -> None:
    target = next((targets_of(defn, t)[0] for t in report.tables), "sparkcdc.validate")
    try:
        sink = targets.create_sink(defn.sink.type, defn.sink.options, target,
                                   f"{defn.pipeline.name}.validate")
        try:
            sink.last_batch_id()  # opens the connection or reads the table's log
        finally:
            sink.close()
    except Exception as e:  # noqa: BLE001 - any sink driver's error is reported
        report.problems.append(_problem(f"sink ({defn.sink.type}, {defn.where('sink')})", e))


def render(report: Report, console=None) -> None:
    from rich.markup import escape  # a message's own brackets ("[mysqld]") are text

    console = console or make_console()
    for table, target in sorted(report.tables.items()):
        console.print(f"  {escape(table)} -> {escape(target)}", highlight=False)
    for label, items in (("[bold yellow]WARNING[/]", report.warnings),
                         ("[bold red]PROBLEM[/]", report.problems)):
        for p in items:
            console.print(f"{label} {escape(p.what)}: {escape(p.message)}", highlight=False)
            if p.fix:
                console.print(f"    fix: {escape(p.fix)}", highlight=False)
    if report.ok:
        console.print(f"[bold green]OK[/]: {len(report.tables)} table(s) ready to capture"
                      + (f", {len(report.warnings)} warning(s)" if report.warnings else ""))
    else:
        console.print(f"{len(report.problems)} problem(s)")
