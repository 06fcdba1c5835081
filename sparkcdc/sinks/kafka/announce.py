"""A source table's schema change, announced the way the topic's format announces it.

* ``canal-json``: Canal writes a DDL message into the table's own topic, between the rows
  before the change and the rows after it: ``isDdl`` true, ``type`` the kind of statement
  (``ALTER``, ``RENAME``, ``CREATE``, ``ERASE``...), ``sql`` the statement, no rows. The
  sink writes it into every partition the table's messages go to, so whichever partition a
  consumer reads, the announcement comes before the rows of the new shape.
* ``debezium-json``: Debezium writes a schema change event into a topic of its own (one
  partition, keyed by the database): ``ddl`` the statement and ``tableChanges`` the table as
  it is after it (every column with its type, length, scale and nullability, and the
  primary key), as Debezium's MySQL connector does with ``include.schema.changes``.
* ``changelog-json``: Flink's changelog JSON has no schema messages; the rows after a
  change simply carry the new columns.

Where the stream brought no statement (a change found when a run started again), the
statement is written from the difference of the schemas (``ALTER TABLE ... ADD COLUMN``).
"""

from __future__ import annotations

import hashlib
import json
import re
from collections.abc import Sequence
from dataclasses import dataclass

from sparkcdc.core.schema import Column, TableSchema, quote_ident

# java.sql.Types of Debezium's column descriptions, by MySQL type name
_JDBC = {"bit": -7, "tinyint": -6, "smallint": 5, "mediumint": 4, "int": 4, "integer": 4,
         "bigint": -5, "float": 7, "double": 8, "real": 8, "decimal": 3, "numeric": 3,
         "char": 1, "varchar": 12, "tinytext": 12, "text": -1, "mediumtext": -1,
         "longtext": -1, "json": -1, "enum": 1, "set": 1, "binary": -2, "varbinary": -3,
         "tinyblob": -3, "blob": -4, "mediumblob": -4, "longblob": -4, "date": 91,
         "time": 92, "datetime": 93, "timestamp": 2014, "year": 4, "bool": 16,
         "boolean": 16}
_OTHER = 1111  # geometry and anything else
_CANAL_TYPES = (("ALTER TABLE", "ALTER"), ("RENAME TABLE", "RENAME"), ("CREATE TABLE", "CREATE"),
                ("DROP TABLE", "ERASE"), ("TRUNCATE", "TRUNCATE"), ("CREATE INDEX", "CINDEX"),
                ("CREATE UNIQUE INDEX", "CINDEX"), ("DROP INDEX", "DINDEX"))
_SIZE = re.compile(r"\(\s*(\d+)\s*(?:,\s*(\d+)\s*)?\)")


@dataclass(frozen=True)
class Announcement:
    """One message to write: its topic, key, value and the partitions it goes to (None:
    the partitioner's choice)."""

    topic: str
    key: bytes | None
    value: bytes
    partitions: tuple[int, ...] | None = None


def fingerprint(schema: TableSchema, statements: Sequence[str], columns: Sequence[str]) -> str:
    """What identifies one announcement: the table after it and the statements. Kept in
    the sink's marker, so a change the pipeline makes again (a run stopped between the
    announcement and its checkpoint) is not announced twice."""
    text = json.dumps([schema.to_dict(), list(statements), list(columns)], sort_keys=True)
    return hashlib.sha1(text.encode()).hexdigest()[:16]


def statements_or_diff(schema: TableSchema, statements: Sequence[str],
                       added: Sequence[str] = (), dropped: Sequence[str] = (),
                       modified: Sequence[str] = ()) -> list[str]:
    """The statements the stream carried, else one ALTER written from the difference."""
    if statements:
        return [s.strip() for s in statements if s.strip()]
    parts = [f"ADD COLUMN {_column_ddl(schema.column(c))}" for c in added]
    parts += [f"DROP COLUMN {quote_ident(c)}" for c in dropped]
    parts += [f"MODIFY COLUMN {_column_ddl(schema.column(c))}" for c in modified]
    if not parts:
        return []
    return [f"ALTER TABLE {schema.table_id.quoted()} " + ", ".join(parts)]


def _column_ddl(c: Column) -> str:
    return f"{quote_ident(c.name)} {c.column_type}" + ("" if c.nullable else " NOT NULL")


