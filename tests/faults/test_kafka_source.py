"""``sparkcdc run`` with ``source: type: kafka`` SIGKILLed again and again while a producer
keeps writing the topics, then run to the end: every target holds each change exactly once.

The changelog is known in advance (``kafka_source_support.Changelog``: three tables in two
databases, inserts, updates of one to four rows per statement, deletes, primary-key
changes), written with a real producer as the system it stands for writes it:

* debezium-json: one topic per table, two partitions keyed by the primary key, tombstones,
  a primary-key change as a delete and a create at one source position; twice the
  connector "restarts" and sends its last events again (same positions, same partitions);
* canal-json: one topic of three partitions by table, a statement's rows in one message,
  values as text typed by ``mysqlType``, a primary-key change as one UPDATE;
* changelog-json: one topic of three partitions keyed by the primary key, each send one
  Kafka transaction, every third one preceded by an aborted transaction of junk changes.

One table of the three is SCD type 2 (a transform), the others SCD type 1, into Delta or
PostgreSQL. The runs die at chosen points (``kill_point_child.py``: right after a target
write, inside a batch's apply; after every target wrote a batch, before its commit is
logged) and at random moments (1 to 3 batches in, then 0 to 2 s). The last run catches up
once the producer stopped. Then each SCD1 target equals the changelog's final state, every
key once, and the SCD2 target holds every version of every key once, in order, only the
live keys' last one open. For Debezium the repeats the checkpoint counts as skipped must
equal the events sent again: none lost for a repeat, none applied twice.
"""

from __future__ import annotations

import itertools
import json
import random
import sys
import threading
import uuid
from pathlib import Path

import pytest
from faults_support import SEED
from kafka_source_support import (
    Changelog,
    Debezium,
    Producer,
    Statement,
    canal_ddl,
    canal_messages,
    changelog_messages,
    create_topics,
)
from kill_support import PipelineRuns, count_files
from sink_support import read_delta

CHILD = Path(__file__).parents[1] / "support" / "kill_point_child.py"
PARTITIONS = 3
# the kills, in order: a chosen point (kill_point_child.py) or None (a random moment)
SCHEDULE = ("write:1", None, "commit:2", None, "write:3", None)


class Feed:
    """Writes statements of a ``Changelog`` into Kafka as ``fmt``'s producer would."""

    def __init__(self, fmt: str, broker, tables: tuple[str, ...], tag: str):
        self.fmt, self.broker, self.tables = fmt, broker, tables
        self.repeats = 0  # Debezium events sent again
        self.sends = 0
        if fmt == "debezium-json":
            self.dbz = Debezium(f"dbz{tag}", 2)
            create_topics(broker, [self.dbz.topic(t) for t in tables], 2)
            self.source = f"topic-pattern: dbz{tag}\\..*"
            self.producer = Producer(broker)
        else:
            self.topic = f"{fmt.split('-')[0]}{tag}"
            create_topics(broker, [self.topic], PARTITIONS)
            self.source = f"topic: {self.topic}"
            self.producer = Producer(broker, transactional_id=f"flink-{tag}"
                                     if fmt == "changelog-json" else None)
            if fmt == "canal-json":
                self.producer.send([canal_ddl(t, i % PARTITIONS) for i, t in enumerate(tables)],
                                   topic=self.topic)

    def send(self, statements: list[Statement], state: dict) -> None:
        self.sends += 1
        if self.fmt == "debezium-json":
            self.producer.send(self.dbz.messages(statements))
        elif self.fmt == "canal-json":
            self.producer.send(canal_messages(statements, PARTITIONS, self.tables),
                               topic=self.topic)
        else:
            if self.sends % 3 == 0:  # a transaction that fails: never to be applied
                self.producer.send(changelog_messages(self._junk(state), PARTITIONS),
                                   topic=self.topic, abort=True)
            self.producer.send(changelog_messages(statements, PARTITIONS), topic=self.topic)

    def _junk(self, state: dict) -> list[Statement]:
        t = self.tables[self.sends % len(self.tables)]
        held = sorted(state[t].items())[:20]
        return ([Statement(t, "delete", [({"id": k, "v": v, "s": s}, None)]) for k, (v, s) in held]
                + [Statement(t, "insert", [(None, {"id": 10**6 + i, "v": -1, "s": "junk"})])
                   for i in range(20)])

    def restart(self, back: int) -> None:
        """Debezium restarted: its last ``back`` messages again."""
        again = self.dbz.restart(back)
        self.repeats += sum(1 for m in again if m[3] is not None)
        self.producer.send(again)


