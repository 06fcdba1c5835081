"""Schema evolution of a target table, the part every sink shares.

Each sink owns what it can change and the DDL itself, as Flink CDC's ``MetadataApplier``
and dlt's destinations do: the kinds of change it makes are declared on its class
(``Capabilities.schema_changes``, Flink's ``getSupportedSchemaEvolutionTypes``), and it
implements ``Sink.stored_columns``, ``Sink._evolve`` and ``Sink.empty`` (the code in
``sinks/<type>/evolution.py``). What is shared is the vocabulary of a change (``Change``,
``ChangeKind``), the rule that makes every change idempotent (``pending``: a run stopped half
way does it again), and one change made to rows held in Arrow (``arrow_change``), for the
sinks that rewrite a table to change it.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from dataclasses import dataclass

import pyarrow as pa

from sparkcdc.sinks.kinds import Word


class ChangeKind(Word):
    """What a ``Change`` does to a column (the pipeline plans them, a sink makes them)."""

    ADD = "add"
    DROP = "drop"
    RENAME = "rename"
    RETYPE = "retype"
    COPY = "copy"


EVERY_CHANGE = frozenset(ChangeKind)  # a target that can make any change


@dataclass(frozen=True)
class Change:
    """One change to a target table's columns.

    ``add`` a nullable column of ``type``; ``drop`` it; ``rename`` it to ``new_name`` (values
    kept); ``retype`` it to ``type`` (values converted); ``copy`` the values of ``name`` into
    the (added) column ``new_name`` (lenient's rename: the old column stays for old readers).
    ``type`` is the logical Arrow type the stream gives; each target stores it its own way."""

    kind: ChangeKind  # given as the enum or its word ("add")
    name: str
    new_name: str | None = None
    type: pa.DataType | None = None

    def __post_init__(self) -> None:
        object.__setattr__(self, "kind", ChangeKind(self.kind))

    @property
    def target_name(self) -> str:
        """The column a rename or copy writes: its ``new_name``, which those kinds have."""
        assert self.new_name is not None
        return self.new_name

    @property
    def column_type(self) -> pa.DataType:
        """The type an add or retype gives the column: its ``type``, which those kinds have."""
        assert self.type is not None
        return self.type

    def describe(self) -> str:
        return {ChangeKind.ADD: f"add {self.name} {self.type}",
                ChangeKind.DROP: f"drop {self.name}",
                ChangeKind.RENAME: f"rename {self.name} to {self.new_name}",
                ChangeKind.RETYPE: f"change {self.name} to {self.type}",
                ChangeKind.COPY: f"copy {self.name} into {self.new_name}"}[self.kind]


def pending(changes: Iterable[Change], names: set[str]) -> list[Change]:
    """The changes a table with columns ``names`` does not show yet (a column already
    added, renamed or dropped is skipped), so that evolving is idempotent."""
    todo = []
    for c in changes:
        if c.kind is ChangeKind.ADD and c.name in names:
            continue
        if c.kind is ChangeKind.DROP and c.name not in names:
            continue
        if c.kind is ChangeKind.RENAME and (c.name not in names or c.new_name in names):
            continue
        if c.kind in (ChangeKind.COPY, ChangeKind.RETYPE) and c.name not in names:
            continue
        todo.append(c)
    return todo


def arrow_change(data: pa.Table, c: Change,
                 stored: Callable[[pa.DataType], pa.DataType]) -> pa.Table:
    """``data`` with ``c`` made to it; ``stored`` maps a stream type to the sink's own."""
    import pyarrow.compute as pc

    names = data.column_names
    if c.kind is ChangeKind.ADD:
        return data.append_column(pa.field(c.name, stored(c.column_type)),
                                  pa.nulls(data.num_rows, stored(c.column_type)))
    if c.kind is ChangeKind.DROP:
        return data.drop_columns([c.name])
    if c.kind is ChangeKind.RENAME:
        return data.rename_columns([c.target_name if n == c.name else n for n in names])
    if c.kind is ChangeKind.RETYPE:
        i = names.index(c.name)
        return data.set_column(i, pa.field(c.name, stored(c.column_type)),
                               pc.cast(data.column(i), stored(c.column_type)))
    if c.kind is ChangeKind.COPY:
        i = names.index(c.target_name)
        typ = data.schema.field(i).type
        return data.set_column(i, data.schema.field(i),
                               pc.coalesce(data.column(i), pc.cast(data.column(c.name), typ)))
    raise ValueError(c.kind)
