"""What a pipeline YAML says, as plain typed values: the source, the sink, routes,
transforms and the pipeline's settings (``PipelineDef``), and the keys each section takes.
Parsed by ``definition/parse.py``; read by the run and the commands, which never see YAML.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from pathlib import Path

from sparkcdc.pipeline.definition.flink_keys import SourceExtras
from sparkcdc.sinks.kinds import SinkType

BEHAVIORS = ("exception", "evolve", "try_evolve", "lenient", "ignore")
SECTIONS = ("source", "sink", "route", "transform", "pipeline")
# source keys handled by the pipeline itself (the rest go to the mysql-cdc source, or are
# Flink's keys that pipeline/definition/flink_keys.py maps, accepts or refuses)
SOURCE_OWN = ("type", "name", "tables", "tables.exclude")
# Flink CDC's switch for schema change events: false is schema.change.behavior 'ignore'
SCHEMA_CHANGE_ENABLED = "schema-change.enabled"
# source keys the pipeline sets per table (from `tables`); not allowed in the YAML
SOURCE_DERIVED = ("database-name", "table-name", "table-name.exclude")
PIPELINE_KEYS = {
    "name": "a name for the pipeline (used in application ids and the Spark app name)",
    "parallelism": "a positive integer: concurrent chunk reads per table",
    "checkpoint.location": "a directory for the pipeline's checkpoints (relative paths are "
                           "relative to the YAML file)",
    "trigger.interval": "a duration like '5s' between micro-batches",
    "discovery.interval": "a duration like '10s' between looks for new and changed tables",
    "schema.change.behavior": "one of " + ", ".join(BEHAVIORS),
    "binlog.purged.behavior": "fail or resnapshot: what a table whose binlog position was "
                              "purged while the pipeline was stopped does",
    "local-time-zone": "a time zone for Spark's session, like 'UTC' or 'Europe/Berlin'",
    "max-rows-per-batch": "a positive integer: snapshot rows admitted per micro-batch",
    "write.on": "auto, driver or executors: where the pipeline's stream writes its targets "
                "(auto: the executors when --master is a cluster, else the driver)",
    "write.snapshot-from-tasks": "true or false: a snapshot's rows written as files by the "
                                 "tasks that read them, where the target takes them (false: "
                                 "every row through the driver)",
    "write.changes-from-tasks": "true or false: a batch's changes written by Spark tasks that "
                                "each own a slice of the keys, where the target takes them "
                                "(Delta with deletion vectors; false: through the driver)",
    "spark": "a mapping of Spark configuration keys to values",
    "route-mode": "ALL_MATCH (a table goes to every route that matches it) or FIRST_MATCH "
                  "(to the first one)",
    "execution.runtime-mode": "STREAMING (run until stopped) or BATCH (stop once caught up, "
                              "as run --until-caught-up)",
    "class-cache": "true or false: start Spark's JVM from an archive of the classes earlier "
                   "runs loaded (docs/operations.md, Start-up)",
    "warm-workers": "true or false: fork a local run's Python processes from an interpreter "
                    "that has imported what they need (docs/operations.md, Start-up)",
}
# Flink's pipeline keys that mean nothing here, and why (docs/pipelines.md)
PIPELINE_ACCEPTED = {
    "operator.uid.prefix": "Flink's operator ids for savepoints; sparkcdc names its stream "
                           "after the pipeline and keeps its state in checkpoint.location",
    "schema.operator.uid": "Flink's operator ids for savepoints; sparkcdc names its stream "
                           "after the pipeline and keeps its state in checkpoint.location",
    "schema-operator.rpc-timeout": "there is no schema operator: a schema change is applied "
                                   "inside the micro-batch that carries it",
    "sink.partitioning.strategy": "how Flink spreads events over its sink tasks; each "
                                  "target is written by one writer at a time here",
    "transform.decimal.precision.mode": "transforms are Spark SQL, whose decimal arithmetic "
                                        "goes up to precision 38",
}
# Flink's pipeline keys that cannot run here, and what to do instead
PIPELINE_REFUSED = {
    "user-defined-function": (
        "Flink's user-defined functions are Java, Scala or Python classes of its runtime",
        "write the expression in Spark SQL (its built-in functions) in the transform"),
    "model": (
        "Flink's AI model functions have no equivalent here",
        "compute the values outside the pipeline, or with Spark SQL in a transform"),
}
ROUTE_KEYS = ("source-table", "sink-table", "replace-symbol", "description")
# Databricks' AUTO CDC arguments (create_auto_cdc_flow), in the file's kebab-case
AUTO_CDC_KEYS = ("stored-as-scd-type", "track-history-column-list",
                 "track-history-except-column-list", "apply-as-deletes", "apply-as-truncates")
TRANSFORM_KEYS = ("source-table", "projection", "filter", "primary-keys", "partition-keys",
                  "table-options", "table-options.delimiter", "converter-after-transform",
                  "description", *AUTO_CDC_KEYS)
CONVERTERS = ("SOFT_DELETE",)


# -- definitions ---------------------------------------------------------------------------------

@dataclass(frozen=True)
class TablePattern:
    """A Flink CDC table pattern: the first unescaped ``.`` separates database and table
    regexes; ``\\.`` is the regex's any-character dot. ``db.orders_\\.*`` -> db ``db``,
    table ``orders_.*``."""

    text: str
    database: str
    table: str

    @property
    def regex(self) -> str:
        """One regex over ``db.table``; the pattern's own groups keep their numbers."""
        return f"(?:{self.database})\\.(?:{self.table})"

    def compiled(self) -> re.Pattern:
        return re.compile(self.regex)


