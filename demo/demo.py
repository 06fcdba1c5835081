"""`make demo`: the whole job on a laptop, start to finish, leaving nothing running.

1. a throwaway MariaDB 10.11 (the sandbox), or MySQL 9.7 with `--server mysql`
   (`make demo SERVER=mysql`; `make setup` installs it), with `demo_orders` and
   `demo_events` (a million rows);
2. `demo/pipeline.yaml` checked (`sparkcdc validate`), then run: a lock-free parallel snapshot
   of both tables into local Delta tables, then the binlog, while a writer inserts, updates
   and deletes, with the live progress display;
3. a few of the captured changes, printed as changelog-json;
4. `sparkcdc verify` (OK) while the writer and the pipeline keep going; then the writer
   stops, the pipeline catches up and stops, and `sparkcdc status` shows where it stands;
5. Spark and the sandbox stop; the exit code is 0 only if verify said OK.
"""

from __future__ import annotations

import argparse
import logging
import os
import random
import shutil
import sys
import tempfile
import threading
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
BIG_ROWS = int(os.environ.get("SPARKCDC_DEMO_ROWS", "1000000"))
STREAM_SECONDS = float(os.environ.get("SPARKCDC_DEMO_STREAM_SECONDS", "15"))


def say(text: str) -> None:
    print(f"\n== {text}", flush=True)


def seq(server: str, hi: int) -> str:
    """The integers 1..``hi`` in column ``seq``: MariaDB's Sequence engine, or on MySQL
    (which has none) a recursive CTE (the MySQL sandbox allows deep recursion)."""
    if server == "mariadb":
        return f"seq_1_to_{hi}"
    return (f"(WITH RECURSIVE s (seq) AS (SELECT 1 UNION ALL SELECT seq + 1 FROM s "
            f"WHERE seq < {hi}) SELECT seq FROM s) AS seq_1_to_{hi}")


def create_tables(sb, server: str = "mariadb") -> None:
    sb.execute("CREATE DATABASE demo")
    sb.execute(
        "CREATE TABLE demo_orders (order_id INT AUTO_INCREMENT PRIMARY KEY, order_date DATE "
        "NOT NULL, order_time TIME NOT NULL, quantity INT NOT NULL, product_id INT NOT NULL, "
        "purchaser VARCHAR(64) NOT NULL)",
        "INSERT INTO demo_orders (order_date, order_time, quantity, product_id, purchaser) "
        "SELECT DATE '2024-01-01' + INTERVAL seq % 365 DAY, SEC_TO_TIME(seq * 37 % 86400), "
        "1 + seq % 5, 100 + seq % 9, ELT(1 + seq % 4, 'sally@example.com', "
        "'george@example.com', 'edward@example.com', 'anne@example.com') "
        f"FROM {seq(server, 1000)}",
        "CREATE TABLE demo_events (event_id BIGINT PRIMARY KEY, kind VARCHAR(16) NOT NULL, "
        "amount DECIMAL(10,2), created DATETIME(3) NOT NULL)",
        f"INSERT INTO demo_events SELECT seq, ELT(1 + seq % 3, 'view', 'cart', 'buy'), "
        f"(seq % 10000) / 100, TIMESTAMP '2024-01-01 00:00:00' + INTERVAL seq SECOND "
        f"FROM {seq(server, BIG_ROWS)}",
        database="demo")


class Writer(threading.Thread):
    """Inserts, updates and deletes on both tables until stopped."""

    def __init__(self, sb):
        super().__init__(daemon=True)
        self.sb = sb
        self.stop_event = threading.Event()
        self.ops = 0
        self.error: Exception | None = None

    def run(self) -> None:
        rnd = random.Random(7)
        conn = self.sb.admin_connection("demo")
        try:
            with conn.cursor() as cur:
                while not self.stop_event.wait(0.02):
                    r = rnd.random()
                    if r < 0.35:
                        cur.execute(
                            "INSERT INTO demo_orders (order_date, order_time, quantity, "
                            "product_id, purchaser) VALUES (CURDATE(), CURTIME(), %s, %s, %s)",
                            (rnd.randint(1, 9), rnd.randint(100, 108),
                             rnd.choice(["sally@example.com", "kim@example.com"])))
                    elif r < 0.6:
                        cur.execute("UPDATE demo_orders SET quantity = quantity + 1 "
                                    "WHERE order_id = %s", (rnd.randint(1, 1000),))
                    elif r < 0.7:
                        cur.execute("DELETE FROM demo_orders WHERE order_id = %s",
                                    (rnd.randint(1, 1000),))
                    elif r < 0.9:
                        cur.execute("UPDATE demo_events SET amount = amount + 1, kind = 'buy' "
                                    "WHERE event_id = %s", (rnd.randint(1, BIG_ROWS),))
                    else:
                        cur.execute("DELETE FROM demo_events WHERE event_id = %s",
                                    (rnd.randint(1, BIG_ROWS),))
                    self.ops += 1
        except Exception as e:  # reported by main()
            self.error = e
        finally:
            conn.close()


