"""Chunk planning: the pure algorithm with a fake probe, then the real thing on MariaDB.

The real-server tests check the property that matters, on the server itself: every row of
the table lies in exactly one chunk, as the reader's ``WHERE k >= s AND k < e`` decides it.
Discovery (which decides the chunk key) is tested here too.
"""

from __future__ import annotations

import bisect
import datetime as dt
import itertools
import json
import random
import re
from decimal import Decimal

import pytest
from server_support import is_mysql

from sparkcdc.core.chunking import (
    ChunkEnd,
    ChunkingOptions,
    ChunkPlanner,
    SnapshotSplit,
    decode_value,
    distribution_factor,
    encode_value,
    even_step,
    is_integral_column,
)
from sparkcdc.core.schema import Column, TableId, quote_ident
from sparkcdc.errors import ConfigError, OffsetError, SchemaError
from sparkcdc.mysql.chunk_probe import MySQLKeyProbe
from sparkcdc.mysql.connection import ConnectionOptions
from sparkcdc.mysql.discovery import discover, parse_chunk_key_option

T = TableId("db", "t")


# -- a fake probe over a Python list -----------------------------------------------------------


class FakeProbe:
    """Keys in memory; ``norm`` plays the collation (e.g. ``str.casefold``)."""

    def __init__(self, keys, row_count=None, norm=lambda k: k):
        self.norm = norm
        self.keys = sorted(keys, key=norm)
        self.approx = row_count
        self.calls: dict[str, int] = {}

    def _count(self, name):
        self.calls[name] = self.calls.get(name, 0) + 1

    def add(self, keys):
        self.keys = sorted(self.keys + list(keys), key=self.norm)

    def _first_at_or_after(self, start):
        if start is None:
            return 0
        return bisect.bisect_left([self.norm(k) for k in self.keys], self.norm(start))

    def min_max(self):
        self._count("min_max")
        return (self.keys[0], self.keys[-1]) if self.keys else None

    def row_count(self):
        self._count("row_count")
        return len(self.keys) if self.approx is None else self.approx

    def next_chunk_end(self, start, chunk_size):
        self._count("next_chunk_end")
        i = self._first_at_or_after(start) + chunk_size
        if i >= len(self.keys):
            return None
        k = self.keys[i]
        return ChunkEnd(k, start is None or self.norm(k) > self.norm(start))

    def next_key_after(self, value):
        self._count("next_key_after")
        return next((k for k in self.keys if self.norm(k) > self.norm(value)), None)

    def sample(self, after, every, limit):
        self._count("sample")
        i = self._first_at_or_after(after)
        out = []
        for j in range(1, limit + 1):
            if i + every * j >= len(self.keys):
                break
            k = self.keys[i + every * j]
            if (after is None or self.norm(k) > self.norm(after)) and (
                    not out or self.norm(k) > self.norm(out[-1])):
                out.append(k)
        return out


def plan(probe, *, integral=True, batch=1000, **opts) -> tuple[list[SnapshotSplit], ChunkPlanner]:
    planner = ChunkPlanner(T, integral_key=integral, options=ChunkingOptions(**opts))
    chunks = list(planner.plan_all(probe, batch))
    return chunks, planner


def check_partition(chunks, keys, norm=lambda k: k) -> list[int]:
    """Chunks tile the key space in order; returns the rows per chunk."""
    assert [c.index for c in chunks] == list(range(len(chunks)))
    assert chunks[0].start is None and chunks[-1].end is None
    for a, b in itertools.pairwise(chunks):
        assert a.end == b.start and a.end is not None
        if a.start is not None:
            assert norm(a.start) < norm(a.end)
    sizes = []
    for c in chunks:
        sizes.append(sum(1 for k in keys
                         if (c.start is None or norm(k) >= norm(c.start))
                         and (c.end is None or norm(k) < norm(c.end))))
    assert sum(sizes) == len(keys)
    return sizes


# -- the pure algorithm ------------------------------------------------------------------------


def test_even_keys_step_through_the_key_space_without_queries():
    keys = list(range(1, 10_001))
    probe = FakeProbe(keys)
    chunks, planner = plan(probe, chunk_size=1000)
    assert planner.strategy.startswith("even")
    assert [c.end for c in chunks[:-1]] == list(range(1001, 10_001, 1000))
    assert check_partition(chunks, keys) == [1000] * 10
    # per chunk no query: one look at the first chunk checks the estimate, and the
    # hand-over to the walk checks the tail once
    assert probe.calls == {"min_max": 1, "row_count": 1, "next_chunk_end": 2}


