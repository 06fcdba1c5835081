"""A changelog of several tables, known in advance, and the messages other systems would
write of it into Kafka: Debezium's MySQL connector (debezium-json, one topic per table,
the events of a restart sent again), Canal (canal-json, one topic partitioned by table,
every row of a statement in one message, a primary-key change as one UPDATE) and a Flink
job (changelog-json, one topic partitioned by key, in Kafka transactions, some aborted).

``Changelog`` keeps what the tables must hold at the end (``state``) and every version of
every key in order (``history``: what an SCD type 2 target must hold, each change once).
The fault tests write it with a real producer, run the ``kafka`` source over it, kill it,
and compare the targets with these two.
"""

from __future__ import annotations

import json
import random
import zlib
from dataclasses import dataclass, field

Row = dict  # {"id": int, "v": int, "s": str | None}


@dataclass
class Statement:
    """One source statement: its table, its kind, and the rows it changed (before, after)."""

    table: str
    kind: str  # insert | update | delete | rekey | snapshot
    rows: list[tuple[Row | None, Row | None]]


@dataclass
class Changelog:
    """Random statements over ``tables`` (``db.table``), each table starting with ``rows``
    rows (a snapshot): inserts, updates of one to four rows, deletes, and primary-key
    changes. ``state`` and ``history`` follow every statement made."""

    tables: tuple[str, ...]
    rows: int
    seed: int
    statements: list[Statement] = field(default_factory=list)
    state: dict[str, dict[int, tuple]] = field(default_factory=dict)
    history: dict[str, dict[int, list[tuple]]] = field(default_factory=dict)

    def __post_init__(self):
        self.rnd = random.Random(self.seed)
        self.next_id = {t: self.rows + 1 for t in self.tables}
        for t in self.tables:
            self.state[t], self.history[t] = {}, {}
            for i in range(1, self.rows + 1):
                self._apply(Statement(t, "snapshot", [(None, self._row(i, t))]))

    def _row(self, key: int, table: str, v: int = 0) -> Row:
        s = None if self.rnd.random() < 0.1 else f"{table.split('.')[1]}-{key}-{v}"
        return {"id": key, "v": v, "s": s}

    def _apply(self, st: Statement) -> None:
        state, history = self.state[st.table], self.history[st.table]
        for before, after in st.rows:
            if before is not None:
                assert state.pop(before["id"]) == (before["v"], before["s"])
            if after is not None:
                assert after["id"] not in state
                state[after["id"]] = (after["v"], after["s"])
                history.setdefault(after["id"], []).append((after["v"], after["s"]))
        self.statements.append(st)

    def more(self, n: int) -> list[Statement]:
        """``n`` new statements (applied to ``state``), returned."""
        made = []
        while len(made) < n:
            t = self.rnd.choice(self.tables)
            held = self.state[t]
            op = self.rnd.random()
            if op < 0.25 or len(held) < 10:
                k = self.next_id[t]
                self.next_id[t] += 1
                st = Statement(t, "insert", [(None, self._row(k, t))])
            elif op < 0.65:
                keys = self.rnd.sample(sorted(held), self.rnd.choice((1, 1, 1, 2, 4)))
                rows = []
                for k in keys:
                    v, s = held[k]
                    rows.append(({"id": k, "v": v, "s": s}, self._row(k, t, v + 1)))
                st = Statement(t, "update", rows)
            elif op < 0.85:
                k = self.rnd.choice(sorted(held))
                v, s = held[k]
                st = Statement(t, "delete", [({"id": k, "v": v, "s": s}, None)])
            else:  # the key changes: a free key, often one that was deleted before
                k = self.rnd.choice(sorted(held))
                free = [i for i in range(1, self.next_id[t]) if i not in held]
                new = self.rnd.choice(free) if free and self.rnd.random() < 0.5 else None
                if new is None:
                    new = self.next_id[t]
                    self.next_id[t] += 1
                v, s = held[k]
                st = Statement(t, "rekey", [({"id": k, "v": v, "s": s},
                                             {"id": new, "v": v + 1, "s": s})])
            self._apply(st)
            made.append(st)
        return made

    def snapshot(self) -> list[Statement]:
        return [st for st in self.statements if st.kind == "snapshot"]


