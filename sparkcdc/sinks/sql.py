"""What the SQL sinks (``mysql``, ``postgres``) share: the Arrow kinds of the columns they
store, their type names through one lookup, and each column's value text before a dialect
quotes or escapes it.

Each dialect keeps its real differences explicit in its own module: its type names
(``sql_type`` takes them as a mapping), and how it wraps the plain text (MySQL literals:
quoted, ``X'..'``, ``TRUE``; PostgreSQL COPY text: escaped, ``\\x..``, ``t``, ``Infinity``).
"""

from __future__ import annotations

import datetime as dt
import hashlib
import uuid
from collections.abc import Callable, Mapping
from types import ModuleType
from typing import Any, ClassVar, Generic, TypeVar

import pyarrow as pa
import pyarrow.compute as pc

from sparkcdc.errors import SchemaError
from sparkcdc.sinks.base import KeyRange, KeySlices, Sink, WriteResult

C = TypeVar("C")  # the dialect's config (MySQLConfig, PostgresConfig)
from sparkcdc.sinks.capabilities import Capabilities, Emptying
from sparkcdc.sinks.evolution import EVERY_CHANGE, Change
from sparkcdc.sinks.kinds import SinkKind, Word


def sql_capabilities(writer: str, no_layout: str) -> Capabilities:
    """What a SQL sink can do (``SQLSink``): every operation of a merge sink, from the
    driver and from the tasks, every schema change (its ALTER TABLEs); no table layout of
    Flink's keys (``no_layout``: why not, in the dialect's words)."""
    return Capabilities(
        kind=SinkKind.MERGE, writer=writer, tasks_writer="hash slices, staging tables",
        files_from_tasks=True, changes_from_tasks=True, replaces_ranges=True,
        empties=Emptying.ROWS, schema_changes=EVERY_CHANGE, no_layout=no_layout)


class SQLSink(Sink, Generic[C]):
    """The base of the SQL sinks: a database the tasks reach as the driver does, so every
    target takes the rows of its snapshot chunks and its changes from Spark tasks (they
    load staging tables; the driver applies them in one transaction with the batch id).
    A table without a key has nothing to slice its changes by. Each dialect declares its
    ``capabilities`` with ``sql_capabilities``."""

    # the dialect's evolution module (sinks/<type>/evolution.py): its stored_columns,
    # evolve and empty, each given the sink
    evolution: ClassVar[ModuleType]

    def __init__(self, config: C) -> None:
        """What every SQL sink keeps between calls: its config, its database's driver
        module (``drivers``: pymysql, psycopg), its connection, opened on first use."""
        self.config: C = config
        self.driver: Any = self.load_drivers()[0]
        self._conn: Any = None
        self._keys: tuple[str, ...] = ()  # the keys ``new_rows`` saw (``write_files``)
        # a batch's staged new rows kept for the transaction of its other changes
        self._pending: tuple[int, list[dict[str, Any]], pa.Schema] | None = None
        self._key_followed: tuple[str, ...] | None = None  # the key _follow_key saw
        # the last cut of the keys (``plan_changes``, asked before every batch) and what
        # it was asked for: the target made and checked for those columns
        self._planned: tuple[tuple[Any, ...], KeySlices] | None = None

    @classmethod
    def may_take_files(cls, options: Mapping[str, Any]) -> bool:
        return True

    def takes_files(self) -> bool:
        return True

    @classmethod
    def may_take_changes(cls, options: Mapping[str, Any]) -> bool:
        return True

    def takes_changes(self, keys: tuple[str, ...]) -> bool:
        return bool(keys)

    def plan_changes(self, keys: tuple[str, ...], schema: pa.Schema,
                     slices: int) -> KeySlices:
        """Slices by a hash of the first key column (``KeySlices.hashed``): a table has no
        stored layout a slice could own (its server finds a key's row by its index), and a
        hash spreads any keys evenly with nothing read first. The target is made here if
        absent (``_make_target``), so that the tasks' staging tables take its types; once
        made and checked for these columns, not again (a batch asks before it runs)."""
        asked = (tuple(keys), schema, slices)
        if self._planned is None or self._planned[0] != asked:
            self._make_target(keys, schema)
            self._planned = (asked, KeySlices.hashed(keys[0], slices))
        return self._planned[1]

    def _make_target(self, keys: tuple[str, ...], schema: pa.Schema) -> None:
        """The target made if absent, with the columns of ``schema`` and key ``keys``."""
        raise NotImplementedError

    def drop_uncommitted(self, batch_id: int) -> None:
        self._drop_leftovers(batch_id)

    def _committed(self, batch_id: int, done: bool, written: list[dict[str, Any]],
                   staged: int, cleared: int) -> WriteResult:
        """After a batch's changes were applied (``done``) or found applied: the staging
        tables left behind dropped, and what the tasks' ``written`` descriptions say was
        done."""
        self._drop_leftovers(batch_id)
        if not done:
            return WriteResult(batch_id, skipped=True)
        return WriteResult(batch_id, counts={
            "upsert": sum(int(w.get("upserts", 0)) for w in written),
            "delete": sum(int(w.get("deletes", 0)) for w in written),
            "staging tables": sum(1 for w in written if w.get("stage")),
            **({"staged new rows": staged} if staged else {}),
            **({"rows cleared": cleared} if cleared else {})})

    def _drop_leftovers(self, batch_id: int) -> int:
        """This writer's staging tables of ``batch_id`` and before, dropped; how many."""
        raise NotImplementedError

    # -- schema evolution (the dialect's evolution.py, its ``evolution``) ------------------

    def stored_columns(self) -> pa.Schema | None:
        return self.evolution.stored_columns(self)

    def _evolve(self, changes: list[Change], keys: tuple[str, ...]) -> None:
        self.evolution.evolve(self, changes, keys)

    def empty(self) -> None:
        self.evolution.empty(self)


