"""An adapter between the pipeline and the sinks (``sparkcdc.sinks``, owned elsewhere).

The sinks take the options of one target table; a pipeline's ``sink`` section gives the
options of a whole destination. Here a routed target name ``db.table`` becomes that one
table's sink options (a folder under ``path`` for Delta and files, ``namespace.table`` for
Iceberg, schema/database and table for PostgreSQL and MySQL: each sink class's own
``target_options``), and each table gets its own application id. What a sink accepts and
how it lays out a table it creates are declared on its class (``Sink.option_spec``,
``Capabilities.table_layout``), found through the registry by its ``SinkType``. Schema
evolution is each sink's own too (``Sink.evolve``, sinks/evolution.py).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import pyarrow as pa

from sparkcdc.errors import ConfigError
from sparkcdc.options import check_known
from sparkcdc.sinks import SinkType, create, sink_class
from sparkcdc.sinks.base import ChangeSet, Sink, WriteResult
from sparkcdc.sinks.capabilities import TableLayout
from sparkcdc.sinks.evolution import Change


def has_option(sink_type: SinkType | str, name: str) -> bool:
    return name in sink_class(sink_type).option_spec


def target_options(sink_type: SinkType | str, options: Mapping[str, str], target: str,
                   app_id: str | None = None, source: str | None = None) -> dict[str, str]:
    """The sink options for one target table ``db.table``: the sink's own naming of its
    targets (``Sink.target_options``), with the table's application id and, for a sink
    whose events name it (the kafka sink's truncate), its source table."""
    db, _, table = target.partition(".")
    opts = sink_class(sink_type).target_options(options, db, table)
    if app_id is not None and has_option(sink_type, "app-id"):
        opts["app-id"] = app_id
    if source is not None and has_option(sink_type, "source-table"):
        opts["source-table"] = source
    return opts


def check_sink_options(sink_type: SinkType | str, options: Mapping[str, str]) -> None:
    """Fail now, naming the option, if the sink would refuse these options: they are made a
    probe target's and parsed (no connection is opened)."""
    cls = sink_class(sink_type)
    for name in options:  # a misspelt name first, before what it leaves missing
        check_known(f"{cls.type} sink", cls.option_spec, name, cls.option_prefixes)
    probe = target_options(sink_type, options, "db.table", "probe")
    cls.from_options(probe)


def create_sink(sink_type: SinkType | str, options: Mapping[str, str], target: str,
                app_id: str, source: str | None = None) -> Sink:
    return create(sink_type, target_options(sink_type, options, target, app_id, source))


def _layout(sink_type: SinkType | str, what: str) -> TableLayout:
    """How the sink lays out a table it creates; a ``ConfigError`` saying why not for a sink
    that cannot honour ``what`` (a transform's partition-keys or table-options)."""
    caps = sink_class(sink_type).capabilities
    if caps.table_layout is not None:
        return caps.table_layout
    raise ConfigError(f"{what} cannot be honoured by the {sink_type} sink: {caps.no_layout}",
                      fix=f"leave {what} out of the transform (create the target yourself "
                          "beforehand if it needs a layout), or use the delta or iceberg sink")


def check_table_creation(sink_type: SinkType | str, what: str, wanted: Any) -> None:
    """A transform's ``partition-keys`` (``what``) or ``table-options`` for ``sink_type``:
    fine when empty or when the sink creates its tables with it; else the refusal, why."""
    if wanted:
        _layout(sink_type, what)


def table_creation_options(sink_type: SinkType | str, partition_keys: Any,
                           table_options: Any) -> dict[str, str]:
    """The sink options that create a target partitioned by ``partition_keys`` and with
    ``table_options`` as its table properties (checked by ``check_table_creation``)."""
    out = {}
    if partition_keys:
        out[_layout(sink_type, "partition-keys").partition_option] = ",".join(partition_keys)
    for k, v in (table_options or {}).items():
        out[_layout(sink_type, "table-options").property_prefix + k] = v
    return out


class FanOut(Sink):
    """Several targets of one source table (routes that all match it: Flink's default
    route-mode), written as one: the same changes and batch id go to each, and each
    records the batch id in its own commit, so a batch replayed after a crash between two
    of them is skipped by those that have it and applied by the others. Its last batch id
    is the highest of theirs (the batch ids of the table go on after every target's)."""

    def __init__(self, sinks: list[Sink]):
        self.sinks = sinks
        # a fan-out is of its targets' type (one sink type per pipeline), and can what it
        # can: its operations hand each call to every target
        self.type = sinks[0].type
        self.capabilities = sinks[0].capabilities

    @classmethod
    def from_options(cls, options: Mapping[str, Any]) -> FanOut:
        raise TypeError("a fan-out is made of its targets' sinks (create_sinks), "
                        "not from options")

    @classmethod
    def target_options(cls, options: Mapping[str, str], db: str, table: str) -> dict[str, str]:
        raise TypeError("a fan-out's targets are each named by their own sink")

    def last_batch_id(self) -> int | None:
        ids = [i for i in (s.last_batch_id() for s in self.sinks) if i is not None]
        return max(ids) if ids else None

    def write(self, changes: ChangeSet, batch_id: int) -> WriteResult:
        results = [s.write(changes, batch_id) for s in self.sinks]
        return next((r for r in results if not r.skipped), results[0])

    def write_changelog(self, df: Any, batch_id: int, keys: tuple[str, ...] = ()) -> WriteResult:
        results = [s.write_changelog(df, batch_id, keys) for s in self.sinks]
        return next((r for r in results if not r.skipped), results[0])

    def read(self) -> pa.Table:
        return self.sinks[0].read()

    def stored_columns(self) -> pa.Schema | None:
        return next((c for c in (s.stored_columns() for s in self.sinks) if c is not None),
                    None)

    def can_change(self, change: Change, current: pa.DataType | None = None) -> bool:
        return all(s.can_change(change, current) for s in self.sinks)

    def refusal(self, change: Change) -> str:
        bad = next((s for s in self.sinks if not s.can_change(change)), self.sinks[0])
        return bad.refusal(change)

    def evolve(self, changes: list[Change], keys: tuple[str, ...] = ()) -> None:
        for s in self.sinks:
            s.evolve(changes, keys)

    def announce(self, schema: Any, statements: tuple[str, ...], columns: tuple[str, ...],
                 diff: Mapping[str, tuple[str, ...]]) -> None:
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


def create_sinks(sink_type: SinkType | str, options: Mapping[str, str],
                 targets: list[str] | tuple,
                 app_id: str, extra: Mapping[str, str] | None = None,
                 source: str | None = None) -> Sink:
    """The sink of a source table's targets: one, or a ``FanOut`` of several. ``extra``:
    options for creating them (``table_creation_options``); ``source``: the source table."""
    opts = {**options, **(extra or {})}
    sinks = [create_sink(sink_type, opts, t, app_id, source) for t in targets]
    return sinks[0] if len(sinks) == 1 else FanOut(sinks)
