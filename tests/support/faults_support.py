"""Shared pieces of the fault-injection suite (tests/faults/).

Every fault test has the same shape: a table under concurrent writers (inserts, updates,
deletes, key changes), a real stream into real sinks, a fault, a recovery, and then two
independent checks -- the target equals the source, and the changelog holds every change
exactly once (unique ``_seq``; each update's before-image and each delete match the row
held at that point, so a lost or doubled change shows up as a mismatch, not just as a count).
"""

from __future__ import annotations

import json
import os
import queue
import random
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import pyarrow.parquet as pq
from server_support import seq

from sparkcdc.pipeline.run.checkpoint import Checkpoint
from sparkcdc.pipeline.run.loop import Runner

CHILD = Path(__file__).with_name("spark_child.py")
SEED = int(os.environ.get("SPARKCDC_FAULT_SEED", "8"))  # the kill points; printed on failure


def server_ids() -> str:
    base = random.randint(100_000, 4_000_000_000)
    return f"{base}-{base + 4}"


def source_options(mariadb, db, table="t", host=None, port=None, **extra) -> dict:
    opts = mariadb.source_options(**{"database-name": db, "table-name": f"{db}\\.{table}",
                                     "server-id": server_ids(), **extra})
    if host is not None:
        opts["hostname"], opts["port"] = host, str(port)
    return opts


def make_table(mariadb, db, rows, table="t"):
    mariadb.execute(f"CREATE TABLE `{db}`.`{table}` (id INT PRIMARY KEY, v INT, s VARCHAR(40))",
                    f"INSERT INTO `{db}`.`{table}` SELECT seq, seq % 13, CONCAT('r', seq) "
                    f"FROM {seq(mariadb, rows)}", database=db)


def table_state(mariadb, db, table="t") -> dict:
    return {r[0]: (r[1], r[2]) for r in mariadb.query(f"SELECT id, v, s FROM `{db}`.`{table}`")}


class Writer(threading.Thread):
    """Inserts, updates, deletes and key changes (across chunks), until stopped. A lost
    connection (a server restart) is waited out and the writer goes on."""

    def __init__(self, mariadb, db, rows, seed, table="t", pause=0.01):
        super().__init__(daemon=True)
        self.mariadb, self.db, self.rows, self.table, self.pause = mariadb, db, rows, table, pause
        self.rnd = random.Random(seed)
        self.next_new = rows * 4 + 1 + seed * 100_000
        self.stop_event = threading.Event()
        self.ops = {"insert": 0, "update": 0, "delete": 0, "key": 0}
        self.error = None

    def run(self):
        import pymysql

        t = f"`{self.db}`.`{self.table}`"
        conn = None
        try:
            while not self.stop_event.wait(self.pause):
                try:
                    if conn is None:
                        conn = self.mariadb.admin_connection(self.db)
                    with conn.cursor() as cur:
                        self._one(cur, t)
                except pymysql.err.OperationalError:  # the server restarts: wait for it
                    conn = None
                    self.stop_event.wait(0.3)
        except Exception as e:  # noqa: BLE001 - the writer thread's error, surfaced by stop()
            self.error = e
        finally:
            if conn is not None:
                conn.close()

    def _one(self, cur, t):
        op, n = self.rnd.random(), self.rnd.randint(1, self.rows)
        if op < 0.3:
            cur.execute(f"INSERT IGNORE INTO {t} VALUES (%s, 0, 'new')", (self.next_new,))
            self.next_new += 1
            self.ops["insert"] += 1
        elif op < 0.65:
            cur.execute(f"UPDATE {t} SET v = v + 1, s = 'upd' WHERE id = %s", (n,))
            self.ops["update"] += 1
        elif op < 0.8:
            cur.execute(f"DELETE FROM {t} WHERE id = %s", (n,))
            self.ops["delete"] += 1
        else:
            cur.execute(f"UPDATE IGNORE {t} SET id = %s WHERE id = %s",
                        (self.rnd.randint(1, self.rows * 3), n))
            self.ops["key"] += 1

    def stop(self):
        self.stop_event.set()
        self.join()
        assert self.error is None, self.error


class Current:
    """Whichever server is the primary now (a failover test switches it): writers and
    checks given this object follow it."""

    def __init__(self, server):
        self.server = server

    def __getattr__(self, name):
        return getattr(self.server, name)


class Writers:
    def __init__(self, mariadb, db, rows, n=2, pause=0.01, first_seed=1):
        self.all = [Writer(mariadb, db, rows, seed, pause=pause)
                    for seed in range(first_seed, first_seed + n)]

    def __enter__(self):
        for w in self.all:
            w.start()
        return self

    def __exit__(self, *exc):
        for w in self.all:
            w.stop()

    def total(self) -> int:
        return sum(sum(w.ops.values()) for w in self.all)