def canal_ddl(topic: str, database: str, table: str, statements: Sequence[str], ts_ms: int,
              partitions: tuple[int, ...]) -> list[Announcement]:
    """Canal's DDL flat message for each statement, into every partition of the topic."""
    out = []
    for sql in statements:
        body = {"data": None, "database": database, "es": ts_ms, "isDdl": True,
                "mysqlType": None, "old": None, "pkNames": None, "sql": sql, "sqlType": None,
                "table": table, "ts": ts_ms, "type": canal_type(sql)}
        key = json.dumps({"database": database, "table": table}, separators=(",", ":"))
        out.append(Announcement(topic, key.encode(), _dumps(body), partitions))
    return out


def canal_type(sql: str) -> str:
    head = " ".join(re.sub(r"/\*.*?\*/", " ", sql, flags=re.DOTALL).upper().split())
    for prefix, kind in _CANAL_TYPES:
        if head.startswith(prefix):
            return kind
    return "QUERY"


def debezium_schema_change(topic: str, database: str, table: str, schema: TableSchema,
                           columns: Sequence[str], statements: Sequence[str], ts_ms: int,
                           name: str, version: str) -> list[Announcement]:
    """Debezium's schema change event for each statement, with the target's columns (in
    its order) described as the source declares them."""
    described = [_describe(schema.column(c), i + 1)
                 for i, c in enumerate(c for c in columns if c in schema.column_names)]
    change = {"type": "ALTER", "id": f'"{database}"."{table}"',
              "table": {"defaultCharsetName": _charset(schema),
                        "primaryKeyColumnNames": list(schema.primary_key),
                        "columns": described, "attributes": []},
              "comment": None}
    out = []
    for sql in statements:
        body = {"source": {"version": version, "connector": "mysql", "name": name,
                           "ts_ms": ts_ms, "snapshot": "false", "db": database,
                           "table": table},
                "ts_ms": ts_ms, "databaseName": database, "schemaName": None, "ddl": sql,
                "tableChanges": [change]}
        key = json.dumps({"databaseName": database}, separators=(",", ":"))
        out.append(Announcement(topic, key.encode(), _dumps(body), (0,)))
    return out


def canal_truncate(topic: str, database: str, table: str, ts_ms: int,
                   partitions: tuple[int, ...]) -> Announcement:
    """Canal's DDL message of a ``TRUNCATE TABLE``, into every partition of the topic."""
    sql = f"TRUNCATE TABLE {quote_ident(database)}.{quote_ident(table)}"
    return canal_ddl(topic, database, table, [sql], ts_ms, partitions)[0]


def debezium_truncate(topic: str, database: str, table: str, ts_ms: int, name: str,
                      version: str, partitions: tuple[int, ...]) -> Announcement:
    """Debezium's truncate event (``op: t``, no row, a null key), with the source block
    the row events carry, into every partition of the table's topic."""
    body = {"before": None, "after": None,
            "source": {"version": version, "connector": "mysql", "name": name, "ts_ms": ts_ms,
                       "snapshot": "false", "db": database, "table": table, "seq": None,
                       "seq_before": None},
            "op": "t", "ts_ms": ts_ms}
    return Announcement(topic, None, _dumps(body), partitions)


def _describe(c: Column, position: int) -> dict:
    size = _SIZE.search(c.column_type)
    kind = c.data_type
    return {"name": c.name, "jdbcType": _JDBC.get(kind, _OTHER), "nativeType": None,
            "typeName": kind.upper() + (" UNSIGNED" if c.unsigned else ""),
            "typeExpression": kind.upper() + (" UNSIGNED" if c.unsigned else ""),
            "charsetName": c.charset,
            "length": int(size.group(1)) if size and kind != "enum" and kind != "set" else None,
            "scale": int(size.group(2)) if size and size.group(2) else None,
            "position": position, "optional": c.nullable, "autoIncremented": False,
            "generated": False, "comment": None, "hasDefaultValue": False,
            "enumValues": _enum_values(c) if kind in ("enum", "set") else None}


def _enum_values(c: Column) -> list[str]:
    inner = c.column_type[c.column_type.find("(") + 1:c.column_type.rfind(")")]
    return [v.replace("''", "'") for v in re.findall(r"'((?:[^']|'')*)'", inner)]


def _charset(schema: TableSchema) -> str | None:
    return next((c.charset for c in schema.columns if c.charset), None)


def _dumps(body: dict) -> bytes:
    return json.dumps(body, separators=(",", ":"), ensure_ascii=False).encode()
