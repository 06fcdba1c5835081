"""Typed options of the ``console`` sink."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from sparkcdc.options import Opt, Options

OPTIONS = {
    "num-rows": Opt("20", "a non-negative integer: change rows printed per batch"),
    "show-table": Opt("false", "true or false: also print the applied table after each batch"),
}


@dataclass(frozen=True)
class ConsoleConfig:
    num_rows: int = 20
    show_table: bool = False

    @classmethod
    def parse(cls, options: Mapping[str, Any]) -> ConsoleConfig:
        o = Options("console sink", OPTIONS, options)
        return cls(num_rows=o.given_integer("num-rows", lo=0), show_table=o.flag("show-table"))


def target_options(options: Mapping[str, str], db: str, table: str) -> dict[str, str]:
    """Every target of a console destination prints to the same console."""
    return dict(options)
