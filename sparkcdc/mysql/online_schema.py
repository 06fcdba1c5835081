"""Online schema change tools as the binlog shows them (Flink CDC's option
``scan.parse.online.schema.changes.enabled``).

gh-ost and pt-online-schema-change change a table ``t`` without locking it: they create a
helper table with the new structure, copy ``t``'s rows into it while mirroring the changes
made meanwhile (gh-ost from the binlog, pt-online-schema-change by triggers), then swap it
in with one ``RENAME TABLE``: ``t`` to a helper name, the helper to ``t``. The helper tables
are ``_<t>_gho`` (the ghost), ``_<t>_ghc`` (its changelog) and ``_<t>_del`` (the cut-over's
placeholder) for gh-ost; ``_<t>_new`` and, after the swap, ``_<t>_old`` for
pt-online-schema-change.

Read as such, the helpers are no tables of their own (their rows are the tool's copy), and
the swap is an ALTER of ``t``: its target changes for the new structure and takes the
swapped-in table's rows, which the tool may have given new values (a column added with a
default, a retyped column). Without this, the helpers would be synced as tables, and the
swap read as ``t`` renamed away and another table renamed to its name.
"""

from __future__ import annotations

import re
from collections.abc import Iterable

from sparkcdc.core.schema import TableId
from sparkcdc.mysql.ddl import table_renames

_HELPER = re.compile(r"^_(.+)_(gho|ghc|del|new|old)$", re.IGNORECASE)
_SWAPPED_IN = ("gho", "new")  # the helper that becomes the table
_SWAPPED_OUT = ("del", "old")  # the name the table goes to


def helper_of(table: str) -> tuple[str, str] | None:
    """``(the table it serves, its role)`` when ``table`` (a name without its database) is a
    tool's helper name, else None."""
    m = _HELPER.match(table)
    return (m.group(1), m.group(2).lower()) if m else None


def helpers(tables: Iterable[TableId]) -> set[TableId]:
    """The tables among ``tables`` that are helpers of another table among them."""
    tables = list(tables)
    names = {(t.database.lower(), t.table.lower()) for t in tables}
    out = set()
    for t in tables:
        h = helper_of(t.table)
        if h is not None and (t.database.lower(), h[0].lower()) in names:
            out.add(t)
    return out


def swap(sql: str, current_db: str | None, table: str) -> bool:
    """Whether the statement is a tool's swap of ``db.table``: it is renamed to one of its
    helper names and its swapped-in helper is renamed to its name, in one statement."""
    db, _, name = table.partition(".")
    low = table.lower()
    pairs = [(a.lower(), b.lower()) for a, b in table_renames(sql, current_db or db)]
    away = any(a == low and _role(b, name, db) in _SWAPPED_OUT for a, b in pairs)
    into = any(b == low and _role(a, name, db) in _SWAPPED_IN for a, b in pairs)
    return away and into


def _role(full: str, table: str, db: str) -> str | None:
    d, _, t = full.partition(".")
    h = helper_of(t)
    if h is None or d != db.lower() or h[0].lower() != table.lower():
        return None
    return h[1]
