"""Runs a pipeline whose source is ``kafka``: change events other systems wrote (Debezium,
Flink CDC, Canal, sparkcdc's own ``kafka`` sink) applied to the pipeline's sink with the same
apply as MySQL changes (routes, transforms, AUTO CDC keys, SCD1/SCD2, deletes).

**One stream, its position in the checkpoint.** Every topic-partition the source reads is
one stream, read in micro-batches on the driver. A micro-batch is a range of offsets per
partition; its number ``n`` and range are written to ``kafka/offsets/<n>.json`` *before* it
is read, and ``kafka/commits/<n>.json`` (the tables' state after it: their columns, keys,
batch bases and Debezium positions) once every target wrote it. Each target records its
batch id (``base + n``) in the same commit as its rows, as with MySQL sources. A run killed
in between plans nothing new: it reads the logged range again, with the state of batch
``n - 1``, so the same messages make the same rows, and every target that has the batch
skips it.

**Why the driver, not a Spark query.** The messages are decoded and the targets written on
the driver anyway (the writers are delta-rs, pyiceberg, the SQL drivers: docs/design.md), a
topic's tables are only known once its messages are read (no Spark schema fits a message
before that), and librdkafka reads ``read_committed`` natively. Spark's Kafka source would
add the JVM connector and move the bytes through executors back to the driver, and a Python
data source would only wrap the same consumer in Spark's offset log; the offset log here is
the same idea in two files per batch. Spark runs the transforms (Spark SQL over a local
DataFrame of the batch's rows) and the changelog sinks' writers.

**Debezium's at-least-once.** After Debezium restarts it sends again the events after its
last recorded offset. Each table keeps, per topic-partition, the highest source position
applied (binlog file, the row event's position, the row in it, and a step that puts the
delete Debezium makes of a primary-key change before its create); an event at or below
its partition's mark is a repeat and is skipped (counted in the log and the checkpoint).
Per partition, because only there are the events in binlog order: a batch reads the
partitions one after the other, and a producer's partitions advance independently, so an
event of one partition may be older than one already applied from another without being
a repeat (a repeat goes where its original went: the same key, the same partition).
Snapshot events (``op: r``) share one position and are not compared: they are upserts of
whole rows, applied again harmlessly.

**A table's first batch.** A table met for the first time gets a batch base that puts its
targets' batch ids after the ones they hold already (a target written by an earlier
checkpoint). The bases are added to ``kafka/offsets/<n>.json`` before any target is
written, so a batch read again uses the bases of its first attempt: a target that has the
batch still skips it.
"""

from __future__ import annotations

import base64
import logging
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import pyarrow as pa

from sparkcdc.apply import DEL_MARK, TRUNC_MARK, apply_arrow
from sparkcdc.errors import ConfigError, DecodeError, SchemaError
from sparkcdc.formats.messages import (
    TRUNCATE,
    BadMessage,
    Change,
    Position,
    convert,
    decode_message,
    infer_type,
    split_key_changes,
)
from sparkcdc.pipeline.definition import PipelineDef, targets
from sparkcdc.pipeline.definition.kafka_source import KafkaSourceConfig
from sparkcdc.pipeline.definition.routing import shaper_for, targets_of, transform_of
from sparkcdc.pipeline.kafka.reader import KafkaReader, Message, tp_name
from sparkcdc.pipeline.run.checkpoint import Checkpoint, read_json, write_json
from sparkcdc.pipeline.run.life import RunLife
from sparkcdc.pipeline.run.signals import stop_on_signals
from sparkcdc.sinks import SinkKind
from sparkcdc.sinks.evolution import Change as ColumnChange
from sparkcdc.sinks.evolution import ChangeKind
from sparkcdc.sinks.kafka.config import matches

log = logging.getLogger("sparkcdc.pipeline.kafka")

META_FIELDS = [pa.field("_change_type", pa.string()), pa.field("_database", pa.string()),
               pa.field("_table", pa.string()), pa.field("_op_ts", pa.timestamp("us", tz="UTC")),
               pa.field("_seq", pa.decimal128(38, 0))]
SEQ_STRIDE = 1 << 32  # _seq = batch * stride + the change's index in the batch


