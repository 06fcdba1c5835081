"""Helpers of the tests that read a table again under writes (tests/pipeline/test_reread.py,
tests/faults/test_reread_kill.py): a writer that deletes, re-inserts and re-keys rows all
over two tables, each sink kind's targets read back with a reader of its own, and where the
stream's checkpoint says a table's re-read stands."""

from __future__ import annotations

import json
import random
import threading
import time
from pathlib import Path

import deltalake
import iceberg_support
import pyarrow as pa
from server_support import seq
from sink_support import read_delta

from sparkcdc import sinks
from sparkcdc.spark.offset_view import read_offset

ROWS = 1500  # per table; chunks of 50: 30 chunks read again
COLUMNS = ("v", "s")  # compared besides the key
# keys the source never has (ids 1..ROWS, the writer's new ones from 2 * ROWS), put into a
# merge target behind the pipeline: in the first chunk, a middle one, past the last key
STRAYS = (-7, 2 * ROWS - 500, 10**6 + 1)


def make_tables(mariadb, db: str, rows: int = ROWS) -> None:
    """Tables ``a`` and ``b`` of ``rows`` rows each."""
    for t in "ab":
        mariadb.execute(f"CREATE TABLE {t} (id INT PRIMARY KEY, v INT, s VARCHAR(10))",
                        f"INSERT INTO {t} SELECT seq, seq, 'init' FROM {seq(mariadb, rows)}",
                        database=db)


def pipeline_yaml(source: str, target: Target, ckpt: Path) -> str:
    """A pipeline over ``source`` (a ``source:`` block) into ``target``'s sink, chunks of
    50 rows, a batch a second."""
    routes = "".join(f"""  - source-table: {target.db}.(\\.*)
    sink-table: {out}.$1
""" for out in target.outs)
    return (source + "  scan.incremental.snapshot.chunk.size: 50\n" + "sink:\n" + target.yaml()
            + "route:\n" + routes + f"""pipeline:
  name: reread
  parallelism: 1
  checkpoint.location: {ckpt}
  trigger.interval: 1s
""")


class Writer(threading.Thread):
    """Random inserts, updates, deletes, re-inserts of deleted keys and key changes on
    tables ``a`` and ``b`` until stopped, each in its own autocommitted statement."""

    def __init__(self, mariadb, db: str, seed: int):
        super().__init__(daemon=True)
        self.conn = mariadb.admin_connection(db)
        self.rng = random.Random(seed)
        self.stop_now = threading.Event()
        self.ops: dict[str, int] = {}
        self.error: BaseException | None = None
        self.deleted: dict[str, list[int]] = {"a": [], "b": []}
        self.next_key = ROWS * 2
        # the source table each of ``a`` and ``b`` is written in now (a test renames one
        # while holding ``lock``, which each statement takes)
        self.names = {"a": "a", "b": "b"}
        self.lock = threading.Lock()

    def _one(self, cur) -> None:
        key = self.rng.choice("ab")
        t = self.names[key]
        k = self.rng.randint(1, ROWS)
        op = self.rng.choice(["update", "update", "delete", "delete", "reinsert", "insert",
                              "rekey"])
        deleted = self.deleted[key]
        if op == "reinsert" and deleted:
            k = deleted.pop(self.rng.randrange(len(deleted)))
            n = cur.execute(f"INSERT IGNORE INTO {t} (id, v, s) VALUES (%s, %s, 'again')",
                            (k, self.rng.randint(0, 10**6)))
        elif op == "insert":
            self.next_key += 1
            n = cur.execute(f"INSERT INTO {t} (id, v, s) VALUES (%s, %s, 'new')",
                            (self.next_key, self.rng.randint(0, 10**6)))
        elif op == "delete":
            n = cur.execute(f"DELETE FROM {t} WHERE id = %s", (k,))
            if n:
                deleted.append(k)
        elif op == "rekey":  # the key changes: a delete and an insert to the stream
            self.next_key += 1
            n = cur.execute(f"UPDATE {t} SET id = %s WHERE id = %s", (self.next_key, k))
            if n:
                deleted.append(k)
        else:
            n = cur.execute(f"UPDATE {t} SET v = %s, s = 'upd' WHERE id = %s",
                            (self.rng.randint(0, 10**6), k))
        if n:
            self.ops[op] = self.ops.get(op, 0) + 1

    def run(self) -> None:
        try:
            with self.conn.cursor() as cur:
                while not self.stop_now.is_set():
                    with self.lock:
                        self._one(cur)
                    time.sleep(0.02)
        except BaseException as e:  # noqa: BLE001 - reported by the test
            self.error = e

    def total(self) -> int:
        return sum(self.ops.values())

    def stop(self) -> None:
        """Stopped and its connection closed (a test's cleanup: whatever happened)."""
        self.stop_now.set()
        if self.is_alive():
            self.join(30)
        if self.conn.open:
            self.conn.close()

    def finish(self) -> None:
        self.stop()
        assert self.error is None, f"the writer failed: {self.error!r}"