def partition_of(table: str, key: int, partitions: int) -> int:
    """The partition a producer keyed by the primary key picks (stable across runs)."""
    return zlib.crc32(f"{table}:{key}".encode()) % partitions


def _key(k: int) -> bytes:
    return json.dumps({"id": k}).encode()


# -- Debezium ----------------------------------------------------------------------------------

class Debezium:
    """Debezium's MySQL connector: one topic per table (``<prefix>.<db>.<table>``), events
    keyed by the primary key, a delete followed by its tombstone, a primary-key change as
    a delete of the old key and a create of the new one at the same source position. The
    binlog rotates now and then. ``restart`` sends the events since an earlier point again,
    as the connector does after a crash (its offsets were flushed before)."""

    def __init__(self, prefix: str, partitions: int):
        self.prefix, self.partitions = prefix, partitions
        self.file, self.pos, self.streamed = 3, 4, 0
        self.sent: list[tuple[str, int, bytes, bytes | None]] = []  # every streamed message

    def topic(self, table: str) -> str:
        return f"{self.prefix}.{table}"

    def _event(self, st: Statement, op, before, after, row, snapshot="false"):
        db, table = st.table.split(".")
        source = {"version": "3.0.0.Final", "connector": "mysql", "name": self.prefix,
                  "ts_ms": 1700000000000 + self.pos, "snapshot": snapshot, "db": db,
                  "sequence": None, "table": table, "server_id": 1, "gtid": None,
                  "file": f"mysql-bin.{self.file:06d}", "pos": self.pos, "row": row,
                  "thread": 7, "query": None}
        return json.dumps({"before": before, "after": after, "source": source, "op": op,
                           "ts_ms": 1700000000500 + self.pos, "transaction": None}).encode()

    def messages(self, statements: list[Statement]):
        """(topic, partition, key, value) of each statement's events, in binlog order."""
        out = []
        for st in statements:
            topic = self.topic(st.table)
            if st.kind == "snapshot":  # op r, one shared position (not compared)
                before, after = st.rows[0]
                flag = "true"
                out.append((topic, partition_of(st.table, after["id"], self.partitions),
                            _key(after["id"]), self._event(st, "r", None, after, 0, flag)))
                continue
            self.streamed += 1
            if self.streamed % 500 == 0:  # the binlog rotates: positions start again
                self.file, self.pos = self.file + 1, 4
            self.pos += 100 + 37 * len(st.rows)
            for row, (before, after) in enumerate(st.rows):
                if st.kind == "rekey":
                    for k, op, b, a in ((before["id"], "d", before, None),
                                        (after["id"], "c", None, after)):
                        p = partition_of(st.table, k, self.partitions)
                        out.append((topic, p, _key(k), self._event(st, op, b, a, row)))
                        if op == "d":
                            out.append((topic, p, _key(k), None))
                    continue
                k = (after or before)["id"]
                p = partition_of(st.table, k, self.partitions)
                op = {"insert": "c", "update": "u", "delete": "d"}[st.kind]
                out.append((topic, p, _key(k), self._event(st, op, before, after, row)))
                if op == "d":
                    out.append((topic, p, _key(k), None))
        self.sent += out
        return out

    def restart(self, back: int):
        """The last ``back`` messages sent again, unchanged (same keys, same partitions,
        same source positions): what the connector sends after a restart."""
        return list(self.sent[-back:])


# -- Canal ---------------------------------------------------------------------------------------

MYSQL_TYPES = {"id": "int(11)", "v": "int(11)", "s": "varchar(40)"}


def _text(v):
    return None if v is None else str(v)


