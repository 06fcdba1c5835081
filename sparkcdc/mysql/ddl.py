"""Which tables and columns a DDL statement names, read from its text.

The binlog carries each DDL as the statement's text and its default database (a QUERY
event). Names here
are *resolved*, never searched for as text: a MySQL target on the source server writes its
own DDL (``CREATE TABLE `shop_t`.`t` ...``) into the same binlog, and a text search for
``shop`` and ``t`` once took that for a change of ``shop.t``. Names compare without case, so a
doubt counts as a mention: a DDL wrongly missed would lose a schema change, one wrongly
counted only makes the reader look at the table again.
"""

from __future__ import annotations

import re
from collections.abc import Mapping

DDL = re.compile(r"^\s*(?:/\*.*?\*/\s*)*(ALTER|RENAME|TRUNCATE|DROP|CREATE)\b",
                 re.IGNORECASE | re.DOTALL)
USE = re.compile(r"^use\s+`((?:[^`]|``)+)`;\s*", re.IGNORECASE)
_NAME = r"(`(?:[^`]|``)+`|[A-Za-z0-9_$]+)"
_QUALIFIED = re.compile(rf"{_NAME}\s*\.\s*{_NAME}")
_BARE = re.compile(r"`((?:[^`]|``)+)`|([A-Za-z0-9_$]+)")
_RENAME_COLUMN = re.compile(rf"\bRENAME\s+COLUMN\s+(?:IF\s+EXISTS\s+)?{_NAME}\s+TO\s+{_NAME}",
                            re.IGNORECASE)
_CHANGE_COLUMN = re.compile(rf"\bCHANGE\s+(?:COLUMN\s+)?(?:IF\s+EXISTS\s+)?{_NAME}\s+{_NAME}",
                            re.IGNORECASE)
_RENAME_TABLE = re.compile(r"^\s*RENAME\s+TABLES?\s+(.*)$", re.IGNORECASE | re.DOTALL)
_ALTER_RENAME = re.compile(rf"^\s*ALTER\s+(?:ONLINE\s+)?(?:IGNORE\s+)?TABLE\s+"
                           rf"{_NAME}(?:\.{_NAME})?\s+RENAME\s+(?:TO\s+|AS\s+)?"
                           rf"{_NAME}(?:\.{_NAME})?\s*;?\s*$", re.IGNORECASE | re.DOTALL)
_PAIR = re.compile(rf"{_NAME}(?:\.{_NAME})?\s+TO\s+{_NAME}(?:\.{_NAME})?", re.IGNORECASE)
_DROP_TABLE = re.compile(r"^\s*DROP\s+TABLES?\s+(?:IF\s+EXISTS\s+)?(.*?)\s*(?:RESTRICT|CASCADE)?"
                         r"\s*;?\s*$", re.IGNORECASE | re.DOTALL)
_DROP_DATABASE = re.compile(rf"^\s*DROP\s+(?:DATABASE|SCHEMA)\s+(?:IF\s+EXISTS\s+)?{_NAME}\s*;?\s*$",
                            re.IGNORECASE)
_COMMENT = re.compile(r"/\*.*?\*/", re.DOTALL)
_TRUNCATE = re.compile(
    r"^\s*TRUNCATE\s+(?:TABLE\s+)?(`(?:[^`]|``)+`|[A-Za-z0-9_$]+)(?:\.(`(?:[^`]|``)+`|"
    r"[A-Za-z0-9_$]+))?\s*;?\s*$", re.IGNORECASE)


def ident(s: str) -> str:
    """An identifier as the server names it: backticks removed, doubled ones undone."""
    return s[1:-1].replace("``", "`") if s.startswith("`") else s


def is_ddl(sql: str) -> bool:
    return DDL.match(sql) is not None