def test_a_stale_row_estimate_does_not_make_huge_chunks():
    # the server estimates 300 rows for a table of 10,000 (stale statistics after a load):
    # the factor says step 33,000, but the first chunk's end shows the real density
    keys = list(range(1, 10_001))
    chunks, planner = plan(FakeProbe(keys, row_count=300), chunk_size=1000)
    assert planner.strategy.startswith("walk")
    assert max(check_partition(chunks, keys)) <= 1000


def test_dense_start_sparse_tail_is_walked_not_stepped():
    # 12,000 dense keys then a few far away: arithmetic would cut thousands of empty chunks
    keys = list(range(1, 12_001)) + [7_000_000 + i for i in range(50)]
    probe = FakeProbe(keys)
    chunks, planner = plan(probe, chunk_size=1500)
    assert planner.strategy.startswith("walk")
    assert len(chunks) <= 10 and max(check_partition(chunks, keys)) <= 1500


def test_distribution_factor_scales_the_step():
    # keys 0, 2, ..., 19998: factor 19999/10000, so a step of ~2 * chunk_size holds
    # ~chunk_size rows
    keys = list(range(0, 20_000, 2))
    chunks, planner = plan(FakeProbe(keys), chunk_size=500)
    assert planner.step == 999 and planner.strategy.startswith("even (factor 2")
    sizes = check_partition(chunks, keys)
    assert set(sizes[:-1]) == {499, 500} and sizes[-1] <= 500
    assert distribution_factor(1, 100, 10) == 10
    assert distribution_factor(1, 100, 0) is None
    assert even_step(distribution_factor(1, 10, 1000), 50) == 1  # at least 1


def test_sparse_keys_walk_exact_chunks():
    keys = [i * 1_000_000 for i in range(1000)]
    probe = FakeProbe(keys)
    chunks, planner = plan(probe, chunk_size=100)
    assert planner.strategy == "walk"  # factor ~1e6 > 1000
    assert check_partition(chunks, keys) == [100] * 10
    assert probe.calls["next_chunk_end"] == 10  # one indexed query per chunk


def test_skewed_keys_walk():
    keys = list(range(1, 1001)) + list(range(10**12, 10**12 + 1000))
    chunks, planner = plan(FakeProbe(keys), chunk_size=300)
    assert planner.strategy == "walk"
    sizes = check_partition(chunks, keys)
    assert max(sizes) == 300 and len(chunks) == 7


def test_dense_duplicates_below_lower_bound_walk():
    # factor 10/10000 = 0.001 < 0.05: a non-unique chunk key with few distinct values
    keys = [i % 10 for i in range(10_000)]
    chunks, planner = plan(FakeProbe(keys), chunk_size=300)
    assert planner.strategy == "walk"
    sizes = check_partition(chunks, keys)
    assert all(s == 1000 for s in sizes)  # a run of equal keys is never split


@pytest.mark.parametrize("keys", [[], [42]], ids=["empty", "single-row"])
def test_empty_and_single_row_tables_are_one_chunk(keys):
    chunks, _ = plan(FakeProbe(keys), chunk_size=10)
    assert [(c.start, c.end) for c in chunks] == [(None, None)]


def test_min_equals_max_is_one_chunk():
    chunks, _ = plan(FakeProbe([7] * 5000), chunk_size=100)
    assert [(c.start, c.end) for c in chunks] == [(None, None)]


def test_huge_unsigned_keys():
    top = 2**64 - 1
    keys = list(range(top - 9999, top + 1))
    chunks, planner = plan(FakeProbe(keys), chunk_size=1000)
    assert planner.strategy.startswith("even")
    assert check_partition(chunks, keys) == [1000] * 10
    assert all(c.end is None or c.end > 2**63 for c in chunks)
    again = ChunkPlanner.from_dict(json.loads(json.dumps(planner.to_dict())))
    assert again.max_key == top


def test_decimal_integral_keys_stay_decimal():
    keys = [Decimal(i) for i in range(10**20, 10**20 + 5000)]
    chunks, planner = plan(FakeProbe(keys), chunk_size=1000)
    assert planner.strategy.startswith("even")
    assert all(isinstance(c.end, Decimal) for c in chunks[:-1])
    assert check_partition(chunks, keys) == [1000] * 5


