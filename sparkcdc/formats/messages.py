"""One Kafka message of a change-event format, decoded in Python (no Spark): the change rows
it carries, with the table they belong to, their keys and types where the format carries
them, and Debezium's source position. The ``kafka`` source of a pipeline reads topics with
it (``sparkcdc/pipeline/kafka/reader.py``); ``decode`` (Spark) reads a DataFrame of them.

Why in Python: a topic may carry many tables, each with its own columns, so no single Spark
schema fits a message before it is read; the rows of one table are gathered first and made
Arrow with that table's types (declared by the message, else inferred, ``column_types``).

What each format gives:

* ``debezium-json``: ``before``/``after``/``op``/``source`` (``db``, ``table``, ``ts_ms``,
  ``snapshot``, and MySQL's ``file``, ``pos``, ``row``: the position), bare or wrapped in
  Kafka Connect's ``{"schema", "payload"}`` (then the schema types the columns). The keys
  are the fields of the message key (Debezium keys each message by its primary key).
  Schema change events (``ddl``, ``tableChanges``) carry no rows; a truncate event (``op:
  t``) is one ``TRUNCATE`` change without a row.
* ``canal-json``: ``data``/``old``/``type``/``database``/``table``/``pkNames``, the types in
  ``mysqlType`` when present (Canal's own messages have it; values may be strings then);
  ``isDdl`` messages carry no rows, but a ``TRUNCATE`` is one ``TRUNCATE`` change without
  a row. No position.
* ``changelog-json``: Flink's ``data``/``op``, with sparkcdc's ``db``/``table``/``ts_ms``;
  the keys from the message key's fields. No position.
"""

from __future__ import annotations

import base64
import dataclasses
import datetime as dt
import decimal
import json
import re
from dataclasses import dataclass
from typing import Any

import pyarrow as pa

from sparkcdc.core.offsets import file_index

INSERT, PRE, POST, DELETE = "insert", "update_preimage", "update_postimage", "delete"
TRUNCATE = "truncate"  # no row: the table's rows before it are gone (its ``row`` is empty)
_CHANGELOG_OPS = {"+I": INSERT, "-U": PRE, "+U": POST, "-D": DELETE}
_SNAPSHOT_FLAGS = {"true", "first", "last", "first_in_data_collection",
                   "last_in_data_collection", "incremental"}


class BadMessage(ValueError):
    """A message that is not the declared format; the text says what is wrong with it."""


@dataclass(frozen=True)
class Position:
    """Debezium's MySQL source position of one event: binlog file, the row event's position
    in it, the row inside the event, and the step. Totally ordered, unique per event.

    The step tells apart the two events Debezium makes of one row whose primary key
    changed: a delete of the old key, then a create of the new one, both with the same
    file, position and row. The delete is step 0 and every other event step 1, so the
    create follows the delete and a repeat of either is still at or below the mark."""

    file: str
    pos: int
    row: int
    step: int = 1

    def key(self) -> tuple[int, int, int, int]:
        return (file_index(self.file), self.pos, self.row, self.step)

    def to_list(self) -> list:
        return [self.file, self.pos, self.row, self.step]

    @classmethod
    def from_list(cls, v: list) -> Position:
        # a checkpoint written before the step existed: its mark counts as the whole row
        return cls(str(v[0]), int(v[1]), int(v[2]), int(v[3]) if len(v) > 3 else 1)


@dataclass(frozen=True)
class Change:
    """One change row of a message."""

    kind: str  # insert | update_preimage | update_postimage | delete | truncate
    row: dict[str, Any]
    database: str | None
    table: str | None
    op_ts_ms: int | None
    keys: tuple[str, ...] | None = None  # the primary key, when the message says it
    types: dict[str, pa.DataType] | None = None  # declared column types, when it says them
    position: Position | None = None  # Debezium's, outside its snapshot
    snapshot: bool = False


def decode_message(fmt: str, key: bytes | None, value: bytes | None) -> list[Change]:
    """The change rows of one message (none for a tombstone or a DDL message); raises
    ``BadMessage`` when it is not ``fmt``."""
    if value is None:
        return []  # a tombstone: compaction's marker after a delete, no change of its own
    body = _json(value, "value")
    if not isinstance(body, dict):
        raise BadMessage(f"the value is JSON {type(body).__name__}, not an object")
    if fmt == "debezium-json":
        return _debezium(body, key)
    if fmt == "canal-json":
        return _canal(body)
    if fmt == "changelog-json":
        return _changelog(body, key)
    raise BadMessage(f"unknown format {fmt!r}")


