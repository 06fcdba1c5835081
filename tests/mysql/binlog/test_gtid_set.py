"""The MySQL GTID set the binlog reader grows in place (``binlog/gtid_set.py``): the same
text as python-mysql-replication's ``GtidSet + Gtid`` (what the reader used before), for
random sets and GTIDs; tagged GTIDs (MySQL 8.3+); bad text refused."""

from __future__ import annotations

import random
import uuid

import pytest
from pymysqlreplication.gtid import Gtid as LibGtid
from pymysqlreplication.gtid import GtidSet as LibGtidSet

from sparkcdc.mysql.binlog.gtid_set import GtidSet

A = "3e11fa47-71ca-11e1-9e33-c80aa9429562"
B = "8f0c5a2e-0b1d-11ee-9a1b-0242ac120002"


def test_the_next_gtid_extends_the_last_interval():
    s = GtidSet(f"{A}:1-5")
    assert s.add(f"{A}:6") and str(s) == f"{A}:1-6"
    assert not s.add(f"{A}:3") and str(s) == f"{A}:1-6"
    assert s.add(f"{A}:9") and str(s) == f"{A}:1-6:9"
    assert s.add(f"{A}:8") and str(s) == f"{A}:1-6:8-9"
    assert s.add(f"{A}:7") and str(s) == f"{A}:1-9"
    assert s.add(f"{B}:1") and str(s) == f"{A}:1-9,{B}:1"
    assert f"{A}:7" in s and f"{B}:2" not in s


def test_server_text_with_newlines_and_several_sources():
    s = GtidSet(f"{A}:1-5:7-9,\n{B}:1-3")
    assert str(s) == f"{A}:1-5:7-9,{B}:1-3"
    s.add(f"{A}:6")
    assert str(s) == f"{A}:1-9,{B}:1-3"
    assert str(GtidSet("")) == "" and str(GtidSet(None)) == ""
    empty = GtidSet("")
    empty.add(f"{B}:4")
    assert str(empty) == f"{B}:4"


def test_tagged_gtids():
    s = GtidSet(f"{A}:1-5:blue:1-2,{B}:1")
    assert str(s) == f"{A}:1-5:blue:1-2,{B}:1"
    s.add(f"{A}:blue:3")
    s.add(f"{A}:6")
    s.add(f"{A}:amber:1")
    assert str(s) == f"{A}:1-6:amber:1:blue:1-3,{B}:1"
    assert f"{A}:blue:2" in s and f"{A}:amber:2" not in s


@pytest.mark.parametrize("bad", ["nonsense", f"{A}:1-x", "0-1-5"])
def test_bad_text_is_refused(bad):
    with pytest.raises(ValueError):
        GtidSet(bad)


def test_random_sets_and_gtids_read_as_the_library_writes_them():
    rng = random.Random(33)
    sids = [str(uuid.UUID(int=rng.getrandbits(128))) for _ in range(3)]
    for _ in range(200):
        members = []
        for sid in rng.sample(sids, rng.randint(1, 3)):
            n, legs = 1, []
            for _ in range(rng.randint(1, 4)):
                lo = n + rng.randint(0, 3)
                hi = lo + rng.randint(0, 5)
                legs.append(f"{lo}-{hi}" if hi != lo else str(lo))
                n = hi + 2
            members.append(f"{sid}:{':'.join(legs)}")
        text = ",".join(members)
        mine, theirs = GtidSet(text), text
        nxt = {sid: 1 for sid in sids}
        for _ in range(60):
            sid = rng.choice(sids)
            if rng.random() < 0.5:  # the next GTID of a source, mostly (the fast path)
                got = [int(x) for m in str(mine).split(",") if m.startswith(sid)
                       for leg in m.split(":")[1:] for x in leg.split("-")]
                nxt[sid] = max(got, default=0) + 1
                g = f"{sid}:{nxt[sid]}"
            else:
                g = f"{sid}:{rng.randint(1, 40)}"
            added = mine.add(g)
            try:
                theirs = str(LibGtidSet(theirs) + LibGtid(g))
            except Exception:  # noqa: BLE001 - the library refuses a GTID the set holds
                assert not added, (text, g)
            assert str(mine) == theirs, (text, g)


def test_a_gtid_added_by_its_number_equals_one_added_as_text():
    """``add_next(sid, n)`` (the reader's: the GTID event's source and number) leaves the
    set as ``add("sid:n")`` does, on the fast path and off it."""
    rng = random.Random(34)
    sids = [str(uuid.UUID(int=rng.getrandbits(128))) for _ in range(3)]
    for _ in range(100):
        text = ",".join(f"{sid}:1-{rng.randint(1, 9)}" for sid in rng.sample(sids, 2))
        by_text, by_number = GtidSet(text), GtidSet(text)
        for _ in range(40):
            sid = rng.choice(sids)
            got = [int(x) for m in str(by_text).split(",") if m.startswith(sid)
                   for leg in m.split(":")[1:] for x in leg.split("-")]
            n = max(got, default=0) + 1 if rng.random() < 0.7 else rng.randint(1, 30)
            assert by_number.add_next(sid + ":", n) == by_text.add(f"{sid}:{n}")
            assert str(by_number) == str(by_text), (text, sid, n)


def test_numbers_added_outside_python_equal_numbers_added_here():
    """``fast_next`` and ``extend_fast``, the compiled loop's way to grow the set (it builds
    the text from the pieces, then tells the set once): the same set as ``add_next``."""
    for start in (f"{A}:1-5:7-9,{B}:1-3", f"{A}:1-5:7,{B}:1-3:tag:1-2", f"{B}:1,{A}:4"):
        ref, out = GtidSet(start), GtidSet(start)
        ref.add(f"{A}:10")
        out.add(f"{A}:10")  # a slow add first: the fast path is set up by it
        sid, last, head, tail = out.fast_next()
        assert (sid, last) == (f"{A}:", 10)
        for n in range(11, 15):
            ref.add_next(sid, n)
        out.extend_fast(14, f"{head}14{tail}")
        assert str(out) == str(ref)
        ref.add(f"{B}:9")  # and the set goes on from there alike
        out.add(f"{B}:9")
        assert str(out) == str(ref) and f"{A}:12" in out
    with pytest.raises(ValueError, match="extend_fast"):
        out.extend_fast(1, "")
    assert GtidSet(f"{A}:1-3").fast_next() is None  # no GTID added yet