def test_non_integral_keys_never_use_even_steps():
    keys = [i / 2 for i in range(1000)]
    chunks, planner = plan(FakeProbe(keys), integral=False, chunk_size=100)
    assert planner.strategy == "walk"
    assert check_partition(chunks, keys) == [100] * 10


def test_unknown_row_count_walks():
    keys = list(range(5000))
    chunks, planner = plan(FakeProbe(keys, row_count=0), chunk_size=1000)
    assert planner.strategy == "walk"
    assert check_partition(chunks, keys) == [1000] * 5


def test_collation_equal_strings_are_never_split_and_never_compared_in_python():
    norm = lambda s: s.casefold()
    words = [w for w in ("a", "A", "b", "B", "c") for _ in range(40)]
    chunks, _ = plan(FakeProbe(words, norm=norm), integral=False, chunk_size=30)
    sizes = check_partition(chunks, words, norm)
    assert sorted(s for s in sizes if s) == [40, 80, 80]


def test_large_uneven_tables_are_sampled_in_batches():
    keys = sorted(random.Random(1).sample(range(10**9), 20_000))
    probe = FakeProbe(keys)
    chunks, planner = plan(probe, chunk_size=100, sample_threshold=50, sample_batch=16)
    assert planner.strategy.startswith("sample")
    sizes = check_partition(chunks, keys)
    assert sizes == [100] * 200
    assert probe.calls["sample"] == 200 // 16 + 2  # the last batch is empty
    assert probe.calls["next_chunk_end"] == 1  # the tail


def _plan_in_steps(make_probe, steps, **opts):
    """Plan a few chunks at a time, through a JSON round trip of the state each time."""
    opts = ChunkingOptions(**opts)
    state = ChunkPlanner(T, integral_key=True, options=opts).to_dict()
    out, i = [], 0
    while True:
        planner = ChunkPlanner.from_dict(json.loads(json.dumps(state)), opts)
        if planner.done:
            return out
        out += planner.next_chunks(make_probe(), steps[i % len(steps)])
        i += 1
        state = planner.to_dict()


@pytest.mark.parametrize("keys,opts", [
    (list(range(1, 3001)), {}),
    ([i * 977 for i in range(3000)], {}),
    (sorted(random.Random(2).sample(range(10**6), 3000)), {"sample_threshold": 5}),
], ids=["even", "walk", "sample"])
def test_resume_from_state_gives_the_same_chunks(keys, opts):
    whole, _ = plan(FakeProbe(keys), chunk_size=100, **opts)
    resumed = _plan_in_steps(lambda: FakeProbe(keys), [1, 3, 2, 7], chunk_size=100, **opts)
    assert resumed == whole


def test_first_chunks_come_before_the_table_is_planned():
    probe = FakeProbe([i * 5000 for i in range(10_000)])  # sparse: walked
    planner = ChunkPlanner(T, integral_key=True, options=ChunkingOptions(chunk_size=100))
    first = planner.next_chunks(probe, 2)
    assert [c.index for c in first] == [0, 1] and not planner.done
    assert probe.calls["next_chunk_end"] == 2


def test_the_open_last_chunk_is_cut_again_when_the_table_grew():
    """Rows inserted past the max after planning began are cut into bounded chunks."""
    keys = list(range(1, 2001))
    probe = FakeProbe(keys)
    planner = ChunkPlanner(T, integral_key=True, options=ChunkingOptions(chunk_size=200))
    early = planner.next_chunks(probe, 5)
    probe.add(range(2001, 50_001))  # a write-heavy table, auto-increment keys
    chunks = early + list(planner.plan_all(probe, 4))
    sizes = check_partition(chunks, probe.keys)
    assert max(sizes) == 200 and len(chunks) == 250


