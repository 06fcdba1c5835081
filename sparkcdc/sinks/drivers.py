"""A sink's driver (deltalake, pyiceberg, psycopg, confluent-kafka) loaded in one place.

The drivers are extras of the package, so ``import sparkcdc.sinks`` needs none of them. A
sink declares the modules it needs (``Sink.drivers``) and loads them when it is made
(``Sink.load_drivers``); one that is missing is a ``MissingPackage`` naming what to
``pip install``, not an ImportError from deep inside a write (pyiceberg's catalogs do the
same with their install hints).
"""

from __future__ import annotations

import importlib
from types import ModuleType

from sparkcdc.errors import MissingPackage
from sparkcdc.sinks.kinds import SinkType


def require(module: str, sink_type: SinkType | str) -> ModuleType:
    """Import a sink's driver, or fail with what to install."""
    try:
        return importlib.import_module(module)
    except ImportError as e:
        kind = SinkType.parse(sink_type)
        raise MissingPackage(f"the {kind} sink needs the Python package {module!r}: {e}",
                             fix=f"pip install '{kind.requirement or module}'",
                             package=module) from e
