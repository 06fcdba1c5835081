"""The reader's event loop in C (``_fastloop.c``, ``CRowDecoder.event_loop``) against its
Python twin (the loop in ``BinlogReader._consume``, which ``loop_in_c = False`` and the
pure-Python decoder run): the same records, offsets, GTID states and table events, on
MariaDB, on MySQL and on a MySQL writing compressed transactions and partial JSON updates,
read whole, resumed inside transactions and cut short between two rows."""

from __future__ import annotations

import random
import uuid

import pytest
from server_support import is_mysql, seq

from sparkcdc.core.records import ChangeRecord
from sparkcdc.core.schema import TableId
from sparkcdc.mysql.binlog import fastdecode as F
from sparkcdc.mysql.binlog import json_diff
from sparkcdc.mysql.binlog import reader as reader_module
from sparkcdc.mysql.binlog.reader import BinlogReader
from sparkcdc.mysql.binlog.row_decoding import PyRowDecoder
from sparkcdc.mysql.binlog.server_lookups import load_table_schema
from sparkcdc.mysql.connection import ConnectionOptions
from sparkcdc.mysql.offsets import current_offset

pytestmark = [pytest.mark.timeout(300),
              pytest.mark.skipif(not F.LOOP_IN_C, reason="the compiled loop is not built")]


@pytest.fixture(params=["mariadb", "mysql", "mysql-compressed"])
def source(request):
    """Each server the loop meets: MariaDB, MySQL, and MySQL with compressed transactions
    and PARTIAL_JSON (``TRANSACTION_PAYLOAD`` and ``PARTIAL_UPDATE_ROWS`` events)."""
    sb = request.getfixturevalue({"mariadb": "mariadb", "mysql": "mysql_server",
                                  "mysql-compressed": "mysql_compressed"}[request.param])
    name = f"t_{uuid.uuid4().hex[:10]}"
    sb.execute(f"CREATE DATABASE `{name}`")
    yield sb, name
    sb.execute(f"DROP DATABASE IF EXISTS `{name}`")


def _tables(sb, db: str) -> None:
    j = "JSON" if is_mysql(sb) else "LONGTEXT"
    sb.execute(f"CREATE TABLE a (id INT PRIMARY KEY, v VARCHAR(100), j {j})",
               "CREATE TABLE b (id BIGINT PRIMARY KEY, d DECIMAL(20,4), t DATETIME(3))",
               "CREATE TABLE other (id INT PRIMARY KEY, v TEXT)", database=db)


def _workload(sb, db: str, altered: str) -> None:
    """Transactions of every shape the loop takes or hands over: single rows, many rows, two
    tables and an uncaptured one, JSON, JSON_SET, JSON_REPLACE and JSON_REMOVE on nested
    paths (diffs on the compressed MySQL: its documents are long enough), a rollback, an
    ALTER of ``altered`` between rows, a TRUNCATE, a rotation, deletes."""
    with sb.admin_connection(db) as c, c.cursor() as cur:
        for i in range(40):  # one row each
            cur.execute("INSERT INTO a VALUES (%s, %s, JSON_OBJECT('n', %s, 'k', 'v', "
                        "'pad', REPEAT('p', 300)))", (i, f"row {i}", i))
        cur.execute(f"INSERT INTO b SELECT seq, seq / 7, TIMESTAMP '2024-02-29 12:00:00' + "
                    f"INTERVAL seq SECOND FROM {seq(sb, 300)}")
        c.begin()
        cur.execute("UPDATE a SET v = CONCAT(v, '!') WHERE id % 3 = 0")
        cur.execute("INSERT INTO other VALUES (1, 'not captured')")
        cur.execute("DELETE FROM b WHERE id % 10 = 0")
        cur.execute("UPDATE a SET j = JSON_SET(j, '$.k', 'set', '$.m', id) WHERE id < 20")
        c.commit()
        cur.execute("UPDATE a SET j = JSON_SET(j, '$.o', JSON_OBJECT('p', JSON_ARRAY(1, 2, 3), "
                    "'q', 'x')) WHERE id BETWEEN 20 AND 29")
        cur.execute("""UPDATE a SET j = JSON_SET(j, '$.o.p[1]', 'two', '$.o."new key"', 2.5,
                    '$.o.p[5]', 'é"\\n') WHERE id BETWEEN 20 AND 29""")
        cur.execute("UPDATE a SET j = JSON_REPLACE(j, '$.o.q', JSON_OBJECT('deep', TRUE), "
                    "'$.n', -1, '$.nope', 0) WHERE id BETWEEN 20 AND 25")
        cur.execute("""UPDATE a SET j = JSON_REMOVE(j, '$.o.p[0]', '$.k', '$.o."new key"')
                    WHERE id BETWEEN 20 AND 29""")
        c.begin()
        cur.execute("INSERT INTO a VALUES (1000, 'rolled back', NULL)")
        c.rollback()
        cur.execute(f"ALTER TABLE {altered} ADD COLUMN w INT DEFAULT 7")
        for i in range(10):
            cur.execute("UPDATE a SET v = %s WHERE id = %s", (f"again {i}", i))
        cur.execute("FLUSH BINARY LOGS")
        cur.execute("INSERT INTO other (id, v) VALUES (2, 'still not captured')")
        c.begin()
        for i in range(5):
            cur.execute("INSERT INTO b VALUES (%s, %s, NOW(3))", (10000 + i, i))
        c.commit()
        cur.execute("TRUNCATE TABLE other")
        cur.execute("DELETE FROM a WHERE id >= 30")


