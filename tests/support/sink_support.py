"""Helpers shared by the sink tests: fresh targets, change rows, read-backs.

The fixtures built on them live in conftest.py files: ``pg_server`` and ``kafka_broker`` in
tests/, and ``make_target`` (one ``TargetFactory`` per sink type) in tests/sinks/. Every
sink is read back from its real storage:
the SQL servers with a plain SELECT, Delta and Iceberg through their readers, the files sink
through Spark's readers and ``materialize``, the kafka sink by a ``read_committed`` consumer
whose messages are decoded (``formats.decode``) and folded with ``materialize``.
"""

from __future__ import annotations

import datetime as dt
import decimal
import uuid

import pyarrow as pa
from pyspark.sql.pandas.types import from_arrow_schema

from sparkcdc import sinks
from sparkcdc.apply import materialize
from sparkcdc.sinks.base import END_AT, START_AT
from sparkcdc.sinks.kafka.sink import read_topic

UTC = dt.timezone.utc
D = decimal.Decimal

# every sink, as test ids; files twice (both formats), kafka three times (its value formats)
SINK_IDS = ["delta", "iceberg", "postgres", "mysql", "files-parquet", "files-json", "console",
            "kafka-debezium-json", "kafka-canal-json", "kafka-changelog-json"]

CHANGE_META = ("_change_type string, _database string, _table string, _op_ts timestamp, "
               "_seq decimal(38,0)")


class TargetFactory:
    """Makes fresh sinks of one type; each call is a new, empty target table."""

    def __init__(self, sink_id: str, request, tmp_path):
        self.sink_id = sink_id
        self.type = sink_id.split("-")[0]
        self._request = request
        self._tmp = tmp_path
        self._made: list = []

    def options(self, name: str | None = None) -> dict[str, str]:
        name = name or f"t_{uuid.uuid4().hex[:8]}"
        if self.type == "delta":
            return {"path": str(self._tmp / name)}
        if self.type == "iceberg":
            return {"warehouse": str(self._tmp / "warehouse"), "table": f"db.{name}"}
        if self.type == "postgres":
            pg = self._request.getfixturevalue("pg_server")
            return pg.info.sink_options(name)
        if self.type == "mysql":
            info = self._request.getfixturevalue("mariadb").info
            return {"hostname": info.host, "port": str(info.port),
                    "username": info.admin_user, "password": info.admin_password,
                    "database": f"sink_{uuid.uuid4().hex[:8]}", "table": name}
        if self.type == "files":
            return {"path": str(self._tmp / name), "format": self.sink_id.split("-")[1]}
        if self.type == "kafka":
            broker = self._request.getfixturevalue("kafka_broker").info
            return broker.sink_options(topic=name, **{"value.format": self.sink_id.split("-", 1)[1]})
        return {}

    def __call__(self, name: str | None = None, **extra: str):
        sink = sinks.create(self.type, {**self.options(name), **extra})
        self._made.append(sink)
        return sink

    def close(self) -> None:
        for s in self._made:
            s.close()


def changes_df(spark, data_ddl: str, rows: list[tuple], database: str = "shop",
               table: str = "t"):
    """Change rows of the source's shape from (data..., change_type, seq) tuples."""
    full = []
    for r in rows:
        *data, kind, seq = r
        op_ts = None if kind == "insert" and seq < 100 else dt.datetime(2024, 1, 1, tzinfo=UTC)
        full.append((*data, kind, database, table, op_ts, D(seq)))
    return spark.createDataFrame(full, f"{data_ddl}, {CHANGE_META}")


def table_rows(sink, spark, keys, *, schema: pa.Schema, scd_type: int = 1,
               **fold) -> list[dict]:
    """The target table read back from the sink's storage, in ``schema``'s types, sorted.
    (A changelog is folded with ``materialize``; ``fold`` passes the apply options.)"""
    if sink.capabilities.kind == "changelog":
        if sink.type == "kafka":  # decoded with the data columns' types
            data = pa.schema([f for f in schema if f.name not in (START_AT, END_AT)])
            log = sink.changelog(spark, from_arrow_schema(data, prefer_timestamp_ntz=True))
        else:
            log = sink.changelog(spark)
        if log is None:
            return []
        t = materialize(log, keys=keys, stored_as_scd_type=scd_type,
                        **fold).toArrow()
    else:
        t = sink.read()
    if t.num_rows == 0:
        return []
    t = conform(t, schema)
    order = [(k, "ascending") for k in keys] + ([(START_AT, "ascending")] if scd_type == 2 else [])
    return t.sort_by(order).to_pylist()


