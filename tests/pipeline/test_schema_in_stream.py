"""Schema changes carried in the stream (``BinlogReader(table_events=True)``,
mysql/binlog/schema_at.py), against the real MariaDB: each row event decoded by the schema its own
table map describes, and what the DDL statements and TRUNCATEs of captured tables did to
them as typed events in binlog order (core/table_events.py). Then through a whole pipeline: several DDLs of one table with rows between
them, read as one backlog, and an ALTER that no row follows."""

from __future__ import annotations

import decimal

import pytest
from pipeline_support import source_yaml
from server_support import seq
from sink_support import read_delta

from sparkcdc.core.records import ChangeRecord
from sparkcdc.core.schema import Column, TableId, TableSchema
from sparkcdc.core.table_events import (
    Ddl,
    NewSchema,
    SchemaChanged,
    TableDropped,
    TableEvent,
    TableRenamed,
    TableTruncated,
)
from sparkcdc.mysql.binlog import schema_at
from sparkcdc.mysql.binlog.reader import BinlogReader
from sparkcdc.mysql.binlog.server_lookups import load_table_schema
from sparkcdc.mysql.connection import ConnectionOptions
from sparkcdc.mysql.offsets import current_offset

pytestmark = pytest.mark.timeout(300)


def _conn(mariadb) -> ConnectionOptions:
    i = mariadb.info
    return ConnectionOptions(hostname=i.host, port=i.port, username=i.cdc_user,
                             password=i.cdc_password)


def _read(mariadb, db, start, tables=("t",), server_id=7401, schemas=None):
    conn = _conn(mariadb)
    schemas = schemas or {TableId(db, t): s for t in tables
                          if (s := _schema_or_none(conn, TableId(db, t))) is not None}
    r = BinlogReader(conn, server_id, schemas, table_events=True)
    return list(r.read_window(start, current_offset(conn)))


def _schema_or_none(conn, tid):
    from sparkcdc.errors import SchemaError

    try:
        return load_table_schema(conn, tid)
    except SchemaError:
        return None


def test_rows_around_two_alters_are_decoded_by_their_own_table_maps(mariadb, db):
    """A backlog read after both ALTERs: information_schema shows the last schema only,
    so the rows between the two come with a schema built from their table map."""
    conn = _conn(mariadb)
    mariadb.execute("CREATE TABLE t (id INT PRIMARY KEY, a INT, p DECIMAL(8,2), "
                    "s VARCHAR(10))", "INSERT INTO t VALUES (1, 10, 1.25, 'x')", database=db)
    first = load_table_schema(conn, TableId(db, "t"))
    start = current_offset(conn)
    mariadb.execute(
        "INSERT INTO t VALUES (2, 20, 2.50, 'y')",
        "ALTER TABLE t RENAME COLUMN a TO a2, ADD COLUMN e ENUM('lo','hi') DEFAULT 'lo', "
        "MODIFY p DECIMAL(12,4)",
        "INSERT INTO t VALUES (3, 30, 3.1234, 'z', 'hi')",
        "UPDATE t SET a2 = 11 WHERE id = 1",
        "ALTER TABLE t DROP COLUMN s, ADD COLUMN big BIGINT UNSIGNED",
        "INSERT INTO t VALUES (4, 40, 4.5, 'lo', 18446744073709551615)",
        "TRUNCATE TABLE t", "INSERT INTO t VALUES (5, 50, 5, 'hi', 1)", database=db)
    recs = _read(mariadb, db, start, schemas={first.table_id: first})
    kinds = [type(r) if isinstance(r, TableEvent) else r.op for r in recs]
    assert kinds == ["c", SchemaChanged, NewSchema, "c", "u", SchemaChanged, NewSchema, "c",
                     TableTruncated, "c"]
    # offsets keep binlog order, the events included
    assert [r.offset for r in recs] == sorted(r.offset for r in recs)

    assert recs[0].after == {"id": 2, "a": 20, "p": decimal.Decimal("2.50"), "s": "y"}
    assert "RENAME COLUMN a TO a2" in recs[1].ddl.statement
    assert recs[1].ddl.renames == (("a", "a2"),) and recs[5].ddl.renames == ()
    middle = recs[2].schema
    assert middle.column_names == ["id", "a2", "p", "s", "e"]
    # built from the table map (information_schema already has the last schema)
    assert middle.column("p").column_type == "decimal(12,4)"
    assert middle.column("e").column_type == "enum('lo','hi')"
    assert middle.column("s") == first.column("s")  # a column that fits is kept as it was
    assert middle.primary_key == ("id",)
    assert recs[3].after == {"id": 3, "a2": 30, "p": decimal.Decimal("3.1234"), "s": "z",
                             "e": "hi"}
    assert recs[4].before["a2"] == 10 and recs[4].after["a2"] == 11
    last = recs[6].schema
    assert last == load_table_schema(conn, TableId(db, "t"))  # information_schema's: it fits
    assert recs[7].after["big"] == decimal.Decimal(18446744073709551615)
    assert recs[8].table_id == TableId(db, "t") and recs[9].after["id"] == 5

    # read with today's schema (a stream restarted from its checkpoint): the first rows
    # bring the schema of their own table map first
    again = _read(mariadb, db, start)
    assert isinstance(again[0], NewSchema)
    assert again[0].schema.column_names == ["id", "a", "p", "s"]
    assert [r.after for r in again[1:] if isinstance(r, ChangeRecord)] == [
        r.after for r in recs if isinstance(r, ChangeRecord)]


