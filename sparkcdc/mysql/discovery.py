"""Which tables are captured, and their schemas, read from ``information_schema``.

Matching follows Flink CDC's MySQL source: ``database-name`` is a regex that must match the
whole database name; ``table-name`` is a regex that must match the whole ``db.table``
(Flink joins the two with ``\\.``), and for convenience a regex matching the bare table
name also selects it; ``exclude`` is matched against ``db.table``. Python's ``re`` syntax,
which agrees with Java's for the usual patterns.

``information_schema`` shows only what the user may see, so the error for "nothing matched"
lists what *is* visible: the usual cause is a typo or a missing grant.
"""

from __future__ import annotations

import logging
import re
from collections import defaultdict
from typing import Any

from sparkcdc.core.schema import Column, TableId, TableSchema, quote_ident
from sparkcdc.errors import ConfigError, SchemaError
from sparkcdc.mysql import online_schema
from sparkcdc.mysql.connection import ConnectionOptions, retry_lost

log = logging.getLogger(__name__)

CHUNK_KEY_OPTION = "scan.incremental.snapshot.chunk.key-column"
SYSTEM_SCHEMAS = frozenset({"mysql", "information_schema", "performance_schema", "sys"})
# MariaDB reports system-versioned tables apart from plain ones; both hold rows to capture
_BASE_TABLE_TYPES = ("BASE TABLE", "SYSTEM VERSIONED")


def parse_chunk_key_option(s: str | None) -> list[tuple[str, str]]:
    """Parse ``scan.incremental.snapshot.chunk.key-column`` into ``(table regex, column)``.

    Flink's format: ``db.table:column`` entries separated by ``;``, where ``db.table`` is a
    regex over ``db.table`` (``shop.orders_\\d+:order_id;shop.users:uid``). An entry without
    ``:`` is a bare column for every captured table (the Flink SQL connector's form). The
    column is what follows the last ``:``, so regexes may use ``(?:...)``.
    """
    out: list[tuple[str, str]] = []
    for raw in (s or "").split(";"):
        entry = raw.strip()
        if not entry:
            continue
        pattern, sep, column = entry.rpartition(":")
        pattern, column = (pattern.strip(), column.strip()) if sep else (".*", entry)
        if len(column) >= 2 and column[0] == column[-1] == "`":
            column = column[1:-1].replace("``", "`")
        if not column or not pattern:
            raise ConfigError(
                f"option {CHUNK_KEY_OPTION} has a malformed entry {entry!r}",
                fix="use 'db.table:column' entries separated by ';', e.g. "
                    "'shop.orders:order_id;shop.logs_\\d+:id'")
        _compile(pattern, CHUNK_KEY_OPTION)
        out.append((pattern, column))
    return out


def _compile(pattern: str, option: str) -> re.Pattern:
    try:
        return re.compile(pattern)
    except re.error as e:
        raise ConfigError(f"option {option} is not a valid regular expression: {pattern!r} "
                          f"({e})", fix=f"fix the regex in {option}") from None


def discover(conn: ConnectionOptions, database_regex: str, table_regex: str,
             exclude: str | None = None,
             chunk_key_columns: dict[str, str] | None = None,
             known: dict[TableId, TableSchema] | None = None,
             skip_helpers: bool = False) -> dict[TableId, TableSchema]:
    """The captured tables and their schemas, in ``(database, table)`` order.

    ``chunk_key_columns`` maps a ``db.table`` regex to a column (see
    ``parse_chunk_key_option``); the first matching entry wins. A table in ``known`` that
    still exists keeps the schema given there, and its columns are not read: a pipeline
    whose stream carries its tables' schema changes asks information_schema only for the
    list of tables and the columns of new ones (at 1,000 tables the columns are most of
    what a look costs the server). ``skip_helpers``: the helper tables of online schema
    change tools are not captured (``online_schema.helpers``).
    """
    db_re = _compile(database_regex, "database-name")
    tbl_re = _compile(table_regex, "table-name")
    ex_re = _compile(exclude, "table-name.exclude") if exclude else None
    key_rules = [(_compile(p, CHUNK_KEY_OPTION), c) for p, c in (chunk_key_columns or {}).items()]
    # a connection lost in the middle (a server restart, a network cut) is retried: the
    # reads are idempotent; then it is a retryable ConnectionFailed, not a driver's error
    return retry_lost(conn, "reading the tables", lambda: _discover(
        conn, database_regex, table_regex, exclude, db_re, tbl_re, ex_re, key_rules,
        known or {}, skip_helpers))