def conform(t: pa.Table, schema: pa.Schema) -> pa.Table:
    """Cast a read-back table to the logical schema. The casts are the documented storage
    mappings (e.g. TIME stored as int64 microseconds, BIT(1) as TINYINT); a value that does not
    fit fails the cast rather than being silently changed."""
    missing = [f.name for f in schema if f.name not in t.column_names]
    assert not missing, f"columns missing from the target: {missing} (has {t.column_names})"
    cols = []
    for f in schema:
        c = t.column(f.name)
        if c.type != f.type:
            if pa.types.is_null(c.type):
                c = pa.nulls(len(c), f.type)
            else:
                c = c.cast(f.type, safe=True)
        cols.append(c)
    return pa.Table.from_arrays(cols, schema=pa.schema([pa.field(f.name, f.type) for f in schema]))


def arrow_schema(spark, ddl: str, scd_type: int = 1) -> pa.Schema:
    """The Arrow schema Spark gives the data columns of ``ddl`` (plus SCD2 columns)."""
    s = spark.createDataFrame([], ddl).toArrow().schema
    fields = [pa.field(f.name, f.type) for f in s]
    if scd_type == 2:
        fields += [pa.field(START_AT, pa.decimal128(38, 0)), pa.field(END_AT, pa.decimal128(38, 0))]
    return pa.schema(fields)


# -- the all-types table ------------------------------------------------------------------------

ALL_TYPES_DDL = (
    "id int, c_tinyint byte, c_smallint short, c_int int, c_bigint long, "
    "c_bigint_unsigned decimal(20,0), c_decimal decimal(38,10), c_decimal65 string, "
    "c_float float, c_double double, c_bit1 boolean, c_binary binary, c_varchar string, "
    "c_date date, c_time interval day to second, c_datetime timestamp_ntz, "
    "c_timestamp timestamp, c_year short")


def all_types_rows() -> list[tuple]:
    """Rows as MySQL's types arrive in Spark: extremes, nulls, emoji, negative TIME."""
    return [
        (1, -128, -32768, -2147483648, -9223372036854775808, D("0"),
         D("-9999999999999999999999999999.9999999999"),
         "-12345678901234567890123456789012345.123456789012345678901234567890",
         -3.4028234663852886e38, -1.7976931348623157e308, False, b"\x00\xff\x00",
         "héllo wörld 😀🎉 中文 ' \" \\ \t\n", dt.date(1000, 1, 1),
         -dt.timedelta(hours=838, minutes=59, seconds=59), dt.datetime(1000, 1, 1, 0, 0, 0),
         dt.datetime(1970, 1, 1, 0, 0, 1, tzinfo=UTC), 1901),
        (2, 127, 32767, 2147483647, 9223372036854775807, D("18446744073709551615"),
         D("9999999999999999999999999999.9999999999"),
         "99999999999999999999999999999999999.999999999999999999999999999999",
         3.4028234663852886e38, 1.7976931348623157e308, True, b"",
         "", dt.date(9999, 12, 31),
         dt.timedelta(hours=838, minutes=59, seconds=59), dt.datetime(9999, 12, 31, 23, 59, 59, 999999),
         dt.datetime(2038, 1, 19, 3, 14, 7, 999999, tzinfo=UTC), 2155),
        (3,) + (None,) * 17,
        (4, 0, 0, 0, 0, D("1"), D("0.0000000001"), "0", 1.5, 0.1, True, bytes(range(256)),
         "𝔘𝔫𝔦𝔠𝔬𝔡𝔢 👩‍👩‍👧", dt.date(2024, 2, 29), -dt.timedelta(microseconds=1500000),
         dt.datetime(2024, 2, 29, 12, 34, 56, 789012),
         dt.datetime(2024, 2, 29, 12, 34, 56, 789012, tzinfo=UTC), 2024),
    ]


__all__ = [
    "ALL_TYPES_DDL",
    "SINK_IDS",
    "UTC",
    "D",
    "TargetFactory",
    "all_types_rows",
    "arrow_schema",
    "changes_df",
    "conform",
    "table_rows",
]


def delta_log_files(root) -> list[tuple]:
    """The data files a Delta table's log names now, read without delta-rs: every commit
    in order, the files it adds less those it removes; ``(path, partition values)``."""
    return [(path, parts) for path, parts, _dv in delta_log_adds(root)]