def source_rows(mariadb, db, table, columns=COLUMNS) -> dict:
    return {r[0]: tuple(r[1:]) for r in mariadb.query(
        f"SELECT id, {', '.join(columns)} FROM `{db}`.`{table}`")}


class Target:
    """One sink kind's targets, read back with a reader of their own (deltalake, SQL, a
    ``read_committed`` Kafka consumer whose changelog is replayed per key; Iceberg by
    pyiceberg and iceberg-rust, which must agree). ``sink_options``: more options of the
    sink; ``fan_out``: each table routed to a second target too, in ``<db>_u`` (``outs``:
    the namespaces, ``out`` the first)."""

    def __init__(self, kind: str, request, tmp_path: Path, db: str,
                 sink_options: dict[str, str] | None = None, fan_out: bool = False):
        self.kind, self.db, self.tmp_path = kind, db, tmp_path
        self.out = f"{db}_t"
        self.outs = (self.out, f"{db}_u") if fan_out else (self.out,)
        self.sink_options = dict(sink_options or {})
        if kind == "postgres":
            self.pg = request.getfixturevalue("pg_server")
        if kind == "kafka":
            self.broker = request.getfixturevalue("kafka_broker")
        if kind == "mysql":  # a database of the source's server (the test's own MariaDB)
            self.my = request.getfixturevalue("mariadb")

    def yaml(self) -> str:
        return self._yaml() + "".join(f"  {k}: {v}\n" for k, v in self.sink_options.items())

    def _yaml(self) -> str:
        if self.kind == "delta":
            return f"  type: delta\n  path: {self.tmp_path}/lake\n"
        if self.kind == "postgres":
            pg = self.pg.info
            return (f"  type: postgres\n  host: {pg.host}\n  port: {pg.port}\n"
                    f"  user: {pg.user}\n  password: {pg.password}\n  database: {pg.database}\n")
        if self.kind == "mysql":
            i = self.my.info
            return (f"  type: mysql\n  hostname: 127.0.0.1\n  port: {i.port}\n"
                    f"  username: {i.admin_user}\n  password: {i.admin_password}\n")
        if self.kind == "iceberg":
            return f"  type: iceberg\n  warehouse: {self.tmp_path}/warehouse\n"
        return (f"  type: kafka\n  properties.bootstrap.servers: "
                f"{self.broker.bootstrap_servers}\n  value.format: debezium-json\n")

    def rows(self, table: str, columns=COLUMNS, out: str | None = None) -> dict:
        if self.kind == "delta":
            path = str(self.tmp_path / "lake" / (out or self.out) / table)
            if not deltalake.DeltaTable.is_deltatable(path):
                return {}
            got = read_delta(deltalake.DeltaTable(path)).to_pylist()
            assert len(got) == len({r["id"] for r in got}), "a key is held twice"
            return {r["id"]: tuple(r.get(c) for c in columns) for r in got}
        if self.kind == "postgres":
            try:
                got = self.pg.execute(f'SELECT id, {", ".join(columns)} FROM '
                                      f'"{self.out}"."{table}"')
            except Exception:  # noqa: BLE001 - not created yet, or the column not yet
                return {}
            assert len(got) == len({r[0] for r in got}), "a key is held twice"
            return {r[0]: tuple(r[1:]) for r in got}
        if self.kind == "mysql":
            try:
                got = self.my.query(f"SELECT id, {', '.join(columns)} FROM "
                                    f"`{self.out}`.`{table}`")
            except Exception:  # noqa: BLE001 - not created yet, or the column not yet
                return {}
            assert len(got) == len({r[0] for r in got}), "a key is held twice"
            return {r[0]: tuple(r[1:]) for r in got}
        if self.kind == "iceberg":
            t = self.iceberg(table, out)._table()
            if t is None:
                return {}
            names = ["id", *columns]
            read = iceberg_support.by_pyiceberg(t)
            if not set(names) <= set(read.column_names):
                return {}  # the column not yet (its ALTER reaches the target in a later batch)
            got = read.to_pylist()
            try:
                other = iceberg_support.rows(iceberg_support.by_iceberg_rust(t), names) \
                    if got else []  # (no snapshot: none)
            except Exception as e:  # only the one window below is waited out
                if "not found in table" not in str(e):
                    raise
                # the column added, no snapshot written with it yet: iceberg-rust (0.11) scans
                # the current snapshot with that snapshot's schema, so it cannot project the
                # new column (pyiceberg reads it as nulls); the next batch's commit ends that
                return {}
            assert other == sorted(tuple(r[n] for n in names) for r in got), \
                "pyiceberg and iceberg-rust read the table differently"
            assert len(got) == len({r["id"] for r in got}), "a key is held twice"
            return {r["id"]: tuple(r.get(c) for c in columns) for r in got}
        sink = sinks.create("kafka", self.broker.info.sink_options(topic=f"{self.out}.{table}"))
        try:
            msgs = sink.read().to_pylist()
        finally:
            sink.close()
        # a key's messages share a partition, whose order is the changelog's; a truncate
        # event of the table (written into every partition) clears what that partition
        # said before it
        parts: dict[int, dict] = {}
        for m in msgs:
            state = parts.setdefault(m["partition"], {})
            e = json.loads(m["value"]) if m["value"] is not None else None
            if e is None:  # a tombstone after a delete
                continue
            if e["op"] == "t":
                assert (e["source"]["db"], e["source"]["table"]) == (self.db, table), e
                state.clear()
                continue
            key = tuple(sorted(json.loads(m["key"]).items()))  # the whole message key
            if e["op"] == "d":
                state.pop(key, None)
            else:
                state[key] = e["after"]
        got = [row for state in parts.values() for row in state.values()]
        assert len(got) == len({r["id"] for r in got}), "a key is held twice"
        return {r["id"]: tuple(r.get(c) for c in columns) for r in got}

    def iceberg(self, table: str, out: str | None = None):
        """The Iceberg sink of a target (its pyiceberg table: ``._table()``)."""
        return sinks.create("iceberg", {"warehouse": f"{self.tmp_path}/warehouse",
                                        "table": f"{out or self.out}.{table}"})

    def truncates(self, table: str) -> int:
        """How many truncate events the table's topic holds in its partition 0 (a Kafka
        target's "emptied")."""
        sink = sinks.create("kafka", self.broker.info.sink_options(topic=f"{self.out}.{table}"))
        try:
            msgs = sink.read().to_pylist()
        finally:
            sink.close()
        return sum(1 for m in msgs if m["partition"] == 0 and m["value"] is not None
                   and json.loads(m["value"]).get("op") == "t")

    def damage(self, table: str) -> None:
        """Rows deleted and changed in the target by hand (a merge target's)."""
        if self.kind == "delta":
            path = str(self.tmp_path / "lake" / self.out / table)
            deltalake.DeltaTable(path).delete("id <= 5")
            deltalake.DeltaTable(path).update({"v": "-1"}, predicate="id > 5 AND id <= 10")
        elif self.kind == "postgres":
            self.pg.execute(f'DELETE FROM "{self.out}"."{table}" WHERE id <= 5')
            self.pg.execute(f'UPDATE "{self.out}"."{table}" SET v = -1 WHERE id > 5 AND id <= 10')
        elif self.kind == "mysql":
            self.my.execute(f"DELETE FROM `{table}` WHERE id <= 5",
                            f"UPDATE `{table}` SET v = -1 WHERE id > 5 AND id <= 10",
                            database=self.out)

    def add_stray(self, table: str, key: int) -> None:
        """A key the source never had, written into the target behind the pipeline."""
        if self.kind == "delta":
            path = str(self.tmp_path / "lake" / self.out / table)
            dt = deltalake.DeltaTable(path)
            one = read_delta(dt).slice(0, 1)
            one = one.set_column(one.schema.get_field_index("id"), "id",
                                 pa.array([key], one.schema.field("id").type))
            deltalake.write_deltalake(dt, one, mode="append")
        elif self.kind == "mysql":
            self.my.execute(f"INSERT INTO `{table}` (id, v, s) VALUES ({key}, 1, 'stray')",
                            database=self.out)
        elif self.kind == "iceberg":
            t = self.iceberg(table)._table()
            one = t.scan(limit=1).to_arrow()
            one = one.set_column(one.schema.get_field_index("id"), one.schema.field("id"),
                                 pa.array([key], one.schema.field("id").type))
            t.append(one)
        else:
            self.pg.execute(f'INSERT INTO "{self.out}"."{table}" (id, v, s) '
                            f"VALUES ({key}, 1, 'stray')")


