"""Huge transactions and huge rows stream with bounded memory.

* one transaction of 1,000,000 row changes (``UPDATE`` of every row of a narrow table);
* rows of a 16 MiB JSON document and a 16 MiB BLOB each, inserted and then updated in one
  transaction each (every update's row event carries both images: 64 MiB).

Each is read in a child process, once by the binlog reader alone and once through the Spark
source (a stream started just before the transactions, ``availableNow``), and every row is
checked: counts, each key exactly once, values, and CRC32 checksums of the huge values
against the server's own ``CRC32``. The child reports its peak RSS (``VmHWM``; for Spark,
of the Python workers that read the binlog), and the test asserts that it stays under a
bound far below what holding the transaction would take. That cost is measured, not
guessed: the child also reports the deep size of its records, and the bound is compared
with it in the test.

Minutes of work (a million-row transaction, ~1.2 GiB of binlog for the huge rows): marked
``slow`` and ``huge``, run by ``make test-faults``, not ``make test``.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import threading
import time
import zlib
from pathlib import Path

import pytest
from server_support import binlog_status, seq
from sink_support import read_delta

N = 1_000_000  # row changes in the one transaction
BIG = 16 * 1024 * 1024  # bytes of each JSON document and each BLOB
K = 12  # huge rows
MiB = 1024 * 1024

pytestmark = [pytest.mark.slow, pytest.mark.huge, pytest.mark.timeout(1200)]


# -- the child process ------------------------------------------------------------------------

def _status(pid: int | str = "self") -> dict[str, int]:
    out = {}
    try:
        for line in Path(f"/proc/{pid}/status").read_text().splitlines():
            if line.startswith(("VmHWM:", "VmRSS:")):
                out[line.split(":")[0]] = int(line.split()[1]) * 1024
    except OSError:
        pass
    return out


def _deep_size(obj, seen=None) -> int:
    seen = set() if seen is None else seen
    if id(obj) in seen:
        return 0
    seen.add(id(obj))
    size = sys.getsizeof(obj)
    if isinstance(obj, dict):
        size += sum(_deep_size(k, seen) + _deep_size(v, seen) for k, v in obj.items())
    elif hasattr(obj, "__slots__") or hasattr(obj, "__dict__"):
        names = getattr(obj, "__slots__", None) or list(vars(obj))
        size += sum(_deep_size(getattr(obj, n), seen) for n in names if hasattr(obj, n))
    return size


class NarrowCheck:
    """1M updates of (id, v): before v = id, after v = id + 1, each id exactly once."""

    def __init__(self):
        self.seen = bytearray(N + 1)
        self.count = self.bad = 0
        self.sample = 0

    def add(self, rec) -> None:
        b, a = rec.before, rec.after
        i = a["id"]
        self.count += 1
        if rec.op != "u":
            self.bad += 1
        if b["id"] != i or b["v"] != i or a["v"] != i + 1 or not 0 < i <= N or self.seen[i]:
            self.bad += 1
        else:
            self.seen[i] = 1
        if not self.sample:
            self.sample = _deep_size(rec)

    def result(self) -> dict:
        return {"count": self.count, "bad": self.bad, "distinct": sum(self.seen),
                "record_bytes": self.sample}


class HugeCheck:
    """Per change type: count, total lengths and CRC32 sums of the JSON and the BLOB."""

    def __init__(self):
        self.by: dict[str, list[int]] = {}
        self.sample = 0

    def _image(self, kind: str, row: dict) -> None:
        j = row["j"].encode()
        acc = self.by.setdefault(kind, [0, 0, 0, 0, 0, 0])
        for n, x in enumerate((1, row["id"], len(j), zlib.crc32(j), len(row["b"]),
                               zlib.crc32(row["b"]))):
            acc[n] += x

    def add(self, rec) -> None:
        if rec.before is not None:
            self._image("before", rec.before)
        if rec.after is not None:
            self._image("after", rec.after)
        if not self.sample:
            self.sample = _deep_size(rec)

    def result(self) -> dict:
        return {"by": self.by, "record_bytes": self.sample}


def child_binlog(cfg: dict) -> dict:
    from sparkcdc.core.offsets import BinlogOffset
    from sparkcdc.core.schema import TableId
    from sparkcdc.mysql.binlog.reader import BinlogReader
    from sparkcdc.mysql.binlog.server_lookups import load_table_schema
    from sparkcdc.mysql.connection import ConnectionOptions

    conn = ConnectionOptions(**cfg["conn"])
    tid = TableId(cfg["db"], cfg["table"])
    reader = BinlogReader(conn, 4242, {tid: load_table_schema(conn, tid)})
    check = NarrowCheck() if cfg["kind"] == "narrow" else HugeCheck()
    records = reader.read_window(BinlogOffset.from_dict(cfg["start"]),
                                 BinlogOffset.from_dict(cfg["end"]))
    first = next(records)  # connected, first event decoded: the baseline
    base = _status()["VmHWM"]
    check.add(first)
    del first
    for rec in records:
        check.add(rec)
    return {"baseline": base, "peak": _status()["VmHWM"], **check.result()}


def child_spark(cfg: dict) -> dict:
    """A stream from ``start`` through the ``mysql-cdc`` source; a sampler thread watches
    the peak RSS of every PySpark worker (they read the binlog)."""
    os.environ["PYSPARK_PYTHON"] = sys.executable
    from pyspark.sql import SparkSession
    from pyspark.sql import functions as F

    import sparkcdc

    peaks: dict[int, int] = {}
    stop = threading.Event()

    def workers() -> list[int]:
        """This process's PySpark workers (other Spark jobs may run on the machine)."""
        parent: dict[int, int] = {}
        for d in Path("/proc").iterdir():
            if d.name.isdigit():
                try:
                    parent[int(d.name)] = int((d / "stat").read_text().rsplit(")", 1)[1]
                                              .split()[1])
                except (OSError, IndexError, ValueError):
                    pass
        mine, out = os.getpid(), []
        for pid in parent:
            p, n = pid, 0
            while p > 1 and p != mine and n < 20:
                p, n = parent.get(p, 0), n + 1
            if p == mine:
                try:
                    if b"pyspark.daemon" in Path(f"/proc/{pid}/cmdline").read_bytes():
                        out.append(pid)
                except OSError:
                    pass
        return out

    def sample():
        while not stop.is_set():
            for pid in workers():
                hwm = _status(pid).get("VmHWM")
                if hwm:
                    peaks[pid] = max(peaks.get(pid, 0), hwm)
            time.sleep(0.05)

    spark = (SparkSession.builder.master("local[1]").appName("huge")
             .config("spark.ui.enabled", "false").config("spark.sql.shuffle.partitions", "1")
             .config("spark.driver.memory", "4g")  # the sink collects 32 MiB rows
             .config("spark.python.authenticate.socketTimeout", "120s").getOrCreate())
    spark.sparkContext.setLogLevel("ERROR")
    sparkcdc.register(spark)
    start = cfg["start"]
    opts = {**cfg["source"], "database-name": cfg["db"], "table-name": f"{cfg['db']}\\.{cfg['table']}",
            "scan.startup.mode": "specific-offset", "scan.startup.specific-offset.file":
            start["file"], "scan.startup.specific-offset.pos": str(start["pos"]),
            "server-id": "4300-4301"}
    df = spark.readStream.format("mysql-cdc").options(**opts).load()
    totals: dict[str, list[int]] = {}

    if cfg["kind"] == "narrow":
        ok = (F.when(F.col("_change_type") == "update_preimage", F.col("v") == F.col("id"))
              .when(F.col("_change_type") == "update_postimage", F.col("v") == F.col("id") + 1)
              .otherwise(F.lit(False)))
        aggs = [F.count("*"), F.countDistinct("id"), F.sum("id"),
                F.sum(F.when(ok, 0).otherwise(1))]
    else:
        jb = F.col("j").cast("binary")
        aggs = [F.count("*"), F.sum("id"), F.sum(F.length(jb)), F.sum(F.crc32(jb)),
                F.sum(F.length("b")), F.sum(F.crc32("b"))]

    apply = None
    if cfg.get("delta"):
        from sparkcdc.apply import apply_changes

        apply = apply_changes({"type": "delta", "path": cfg["delta"]}, keys=["id"])

    def each(batch, bid):
        for row in batch.groupBy("_change_type").agg(*aggs).collect():
            acc = totals.setdefault(row[0], [0] * len(aggs))
            for n, x in enumerate(row[1:]):
                acc[n] += int(x or 0)
        if apply is not None:
            apply(batch, bid)

    sampler = threading.Thread(target=sample, daemon=True)
    sampler.start()
    q = (df.writeStream.foreachBatch(each).trigger(availableNow=True)
         .option("checkpointLocation", cfg["checkpoint"]).start())
    q.awaitTermination()
    stop.set()
    sampler.join()
    spark.stop()
    return {"totals": totals, "worker_peak": max(peaks.values(), default=0),
            "workers": len(peaks)}


