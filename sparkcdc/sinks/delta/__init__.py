"""The ``delta`` sink: Delta Lake tables through delta-rs (``deltalake``), no JVM jars."""

from sparkcdc.sinks.delta.config import DeltaConfig
from sparkcdc.sinks.delta.sink import DeltaSink

__all__ = ["DeltaConfig", "DeltaSink"]
