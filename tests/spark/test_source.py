"""The mysql-cdc Spark source against the real MariaDB and a real SparkSession."""

from __future__ import annotations

import json
import random
import threading
import time
from decimal import Decimal
from pathlib import Path

import pyarrow.parquet as pq
import pytest
from server_support import binlog_status, seq

import sparkcdc
from sparkcdc.core.offsets import BinlogOffset
from sparkcdc.core.records import SEQ_SNAPSHOT, seq_number


@pytest.fixture(scope="module", autouse=True)
def _register(spark):
    sparkcdc.register(spark)


def _ids() -> str:
    base = random.randint(100_000, 4_000_000_000)
    return f"{base}-{base + 4}"


def options(mariadb, db, table="t", **extra):
    return mariadb.source_options(**{"database-name": db, "table-name": f"{db}\\.{table}",
                                     "server-id": _ids(), **extra})


def make_table(mariadb, db, rows, table="t"):
    mariadb.execute(f"CREATE TABLE `{db}`.`{table}` (id INT PRIMARY KEY, v INT, s VARCHAR(40))",
                    f"INSERT INTO `{db}`.`{table}` SELECT seq, seq % 13, CONCAT('r', seq) "
                    f"FROM {seq(mariadb, rows)}", database=db)


def table_state(mariadb, db, table="t"):
    return {r[0]: (r[1], r[2]) for r in mariadb.query(f"SELECT id, v, s FROM `{db}`.`{table}`")}


def apply_in_seq_order(rows):
    """Apply change rows by ``_seq``; check every update_preimage against the state."""
    state: dict = {}
    for r in sorted(rows, key=lambda r: r["_seq"]):
        key, val, kind = r["id"], (r["v"], r["s"]), r["_change_type"]
        if kind in ("insert", "update_postimage"):
            state[key] = val
        elif kind == "update_preimage":
            assert state.get(key) == val, f"preimage {r} does not match {state.get(key)}"
        elif kind == "delete":
            assert state.pop(key, None) == val, f"delete {r} of a row not held"
        else:
            raise AssertionError(kind)
    return state


def run_available_now(spark, opts, checkpoint, path):
    q = (spark.readStream.format("mysql-cdc").options(**opts).load()
         .writeStream.format("parquet").option("checkpointLocation", checkpoint)
         .trigger(availableNow=True).start(path))
    q.awaitTermination(600)
    assert q.exception() is None, q.exception()
    return q


def read_parquet_rows(path):
    files = [p for p in Path(path).rglob("*.parquet")]
    if not files:
        return []
    return [r for f in files for r in pq.read_table(f).to_pylist()]


class Writer(threading.Thread):
    """Inserts, updates (also of the key, across chunks) and deletes, until stopped."""

    def __init__(self, mariadb, db, rows, seed, table="t", pause=0.003):
        super().__init__(daemon=True)
        self.pause = pause
        self.mariadb, self.db, self.rows, self.table = mariadb, db, rows, table
        self.rnd = random.Random(seed)
        self.next_new = rows + 1 + seed * 1_000_000
        self.stop_event = threading.Event()
        self.ops = 0
        self.error = None

    def run(self):
        t = f"`{self.db}`.`{self.table}`"
        conn = self.mariadb.admin_connection(self.db)
        try:
            with conn.cursor() as cur:
                while not self.stop_event.wait(self.pause):
                    op, n = self.rnd.random(), self.rnd.randint(1, self.rows)
                    if op < 0.3:
                        cur.execute(f"INSERT IGNORE INTO {t} VALUES (%s, 0, 'new')",
                                    (self.next_new,))
                        self.next_new += 1
                    elif op < 0.65:
                        cur.execute(f"UPDATE {t} SET v = v + 1, s = 'upd' WHERE id = %s", (n,))
                    elif op < 0.8:
                        cur.execute(f"DELETE FROM {t} WHERE id = %s", (n,))
                    else:
                        cur.execute(f"UPDATE IGNORE {t} SET id = %s WHERE id = %s",
                                    (self.rnd.randint(1, self.rows * 3), n))
                    self.ops += 1
        except Exception as e:  # noqa: BLE001 - the writer thread's error, surfaced by the test
            self.error = e
        finally:
            conn.close()

    def stop(self):
        self.stop_event.set()
        self.join()
        assert self.error is None, self.error