def split_key_changes(changes: list[Change], keys: tuple[str, ...]) -> list[Change]:
    """An update whose two images hold different keys as a delete of the old key and an
    insert of the new one. Canal writes a primary-key change as one UPDATE whose ``old``
    holds the old key; Debezium and sparkcdc's own source send a delete and an insert.
    A keyed target drops pre-images, so read as an update the old key would stay. Images
    that lack a key column (a key named after a transform's projection) are left as they
    are."""
    if not keys or not any(c.kind == PRE for c in changes):
        return changes
    out: list[Change] = []
    i = 0
    while i < len(changes):
        c = changes[i]
        after = changes[i + 1] if i + 1 < len(changes) else None
        if (c.kind == PRE and after is not None and after.kind == POST
                and all(k in c.row and k in after.row for k in keys)
                and any(c.row[k] != after.row[k] for k in keys)):
            out += [dataclasses.replace(c, kind=DELETE), dataclasses.replace(after, kind=INSERT)]
            i += 2
            continue
        out.append(c)
        i += 1
    return out


def _json(raw: bytes, what: str) -> Any:
    try:
        return json.loads(raw, parse_float=decimal.Decimal)
    except (ValueError, UnicodeDecodeError) as e:
        text = raw[:60].decode("utf-8", "replace") if isinstance(raw, bytes) else str(raw)[:60]
        raise BadMessage(f"the {what} is not JSON ({e}): {text!r}") from None


def _key_names(key: bytes | None) -> tuple[str, ...] | None:
    if not key:
        return None
    try:
        k = json.loads(key)
    except (ValueError, UnicodeDecodeError):
        return None  # a key that is not JSON names no columns (the value is what counts)
    if isinstance(k, dict) and "payload" in k and "schema" in k:
        k = k["payload"]
    return tuple(k) if isinstance(k, dict) and k else None


def _debezium(body: dict, key: bytes | None) -> list[Change]:
    types = None
    if "payload" in body and "schema" in body:  # Kafka Connect's JsonConverter, schemas on
        types = _connect_types(body["schema"])
        body = body["payload"]
        if body is None:
            return []
        if not isinstance(body, dict):
            raise BadMessage("the Debezium payload is not a JSON object")
    if "op" not in body:
        if "ddl" in body and "tableChanges" in body:
            return []  # a schema change event: the rows after it show the new columns
        raise BadMessage("no 'op' field: not a Debezium change event")
    op = body.get("op")
    src = body.get("source") or {}
    if not isinstance(src, dict):
        raise BadMessage("'source' is not an object")
    before: Any = body.get("before")
    after: Any = body.get("after")
    for name, img in (("before", before), ("after", after)):
        if img is not None and not isinstance(img, dict):
            raise BadMessage(f"'{name}' is not an object")
    snapshot = op == "r" or str(src.get("snapshot", "false")).lower() in _SNAPSHOT_FLAGS
    position = None
    if not snapshot and src.get("file") and src.get("pos") is not None:
        try:
            position = Position(str(src["file"]), int(src["pos"]), int(src.get("row") or 0),
                                0 if op == "d" else 1)
        except (TypeError, ValueError):
            raise BadMessage(f"source position {src.get('file')!r}:{src.get('pos')!r} is not "
                             "a binlog file and position") from None
    common: dict[str, Any] = {
        "database": src.get("db"), "table": src.get("table"), "op_ts_ms": _int(src.get("ts_ms")),
        "keys": _key_names(key), "types": types, "position": position, "snapshot": snapshot}
    if op in ("c", "r"):
        _need(after, "after", op)
        return [Change(INSERT, after, **common)]
    if op == "u":
        _need(after, "after", op)
        out = [Change(PRE, before, **common)] if before is not None else []
        return out + [Change(POST, after, **common)]
    if op == "d":
        _need(before, "before", op)
        return [Change(DELETE, before, **common)]
    if op == "t":  # Debezium's truncate event: the table's rows before it are gone
        return [Change(TRUNCATE, {}, **common)]
    if op == "m":
        return []  # a logical decoding message: no row
    raise BadMessage(f"unknown op {op!r} (c, r, u or d)")


def _need(img: Any, name: str, op: str) -> None:
    if img is None:
        raise BadMessage(f"op {op!r} without '{name}'")


def _int(v: Any) -> int | None:
    try:
        return None if v is None else int(v)
    except (TypeError, ValueError):
        return None


