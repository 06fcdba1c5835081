"""Watermark normalization and the stream filter, as pure functions (docs/algorithm.md)."""

from __future__ import annotations

import pyarrow as pa

from sparkcdc.core.normalize import apply_patch, apply_patch_rows, compute_patch
from sparkcdc.core.offsets import BinlogOffset
from sparkcdc.core.records import ChangeRecord
from sparkcdc.core.schema import Column, TableId, TableSchema
from sparkcdc.core.stream_filter import FinishedSplit, StreamFilter, TableProgress, python_locate

T = TableId("db", "t")
OTHER = TableId("db", "other")
SCHEMA = TableSchema(T, (Column("id", "int(11)", False), Column("v", "varchar(10)")), ("id",), "id")


def off(pos: int, events: int = 0, rows: int = 0) -> BinlogOffset:
    return BinlogOffset("binlog.000001", pos, events, rows)


def ins(pos, id, v, t=T):
    return ChangeRecord("c", t, None, {"id": id, "v": v}, off(pos), 0)


def upd(pos, before, after, t=T):
    return ChangeRecord("u", t, {"id": before[0], "v": before[1]}, {"id": after[0], "v": after[1]},
                        off(pos), 0)


def dele(pos, id, v, t=T):
    return ChangeRecord("d", t, {"id": id, "v": v}, None, off(pos), 0)


def in_range(lo, hi):
    return lambda values: [v is not None and lo <= v < hi for v in values]


def test_patch_replays_window_in_order():
    snapshot = [{"id": 1, "v": "a"}, {"id": 2, "v": "b"}, {"id": 3, "v": "c"}]
    events = [
        upd(10, (1, "a"), (1, "a2")),     # update in range
        dele(20, 2, "b"),                 # delete in range
        ins(30, 4, "d"),                  # insert in range
        ins(40, 50, "x"),                 # insert out of range: ignored
        upd(50, (3, "c"), (60, "c")),     # key moves out of the chunk: row leaves
        upd(60, (70, "z"), (5, "z")),     # key moves into the chunk: row arrives
        ins(70, 2, "b2"),                 # re-insert of a deleted key
        ins(80, 9, "o", t=OTHER),         # other table: ignored
    ]
    patch = compute_patch(events, SCHEMA, in_range(0, 10))
    rows = apply_patch_rows(snapshot, patch, SCHEMA)
    assert sorted(rows, key=lambda r: r["id"]) == [
        {"id": 1, "v": "a2"}, {"id": 2, "v": "b2"}, {"id": 4, "v": "d"}, {"id": 5, "v": "z"}]
    assert patch.events_applied == 6


def test_patch_on_arrow_matches_rows():
    snapshot = [{"id": i, "v": str(i)} for i in range(10)]
    events = [dele(1, 3, "3"), upd(2, (4, "4"), (4, "four")), ins(3, 11, "11"), ins(4, 5, "x")]
    patch = compute_patch(events, SCHEMA, in_range(0, 20))
    table = pa.Table.from_pylist(snapshot, schema=pa.schema([("id", pa.int32()), ("v", pa.string())]))
    out = apply_patch(table, patch, SCHEMA)
    assert sorted(out.to_pylist(), key=lambda r: r["id"]) == sorted(
        apply_patch_rows(snapshot, patch, SCHEMA), key=lambda r: r["id"])
    assert out.num_rows == 10


def test_empty_window_returns_the_same_table():
    table = pa.table({"id": pa.array([1], pa.int32()), "v": ["a"]})
    patch = compute_patch([], SCHEMA, in_range(0, 10))
    assert apply_patch(table, patch, SCHEMA) is table


def splits_example():
    # the stream filter (docs/algorithm.md): [1,100] HW 1000, [101,200] HW 800, [201,300] HW 1500
    return [FinishedSplit(T, None, 101, off(1000)), FinishedSplit(T, 101, 201, off(800)),
            FinishedSplit(T, 201, None, off(1500))]


def test_filter_follows_the_algorithm_example():
    f = StreamFilter({T: TableProgress(SCHEMA, splits_example(), complete=True)}, python_locate)
    recs = [ins(1500, 123, "x"), ins(1200, 250, "y"), ins(900, 150, "z"), ins(700, 150, "w"),
            ins(1600, 50, "fast"), ins(999, 50, "old"), ins(1000, 50, "at-hw"),
            ins(2000, 1, "o", t=OTHER)]
    assert [v.after for v in f.judge(recs)] == [True, False, True, False, True, False, True, False]


def test_filter_drops_keys_of_chunks_not_yet_read():
    prog = TableProgress(SCHEMA, [FinishedSplit(T, None, 100, off(500))], complete=False)
    f = StreamFilter({T: prog}, python_locate)
    v = f.judge([ins(600, 50, "in"), ins(600, 150, "later chunk"), ins(400, 50, "before hw")])
    assert [x.after for x in v] == [True, False, False]