def binlog_files(server) -> list[str]:
    return [r[0] for r in server.query("SHOW BINARY LOGS")]


def purge_to(server, keep: str) -> None:
    """PURGE BINARY LOGS TO ``keep``; the server refuses files its binlog checkpoint still
    needs, so again until the files before ``keep`` are gone."""
    deadline = time.monotonic() + 60
    while binlog_files(server)[0] != keep:
        server.execute(f"PURGE BINARY LOGS TO '{keep}'")
        if binlog_files(server)[0] == keep:
            break
        assert time.monotonic() < deadline, binlog_files(server)
        time.sleep(0.5)


def mark(ckpt: Path, table: str) -> tuple[int, int, bool]:
    """The table in the stream's last committed batch: (generation, rereads taken, whether
    it streams with no reread under way)."""
    for g in sorted((ckpt / "streams" / "_tables").glob("g*"), reverse=True):
        commits = [int(p.name) for p in (g / "commits").glob("[0-9]*")]
        off = read_offset(g, max(commits)) if commits else None
        if off is None:
            continue
        e = off.table(table)
        return e.generation, e.reread_id, e.phase == "done" and not e.rereading
    return (0, 0, False)


def read_again(ckpt: Path, table: str, since: tuple[int, int, bool]) -> bool:
    """Whether the table was read again since ``since`` (a ``mark``) and streams again."""
    now = mark(ckpt, table)
    return now[:2] > since[:2] and now[2]


