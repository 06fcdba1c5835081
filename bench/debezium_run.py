"""Debezium embedded (pydbzengine) as a peer in `make bench`; run as a subprocess so its JVM
(JPype, in-process) never meets Spark's.

    python bench/debezium_run.py CONFIG.json

CONFIG: host, port, user, password, database, table, server_id, workdir, mode
("snapshot": initial_only, count the snapshot's records; "position": start with no_data and
store the current binlog offset (a write to a marker table makes the engine commit one),
then stop; "catchup": resume from the stored offset and
count change records), expect (records to wait for), timeout. Prints one JSON line:
{"records": n, "seconds": engine start to the last expected record, "jvm_seconds": ...}.

The handler only counts the records of each batch (no per-record work in Python), which
favours Debezium: sparkcdc's figures include building Python values for every row.
"""

from __future__ import annotations

import json
import os
import sys
import threading
import time
from pathlib import Path


def main() -> None:
    cfg = json.loads(Path(sys.argv[1]).read_text())
    work = Path(cfg["workdir"])
    work.mkdir(parents=True, exist_ok=True)
    os.chdir(work)  # pydbzengine logs to ./logs
    os.environ.setdefault("PYDBZ_JVM_OPTS", "-Xms256m -Xmx2g -XX:+UseG1GC")
    t0 = time.monotonic()
    from pydbzengine import BasePythonChangeHandler, DebeziumJsonEngine
    from pydbzengine.engine.jvm import ensure_jvm_started

    ensure_jvm_started()
    jvm_seconds = time.monotonic() - t0
    mode = cfg["mode"]
    props = {
        "name": "bench",
        "connector.class": "io.debezium.connector.mysql.MySqlConnector",
        "offset.storage": "org.apache.kafka.connect.storage.FileOffsetBackingStore",
        "offset.storage.file.filename": str(work / "offsets.dat"),
        "offset.flush.interval.ms": "1000",
        "schema.history.internal": "io.debezium.storage.file.history.FileSchemaHistory",
        "schema.history.internal.file.filename": str(work / "history.dat"),
        "database.hostname": cfg["host"], "database.port": str(cfg["port"]),
        "database.user": cfg["user"], "database.password": cfg["password"],
        "database.server.id": str(cfg["server_id"]), "topic.prefix": "bench",
        "database.include.list": cfg["database"],
        "table.include.list": f"{cfg['database']}.{cfg['table']},{cfg['database']}.dbz_marker",
        "snapshot.mode": {"snapshot": "initial_only", "position": "no_data",
                          "catchup": "no_data"}[mode],
        "snapshot.locking.mode": "none",
        "include.schema.changes": "false",
        "tombstones.on.delete": "false",
        # no schema inside every JSON record
        "converter.schemas.enable": "false",
        "key.converter.schemas.enable": "false",
        "value.converter.schemas.enable": "false",
        "max.batch.size": "8192", "max.queue.size": "32768",
        "poll.interval.ms": "50",
    }
    expect = int(cfg.get("expect", 0))
    state = {"n": 0, "first": None, "last": None}
    done = threading.Event()

    class Counter(BasePythonChangeHandler):
        def handleJsonBatch(self, records):
            n = len(records)
            if n:
                now = time.monotonic()
                state["first"] = state["first"] or now
                state["n"] += n
                state["last"] = now
            if expect and state["n"] >= expect:
                done.set()

    engine = DebeziumJsonEngine(properties=props, handler=Counter())
    start = time.monotonic()
    runner = threading.Thread(target=engine.run, daemon=True)
    runner.start()
    if mode == "position":
        # the connector stores an offset only with a record: write to a marker table until
        # one arrives, let the offset flush, stop
        import pymysql

        with pymysql.connect(host=cfg["host"], port=cfg["port"], user=cfg["user"],
                             password=cfg["password"], database=cfg["database"],
                             autocommit=True) as c, c.cursor() as cur:
            cur.execute("CREATE TABLE IF NOT EXISTS dbz_marker (id INT PRIMARY KEY)")
            deadline = time.monotonic() + cfg.get("timeout", 120)
            k = 0
            while state["n"] == 0 and time.monotonic() < deadline:
                k += 1
                cur.execute("REPLACE INTO dbz_marker VALUES (%s)", (k,))
                time.sleep(0.5)
        time.sleep(2.5)
    else:
        done.wait(cfg.get("timeout", 600))
    engine.close()
    runner.join(60)
    print(json.dumps({"records": state["n"],
                      "seconds": (state["last"] - start) if state["last"] else None,
                      "first_record_seconds": (state["first"] - start) if state["first"]
                      else None,
                      "jvm_seconds": jvm_seconds}), flush=True)
    os._exit(0)  # the JVM's non-daemon threads must not keep the process alive


if __name__ == "__main__":
    main()
