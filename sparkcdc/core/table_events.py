"""What happened to a captured table itself, at its place in the binlog, as typed values.

The source builds them (its SQL knowledge stays in the source: ``mysql/ddl_events.py``
reads a DDL statement's text once, for each captured table it names) and the pipeline
matches on their types; nothing past the source reads a statement's text for its meaning.
So the runtime learns what a DDL did to a table the way Flink CDC's learns it from typed
``SchemaChangeEvent``s (a table id, and what the change says: the new name of a renamed
table, the columns a statement renamed).

A reader asked for table events (``BinlogReader(table_events=True)``) yields them among the
change records, in binlog order, so the rows before one and after one can be told apart.
Every event's ``offset`` has ``rows`` 0 and sorts before the rows of the event it precedes
(``seq``: its place among the table's rows, a snapshot sub-order).

``to_dict``/``from_dict`` are how an event crosses from the Spark source's tasks to the
pipeline's driver (``spark/rows.event_batch``); the statement's text travels as data: a
changelog target may announce it as it was written, a message names a TRUNCATE by it.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, ClassVar

from sparkcdc.core.offsets import BinlogOffset
from sparkcdc.core.records import SEQ_SNAPSHOT, seq_number
from sparkcdc.core.schema import TableId, TableSchema

Renames = tuple[tuple[str, str], ...]


@dataclass(frozen=True, slots=True)
class Ddl:
    """A DDL statement that leaves the table under its name, as the source read it: its
    text, the ``(old, new)`` columns it renamed (which the schemas before and after it
    cannot tell from a column dropped and one added), and whether it is an online schema
    change tool's swap of the table (gh-ost, pt-online-schema-change: the swapped-in copy
    may hold new values in every column)."""

    statement: str
    renames: Renames = ()
    swap: bool = False


@dataclass(frozen=True, slots=True)
class TableEvent:
    """Something that happened to the table ``table_id`` at ``offset`` (commit time
    ``ts_ms``); the subclasses say what."""

    table_id: TableId
    offset: BinlogOffset
    ts_ms: int
    kind: ClassVar[str] = ""

    @property
    def seq(self) -> int:
        """The event's ``_seq``: before the rows of the binlog event it precedes."""
        return seq_number(self.offset, SEQ_SNAPSHOT)

    def to_dict(self) -> dict[str, Any]:
        return {"kind": self.kind, "database": self.table_id.database,
                "table": self.table_id.table, "offset": self.offset.to_dict(),
                "op_ts_ms": self.ts_ms, **self._body()}

    def _body(self) -> dict[str, Any]:
        return {}

    @staticmethod
    def from_dict(d: dict[str, Any]) -> TableEvent:
        """The event ``to_dict`` gave (a kind it does not know is a ``ValueError``)."""
        cls = _KINDS.get(d.get("kind", ""))
        if cls is None:
            raise ValueError(f"unknown table event kind {d.get('kind')!r}")
        return cls._from(TableId(d["database"], d["table"]), BinlogOffset.from_dict(d["offset"]),
                         int(d["op_ts_ms"]), d)

    @classmethod
    def _from(cls, t: TableId, at: BinlogOffset, ts: int, d: dict[str, Any]) -> TableEvent:
        return cls(t, at, ts)


@dataclass(frozen=True, slots=True)
class NewSchema(TableEvent):
    """The table's rows from here on have ``schema``, learned from the table map of its
    next row event (a DDL changed it, here or before the stream's start)."""

    schema: TableSchema
    kind: ClassVar[str] = "schema"

    def _body(self) -> dict[str, Any]:
        return {"schema": self.schema.to_dict()}

    @classmethod
    def _from(cls, t: TableId, at: BinlogOffset, ts: int, d: dict[str, Any]) -> TableEvent:
        return cls(t, at, ts, TableSchema.from_dict(d["schema"]))


@dataclass(frozen=True, slots=True)
class SchemaChanged(TableEvent):
    """A DDL statement that names the table and leaves it under its name (an ALTER, an
    index, ...): the columns it renamed; the schema it made comes with the table's next
    rows (``NewSchema``)."""

    ddl: Ddl
    kind: ClassVar[str] = "ddl"

    def _body(self) -> dict[str, Any]:
        return {"statement": self.ddl.statement,
                "renames": [list(r) for r in self.ddl.renames]}

    @classmethod
    def _from(cls, t: TableId, at: BinlogOffset, ts: int, d: dict[str, Any]) -> TableEvent:
        return cls(t, at, ts, _ddl(d))


@dataclass(frozen=True, slots=True)
class TableTruncated(TableEvent):
    """A ``TRUNCATE TABLE`` of the table: its rows before here are gone (it writes no row
    events). ``statement``: its text, for the messages."""

    statement: str
    kind: ClassVar[str] = "truncate"

    def _body(self) -> dict[str, Any]:
        return {"statement": self.statement}

    @classmethod
    def _from(cls, t: TableId, at: BinlogOffset, ts: int, d: dict[str, Any]) -> TableEvent:
        return cls(t, at, ts, d["statement"])


@dataclass(frozen=True, slots=True)
class TableDropped(TableEvent):
    """The table was dropped (``DROP TABLE``, or ``DROP DATABASE`` of its database): its
    rows before here are its last."""

    kind: ClassVar[str] = "dropped"


@dataclass(frozen=True, slots=True)
class TableRenamed(TableEvent):
    """The table was renamed to ``to`` (a chain ``a TO b, b TO c`` followed to its end):
    its rows before here are its last under its old name."""

    to: TableId
    kind: ClassVar[str] = "renamed"

    def _body(self) -> dict[str, Any]:
        return {"to": str(self.to)}

    @classmethod
    def _from(cls, t: TableId, at: BinlogOffset, ts: int, d: dict[str, Any]) -> TableEvent:
        return cls(t, at, ts, TableId.parse(d["to"]))


@dataclass(frozen=True, slots=True)
class TablesSwapped(TableEvent):
    """An online schema change tool's swap of the table: in one statement the table was
    renamed away to ``to`` (one of its helper names) and its swapped-in copy took its name.
    Read as an ALTER of the table where the source reads such tools
    (``scan.parse.online.schema.changes.enabled``: ``ddl``), else as the rename it also is."""

    to: TableId
    ddl: Ddl
    kind: ClassVar[str] = "swapped"

    def _body(self) -> dict[str, Any]:
        return {"to": str(self.to), "statement": self.ddl.statement,
                "renames": [list(r) for r in self.ddl.renames]}

    @classmethod
    def _from(cls, t: TableId, at: BinlogOffset, ts: int, d: dict[str, Any]) -> TableEvent:
        return cls(t, at, ts, TableId.parse(d["to"]), _ddl(d, swap=True))


def _ddl(d: dict[str, Any], swap: bool = False) -> Ddl:
    return Ddl(d["statement"], tuple((str(a), str(b)) for a, b in d.get("renames") or ()),
               swap)


_KINDS: dict[str, type[TableEvent]] = {c.kind: c for c in (
    NewSchema, SchemaChanged, TableTruncated, TableDropped, TableRenamed, TablesSwapped)}