# -- the changelog checks ------------------------------------------------------------------------

def check_changelog(rows, final: dict, what: str = "changelog") -> dict:
    """Apply change rows in ``_seq`` order and demand exactly-once: no (``_seq``, kind, key)
    twice, every insert of a key not held, every before-image and delete equal to the row
    held, and the result equal to ``final``. Returns counts per change type."""
    seen = set()
    for r in rows:
        k = (r["_seq"], r["_change_type"], r["id"])
        assert k not in seen, f"{what}: change doubled: {r}"
        seen.add(k)
    state: dict = {}
    counts = {"insert": 0, "update_preimage": 0, "update_postimage": 0, "delete": 0}
    for r in sorted(rows, key=lambda r: (r["_seq"], r["_change_type"] != "delete")):
        key, val, kind = r["id"], (r["v"], r["s"]), r["_change_type"]
        counts[kind] += 1
        if kind == "insert":
            assert key not in state, f"{what}: insert of a key already held (a delete lost?) {r}"
            state[key] = val
        elif kind == "update_preimage":
            assert state.get(key) == val, f"{what}: before-image {r} != held {state.get(key)}"
        elif kind == "update_postimage":
            assert key in state, f"{what}: update of a key not held {r}"
            state[key] = val
        elif kind == "delete":
            assert state.pop(key, None) == val, f"{what}: delete {r} of a row not held"
        else:
            raise AssertionError(kind)
    missing = set(final) - set(state)
    extra = set(state) - set(final)
    differ = {k for k in set(final) & set(state) if final[k] != state[k]}
    assert not (missing or extra or differ), (
        f"{what}: target != source: {len(missing)} missing (e.g. {sorted(missing)[:5]}), "
        f"{len(extra)} extra ({sorted(extra)[:5]}), {len(differ)} differ ({sorted(differ)[:5]})")
    return counts


def file_sink_rows(path) -> list[dict]:
    """Rows of Spark's parquet file sink, as its readers see them: only the files its
    ``_spark_metadata`` log committed (a killed batch can leave orphan files behind)."""
    meta = Path(path, "_spark_metadata")
    if not meta.exists():
        return []
    files = set()
    for f in meta.iterdir():
        if f.name.startswith("."):
            continue
        for line in f.read_text().splitlines()[1:]:
            e = json.loads(line)
            if e.get("action", "add") == "add":
                files.add(e["path"])
            else:
                files.discard(e["path"])
    rows = []
    for p in sorted(files):
        rows.extend(pq.read_table(p.removeprefix("file://")).to_pylist())
    return rows


def foreach_batches(out) -> tuple[list[dict], int]:
    """The foreachBatch sink of spark_child: every batch's complete attempts must be
    byte-identical; returns the rows (one attempt per batch) and how many replays matched."""
    rows, replayed = [], 0
    for batch_dir in sorted(Path(out, "foreach").glob("batch=*")):
        attempts = [a for a in sorted(batch_dir.glob("attempt=*")) if (a / "_SUCCESS").exists()]
        assert attempts, f"{batch_dir.name}: no complete attempt"
        order = [("_seq", "ascending"), ("_change_type", "ascending"), ("id", "ascending")]
        tables = [pq.read_table(a).sort_by(order) for a in attempts]
        for t in tables[1:]:
            assert t.equals(tables[0]), f"{batch_dir.name}: a replay differs from the first run"
            replayed += 1
        rows.extend(tables[0].to_pylist())
    return rows, replayed


def last_offset(ckpt) -> dict | None:
    """The source offset of the last batch Spark planned in checkpoint ``ckpt``."""
    offsets = Path(ckpt, "offsets")
    ids = sorted(int(p.name) for p in offsets.glob("[0-9]*")) if offsets.exists() else []
    if not ids:
        return None
    lines = (offsets / str(ids[-1])).read_text().splitlines()
    return json.loads(lines[2])


# -- child processes ---------------------------------------------------------------------------

def child_env() -> dict:
    return {**os.environ, "PYSPARK_PYTHON": sys.executable, "PYTHONUNBUFFERED": "1"}


def run_child(args: dict, timeout=600) -> subprocess.CompletedProcess:
    """spark_child.py to completion (availableNow unless ``continuous``)."""
    return subprocess.run([sys.executable, str(CHILD)], input=json.dumps(args),
                          capture_output=True, text=True, env=child_env(), timeout=timeout,
                          check=False)


