"""Runs the peers' type-test tables (Flink CDC's and Debezium's MySQL type tests, restated in
peer_types_flink.py and peer_types_debezium.py) through sparkcdc's two read paths on a real
server: the snapshot reader and the binlog reader, on inserts and on updates to other values.

A ``PeerTable`` is one peer table: its DDL, its rows as the peer inserts them, and the values
the peer's test expects, already converted to sparkcdc's canonical values (docs/types.md);
the converters below (``epoch_day``, ``micro_time``, ...) turn the peers' own wire forms into
those values, so each expected value can be read against the peer's assertion."""

from __future__ import annotations

import datetime as dt
import re
import struct
from dataclasses import dataclass
from decimal import Decimal
from typing import Any

import pyarrow as pa
from types_support import UTC, cdc

from sparkcdc.core.schema import TableSchema
from sparkcdc.mysql.dialect import MySQLDialect
from sparkcdc.mysql.discovery import discover
from sparkcdc.mysql.types import arrow_schema

EPOCH = dt.date(1970, 1, 1)


@dataclass(frozen=True)
class PeerTable:
    """One peer table. ``want`` holds every row, ordered by ``order`` (the key, or for a
    keyless peer table the columns that tell its rows apart), with every column. ``update``
    changes rows to other values; ``want_updated`` is the whole table afterwards.
    ``want_epoch``: the rows under ``zero-dates.not-null: epoch`` (Debezium's choice), where
    that differs. ``session``: statements the peer runs before its inserts (sql_mode)."""

    name: str
    ddl: str
    inserts: tuple[str, ...]
    want: tuple[dict[str, Any], ...]
    order: tuple[str, ...] = ("id",)
    update: tuple[str, ...] = ()
    want_updated: tuple[dict[str, Any], ...] = ()
    want_epoch: tuple[dict[str, Any], ...] | None = None
    session: tuple[str, ...] = ()


@dataclass(frozen=True)
class PeerFile:
    """One peer test file: where it is (repository, path, commit) and its tables; what
    MariaDB cannot create is left out with ``mariadb_skip``'s reason."""

    source: str
    tables: tuple[PeerTable, ...]
    mariadb_skip: str | None = None


# -- the peers' wire forms, as sparkcdc's canonical values -------------------------------------

def epoch_day(days: int) -> dt.date:
    """Debezium's io.debezium.time.Date and Flink's DateData.fromEpochDay."""
    return EPOCH + dt.timedelta(days=days)


def micro_time(us: int) -> dt.timedelta:
    """Debezium's io.debezium.time.MicroTime (signed microseconds, beyond 24 h)."""
    return dt.timedelta(microseconds=us)


