"""An adapter between the pipeline and the sinks (``sparkcdc.sinks``, owned elsewhere).

The sinks take the options of one target table; a pipeline's ``sink`` section gives the
options of a whole destination. Here a routed target name ``db.table`` becomes that one
table's sink options (a folder under ``path`` for Delta and files, ``namespace.table`` for
Iceberg, schema/database and table for PostgreSQL and MySQL: each sink's own
``target_options`` in its config module), and each table gets its own application id.
Schema evolution is each sink's own too (``Sink.evolve``, sinks/evolution.py).
"""

from __future__ import annotations

import importlib
from collections.abc import Mapping
from typing import Any

from sparkcdc.errors import ConfigError
from sparkcdc.options import check_known
from sparkcdc.sinks import create, sink_class
from sparkcdc.sinks.base import Sink, WriteResult

# How a transform's partition-keys and table-options (Flink's keys) reach the creation of a
# target: the sink option that partitions a table it creates, and the prefix of its table
# properties. A sink without one refuses the key (TABLE_LAYOUT_REFUSED says why).
PARTITION_OPTION = {"delta": "partition-by", "iceberg": "partition-by"}
TABLE_PROPERTY_PREFIX = {"delta": "table-property.", "iceberg": "table-property."}
TABLE_LAYOUT_REFUSED = {
    "postgres": "PostgreSQL partitions a table by range, list or hash with each partition "
                "declared, which partition-keys does not say; its tables have no free-form "
                "properties",
    "mysql": "MySQL partitions a table by range, list or hash with each partition declared, "
             "and every unique key must hold the partition columns; its tables have no "
             "free-form properties",
    "files": "the files sink appends a changelog of change rows: it has no table to "
             "partition or give properties",
    "console": "the console sink prints rows: nothing is stored",
    "kafka": "the kafka sink sends change messages to topics: it has no table to partition "
             "or give properties",
}


def _config(sink_type: str):
    sink_class(sink_type)  # an unknown type fails here, with the types there are
    return importlib.import_module(f"sparkcdc.sinks.{sink_type}.config")


def has_option(sink_type: str, name: str) -> bool:
    return name in _config(sink_type).OPTIONS


def target_options(sink_type: str, options: Mapping[str, str], target: str,
                   app_id: str | None = None, source: str | None = None) -> dict[str, str]:
    """The sink options for one target table ``db.table``: the sink's own naming of its
    targets (its config module's ``target_options``), with the table's application id and,
    for a sink whose events name it (the kafka sink's truncate), its source table."""
    db, _, table = target.partition(".")
    opts = _config(sink_type).target_options(options, db, table)
    if app_id is not None and has_option(sink_type, "app-id"):
        opts["app-id"] = app_id
    if source is not None and has_option(sink_type, "source-table"):
        opts["source-table"] = source
    return opts


def check_sink_options(sink_type: str, options: Mapping[str, str]) -> None:
    """Fail now, naming the option, if the sink would refuse these options: they are made a
    probe target's and parsed (no connection is opened)."""
    from sparkcdc.sinks import sink_class

    cfg = _config(sink_type)
    for name in options:  # a misspelt name first, before what it leaves missing
        check_known(f"{sink_type} sink", cfg.OPTIONS, name, getattr(cfg, "PREFIXES", ()))
    probe = target_options(sink_type, options, "db.table", "probe")
    sink_class(sink_type).from_options(probe)


def create_sink(sink_type: str, options: Mapping[str, str], target: str, app_id: str,
                source: str | None = None):
    return create(sink_type, target_options(sink_type, options, target, app_id, source))


def check_table_creation(sink_type: str, what: str, wanted) -> None:
    """A transform's ``partition-keys`` (``what``) or ``table-options`` for ``sink_type``:
    fine when empty or when the sink creates its tables with it; else the refusal, why."""
    if not wanted:
        return
    table = PARTITION_OPTION if what == "partition-keys" else TABLE_PROPERTY_PREFIX
    if sink_type in table:
        return
    why = TABLE_LAYOUT_REFUSED.get(sink_type, f"the {sink_type} sink creates no partitioned "
                                              "tables and has no table properties")
    raise ConfigError(f"{what} cannot be honoured by the {sink_type} sink: {why}",
                      fix=f"leave {what} out of the transform (create the target yourself "
                          "beforehand if it needs a layout), or use the delta or iceberg sink")