class Child:
    """A child process in its own process group, its stdout read line by line; ``kill()``
    SIGKILLs the whole group at once (Python driver, JVM and Python workers), as a machine
    that dies does -- no JVM lingers to finish a batch after its driver is gone."""

    def __init__(self, argv: list[str], log_path, env=None, stdin: str | None = None):
        self.log = open(log_path, "a")  # noqa: SIM115 - the child's stderr, closed by kill/wait
        self.proc = subprocess.Popen(argv, stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                     stderr=self.log, text=True, env=env or child_env(),
                                     start_new_session=True)
        self.proc.stdin.write(stdin or "")
        self.proc.stdin.close()
        self.lines: queue.Queue = queue.Queue()
        self.all: list[str] = []
        threading.Thread(target=self._read, daemon=True).start()

    def _read(self):
        for line in self.proc.stdout:
            self.all.append(line)
            self.lines.put(line)
        self.lines.put(None)

    def wait_line(self, prefix: str, timeout: float) -> str | None:
        """The next stdout line starting with ``prefix``; None at EOF."""
        deadline = time.monotonic() + timeout
        while True:
            left = deadline - time.monotonic()
            if left <= 0:
                raise AssertionError(f"no {prefix!r} line in {timeout} s; stderr in {self.log.name}")
            try:
                line = self.lines.get(timeout=left)
            except queue.Empty:
                continue
            if line is None:
                return None
            if line.startswith(prefix):
                return line

    def kill(self) -> None:
        try:
            os.killpg(self.proc.pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
        self.proc.wait(30)
        self.log.close()

    def wait(self, timeout: float) -> int:
        rc = self.proc.wait(timeout)
        self.log.close()
        return rc


def spark_child(args: dict, log_path) -> Child:
    return Child([sys.executable, str(CHILD)], log_path, stdin=json.dumps(args))


def alive(pid: int) -> bool:
    """Whether process ``pid`` runs (a zombie, ended and not yet reaped, does not)."""
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except OSError:
        return False
    return state != "Z"


def wait_until(check, timeout: float, what: str, every: float = 0.3):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        got = check()
        if got:
            return got
        time.sleep(every)
    raise AssertionError(f"timed out after {timeout} s waiting for {what}")


# -- a continuous pipeline in a thread, with its changelog -------------------------------------

class Changelog:
    """Every applied batch's change rows, per (table, batch id); a batch replayed after a
    stream restart must carry the same rows as before."""

    def __init__(self):
        self.batches: dict[tuple[str, int], list[dict]] = {}
        self.replays = 0
        self.lock = threading.Lock()

    def hook(self, table, df, batch_id):
        rows = sorted(df.toArrow().to_pylist(),
                      key=lambda r: (r["_seq"], r["_change_type"], r["id"]))
        with self.lock:
            before = self.batches.get((table, batch_id))
            if before is not None:
                assert before == rows, f"batch {batch_id} of {table} replayed differently"
                self.replays += 1
            self.batches[(table, batch_id)] = rows

    def rows(self) -> list[dict]:
        return [r for rows in self.batches.values() for r in rows]


class Pipeline:
    """A continuous run in a thread; ``finish()`` stops it and catches up."""

    def __init__(self, spark, defn):
        self.spark, self.defn, self.log = spark, defn, Changelog()
        self.error = None
        self.runner = Runner(defn, spark, on_batch=self.log.hook)
        self.thread = threading.Thread(target=self._run, daemon=True)
        self.thread.start()

    def _run(self):
        try:
            self.runner.run()
        except BaseException as e:  # noqa: BLE001 - the run thread's end, surfaced by finish()
            self.error = e

    def phase(self, table) -> str | None:
        ck = Checkpoint(self.defn.checkpoint_dir)
        st = ck.load_tables().get(table)
        if st is None:
            return None
        ckdir = ck.stream_dir(st)
        return (last_offset(ckdir) or {}).get("phase") if ckdir.exists() else None

    def position(self, table) -> dict:
        """The binlog offset the table's stream has planned up to."""
        ck = Checkpoint(self.defn.checkpoint_dir)
        return last_offset(ck.stream_dir(ck.load_tables()[table]))["pos"]

    def batches(self) -> int:
        return len(self.log.batches)

    def wait(self, check, timeout: float, what: str):
        """``wait_until``, but a continuous run that stopped on an error fails at once,
        with that error, instead of after the timeout."""
        def check_or_fail():
            if self.error is not None:
                raise AssertionError(f"the pipeline stopped waiting for {what}: "
                                     f"{self.error!r}") from self.error
            return check()
        return wait_until(check_or_fail, timeout, what)

    def finish(self):
        self.runner.stop()
        self.thread.join(300)
        assert not self.thread.is_alive()
        return self.error