def test_split_json_round_trip_of_every_boundary_type():
    values = [None, 0, -5, 2**64 - 1, Decimal("12345678901234567890.000"), Decimal("-1.5"),
              1.25, -0.0, "", "Ünïcödé `q` 'x'", b"\x00\xff", bytearray(b"ab"),
              dt.date(2024, 2, 29), dt.datetime(2024, 2, 29, 23, 59, 59, 999999),
              dt.timedelta(hours=-838, minutes=-59), dt.time(1, 2, 3)]
    for v in values:
        s = SnapshotSplit(TableId("d.b", "t`x"), 7, v, v)
        again = SnapshotSplit.from_json(s.to_json())
        assert again == s and type(again.start) is (bytes if isinstance(v, bytearray)
                                                    else type(v))
        assert decode_value(encode_value(v)) == v
    s = SnapshotSplit(T, 7, 1, None)
    assert s.split_id == "db.t:chunk-7" and s.is_last and not s.is_first
    assert json.loads(s.to_json())["start"] == {"int": "1"}
    with pytest.raises(SchemaError, match="chunk key"):
        encode_value(object())
    with pytest.raises(OffsetError):
        SnapshotSplit.from_json('{"database": "d", "table": "t", "index": 0, '
                                '"start": {"nope": 1}, "end": null}')


def test_options():
    o = ChunkingOptions.from_options({"scan.incremental.snapshot.chunk.size": "100",
                                      "chunk-key.even-distribution.factor.upper-bound": "10",
                                      "unrelated": "x"})
    assert (o.chunk_size, o.factor_upper, o.factor_lower) == (100, 10.0, 0.05)
    with pytest.raises(ConfigError, match="scan.incremental.snapshot.chunk.size"):
        ChunkingOptions.from_options({"scan.incremental.snapshot.chunk.size": "big"})
    with pytest.raises(ConfigError, match="at least 1"):
        ChunkingOptions(chunk_size=0)
    with pytest.raises(ConfigError, match="lower-bound"):
        ChunkingOptions(factor_lower=5, factor_upper=1)
    with pytest.raises(OffsetError, match="planner state"):
        ChunkPlanner.from_dict({"database": "d"})


@pytest.mark.parametrize("ctype,expected", [
    ("int(11)", True), ("bigint(20) unsigned", True), ("tinyint(4)", True),
    ("decimal(20,0)", True), ("decimal(10,2)", False), ("decimal(10)", True),
    ("varchar(10)", False), ("double", False), ("datetime", False),
])
def test_integral_columns(ctype, expected):
    assert is_integral_column(Column("k", ctype)) is expected


def test_parse_chunk_key_option():
    assert parse_chunk_key_option("shop.orders:order_id; shop.logs_\\d+ : id ;") == [
        ("shop.orders", "order_id"), ("shop.logs_\\d+", "id")]
    assert parse_chunk_key_option("id") == [(".*", "id")]
    assert parse_chunk_key_option("db.(?:a|b):`we``ird`") == [("db.(?:a|b)", "we`ird")]
    assert parse_chunk_key_option(None) == []
    with pytest.raises(ConfigError, match="scan.incremental.snapshot.chunk.key-column"):
        parse_chunk_key_option("db.t:")
    with pytest.raises(ConfigError, match="regular expression"):
        parse_chunk_key_option("db.(t:id")


# -- the real server ---------------------------------------------------------------------------


def cdc(mariadb) -> ConnectionOptions:
    i = mariadb.info
    return ConnectionOptions(hostname=i.host, port=i.port, username=i.cdc_user,
                             password=i.cdc_password)


def schema_of(mariadb, db, table, chunk_key=None):
    keys = {f"{re.escape(db)}\\.{re.escape(table)}": chunk_key} if chunk_key else None
    return discover(cdc(mariadb), re.escape(db), re.escape(table), chunk_key_columns=keys)[
        TableId(db, table)]


def plan_on_server(mariadb, db, table, *, chunk_key=None, batch=1000, probe_kw=None, **opts):
    schema = schema_of(mariadb, db, table, chunk_key)
    planner = ChunkPlanner(schema.table_id,
                           integral_key=is_integral_column(schema.column(schema.chunk_key)),
                           options=ChunkingOptions(**opts))
    with MySQLKeyProbe.open(cdc(mariadb), schema) as probe:
        for k, v in (probe_kw or {}).items():
            setattr(probe, k, v)
        chunks = list(planner.plan_all(probe, batch))
    return chunks, planner, schema


def chunk_condition(key: str, c: SnapshotSplit) -> tuple[str, list]:
    k = quote_ident(key)
    if c.start is None and c.end is None:
        return "TRUE", []
    if c.start is None:
        return f"({k} < %s OR {k} IS NULL)", [c.end]
    if c.end is None:
        return f"({k} >= %s)", [c.start]
    return f"({k} >= %s AND {k} < %s)", [c.start, c.end]