@dataclass
class TableInfo:
    """What the pipeline keeps of a table met in the topics (``commits/<n>.json``)."""

    columns: list[pa.Field] = field(default_factory=list)
    keys: tuple[str, ...] = ()
    # the highest Debezium position applied, per topic-partition (``topic:partition``)
    positions: dict[str, Position] = field(default_factory=dict)
    base: int = 0  # the target's batch id = base + the stream's batch number
    skipped: int = 0  # Debezium repeats skipped, in all
    # a checkpoint written when one mark served every partition: it still marks the
    # partitions that have no mark of their own yet
    legacy: Position | None = None

    @property
    def position(self) -> Position | None:
        """The highest position applied from any partition (for logs and status)."""
        marks = [*self.positions.values(), *([self.legacy] if self.legacy else [])]
        return max(marks, key=Position.key) if marks else None

    def to_dict(self) -> dict:
        schema = pa.schema(self.columns).serialize().to_pybytes()
        return {"schema": base64.b64encode(schema).decode(), "keys": list(self.keys),
                "positions": {tp: p.to_list() for tp, p in sorted(self.positions.items())},
                "legacy-position": self.legacy.to_list() if self.legacy else None,
                "base": self.base, "skipped": self.skipped}

    @classmethod
    def from_dict(cls, d: dict) -> TableInfo:
        schema = pa.ipc.read_schema(pa.py_buffer(base64.b64decode(d["schema"])))
        legacy = d.get("legacy-position") or ("positions" not in d and d.get("position"))
        return cls(list(schema), tuple(d.get("keys") or ()),
                   {tp: Position.from_list(v) for tp, v in (d.get("positions") or {}).items()},
                   int(d.get("base") or 0), int(d.get("skipped") or 0),
                   Position.from_list(legacy) if legacy else None)


@dataclass
class _Decoded:
    msg: Message
    changes: list[Change]
    table: str