def test_a_ddl_of_another_table_or_database_is_no_event(mariadb, db):
    conn = _conn(mariadb)
    mariadb.execute("CREATE TABLE t (id INT PRIMARY KEY)", "CREATE TABLE other (id INT)",
                    f"CREATE DATABASE IF NOT EXISTS `{db}_x`", database=db)
    start = current_offset(conn)
    mariadb.execute("ALTER TABLE other ADD COLUMN v INT", f"CREATE TABLE `{db}_x`.t (id INT)",
                    "TRUNCATE TABLE other", "ALTER TABLE t ADD INDEX (id)", database=db)
    try:
        recs = _read(mariadb, db, start)
    finally:
        mariadb.execute(f"DROP DATABASE `{db}_x`")
    assert [(type(r), r.ddl) for r in recs] == [(SchemaChanged,
                                                 Ddl("ALTER TABLE t ADD INDEX (id)"))]


def test_a_drop_of_a_table_or_its_database_and_a_rename_are_typed_events(mariadb, db):
    """The statements that end a table under its name reach the stream as what became of
    it, read by the source (``ddl_events``, ``ddl.table_fate``): dropped, or renamed to the
    end of a chain."""
    from sparkcdc.mysql.ddl import table_fate

    x = f"{db}_x"
    mariadb.execute(f"CREATE DATABASE IF NOT EXISTS `{x}`", f"CREATE TABLE `{x}`.g (id INT)",
                    "CREATE TABLE a (id INT PRIMARY KEY)", "CREATE TABLE b (id INT PRIMARY KEY)",
                    database=db)
    start = current_offset(_conn(mariadb))
    mariadb.execute("RENAME TABLE a TO a1, a1 TO a2", "DROP TABLE IF EXISTS b, nothere",
                    f"DROP DATABASE `{x}`", database=db)
    conn = _conn(mariadb)
    schemas = {TableId(db, "a"): TableSchema(TableId(db, "a"), (Column("id", "int"),),
                                             ("id",), "id"),
               TableId(db, "b"): TableSchema(TableId(db, "b"), (Column("id", "int"),),
                                             ("id",), "id"),
               TableId(x, "g"): TableSchema(TableId(x, "g"), (Column("id", "int"),), (), "id")}
    recs = list(BinlogReader(conn, 7402, schemas, table_events=True).read_window(
        start, current_offset(conn)))
    assert [(type(r), r.table_id) for r in recs] == [
        (TableRenamed, TableId(db, "a")), (TableDropped, TableId(db, "b")),
        (TableDropped, TableId(x, "g"))], recs
    assert recs[0].to == TableId(db, "a2")
    assert table_fate("DROP TEMPORARY TABLE b", db, f"{db}.b") is None
    assert table_fate("ALTER TABLE b RENAME TO other.b", db, f"{db}.b") == ("renamed",
                                                                          "other.b")
    assert table_fate("ALTER TABLE b ADD COLUMN v INT", db, f"{db}.b") is None


