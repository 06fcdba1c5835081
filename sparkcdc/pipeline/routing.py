"""Routes and transforms: which target a source table goes to, and how its rows are shaped.

Routes follow Flink CDC 3.x: the first route whose ``source-table`` matches ``db.table``
names the target; ``$1``.. in ``sink-table`` are the pattern's groups, and ``replace-symbol``
(e.g. ``<>``) stands for the source table's name. Several source tables routed to one target
(shards) are merged into it. A table no route matches keeps its own name.

Transforms are Spark SQL: ``projection`` is a select list (``*`` is the table's columns),
``filter`` a boolean expression. Flink's metadata names ``__schema_name__`` /
``__database_name__``, ``__table_name__``, ``__namespace_name__`` and
``__data_event_type__`` are available in both.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from sparkcdc.core.records import META_COLUMNS
from sparkcdc.errors import ConfigError
from sparkcdc.pipeline.definition import PipelineDef, RouteDef, TransformDef

META = META_COLUMNS
_FLINK_META = {
    "__data_event_type__": ("CASE _change_type WHEN 'insert' THEN '+I' WHEN 'delete' THEN '-D' "
                            "WHEN 'update_preimage' THEN '-U' ELSE '+U' END"),
    "__schema_name__": "_database",
    "__database_name__": "_database",
    "__table_name__": "_table",
    "__namespace_name__": "CAST(NULL AS STRING)",
}


def target_of(defn: PipelineDef, table: str) -> str:
    """The target ``db.table`` of source table ``db.table``."""
    route = route_of(defn, table)
    if route is None:
        return table
    m = route.source_table.compiled().fullmatch(table)
    name = route.sink_table
    if route.replace_symbol:
        name = name.replace(route.replace_symbol, table.partition(".")[2])
    return re.sub(r"\$(\d+)", lambda g: m.group(int(g.group(1))) or "", name)


def route_of(defn: PipelineDef, table: str) -> RouteDef | None:
    return next((r for r in defn.routes if r.source_table.compiled().fullmatch(table)), None)


def transform_of(defn: PipelineDef, table: str) -> TransformDef | None:
    return next((t for t in defn.transforms if t.source_table.compiled().fullmatch(table)),
                None)


def _top_level_split(text: str) -> list[str]:
    out, depth, cur, quote = [], 0, [], None
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
    """Applies one table's transform to its change rows (a Spark DataFrame)."""

    transform: TransformDef | None
    where: str = ""

    def apply(self, df):
        if self.transform is None:
            return df
        from pyspark.sql import functions as F

        t = self.transform
        data = [c for c in df.columns if c not in META]
        try:
            if t.filter:
                ok = F.coalesce(F.expr(_meta(t.filter)), F.lit(False))
                kind = F.col("_change_type")
                # a row leaving the filter's range is a delete of its key in the target
                df = (df.withColumn("__keep", ok)
                        .filter(F.col("__keep") | kind.isin("delete", "update_postimage"))
                        .withColumn("_change_type",
                                    F.when(kind.isin("insert", "update_postimage")
                                           & ~F.col("__keep"), F.lit("delete"))
                                     .otherwise(kind))
                        .drop("__keep"))
            if t.projection:
                items = []
                for item in _top_level_split(t.projection):
                    if item == "*":
                        items.extend(_q(c) for c in data)
                    else:
                        items.append(_meta(item))
                items += [m for m in META]
                df = df.selectExpr(*items)
        except Exception as e:  # Spark's AnalysisException names the column or function
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
    return Shaper(t, f"{defn.path}:{t.line}" if t else "")
