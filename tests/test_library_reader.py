"""The per-stream table-map cache: parsed once per distinct TABLE_MAP event, records equal to
reading without it, and other users of python-mysql-replication untouched."""

from __future__ import annotations

import pytest
import tablemap_cache
from library_reader import LibraryBinlogReader
from types_support import cdc

from sparkcdc.core.schema import TableId
from sparkcdc.mysql.binlog.reader import BinlogReader
from sparkcdc.mysql.binlog.server_lookups import load_table_schema
from sparkcdc.mysql.offsets import current_offset

pytestmark = pytest.mark.timeout(120)


class _KeepsStreams(LibraryBinlogReader):
    def _open(self, start, **kw):
        stream = super()._open(start, **kw)
        self.streams = getattr(self, "streams", []) + [stream]
        return stream


@pytest.fixture
def txns(mariadb, db):
    mariadb.execute("CREATE TABLE t (id INT PRIMARY KEY, v VARCHAR(20), e ENUM('a','b'))",
                    "CREATE TABLE u (id INT PRIMARY KEY, w INT)", database=db)
    conn = cdc(mariadb)
    start = current_offset(conn)
    with mariadb.admin_connection(db) as c, c.cursor() as cur:
        for k in range(300):
            cur.execute("INSERT INTO t VALUES (%s, %s, 'b')", (k, f"v{k}"))
            cur.execute("INSERT INTO u (id, w) VALUES (%s, %s)", (k, k))
            if k == 150:  # a new version of the uncaptured table: a new table map
                cur.execute("ALTER TABLE u ADD COLUMN x INT DEFAULT 7")
            if k % 3 == 0:
                cur.execute("UPDATE t SET v = 'upd', e = 'a' WHERE id = %s", (k,))
    end = current_offset(conn)
    schema = load_table_schema(conn, TableId(db, "t"))
    return conn, schema, start, end


def test_our_event_layer_parses_each_distinct_table_map_once(txns, monkeypatch):
    from sparkcdc.mysql.binlog import protocol as E

    conn, schema, start, end = txns
    parsed = []
    real = E.parse_table_map
    monkeypatch.setattr(E, "parse_table_map", lambda *a: parsed.append(a[0]) or real(*a))
    r = BinlogReader(conn, 7504, {schema.table_id: schema})
    native = list(r.read_window(start, end))
    # t, u before and after the ALTER (MariaDB may log t's map under one id only)
    assert 2 <= len(parsed) <= 4 and len(set(parsed)) == len(parsed)
    assert len(r._table_maps) == len(parsed)
    again = list(r.read_window(start, end))  # the reader keeps them across its streams
    assert again == native and len(parsed) <= 4
    library = list(LibraryBinlogReader(conn, 7505, {schema.table_id: schema})
                   .read_window(start, end))
    assert native == library and len(native) == 300 + 100


def test_each_distinct_table_map_is_parsed_once_and_records_are_unchanged(txns, monkeypatch):
    """The reference reader keeps its own per-stream cache."""
    conn, schema, start, end = txns
    r = _KeepsStreams(conn, 7501, {schema.table_id: schema})
    cached = list(r.read_window(start, end))
    cache = r.streams[-1]._ctl_connection._sparkcdc_table_maps
    # t, u before and after the ALTER (MariaDB may log t's map under one id only)
    assert 2 <= len(cache) <= 4
    monkeypatch.setattr(tablemap_cache, "enable", lambda conn: None)
    plain_reader = _KeepsStreams(conn, 7502, {schema.table_id: schema})
    plain = list(plain_reader.read_window(start, end))
    assert not hasattr(plain_reader.streams[-1]._ctl_connection, "_sparkcdc_table_maps")
    assert cached == plain
    assert len(cached) == 300 + 100
    assert [r.after["e"] for r in cached[:3]] == ["b", "a", "b"]


def test_the_library_alone_parses_as_before(txns):
    from pymysqlreplication import BinLogStreamReader
    from pymysqlreplication.row_event import TableMapEvent, WriteRowsEvent

    conn, _, start, end = txns
    tablemap_cache.install()
    settings = {"host": conn.hostname, "port": conn.port, "user": conn.username,
                "password": conn.password}
    s = BinLogStreamReader(connection_settings=settings,
                           server_id=7503, resume_stream=True, blocking=False,
                           log_file=start.file, log_pos=start.pos,
                           only_events=[TableMapEvent, WriteRowsEvent])
    maps, rows = [], []
    try:
        for ev in s:
            if isinstance(ev, TableMapEvent):
                maps.append(ev.table_obj)
            elif ev.table == "t":
                rows.extend(x["values"]["v"] for x in ev.rows)
            if ev.packet.log_pos >= end.pos and ev.packet.log_pos and \
                    s.log_file == end.file:
                break
    finally:
        s.close()
    assert not hasattr(s._ctl_connection, "_sparkcdc_table_maps")
    assert len(maps) >= 600 and len({id(m) for m in maps}) == len(maps)  # parsed each time
    assert rows[:3] == ["v0", "v1", "v2"] and len(rows) == 300