def server_sizes(mariadb, db, table, key, chunks) -> list[int]:
    """Rows per chunk, decided by the server; asserts each row is in exactly one chunk."""
    t = f"{quote_ident(db)}.{quote_ident(table)}"
    conds, args = zip(*(chunk_condition(key, c) for c in chunks))
    flat = [a for group in args for a in group]
    hits = " + ".join(f"({c})" for c in conds)
    lo, hi, total = mariadb.query(f"SELECT MIN({hits}), MAX({hits}), COUNT(*) FROM {t}",
                                  flat + flat)[0]
    if total:
        assert (lo, hi) == (1, 1), "a row is in no chunk or in two"
    sizes = [mariadb.query(f"SELECT COUNT(*) FROM {t} WHERE {c}", a)[0][0]
             for c, a in zip(conds, args)]
    assert sum(sizes) == total
    return sizes


def fill(mariadb, db, table, values, columns="id", chunk=2000):
    marks = ",".join(["%s"] * len(columns.split(",")))
    with mariadb.admin_connection(db) as conn, conn.cursor() as cur:
        for i in range(0, len(values), chunk):
            cur.executemany(f"INSERT INTO {quote_ident(table)} ({columns}) VALUES ({marks})",
                            values[i:i + chunk])


def analyze(mariadb, db, table):
    """Refresh InnoDB's row estimate, as a DBA (the CDC user may not)."""
    mariadb.query(f"ANALYZE TABLE {quote_ident(db)}.{quote_ident(table)}")


def test_server_int_keys_even(mariadb, db):
    mariadb.execute("CREATE TABLE t (id INT PRIMARY KEY, v INT)", database=db)
    fill(mariadb, db, "t", [(i,) for i in range(1, 5001)])
    analyze(mariadb, db, "t")
    chunks, planner, _ = plan_on_server(mariadb, db, "t", chunk_size=500)
    assert planner.strategy.startswith("even")
    sizes = server_sizes(mariadb, db, "t", "id", chunks)
    assert max(sizes) <= 750 and len(chunks) >= 7  # the estimate is approximate


def test_server_sparse_int_keys(mariadb, db):
    mariadb.execute("CREATE TABLE t (id BIGINT PRIMARY KEY)", database=db)
    fill(mariadb, db, "t", [(i * 1_000_000,) for i in range(3000)])
    analyze(mariadb, db, "t")
    chunks, planner, _ = plan_on_server(mariadb, db, "t", chunk_size=250)
    assert planner.strategy == "walk"
    assert server_sizes(mariadb, db, "t", "id", chunks) == [250] * 12


def test_server_skewed_keys(mariadb, db):
    mariadb.execute("CREATE TABLE t (id BIGINT PRIMARY KEY)", database=db)
    fill(mariadb, db, "t", [(i,) for i in range(1, 2001)]
         + [(10**12 + i,) for i in range(2000)])
    analyze(mariadb, db, "t")
    chunks, planner, _ = plan_on_server(mariadb, db, "t", chunk_size=300)
    assert planner.strategy == "walk"
    sizes = server_sizes(mariadb, db, "t", "id", chunks)
    assert max(sizes) == 300 and sum(sizes) == 4000


def _mixed_words(n, seed):
    rng = random.Random(seed)
    letters = "aAáÁäÄbBeEéÉèoOöÖøØzZßß "
    return ["".join(rng.choice(letters) for _ in range(rng.randint(1, 4))) + rng.choice("xX")
            for _ in range(n)]


def test_server_string_keys_follow_the_collation(mariadb, db):
    mariadb.execute("CREATE TABLE t (k VARCHAR(20) COLLATE utf8mb4_general_ci PRIMARY KEY)",
                    database=db)
    with mariadb.admin_connection(db) as conn, conn.cursor() as cur:
        cur.executemany("INSERT IGNORE INTO t VALUES (%s)", [(w,) for w in _mixed_words(6000, 3)])
    total = mariadb.query(f"SELECT COUNT(*) FROM `{db}`.t")[0][0]
    chunks, _, schema = plan_on_server(mariadb, db, "t", chunk_size=200)
    assert schema.column("k").collation == "utf8mb4_general_ci"
    sizes = server_sizes(mariadb, db, "t", "k", chunks)
    assert sum(sizes) == total and max(sizes) <= 200