def test_a_schema_fits_a_table_map_column_by_column(mariadb, db):
    """``fits`` against the maps the server writes: every change the decoder or the Arrow
    type depends on is seen, a longer VARCHAR is not a change."""
    conn = _conn(mariadb)
    create = ("CREATE TABLE t (id INT PRIMARY KEY, u INT UNSIGNED, d DECIMAL(5,1), "
              "ts DATETIME(3), b BINARY(4), v VARCHAR(5), e SET('a','b'))")
    for alter, fits in [("MODIFY v VARCHAR(50)", True), ("MODIFY u INT", False),
                        ("MODIFY d DECIMAL(6,1)", False), ("MODIFY ts DATETIME(6)", False),
                        ("MODIFY b BINARY(8)", False), ("MODIFY e SET('a','b','c')", False),
                        ("MODIFY v VARCHAR(5) CHARACTER SET latin1", False)]:
        mariadb.execute("DROP TABLE IF EXISTS t", create, database=db)
        old = load_table_schema(conn, TableId(db, "t"))
        start = current_offset(conn)
        mariadb.execute(f"ALTER TABLE t {alter}", "INSERT INTO t (id) VALUES (1)",
                        database=db)
        maps = _table_maps(conn, start, db)
        assert schema_at.fits(maps[0].columns, old) is fits, alter
        now = load_table_schema(conn, TableId(db, "t"))
        assert schema_at.fits(maps[0].columns, now), alter
        built = schema_at.resolve(maps[0].columns, now.table_id, [], lambda: None)
        assert schema_at.fits(maps[0].columns, built), (alter, built)


def _table_maps(conn, start, db):
    """The table maps of ``db.t`` after ``start``, from our own event layer."""
    from sparkcdc.mysql.binlog import protocol as E

    seen = []
    stream = E.DumpStream(conn.pymysql_kwargs(), 7409, start.file, start.pos,
                          blocking=False, heartbeat=None, read_timeout=30)
    stream.connect()
    try:
        for data, evs in stream.batches():
            for _ts, etype, _sid, _size, _pos, _flags, s, e in evs:
                if etype == E.TABLE_MAP:
                    csum = 4 if stream.checksum else 0
                    tm = E.parse_table_map(data[s + 19:e - csum])
                    if tm.key == (db, "t"):
                        seen.append(tm)
    finally:
        stream.close()
    return seen


def test_type_text_is_what_information_schema_would_parse_to():
    class M:
        def __init__(self, type_, **kw):
            self.type, self.name, self.unsigned = type_, "c", False
            self.character_set_name = None
            for k, v in kw.items():
                setattr(self, k, v)

    from sparkcdc.mysql import types as T

    cases = [(M(246, precision=12, decimals=4), "decimal(12,4)"),
             (M(8, unsigned=True), "bigint unsigned"), (M(18, fsp=3), "datetime(3)"),
             (M(16, bits=5), "bit(5)"), (M(247, enum_values=["", "a'b", "c"]), None),
             (M(15, max_length=40, character_set_name="utf8mb4"), "varchar(10)"),
             (M(254, max_length=4, character_set_name="binary"), "binary(4)"),
             (M(252, length_size=3, character_set_name="binary"), "mediumblob")]
    for m, text in cases:
        got = schema_at.type_text(m)
        if text is not None:
            assert got == text
        T.parse_column_type(got)  # every spelling parses
        assert schema_at.describes(m, Column("c", got, True, m.character_set_name
                                             if m.character_set_name != "binary" else None))
    assert T.parse_column_type(schema_at.type_text(cases[4][0])).members == ("a'b", "c")