def _conn(sb) -> ConnectionOptions:
    i = sb.info
    return ConnectionOptions(hostname=i.host, port=i.port, username=i.cdc_user,
                             password=i.cdc_password, max_retries=0)


def _reader(conn, schemas, loop: str, table_events: bool = False) -> BinlogReader:
    decoder = PyRowDecoder() if loop == "py decoder" else F.CRowDecoder()
    if loop == "py loop":
        decoder.loop_in_c = False
    return BinlogReader(conn, 7801, schemas, decoder=decoder, table_events=table_events)


def _seen(items) -> list[tuple]:
    """Everything a record or table event says, offsets as their JSON."""
    out = []
    for r in items:
        if isinstance(r, ChangeRecord):
            out.append((r.op, r.table_id, r.before, r.after, r.offset.to_json(), r.ts_ms, r.gtid))
        else:
            out.append((type(r).__name__, r.table_id, r.offset.to_json(), repr(r)))
    return out


LOOPS = ("c loop", "py loop", "py decoder")


def _window(sb, db, altered: str = "other"):
    """The workload's window, and the captured tables' schemas before it."""
    conn = _conn(sb)
    _tables(sb, db)
    schemas = {TableId(db, t): load_table_schema(conn, TableId(db, t)) for t in ("a", "b")}
    start = current_offset(conn)
    _workload(sb, db, altered)
    return conn, schemas, start, current_offset(conn)


@pytest.mark.parametrize("table_events", [False, True])
def test_the_loop_in_c_reads_what_the_python_loop_reads(source, monkeypatch, table_events,
                                                         request):
    """With table events, the ALTER is of a captured table: its rows after it come with the
    new schema (a NewSchema event between them, decoded by Python's loop)."""
    sb, db = source
    conn, schemas, start, end = _window(sb, db, "a" if table_events else "other")
    in_python = []  # the rows events the Python loop made records of
    made = reader_module.event_records

    def counted(*a, **kw):
        in_python.append(1)
        return made(*a, **kw)

    monkeypatch.setattr(reader_module, "event_records", counted)
    diffs = []  # the JSON diffs json_diff applied
    apply = json_diff.apply
    monkeypatch.setattr(json_diff, "apply", lambda *a, **kw: diffs.append(1) or apply(*a, **kw))
    got, applied = {}, {}
    for loop in LOOPS:
        in_python.clear()
        diffs.clear()
        got[loop] = list(_reader(conn, schemas, loop, table_events).read_window(start, end))
        applied[loop] = len(diffs)
        if loop == "c loop":
            taken = len(in_python)
    assert _seen(got["c loop"]) == _seen(got["py loop"]) == _seen(got["py decoder"])
    if request.node.callspec.params["source"] == "mysql-compressed":  # C's diffs, json_diff's
        assert applied["c loop"] == applied["py loop"] == 0 and applied["py decoder"] >= 30, \
            applied
    records = [r for r in got["c loop"] if isinstance(r, ChangeRecord)]
    assert len(records) == 40 + 300 + 14 + 30 + 20 + 10 + 5 + 10 + 36
    assert len({r.gtid for r in records}) > 50  # the GTIDs moved with each transaction
    if table_events:
        assert any(not isinstance(r, ChangeRecord) for r in got["c loop"])
        assert any(r.after and r.after.get("w") == 7 for r in records)
    # the loop in C took the rows events: Python only a table's first ones (its plan)
    assert taken <= 6, taken


def test_resumed_and_cut_between_rows_alike(source):
    sb, db = source
    conn, schemas, start, end = _window(sb, db)
    whole = list(_reader(conn, schemas, "py loop").read_window(start, end))
    rng = random.Random(33)
    picks = sorted(rng.sample(range(len(whole)), 12))
    for k in picks:
        at = whole[k].offset
        for loop in ("c loop", "py loop"):
            rest = list(_reader(conn, schemas, loop).read_window(at, end))
            assert _seen(rest) == _seen(whole[k:]), (loop, at)
            upto = list(_reader(conn, schemas, loop).read_window(start, at))
            assert _seen(upto) == _seen(whole[:k]), (loop, at)