def named_tables(sql: str, current_db: str | None,
                 candidates: Mapping[tuple[str, str], object]) -> list[tuple[str, str]]:
    """The ``(db, table)`` keys of ``candidates`` the statement names, parsed once for all
    (a DDL is checked against every captured table): a qualified ``db.table`` anywhere, or
    the bare ``table`` when the statement's default database is ``db`` or unknown."""
    body = USE.sub("", sql)
    qualified = {(ident(m.group(1)).lower(), ident(m.group(2)).lower())
                 for m in _QUALIFIED.finditer(body)}
    bare = _bare_names(body)
    cur = current_db.lower() if current_db is not None else None
    out = []
    for key in candidates:
        db, table = key[0].lower(), key[1].lower()
        if (db, table) in qualified or ((cur is None or cur == db) and table in bare):
            out.append(key)
    return out


def _bare_names(body: str) -> set[str]:
    return {(a.replace("``", "`") if a else b).lower()
            for a, b in _BARE.findall(_QUALIFIED.sub(" ", body))}


def column_renames(statements: list[str]) -> list[tuple[str, str]]:
    """(old, new) column names renamed by ALTER TABLE statements, in order."""
    out = []
    for sql in statements:
        for rx in (_RENAME_COLUMN, _CHANGE_COLUMN):
            for m in rx.finditer(sql):
                a, b = ident(m.group(1)), ident(m.group(2))
                if a != b and b.upper() != "COLUMN":
                    out.append((a, b))
    return out


def _qualified(a: str, b: str | None, current_db: str | None) -> str:
    return f"{ident(a)}.{ident(b)}" if b else f"{current_db}.{ident(a)}"


def table_renames(sql: str, current_db: str | None) -> list[tuple[str, str]]:
    """(old, new) ``db.table`` names renamed by a RENAME TABLE or ALTER TABLE ... RENAME
    (comments inside it, as gh-ost writes them, are no names)."""
    sql = _COMMENT.sub(" ", sql)
    m = _ALTER_RENAME.match(sql)
    if m:
        return [(_qualified(m.group(1), m.group(2), current_db),
                 _qualified(m.group(3), m.group(4), current_db))]
    m = _RENAME_TABLE.match(sql)
    if not m:
        return []
    return [(_qualified(p.group(1), p.group(2), current_db),
             _qualified(p.group(3), p.group(4), current_db)) for p in _PAIR.finditer(m.group(1))]


def truncated_table(sql: str, current_db: str | None) -> tuple[str | None, str] | None:
    """``(db, table)`` a ``TRUNCATE TABLE`` statement empties (db None when the statement
    names no database and none is current), else None."""
    t = _TRUNCATE.match(sql)
    if not t:
        return None
    if t.group(2):
        return ident(t.group(1)), ident(t.group(2))
    return current_db, ident(t.group(1))


def dropped_tables(sql: str, current_db: str | None) -> list[str]:
    """The ``db.table`` names a ``DROP TABLE`` drops (not ``DROP TEMPORARY TABLE``: a
    temporary table is no captured table). The server's own comment (MariaDB logs
    ``DROP TABLE `t` /* generated by server */``) is no name."""
    m = _DROP_TABLE.match(_COMMENT.sub(" ", sql))
    if not m:
        return []
    return [_qualified(p.group(1), p.group(2), current_db)
            for p in re.finditer(rf"{_NAME}(?:\s*\.\s*{_NAME})?", m.group(1))]


def dropped_database(sql: str) -> str | None:
    """The database a ``DROP DATABASE`` (or ``DROP SCHEMA``) drops, with all its tables."""
    m = _DROP_DATABASE.match(_COMMENT.sub(" ", sql))
    return ident(m.group(1)) if m else None


def table_fate(sql: str, current_db: str | None, table: str) -> tuple[str, str | None] | None:
    """What a DDL statement does to the table ``db.table`` itself: ``("dropped", None)``,
    ``("renamed", new db.table)`` (a chain ``a TO b, b TO c`` followed to its end), or None
    when the table stays where it is. Names compare without case."""
    low = table.lower()
    gone_db = dropped_database(sql)
    if gone_db is not None and gone_db.lower() == low.split(".", 1)[0]:
        return ("dropped", None)
    if any(t.lower() == low for t in dropped_tables(sql, current_db)):
        return ("dropped", None)
    name = table
    for old, new in table_renames(sql, current_db):
        if old.lower() == name.lower():
            name = new
    return ("renamed", name) if name.lower() != low else None