def delta_log_adds(root) -> list[tuple]:
    """``delta_log_files`` with each file's deletion vector descriptor (or None)."""
    import json
    from pathlib import Path

    live: dict[str, dict] = {}
    for f in sorted((Path(root) / "_delta_log").glob("*.json")):
        for line in f.read_text().splitlines():
            a = json.loads(line)
            if "add" in a:
                live[a["add"]["path"]] = a["add"]
            elif "remove" in a:
                live.pop(a["remove"]["path"], None)
    return [(Path(root) / path, a.get("partitionValues") or {}, a.get("deletionVector"))
            for path, a in sorted(live.items())]


_Z85 = "0123456789abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ.-:+=^!/*?&<>()[]{}@%$#"


def _deleted_rows(root, dv: dict) -> set[int]:
    """The rows a deletion vector deletes, decoded here from the Delta protocol's text
    alone (not with sparkcdc's writer): Z85 UUID, the file's size prefix, the portable
    RoaringBitmapArray."""
    import struct
    import uuid
    from pathlib import Path

    from pyroaring import BitMap

    assert dv["storageType"] == "u", dv
    code = dv["pathOrInlineDv"]
    n = 0
    raw = bytearray()
    for i, c in enumerate(code[-20:]):
        n = n * 85 + _Z85.index(c)
        if i % 5 == 4:
            raw += n.to_bytes(4, "big")
            n = 0
    name = f"deletion_vector_{uuid.UUID(bytes=bytes(raw))}.bin"
    data = (Path(root) / code[:-20] / name).read_bytes()
    off = dv.get("offset", 1)
    (size,) = struct.unpack_from(">i", data, off)
    body = data[off + 4: off + 4 + size]
    magic, count = struct.unpack_from("<iq", body)
    assert magic == 1681511377 and count <= 1, (magic, count)
    out: set[int] = set()
    if count:
        out = set(BitMap.deserialize(body[16:]))
        assert struct.unpack_from("<I", body, 12)[0] == 0
    assert len(out) == dv["cardinality"]
    return out


def delta_log_rows(root, columns: list[str]) -> list[dict]:
    """The rows a Delta table's log names now, read without delta-rs: every live file read
    by pyarrow, less the rows its deletion vector deletes."""
    import pyarrow.parquet as pq

    out = []
    for path, _parts, dv in delta_log_adds(root):
        dead = _deleted_rows(root, dv) if dv else set()
        for i, r in enumerate(pq.read_table(path, columns=columns).to_pylist()):
            if i not in dead:
                out.append(r)
    return out


def read_delta(table, columns: list[str] | None = None):
    """A Delta table's rows (``table``: its path or a ``DeltaTable``) as delta-rs reads
    them: its DataFusion scan when the table has deletion vectors, which its pyarrow
    dataset refuses."""
    import deltalake

    from sparkcdc.sinks.delta.sink import read_table

    if not isinstance(table, deltalake.DeltaTable):
        table = deltalake.DeltaTable(str(table))
    t = read_table(table)
    return t.select(columns) if columns else t


# -- the kafka sink, written from Arrow change rows as a pipeline does -------------------------

def kafka_sink(broker, fmt, topic=None, app=None, **options):
    options = {"value.format": fmt, "table-id": "out.items", "source-table": "shop.items",
               "app-id": app or f"a{uuid.uuid4().hex[:6]}", **options}
    return sinks.create("kafka", broker.info.sink_options(
        topic=topic or f"t_{uuid.uuid4().hex[:8]}", **options))


def change_rows(ids, seq: int, kind: str = "insert", table: str = "items") -> pa.Table:
    """Change rows of ``shop.<table>`` as the pipeline holds them (Arrow, with the metadata
    columns): ``id``, ``v`` = id * 10."""
    n = len(ids)
    return pa.table({
        "id": pa.array(ids, pa.int32()), "v": pa.array([i * 10 for i in ids], pa.int32()),
        "_change_type": pa.array([kind] * n), "_database": pa.array(["shop"] * n),
        "_table": pa.array([table] * n),
        "_op_ts": pa.array([1_700_000_000_000_000] * n, pa.timestamp("us", tz="UTC")),
        "_seq": pa.array([seq + i for i in range(n)], pa.decimal128(38, 0))})


def topic_messages(broker, topic) -> list[dict]:
    sink = sinks.create("kafka", broker.info.sink_options(topic=topic))
    try:
        return read_topic(sink._ck, sink._client_config(), topic, 30)
    finally:
        sink.close()