def table_creation_options(sink_type: str, partition_keys, table_options) -> dict[str, str]:
    """The sink options that create a target partitioned by ``partition_keys`` and with
    ``table_options`` as its table properties (checked by ``check_table_creation``)."""
    out = {}
    if partition_keys:
        out[PARTITION_OPTION[sink_type]] = ",".join(partition_keys)
    for k, v in (table_options or {}).items():
        out[TABLE_PROPERTY_PREFIX[sink_type] + k] = v
    return out


class FanOut(Sink):
    """Several targets of one source table (routes that all match it: Flink's default
    route-mode), written as one: the same changes and batch id go to each, and each
    records the batch id in its own commit, so a batch replayed after a crash between two
    of them is skipped by those that have it and applied by the others. Its last batch id
    is the highest of theirs (the batch ids of the table go on after every target's)."""

    def __init__(self, sinks: list[Sink]):
        self.sinks = sinks
        # a fan-out is of its targets' type and kind, known only once they are made
        self.type = sinks[0].type  # type: ignore[misc]
        self.kind = sinks[0].kind  # type: ignore[misc]
        self.takes_arrow = all(s.takes_arrow for s in sinks)  # type: ignore[misc]

    @classmethod
    def from_options(cls, options: Mapping[str, Any]) -> FanOut:
        raise TypeError("a fan-out is made of its targets' sinks (create_sinks), "
                        "not from options")

    def last_batch_id(self) -> int | None:
        ids = [i for i in (s.last_batch_id() for s in self.sinks) if i is not None]
        return max(ids) if ids else None

    def write(self, changes, batch_id: int) -> WriteResult:
        results = [s.write(changes, batch_id) for s in self.sinks]
        return next((r for r in results if not r.skipped), results[0])

    def write_changelog(self, df: Any, batch_id: int, keys: tuple[str, ...] = ()) -> WriteResult:
        results = [s.write_changelog(df, batch_id, keys) for s in self.sinks]
        return next((r for r in results if not r.skipped), results[0])

    def read(self):
        return self.sinks[0].read()

    def stored_columns(self):
        return next((c for c in (s.stored_columns() for s in self.sinks) if c is not None),
                    None)

    def can_change(self, change, current=None) -> bool:
        return all(s.can_change(change, current) for s in self.sinks)

    def refusal(self, change) -> str:
        bad = next((s for s in self.sinks if not s.can_change(change)), self.sinks[0])
        return bad.refusal(change)

    def evolve(self, changes, keys=()) -> None:
        for s in self.sinks:
            s.evolve(changes, keys)

    def announce(self, schema, statements, columns, diff) -> None:
        for s in self.sinks:
            s.announce(schema, statements, columns, diff)

    def warm(self) -> None:
        for s in self.sinks:
            s.warm()

    def empty(self) -> None:
        for s in self.sinks:
            s.empty()

    def publish(self, spark: Any) -> bool:
        published = [s.publish(spark) for s in self.sinks]  # every one, not the first few
        return all(published)

    def close(self) -> None:
        for s in self.sinks:
            s.close()


def each_sink(sink: Sink) -> list[Sink]:
    """The sinks a table's sink writes: its fan-out's, or itself."""
    return list(sink.sinks) if isinstance(sink, FanOut) else [sink]


def create_sinks(sink_type: str, options: Mapping[str, str], targets: list[str] | tuple,
                 app_id: str, extra: Mapping[str, str] | None = None,
                 source: str | None = None) -> Sink:
    """The sink of a source table's targets: one, or a ``FanOut`` of several. ``extra``:
    options for creating them (``table_creation_options``); ``source``: the source table."""
    opts = {**options, **(extra or {})}
    sinks = [create_sink(sink_type, opts, t, app_id, source) for t in targets]
    return sinks[0] if len(sinks) == 1 else FanOut(sinks)