# -- batch reads ---------------------------------------------------------------------------------

def test_batch_read_is_one_consistent_snapshot(spark, mariadb, db):
    make_table(mariadb, db, 20_000)
    opts = options(mariadb, db, **{"scan.incremental.snapshot.chunk.size": "3000"})
    df, offset = sparkcdc.read_snapshot(spark, **opts)
    assert [f.name for f in df.schema.fields] == [
        "id", "v", "s", "_change_type", "_database", "_table", "_op_ts", "_seq"]
    mariadb.execute(f"UPDATE `{db}`.t SET v = -1 WHERE id <= 100",
                    f"DELETE FROM `{db}`.t WHERE id > 19000")
    rows = [r.asDict() for r in df.collect()]  # read after the changes: rolled back to offset
    assert {r["id"]: (r["v"], r["s"]) for r in rows} == {
        i: (i % 13, f"r{i}") for i in range(1, 20_001)}
    assert {r["_seq"] for r in rows} == {Decimal(seq_number(offset, SEQ_SNAPSHOT))}
    assert {r["_change_type"] for r in rows} == {"insert"}
    assert all(r["_op_ts"] is None and r["_table"] == "t" for r in rows)
    plain = spark.read.format("mysql-cdc").options(**opts).load()
    assert plain.count() == 19_000


def test_batch_read_under_concurrent_writers_is_exact_at_its_offset(spark, mariadb, db):
    """Writers change the table (keys across chunks too) while every task reads several
    chunks and rolls them back through one shared binlog window: the snapshot, with the
    binlog from its offset applied, is the table at the end."""
    from sparkcdc.core.schema import TableId
    from sparkcdc.mysql.binlog.reader import BinlogReader
    from sparkcdc.mysql.binlog.server_lookups import load_table_schema
    from sparkcdc.mysql.connection import ConnectionOptions
    from sparkcdc.mysql.offsets import current_offset

    rows = 12_000
    make_table(mariadb, db, rows)
    base = random.randint(100_000, 4_000_000_000)
    opts = options(mariadb, db, **{"scan.incremental.snapshot.chunk.size": "1000",
                                   "server-id": f"{base}-{base + 1}"})  # 2 tasks, 6 chunks each
    df, offset = sparkcdc.read_snapshot(spark, **opts)
    writers = [Writer(mariadb, db, rows, seed, pause=0.001) for seed in range(2)]
    for w in writers:
        w.start()
    try:
        time.sleep(0.5)
        snap = df.collect()
    finally:
        for w in writers:
            w.stop()
    assert sum(w.ops for w in writers) > 50
    state = {r["id"]: (r["v"], r["s"]) for r in snap}
    assert len(state) == len(snap)
    i = mariadb.info
    conn = ConnectionOptions(hostname=i.host, port=i.port, username=i.cdc_user,
                             password=i.cdc_password)
    with conn.connect() as c, c.cursor() as cur:
        end = current_offset(cur)
    schema = load_table_schema(conn, TableId(db, "t"))
    for rec in BinlogReader(conn, base + 2, {schema.table_id: schema}).read_window(offset, end):
        if rec.before is not None:
            b = rec.before
            assert state.pop(b["id"], None) == (b["v"], b["s"]), rec  # as of the offset
        if rec.after is not None:
            state[rec.after["id"]] = (rec.after["v"], rec.after["s"])
    assert state == table_state(mariadb, db)


# -- streaming -----------------------------------------------------------------------------------

