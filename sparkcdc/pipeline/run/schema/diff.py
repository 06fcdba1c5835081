"""What changed between two schemas of a table: columns added, dropped, retyped, renamed
(renames as the source read them from the DDL the stream carried, never guessed) and
whether the primary key changed. The pipeline's stream finds the schemas and the DDL in
binlog order (``run/schema_events.py``); the target's changes follow from the diff
(``schema/behavior.py``).
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass

from sparkcdc.core.schema import TableSchema
from sparkcdc.errors import SchemaError
from sparkcdc.mysql.port import STRING, parse_column_type


@dataclass(frozen=True)
class Diff:
    added: tuple[str, ...] = ()
    dropped: tuple[str, ...] = ()
    modified: tuple[tuple[str, str, str], ...] = ()  # (column, old type, new type)
    key_changed: bool = False
    renamed: tuple[tuple[str, str], ...] = ()  # (old name, new name), found in the DDL

    def __bool__(self) -> bool:
        return bool(self.added or self.dropped or self.modified or self.key_changed
                    or self.renamed)

    def with_renames(self, renames: Iterable[tuple[str, str]]) -> Diff:
        """The diff with the ``(old, new)`` column renames the DDL made (``Ddl.renames``,
        in order): a column dropped and one added are a rename when a statement says so
        (``RENAME COLUMN a TO b``, ``CHANGE [COLUMN] a b ...``), not a guess from names or
        positions."""
        pairs = []
        for said_old, said_new in renames:
            old = next((d for d in self.dropped if d.lower() == said_old.lower()), None)
            new = next((a for a in self.added if a.lower() == said_new.lower()), None)
            if old and new and (old, new) not in pairs:
                pairs.append((old, new))
        if not pairs:
            return self
        gone = {o for o, _ in pairs}
        came = {n for _, n in pairs}
        return Diff(tuple(a for a in self.added if a not in came),
                    tuple(d for d in self.dropped if d not in gone), self.modified,
                    self.key_changed, tuple(pairs))

    def describe(self) -> str:
        parts = [f"renamed {a} to {b}" for a, b in self.renamed]
        if self.added:
            parts.append("added " + ", ".join(self.added))
        if self.dropped:
            parts.append("dropped " + ", ".join(self.dropped))
        for c, a, b in self.modified:
            parts.append(f"{c} {a} -> {b}")
        if self.key_changed:
            parts.append("primary key changed")
        return "; ".join(parts)


def diff(old: TableSchema, new: TableSchema) -> Diff:
    o = {c.name: c.column_type for c in old.columns}
    n = {c.name: c.column_type for c in new.columns}
    return Diff(tuple(c for c in n if c not in o), tuple(c for c in o if c not in n),
                tuple((c, o[c], n[c]) for c in n if c in o and not _same_type(o[c], n[c])),
                tuple(old.primary_key) != tuple(new.primary_key))


def _same_type(a: str, b: str) -> bool:
    """Whether two spellings of a column type hold the same values: ``int(11)`` (MariaDB's
    information_schema) is ``int`` (a schema read from a table map, or MySQL 8's), and a
    text column's declared length is no change of its values."""
    if a == b:
        return True
    from dataclasses import replace


    try:
        ta, tb = parse_column_type(a), parse_column_type(b)
    except SchemaError:
        return False
    if ta.kind == tb.kind == STRING:
        ta, tb = replace(ta, length=None), replace(tb, length=None)
    return ta == tb