def canal_messages(statements: list[Statement], partitions: int, tables: tuple[str, ...]):
    """Canal's flat messages, one per statement with every row it changed, values as text
    typed by ``mysqlType``; partitioned by table (Canal's ``partitionHash`` on the table
    name keeps a table's statements in order); a primary-key change is one UPDATE whose
    ``old`` holds the old key."""
    out = []
    for st in statements:
        db, table = st.table.split(".")
        typ = {"snapshot": "INSERT", "insert": "INSERT", "update": "UPDATE",
               "rekey": "UPDATE", "delete": "DELETE"}[st.kind]
        data, old = [], []
        for before, after in st.rows:
            row = after if after is not None else before
            data.append({c: _text(v) for c, v in row.items()})
            if typ == "UPDATE":
                old.append({c: _text(before[c]) for c in before if before[c] != after[c]})
        body = {"data": data, "old": old or None, "type": typ, "database": db, "table": table,
                "pkNames": ["id"], "isDdl": False, "mysqlType": MYSQL_TYPES,
                "sqlType": {"id": 4, "v": 4, "s": 12}, "es": 1700000000000,
                "ts": 1700000000001, "id": len(out)}
        out.append((None, tables.index(st.table) % partitions, st.table.encode(),
                    json.dumps(body).encode()))
    return out


def canal_ddl(table: str, partition: int):
    db, name = table.split(".")
    body = {"data": None, "old": None, "type": "CREATE", "database": db, "table": name,
            "isDdl": True, "sql": f"CREATE TABLE {name} (id INT PRIMARY KEY, v INT, "
                                  "s VARCHAR(40))", "pkNames": None, "es": 1700000000000,
            "ts": 1700000000001}
    return (None, partition, table.encode(), json.dumps(body).encode())


# -- Flink's changelog JSON ------------------------------------------------------------------------

def changelog_messages(statements: list[Statement], partitions: int):
    """Flink's changelog JSON (sparkcdc's ``db``/``table`` fields with it), keyed and
    partitioned by the primary key; an update is -U then +U of its key, a primary-key
    change a -D of the old key and a +I of the new one (what Flink CDC makes of
    Debezium's pair)."""
    out = []

    def msg(table, op, row):
        db, name = table.split(".")
        body = {"data": row, "op": op, "db": db, "table": name, "ts_ms": 1700000000000}
        return (None, partition_of(table, row["id"], partitions), _key(row["id"]),
                json.dumps(body).encode())

    for st in statements:
        for before, after in st.rows:
            if st.kind in ("snapshot", "insert"):
                out.append(msg(st.table, "+I", after))
            elif st.kind == "update":
                out += [msg(st.table, "-U", before), msg(st.table, "+U", after)]
            elif st.kind == "delete":
                out.append(msg(st.table, "-D", before))
            else:
                out += [msg(st.table, "-D", before), msg(st.table, "+I", after)]
    return out


# -- producing -----------------------------------------------------------------------------------

def create_topics(broker, topics: list[str], partitions: int) -> None:
    from confluent_kafka.admin import AdminClient, NewTopic

    admin = AdminClient({"bootstrap.servers": broker.bootstrap_servers})
    fs = admin.create_topics([NewTopic(t, num_partitions=partitions, replication_factor=1)
                              for t in topics])
    for f in fs.values():
        f.result(30)


class Producer:
    """A real librdkafka producer (idempotent: each partition keeps the order sent).
    ``transactional``: every ``send`` is one Kafka transaction, as a Flink job's
    exactly-once sink writes."""

    def __init__(self, broker, transactional_id: str | None = None):
        import confluent_kafka as ck

        conf = {"bootstrap.servers": broker.bootstrap_servers, "enable.idempotence": True,
                "linger.ms": 5}
        if transactional_id:
            conf["transactional.id"] = transactional_id
        self.p = ck.Producer(conf)
        self.transactional = bool(transactional_id)
        if self.transactional:
            self.p.init_transactions(30)

    def send(self, messages, topic: str | None = None, abort: bool = False) -> None:
        """``(topic or None, partition, key, value)`` tuples, flushed; in one transaction
        (committed, or aborted with ``abort``) when transactional."""
        if self.transactional:
            self.p.begin_transaction()
        failed: list = []
        for t, part, key, value in messages:
            self.p.produce(t or topic, key=key, value=value, partition=part,
                           on_delivery=lambda err, _m: err and failed.append(err))
            self.p.poll(0)
        assert self.p.flush(30) == 0  # in the log (an aborted transaction's too)
        assert not failed, failed
        if self.transactional:
            (self.p.abort_transaction if abort else self.p.commit_transaction)(30)