@pytest.mark.long
def test_concurrent_writers_then_catch_up_reproduces_the_table(spark, mariadb, db, tmp_path):
    rows = 40_000
    make_table(mariadb, db, rows)
    opts = options(mariadb, db, **{"scan.incremental.snapshot.chunk.size": "2000",
                                   "maxRowsPerBatch": "8000"})
    writers = [Writer(mariadb, db, rows, seed) for seed in range(2)]
    for w in writers:
        w.start()
    ckpt, out = str(tmp_path / "ckpt"), str(tmp_path / "out")
    try:
        q = run_available_now(spark, opts, ckpt, out)  # the snapshot, under writes
    finally:
        for w in writers:
            w.stop()
    assert sum(w.ops for w in writers) > 100
    batches = q.recentProgress
    assert len(batches) >= 5  # admission control: many bounded micro-batches
    assert max(b["numInputRows"] for b in batches) < 20_000
    progress = json.loads(batches[-1]["sources"][0]["endOffset"])
    assert progress["phase"] == "streaming" and progress["chunks_done"] >= 20
    assert progress["tables_done"] == progress["tables"] == 1
    assert json.loads(batches[-1]["sources"][0]["latestOffset"])["pos"]["file"].startswith("binlog")
    run_available_now(spark, opts, ckpt, out)  # catch up from the same checkpoint
    got = read_parquet_rows(out)
    kinds = {r["_change_type"] for r in got}
    assert {"insert", "update_preimage", "update_postimage", "delete"} <= kinds
    seqs = [(r["_seq"], r["_change_type"], r["id"]) for r in got]
    assert len(seqs) == len(set(seqs))  # nothing doubled
    assert apply_in_seq_order(got) == table_state(mariadb, db)


@pytest.mark.long
def test_startup_modes(spark, mariadb, db, tmp_path):
    make_table(mariadb, db, 10)
    mariadb.execute(f"UPDATE `{db}`.t SET v = 100 WHERE id = 1")
    with mariadb.admin_connection() as c, c.cursor() as cur:
        cur.execute(binlog_status(mariadb))
        file, pos = cur.fetchone()[:2]
    time.sleep(1.1)
    ts_ms = int(time.time()) * 1000  # binlog times have whole seconds: start at one
    mariadb.execute(f"UPDATE `{db}`.t SET v = 200 WHERE id = 2")

    def run(mode_opts, name):
        opts = options(mariadb, db, **mode_opts)
        q = (spark.readStream.format("mysql-cdc").options(**opts).load()
             .writeStream.format("memory").queryName(name)
             .option("checkpointLocation", str(tmp_path / name))
             .trigger(availableNow=True).start())
        q.awaitTermination(300)
        assert q.exception() is None
        return sorted((r["_change_type"], r["id"], r["v"])
                      for r in spark.table(name).collect())

    assert run({}, "m_initial") == sorted(
        [("insert", i, {1: 100, 2: 200}.get(i, i % 13)) for i in range(1, 11)])
    assert run({"scan.startup.mode": "snapshot"}, "m_snapshot") == run({}, "m_initial2")
    assert run({"scan.startup.mode": "latest-offset"}, "m_latest") == []
    earliest = run({"scan.startup.mode": "earliest-offset"}, "m_earliest")
    assert [r for r in earliest if r[0] == "insert"] == [("insert", i, i % 13)
                                                        for i in range(1, 11)]
    assert ("update_postimage", 1, 100) in earliest and ("update_postimage", 2, 200) in earliest
    specific = run({"scan.startup.mode": "specific-offset",
                    "scan.startup.specific-offset.file": file,
                    "scan.startup.specific-offset.pos": str(pos)}, "m_specific")
    assert specific == [("update_postimage", 2, 200), ("update_preimage", 2, 2)]
    from_ts = run({"scan.startup.mode": "timestamp",
                   "scan.startup.timestamp-millis": str(ts_ms)}, "m_ts")
    assert from_ts == specific


def test_latest_offset_then_changes(spark, mariadb, db, tmp_path):
    make_table(mariadb, db, 5)
    opts = options(mariadb, db, **{"scan.startup.mode": "latest-offset"})
    ckpt, out = str(tmp_path / "ckpt"), str(tmp_path / "out")
    run_available_now(spark, opts, ckpt, out)
    mariadb.execute(f"INSERT INTO `{db}`.t VALUES (6, 6, 'six')",
                    f"UPDATE `{db}`.t SET id = 60 WHERE id = 6",
                    f"DELETE FROM `{db}`.t WHERE id = 1")
    run_available_now(spark, opts, ckpt, out)
    got = sorted((r["_change_type"], r["id"]) for r in read_parquet_rows(out))
    assert got == [("delete", 1), ("delete", 6), ("insert", 6), ("insert", 60)]