def _canal(body: dict) -> list[Change]:
    if "type" not in body or "data" not in body and not body.get("isDdl"):
        raise BadMessage("no 'type' and 'data' fields: not a Canal flat message")
    if body.get("isDdl") or body.get("type") not in ("INSERT", "UPDATE", "DELETE"):
        if body.get("type") == "TRUNCATE":  # the table's rows before it are gone
            return [Change(TRUNCATE, {}, body.get("database"), body.get("table"),
                           _int(body.get("es")))]
        if body.get("isDdl") or body.get("type") in ("CREATE", "ALTER", "ERASE", "QUERY",
                                                      "RENAME", "CINDEX", "DINDEX"):
            return []  # DDL: the rows after it show the new columns
        raise BadMessage(f"unknown type {body.get('type')!r} (INSERT, UPDATE or DELETE)")
    data, old = body.get("data") or [], body.get("old") or []
    if not isinstance(data, list) or not isinstance(old, list):
        raise BadMessage("'data' and 'old' must be arrays of rows")
    pk = body.get("pkNames")
    types = _mysql_types(body.get("mysqlType"))
    common: dict[str, Any] = {
        "database": body.get("database"), "table": body.get("table"),
        "op_ts_ms": _int(body.get("es")),
        "keys": tuple(pk) if isinstance(pk, list) and pk else None, "types": types}
    out = []
    typ = body["type"]
    for i, row in enumerate(data):
        if not isinstance(row, dict):
            raise BadMessage("a row of 'data' is not an object")
        if typ == "INSERT":
            out.append(Change(INSERT, row, **common))
        elif typ == "DELETE":
            out.append(Change(DELETE, row, **common))
        else:
            prev = old[i] if i < len(old) and isinstance(old[i], dict) else {}
            out.append(Change(PRE, {**row, **prev}, **common))
            out.append(Change(POST, row, **common))
    return out


def _changelog(body: dict, key: bytes | None) -> list[Change]:
    kind = _CHANGELOG_OPS.get(body.get("op"))  # type: ignore[arg-type]
    if kind is None or not isinstance(body.get("data"), dict):
        raise BadMessage("no 'data' object with 'op' +I, -U, +U or -D: not Flink's changelog "
                         "JSON")
    return [Change(kind, body["data"], body.get("db"), body.get("table"),
                   _int(body.get("ts_ms")), keys=_key_names(key))]


# -- types --------------------------------------------------------------------------------------

_CONNECT = {"int8": pa.int8(), "int16": pa.int16(), "int32": pa.int32(), "int64": pa.int64(),
            "float32": pa.float32(), "float64": pa.float64(), "boolean": pa.bool_(),
            "string": pa.string(), "bytes": pa.binary()}
_CONNECT_NAMED = {"io.debezium.time.Date": pa.date32(),
                  "org.apache.kafka.connect.data.Date": pa.date32(),
                  "io.debezium.time.Timestamp": pa.timestamp("ms"),  # epoch milliseconds
                  "org.apache.kafka.connect.data.Timestamp": pa.timestamp("ms"),
                  "io.debezium.time.MicroTimestamp": pa.timestamp("us"),
                  "io.debezium.time.ZonedTimestamp": pa.timestamp("us", tz="UTC"),
                  "io.debezium.data.Json": pa.string()}


def _connect_types(schema: Any) -> dict[str, pa.DataType] | None:
    """Column types from Kafka Connect's envelope schema (the ``after`` or ``before``
    struct's fields)."""
    if not isinstance(schema, dict):
        return None
    for f in schema.get("fields") or []:
        if isinstance(f, dict) and f.get("field") in ("after", "before"):
            out = {}
            for c in f.get("fields") or []:
                t = _connect_type(c)
                if t is not None:
                    out[c["field"]] = t
            if out:
                return out
    return None


def _connect_type(c: dict) -> pa.DataType | None:
    name = c.get("name")
    if name in ("org.apache.kafka.connect.data.Decimal",):
        params = c.get("parameters") or {}
        scale = int(params.get("scale", 0))
        precision = int(params.get("connect.decimal.precision", 38))
        return pa.decimal128(max(precision, scale, 1), scale)
    if name in _CONNECT_NAMED:
        return _CONNECT_NAMED[name]
    return _CONNECT.get(c.get("type"))  # type: ignore[arg-type]


_MYSQL_TYPE = re.compile(r"\s*([a-zA-Z]+)\s*(?:\(([^)]*)\))?\s*(unsigned)?", re.IGNORECASE)