def arrow_kind(t: pa.DataType) -> str | None:
    """The kind of column an SQL sink stores ``t`` as, or None for a type it cannot store:
    int8/16/32/64, decimal, float32/64, boolean, binary, string, date, duration,
    timestamp (naive) or timestamptz."""
    for kind, test in _KINDS:
        if test(t):
            return "timestamptz" if kind == "timestamp" and t.tz else kind
    return None


_KINDS = (
    ("int8", pa.types.is_int8), ("int16", pa.types.is_int16), ("int32", pa.types.is_int32),
    ("int64", pa.types.is_int64), ("decimal", pa.types.is_decimal),
    ("float32", pa.types.is_float32), ("float64", pa.types.is_float64),
    ("boolean", pa.types.is_boolean),
    ("binary", lambda t: pa.types.is_binary(t) or pa.types.is_large_binary(t)),
    ("string", lambda t: pa.types.is_string(t) or pa.types.is_large_string(t)),
    ("date", pa.types.is_date), ("duration", pa.types.is_duration),
    ("timestamp", pa.types.is_timestamp),
)


def column_kind(col: pa.ChunkedArray | pa.Array, sink: str) -> tuple[pa.Array, str]:
    """A column in one piece and its ``arrow_kind``; an error for a kind ``sink`` cannot
    write."""
    col = col.combine_chunks() if isinstance(col, pa.ChunkedArray) else col
    kind = arrow_kind(col.type)
    if kind is None:
        raise SchemaError(f"the {sink} sink cannot write Arrow type {col.type}",
                          fix="cast the column or drop it with except_column_list")
    return col, kind


def sql_type(t: pa.DataType, names: Mapping[str, str], sink: str) -> str:
    """``t``'s column type in a dialect that names each ``arrow_kind`` in ``names``
    (``{precision}`` and ``{scale}`` filled in for decimals)."""
    kind = arrow_kind(t)
    if kind is None:
        raise SchemaError(f"the {sink} sink cannot store Arrow type {t}",
                          fix="cast the column or drop it with except_column_list")
    if kind == "decimal":
        return names[kind].format(precision=t.precision, scale=t.scale)
    return names[kind]