def test_a_table_map_without_names_cannot_build_a_schema():
    class M:
        type, name, unsigned, character_set_name = 3, None, False, None

    from sparkcdc.errors import DecodeError

    with pytest.raises(DecodeError, match="binlog_row_metadata=FULL"):
        schema_at.resolve([M()], TableId("d", "t"), [], lambda: None)


# -- through a pipeline -------------------------------------------------------------------------

def _pipeline(mariadb, db, tmp_path, behavior="evolve", write_on="auto", sink=None):
    from sparkcdc.pipeline.definition import parse_pipeline

    source = source_yaml(mariadb, db + ".\\.*", 60)
    sink = sink or f"  type: delta\n  path: {tmp_path}/lake\n"
    text = f"""
{source}
sink:
{sink}pipeline:
  name: instream
  parallelism: 1
  checkpoint.location: {tmp_path}/ckpt
  schema.change.behavior: {behavior}
  write.on: {write_on}
"""
    return parse_pipeline(text, "p.yaml", env={"TEST_PW": mariadb.info.cdc_password})


def _target(tmp_path, db, table="t"):
    import deltalake

    return {r["id"]: r for r in read_delta(deltalake.DeltaTable(f"{tmp_path}/lake/{db}/{table}")).to_pylist()}


@pytest.mark.long
@pytest.mark.slow
@pytest.mark.parametrize("write_on", ["driver", "executors"])
def test_ddls_with_rows_between_them_stream_on_without_a_snapshot(spark, mariadb, db,
                                                                  tmp_path, write_on):
    """Before the stream carried schemas, rows between two DDLs of a table made it be
    taken again (target emptied, snapshot). Now the rows of each schema are applied with
    it, in one batch, and the table stays in the pipeline's stream. Written from the
    driver, and from Spark tasks (``write.on: executors``, as on a cluster), with a
    TRUNCATE in the same batch."""
    from sparkcdc.pipeline.commands.status import table_statuses
    from sparkcdc.pipeline.commands.verify import Verifier, render
    from sparkcdc.pipeline.run.loop import Runner

    mariadb.execute("CREATE TABLE t (id INT PRIMARY KEY, a INT, b VARCHAR(10))",
                    f"INSERT INTO t SELECT seq, seq, CONCAT('b', seq) FROM {seq(mariadb, 50)}",
                    database=db)
    defn = _pipeline(mariadb, db, tmp_path, write_on=write_on)
    Runner(defn, spark, until_caught_up=True).run()
    mariadb.execute("CREATE TABLE u (id INT PRIMARY KEY)", "INSERT INTO u VALUES (1), (2)",
                    database=db)
    Runner(defn, spark, until_caught_up=True).run()
    mariadb.execute("INSERT INTO u VALUES (3)", "TRUNCATE TABLE u", "INSERT INTO u VALUES (4)",
                    "UPDATE t SET a = 100 WHERE id = 1",
                    "ALTER TABLE t RENAME COLUMN a TO a2, ADD COLUMN c INT",
                    "UPDATE t SET a2 = 200, c = 8 WHERE id = 2",
                    "ALTER TABLE t DROP COLUMN b, MODIFY c BIGINT",
                    "INSERT INTO t VALUES (51, 510, 5000000000)", "DELETE FROM t WHERE id = 3",
                    database=db)
    Runner(defn, spark, until_caught_up=True).run()
    got = _target(tmp_path, db)
    assert {"id", "a2", "c"} <= set(got[1]) and not {"a", "b"} & set(got[1])
    assert (got[1]["a2"], got[2]["a2"], got[2]["c"], got[51]["c"]) == (100, 200, 8,
                                                                       5000000000)
    assert 3 not in got and len(got) == 50
    assert sorted(_target(tmp_path, db, "u")) == [4]  # emptied at the TRUNCATE
    st = {s.table: s for s in table_statuses(defn)}[f"{db}.t"]
    assert "taken again" not in st.note and st.generation == 0, st
    results = Verifier(defn, rechecks=1, catch_up_timeout=5).run()
    assert all(r.ok for r in results), render(results)