def nano_of_day(ns: int) -> dt.timedelta:
    """Flink's TimeData.fromNanoOfDay."""
    return dt.timedelta(microseconds=ns // 1000)


def epoch_millis(ms: int) -> dt.datetime:
    """Debezium's io.debezium.time.Timestamp: a DATETIME's wall clock read as UTC millis."""
    return dt.datetime(1970, 1, 1) + dt.timedelta(milliseconds=ms)


def utc(text: str) -> dt.datetime:
    """A TIMESTAMP written in a +00:00 session: Flink's LocalZonedTimestampData.fromInstant,
    Debezium's ZonedTimestamp in UTC."""
    return dt.datetime.fromisoformat(text).replace(tzinfo=UTC)


def wall(text: str) -> dt.datetime:
    """A DATETIME: Flink's TimestampData.fromTimestamp."""
    return dt.datetime.fromisoformat(text)


def ewkb_of(wkb_hex: str, srid: int | None) -> bytes:
    """Debezium's Geometry struct (``wkb`` without the SRID, ``srid`` apart) as sparkcdc's
    one value: the WKB, or EWKB carrying the SRID when there is one."""
    wkb = bytes.fromhex(wkb_hex)
    if not srid:
        return wkb
    kind = int.from_bytes(wkb[1:5], "little") | 0x20000000
    return wkb[:1] + kind.to_bytes(4, "little") + srid.to_bytes(4, "little") + wkb[5:]


def dec(text: str) -> Decimal:
    return Decimal(text)


def wkb(kind: str, coords: Any) -> bytes:
    """Little-endian WKB of a geometry given as GeoJSON's type and coordinates (Flink CDC
    expects geometries as GeoJSON text; sparkcdc gives the WKB the server stores)."""
    codes = {"Point": 1, "LineString": 2, "Polygon": 3, "MultiPoint": 4,
             "MultiLineString": 5, "MultiPolygon": 6, "GeometryCollection": 7}
    head = b"\x01" + struct.pack("<I", codes[kind])

    def points(ps: list) -> bytes:
        return struct.pack("<I", len(ps)) + b"".join(struct.pack("<dd", *p) for p in ps)

    if kind == "Point":
        return head + struct.pack("<dd", *coords)
    if kind == "LineString":
        return head + points(coords)
    if kind == "Polygon":
        return head + struct.pack("<I", len(coords)) + b"".join(points(r) for r in coords)
    if kind == "GeometryCollection":
        return head + struct.pack("<I", len(coords)) + b"".join(wkb(k, c) for k, c in coords)
    part = kind[len("Multi"):]
    return head + struct.pack("<I", len(coords)) + b"".join(wkb(part, c) for c in coords)


def copy_rows(table: str, columns: list[str], key: str, pairs: dict[Any, Any]) -> tuple[str, ...]:
    """UPDATEs giving row ``dst`` the values row ``src`` had (``pairs``: dst -> src), for
    the peers' tables whose tests insert only: each row then changes to another row's
    values. The sources are read from a copy, so rows may trade values."""
    sets = ", ".join(f"a.`{c}` = b.`{c}`" for c in columns if c != key)
    return (f"CREATE TEMPORARY TABLE peer_src AS SELECT * FROM `{table}`",
            *(f"UPDATE `{table}` AS a JOIN peer_src AS b ON b.`{key}` = {src!r} "
              f"SET {sets} WHERE a.`{key}` = {dst!r}" for dst, src in pairs.items()),
            "DROP TEMPORARY TABLE peer_src")


def copied(want: tuple[dict[str, Any], ...], key: str, pairs: dict[Any, Any]
           ) -> tuple[dict[str, Any], ...]:
    """``want`` after ``copy_rows``."""
    by_key = {w[key]: w for w in want}
    return tuple({**by_key[pairs[w[key]]], key: w[key]} if w[key] in pairs else w
                 for w in want)


def changed(want: tuple[dict[str, Any], ...], key: str, changes: dict[Any, dict[str, Any]]
            ) -> tuple[dict[str, Any], ...]:
    """``want`` with some columns of some rows set to other values."""
    return tuple({**w, **changes.get(w[key], {})} for w in want)


# -- the run -----------------------------------------------------------------------------------

def _key(row: dict[str, Any], order: tuple[str, ...]) -> tuple:
    """Sorts by the ``order`` columns' values (a column's values are of one type)."""
    return tuple((row[c] is None, "" if row[c] is None else row[c]) for c in order)


def _sorted(rows: list[dict[str, Any]], order: tuple[str, ...]) -> list[dict[str, Any]]:
    return sorted(rows, key=lambda r: _key(r, order))


def assert_rows(got: list[dict[str, Any]], want: tuple[dict[str, Any], ...], where: str) -> None:
    """Equal value by value and type by type (a float32 column's value is the float the
    float32 holds; True is not 1)."""
    assert len(got) == len(want), f"{where}: {len(got)} rows, want {len(want)}"
    for g, w in zip(got, want):
        assert list(g) == list(w), f"{where}: columns {list(g)}, want {list(w)}"
        bad = [f"column {k}: got {g[k]!r}, want {w[k]!r}" for k in w
               if not (g[k] == w[k] and type(g[k]) is type(w[k]))]
        assert not bad, f"{where}, row {[w[k] for k in list(w)[:1]]}:\n" + "\n".join(bad)


def run_peer_tables(server, db: str, tables: tuple[PeerTable, ...]) -> None:
    """Creates the tables and inserts the peer's rows: the snapshot and the binlog's inserts
    give the peer's values, and each other's. Then the updates: the binlog's before images
    give the old values, its after images and a new snapshot the new ones. With
    ``want_epoch``, both paths once more under ``zero-dates.not-null: epoch``."""
    conn = cdc(server)
    # one connection (and one transaction) per step: a commit costs tens of milliseconds
    server.execute(*(s for t in tables for s in (*_session(t), t.ddl)), database=db)
    # the engine's discovery, in one look; a keyless peer table is chunked by its first
    # ``order`` column, as a user would configure it
    found = discover(conn, re.escape(db), "|".join(re.escape(t.name) for t in tables),
                     chunk_key_columns={re.escape(t.name): t.order[0] for t in tables})
    schemas = {tid.table: s for tid, s in found.items()}
    assert sorted(schemas) == sorted(t.name for t in tables)
    with MySQLDialect(conn, server_id=7301, tables={s.table_id: s for s in schemas.values()}
                      ) as dialect:
        start = dialect.current_offset()
        server.execute("START TRANSACTION",
                       *(s for t in tables for s in (*_session(t), *t.inserts)), "COMMIT",
                       database=db)
        mid = dialect.current_offset()
        first = {t.name: _snapshot(dialect, schemas[t.name], t.order) for t in tables}
        for t in tables:
            assert_rows(first[t.name], t.want, f"{t.name} snapshot")
        _check_epoch(conn, tables, schemas, start, mid)
        server.execute("START TRANSACTION",
                       *(s for t in tables if t.update for s in (*_session(t), *t.update)),
                       "COMMIT", database=db)
        end = dialect.current_offset()
        second = {t.name: _snapshot(dialect, schemas[t.name], t.order)
                  for t in tables if t.update}
        inserts = _records(dialect, start, mid)
        updates = _records(dialect, mid, end)
    for t in tables:
        _check_binlog(t, schemas[t.name], inserts.get(t.name, []), first[t.name],
                      updates.get(t.name, []), second.get(t.name))


def _session(t: PeerTable) -> tuple[str, ...]:
    """The session a table's statements run in: the defaults, a +00:00 zone (a TIMESTAMP is
    written, and its DEFAULT read, in the session's zone), then the peer's own settings."""
    return ("SET SESSION sql_mode = DEFAULT", "SET NAMES utf8mb4", "SET TIMESTAMP = DEFAULT",
            "SET SESSION time_zone = '+00:00'", *t.session)


def _check_epoch(conn, tables: tuple[PeerTable, ...], schemas: dict[str, TableSchema],
                 start, end) -> None:
    """Both paths under ``zero-dates.not-null: epoch`` give ``want_epoch``."""
    for t in tables:
        if t.want_epoch is None:
            continue
        with MySQLDialect(conn, server_id=7302, zero_dates_epoch=True) as epoch:
            snap = _snapshot(epoch, schemas[t.name], t.order)
            assert_rows(snap, t.want_epoch, f"{t.name} snapshot (epoch)")
            after = [r.after for r in epoch.read_window(schemas[t.name], start, end)
                     if r.after is not None]
            assert_rows(_sorted(after, t.order), t.want_epoch, f"{t.name} binlog (epoch)")


def _records(dialect: MySQLDialect, start, end) -> dict[str, list]:
    out: dict[str, list] = {}
    for rec in dialect.read_window(None, start, end):
        out.setdefault(rec.table_id.table, []).append(rec)
    return out


def _snapshot(dialect: MySQLDialect, schema: TableSchema, order: tuple[str, ...]
              ) -> list[dict[str, Any]]:
    table = dialect.read_chunk(schema, None, None)
    assert table.schema == arrow_schema(schema), schema.table_id
    return _sorted(table.to_pylist(), order)


def _check_binlog(t: PeerTable, schema: TableSchema, inserts: list,
                  first: list[dict[str, Any]], updates: list,
                  second: list[dict[str, Any]] | None) -> None:
    assert [r.op for r in inserts] == ["c"] * len(t.want), f"{t.name}: {inserts}"
    binlog = _sorted([r.after for r in inserts], t.order)
    assert_rows(binlog, t.want, f"{t.name} binlog insert")
    assert_rows(binlog, tuple(first), f"{t.name} binlog insert against the snapshot")
    # Arrow builds the binlog's values into the snapshot's schema as they are
    pa.Table.from_pylist(binlog, schema=arrow_schema(schema))
    if not t.update:
        assert not updates
        return
    assert second is not None
    assert_rows(second, t.want_updated, f"{t.name} snapshot after the update")
    assert updates and all(r.op == "u" for r in updates), f"{t.name}: {updates}"
    before = _sorted([r.before for r in updates], t.order)
    keys = {_key(b, t.order) for b in before}
    assert_rows(before, tuple(w for w in t.want if _key(w, t.order) in keys),
                f"{t.name} binlog update, before")
    after = _sorted([r.after for r in updates], t.order)
    keys = {_key(a, t.order) for a in after}
    assert_rows(after, tuple(w for w in t.want_updated if _key(w, t.order) in keys),
                f"{t.name} binlog update, after")
    assert_rows(after, tuple(s for s in second if _key(s, t.order) in keys),
                f"{t.name} binlog update against the snapshot")
