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

from sparkcdc.options import check_known
from sparkcdc.sinks import create, sink_class


def _config(sink_type: str):
    sink_class(sink_type)  # an unknown type fails here, with the types there are
    return importlib.import_module(f"sparkcdc.sinks.{sink_type}.config")


def has_option(sink_type: str, name: str) -> bool:
    return name in _config(sink_type).OPTIONS


def target_options(sink_type: str, options: Mapping[str, str], target: str,
                   app_id: str | None = None) -> dict[str, str]:
    """The sink options for one target table ``db.table``: the sink's own naming of its
    targets (its config module's ``target_options``), with the table's application id."""
    db, _, table = target.partition(".")
    opts = _config(sink_type).target_options(options, db, table)
    if app_id is not None and has_option(sink_type, "app-id"):
        opts["app-id"] = app_id
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


def create_sink(sink_type: str, options: Mapping[str, str], target: str, app_id: str):
    return create(sink_type, target_options(sink_type, options, target, app_id))