def test_server_collation_equal_runs_longer_than_a_chunk(mariadb, db):
    """No primary key; the chunk key holds 'a', 'A', 'á'... runs the collation calls equal."""
    mariadb.execute("CREATE TABLE t (name VARCHAR(10) COLLATE utf8mb4_general_ci, v INT, "
                    "KEY (name))", database=db)
    rng = random.Random(4)
    fill(mariadb, db, "t", [(rng.choice("aAáÀbBcCçÇ"), i) for i in range(3000)]
         + [(None, i) for i in range(50)], columns="name,v")
    chunks, _, schema = plan_on_server(mariadb, db, "t", chunk_key="name", chunk_size=100)
    assert schema.primary_key == () and schema.chunk_key == "name"
    sizes = server_sizes(mariadb, db, "t", "name", chunks)
    runs = [n for n, in mariadb.query(f"SELECT COUNT(*) FROM `{db}`.t WHERE name IS NOT NULL "
                                      "GROUP BY name ORDER BY name")]
    assert len(runs) == 3 and max(runs) > 100  # 'a', 'b', 'c' by the collation
    # NULL keys belong to the first chunk; each run is one chunk, never split
    assert sizes[0] in (50, 50 + runs[0])
    assert [s for s in sizes[1:] if s] == runs[1:] if sizes[0] > 50 else runs


def test_server_composite_primary_key_is_cut_on_its_first_column(mariadb, db):
    mariadb.execute("CREATE TABLE t (a INT, b INT, v INT, PRIMARY KEY (a, b))", database=db)
    fill(mariadb, db, "t", [(a, b) for a in range(1, 51) for b in range(100)], columns="a,b")
    chunks, _, schema = plan_on_server(mariadb, db, "t", chunk_size=250)
    assert schema.primary_key == ("a", "b") and schema.chunk_key == "a"
    sizes = server_sizes(mariadb, db, "t", "a", chunks)
    assert sum(sizes) == 5000 and max(sizes) <= 300


def test_server_table_without_primary_key_uses_the_configured_chunk_key(mariadb, db):
    mariadb.execute("CREATE TABLE t (code CHAR(8) NOT NULL, v INT, UNIQUE KEY (code))",
                    database=db)
    fill(mariadb, db, "t", [(f"c{i:07d}", i) for i in range(1000)], columns="code,v")
    chunks, _, _ = plan_on_server(mariadb, db, "t", chunk_key="CODE", chunk_size=128)
    assert server_sizes(mariadb, db, "t", "code", chunks) == [128] * 7 + [104]


@pytest.mark.parametrize("rows", [0, 1], ids=["empty", "single-row"])
def test_server_empty_and_single_row(mariadb, db, rows):
    mariadb.execute("CREATE TABLE t (id INT PRIMARY KEY)", database=db)
    fill(mariadb, db, "t", [(i,) for i in range(rows)])
    chunks, _, _ = plan_on_server(mariadb, db, "t", chunk_size=10)
    assert [(c.start, c.end) for c in chunks] == [(None, None)]
    assert server_sizes(mariadb, db, "t", "id", chunks) == [rows]


def test_server_huge_unsigned_and_decimal_keys(mariadb, db):
    top = 2**64 - 1
    mariadb.execute("CREATE TABLE u (id BIGINT UNSIGNED PRIMARY KEY)",
                    "CREATE TABLE d (id DECIMAL(30,0) PRIMARY KEY)", database=db)
    fill(mariadb, db, "u", [(top - i,) for i in range(3000)])
    fill(mariadb, db, "d", [(10**25 + 3 * i,) for i in range(3000)])
    for table in ("u", "d"):
        analyze(mariadb, db, table)
        chunks, planner, _ = plan_on_server(mariadb, db, table, chunk_size=400)
        assert planner.strategy.startswith("even"), planner.strategy
        sizes = server_sizes(mariadb, db, table, "id", chunks)
        assert sum(sizes) == 3000 and max(sizes) <= 600
    assert isinstance(chunks[1].start, Decimal)


