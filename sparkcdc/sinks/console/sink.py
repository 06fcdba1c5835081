"""Prints each batch's net changes; the applied table lives in this process's memory.

For debugging a stream by eye, and as the in-memory sink of fast pipeline tests: it applies
the same ``ChangeSet`` semantics as the real targets, with nothing to set up.
"""

from __future__ import annotations

import sys
from collections.abc import Mapping
from typing import Any, TextIO

import pyarrow as pa

from sparkcdc.sinks.base import (
    AMEND,
    CLOSE,
    DELETE,
    END_AT,
    PATCH,
    START_AT,
    UPSERT,
    VERSION,
    ChangeSet,
    Sink,
    WriteResult,
)
from sparkcdc.sinks.capabilities import Capabilities, Emptying
from sparkcdc.sinks.console import config
from sparkcdc.sinks.console.config import ConsoleConfig
from sparkcdc.sinks.evolution import EVERY_CHANGE
from sparkcdc.sinks.kinds import SinkKind, SinkType


class ConsoleSink(Sink):
    type = SinkType.CONSOLE
    capabilities = Capabilities(
        kind=SinkKind.MERGE, writer="the console", replaces_ranges=True,
        empties=Emptying.ROWS, schema_changes=EVERY_CHANGE,  # in memory, rows of any shape
        no_layout="the console sink prints rows: nothing is stored")
    option_spec = config.OPTIONS
    target_options = staticmethod(config.target_options)  # how it names a target

    def __init__(self, config: ConsoleConfig | None = None, out: TextIO | None = None):
        self.config = config or ConsoleConfig()
        self.out = out
        self._last: int | None = None
        self._schema: pa.Schema | None = None
        self._rows: dict[tuple, dict] = {}  # SCD1: key -> row
        self._versions: list[dict] = []  # SCD2: history rows

    @classmethod
    def from_options(cls, options: Mapping[str, Any]) -> ConsoleSink:
        return cls(ConsoleConfig.parse(options))

    def last_batch_id(self) -> int | None:
        return self._last

    def _print(self, text: str) -> None:
        print(text, file=self.out or sys.stdout)

    def write(self, changes: ChangeSet, batch_id: int) -> WriteResult:
        if self._last is not None and batch_id <= self._last:
            return WriteResult(batch_id, skipped=True)
        self._schema = changes.target_schema
        counts = changes.counts()
        self._print(f"-- batch {batch_id}: " + (", ".join(
            f"{n} {op}" for op, n in sorted(counts.items())) or "no changes"))
        rows = changes.table.to_pylist()
        for row in rows[: self.config.num_rows]:
            self._print("  " + _fmt(row))
        if 0 < self.config.num_rows < len(rows):
            self._print(f"  ... {len(rows) - self.config.num_rows} more")
        key = lambda r: tuple(r[k] for k in changes.keys)
        names = changes.target_schema.names
        if changes.scd_type == 1:
            self._clear(changes)
            for r in rows:
                op, k = r["__op"], key(r)
                if op == DELETE:
                    self._rows.pop(k, None)
                elif op == UPSERT or k not in self._rows:
                    self._rows[k] = {n: r[n] for n in names}
                elif op == PATCH:
                    old = self._rows[k]
                    self._rows[k] = {n: old[n] if r[n] is None else r[n] for n in names}
        else:
            for r in rows:
                if r["__op"] in (CLOSE, AMEND):
                    for v in self._versions:
                        if key(v) == key(r) and v[END_AT] is None:
                            if r["__op"] == AMEND:
                                v.update({n: r[n] for n in names if n != START_AT})
                            v[END_AT] = r[END_AT]
            self._versions += [{n: r[n] for n in names} for r in rows if r["__op"] == VERSION]
        self._last = batch_id
        if self.config.show_table:
            self._print(f"-- table after batch {batch_id}:")
            for row in self._current():
                self._print("  " + _fmt(row))
        return WriteResult(batch_id, counts=counts)

    def _clear(self, changes: ChangeSet) -> None:
        """The held rows in the ranges of chunks read again, gone (``ChangeSet.replaces``:
        the batch's rows hold those ranges anew)."""
        for r in changes.replaces:
            held = list(self._rows.items())
            if not held:
                return
            values = pa.array([row[r.column] for _, row in held],
                              changes.table.schema.field(r.column).type)
            inside = r.holds(values).to_pylist()
            self._rows = {k: row for (k, row), gone in zip(held, inside) if not gone}

    def _current(self) -> list[dict]:
        return list(self._rows.values()) if not self._versions else list(self._versions)

    def empty(self) -> None:
        self._rows.clear()
        self._versions.clear()

    def read(self) -> pa.Table:
        if self._schema is None:
            return pa.table({})
        return pa.Table.from_pylist(self._current(), schema=self._schema)


def _fmt(row: dict) -> str:
    return " ".join(f"{k}={v!r}" for k, v in row.items())