def _mysql_types(spec: Any) -> dict[str, pa.DataType] | None:
    """Column types from Canal's ``mysqlType`` (``{"id": "int(11)", "price":
    "decimal(10,2)"}``)."""
    if not isinstance(spec, dict) or not spec:
        return None
    out = {}
    for col, text in spec.items():
        t = mysql_type(str(text))
        if t is not None:
            out[col] = t
    return out or None


def mysql_type(text: str) -> pa.DataType | None:
    m = _MYSQL_TYPE.match(text)
    if not m:
        return None
    base, args, unsigned = m.group(1).lower(), m.group(2), m.group(3)
    if base in ("tinyint", "smallint", "mediumint", "int", "integer", "year", "bit"):
        return pa.int64()
    if base == "bigint":
        return pa.decimal128(20, 0) if unsigned else pa.int64()
    if base in ("float", "double", "real"):
        return pa.float64()
    if base in ("decimal", "numeric"):
        p, _, s = (args or "10,0").partition(",")
        return pa.decimal128(int(p or 10), int(s or 0))
    if base == "date":
        return pa.date32()
    if base == "datetime":
        return pa.timestamp("us")
    if base == "timestamp":
        return pa.timestamp("us", tz="UTC")
    if base in ("binary", "varbinary", "tinyblob", "blob", "mediumblob", "longblob"):
        return pa.binary()
    return pa.string()  # char, varchar, text, enum, set, json, time, geometry ...


def infer_type(values: list[Any]) -> pa.DataType:
    """The Arrow type of a column the message does not type, from its JSON values:
    booleans, integers (int64), other numbers (float64), else text (objects and arrays as
    their JSON). A column with only nulls so far is text."""
    seen = {type(v) for v in values if v is not None}
    if not seen:
        return pa.string()
    if seen == {bool}:
        return pa.bool_()
    if seen == {int}:
        return pa.int64()
    if seen <= {int, decimal.Decimal, float}:
        return pa.float64()
    return pa.string()


def convert(value: Any, t: pa.DataType) -> Any:
    """A JSON value as a Python value of Arrow type ``t`` (raises ValueError/TypeError when
    it cannot be one). A number for a date counts days since the epoch, for a timestamp the
    type's unit (Connect's Timestamp: milliseconds; Debezium's MicroTimestamp: micros)."""
    if value is None:
        return None
    if pa.types.is_string(t):
        if isinstance(value, (dict, list)):
            return json.dumps(value, separators=(",", ":"), default=str)
        if isinstance(value, bool):
            return "true" if value else "false"
        return str(value)
    if pa.types.is_boolean(t):
        if isinstance(value, str):
            return value.strip().lower() in ("1", "true")
        return bool(value)
    if pa.types.is_integer(t):
        if isinstance(value, bool):
            return int(value)
        if isinstance(value, (decimal.Decimal, float)) and value != int(value):
            raise ValueError(f"{value} is not an integer")
        return int(value)
    if pa.types.is_floating(t):
        return float(value)
    if pa.types.is_decimal(t):
        if isinstance(value, str) and not re.fullmatch(r"\s*[-+]?[\d.]+([eE][-+]?\d+)?\s*",
                                                       value):
            raw = base64.b64decode(value)  # Connect's Decimal: the unscaled bytes
            return decimal.Decimal(int.from_bytes(raw, "big", signed=True)).scaleb(-t.scale)
        return decimal.Decimal(str(value))
    if pa.types.is_date(t):
        if isinstance(value, (int, decimal.Decimal)) and not isinstance(value, bool):
            return dt.date(1970, 1, 1) + dt.timedelta(days=int(value))
        return dt.date.fromisoformat(str(value)[:10])
    if pa.types.is_timestamp(t):
        if isinstance(value, (int, decimal.Decimal)) and not isinstance(value, bool):
            us = int(value) * (1000 if t.unit == "ms" else 1)
            v = dt.datetime(1970, 1, 1) + dt.timedelta(microseconds=us)
        else:
            v = dt.datetime.fromisoformat(str(value).strip().replace("Z", "+00:00"))
        if t.tz is None:
            return v.replace(tzinfo=None) if v.tzinfo is None else \
                v.astimezone(dt.timezone.utc).replace(tzinfo=None)
        return v.replace(tzinfo=dt.timezone.utc) if v.tzinfo is None else v
    if pa.types.is_binary(t):
        if isinstance(value, str):
            return base64.b64decode(value)
        return bytes(value)
    raise TypeError(f"no conversion to {t}")