def test_server_growing_last_chunk_stays_bounded(mariadb, db):
    mariadb.execute("CREATE TABLE t (id BIGINT AUTO_INCREMENT PRIMARY KEY, v INT)",
                    database=db)
    fill(mariadb, db, "t", [(i,) for i in range(2000)], columns="v")
    analyze(mariadb, db, "t")
    schema = schema_of(mariadb, db, "t")
    planner = ChunkPlanner(schema.table_id, integral_key=True,
                           options=ChunkingOptions(chunk_size=200))
    with MySQLKeyProbe.open(cdc(mariadb), schema) as probe:
        chunks = planner.next_chunks(probe, 3)
        fill(mariadb, db, "t", [(i,) for i in range(20_000)], columns="v")  # past the max
        state = json.loads(json.dumps(planner.to_dict()))  # and a restart, for good measure
        planner = ChunkPlanner.from_dict(state, planner.options)
        chunks += list(planner.plan_all(probe, 5))
    sizes = server_sizes(mariadb, db, "t", "id", chunks)
    assert sum(sizes) == 22_000
    assert max(sizes) <= 300, sizes  # Flink's plan would end with [~2000, null): 20,000 rows


@pytest.mark.parametrize("window", [None, False], ids=["window-functions", "walk-fallback"])
def test_server_sampling(mariadb, db, window):
    mariadb.execute("CREATE TABLE t (k VARCHAR(12) COLLATE utf8mb4_general_ci PRIMARY KEY)",
                    database=db)
    with mariadb.admin_connection(db) as conn, conn.cursor() as cur:
        cur.executemany("INSERT IGNORE INTO t VALUES (%s)",
                        [(w,) for w in _mixed_words(8000, 5)])
    analyze(mariadb, db, "t")
    total = mariadb.query(f"SELECT COUNT(*) FROM `{db}`.t")[0][0]
    chunks, planner, _ = plan_on_server(mariadb, db, "t", chunk_size=150, sample_threshold=1,
                                        sample_batch=8, probe_kw={"window_functions": window})
    assert planner.strategy.startswith("sample")
    sizes = server_sizes(mariadb, db, "t", "k", chunks)
    assert sum(sizes) == total and set(sizes[:-1]) == {150} and sizes[-1] <= 150


def test_server_weird_identifiers(mariadb, db):
    table, key = "wé`ird tåble 表", "kéy `col` 键"
    mariadb.execute(f"CREATE TABLE {quote_ident(table)} ({quote_ident(key)} INT PRIMARY KEY, "
                    f"`ö v` TEXT)", database=db)
    fill(mariadb, db, table, [(i * 7,) for i in range(500)], columns=quote_ident(key))
    chunks, _, schema = plan_on_server(mariadb, db, table, chunk_size=64)
    assert schema.chunk_key == key and schema.column_names == [key, "ö v"]
    assert sum(server_sizes(mariadb, db, table, key, chunks)) == 500


# -- discovery ---------------------------------------------------------------------------------


@pytest.fixture
def shop(mariadb, db):
    mariadb.execute(
        "CREATE TABLE orders (id BIGINT UNSIGNED NOT NULL, region CHAR(2) NOT NULL, "
        "note VARCHAR(50) CHARACTER SET latin1 COLLATE latin1_swedish_ci NULL, "
        "total DECIMAL(12,2), PRIMARY KEY (region, id))",
        "CREATE TABLE orders_2024 (id INT PRIMARY KEY)",
        "CREATE TABLE users (uid INT PRIMARY KEY, name VARCHAR(20))",
        "CREATE TABLE logs (msg TEXT, code INT, UNIQUE KEY (code))",
        "CREATE VIEW v_orders AS SELECT id FROM orders",
        database=db)
    return db


def test_discover_columns_and_keys(mariadb, shop):
    got = discover(cdc(mariadb), re.escape(shop), "orders.*")
    assert list(got) == [TableId(shop, "orders"), TableId(shop, "orders_2024")]
    s = got[TableId(shop, "orders")]
    assert s.primary_key == ("region", "id") and s.chunk_key == "region"
    # information_schema's own text: MySQL 8.0.19+ prints integers without a display width
    bigint = "bigint unsigned" if is_mysql(mariadb) else "bigint(20) unsigned"
    assert [(c.name, c.column_type, c.nullable) for c in s.columns] == [
        ("id", bigint, False), ("region", "char(2)", False),
        ("note", "varchar(50)", True), ("total", "decimal(12,2)", True)]
    note = s.column("note")
    assert (note.charset, note.collation) == ("latin1", "latin1_swedish_ci")
    assert s.column("id").charset is None