class ChangeTap:
    """Keeps a few streamed changes of demo_orders as changelog-json (a foreachBatch hook)."""

    def __init__(self, keep: int = 6):
        self.keep = keep
        self.lines: list[str] = []

    def __call__(self, table: str, df, batch_id: int) -> None:
        if table != "demo.demo_orders" or len(self.lines) >= self.keep:
            return
        from pyspark.sql import functions as F

        from sparkcdc import formats

        changes = df.filter(F.col("_op_ts").isNotNull()).limit(self.keep - len(self.lines))
        for row in formats.encode(changes, "changelog-json").collect():
            self.lines.append(row["value"])


def caught_up(defn) -> bool:
    from sparkcdc.pipeline.commands.status import server_position, table_statuses

    current, _ = server_position(defn)
    sts = table_statuses(defn, current)
    return bool(sts) and all(s.phase == "streaming" and s.lag_bytes == 0 for s in sts)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description="the sparkcdc demo (`make demo`)")
    ap.add_argument("--server", choices=("mariadb", "mysql"),
                    default=os.environ.get("SPARKCDC_DEMO_SERVER") or "mariadb",
                    help="the source: a sandbox MariaDB 10.11 (default) or MySQL 9.7")
    server = ap.parse_args(argv).server
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    logging.basicConfig(level=logging.WARNING, format="%(levelname)s %(name)s: %(message)s")
    logging.getLogger("py4j").setLevel(logging.ERROR)
    from sparkcdc.pipeline import load_pipeline
    from sparkcdc.pipeline.commands import status as status_mod
    from sparkcdc.pipeline.commands import validate as validate_mod
    from sparkcdc.pipeline.commands import verify as verify_mod
    from sparkcdc.pipeline.commands.progress import make_display
    from sparkcdc.pipeline.run.loop import Runner
    from sparkcdc.testing.mariadb import MariaDBSandbox
    from sparkcdc.testing.mysql import MySQLSandbox

    sandbox, label = ((MySQLSandbox, "MySQL") if server == "mysql"
                      else (MariaDBSandbox, "MariaDB"))
    work = Path(tempfile.mkdtemp(prefix="sparkcdc-demo-"))
    runner = None
    ok = False
    t0 = time.monotonic()
    try:
        with sandbox(name="demo") as sb:
            info = sb.info
            version = sb.query("SELECT VERSION()")[0][0]
            say(f"sandbox {label} {version} on 127.0.0.1:{info.port}: creating "
                f"demo.demo_orders (1,000 rows) and demo.demo_events ({BIG_ROWS:,} rows)")
            create_tables(sb, server)
            os.environ.update({"SPARKCDC_DEMO_HOST": info.host,
                               "SPARKCDC_DEMO_PORT": str(info.port),
                               "SPARKCDC_DEMO_USER": info.cdc_user,
                               "SPARKCDC_DEMO_PASSWORD": info.cdc_password,
                               "SPARKCDC_DEMO_DIR": str(work)})
            defn = load_pipeline(HERE / "pipeline.yaml")

            say("sparkcdc validate demo/pipeline.yaml")
            report = validate_mod.validate_pipeline(defn)
            validate_mod.render(report)
            if not report.ok:
                return 1

            say("sparkcdc run demo/pipeline.yaml  (snapshot, then the binlog; a writer "
                "inserts, updates and deletes all along)")
            writer = Writer(sb)
            writer.start()
            tap = ChangeTap()
            display = make_display()
            runner = Runner(defn, master="local[2]", display=display, on_batch=tap)
            result: dict = {}

            def run():
                try:
                    runner.run()
                except BaseException as e:  # reported below
                    result["error"] = e

            thread = threading.Thread(target=run, daemon=True)
            thread.start()
            streaming_since = None
            while thread.is_alive():
                runs = list(runner.runs.values())
                if runs and all(r.phase == "streaming" for r in runs):
                    streaming_since = streaming_since or time.monotonic()
                    if time.monotonic() - streaming_since >= STREAM_SECONDS:
                        break
                time.sleep(0.5)
            runner.display = None  # the display stops here: verify prints below it
            display.close()
            if thread.is_alive():
                say("sparkcdc verify demo/pipeline.yaml  (chunked checksums, source vs Delta, "
                    "while the writer keeps writing and the pipeline keeps running)")
                results = verify_mod.Verifier(defn, catch_up_timeout=10).run()
                ok = verify_mod.render(results)
            writer.stop_event.set()
            writer.join()
            if writer.error is not None:
                raise writer.error
            deadline = time.monotonic() + 120
            while thread.is_alive() and not caught_up(defn) and time.monotonic() < deadline:
                time.sleep(1)
            runner.stop()
            thread.join()
            display.close()
            if "error" in result:
                raise result["error"]
            print(f"writer: {writer.ops:,} inserts, updates and deletes during the run")

            say("a few captured changes of demo.demo_orders, as changelog-json")
            for line in tap.lines:
                print(line)

            say("sparkcdc status demo/pipeline.yaml")
            current, _ = status_mod.server_position(defn)
            status_mod.render(status_mod.table_statuses(defn, current))

    finally:
        if runner is not None:
            runner.close()  # stops Spark
        shutil.rmtree(work, ignore_errors=True)
    say(f"done in {time.monotonic() - t0:.0f}s: " + ("verify OK; sandbox and Spark stopped"
                                                    if ok else "verify FAILED"))
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
