"""A batch's key slices dealt to its write tasks (``task_changes.task_count``, ``task_of``,
``slices_of``): every slice has exactly one task, the route and the task agree on it, and
a thousand small tables' slices share a task per core instead of a task each."""

from __future__ import annotations

import random

from sparkcdc.pipeline.run.task_changes import SliceJob, slices_of, task_count, task_of
from sparkcdc.pipeline.run.task_files import TargetWrite
from sparkcdc.sinks.base import KeySlices


def jobs_of(counts: list[int]) -> list[SliceJob]:
    out, first = [], 0
    for n, count in enumerate(counts):
        write = TargetWrite(target=f"t{n}", app_id=f"app{n}", batch_id=1, creation=())
        out.append(SliceJob(f"db.t{n}", write, KeySlices.hashed("id", count), first))
        first += count
    return out


def test_each_slice_has_one_task_and_the_route_agrees():
    rng = random.Random(7)
    for _ in range(200):
        jobs = jobs_of([rng.randint(1, 6) for _ in range(rng.randint(1, 40))])
        tasks = task_count(jobs, at_least=rng.randint(1, 8))
        owners: dict[tuple[int, int], int] = {}
        for t in range(tasks):
            for i, s in slices_of(jobs, t, tasks):
                assert (i, s) not in owners, "a slice with two writers"
                owners[i, s] = t
        every = {(i, s) for i, j in enumerate(jobs) for s in range(j.slices.count)}
        assert set(owners) == every, "a slice nobody writes"
        for (i, s), t in owners.items():  # where Router.pieces sends the slice's pieces
            assert task_of(jobs[i].first + s, tasks) == t


def test_how_many_tasks():
    # a thousand one-slice tables on two cores: two tasks, not a thousand
    assert task_count(jobs_of([1] * 1000), at_least=2) == 2
    # a table cut in 8 slices keeps them side by side, however few the cores
    assert task_count(jobs_of([8, 1, 1]), at_least=2) == 8
    # never more tasks than slices
    assert task_count(jobs_of([1]), at_least=16) == 1
    big = jobs_of([2, 1, 1, 1])
    tasks = task_count(big, at_least=2)
    assert {task_of(big[0].first + s, tasks) for s in range(2)} == {0, 1}, \
        "a table's two slices in one task"
