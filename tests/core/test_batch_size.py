"""The snapshot's batch sizing (core/batch_size.py): grows while batches are quick, shrinks
when one is slow, never leaves [floor, ceiling], and a user's cap is a ceiling."""

from sparkcdc.core.batch_size import MAX_ROWS, BatchSizer


def test_grows_while_batches_are_quick_up_to_the_ceiling():
    s = BatchSizer.for_chunks(readers=4, chunk_size=8096, max_rows=None)
    assert s.next(0.0) == 4
    now, seen = 0.0, []
    for _ in range(10):
        n = s.next(now)
        seen.append(n)
        s.admitted(n, now)
        now += 1.0  # each batch takes a second
    assert seen[:5] == [4, 8, 16, 32, 49]
    assert max(seen) == MAX_ROWS // 8096


def test_a_slow_batch_halves_the_next_and_a_wait_alone_does_not():
    s = BatchSizer(floor=2, ceiling=64, target_seconds=4.0)
    s._n = 32
    s.admitted(32, 0.0)
    assert s.next(10.0) == 32   # 10 s: waiting for a trigger, perhaps; not a reason
    s.admitted(32, 10.0)
    assert s.next(30.0) == 16   # 20 s: slow
    s.admitted(16, 30.0)
    assert s.next(100.0) == 8
    s.admitted(0, 100.0)        # nothing admitted: nothing measured
    assert s.next(1000.0) == 8


def test_a_users_cap_is_the_ceiling():
    s = BatchSizer.for_chunks(readers=4, chunk_size=1000, max_rows=2500)
    now = 0.0
    for _ in range(5):
        n = s.next(now)
        s.admitted(n, now)
        now += 0.1
    assert (s.floor, s.ceiling, n) == (2, 2, 2)
