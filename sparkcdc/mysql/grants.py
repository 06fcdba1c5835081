"""What ``SHOW GRANTS`` says a user may do, by scope, read from MySQL's and MariaDB's
spellings.

Validation asks whether the CDC user may read the captured databases and the binlog
(``Grants.can_select``, ``has_global``). Grants can carry password hashes: they are parsed
here, never echoed. A granted role's grants are read by ``server_info`` and merged in
(``Grants.merged``).
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from dataclasses import dataclass

_IDENT = r"(?:`(?:[^`]|``)*`|[^\s.`]+|\*)"
_GRANT_ON = re.compile(
    r"^GRANT\s+(?P<privs>.+?)\s+ON\s+(?:(?:TABLE|FUNCTION|PROCEDURE|PACKAGE(?:\s+BODY)?)\s+)?"
    rf"(?P<db>{_IDENT})\.(?P<tbl>{_IDENT})\s+TO\s+", re.IGNORECASE | re.DOTALL)
_GRANT_ROLE = re.compile(r"^GRANT\s+(?P<roles>.+?)\s+TO\s+", re.IGNORECASE | re.DOTALL)


def _unquote(ident: str) -> str:
    return ident[1:-1].replace("``", "`") if ident.startswith("`") else ident


def _split_privileges(s: str) -> list[str]:
    out: list[str] = []
    cur: list[str] = []
    depth = 0
    for ch in s:
        if ch == "(":
            depth += 1
        elif ch == ")":
            depth -= 1
        if ch == "," and depth == 0:
            out.append("".join(cur))
            cur = []
        else:
            cur.append(ch)
    out.append("".join(cur))
    return [" ".join(p.split()).upper() for p in out if p.strip()]


def _normalize(priv: str) -> str | None:
    if "(" in priv:  # column grants (SELECT (a, b)) do not allow SELECT *
        return None
    if priv in ("ALL", "ALL PRIVILEGES"):
        return "ALL"
    if priv == "BINLOG MONITOR":  # MariaDB 10.5+ name of REPLICATION CLIENT
        return "REPLICATION CLIENT"
    return priv


@dataclass(frozen=True)
class Grants:
    """What ``SHOW GRANTS`` says, by scope; database patterns keep MySQL's ``%``/``_``."""

    global_privileges: frozenset[str] = frozenset()
    database_privileges: tuple[tuple[str, frozenset[str]], ...] = ()  # (db pattern, privs)
    table_privileges: tuple[tuple[str, str, frozenset[str]], ...] = ()  # (db, table, privs)
    roles: tuple[str, ...] = ()

    def merged(self, other: Grants) -> Grants:
        return Grants(self.global_privileges | other.global_privileges,
                      self.database_privileges + other.database_privileges,
                      self.table_privileges + other.table_privileges, self.roles)

    def has_global(self, priv: str, *also: str) -> bool:
        return bool({"ALL", priv, *also} & self.global_privileges)

    def can_select(self, database: str) -> bool:
        if self.has_global("SELECT"):
            return True
        for pattern, privs in self.database_privileges:
            if {"ALL", "SELECT"} & privs and _db_pattern(pattern).fullmatch(database):
                return True
        # table-level SELECT: discovery sees (and captures) only those tables
        return any(db == database and {"ALL", "SELECT"} & privs
                   for db, _t, privs in self.table_privileges)

    def can_select_anything(self) -> bool:
        return self.has_global("SELECT") or any(
            {"ALL", "SELECT"} & p for _d, p in self.database_privileges) or any(
            {"ALL", "SELECT"} & p for _d, _t, p in self.table_privileges)


def _db_pattern(pattern: str) -> re.Pattern:
    """A database name in a grant may hold LIKE wildcards; ``\\_`` and ``\\%`` are literal."""
    out, i = [], 0
    while i < len(pattern):
        ch = pattern[i]
        if ch == "\\" and i + 1 < len(pattern):
            out.append(re.escape(pattern[i + 1]))
            i += 2
            continue
        out.append(".*" if ch == "%" else "." if ch == "_" else re.escape(ch))
        i += 1
    return re.compile("".join(out), re.IGNORECASE | re.DOTALL)


def parse_grants(lines: Iterable[str]) -> Grants:
    """Parse ``SHOW GRANTS`` rows (MySQL and MariaDB spellings); unknown lines are skipped."""
    glob: set[str] = set()
    dbs: list[tuple[str, frozenset[str]]] = []
    tables: list[tuple[str, str, frozenset[str]]] = []
    roles: list[str] = []
    for line in lines:
        m = _GRANT_ON.match(line.strip())
        if m:
            privs = frozenset(p for p in map(_normalize, _split_privileges(m["privs"])) if p)
            db, tbl = m["db"], m["tbl"]
            if db == "*" and tbl == "*":
                glob |= privs
            elif tbl == "*":
                dbs.append((_unquote(db), privs))
            elif db != "*":
                tables.append((_unquote(db), _unquote(tbl), privs))
            continue
        m = _GRANT_ROLE.match(line.strip())
        if m and " ON " not in m["roles"].upper():
            roles.extend(r.strip() for r in m["roles"].split(",") if r.strip())
    return Grants(frozenset(glob), tuple(dbs), tuple(tables), tuple(roles))