def test_filter_judges_each_image_of_a_key_moving_update():
    # key 150 (chunk HW 800) moves to 250 (chunk HW 1500), at 1200: the old chunk needs the
    # delete, the new chunk already holds the row.
    f = StreamFilter({T: TableProgress(SCHEMA, splits_example(), complete=True)}, python_locate)
    (v,) = f.judge([upd(1200, (150, "a"), (250, "a"))])
    assert (v.before, v.after) == (True, False)
    (v,) = f.judge([upd(1200, (250, "a"), (150, "a"))])
    assert (v.before, v.after) == (False, True)


def test_null_chunk_keys_belong_to_the_first_chunk():
    splits = splits_example()
    assert python_locate(SCHEMA, splits, [None, 100, 101, 10**9]) == [0, 0, 1, 2]


def test_offsets_order_and_json_round_trip():
    a = BinlogOffset("binlog.000009", 100)
    b = BinlogOffset("binlog.000010", 4)
    c = BinlogOffset("binlog.000010", 4, events=1)
    d = BinlogOffset("binlog.000010", 4, events=1, rows=3, gtid="0-1-42")
    assert a < b < c < d
    for o in (a, b, c, d):
        assert BinlogOffset.from_json(o.to_json()) == o
        assert BinlogOffset.from_json(o.to_json()).gtid == o.gtid
    assert d.to_json() == ('{"file":"binlog.000010","pos":4,"events":1,"rows":3,'
                           '"gtid":"0-1-42","flavor":"mariadb"}')


def test_rollback_takes_a_chunk_back_to_the_low_watermark():
    from sparkcdc.core.normalize import compute_rollback

    at_lw = [{"id": 1, "v": "a"}, {"id": 2, "v": "b"}, {"id": 3, "v": "c"}, {"id": 4, "v": "d"}]
    events = [
        upd(10, (1, "a"), (1, "a2")),     # then updated again: LW state is the first before
        upd(11, (1, "a2"), (1, "a3")),
        dele(20, 2, "b"),                 # deleted after LW: back in
        ins(30, 5, "e"),                  # inserted after LW: out
        upd(40, (3, "c"), (60, "c")),     # moved out of the chunk after LW: back in
        upd(50, (70, "z"), (6, "z")),     # moved into the chunk after LW: out
        dele(60, 5, "e"),                 # inserted and deleted after LW: still out
        ins(70, 2, "b2"),                 # re-inserted: LW state is still the first event's
    ]
    # the select may have seen any state between LW and HW; e.g. this one:
    selected = [{"id": 1, "v": "a2"}, {"id": 4, "v": "d"}, {"id": 5, "v": "e"}, {"id": 6, "v": "z"}]
    patch = compute_rollback(events, SCHEMA, in_range(0, 10))
    rows = apply_patch_rows(selected, patch, SCHEMA)
    assert sorted(rows, key=lambda r: r["id"]) == at_lw


class _WindowDialect:
    """``read_window`` over a list of records (the binlog of a test)."""

    def __init__(self, records):
        self.records = records
        self.reads = 0

    def read_window(self, schema, start, end):
        self.reads += 1
        return [r for r in self.records if start <= r.offset < end
                and (schema is None or r.table_id == schema.table_id)]


def test_one_rollback_log_rolls_every_chunk_back_exactly():
    """Chunks rolled back through one shared, growing window (RollbackLog) come out as
    they were at ``as_of``, whatever the log's end beyond the chunk's high watermark; with
    the end at HW the patch is ``compute_rollback``'s. Also when the chunk key is not the
    row key (an update moves a row between chunks)."""
    import random

    from sparkcdc.core.normalize import compute_rollback
    from sparkcdc.core.watermark import RollbackLog

    moved = TableSchema(T, (Column("id", "int(11)", False), Column("g", "int(11)"),
                            Column("v", "varchar(10)")), ("id",), "g")
    rnd = random.Random(11)

    def state_at(initial, records, pos):
        st = {k: dict(v) for k, v in initial.items()}
        for r in records:
            if r.offset >= off(pos):
                break
            if r.table_id != T:
                continue
            if r.before is not None:
                del st[r.before["id"]]
            if r.after is not None:
                st[r.after["id"]] = r.after
        return st

    def key(rows):
        return sorted(rows, key=lambda r: r["id"])

    for schema in (SCHEMA, moved):
        ck = schema.chunk_key
        for _trial in range(25):
            initial = {i: {"id": i, "g": rnd.randrange(40), "v": "0"} for i in range(40)}
            state = {k: dict(v) for k, v in initial.items()}
            other: set = set()
            records = []
            for pos in range(1, 400):
                k = rnd.randrange(60)
                if rnd.random() < 0.1:  # another table's changes in the same binlog
                    if k not in other:
                        other.add(k)
                        records.append(ChangeRecord("c", OTHER, None, {"id": k}, off(pos), 0))
                    continue
                new = {"id": k, "g": rnd.randrange(40), "v": str(pos)}
                if k not in state:
                    state[k] = new
                    records.append(ChangeRecord("c", T, None, new, off(pos), 0))
                elif rnd.random() < 0.2:
                    records.append(ChangeRecord("d", T, state.pop(k), None, off(pos), 0))
                else:
                    k2 = rnd.randrange(60) if rnd.random() < 0.3 else k
                    if k2 != k and k2 in state:
                        continue
                    new["id"] = k2
                    records.append(ChangeRecord("u", T, state.pop(k), new, off(pos), 0))
                    state[k2] = new
            a = rnd.randrange(1, 50)
            as_of = off(a)
            d = _WindowDialect(records)
            log = RollbackLog(d, as_of, {T: schema, OTHER: SCHEMA})
            highs = sorted(rnd.randrange(a, 420) for _ in range(6))
            for n, high in enumerate(highs):
                lo = rnd.randrange(0, 40)
                hi = lo + rnd.randrange(1, 15)
                chunk = in_range(lo, hi)
                select_at = rnd.randrange(a, high + 1)  # the select ran inside [as_of, HW]
                selected = [r for r in state_at(initial, records, select_at).values()
                            if lo <= r[ck] < hi]
                expect = [r for r in state_at(initial, records, a).values() if lo <= r[ck] < hi]
                beyond = rnd.random() < 0.3
                if beyond:  # the log already reaches past this chunk's HW
                    log.advance(off(highs[-1] + rnd.randrange(0, 30)))
                log.advance(off(high))
                got = log.patch(schema, chunk)
                assert key(apply_patch_rows(selected, got, schema)) == key(expect), (ck, n)
                if log.end == off(high):
                    want = compute_rollback(d.read_window(schema, as_of, off(high)), schema,
                                            chunk)
                    assert got.final == want.final, (ck, n)
            assert log.reads <= len(highs)


