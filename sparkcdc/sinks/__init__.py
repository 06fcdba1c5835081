"""Sinks: one folder per target type, behind one registry keyed by type.

    from sparkcdc import sinks
    target = sinks.create("delta", {"path": "/data/orders"})      # or {"type": "delta", ...}
    changes.writeStream.foreachBatch(apply_changes(target, keys=["id"])).start()

Each sink module imports its driver lazily, so ``import sparkcdc.sinks`` needs none of them;
a missing driver fails with the pip package to install. See docs/sinks.md.
"""

from __future__ import annotations

import difflib
import importlib
from collections.abc import Mapping
from typing import Any

from sparkcdc.errors import ConfigError
from sparkcdc.sinks.base import ChangeSet, Sink, WriteResult

# type -> (module, class, pip requirement of its driver or None)
REGISTRY: dict[str, tuple[str, str, str | None]] = {
    "delta": ("sparkcdc.sinks.delta.sink", "DeltaSink", "sparkcdc[delta]"),
    "iceberg": ("sparkcdc.sinks.iceberg.sink", "IcebergSink", "sparkcdc[iceberg]"),
    "postgres": ("sparkcdc.sinks.postgres.sink", "PostgresSink", "sparkcdc[postgres]"),
    "mysql": ("sparkcdc.sinks.mysql.sink", "MySQLSink", "pymysql"),
    "files": ("sparkcdc.sinks.files.sink", "FilesSink", None),
    "kafka": ("sparkcdc.sinks.kafka.sink", "KafkaSink", "sparkcdc[kafka]"),
    "console": ("sparkcdc.sinks.console.sink", "ConsoleSink", None),
}


def sink_types() -> list[str]:
    return sorted(REGISTRY)


def sink_class(sink_type: str) -> type[Sink]:
    if sink_type not in REGISTRY:
        close = difflib.get_close_matches(str(sink_type), list(REGISTRY), n=1, cutoff=0.4)
        hint = f"did you mean '{close[0]}'? " if close else ""
        raise ConfigError(f"unknown sink type {sink_type!r}",
                          fix=f"{hint}sink types: {', '.join(sink_types())}")
    module, cls, _req = REGISTRY[sink_type]
    return getattr(importlib.import_module(module), cls)


def create(sink_type: str | Mapping[str, Any], options: Mapping[str, Any] | None = None) -> Sink:
    """A sink from its type and string options (or one dict with a ``type`` key)."""
    if isinstance(sink_type, Mapping):
        options = dict(sink_type)
        if "type" not in options:
            raise ConfigError("the sink definition has no 'type'",
                              fix=f"add type: one of {', '.join(sink_types())}")
        sink_type = str(options.pop("type"))
    return sink_class(sink_type).from_options(options or {})


def require(module: str, sink_type: str):
    """Import a sink's driver, or fail with what to install."""
    try:
        return importlib.import_module(module)
    except ImportError as e:
        req = REGISTRY[sink_type][2] or module
        raise ConfigError(f"the {sink_type} sink needs the Python package {module!r}: {e}",
                          fix=f"pip install '{req}'") from e


__all__ = ["REGISTRY", "ChangeSet", "Sink", "WriteResult", "create", "sink_class", "sink_types"]