class KillableRun:
    """A pipeline over tables ``a`` and ``b`` of ``db`` into ``target``, run as a user runs
    it (``sparkcdc run`` in a process group of its own, so a SIGKILL takes the CLI, the
    JVM and the Python workers), for the tests that kill it at random moments
    (tests/faults/test_*_kill.py). ``start(k)`` starts the k-th run, its log in
    ``run-<k>.log``."""

    def __init__(self, mariadb, db: str, target: Target, tmp_path: Path,
                 extra_args: tuple[str, ...] = ()):
        import os
        import sys

        self.tmp_path = tmp_path
        self.ckpt, self.yaml_path = tmp_path / "ckpt", tmp_path / "p.yaml"
        from pipeline_support import source_yaml

        self.yaml_path.write_text(pipeline_yaml(source_yaml(mariadb, db + ".\\.*", 10), target,
                                                self.ckpt))
        self.env = {**os.environ, "TEST_PW": mariadb.info.cdc_password,
                    "PYSPARK_PYTHON": sys.executable}
        self.cmd = [sys.executable, "-m", "sparkcdc.cli", "run", str(self.yaml_path),
                    "--no-progress", "--master", "local[2]", *extra_args]

    def start(self, k: int, env: dict[str, str] | None = None):
        """The k-th run, ``env`` added to its environment."""
        import subprocess

        log = open(self.tmp_path / f"run-{k}.log", "w")  # noqa: SIM115 - the child's, till killed
        return subprocess.Popen(self.cmd, env={**self.env, **(env or {})}, stdout=log,
                                stderr=subprocess.STDOUT, start_new_session=True)

    def log(self, k: int, chars: int = 3000) -> str:
        """The end of the k-th run's output."""
        return (self.tmp_path / f"run-{k}.log").read_text(errors="replace")[-chars:]
