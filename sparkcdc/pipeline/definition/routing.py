"""Routes and transforms: which target a source table goes to, and how its rows are shaped.

Routes follow Flink CDC 3.x: every route whose ``source-table`` matches ``db.table`` names
a target of it (``route-mode: ALL_MATCH``, Flink's default: a table matched by two routes
goes to both targets), or only the first one (``FIRST_MATCH``); ``$1``.. in ``sink-table``
are the pattern's groups, and ``replace-symbol`` (e.g. ``<>``) stands for the source table's
name. Several source tables routed to one target (shards) are merged into it. A table no
route matches keeps its own name.

Transforms are Spark SQL: ``projection`` is a select list (``*`` is the table's columns),
``filter`` a boolean expression. Flink's metadata names ``__schema_name__`` /
``__database_name__``, ``__table_name__``, ``__namespace_name__`` and
``__data_event_type__`` are available in both, and so are the source's metadata listed in
``metadata.list`` (``op_ts``, ``database_name``, ``table_name``, ``row_kind``).
``converter-after-transform: SOFT_DELETE`` makes a deleted row an update of its key (its
projection sees ``__data_event_type__`` ``-D``). A transform's AUTO CDC keys say how the
changes become target rows (``Shaper.spec``).
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field

from sparkcdc.apply import DEFAULT_DELETES, ApplySpec, mark_changes, needs_marks
from sparkcdc.core.records import META_COLUMNS
from sparkcdc.errors import ConfigError
from sparkcdc.pipeline.definition import PipelineDef, RouteDef, TransformDef
from sparkcdc.pipeline.definition.flink_keys import SourceExtras

META = META_COLUMNS
_FLINK_META = {
    "__data_event_type__": ("CASE _change_type WHEN 'insert' THEN '+I' WHEN 'delete' THEN '-D' "
                            "WHEN 'update_preimage' THEN '-U' ELSE '+U' END"),
    "__schema_name__": "_database",
    "__database_name__": "_database",
    "__table_name__": "_table",
    "__namespace_name__": "CAST(NULL AS STRING)",
}
# metadata.list (Flink's MySqlReadableMetadata): op_ts is the commit time in milliseconds
# since the epoch, 0 for snapshot rows (as Flink gives it; the binlog records whole seconds)
_SOURCE_META = {
    "op_ts": "COALESCE(CAST(unix_millis(_op_ts) AS BIGINT), CAST(0 AS BIGINT))",
    "database_name": "_database",
    "table_name": "_table",
    "row_kind": _FLINK_META["__data_event_type__"],
}
_SKIP = {"c": "_change_type = 'insert' AND _op_ts IS NOT NULL",
         "u": "_change_type IN ('update_preimage', 'update_postimage')",
         "d": "_change_type = 'delete'"}


def targets_of(defn: PipelineDef, table: str) -> tuple[str, ...]:
    """The targets ``db.table`` of source table ``db.table``, in the routes' order: one
    per matching route (``route-mode``: all of them, or the first), or the table's own
    name when no route matches."""
    routes = [r for r in defn.routes if r.source_table.compiled().fullmatch(table)]
    if defn.pipeline.route_mode == "first_match":
        routes = routes[:1]
    if not routes:
        return (table,)
    return tuple(dict.fromkeys(_sink_name(r, table) for r in routes))


def target_of(defn: PipelineDef, table: str) -> str:
    """The first target of source table ``db.table`` (its only one without fan-out)."""
    return targets_of(defn, table)[0]


def _sink_name(route: RouteDef, table: str) -> str:
    m = route.source_table.compiled().fullmatch(table)
    assert m is not None, f"route {route.source_table} does not match {table}"
    name = route.sink_table
    if route.replace_symbol:
        name = name.replace(route.replace_symbol, table.partition(".")[2])
    return re.sub(r"\$(\d+)", lambda g: m.group(int(g.group(1))) or "", name)


def transform_of(defn: PipelineDef, table: str) -> TransformDef | None:
    return next((t for t in defn.transforms if t.source_table.compiled().fullmatch(table)),
                None)


def _top_level_split(text: str) -> list[str]:
    out: list[str] = []
    cur: list[str] = []
    depth, quote = 0, None
    for ch in text:
        if quote:
            cur.append(ch)
            if ch == quote:
                quote = None
            continue
        if ch in "'\"`":
            quote = ch
        elif ch == "(":
            depth += 1
        elif ch == ")":
            depth -= 1
        if ch == "," and depth == 0:
            out.append("".join(cur).strip())
            cur = []
        else:
            cur.append(ch)
    out.append("".join(cur).strip())
    return [p for p in out if p]


def _meta(expr: str) -> str:
    for name, repl in _FLINK_META.items():
        expr = re.sub(rf"\b{name}\b", f"({repl})" if " " in repl else repl, expr)
    return expr


def _q(name: str) -> str:
    return "`" + name.replace("`", "``") + "`"


@dataclass(frozen=True)
class Shaper:
    """Applies one table's transform to its change rows (a Spark DataFrame), with what
    Flink's source keys ask of the rows before it (``debezium.skipped.operations``,
    ``metadata.list``), and evaluates its AUTO CDC rules into markers (``mark_changes``)."""

    transform: TransformDef | None
    where: str = ""
    extras: SourceExtras = field(default_factory=SourceExtras)

    @property
    def active(self) -> bool:
        """Whether ``apply`` changes the rows."""
        return (self.transform is not None
                or bool(self.extras.skipped_operations & set(_SKIP)))

    def spec(self, keys: tuple[str, ...]) -> ApplySpec:
        """How the table's changes become target rows (AUTO CDC keys of its transform)."""
        t = self.transform
        if t is None:
            return ApplySpec(keys=tuple(keys))
        return ApplySpec(keys=tuple(keys), stored_as_scd_type=t.scd_type,
                         apply_as_deletes=t.apply_as_deletes or DEFAULT_DELETES,
                         apply_as_truncates=t.apply_as_truncates,
                         track_history_column_list=t.track_history,
                         track_history_except_column_list=t.track_history_except)

    def apply(self, df, keys: tuple[str, ...] = ()):
        from py4j.protocol import Py4JError
        from pyspark.errors import PySparkException
        from pyspark.sql import functions as F

        for op in sorted(self.extras.skipped_operations & set(_SKIP)):
            df = df.filter(~F.expr(_SKIP[op]))
        t = self.transform
        if t is None:
            return df
        data = [c for c in df.columns if c not in META]
        clash = [m for m in self.extras.metadata if m in data]
        if clash:
            raise ConfigError(f"{self.where}: source.metadata.list names {', '.join(clash)}, "
                              f"and table {t.source_table.text!r} has a column of that name",
                              fix="leave it out of metadata.list, or rename the column")
        try:
            for m in self.extras.metadata:
                df = df.withColumn(m, F.expr(_SOURCE_META[m]))
            kind = F.col("_change_type")
            soft = F.lit(t.converter == "SOFT_DELETE") & (kind == "delete")
            if t.filter:
                ok = F.coalesce(F.expr(_meta(t.filter)), F.lit(False))
                # a row leaving the filter's range is a delete of its key in the target; a
                # deleted row is soft-deleted only if its target row passed the filter
                df = (df.withColumn("__keep", ok)
                        .withColumn("__soft", soft & F.col("__keep"))
                        .filter(F.col("__keep") | kind.isin("delete", "update_postimage"))
                        .withColumn("_change_type",
                                    F.when(kind.isin("insert", "update_postimage")
                                           & ~F.col("__keep"), F.lit("delete"))
                                     .otherwise(kind))
                        .drop("__keep"))
            else:
                df = df.withColumn("__soft", soft)
            if t.projection:
                items: list[str] = []
                for item in _top_level_split(t.projection):
                    if item == "*":
                        items.extend(_q(c) for c in data)
                    else:
                        items.append(_meta(item))
                items += [m for m in META] + ["__soft"]
                df = df.selectExpr(*items)
            elif self.extras.metadata:
                df = df.drop(*self.extras.metadata)
            # SOFT_DELETE: the deleted row is written as it was (an update of its key)
            df = (df.withColumn("_change_type", F.when(F.col("__soft"), F.lit(
                "update_postimage")).otherwise(F.col("_change_type"))).drop("__soft"))
            spec = self.spec(keys or ("_",))  # (the keys only name the rule's owner here)
            if needs_marks(spec):
                df = mark_changes(df, spec)
        except (PySparkException, Py4JError) as e:  # e.g. AnalysisException: names the column
            raise ConfigError(f"{self.where}: the transform of {t.source_table.text!r} "
                              f"failed: {str(e).splitlines()[0]}",
                              fix="check the Spark SQL in projection/filter against the "
                                  f"table's columns: {', '.join(data)}") from None
        return df

    def keys(self, primary_key: tuple[str, ...]) -> tuple[str, ...]:
        if self.transform is not None and self.transform.primary_keys:
            return self.transform.primary_keys
        return primary_key


def shaper_for(defn: PipelineDef, table: str) -> Shaper:
    t = transform_of(defn, table)
    return Shaper(t, f"{defn.path}:{t.line}" if t else "", defn.source.extras)