class KafkaRunner:
    """``run()`` reads the topics until stopped (``stop()``, Ctrl-C, SIGTERM) or, with
    ``until_caught_up``, until a batch finds nothing new."""

    def __init__(self, defn: PipelineDef, spark=None, *, master: str | None = None,
                 until_caught_up: bool = False, display=None,
                 on_batch: Callable[[str, Any, int], None] | None = None,
                 spark_log_to_console: bool = False):
        self.defn = defn
        self.settings = defn.pipeline
        self.config = KafkaSourceConfig.parse(defn.source.options)
        self.master = master
        self.until_caught_up = until_caught_up or defn.pipeline.batch
        self.on_batch = on_batch
        self.ckpt = Checkpoint(defn.checkpoint_dir)
        self.life = RunLife(self.ckpt, self.settings, spark, master=master,
                            spark_log_to_console=spark_log_to_console, probe=False)
        self.dir = self.ckpt.root / "kafka"
        self.tables: dict[str, TableInfo] = {}
        self.sinks: dict[str, Any] = {}
        self.batches = 0  # applied by this run
        self.nothing_to_do = False

    @property
    def spark(self):
        return self.life.spark

    def stop(self) -> None:
        self.life.stop()

    @property
    def interrupted(self) -> bool:
        """Whether the run was asked to stop (Ctrl-C, SIGTERM, ``stop``): a run
        ``--until-caught-up`` that was may have stopped before it caught up."""
        return self.life.interrupted

    def close(self) -> None:
        self.life.close()

    # -- the checkpoint ------------------------------------------------------------------------

    def _last(self, kind: str) -> int | None:
        d = self.dir / kind
        ns = [int(p.stem) for p in d.glob("*.json") if p.stem.isdigit()] if d.is_dir() else []
        return max(ns) if ns else None

    def _load(self, n: int | None) -> dict[str, int]:
        """The tables' state after batch ``n`` and where the next batch starts."""
        if n is None:
            self.tables = {}
            return {}
        data = read_json(self.dir / "commits" / f"{n}.json")
        if data is None:
            raise ConfigError(f"the kafka source's checkpoint {self.dir} lacks batch {n}'s "
                              "commit", fix="restore the checkpoint directory, or start a new "
                              "checkpoint.location (the topics are then read again)")
        self.tables = {t: TableInfo.from_dict(v) for t, v in data["tables"].items()}
        return {k: int(v) for k, v in data["end"].items()}

    # -- the loop --------------------------------------------------------------------------------

    def run(self) -> int:
        stopping = self.life.stopping
        lock = self.life.lock_checkpoint()  # one run per checkpoint
        with stop_on_signals(self.stop):  # Ctrl-C, SIGTERM: the loop ends after its batch
            reader = KafkaReader(self.config)
            try:
                committed = self._last("commits")
                planned = self._last("offsets")
                start = self._load(committed)
                n = -1 if committed is None else committed
                while not stopping.is_set():
                    n += 1
                    bases: dict[str, int] = {}
                    if planned is not None and planned >= n:  # logged, never committed: again
                        logged = read_json(self.dir / "offsets" / f"{n}.json")
                        start, end = logged["start"], logged["end"]
                        bases = {t: int(b) for t, b in (logged.get("bases") or {}).items()}
                        log.warning("kafka source: batch %d was planned and not committed; it "
                                    "is read again (its targets skip it if they have it)", n)
                    else:
                        start, end = reader.plan(start)
                        if all(end[k] <= start.get(k, 0) for k in end):
                            n -= 1
                            if self.until_caught_up:
                                self.nothing_to_do = self.batches == 0
                                break
                            stopping.wait(self.settings.trigger_interval or 1.0)
                            continue
                        write_json(self.dir / "offsets" / f"{n}.json",
                                   {"start": start, "end": end})
                    self._batch(reader, n, start, end, bases)
                    start = dict(end)
                    reader.commit_group(end)
            except KeyboardInterrupt:
                log.info("interrupted: stopping")
            finally:
                reader.close()
                for s in self.sinks.values():
                    s.close()
                self.sinks = {}
                lock.close()
        return 0

    # -- one micro-batch -------------------------------------------------------------------------

    def _batch(self, reader: KafkaReader, n: int, start: dict, end: dict,
               bases: dict[str, int]) -> None:
        """Batch ``n``: read, decode, plan every table's rows, log the bases of the tables
        met for the first time (``bases``: those a first attempt logged), write the
        targets, commit."""
        t0 = time.monotonic()
        msgs = reader.read(start, end)
        bad: list[tuple[Message, str]] = []
        decoded: list[_Decoded] = []
        for m in msgs:
            try:
                changes = decode_message(self.config.value_format, m.key, m.value)
                table = self._table_of(m, changes)
            except BadMessage as e:
                self._bad(bad, m, str(e))
                continue
            if table is not None and changes:
                decoded.append(_Decoded(m, changes, table))
        by_table: dict[str, list[_Decoded]] = {}
        for d in decoded:
            by_table.setdefault(d.table, []).append(d)
        seq = 0
        planned: list[tuple[str, TableInfo, pa.Table, bool]] = []
        first_bases: dict[str, int] = {}
        for table, items in sorted(by_table.items()):
            info = self.tables.get(table)
            fresh = info is None
            info = info or TableInfo()
            items = self._not_repeated(table, info, items)
            items, truncated = after_truncates(items)
            if truncated and fresh and not items:
                log.info("kafka source: a truncate of %s, met before any of its rows: "
                         "nothing to empty", table)
            if not items and not (truncated and not fresh):
                if not fresh:
                    self.tables[table] = info
                continue
            self._fit_columns(table, info, items, fresh)
            if not info.keys:
                info.keys = self._keys(table, items)
            rows, seq = self._rows(table, info, items, n, seq, bad)
            if fresh:
                self.tables[table] = info
                info.base = bases[table] if table in bases else self._base(table, n)
                first_bases[table] = info.base
            if rows.num_rows or truncated:
                planned.append((table, info, rows, truncated))
        if first_bases and first_bases != bases:  # before any target has the batch
            write_json(self.dir / "offsets" / f"{n}.json",
                       {"start": start, "end": end, "bases": first_bases})
        written = [(table, self._write(table, info, rows, n, truncated))
                   for table, info, rows, truncated in planned]
        reader.dead_letter(bad)
        write_json(self.dir / "commits" / f"{n}.json",
                   {"end": end, "tables": {t: i.to_dict() for t, i in sorted(self.tables.items())}})
        self.batches += 1
        log.info("kafka source: batch %d, %d message(s), %d table(s) written, %d to the "
                 "dead-letter topic, in %.2fs", n, len(msgs), len(written), len(bad),
                 time.monotonic() - t0)
        if self.on_batch is not None:
            for table, rows in written:
                self.on_batch(table, self._frame(rows), self.tables[table].base + n)

    def _bad(self, bad: list, m: Message, why: str) -> None:
        where = f"topic {m.topic}, partition {m.partition}, offset {m.offset}"
        if not self.config.tolerate_errors:
            raise DecodeError(f"the kafka source cannot read the message at {where}: it is not "
                              f"{self.config.value_format} ({why})",
                              fix="fix the producer, or set errors.tolerance: all and "
                                  "errors.deadletterqueue.topic.name to send such messages "
                                  "there and go on")
        log.warning("kafka source: the message at %s goes to the dead-letter topic %s: %s",
                    where, self.config.dead_letter_topic, why)
        bad.append((m, why))

    def _table_of(self, m: Message, changes: list[Change]) -> str | None:
        """``db.table`` of the message's changes: from the message (Debezium's ``source``,
        Canal's ``database``/``table``, sparkcdc's changelog fields), else the topic's
        name when it is ``db.table`` (how the kafka sink names topics). None: a table the
        source's ``tables`` leaves out."""
        if not changes:
            return None
        c = changes[0]
        if c.database and c.table:
            name = f"{c.database}.{c.table}"
        elif m.topic.count(".") >= 1:
            name = m.topic if m.topic.count(".") == 1 else ".".join(m.topic.split(".")[-2:])
        else:
            raise BadMessage("it names no database and table, and the topic's name is not "
                             "db.table")
        if self.config.tables and not matches(self.config.tables, name):
            return None
        return name

    def _not_repeated(self, table: str, info: TableInfo,
                      items: list[_Decoded]) -> list[_Decoded]:
        """Debezium's repeats left out: an event at or below the highest source position
        applied to the table from the event's topic-partition (each partition's mark moves
        on as the batch's events pass)."""
        out = []
        marks = dict(info.positions)
        skipped: dict[str, int] = {}
        for d in items:
            pos = d.changes[0].position
            if pos is not None:
                tp = tp_name(d.msg.topic, d.msg.partition)
                mark = marks.get(tp, info.legacy)
                if mark is not None and pos.key() <= mark.key():
                    skipped[tp] = skipped.get(tp, 0) + 1
                    continue
                marks[tp] = pos
            out.append(d)
        for tp, count in sorted(skipped.items()):
            mark = marks.get(tp, info.legacy)
            assert mark is not None
            log.warning("kafka source: %d event(s) of %s in %s at or before a source position "
                        "applied from there (up to %s:%d) were repeats (a Debezium restart): "
                        "skipped", count, table, tp, mark.file, mark.pos)
        info.positions, info.skipped = marks, info.skipped + sum(skipped.values())
        return out

    def _fit_columns(self, table: str, info: TableInfo, items: list[_Decoded],
                     fresh: bool) -> None:
        """The table's columns: those it has, then new ones in the order met, typed as the
        messages declare or by their values. A column new to a table with a target is
        added to the target (a nullable column)."""
        have = {f.name for f in info.columns}
        order: list[str] = []
        declared: dict[str, pa.DataType] = {}
        values: dict[str, list] = {}
        for d in items:
            for c in d.changes:
                for k, v in c.row.items():
                    if k not in have and k not in values:
                        order.append(k)
                        values[k] = []
                    if k in values:
                        values[k].append(v)
                if c.types:
                    declared.update({k: t for k, t in c.types.items() if k not in declared})
        new = [pa.field(k, declared.get(k) or infer_type(values[k])) for k in order]
        if not new:
            return
        if not fresh:
            log.warning("kafka source: %s has new column(s) %s", table,
                        ", ".join(f"{f.name} {f.type}" for f in new))
            sink = self._sink(table)
            if sink.capabilities.kind is SinkKind.MERGE:
                for s in targets.each_sink(sink):
                    s.evolve([ColumnChange(ChangeKind.ADD, f.name, type=f.type) for f in new],
                             info.keys)
        info.columns = info.columns + new

    def _rows(self, table: str, info: TableInfo, items: list[_Decoded], n: int, seq: int,
              bad: list) -> tuple[pa.Table, int]:
        """The table's change rows of the batch, in message order, as Arrow (the table's
        columns, then the metadata columns); a message whose values do not fit the
        columns' types is a bad message."""
        cols: dict[str, list] = {f.name: [] for f in info.columns}
        meta: dict[str, list] = {f.name: [] for f in META_FIELDS}
        for d in items:
            changes = split_key_changes(d.changes, info.keys)
            try:
                converted = [[convert(c.row.get(f.name), f.type) for f in info.columns]
                             for c in changes]
            except (ValueError, TypeError, ArithmeticError) as e:
                self._bad(bad, d.msg, f"a value does not fit {table}'s columns ({e})")
                continue
            for c, vals in zip(changes, converted):
                for f, v in zip(info.columns, vals):
                    cols[f.name].append(v)
                meta["_change_type"].append(c.kind)
                meta["_database"].append(table.partition(".")[0])
                meta["_table"].append(table.partition(".")[2])
                meta["_op_ts"].append(None if c.op_ts_ms is None else
                                      c.op_ts_ms * 1000)
                meta["_seq"].append(n * SEQ_STRIDE + seq)
                seq += 1
        arrays = [pa.array(cols[f.name], f.type) for f in info.columns]
        arrays += [pa.array(meta["_change_type"], pa.string()),
                   pa.array(meta["_database"], pa.string()),
                   pa.array(meta["_table"], pa.string()),
                   pa.array(meta["_op_ts"], pa.int64()).cast(pa.timestamp("us", tz="UTC")),
                   pa.array([_dec(s) for s in meta["_seq"]], pa.decimal128(38, 0))]
        return pa.Table.from_arrays(arrays, schema=pa.schema(info.columns + META_FIELDS)), seq

    def _keys(self, table: str, items: list[_Decoded]) -> tuple[str, ...]:
        """The table's key: a transform's primary-keys, else the source's primary-keys
        option, else what its messages name (Canal's pkNames, the message key's fields)."""
        t = transform_of(self.defn, table)
        if t is not None and t.primary_keys:
            return t.primary_keys
        for sel, keys in self.config.primary_keys:
            if matches(sel, table):
                return keys
        for d in items:
            if d.changes[0].keys:
                return d.changes[0].keys
        raise ConfigError(f"the kafka source cannot tell the primary key of {table}: its "
                          "messages do not name it", fix=f"set primary-keys: {table}:<key "
                          "columns> in the source, or primary-keys in a transform of "
                          f"{table}", key="primary-keys")

    def _base(self, table: str, n: int) -> int:
        """A table met for the first time: its targets' batch ids go on after theirs."""
        last = self._sink(table).last_batch_id()
        return last + 1 - n if last is not None and last >= n else 0

    def _sink(self, table: str):
        s = self.sinks.get(table)
        if s is None:
            t = transform_of(self.defn, table)
            extra = (targets.table_creation_options(self.defn.sink.type, t.partition_keys,
                                                    t.table_options) if t else {})
            s = self.sinks[table] = targets.create_sinks(
                self.defn.sink.type, self.defn.sink.options, list(targets_of(self.defn, table)),
                f"{self.settings.name}.{table}", extra, source=table)
        return s

    def _write(self, table: str, info: TableInfo, rows: pa.Table, n: int,
               truncated: bool = False) -> pa.Table:
        """The table's rows of batch ``n`` written to its target(s); ``truncated``: a
        truncate came before them, so each target that lacks the batch is emptied first."""
        shaper = shaper_for(self.defn, table)
        if shaper.active:
            rows = shaper.apply(self._frame(rows), info.keys).toArrow()
        spec = shaper.spec(info.keys)
        missing = [k for k in info.keys if k not in rows.column_names]
        if missing:
            raise SchemaError(f"key column(s) {missing} of {table} are not in its rows",
                              fix="set primary-keys (source or transform) to columns the "
                                  f"rows have: {', '.join(rows.column_names)}")
        sink = self._sink(table)
        batch = info.base + n
        if sink.capabilities.kind is SinkKind.CHANGELOG:
            if truncated:  # a truncate event (kafka), unless a replay has the batch
                for s in targets.each_sink(sink):
                    last = s.last_batch_id()
                    if last is None or last < batch:
                        s.empty()
            marks = [c for c in (DEL_MARK, TRUNC_MARK) if c in rows.column_names]
            changes = rows.drop_columns(marks)
            sink.write_changelog(changes if sink.capabilities.takes_arrow else self._frame(changes), batch,
                                 info.keys)
        else:
            for s in targets.each_sink(sink):  # each target skips the batch if it has it
                apply_arrow(s, rows, batch, spec, truncated)
        return rows

    def _frame(self, rows: pa.Table):
        from pyspark.sql.pandas.types import from_arrow_schema

        return self.spark.createDataFrame(
            rows, schema=from_arrow_schema(rows.schema, prefer_timestamp_ntz=True))


def after_truncates(items: list[_Decoded]) -> tuple[list[_Decoded], bool]:
    """A table's messages of a batch after its truncates, and whether there was one. A
    truncate cuts the partition it is in: that partition's messages before it are dropped
    (the target is emptied), those of other partitions are kept. sparkcdc's kafka sink
    writes the event into every partition, so there it cuts the whole table; Debezium
    writes it into one, and gives no order between partitions."""
    last: dict[tuple[str, int], int] = {}
    for i, d in enumerate(items):
        if any(c.kind == TRUNCATE for c in d.changes):
            last[(d.msg.topic, d.msg.partition)] = i
    if not last:
        return items, False
    return [d for i, d in enumerate(items)
            if i > last.get((d.msg.topic, d.msg.partition), -1)], True


def _dec(v: int):
    import decimal

    return decimal.Decimal(v)

