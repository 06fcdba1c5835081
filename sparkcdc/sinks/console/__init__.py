"""The ``console`` sink: prints each batch's net changes and keeps the applied table in memory."""

from sparkcdc.sinks.console.config import ConsoleConfig
from sparkcdc.sinks.console.sink import ConsoleSink

__all__ = ["ConsoleConfig", "ConsoleSink"]
