"""Consistency under load: snapshot + stream, applied in order, equals the final table.

Writers insert, update (also moving rows across chunk boundaries), delete and change primary
keys during the whole snapshot, on the real server. The reference engine (Flink CDC 2.x's
flow: every chunk normalized to its own high watermark, then the filtered stream from the
smallest high watermark) must reproduce the table exactly. On MariaDB 10.11 and MySQL 9.7.
"""

from __future__ import annotations

import random
import threading

import pytest
from server_support import is_mysql, seq

from sparkcdc.core.chunking import ChunkingOptions
from sparkcdc.core.engine import ReferenceEngine
from sparkcdc.core.watermark import WatermarkHooks
from sparkcdc.mysql.connection import ConnectionOptions
from sparkcdc.mysql.dialect import MySQLDialect
from sparkcdc.mysql.discovery import discover
from sparkcdc.mysql.snapshot import read_chunk

ROWS = 200_000

TABLES = {
    "int_pk": ("CREATE TABLE {t} (id BIGINT PRIMARY KEY, v INT, s VARCHAR(40))",
               "INSERT INTO {t} SELECT seq, seq % 97, CONCAT('r', seq) FROM {seq}"),
    "str_pk": (("CREATE TABLE {t} (k VARCHAR(40) PRIMARY KEY, v INT, s VARCHAR(40)) "
                "COLLATE utf8mb4_general_ci"),
               ("INSERT INTO {t} SELECT CONCAT(IF(seq % 2, 'K', 'k'), LPAD(seq, 7, '0')), "
                "seq % 97, CONCAT('r', seq) FROM {seq}")),
    "composite": (("CREATE TABLE {t} (a INT, b VARCHAR(20), v INT, s VARCHAR(40), "
                   "PRIMARY KEY (a, b))"),
                  ("INSERT INTO {t} SELECT seq DIV 4, CONCAT('b', seq % 4), seq % 97, "
                   "CONCAT('r', seq) FROM {seq}")),
    "no_pk": ("CREATE TABLE {t} (id INT NOT NULL, v INT, s VARCHAR(40), UNIQUE KEY (id))",
              "INSERT INTO {t} SELECT seq, seq % 97, CONCAT('r', seq) FROM {seq}"),
}