@pytest.mark.slow
def test_an_alter_no_row_follows_reaches_the_target(spark, mariadb, db, tmp_path):
    from sparkcdc.pipeline.run.loop import Runner

    mariadb.execute("CREATE TABLE t (id INT PRIMARY KEY, a INT)",
                    "INSERT INTO t VALUES (1, 1)", database=db)
    defn = _pipeline(mariadb, db, tmp_path)
    Runner(defn, spark, until_caught_up=True).run()
    mariadb.execute("ALTER TABLE t ADD COLUMN z VARCHAR(5)", database=db)
    Runner(defn, spark, until_caught_up=True).run()
    assert "z" in _target(tmp_path, db)[1]


@pytest.mark.long
@pytest.mark.slow
def test_a_column_added_with_a_default_is_filled_in_for_the_rows_the_table_held(
        spark, mariadb, db, tmp_path):
    """``ADD COLUMN`` with a default (or NOT NULL, or generated) gives every row the server
    held a value without a row event. The target gets those values too: the batch that
    carries the ALTER also upserts the table's current rows, after its own rows. A row
    changed in the same batch before and after the ALTER, one deleted, one inserted after
    it, and a column added without a default (left null) around it."""
    from sparkcdc.pipeline.commands.verify import Verifier, render
    from sparkcdc.pipeline.run.loop import Runner

    mariadb.execute("CREATE TABLE t (id INT PRIMARY KEY, a INT)",
                    f"INSERT INTO t SELECT seq, seq FROM {seq(mariadb, 40)}", database=db)
    defn = _pipeline(mariadb, db, tmp_path)
    Runner(defn, spark, until_caught_up=True).run()
    mariadb.execute("UPDATE t SET a = 100 WHERE id = 1", "DELETE FROM t WHERE id = 3",
                    "ALTER TABLE t ADD COLUMN d INT NOT NULL DEFAULT 7, "
                    "ADD COLUMN e VARCHAR(5) DEFAULT 'x', ADD COLUMN n INT, "
                    "ADD COLUMN z INT NOT NULL, ADD COLUMN g INT AS (a * 2) STORED",
                    "UPDATE t SET d = 9, n = 5 WHERE id = 2",
                    "INSERT INTO t (id, a, z) VALUES (41, 41, 3)", database=db)
    Runner(defn, spark, until_caught_up=True).run()
    got = _target(tmp_path, db)
    assert 3 not in got and len(got) == 40
    assert [(got[i]["d"], got[i]["e"], got[i]["n"], got[i]["z"], got[i]["g"])
            for i in (1, 2, 4, 41)] == [(7, "x", None, 0, 200), (9, "x", 5, 0, 4),
                                        (7, "x", None, 0, 8), (7, "x", None, 3, 82)]
    mariadb.execute("UPDATE t SET e = 'y' WHERE id = 4", database=db)  # streams on after it
    Runner(defn, spark, until_caught_up=True).run()
    assert _target(tmp_path, db)[4]["e"] == "y"
    results = Verifier(defn, rechecks=1, catch_up_timeout=5).run()
    assert all(r.ok for r in results), render(results)