def run_child(mode: str, cfg: dict, tmp_path: Path) -> dict:
    out = tmp_path / f"{mode}.json"
    log = tmp_path / f"{mode}.log"
    # this file is the child's script: its imports of tests/support need that folder on the
    # path (pytest puts it there only in its own process)
    paths = [str(Path(__file__).parents[1] / "support"), os.environ.get("PYTHONPATH", "")]
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(path for path in paths if path)}
    with open(log, "w") as f:
        p = subprocess.run([sys.executable, __file__, mode, json.dumps(cfg), str(out)],
                           stdout=f, stderr=subprocess.STDOUT, timeout=1100, check=False,
                           cwd=Path(__file__).parents[2], env=env)
    text = log.read_text()
    assert p.returncode == 0, "\n".join(
        line for line in text.splitlines() if "Error" in line or "error" in line)[-5000:]
    return json.loads(out.read_text())


# -- the tests --------------------------------------------------------------------------------

def _position(mariadb) -> dict:
    file, pos = mariadb.query(binlog_status(mariadb))[0][:2]
    return {"file": file, "pos": int(pos)}


def _cfg(mariadb, db, table, kind, start, end, tmp_path) -> dict:
    i = mariadb.info
    return {"conn": {"hostname": i.host, "port": i.port, "username": i.cdc_user,
                     "password": i.cdc_password},
            "source": mariadb.source_options(), "db": db, "table": table, "kind": kind,
            "start": start, "end": end, "checkpoint": str(tmp_path / "ckpt")}


