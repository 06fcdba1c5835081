"""What a batch's Spark tasks share (its tables' plans), pickled once on the driver and
unpickled once per Python process.

Why: Spark sends a task's function, with everything it closes over, with every task, and
unpickles it there. A batch over 1,000 tables holds plans for each of them (schemas, Arrow
schemas, targets: megabytes), and its stage of key slices ran a task per slice, a thousand
or more (now one per core, ``task_changes.task_count``): each unpickled every table's
plans, so the batch's cost grew with the square of its tables (a 1,000-table first run into Delta took 250-300 s where it took 38 s
before the tasks wrote; docs/benchmarks.md). Closed over as bytes, the plans cost a task
one copy; the first task in a process unpickles them, the next ones find them here.
"""

from __future__ import annotations

import pickle
import threading
import uuid
from typing import Any, Generic, TypeVar

T = TypeVar("T")

_KEEP = 4  # the latest batches' values a process keeps (a batch's stages share one)
_CACHE: dict[str, Any] = {}
_LOCK = threading.Lock()


class Shipped(Generic[T]):
    """``value`` as tasks receive it: its pickle and a token naming it. ``get`` gives the
    value (on the driver the object itself; in a task, unpickled once per process)."""

    def __init__(self, value: T):
        self.token = uuid.uuid4().hex
        self.data = pickle.dumps(value, protocol=pickle.HIGHEST_PROTOCOL)
        self._value: T | None = value

    def __getstate__(self) -> dict[str, Any]:
        return {"token": self.token, "data": self.data}  # the bytes, not the value again

    def __setstate__(self, state: dict[str, Any]) -> None:
        self.token, self.data, self._value = state["token"], state["data"], None

    def get(self) -> T:
        if self._value is not None:
            return self._value
        with _LOCK:
            got = _CACHE.get(self.token)
            if got is None:
                got = pickle.loads(self.data)
                while len(_CACHE) >= _KEEP:
                    _CACHE.pop(next(iter(_CACHE)))
                _CACHE[self.token] = got
        self._value = got
        return got
