"""How many snapshot chunks the next micro-batch admits.

Every micro-batch pays a fixed cost whatever its size: Spark plans and schedules it, the
tasks start, the sink opens a commit. With a fixed number of chunks per batch (one per
parallel reader) a large table pays that cost thousands of times, and the pipeline ran at a
tenth of its source's pace. So the batch grows while batches finish quickly and shrinks when
one is slow, between a floor (one chunk per reader: every reader busy) and a ceiling (what
the driver may hold of one batch; a user's ``maxRowsPerBatch`` lowers it).

The pace is read from the wall clock between two plannings of a batch, which is the last
batch's duration plus any wait for the trigger. Waiting says nothing about the batch's
cost, so only a batch well beyond the target shrinks the next one; a fast one doubles it.
The admitted chunks are written into the batch's offset, so a re-run after a crash reads
the same chunks whatever this object decided; its state is only a guess about speed.
"""

from __future__ import annotations

from dataclasses import dataclass

TARGET_SECONDS = 4.0  # about this long per batch: the fixed cost stays a small share
MAX_ROWS = 400_000  # the default ceiling: the driver collects a batch's planned rows


@dataclass
class BatchSizer:
    floor: int
    ceiling: int
    target_seconds: float = TARGET_SECONDS
    _n: int = 0
    _since: float | None = None

    def __post_init__(self):
        self.floor = max(1, self.floor)
        self.ceiling = max(self.floor, self.ceiling)
        self._n = self.floor

    @classmethod
    def for_chunks(cls, readers: int, chunk_size: int, max_rows: int | None) -> BatchSizer:
        """``readers`` parallel chunk readers; ``max_rows`` a user's cap on rows per batch."""
        cap = max_rows if max_rows else MAX_ROWS
        return cls(floor=min(readers, max(1, cap // chunk_size)),
                   ceiling=max(1, cap // chunk_size))

    def next(self, now: float) -> int:
        """The chunks to admit for a batch planned at ``now`` (monotonic seconds)."""
        if self._since is not None:
            took = now - self._since
            if took < self.target_seconds:
                self._n = min(self.ceiling, self._n * 2)
            elif took > 3 * self.target_seconds:
                self._n = max(self.floor, self._n // 2)
        return self._n

    def admitted(self, chunks: int, now: float) -> None:
        """A batch admitting ``chunks`` was planned at ``now``; none: nothing to measure."""
        self._since = now if chunks else None