def _offset(p: dict) -> dict:
    from sparkcdc.core.offsets import BinlogOffset

    return BinlogOffset(p["file"], p["pos"]).to_dict()


def test_a_million_row_transaction(mariadb, db, tmp_path):
    mariadb.execute("CREATE TABLE narrow (id INT PRIMARY KEY, v INT NOT NULL)",
                    f"INSERT INTO narrow SELECT seq, seq FROM {seq(mariadb, N)}", database=db)
    start = _position(mariadb)
    mariadb.execute("UPDATE narrow SET v = v + 1", database=db)  # one transaction (autocommit)
    end = _position(mariadb)
    cfg = _cfg(mariadb, db, "narrow", "narrow", _offset(start), _offset(end), tmp_path)

    r = run_child("binlog", cfg, tmp_path)
    assert (r["count"], r["bad"], r["distinct"]) == (N, 0, N), r
    # holding the transaction's records would take N times one record's deep size
    # row events are small (binlog_row_event_max_size, 8 KiB): the reader holds one event
    # and the records not yet consumed, so it should not grow at all; 100 MiB is slack
    held = N * r["record_bytes"]
    bound = 100 * MiB
    assert held > 5 * bound, (held, bound)
    growth = r["peak"] - r["baseline"]
    print(f"binlog reader: peak {r['peak'] / MiB:.0f} MiB, growth {growth / MiB:.0f} MiB; "
          f"holding the transaction: {held / MiB:.0f} MiB")
    assert growth < bound, (growth, r)

    s = run_child("spark", cfg, tmp_path)
    sum_ids = N * (N + 1) // 2
    assert s["totals"] == {"update_preimage": [N, N, sum_ids, 0],
                           "update_postimage": [N, N, sum_ids, 0]}, s
    print(f"spark: python worker peak {s['worker_peak'] / MiB:.0f} MiB")
    # the worker's baseline plus one Arrow batch of 8192 rows: the window is never held
    assert 0 < s["worker_peak"] < 400 * MiB < held, s