@dataclass(frozen=True)
class SourceDef:
    type: str
    options: dict[str, str]  # mysql-cdc options, without the table selection
    tables: tuple[TablePattern, ...]
    exclude: tuple[TablePattern, ...] = ()
    line: int = 0
    schema_changes: bool | None = None  # Flink's schema-change.enabled, when given
    extras: SourceExtras = field(default_factory=SourceExtras)  # Flink's keys done here

    @property
    def database_regex(self) -> str:
        return "|".join(f"(?:{p.database})" for p in self.tables)

    @property
    def table_regex(self) -> str:
        return "|".join(p.regex for p in self.tables)

    @property
    def exclude_regex(self) -> str | None:
        return "|".join(p.regex for p in self.exclude) or None

    def options_for(self, table: str | None = None, **extra: str) -> dict[str, str]:
        """Source options capturing ``table`` (``db.table``) alone, or every matched table."""
        if table is not None:
            return self.options_for_tables([table], **extra)
        opts = dict(self.options)
        opts["database-name"] = self.database_regex
        opts["table-name"] = self.table_regex
        if self.exclude_regex:
            opts["table-name.exclude"] = self.exclude_regex
        opts.update(extra)
        return opts

    def options_for_tables(self, tables: list[str], **extra: str) -> dict[str, str]:
        """Source options capturing exactly ``tables`` (``db.table`` names), one stream."""
        opts = dict(self.options)
        dbs = sorted({t.partition(".")[0] for t in tables})
        opts["database-name"] = "|".join(re.escape(d) for d in dbs)
        opts["table-name"] = "|".join(
            re.escape(db) + "\\." + re.escape(name)
            for db, _, name in (t.partition(".") for t in sorted(tables)))
        opts.update(extra)
        return opts


@dataclass(frozen=True)
class SinkDef:
    type: SinkType
    options: dict[str, str]
    line: int = 0


@dataclass(frozen=True)
class RouteDef:
    source_table: TablePattern
    sink_table: str
    replace_symbol: str | None = None
    description: str | None = None
    line: int = 0


@dataclass(frozen=True)
class TransformDef:
    source_table: TablePattern
    projection: str | None = None
    filter: str | None = None
    primary_keys: tuple[str, ...] = ()
    partition_keys: tuple[str, ...] = ()
    description: str | None = None
    line: int = 0
    table_options: dict[str, str] = field(default_factory=dict)  # for the target's creation
    converter: str | None = None  # converter-after-transform: SOFT_DELETE
    # AUTO CDC (Databricks' create_auto_cdc_flow): how the changes become target rows
    scd_type: int = 1
    track_history: tuple[str, ...] | None = None
    track_history_except: tuple[str, ...] | None = None
    apply_as_deletes: str | None = None
    apply_as_truncates: str | None = None

    @property
    def shapes_rows(self) -> bool:
        """Whether it changes the rows (not only the target's keys, layout or history)."""
        return bool(self.projection or self.filter or self.converter)


@dataclass(frozen=True)
class PipelineSettings:
    name: str = "sparkcdc"
    parallelism: int = 4
    checkpoint_location: str = "checkpoints"
    trigger_interval: float = 5.0
    discovery_interval: float = 10.0
    schema_change_behavior: str = "lenient"
    binlog_purged_behavior: str = "fail"  # or "resnapshot" (docs/operations.md)
    local_time_zone: str | None = None
    max_rows_per_batch: int | None = None
    write_on: str = "auto"  # auto | driver | executors
    snapshot_from_tasks: bool = True  # chunk rows written as files by their tasks (run/task_files.py)
    changes_from_tasks: bool = True  # changes written by key-slice tasks (run/task_changes.py)
    spark: dict[str, str] = field(default_factory=dict)
    route_mode: str = "all_match"  # Flink's route-mode: all_match | first_match
    batch: bool = False  # Flink's execution.runtime-mode BATCH: stop once caught up
    class_cache: bool = True  # Spark's JVM from the classes of earlier runs (class_cache.py)
    warm_workers: bool = True  # Python processes forked from a warm one (warm_python.py)


@dataclass(frozen=True)
class PipelineDef:
    source: SourceDef
    sink: SinkDef
    routes: tuple[RouteDef, ...] = ()
    transforms: tuple[TransformDef, ...] = ()
    pipeline: PipelineSettings = field(default_factory=PipelineSettings)
    path: str = "<string>"
    lines: dict[str, int] = field(default_factory=dict, repr=False, compare=False)

    def where(self, key: str) -> str:
        """``file:line`` of a key path like ``source.port`` (or of its nearest parent)."""
        k = key
        while k and k not in self.lines:
            k = k.rpartition(".")[0] if "." in k else ""
        return f"{self.path}:{self.lines.get(k, 1)}"

    @property
    def checkpoint_dir(self) -> Path:
        return Path(self.pipeline.checkpoint_location)