class LiveProducer(threading.Thread):
    """Goes on writing statements while the runs are killed (``chunk`` every ``pause`` s,
    up to ``most``), until stopped; Debezium restarts once on the way."""

    def __init__(self, feed: Feed, log: Changelog, chunk=15, pause=2.0, most=4000):
        super().__init__(daemon=True)
        self.feed, self.log, self.chunk, self.pause, self.most = feed, log, chunk, pause, most
        self.halt, self.made, self.error = threading.Event(), 0, None

    def run(self):
        try:
            while not self.halt.is_set() and self.made < self.most:
                self.feed.send(self.log.more(self.chunk), self.log.state)
                self.made += self.chunk
                if self.feed.fmt == "debezium-json" and self.made == 20 * self.chunk:
                    self.feed.restart(60)
                self.halt.wait(self.pause)
        except Exception as e:  # noqa: BLE001 - surfaced by __exit__
            self.error = e

    def __enter__(self):
        self.start()
        return self

    def __exit__(self, *exc):
        self.halt.set()
        self.join()
        assert self.error is None, self.error


def _yaml(path: Path, feed: Feed, sink: str, scd2: str, tmp_path: Path, pg) -> None:
    if sink == "delta":
        sink_block = f"  type: delta\n  path: {tmp_path / 'lake'}\n"
    else:
        sink_block = (f"  type: postgres\n  host: {pg.host}\n  port: {pg.port}\n"
                      f"  user: {pg.user}\n  password: ${{PG_PW}}\n  database: {pg.database}\n")
    path.write_text(f"""\
source:
  type: kafka
  properties.bootstrap.servers: {feed.broker.bootstrap_servers}
  {feed.source}
  value.format: {feed.fmt}
  maxOffsetsPerTrigger: 200
sink:
{sink_block}transform:
  - source-table: {scd2}
    stored-as-scd-type: 2
pipeline:
  name: ksrc
  parallelism: 1
  trigger.interval: 1s
  checkpoint.location: {tmp_path / 'ckpt'}
""")


def _target(sink: str, table: str, tmp_path: Path, pg) -> list[dict]:
    db, name = table.split(".")
    if sink == "delta":
        import deltalake

        return read_delta(deltalake.DeltaTable(str(tmp_path / "lake" / db / name))) \
            .to_pylist()
    import psycopg

    with psycopg.connect(host=pg.host, port=pg.port, user=pg.user, password=pg.password,
                         dbname=pg.database) as conn:
        cur = conn.execute(f'SELECT * FROM "{db}"."{name}"')
        names = [d.name for d in cur.description]
        return [dict(zip(names, r)) for r in cur.fetchall()]


def _check_latest(rows: list[dict], state: dict, table: str) -> None:
    ids = [r["id"] for r in rows]
    assert len(ids) == len(set(ids)), f"{table}: a key is held twice"
    got = {r["id"]: (r["v"], r["s"]) for r in rows}
    missing, extra = set(state) - set(got), set(got) - set(state)
    differ = sorted(k for k in set(state) & set(got) if state[k] != got[k])
    assert not (missing or extra or differ), (
        f"{table}: target != changelog: {len(missing)} missing ({sorted(missing)[:5]}), "
        f"{len(extra)} extra ({sorted(extra)[:5]}), {len(differ)} differ "
        f"({[(k, got[k], state[k]) for k in differ[:3]]})")