def test_idle_captured_table_does_not_hold_offsets_back(spark, mariadb, db, tmp_path):
    """Heartbeats: writes elsewhere on the server move the offset of an idle table."""
    make_table(mariadb, db, 3)
    mariadb.execute(f"CREATE TABLE `{db}`.busy (id INT PRIMARY KEY)")
    opts = options(mariadb, db, **{"scan.startup.mode": "latest-offset"})
    ckpt, out = str(tmp_path / "ckpt"), str(tmp_path / "out")
    run_available_now(spark, opts, ckpt, out)
    mariadb.execute(*[f"INSERT INTO `{db}`.busy VALUES ({i})" for i in range(20)])
    q = run_available_now(spark, opts, ckpt, out)
    (last,) = q.recentProgress[-1:]
    start = BinlogOffset.from_dict(json.loads(last["sources"][0]["startOffset"])["pos"])
    end = BinlogOffset.from_dict(json.loads(last["sources"][0]["endOffset"])["pos"])
    assert end > start and last["numInputRows"] == 0


# -- option errors -------------------------------------------------------------------------------

@pytest.mark.parametrize("extra,needle", [
    ({"hostnam": "x"}, "did you mean 'hostname'"),
    ({"scan.startup.mode": "latest"}, "did you mean 'latest-offset'"),
    ({"port": "not-a-port"}, "option 'port' must be an integer"),
])
def test_bad_option_fails_at_load(spark, mariadb, db, extra, needle):
    make_table(mariadb, db, 1)
    with pytest.raises(Exception, match=needle):
        spark.readStream.format("mysql-cdc").options(**options(mariadb, db, **extra)).load()


def test_table_without_key_names_the_option(spark, mariadb, db):
    mariadb.execute(f"CREATE TABLE `{db}`.nokey (a INT, b INT)")
    with pytest.raises(Exception, match="scan.incremental.snapshot.chunk.key-column"):
        spark.read.format("mysql-cdc").options(**options(mariadb, db, "nokey")).load()


def test_wrong_password_is_one_clear_error(spark, mariadb, db):
    make_table(mariadb, db, 1)
    opts = {**options(mariadb, db), "password": "wrong-secret-123"}
    with pytest.raises(Exception, match="refused user 'cdc'") as e:
        spark.read.format("mysql-cdc").options(**opts).load()
    assert "wrong-secret-123" not in str(e.value)


# -- several tables ------------------------------------------------------------------------------

def test_shards_share_typed_columns_and_differing_tables_use_an_envelope(spark, mariadb, db,
                                                                         tmp_path):
    for name in ("orders_1", "orders_2"):
        make_table(mariadb, db, 3, table=name)
    mariadb.execute(f"CREATE TABLE `{db}`.other (k VARCHAR(10) PRIMARY KEY, d DECIMAL(5,2))",
                    f"INSERT INTO `{db}`.other VALUES ('a', 1.50)")
    shards = spark.read.format("mysql-cdc").options(
        **options(mariadb, db, "orders_[0-9]+")).load()
    assert shards.columns[:3] == ["id", "v", "s"]
    assert sorted((r["_table"], r["id"]) for r in shards.collect()) == [
        (t, i) for t in ("orders_1", "orders_2") for i in (1, 2, 3)]

    opts = options(mariadb, db, "(orders_1|other)")
    env = spark.read.format("mysql-cdc").options(**opts).load()
    assert env.columns == ["_change_type", "_database", "_table", "_op_ts", "_seq", "key", "data"]
    got = {(r["_table"], r["key"]): json.loads(r["data"]) for r in env.collect()}
    assert got[("other", '{"k":"a"}')] == {"k": "a", "d": "1.50"}
    assert got[("orders_1", '{"id":2}')] == {"id": 2, "v": 2, "s": "r2"}

    ckpt, out = str(tmp_path / "c"), str(tmp_path / "o")
    run_available_now(spark, opts, ckpt, out)
    snap = len(read_parquet_rows(out))
    mariadb.execute(f"UPDATE `{db}`.other SET d = 2.25 WHERE k = 'a'")
    run_available_now(spark, opts, ckpt, out)
    rows = read_parquet_rows(out)
    assert snap == 4 and len(rows) == 6
    changes = sorted((r["_change_type"], r["data"]) for r in rows
                     if r["_change_type"] != "insert")
    assert changes == [("update_postimage", '{"k":"a","d":"2.25"}'),
                       ("update_preimage", '{"k":"a","d":"1.50"}')]