def test_chunks_selected_side_by_side_share_one_read_and_come_back_exact():
    """``read_splits_as_of``: chunks selected concurrently (a thread pool's ``map``), each at
    its own moment after ``as_of``, then one high watermark after the last select: the
    binlog after ``as_of`` is read once for them all, and each chunk comes back as it was
    at ``as_of`` (docs/spark-source.md, "One rollback read per batch")."""
    import random
    from concurrent.futures import ThreadPoolExecutor

    from sparkcdc.core.watermark import RollbackLog, SplitRead, read_splits_as_of

    rnd = random.Random(5)
    for _trial in range(20):
        state = {i: {"id": i, "v": "0"} for i in range(60)}
        history = [(0, {k: dict(v) for k, v in state.items()})]  # (pos, state after it)
        records = []
        for pos in range(1, 300):
            k = rnd.randrange(80)
            if k in state and rnd.random() < 0.2:
                records.append(dele(pos, k, state.pop(k)["v"]))
            elif k in state:
                records.append(upd(pos, (k, state[k]["v"]), (k, str(pos))))
                state[k] = {"id": k, "v": str(pos)}
            else:
                state[k] = {"id": k, "v": str(pos)}
                records.append(ins(pos, k, str(pos)))
            history.append((pos, {kk: dict(vv) for kk, vv in state.items()}))
        a = rnd.randrange(1, 100)
        d = _SelectingDialect(records, history, a, rnd)
        bounds = sorted(rnd.sample(range(1, 80), 5))
        splits = [SplitRead(SCHEMA, f"t:chunk-{i}", lo, hi)
                  for i, (lo, hi) in enumerate(zip([0, *bounds], [*bounds, 80]))]
        log = RollbackLog(d, off(a), {T: SCHEMA})
        with ThreadPoolExecutor(3) as pool:
            got = read_splits_as_of(d, splits, off(a), log, select_all=pool.map)
        at_as_of = history[a - 1][1]  # the state after every change before ``a``
        for s, r in zip(splits, got):
            want = sorted((x for x in at_as_of.values() if s.start <= x["id"] < s.end),
                          key=lambda x: x["id"])
            assert sorted(r.rows.to_pylist(), key=lambda x: x["id"]) == want, s.split_id
        assert d.reads <= 1  # one read of the binlog, whatever the number of chunks


class _SelectingDialect(_WindowDialect):
    """Each select sees the table a little later than the one before (the binlog's position
    moves on between them); the high watermark is the position after the last select."""

    ARROW = pa.schema([("id", pa.int32()), ("v", pa.string())])

    def __init__(self, records, history, start, rnd):
        import threading

        super().__init__(records)
        self.history, self.rnd = history, rnd
        self.clock = start
        self.lock = threading.Lock()

    def read_chunk(self, schema, start, end):
        with self.lock:
            self.clock = min(self.clock + self.rnd.randrange(0, 40), len(self.history) - 1)
            now = self.clock
        seen = self.history[now][1]  # the state after every change before ``now``
        return pa.Table.from_pylist([r for r in seen.values() if start <= r["id"] < end],
                                    schema=self.ARROW)

    def current_offset(self):
        return off(self.clock + 1)

    def in_chunk(self, schema, start, end, values):
        return in_range(start, end)(values)