def _discover(conn, database_regex, table_regex, exclude, db_re, tbl_re, ex_re, key_rules,
              known, skip_helpers=False):
    with conn.connect() as c, c.cursor() as cur:
        cur.execute("SELECT TABLE_SCHEMA, TABLE_NAME, TABLE_TYPE FROM information_schema.TABLES")
        visible = [(d, t, ty) for d, t, ty in cur.fetchall() if d.lower() not in SYSTEM_SCHEMAS]
        chosen = sorted(TableId(d, t) for d, t, ty in visible
                        if ty in _BASE_TABLE_TYPES and _selected(d, t, db_re, tbl_re, ex_re))
        if skip_helpers:
            skip = online_schema.helpers(TableId(d, t) for d, t, _ty in visible)
            chosen = [t for t in chosen if t not in skip]
        if not chosen:
            raise _nothing_matched(conn, database_regex, table_regex, exclude, visible)
        unknown = [t for t in chosen if t not in known]
        columns: dict[TableId, list[Column]] = defaultdict(list)
        indexes: dict[TableId, dict[str, tuple[bool, list[str]]]] = defaultdict(dict)
        if unknown:
            where, args = _where(unknown)
            cur.execute(
                "SELECT TABLE_SCHEMA, TABLE_NAME, COLUMN_NAME, COLUMN_TYPE, IS_NULLABLE, "
                "CHARACTER_SET_NAME, COLLATION_NAME FROM information_schema.COLUMNS "
                f"WHERE {where} ORDER BY ORDINAL_POSITION", args)
            for d, t, name, ctype, nullable, charset, collation in cur.fetchall():
                columns[TableId(d, t)].append(Column(name, ctype, nullable == "YES", charset,
                                                     collation))
            cur.execute(
                "SELECT TABLE_SCHEMA, TABLE_NAME, INDEX_NAME, NON_UNIQUE, COLUMN_NAME "
                f"FROM information_schema.STATISTICS WHERE {where} ORDER BY SEQ_IN_INDEX",
                args)
            for d, t, index, non_unique, col in cur.fetchall():
                entry = indexes[TableId(d, t)].setdefault(index, (not int(non_unique), []))
                entry[1].append(col)

        # information_schema is read in three statements, not one snapshot: a table dropped
        # between them shows no columns, or columns but no index. Such a table is left out
        # (the next look sees it gone), not refused as a table without a primary key.
        keyless = [t for t in unknown if columns.get(t) and "PRIMARY" not in indexes.get(t, {})]
        vanished: set[TableId] = set()
        if keyless:
            where, args = _where(keyless)
            cur.execute(f"SELECT TABLE_SCHEMA, TABLE_NAME FROM information_schema.TABLES "
                        f"WHERE {where}", args)
            still = {TableId(d, t) for d, t in cur.fetchall()}
            vanished = {t for t in keyless if t not in still}

    out: dict[TableId, TableSchema] = {}
    for tid in chosen:
        if tid in known:
            out[tid] = known[tid]
            continue
        cols = tuple(columns.get(tid, ()))
        if not cols or tid in vanished:
            log.info("table %s was dropped while the tables were read; left out", tid)
            continue
        idx = indexes.get(tid, {})
        pk = tuple(idx["PRIMARY"][1]) if "PRIMARY" in idx else ()
        chunk_key = _chunk_key(tid, cols, pk, idx, key_rules)
        out[tid] = TableSchema(tid, cols, pk, chunk_key)
    return out


def _where(tables: list[TableId]) -> tuple[str, list[str]]:
    """The WHERE clause that reads the columns of ``tables``: their databases whole when
    most of them are asked for, else the tables by name."""
    databases = sorted({t.database for t in tables})
    if len(tables) > 200:
        return f"TABLE_SCHEMA IN ({','.join(['%s'] * len(databases))})", databases
    pairs = " OR ".join(["(TABLE_SCHEMA = %s AND TABLE_NAME = %s)"] * len(tables))
    return f"({pairs})", [x for t in tables for x in (t.database, t.table)]


def _selected(db: str, table: str, db_re: re.Pattern, tbl_re: re.Pattern,
              ex_re: re.Pattern | None) -> bool:
    full = f"{db}.{table}"
    if not db_re.fullmatch(db):
        return False
    if not (tbl_re.fullmatch(full) or tbl_re.fullmatch(table)):
        return False
    return not (ex_re and ex_re.fullmatch(full))


