"""Table identities and schemas, as plain values that pickle and round-trip through JSON.

A column keeps the MySQL type as the server spells it (``COLUMN_TYPE`` in
information_schema, e.g. ``decimal(65,30) unsigned``); the dialect parses it into a
``MySQLType`` that decides the Arrow type and the canonical Python value. Both read paths
(snapshot and binlog) produce the same canonical values, so rows from either compare equal.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any


@dataclass(frozen=True, order=True)
class TableId:
    database: str
    table: str

    def __str__(self) -> str:
        return f"{self.database}.{self.table}"

    @classmethod
    def parse(cls, s: str) -> TableId:
        db, _, tbl = s.partition(".")
        return cls(db, tbl)

    def quoted(self) -> str:
        return f"{quote_ident(self.database)}.{quote_ident(self.table)}"


def quote_ident(name: str) -> str:
    """Backtick-quote a MySQL identifier (backticks inside are doubled)."""
    return "`" + name.replace("`", "``") + "`"


@dataclass(frozen=True)
class Column:
    name: str
    column_type: str  # e.g. "int(10) unsigned", "varchar(20)", "decimal(65,30)"
    nullable: bool = True
    charset: str | None = None
    collation: str | None = None

    @property
    def data_type(self) -> str:
        """The bare type name, lower case: ``int``, ``varchar``, ``decimal``..."""
        return self.column_type.split("(")[0].split()[0].lower()

    @property
    def unsigned(self) -> bool:
        return " unsigned" in self.column_type.lower()

    def to_dict(self) -> dict[str, Any]:
        return {"name": self.name, "column_type": self.column_type, "nullable": self.nullable,
                "charset": self.charset, "collation": self.collation}

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> Column:
        return cls(**d)


@dataclass(frozen=True)
class TableSchema:
    table_id: TableId
    columns: tuple[Column, ...]
    primary_key: tuple[str, ...]
    chunk_key: str  # the column chunks are cut along (first PK column or configured)
    extra: dict[str, Any] = field(default_factory=dict, compare=False, hash=False)

    @property
    def column_names(self) -> list[str]:
        return [c.name for c in self.columns]

    def column(self, name: str) -> Column:
        for c in self.columns:
            if c.name == name:
                return c
        raise KeyError(name)

    @property
    def row_key(self) -> tuple[str, ...]:
        """Columns identifying a row: the primary key, else the chunk key (then the user
        promises the chunk key is unique; see the chunk-key option's docs)."""
        return self.primary_key or (self.chunk_key,)

    def to_dict(self) -> dict[str, Any]:
        return {"table": str(self.table_id), "database": self.table_id.database,
                "name": self.table_id.table,
                "columns": [c.to_dict() for c in self.columns],
                "primary_key": list(self.primary_key), "chunk_key": self.chunk_key}

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> TableSchema:
        return cls(TableId(d["database"], d["name"]),
                   tuple(Column.from_dict(c) for c in d["columns"]),
                   tuple(d["primary_key"]), d["chunk_key"])
