"""The words of the sink interface, as enums: which sink (``SinkType``, the YAML's
``sink.type``) and what it holds (``SinkKind``).

They are ``str`` enums whose values are the words as they were written before, so a
pipeline YAML, a checkpoint or a log line reads the same, and a comparison with the word
(``kind == "merge"``) still holds; the code names them by member, and mypy checks it.
"""

from __future__ import annotations

import difflib
from enum import Enum

from sparkcdc.errors import ConfigError


class Word(str, Enum):
    """A ``str`` enum that prints as its word on every Python (3.12 changed how mixed-in
    enums print); the base of the sinks' enums."""

    def __str__(self) -> str:
        return str(self.value)

    def __format__(self, spec: str) -> str:
        return format(str(self.value), spec)


class SinkType(Word):
    """A sink's type: the YAML's ``sink.type``, ``sinks.create``'s first argument, and the
    key of the registry (``sinks/registry.py``) that finds its class."""

    CONSOLE = "console"
    DELTA = "delta"
    FILES = "files"
    ICEBERG = "iceberg"
    KAFKA = "kafka"
    MYSQL = "mysql"
    POSTGRES = "postgres"

    @property
    def requirement(self) -> str | None:
        """What ``pip install`` adds for the sink's driver (the package's extra), or None
        for a sink that needs nothing beyond sparkcdc's own dependencies."""
        return _REQUIREMENTS.get(self)

    @classmethod
    def parse(cls, text: object) -> SinkType:
        """The type a word names, or a ``ConfigError`` listing the types (with the closest
        one for a misspelt word)."""
        if isinstance(text, SinkType):
            return text
        try:
            return cls(str(text))
        except ValueError:
            names = [t.value for t in cls]
            close = difflib.get_close_matches(str(text), names, n=1, cutoff=0.4)
            hint = f"did you mean '{close[0]}'? " if close else ""
            raise ConfigError(f"unknown sink type {str(text)!r}",
                              fix=f"{hint}sink types: {', '.join(sorted(names))}") from None


_REQUIREMENTS: dict[SinkType, str] = {
    SinkType.DELTA: "sparkcdc[delta]",
    SinkType.ICEBERG: "sparkcdc[iceberg]",
    SinkType.POSTGRES: "sparkcdc[postgres]",
    SinkType.MYSQL: "pymysql",
    SinkType.KAFKA: "sparkcdc[kafka]",
}


class SinkKind(Word):
    """What a target holds, which decides what it is handed: a ``merge`` sink holds the
    source's rows and takes a ``ChangeSet`` (``Sink.write``); a ``changelog`` sink holds
    the changes and takes the change rows (``Sink.write_changelog``)."""

    MERGE = "merge"
    CHANGELOG = "changelog"