def test_discover_regex_semantics(mariadb, shop):
    conn = cdc(mariadb)
    q = re.escape(shop)
    # table-name matches 'db.table' or the bare name, always in full
    assert set(discover(conn, q, f"{q}\\.users")) == {TableId(shop, "users")}
    assert set(discover(conn, q, "users")) == {TableId(shop, "users")}
    with pytest.raises(SchemaError):
        discover(conn, q, "order")  # not a full match of anything
    # views are not captured; exclude drops by 'db.table'
    got = discover(conn, q, "(orders.*|users|v_orders)", exclude=f"{q}\\.orders_\\d+")
    assert set(got) == {TableId(shop, "orders"), TableId(shop, "users")}
    # the database regex is a full match too, and system schemas never appear
    assert all(t.database == shop for t in discover(conn, "t_.*", "users"))
    with pytest.raises(SchemaError):
        discover(conn, "mysql|information_schema", ".*")


def test_discover_table_without_primary_key_names_the_option(mariadb, shop):
    with pytest.raises(SchemaError) as e:
        discover(cdc(mariadb), re.escape(shop), "logs")
    err = e.value
    assert f"table {shop}.logs has no primary key" in err.message
    assert "scan.incremental.snapshot.chunk.key-column" in err.fix
    assert f"'{shop}.logs:code'" in err.fix  # the unique index's column is suggested
    got = discover(cdc(mariadb), re.escape(shop), "logs",
                   chunk_key_columns=dict(parse_chunk_key_option(f"{re.escape(shop)}.logs:code")))
    assert got[TableId(shop, "logs")].chunk_key == "code"


def test_a_table_dropped_while_the_tables_are_read_is_left_out(mariadb, shop):
    """information_schema is read in several statements: a table dropped between the
    columns and the indexes looks keyless. It is left out (the next look sees it gone),
    not refused as a table without a primary key; a keyless table that exists still is."""
    mariadb.execute("CREATE TABLE doomed (id INT PRIMARY KEY, v INT)", database=shop)
    dropped = []

    class DropsAfterColumns(ConnectionOptions):
        def connect(self, database=None, **extra):
            real = super().connect(database, **extra)
            cursor = real.cursor

            def wrapped_cursor(*a, **kw):
                cur = cursor(*a, **kw)
                execute = cur.execute

                def run(sql, args=None):
                    out = execute(sql, args)
                    if "information_schema.COLUMNS" in sql and not dropped:
                        mariadb.execute("DROP TABLE doomed", database=shop)
                        dropped.append(True)
                    return out
                cur.execute = run
                return cur
            real.cursor = wrapped_cursor
            return real

    base = cdc(mariadb)
    racing = DropsAfterColumns(hostname=base.hostname, port=base.port,
                               username=base.username, password=base.password)
    got = discover(racing, re.escape(shop), "users|doomed")
    assert dropped, "the table was not dropped in the middle of the read"
    assert set(got) == {TableId(shop, "users")}
    with pytest.raises(SchemaError, match="no primary key"):
        discover(racing, re.escape(shop), "users|logs")


def test_discover_configured_chunk_key(mariadb, shop):
    q = re.escape(shop)
    keys = dict(parse_chunk_key_option(f"{q}\\.orders:id;.*:uid"))
    got = discover(cdc(mariadb), q, "orders|users", chunk_key_columns=keys)
    assert got[TableId(shop, "orders")].chunk_key == "id"
    assert got[TableId(shop, "users")].chunk_key == "uid"
    with pytest.raises(SchemaError) as e:
        discover(cdc(mariadb), q, "users", chunk_key_columns={".*": "nope"})
    assert "'nope'" in e.value.message and "uid, name" in e.value.message
    assert "scan.incremental.snapshot.chunk.key-column" in e.value.fix


def test_discover_nothing_matched_lists_what_is_visible(mariadb, shop):
    with pytest.raises(SchemaError) as e:
        discover(cdc(mariadb), re.escape(shop), "ordres")
    msg = e.value.message
    assert "'ordres'" in msg and f"{shop}: " in msg
    assert "orders" in msg and "v_orders (view)" in msg
    assert "grant SELECT" in e.value.fix
    with pytest.raises(ConfigError, match="table-name"):
        discover(cdc(mariadb), ".*", "orders(")