def _chunk_key(tid: TableId, cols: tuple[Column, ...], pk: tuple[str, ...],
               idx: dict[str, tuple[bool, list[str]]],
               rules: list[tuple[re.Pattern, str]]) -> str:
    full = str(tid)
    names = [c.name for c in cols]
    for pattern, wanted in rules:
        if not (pattern.fullmatch(full) or pattern.fullmatch(tid.table)):
            continue
        # MySQL column names are case-insensitive; keep the table's own spelling
        found = next((n for n in names if n == wanted), None) or next(
            (n for n in names if n.lower() == wanted.lower()), None)
        if found is None:
            raise SchemaError(
                f"chunk key column {wanted!r} configured for table {full} does not exist; "
                f"its columns are: {', '.join(names)}",
                fix=f"set {CHUNK_KEY_OPTION} to one of those columns, e.g. "
                    f"'{full}:{(pk or names or ['id'])[0]}'")
        if not any(cols_[0] == found for _, cols_ in idx.values()):
            log.warning("chunk key %s of %s has no index starting with it: every chunk "
                        "query scans the table", quote_ident(found), full)
        return found
    if pk:
        return pk[0]
    unique = [cols_[0] for name, (is_unique, cols_) in sorted(idx.items()) if is_unique]
    hint = unique[0] if unique else (names[0] if names else "id")
    why = (f"it has a unique index starting with {hint!r}" if unique
           else "pick an indexed column with few duplicates")
    raise SchemaError(
        f"table {full} has no primary key, so sparkcdc cannot tell how to cut it into "
        "chunks or identify its rows",
        fix=f"name a chunk key column with the option {CHUNK_KEY_OPTION}, e.g. "
            f"'{full}:{hint}' ({why}), or add a primary key to the table")


def _nothing_matched(conn: ConnectionOptions, database_regex: str, table_regex: str,
                     exclude: str | None, visible: list[tuple[Any, ...]]) -> SchemaError:
    by_db: dict[str, list[str]] = defaultdict(list)
    for d, t, ty in visible:
        by_db[d].append(t if ty in _BASE_TABLE_TYPES else f"{t} ({ty.lower()})")
    if by_db:
        shown = []
        for d in sorted(by_db)[:20]:
            tables = sorted(by_db[d])
            more = f", ... ({len(tables) - 10} more)" if len(tables) > 10 else ""
            shown.append(f"{d}: {', '.join(tables[:10])}{more}")
        if len(by_db) > 20:
            shown.append(f"... ({len(by_db) - 20} more databases)")
        seen = "; ".join(shown)
    else:
        seen = "none"
    criteria = f"database-name {database_regex!r}, table-name {table_regex!r}"
    if exclude:
        criteria += f", exclude {exclude!r}"
    return SchemaError(
        f"no table visible to {conn.username!r} on {conn.hostname}:{conn.port} matches "
        f"{criteria}. Visible tables: {seen}",
        fix="fix the regexes (both must match whole names; table-name matches 'db.table' or "
            "'table'), or grant SELECT on the wanted database to the CDC user")


def filled_by_server(conn: ConnectionOptions, table_id: TableId,
                     names: list[str]) -> list[str]:
    """Which of a table's columns the server gave a value in the rows it already held when
    they were added: a default other than NULL, NOT NULL (the type's zero), or a generated
    column. ``ADD COLUMN`` logs no row event for those rows, so the target learns their
    values only by reading them (``mysql.snapshot.read_table``). A column gone since is left
    out."""
    if not names:
        return []

    def read() -> list[tuple]:
        with conn.connect() as c, c.cursor() as cur:
            cur.execute("SELECT COLUMN_NAME, COLUMN_DEFAULT, IS_NULLABLE, EXTRA "
                        "FROM information_schema.COLUMNS "
                        "WHERE TABLE_SCHEMA = %s AND TABLE_NAME = %s",
                        (table_id.database, table_id.table))
            return list(cur.fetchall())

    wanted = {n.lower() for n in names}
    out = []
    for name, default, nullable, extra in retry_lost(conn, f"reading {table_id}'s defaults",
                                                     read):
        if str(name).lower() not in wanted:
            continue
        extra = str(extra or "").upper()
        # MariaDB spells a NULL default as the word NULL (a text 'NULL' comes quoted);
        # MySQL gives SQL NULL
        has_default = default is not None and str(default) != "NULL"
        if (str(nullable).upper() == "NO" or has_default
                or any(w in extra for w in ("GENERATED", "VIRTUAL", "PERSISTENT", "STORED"))):
            out.append(str(name))
    return out
