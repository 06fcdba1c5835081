"""The process's start-up objects kept out of Python's cyclic garbage collection.

Why: a binlog read makes a few objects the collector tracks for every row change (the
record, its offset, the row images' containers). CPython runs a collection every 700 such
allocations, and now and then a full one, which visits *every* tracked object the process
holds: in a Spark worker that is pyspark, pyarrow, numpy and the source's modules, hundreds
of thousands of objects that live as long as the process. Measured on a read of 73,000
changes (bench/mysql_reader.py's load, 2026-11-28): the collections took 0.12-0.14 s of a
read of 0.3-0.6 CPU-seconds on MySQL and MariaDB alike; with the start-up objects frozen,
0.03-0.06 s.

``gc.freeze()`` moves every object tracked now to a permanent generation that no collection
visits; objects made later are collected as before. So it is done once per process, once
it has imported what it runs (its modules and start-up state live as long as it does). A
process that forks its workers (the warm interpreter, pipeline/launch/warm_python.py)
freezes before it forks: the children then also leave those pages unwritten by the
collector, so they stay shared (Python's documentation of ``gc.freeze``).
"""

from __future__ import annotations

import gc
import os

_settled_in: int | None = None  # the process that froze (a forked child freezes again)


def settle() -> None:
    """Freeze what this process holds now, once per process (see the module's docstring).
    What is garbage among it (a cycle no one refers to) is then never freed: a first call
    made after imports, before the work, leaves little of that."""
    global _settled_in
    if _settled_in == os.getpid():
        return
    _settled_in = os.getpid()
    gc.freeze()


__all__ = ["settle"]