def time_text(v: dt.timedelta | None) -> str | None:
    """A duration as ``[-]H:MM:SS.ffffff``, which MySQL TIME and PostgreSQL interval read."""
    if v is None:
        return None
    us = v // dt.timedelta(microseconds=1)
    sign, us = ("-" if us < 0 else ""), abs(us)
    s, frac = divmod(us, 1_000_000)
    return f"{sign}{s // 3600}:{s // 60 % 60:02d}:{s % 60:02d}.{frac:06d}"


def plain_text(col: pa.Array, kind: str) -> pa.Array:
    """One column's values as text both dialects read, before quoting or escaping (nulls
    stay null); booleans are left to the dialect. Built with Arrow compute, not per row,
    except binary (hex) and durations."""
    if kind in ("float32", "float64"):
        # float32 through its exact double value: "3.4028235e+38" (the shortest float32
        # text) reads as a double above FLT_MAX, which MySQL rejects for FLOAT; PostgreSQL's
        # real rounds the double back to the same float
        return pc.cast(pc.cast(col, pa.float64()), pa.string())
    if kind == "binary":
        return pa.array([None if b is None else b.hex() for b in col.to_pylist()], pa.string())
    if kind in ("timestamp", "timestamptz"):
        naive = pc.cast(col, pa.timestamp(col.type.unit)) if col.type.tz else col  # UTC
        return pc.strftime(naive, format="%Y-%m-%d %H:%M:%S")
    if kind == "duration":
        return pa.array([time_text(v) for v in col.to_pylist()], pa.string())
    return pc.cast(col, pa.string())  # integers, decimals, strings, dates


def range_condition(r: KeyRange, column: str) -> tuple[str, list[Any]]:
    """``r`` as a ``WHERE`` condition on ``column`` (quoted already) with ``%s``
    placeholders (psycopg's and PyMySQL's), and their values: the target compares the
    bounds, ints, Decimals or dates, in their own order, as the source does."""
    conds, args = [], []
    for op, v in ((">=", r.start), ("<", r.end)):
        if v is not None:
            conds.append(f"{column} {op} %s")
            args.append(v)
    if r.start is None and r.end is not None:
        return f"({conds[0]} OR {column} IS NULL)", args
    return "(" + (" AND ".join(conds) or "TRUE") + ")", args


def clear_ranges(cur: Any, target: str, quote: Callable[[str], str],
                 replaces: tuple[KeyRange, ...]) -> int:
    """In a batch's transaction, before its rows are applied: the target's rows in the
    ranges of chunks read again deleted (``ChangeSet.replaces``: the batch's rows hold the
    ranges anew). ``target`` and ``quote``: the dialect's quoted name and identifier
    quoting. How many rows went."""
    n = 0
    for r in replaces:
        cond, args = range_condition(r, quote(r.column))
        cur.execute(f"DELETE FROM {target} WHERE {cond}", args)
        n += max(0, cur.rowcount)
    return n


# -- staging tables that Spark tasks load and the driver applies (postgres/staging.py) ----------

class StageKind(Word):
    """What a staging table holds; its word is part of the table's name."""

    FILES = "f"  # a snapshot's new rows
    CHANGES = "c"  # a key slice's changes


def staging_prefix(app_id: str, schema: str, table: str) -> str:
    """The start of every staging table name of one writer (app id) of one target
    (``schema``: the schema or database holding it)."""
    digest = hashlib.sha256(f"{app_id}\0{schema}\0{table}".encode()).hexdigest()[:10]
    return f"sc_{digest}_b"


def staging_name(app_id: str, schema: str, table: str, batch_id: int,
                 kind: StageKind) -> str:
    """A new staging table's name: at most 63 bytes (PostgreSQL's identifier limit; MySQL's
    is 64), its writer's prefix, the batch id, ``kind`` and a uuid."""
    return f"{staging_prefix(app_id, schema, table)}{batch_id:010d}_{kind}_{uuid.uuid4().hex}"


def staging_batch(stage: str, start: str) -> int | None:
    """The batch id in the name of a staging table that begins with ``start`` (a
    ``staging_prefix``), or None for a name of another shape."""
    if not stage.startswith(start):
        return None
    head = stage[len(start):].split("_", 1)[0]
    return int(head) if head.isdigit() else None