def test_huge_rows(mariadb, db, tmp_path):
    mariadb.execute("CREATE TABLE big (id INT PRIMARY KEY, j JSON, b LONGBLOB)", database=db)
    start = _position(mariadb)
    # one transaction of K rows, each a 16 MiB JSON document and a 16 MiB BLOB; then one
    # transaction updating all of them (both images in each row event)
    pad = BIG - len('{"id": 0, "pad": ""}')
    mariadb.execute(
        f"INSERT INTO big SELECT seq, JSON_OBJECT('id', seq, 'pad', REPEAT(CHAR(64 + seq), "
        f"{pad} - LENGTH(seq))), REPEAT(UNHEX(LPAD(HEX(seq), 2, '0')), {BIG}) "
        f"FROM {seq(mariadb, K)}",
        "UPDATE big SET b = REPEAT(UNHEX(LPAD(HEX(255 - id), 2, '0')), " + str(BIG) + ")",
        database=db)
    end = _position(mariadb)
    (length,) = mariadb.query("SELECT MIN(LENGTH(j)) FROM big", database=db)[0]
    assert length >= BIG - 64  # the documents really are 16 MiB
    cfg = _cfg(mariadb, db, "big", "huge", _offset(start), _offset(end), tmp_path)
    # what the server says the rows were after the insert and after the update
    ids = K * (K + 1) // 2
    after = mariadb.query("SELECT SUM(LENGTH(j)), SUM(CRC32(j)), SUM(LENGTH(b)), "
                          "SUM(CRC32(b)) FROM big", database=db)[0]
    before_b = mariadb.query(
        f"SELECT SUM(CRC32(REPEAT(UNHEX(LPAD(HEX(seq), 2, '0')), {BIG}))) FROM {seq(mariadb, K)}",
        database=db)[0][0]
    jl, jc, bl, bc = (int(x) for x in after)

    r = run_child("binlog", cfg, tmp_path)
    # K inserts (after images), K updates (before and after images)
    assert r["by"]["before"] == [K, ids, jl, jc, bl, int(before_b)], r
    assert r["by"]["after"] == [2 * K, 2 * ids, 2 * jl, 2 * jc, 2 * bl, int(before_b) + bc], r
    # Holding the update transaction's decoded images takes K x 2 x 32 MiB = 768 MiB. One
    # row event is 64 MiB (both images); reading it costs about four times that (the
    # packets joined into the event, the event's body, the decoded values; 190-250 MiB
    # measured): the bound is six events' worth, whatever K is, half the transaction.
    held = K * 4 * BIG
    bound = 6 * 4 * BIG
    growth = r["peak"] - r["baseline"]
    print(f"binlog reader: peak {r['peak'] / MiB:.0f} MiB, growth {growth / MiB:.0f} MiB; "
          f"holding the transaction: {held / MiB:.0f} MiB")
    assert growth < bound < held, (growth, r)

    cfg["delta"] = str(tmp_path / "delta")
    s = run_child("spark", cfg, tmp_path)
    assert s["totals"] == {"insert": [K, ids, jl, jc, bl, int(before_b)],
                           "update_preimage": [K, ids, jl, jc, bl, int(before_b)],
                           "update_postimage": [K, ids, jl, jc, bl, bc]}, s
    # The Spark worker: its baseline (~150 MiB: pyarrow, pyspark) plus a few copies of one
    # 64 MiB event (the event, its decoded values, the Arrow batch and its serialized form
    # for the JVM): ~720 MiB measured. Before window batches were cut by bytes it held the
    # whole window: 2.5 GiB with 8 rows.
    print(f"spark: python worker peak {s['worker_peak'] / MiB:.0f} MiB")
    assert 0 < s["worker_peak"] < 1024 * MiB, s

    # the Delta sink took the 16 MiB values intact: the table equals the source, row by row
    import deltalake

    got = {row["id"]: (zlib.crc32(row["j"].encode()), len(row["j"]), zlib.crc32(row["b"]),
                       len(row["b"]))
           for row in read_delta(deltalake.DeltaTable(cfg["delta"])).to_pylist()}
    want = {i: (int(a), int(b), int(c), int(d)) for i, a, b, c, d in mariadb.query(
        "SELECT id, CRC32(j), LENGTH(j), CRC32(b), LENGTH(b) FROM big", database=db)}
    assert got == want


if __name__ == "__main__":
    mode, cfg, out = sys.argv[1], json.loads(sys.argv[2]), sys.argv[3]
    result = child_binlog(cfg) if mode == "binlog" else child_spark(cfg)
    Path(out).write_text(json.dumps(result))
