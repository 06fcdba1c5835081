"""Schema evolution of a target table, the part every sink shares.

Each sink owns what it can change and the DDL itself (``Sink.can_change``,
``Sink.stored_columns``, ``Sink.evolve``, ``Sink.empty``; the code in
``sinks/<type>/evolution.py``), as Flink CDC's ``MetadataApplier`` and dlt's destinations
do. What is shared is the vocabulary of a change (``Change``), the rule that makes every
change idempotent (``pending``: a run stopped half way does it again), and one change made
to rows held in Arrow (``arrow_change``), for the sinks that rewrite a table to change it.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from dataclasses import dataclass

import pyarrow as pa


@dataclass(frozen=True)
class Change:
    """One change to a target table's columns.

    ``add`` a nullable column of ``type``; ``drop`` it; ``rename`` it to ``new_name`` (values
    kept); ``retype`` it to ``type`` (values converted); ``copy`` the values of ``name`` into
    the (added) column ``new_name`` (lenient's rename: the old column stays for old readers).
    ``type`` is the logical Arrow type the stream gives; each target stores it its own way."""

    kind: str  # add | drop | rename | retype | copy
    name: str
    new_name: str | None = None
    type: pa.DataType | None = None

    def describe(self) -> str:
        return {"add": f"add {self.name} {self.type}", "drop": f"drop {self.name}",
                "rename": f"rename {self.name} to {self.new_name}",
                "retype": f"change {self.name} to {self.type}",
                "copy": f"copy {self.name} into {self.new_name}"}[self.kind]


def pending(changes: Iterable[Change], names: set[str]) -> list[Change]:
    """The changes a table with columns ``names`` does not show yet (a column already
    added, renamed or dropped is skipped), so that evolving is idempotent."""
    todo = []
    for c in changes:
        if c.kind == "add" and c.name in names:
            continue
        if c.kind == "drop" and c.name not in names:
            continue
        if c.kind == "rename" and (c.name not in names or c.new_name in names):
            continue
        if c.kind in ("copy", "retype") and c.name not in names:
            continue
        todo.append(c)
    return todo


def arrow_change(data: pa.Table, c: Change,
                 stored: Callable[[pa.DataType], pa.DataType]) -> pa.Table:
    """``data`` with ``c`` made to it; ``stored`` maps a stream type to the sink's own."""
    import pyarrow.compute as pc

    names = data.column_names
    if c.kind == "add":
        return data.append_column(pa.field(c.name, stored(c.type)),
                                  pa.nulls(data.num_rows, stored(c.type)))
    if c.kind == "drop":
        return data.drop_columns([c.name])
    if c.kind == "rename":
        return data.rename_columns([c.new_name if n == c.name else n for n in names])
    if c.kind == "retype":
        i = names.index(c.name)
        return data.set_column(i, pa.field(c.name, stored(c.type)),
                               pc.cast(data.column(i), stored(c.type)))
    if c.kind == "copy":
        i = names.index(c.new_name)
        typ = data.schema.field(i).type
        return data.set_column(i, data.schema.field(i),
                               pc.coalesce(data.column(i), pc.cast(data.column(c.name), typ)))
    raise ValueError(c.kind)
