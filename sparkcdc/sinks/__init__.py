"""Sinks: one folder per target type, one class per type, behind one registry keyed by
``SinkType``.

    from sparkcdc import sinks
    target = sinks.create("delta", {"path": "/data/orders"})      # or {"type": "delta", ...}
    changes.writeStream.foreachBatch(apply_changes(target, keys=["id"])).start()

Every sink implements ``sinks.base.Sink`` and declares what it can do on its class
(``sinks.capabilities.Capabilities``). Each sink module imports its driver only when a sink
is made, so ``import sparkcdc.sinks`` needs none of them; a missing driver fails with the
pip package to install (``MissingPackage``). See docs/sinks.md.
"""

from __future__ import annotations

from sparkcdc.sinks.base import ChangeSet, Sink, WriteResult
from sparkcdc.sinks.capabilities import Capabilities
from sparkcdc.sinks.drivers import require
from sparkcdc.sinks.kinds import SinkKind, SinkType
from sparkcdc.sinks.registry import create, sink_class, sink_types

__all__ = ["Capabilities", "ChangeSet", "Sink", "SinkKind", "SinkType", "WriteResult",
           "create", "require", "sink_class", "sink_types"]
