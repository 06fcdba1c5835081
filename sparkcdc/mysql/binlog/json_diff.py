"""Partial JSON updates (``binlog_row_value_options=PARTIAL_JSON``): the diffs a
PARTIAL_UPDATE_ROWS event carries for a JSON column, applied to its before image.

A diff vector is what MySQL's ``Json_diff_vector::write_binary`` writes after the column's
4-byte length: diffs one after the other, each an operation byte (0 REPLACE, 1 INSERT,
2 REMOVE), the path as text (a length-encoded integer, then ``$.a[2]."b c"``...), and for
REPLACE and INSERT the new value in binary JSON (a length-encoded integer, then the value).
``apply`` follows the server's ``apply_json_diffs``: paths are exact (no wildcards, no
auto-wrapping); REPLACE needs the value to exist; INSERT adds an object member that does
not exist yet (kept in MySQL's key order) or inserts into an array at the index (appends
past the end); REMOVE needs the member or element to exist. A diff the server itself
would reject raises ``DecodeError`` rather than guess the document.
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable
from functools import lru_cache

from sparkcdc.errors import DecodeError
from sparkcdc.mysql.binlog import json_binary as J

REPLACE, INSERT, REMOVE = 0, 1, 2
_OPS = {REPLACE: "REPLACE", INSERT: "INSERT", REMOVE: "REMOVE"}
# a member name without quotes: an ECMAScript identifier (what Json_path prints bare)
_BARE = re.compile(r"[^.\[\]\s\"*]+")
_INDEX = re.compile(r"\[\s*(?:(\d+)|last(?:\s*-\s*(\d+))?)\s*\]")


class _Rejected(Exception):
    pass


def read_diffs(data: bytes) -> list[tuple[int, str, bytes | None]]:
    """``(operation, path, binary value or None)`` of a diff vector (without its length)."""
    out = []
    p, end = 0, len(data)
    while p < end:
        op = data[p]
        if op not in _OPS:
            raise DecodeError(f"a partial JSON update with operation {op}", fix=_REPORT)
        n, p = _packed(data, p + 1)
        try:
            path = bytes(data[p:p + n]).decode("utf-8")
        except UnicodeDecodeError:
            raise DecodeError(f"a partial JSON update whose path is not UTF-8: "
                              f"{bytes(data[p:p + n])!r}", fix=_REPORT) from None
        p += n
        value = None
        if op != REMOVE:
            n, p = _packed(data, p)
            value = bytes(data[p:p + n])
            p += n
        if p > end:
            raise DecodeError("a partial JSON update longer than its column", fix=_REPORT)
        out.append((op, path, value))
    return out


def apply(before: bytes | None, diffs: bytes, column: str, *,
          parse: Callable[[bytes], J.Tree] = J.parse,
          render: Callable[[J.Tree], str] = J.render) -> str:
    """The JSON text after applying ``diffs`` (a diff vector) to the stored ``before``.
    ``parse`` and ``render`` are json_binary's; the compiled decoder passes its own, which
    build and print the same trees in C (fastdecode.apply_json_diffs)."""
    if before is None:  # the server cannot apply a diff to NULL either
        raise DecodeError(f"column {column!r}: a partial JSON update of a NULL value",
                          fix="set binlog_row_value_options='' on the server")
    doc = parse(before)
    for op, path, value in read_diffs(diffs):
        try:
            legs = parse_path(path)
            if not legs:
                raise _Rejected("the whole document")
            doc = _apply_one(doc, op, legs, None if value is None else parse(value))
        except _Rejected as e:
            raise DecodeError(f"column {column!r}: the partial JSON update {_OPS[op]} {path} "
                              f"does not fit its before image ({e})",
                              fix="set binlog_row_value_options='' on the server, then "
                                  "restart capture with a new snapshot") from None
    return render(doc)


@lru_cache(maxsize=1024)
def parse_path(path: str) -> tuple[str | tuple[int, bool], ...]:
    """The legs of a MySQL JSON path: a member name (``str``) or an array index
    ``(n, from_end)`` (``[last-n]``). Kept per path: an UPDATE's paths repeat row by row."""
    s = path.strip()
    if not s.startswith("$"):
        raise _Rejected(f"path {path!r} does not start with $")
    p = 1
    legs: list[str | tuple[int, bool]] = []
    while p < len(s):
        c = s[p]
        if c.isspace():
            p += 1
        elif c == ".":
            p += 1
            while p < len(s) and s[p].isspace():
                p += 1
            if p < len(s) and s[p] == '"':
                name, p = _quoted(s, p)
            else:
                m = _BARE.match(s, p)
                if not m:
                    raise _Rejected(f"path {path!r}")
                name, p = m.group(), m.end()
            legs.append(name)
        elif c == "[":
            m = _INDEX.match(s, p)
            if not m:
                raise _Rejected(f"path {path!r}")
            legs.append((int(m.group(1)), False) if m.group(1) is not None
                        else (int(m.group(2) or 0), True))
            p = m.end()
        else:
            raise _Rejected(f"path {path!r}")
    return tuple(legs)