@pytest.mark.long
@pytest.mark.slow
@pytest.mark.parametrize("kind", ["delta", pytest.param("postgres", marks=pytest.mark.faults)])
def test_a_new_primary_key_is_written_up_to_then_the_table_goes_on_by_it(spark, mariadb, db,
                                                                          tmp_path, kind,
                                                                          request):
    """A new primary key met in the stream: the rows before it are written by the old key,
    the loop changes the target's columns, and the table goes on from the change (under its
    next generation, joining from that offset), its changes applied by the new key. The
    target is not emptied and nothing is read again. On PostgreSQL the target's primary key
    follows the new key (before, ``ON CONFLICT (id, k)`` found no unique constraint to
    match and the batch failed)."""
    from sparkcdc.pipeline.commands.status import table_statuses
    from sparkcdc.pipeline.run.loop import Runner

    mariadb.execute("CREATE TABLE t (id INT PRIMARY KEY, k VARCHAR(3) NOT NULL, v INT)",
                    f"INSERT INTO t SELECT seq, CONCAT('k', seq), seq FROM {seq(mariadb, 20)}",
                    database=db)
    pg = request.getfixturevalue("pg_server") if kind == "postgres" else None
    sink = None
    if pg is not None:
        i = pg.info
        sink = (f"  type: postgres\n  host: {i.host}\n  port: {i.port}\n  user: {i.user}\n"
                f"  password: {i.password}\n  database: {i.database}\n")
    defn = _pipeline(mariadb, db, tmp_path, sink=sink)
    Runner(defn, spark, until_caught_up=True).run()
    mariadb.execute("UPDATE t SET v = -1 WHERE id = 1",
                    "ALTER TABLE t DROP PRIMARY KEY, ADD PRIMARY KEY (id, k), "
                    "ADD COLUMN w INT",
                    "UPDATE t SET v = -2, w = 2 WHERE id = 2", "INSERT INTO t VALUES (21, 'z', 21, 0)",
                    "DELETE FROM t WHERE id = 3", database=db)
    Runner(defn, spark, until_caught_up=True).run()
    if pg is None:
        got = _target(tmp_path, db)
    else:
        got = {r[0]: dict(zip(("id", "k", "v", "w"), r))
               for r in pg.execute(f'SELECT id, k, v, w FROM "{db}"."t"')}
    want = {r[0]: r for r in mariadb.query(f"SELECT id, k, v, w FROM `{db}`.t")}
    assert {i: (r["k"], r["v"], r["w"]) for i, r in got.items()} == {
        i: (r[1], r[2], r[3]) for i, r in want.items()}
    st = {s.table: s for s in table_statuses(defn)}[f"{db}.t"]
    assert st.generation == 1 and "primary key changed" in st.note, st
    assert "taken again" not in st.note


@pytest.mark.long
def test_a_batch_that_evolved_its_target_is_replayed_alike(spark, mariadb, db, tmp_path):
    """A micro-batch whose ALTER added a filled column, written to the target and then
    replayed because its commit was lost (a crash between the target's commit and Spark's):
    the replay starts from the schema the table had when the batch began, as the first
    attempt did, so it changes nothing twice (the target keeps the column and its values:
    the first attempt's rows are skipped by batch id). Before, the replay compared the
    batch's first rows with the schema the first attempt ended with, dropped the column,
    added it again empty, and skipped the rows that filled it."""
    from sparkcdc.pipeline.run.loop import Runner

    mariadb.execute("CREATE TABLE t (id INT PRIMARY KEY, a INT)",
                    f"INSERT INTO t SELECT seq, seq FROM {seq(mariadb, 40)}", database=db)
    defn = _pipeline(mariadb, db, tmp_path)
    Runner(defn, spark, until_caught_up=True).run()
    mariadb.execute("UPDATE t SET a = 100 WHERE id = 1",
                    "ALTER TABLE t ADD COLUMN d INT NOT NULL DEFAULT 7",
                    "UPDATE t SET d = 9 WHERE id = 2", database=db)
    lost = []

    def lose_the_commit(table, _rows, batch):  # after the target's commit, before Spark's
        if not lost:
            lost.append(batch)
            raise RuntimeError("the run died before Spark committed the batch")

    with pytest.raises(Exception, match="before Spark committed"):
        Runner(defn, spark, until_caught_up=True, on_batch=lose_the_commit).run()
    assert "d" in _target(tmp_path, db)[3]  # the first attempt wrote the batch
    Runner(defn, spark, until_caught_up=True).run()  # replays it
    got = _target(tmp_path, db)
    assert [(got[i]["a"], got[i]["d"]) for i in (1, 2, 3, 40)] == [(100, 7), (2, 9), (3, 7),
                                                                   (40, 7)]
