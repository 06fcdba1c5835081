"""The soak's steady writer: row changes at a fixed rate, in small transactions, as an
application would make them, plus a heartbeat row a second whose write time tells the lag.

Per transaction 1 to 9 row changes on ``orders`` (about 60% updates, 20% inserts, 20%
deletes, so the table keeps its size), each kind one statement (``UPDATE ... WHERE id IN``,
a multi-row ``INSERT``, ``DELETE ... WHERE id IN``); now and then a change to a small table
(``customers``, ``settings``). The pace is held against the clock: the writer sleeps while
it is ahead of ``rate`` changes per second since its start, and never bursts to make up more
than a second it fell behind (a stall is then visible as fewer changes, not as a burst).

The heartbeat (``heartbeat``: an auto-increment id and the writer's clock in microseconds)
is written once a second in its own transaction; the newest one found in the target gives
the lag: now minus its ``sent_us``.
"""

from __future__ import annotations

import random
import threading
import time
from dataclasses import dataclass, field

SMALL_DDL = {
    "customers": ("(id INT PRIMARY KEY, name VARCHAR(64), balance DECIMAL(12,2), "
                  "updated DATETIME(6))"),
    "settings": "(k VARCHAR(32) PRIMARY KEY, v VARCHAR(255), changed INT)",
    "heartbeat": "(id BIGINT AUTO_INCREMENT PRIMARY KEY, sent_us BIGINT NOT NULL)",
}
CUSTOMERS = 1_000
SETTINGS = 20


def fill_small(sb, database: str) -> None:
    """The small tables' first rows (the heartbeat starts empty)."""
    for name, ddl in SMALL_DDL.items():
        sb.execute(f"CREATE TABLE {name} {ddl}", database=database)
    sb.execute(
        "INSERT INTO customers SELECT seq, CONCAT('customer-', seq), seq * 1.25, "
        f"'2024-01-01 00:00:00' + INTERVAL seq MINUTE FROM seq_1_to_{CUSTOMERS}",
        f"INSERT INTO settings SELECT CONCAT('key-', seq), CONCAT('value-', seq), 0 "
        f"FROM seq_1_to_{SETTINGS}", database=database)


def order_row(i: int) -> tuple:
    """A new row of the bench's 11-column table (bench/throughput.py's shape), id ``i``."""
    return (i, i * 7 % 2_000_000_000, i * 1000003, f"new-{i}", i / 3, round(i / 7 % 1e7, 2),
            f"2024-02-03 04:05:{i % 60:02d}", f"2024-03-{i % 28 + 1:02d}", i % 100,
            f"{i:032x}", f"2024-06-01 00:00:{i % 60:02d}")


@dataclass
class Counts:
    """What the writer did so far (read by the sampler; ints are swapped whole under the
    GIL, so a read is consistent enough for a sample)."""

    changes: int = 0  # row changes of every table, heartbeats included
    transactions: int = 0
    updates: int = 0
    inserts: int = 0
    deletes: int = 0
    small: int = 0
    heartbeats: int = 0
    behind_s: float = 0.0  # the largest time the writer was behind its pace
    errors: list[str] = field(default_factory=list)


class Writer(threading.Thread):
    """Writes ``rate`` row changes a second into ``database`` until ``stop()``."""

    def __init__(self, connect, rows: int, rate: float, seed: int = 31):
        super().__init__(name="soak-writer", daemon=True)
        self._connect = connect  # () -> a pymysql connection, autocommit off
        self.rate = rate
        self.live = list(range(1, rows + 1))  # ids in the table now (to sample from)
        self.where = {i: i - 1 for i in self.live}  # id -> its index in live
        self.next_id = rows + 1
        self.rng = random.Random(seed)
        self.counts = Counts()
        self._halt = threading.Event()

    def stop(self) -> None:
        self._halt.set()
        self.join()

    def run(self) -> None:
        try:
            self._run()
        except Exception as e:  # noqa: BLE001 - reported by the bench, which then fails
            self.counts.errors.append(f"{type(e).__name__}: {e}")

    def _run(self) -> None:
        conn = self._connect()
        c = self.counts
        t0 = time.monotonic()
        next_beat = t0
        with conn, conn.cursor() as cur:
            while not self._halt.is_set():
                now = time.monotonic()
                if now >= next_beat:
                    cur.execute("INSERT INTO heartbeat (sent_us) VALUES (%s)",
                                (int(time.time() * 1e6),))
                    conn.commit()
                    c.heartbeats += 1
                    c.changes += 1
                    next_beat += 1.0
                due = self.rate * (now - t0)
                behind = (due - c.changes) / self.rate
                if behind > 1.0:  # fell behind by more than a second: do not burst
                    c.behind_s = max(c.behind_s, behind)
                    t0 = now - (c.changes + self.rate) / self.rate
                if c.changes >= due:
                    self._halt.wait(min(0.02, (c.changes - due + 1) / self.rate))
                    continue
                self._transaction(cur)
                conn.commit()
                c.transactions += 1

    def _transaction(self, cur) -> None:
        c, rng = self.counts, self.rng
        k = rng.randint(1, 9)
        ids = rng.sample(self.live, k)
        kinds = rng.choices(("u", "i", "d"), weights=(6, 2, 2), k=k)
        upd = [i for i, x in zip(ids, kinds) if x == "u"]
        dele = [i for i, x in zip(ids, kinds) if x == "d"]
        ins = kinds.count("i")
        if upd:
            marks = ",".join(["%s"] * len(upd))
            cur.execute("UPDATE orders SET a = a + 1, c = CONCAT('u-', id, '-', a), "
                        "e = e + 0.01, j = NOW() WHERE id IN (" + marks + ")", upd)
            c.updates += len(upd)
        if ins:
            rows = [order_row(self.next_id + n) for n in range(ins)]
            self.next_id += ins
            cur.executemany("INSERT INTO orders VALUES "
                            "(%s, %s, %s, %s, %s, %s, %s, %s, %s, %s, %s)", rows)
            for r in rows:
                self.where[r[0]] = len(self.live)
                self.live.append(r[0])
            c.inserts += ins
        if dele:
            marks = ",".join(["%s"] * len(dele))
            cur.execute("DELETE FROM orders WHERE id IN (" + marks + ")", dele)
            for i in dele:
                self._remove(i)
            c.deletes += len(dele)
        c.changes += k
        if rng.random() < 0.05:  # a small table, about every 20th transaction
            if rng.random() < 0.8:
                cur.execute("UPDATE customers SET balance = balance + 1, updated = NOW(6) "
                            "WHERE id = %s", (rng.randint(1, CUSTOMERS),))
            else:
                cur.execute("UPDATE settings SET v = CONCAT('value-', %s), "
                            "changed = changed + 1 WHERE k = %s",
                            (rng.randint(0, 10**6), f"key-{rng.randint(1, SETTINGS)}"))
            c.small += 1
            c.changes += 1

    def _remove(self, i: int) -> None:
        """Takes ``i`` out of ``live`` by moving the last id into its place (O(1))."""
        j = self.where.pop(i)
        last = self.live.pop()
        if last != i:
            self.live[j] = last
            self.where[last] = j
