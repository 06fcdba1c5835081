"""Chunk membership of key values, decided the way the server decides it.

The snapshot selects a chunk with ``WHERE k >= s AND k < e``: for text keys the column's
collation decides (``'a' = 'A'`` under ``utf8mb4_general_ci``, accents fold, trailing spaces
pad). Python's ``<`` would disagree, and a disagreement either loses a change or applies it
twice. So text keys are located by one batched query to the server; every other key type
(integers, decimals, dates, times, binary strings) compares in Python exactly as the server
compares it.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from sparkcdc.core.schema import Column, TableSchema
from sparkcdc.core.stream_filter import FinishedSplit, python_locate
from sparkcdc.mysql.connection import ConnectionOptions

TEXT_TYPES = {"char", "varchar", "tinytext", "text", "mediumtext", "longtext", "enum", "set"}
_BATCH = 500


def needs_server(column: Column) -> bool:
    return column.data_type in TEXT_TYPES and (column.collation or "").lower() != "binary"


def text_literal(value: str, column: Column) -> str:
    """A SQL literal for ``value`` in ``column``'s charset and collation (no escaping issues:
    the text travels as hex)."""
    hexed = value.encode("utf-8").hex()
    lit = f"CONVERT(X'{hexed}' USING utf8mb4)"
    if column.charset and column.charset.lower() not in ("utf8mb4",):
        lit = f"CONVERT({lit} USING {column.charset})"
    if column.collation:
        lit += f" COLLATE {column.collation}"
    return lit


class Locator:
    """Locates chunk-key values in finished splits; one connection, opened on first need."""

    def __init__(self, conn: ConnectionOptions):
        self._opts = conn
        self._conn = None

    def close(self) -> None:
        if self._conn is not None:
            self._conn.close()
            self._conn = None

    def _cursor(self):
        if self._conn is None:
            self._conn = self._opts.connect()
        return self._conn.cursor()

    def locate(self, schema: TableSchema, splits: Sequence[FinishedSplit],
               values: Sequence[Any]) -> list[int | None]:
        col = schema.column(schema.chunk_key)
        if not needs_server(col):
            return python_locate(schema, splits, values)
        out: list[int | None] = []
        for i in range(0, len(values), _BATCH):
            out.extend(self._locate_on_server(col, splits, values[i:i + _BATCH]))
        return out

    def in_chunk(self, schema: TableSchema, start: Any, end: Any,
                 values: Sequence[Any]) -> list[bool]:
        split = FinishedSplit(schema.table_id, start, end, hw=None)  # type: ignore[arg-type]
        return [w is not None for w in self.locate(schema, [split], values)]

    def _locate_on_server(self, col: Column, splits: Sequence[FinishedSplit],
                          values: Sequence[Any]) -> list[int | None]:
        first = next((i for i, s in enumerate(splits) if s.start is None), None)
        cases = []
        for i, s in enumerate(splits):
            conds = []
            if s.start is not None:
                conds.append(f"v >= {text_literal(s.start, col)}")
            if s.end is not None:
                conds.append(f"v < {text_literal(s.end, col)}")
            cases.append(f"WHEN {' AND '.join(conds) or 'TRUE'} THEN {i}")
        null_case = f"WHEN v IS NULL THEN {first if first is not None else 'NULL'} "
        rows = " UNION ALL ".join(
            f"SELECT {n} AS n, " + ("NULL" if v is None else text_literal(v, col)) + " AS v"
            for n, v in enumerate(values))
        sql = (f"SELECT n, CASE {null_case}{' '.join(cases)} ELSE NULL END "
               f"FROM ({rows}) AS probe ORDER BY n")
        with self._cursor() as cur:
            cur.execute(sql)
            return [None if r[1] is None else int(r[1]) for r in cur.fetchall()]
