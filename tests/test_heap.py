"""``sparkcdc.heap.settle``: a process's start-up objects frozen once, a forked child's again,
and a binlog read settles its process (the reader's hot loop is where collections cost)."""

from __future__ import annotations

import subprocess
import sys
import textwrap

from types_support import cdc

from sparkcdc.core.schema import TableId
from sparkcdc.mysql.binlog.reader import BinlogReader
from sparkcdc.mysql.binlog.server_lookups import load_table_schema
from sparkcdc.mysql.offsets import current_offset


def _run(code: str) -> str:
    out = subprocess.run([sys.executable, "-c", textwrap.dedent(code)], check=False,
                         capture_output=True, text=True, timeout=60)
    assert out.returncode == 0, out.stderr
    return out.stdout.strip()


def test_settle_freezes_once_per_process_and_again_in_a_forked_child():
    got = _run("""
        import gc, os
        from sparkcdc import heap
        assert gc.get_freeze_count() == 0
        heap.settle()
        first = gc.get_freeze_count()
        made = [[i] for i in range(1000)]  # tracked objects made after the first call
        heap.settle()
        assert gc.get_freeze_count() == first, "a second call in one process froze again"
        pid = os.fork()
        if pid == 0:
            heap.settle()
            os._exit(0 if gc.get_freeze_count() >= first + 1000 else 3)
        _, status = os.waitpid(pid, 0)
        print(first, os.waitstatus_to_exitcode(status))
    """)
    first, child = map(int, got.split())
    assert first > 5_000  # the interpreter's and sparkcdc's own objects (8,600 here)
    assert child == 0  # the child froze what its parent made since


def test_a_binlog_read_settles_its_process(mariadb, db):
    mariadb.execute("CREATE TABLE t (id INT PRIMARY KEY)", database=db)
    conn = cdc(mariadb)
    start = current_offset(conn)
    mariadb.execute("INSERT INTO t VALUES (1), (2)", database=db)
    schema = load_table_schema(conn, TableId(db, "t"))
    i = mariadb.info
    got = _run(f"""
        import gc
        from sparkcdc.core.offsets import BinlogOffset
        from sparkcdc.core.schema import TableId
        from sparkcdc.mysql.binlog.reader import BinlogReader
        from sparkcdc.mysql.binlog.server_lookups import load_table_schema
        from sparkcdc.mysql.connection import ConnectionOptions
        from sparkcdc.mysql.offsets import current_offset
        conn = ConnectionOptions(hostname={i.host!r}, port={i.port}, username={i.cdc_user!r},
                                 password={i.cdc_password!r})
        schema = load_table_schema(conn, TableId({db!r}, "t"))
        assert gc.get_freeze_count() == 0
        start = BinlogOffset.from_dict({start.to_dict()!r})
        rows = list(BinlogReader(conn, 7411, {{schema.table_id: schema}})
                    .read_window(start, current_offset(conn)))
        print(len(rows), gc.get_freeze_count())
    """)
    rows, frozen = map(int, got.split())
    assert rows == 2 and frozen > 0
    # and in this process, the records are the same
    assert len(list(BinlogReader(conn, 7412, {schema.table_id: schema})
                    .read_window(start, current_offset(conn)))) == 2