def _quoted(s: str, p: int) -> tuple[str, int]:
    q = p + 1
    while q < len(s):
        if s[q] == "\\":
            q += 2
            continue
        if s[q] == '"':
            try:
                name = json.loads(s[p:q + 1])
                name.encode("utf-8")  # a lone surrogate (\ud800) names no member
            except (json.JSONDecodeError, UnicodeEncodeError) as e:
                raise _Rejected(f"member name {s[p:q + 1]}: "
                                f"{getattr(e, 'msg', 'a lone surrogate')}") from None
            return name, q + 1
        q += 1
    raise _Rejected(f"unterminated member name in {s!r}")


def _index(leg: tuple[int, bool], size: int) -> int:
    n, from_end = leg
    return size - 1 - n if from_end else n


def _seek(doc, legs):
    for leg in legs:
        if isinstance(leg, str):
            if type(doc) is not dict or leg not in doc:
                raise _Rejected("no such member")
            doc = doc[leg]
        else:
            if type(doc) is not list:
                raise _Rejected("not an array")
            i = _index(leg, len(doc))
            if not 0 <= i < len(doc):
                raise _Rejected("no such element")
            doc = doc[i]
    return doc


def _apply_one(doc, op: int, legs: tuple, value):
    parent = _seek(doc, legs[:-1])
    last = legs[-1]
    if isinstance(last, str):
        if type(parent) is not dict:
            raise _Rejected("not an object")
        exists = last in parent
        if op == REPLACE:
            if not exists:
                raise _Rejected("no such member")
            parent[last] = value
        elif op == INSERT:
            if exists:
                raise _Rejected("the member exists")
            parent[last] = value
            items = sorted(parent.items(), key=lambda kv: J.sort_key(kv[0]))
            parent.clear()
            parent.update(items)
        else:
            if not exists:
                raise _Rejected("no such member")
            del parent[last]
        return doc
    if type(parent) is not list:
        raise _Rejected("not an array")
    i = _index(last, len(parent))
    if op == INSERT:
        parent.insert(max(0, min(i, len(parent))), value)
    elif not 0 <= i < len(parent):
        raise _Rejected("no such element")
    elif op == REPLACE:
        parent[i] = value
    else:
        del parent[i]
    return doc


def _packed(d: bytes, p: int) -> tuple[int, int]:
    """A length-encoded integer (``net_field_length``)."""
    if p >= len(d):
        raise DecodeError("a partial JSON update longer than its column", fix=_REPORT)
    c = d[p]
    if c < 251:
        return c, p + 1
    n = {252: 2, 253: 3, 254: 8}.get(c)
    if n is None:
        raise DecodeError(f"bad length 0x{c:02x} in a partial JSON update", fix=_REPORT)
    return int.from_bytes(d[p + 1:p + 1 + n], "little"), p + 1 + n


_REPORT = "report the server version; the update could not be read"


__all__ = ["INSERT", "REMOVE", "REPLACE", "apply", "parse_path", "read_diffs"]