def _check_history(rows: list[dict], history: dict, state: dict, table: str) -> None:
    """Every version of every key once, in the changelog's order; a version ends where
    the key's next one starts or at its delete; only a live key's last version is open."""
    by_key: dict = {}
    for r in rows:
        by_key.setdefault(r["id"], []).append(r)
    assert set(by_key) == set(history), (
        f"{table}: keys {sorted(set(history) - set(by_key))[:5]} have no version, "
        f"{sorted(set(by_key) - set(history))[:5]} were never written")
    for k, versions in by_key.items():
        versions.sort(key=lambda r: r["__START_AT"])
        values = [(r["v"], r["s"]) for r in versions]
        assert values == history[k], f"{table} key {k}: versions {values} != {history[k]}"
        for a, b in itertools.pairwise(versions):
            assert a["__END_AT"] is not None and a["__END_AT"] <= b["__START_AT"], (k, a, b)
        last = versions[-1]
        assert (last["__END_AT"] is None) == (k in state), (table, k, last)


@pytest.mark.faults
@pytest.mark.timeout(2400)
@pytest.mark.parametrize("fmt, sink", [("debezium-json", "postgres"), ("canal-json", "delta"),
                                       ("changelog-json", "postgres")])
def test_kafka_source_killed_applies_each_change_once(fmt, sink, tmp_path, kafka_broker,
                                                      request):
    pg = request.getfixturevalue("pg_server").info if sink == "postgres" else None
    tag = uuid.uuid4().hex[:8]
    tables = (f"crm{tag}.people", f"shop{tag}.orders", f"shop{tag}.items")
    scd2 = tables[0]  # sorted first: the first write of a batch
    rnd = random.Random(SEED + 300)
    log = Changelog(tables, rows=150, seed=SEED + 300)
    feed = Feed(fmt, kafka_broker, tables, tag)
    feed.send(log.snapshot() + log.more(300), log.state)
    if fmt == "debezium-json":
        feed.restart(80)
    feed.send(log.more(300), log.state)
    yaml = tmp_path / "p.yaml"
    _yaml(yaml, feed, sink, scd2, tmp_path, pg)
    runs = PipelineRuns(yaml, tmp_path, count_files(tmp_path / "ckpt" / "kafka" / "commits"),
                        env={"PG_PW": pg.password} if pg else {},
                        command=[sys.executable, str(CHILD)])
    hits = []
    with LiveProducer(feed, log):
        for point in SCHEDULE:
            if point is None:
                hits += runs.kill_loop(1, rnd)
                continue
            p = runs.start(env={"SPARKCDC_TEST_KILL": point})
            assert runs.wait_exit(p) == -9, runs.tail()
            hits.append({"run": runs.runs - 1, "point": runs.tail().split("KILLPOINT ")[-1]
                         .splitlines()[0], "batches_at_kill": runs.progress()})
    runs.to_the_end()
    replays = sum("was planned and not committed" in runs.log(k).read_text()
                  for k in range(runs.runs))
    assert replays >= 2, "no kill left a batch to read again: the test proves nothing"
    for t in tables:
        rows = _target(sink, t, tmp_path, pg)
        if t == scd2:
            _check_history(rows, log.history[t], log.state[t], t)
        else:
            _check_latest(rows, log.state[t], t)
    if fmt == "debezium-json":
        commits = tmp_path / "ckpt" / "kafka" / "commits"
        last = max(int(p.stem) for p in commits.glob("*.json"))
        state = json.loads((commits / f"{last}.json").read_text())["tables"]
        assert sum(s["skipped"] for s in state.values()) == feed.repeats > 0
    changes = sum(len(st.rows) for st in log.statements)
    print(f"{fmt} into {sink}: {len(log.statements)} statements ({changes} rows changed), "
          f"{runs.progress()} batches, {replays} runs read a batch again; kills:",
          *hits, sep="\n  ")
