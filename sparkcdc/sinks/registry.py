"""The one registry of sinks: each ``SinkType`` and the class that implements it.

Each entry imports its class only when asked (``sink_class``), so ``import sparkcdc.sinks``
loads no sink module, and no driver until a sink is made (``Sink.load_drivers``; pyiceberg's
catalog loaders do the same). The entries are plain imports, which mypy and the import
contracts see; a type's class is checked to be the one its ``type`` says.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

from sparkcdc.errors import ConfigError
from sparkcdc.sinks.base import Sink
from sparkcdc.sinks.kinds import SinkType


def _console() -> type[Sink]:
    from sparkcdc.sinks.console.sink import ConsoleSink

    return ConsoleSink


def _delta() -> type[Sink]:
    from sparkcdc.sinks.delta.sink import DeltaSink

    return DeltaSink


def _files() -> type[Sink]:
    from sparkcdc.sinks.files.sink import FilesSink

    return FilesSink


def _iceberg() -> type[Sink]:
    from sparkcdc.sinks.iceberg.sink import IcebergSink

    return IcebergSink


def _kafka() -> type[Sink]:
    from sparkcdc.sinks.kafka.sink import KafkaSink

    return KafkaSink


def _mysql() -> type[Sink]:
    from sparkcdc.sinks.mysql.sink import MySQLSink

    return MySQLSink


def _postgres() -> type[Sink]:
    from sparkcdc.sinks.postgres.sink import PostgresSink

    return PostgresSink


CLASSES: Mapping[SinkType, Callable[[], type[Sink]]] = {
    SinkType.CONSOLE: _console,
    SinkType.DELTA: _delta,
    SinkType.FILES: _files,
    SinkType.ICEBERG: _iceberg,
    SinkType.KAFKA: _kafka,
    SinkType.MYSQL: _mysql,
    SinkType.POSTGRES: _postgres,
}


def sink_types() -> list[str]:
    """Every sink type's word, sorted (as the YAML's ``sink.type`` takes them)."""
    return sorted(t.value for t in SinkType)


def sink_class(sink_type: SinkType | str) -> type[Sink]:
    """The class of a sink type (a word: a ``ConfigError`` listing the types if unknown)."""
    kind = SinkType.parse(sink_type)
    cls = CLASSES[kind]()
    if cls.type is not kind:
        raise TypeError(f"{cls.__name__} is registered as {kind} but says it is {cls.type}")
    return cls


def create(sink_type: SinkType | str | Mapping[str, Any],
           options: Mapping[str, Any] | None = None) -> Sink:
    """A sink from its type and string options (or one dict with a ``type`` key)."""
    if isinstance(sink_type, Mapping):
        options = dict(sink_type)
        if "type" not in options:
            raise ConfigError("the sink definition has no 'type'",
                              fix=f"add type: one of {', '.join(sink_types())}")
        sink_type = str(options.pop("type"))
    return sink_class(sink_type).from_options(options or {})