def _writer(mariadb, db, kind, stop: threading.Event, errors: list, seed: int):
    rnd = random.Random(seed)
    t = f"`{db}`.`{kind}`"
    conn = mariadb.admin_connection(db)
    next_new = ROWS + 1 + seed * 1_000_000  # disjoint per writer
    try:
        with conn.cursor() as cur:
            while not stop.wait(0.002):  # a few hundred changes a second per writer
                op = rnd.random()
                n = rnd.randint(1, ROWS)
                if kind == "int_pk" or kind == "no_pk":
                    if op < 0.25:
                        cur.execute(f"INSERT IGNORE INTO {t} VALUES (%s, 1, 'new')", (next_new,))
                        next_new += 1
                    elif op < 0.55:
                        cur.execute(f"UPDATE {t} SET v = v + 1, s = 'upd' WHERE id = %s", (n,))
                    elif op < 0.7:
                        cur.execute(f"DELETE FROM {t} WHERE id = %s", (n,))
                    else:  # key change, often across chunk boundaries
                        m = rnd.randint(1, ROWS * 2)
                        cur.execute(f"UPDATE IGNORE {t} SET id = %s, s = 'moved' WHERE id = %s",
                                    (m + 100_000_000 * (seed + 1), n))
                elif kind == "str_pk":
                    k = f"{'K' if n % 2 else 'k'}{n:07d}"
                    if op < 0.25:
                        cur.execute(f"INSERT IGNORE INTO {t} VALUES (%s, 1, 'new')",
                                    (f"n{seed}-{next_new}",))
                        next_new += 1
                    elif op < 0.55:
                        cur.execute(f"UPDATE {t} SET v = v + 1, s = 'upd' WHERE k = %s", (k,))
                    elif op < 0.7:
                        cur.execute(f"DELETE FROM {t} WHERE k = %s", (k,))
                    else:
                        cur.execute(f"UPDATE IGNORE {t} SET k = %s, s = 'moved' WHERE k = %s",
                                    (f"{rnd.choice('aAzZ')}{seed}-{n}", k))
                else:  # composite
                    a, b = n // 4, f"b{n % 4}"
                    if op < 0.25:
                        cur.execute(f"INSERT IGNORE INTO {t} VALUES (%s, %s, 1, 'new')",
                                    (next_new, f"x{seed}"))
                        next_new += 1
                    elif op < 0.55:
                        cur.execute(f"UPDATE {t} SET v = v + 1 WHERE a = %s AND b = %s", (a, b))
                    elif op < 0.7:
                        cur.execute(f"DELETE FROM {t} WHERE a = %s AND b = %s", (a, b))
                    else:
                        cur.execute(f"UPDATE IGNORE {t} SET a = %s WHERE a = %s AND b = %s",
                                    (rnd.randint(0, ROWS // 2), a, b))
    except Exception as e:  # noqa: BLE001 - the writer thread's error, surfaced by the test
        errors.append(e)
    finally:
        conn.close()


@pytest.mark.parametrize("kind", list(TABLES))
def test_snapshot_plus_stream_equals_final_table(server, server_db, kind):
    mariadb, db = server, server_db
    create, fill = TABLES[kind]
    t = f"`{db}`.`{kind}`"
    mariadb.execute(create.format(t=t), fill.format(t=t, seq=seq(mariadb, ROWS)), database=db)
    info = mariadb.info
    conn = ConnectionOptions(info.host, info.port, info.cdc_user, info.cdc_password)
    chunk_key = {f"{db}\\.{kind}": "id"} if kind == "no_pk" else None
    tables = discover(conn, db, f"{db}\\.{kind}", None, chunk_key)
    schema = tables[next(iter(tables))]

    stop = threading.Event()
    errors: list = []
    writers = [threading.Thread(target=_writer, args=(mariadb, db, kind, stop, errors, i))
               for i in range(2)]
    for w in writers:
        w.start()
    state: dict = {}
    try:
        dialect = MySQLDialect(conn, server_id=9101, tables=tables,
                               chunking=ChunkingOptions(chunk_size=4000),
                               flavor="mysql" if is_mysql(mariadb) else "mariadb")
        engine = ReferenceEngine(dialect, tables)
        for out in engine.snapshot():
            for row in out.rows.to_pylist():
                state[tuple(row[c] for c in schema.row_key)] = row
    finally:
        stop.set()
        for w in writers:
            w.join()
    assert not errors, errors
    final = dialect.current_offset()
    streamed = 0
    for rec, verdict in engine.stream(final):
        if verdict.before:
            state.pop(rec.key(schema.row_key, "before"), None)
        if verdict.after:
            state[rec.key(schema.row_key, "after")] = rec.after
        streamed += verdict.any
    dialect.close()
    expected = {tuple(r[c] for c in schema.row_key): r
                for r in read_chunk(conn, schema, None, None).to_pylist()}
    assert streamed > 0  # the writers really overlapped the snapshot
    assert len(state) == len(expected)
    assert state == expected


def test_backfill_applies_changes_made_between_the_watermarks(server, server_db):
    """Hooks run statements on the real server between LW and the select, and between the
    select and HW; the chunk must come out as of HW."""
    mariadb, db = server, server_db
    t = f"`{db}`.`t`"
    mariadb.execute(f"CREATE TABLE {t} (id INT PRIMARY KEY, v VARCHAR(10))",
                    f"INSERT INTO {t} SELECT seq, 'a' FROM {seq(mariadb, 100)}", database=db)
    info = mariadb.info
    conn = ConnectionOptions(info.host, info.port, info.cdc_user, info.cdc_password)
    tables = discover(conn, db, f"{db}\\.t")
    dialect = MySQLDialect(conn, server_id=9102, tables=tables,
                           chunking=ChunkingOptions(chunk_size=1000),
                           flavor="mysql" if is_mysql(mariadb) else "mariadb")
    hooks = WatermarkHooks(
        after_low_watermark=lambda: mariadb.execute(
            f"UPDATE {t} SET v = 'lw' WHERE id = 5", f"DELETE FROM {t} WHERE id = 6",
            f"INSERT INTO {t} VALUES (1000, 'lw')"),
        after_select=lambda: mariadb.execute(
            f"UPDATE {t} SET v = 'sel' WHERE id = 7", f"DELETE FROM {t} WHERE id = 8",
            f"UPDATE {t} SET id = 2000 WHERE id = 9", f"INSERT INTO {t} VALUES (3000, 'sel')"),
    )
    engine = ReferenceEngine(dialect, tables, hooks=lambda split: hooks)
    outs = list(engine.snapshot())
    dialect.close()
    rows = {r["id"]: r["v"] for o in outs for r in o.rows.to_pylist()}
    assert rows == {r[0]: r[1] for r in mariadb.query(f"SELECT id, v FROM {t}")}
    assert rows[5] == "lw" and rows[7] == "sel" and 6 not in rows and 8 not in rows
    assert 9 not in rows and rows[2000] == "a" and rows[3000] == "sel"
    assert sum(o.events_applied for o in outs) >= 7  # the backfill path really ran
