"""Where a Spark task's CPU goes, by stage, without a profiler's weight: with
``SPARKCDC_TASK_CPU_DIR`` set, each task's stage (a binlog window's read, a chunk's read, the
batch's first stage, the route, the slice writes) writes one JSON line there: the CPU its
own code took (the process's CPU time inside the stage's iterator, which pulls its input
from Spark: a Python worker runs one task at a time, and a chunk read's select threads are
its own), the CPU from the stage's start to its end (Spark's writing of its output between
the iterator's steps included), its batches and rows.

Why not cProfile (``SPARKCDC_PROFILE_DIR``): a profiler doubles the cost of Python code and
leaves compiled code as it is, so it misstates what a stage costs beside another;
``time.process_time`` costs nothing per row. ``bench/pipeline.py --task-cpu`` sums the
lines per stage beside the process tree's CPU."""

from __future__ import annotations

import json
import os
import time
import uuid
from collections.abc import Iterator
from typing import Any

TASK_CPU_ENV = "SPARKCDC_TASK_CPU_DIR"


def accounted(it: Iterator[Any], stage: str) -> Iterator[Any]:
    """``it`` as it is, its CPU written down per ``stage`` when ``TASK_CPU_ENV`` names a
    folder (else ``it`` itself)."""
    folder = os.environ.get(TASK_CPU_ENV)
    if not folder:
        return it
    return _accounted(it, stage, folder)


def _accounted(it: Iterator[Any], stage: str, folder: str) -> Iterator[Any]:
    own = 0.0
    batches = rows = 0
    first = time.process_time()
    try:
        while True:
            t0 = time.process_time()
            try:
                item = next(it)
            except StopIteration:
                return
            finally:
                own += time.process_time() - t0
            batches += 1
            rows += getattr(item, "num_rows", 0) or 0
            yield item
    finally:
        line = {"stage": stage, "own_cpu_s": round(own, 6),
                "task_cpu_s": round(time.process_time() - first, 6), "batches": batches,
                "rows": rows, "pid": os.getpid()}
        os.makedirs(folder, exist_ok=True)
        with open(os.path.join(folder, f"{stage}-{os.getpid()}-{uuid.uuid4().hex[:8]}.json"),
                  "w") as f:
            f.write(json.dumps(line) + "\n")
