"""Cutting a table into snapshot chunks (docs/algorithm.md, "Cutting a table into chunks"), with no database in sight.

The planner decides *where* to cut; a ``KeyProbe`` (the dialect's, or a fake in tests)
answers the few questions that need the data: min/max, an approximate row count, "which key
lies ``n`` rows past this one", "which key follows this one", and "every ``n``-th key after
this one". Keys that are not integers are never compared in Python: the server's collation
decides (``"a" == "A"`` under ``utf8mb4_general_ci``), so the probe reports equality itself.

Strategies, chosen once per table when planning starts:

* ``even``: integral keys whose distribution factor ``(max - min + 1) / row_count`` lies
  within the bounds step through the key space, ``step = max(1, int(factor * chunk_size))``
  (Flink CDC's "dynamic chunk size"). No query per chunk.
* ``sample``: large uneven tables (estimated chunks above ``sample_threshold``) take every
  ``chunk_size``-th key in batches, one query per ``sample_batch`` boundaries.
* ``walk``: everything else: one indexed query per chunk.

The open-ended last chunk ``[x, null)`` is never planned ahead. Flink CDC plans it with the
rest, so rows inserted past the max after planning all land in it, and on a write-heavy
table (auto-increment keys grow exactly there) it can outgrow a reader's memory. Here every
strategy ends by handing over to the walk at its last boundary, and the walk emits
``[x, null)`` only when, *at that moment*, fewer than ``chunk_size`` rows lie at or past
``x``; otherwise it keeps cutting bounded chunks. Since the planner is lazy (callers ask for
the next few chunks when they are about to read them), the open chunk holds at most
``chunk_size`` rows plus what is inserted between planning it and reading it.

Chunks are half-open ``[start, end)``; ``None`` is unbounded. The first chunk, with
``start = None``, also owns the rows whose key is NULL (possible only for a configured,
nullable chunk key): readers select it with ``k < end OR k IS NULL``.
"""

from __future__ import annotations

import base64
import datetime as dt
import json
import logging
import math
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from decimal import Decimal
from fractions import Fraction
from typing import Any, NamedTuple, Protocol

from sparkcdc.core.schema import Column, TableId
from sparkcdc.errors import ConfigError, OffsetError, SchemaError

log = logging.getLogger(__name__)

# -- boundary values ---------------------------------------------------------------------------


def encode_value(v: Any) -> Any:
    """A chunk boundary as JSON, tagged with its type so it decodes to the same Python value
    (Spark checkpoints hold only JSON; ints are strings so no JSON reader rounds them)."""
    if v is None:
        return None
    if isinstance(v, bool):  # a bool is an int in Python; MySQL has no boolean keys
        return {"int": str(int(v))}
    if isinstance(v, int):
        return {"int": str(v)}
    if isinstance(v, Decimal):
        return {"decimal": str(v)}
    if isinstance(v, float):
        return {"float": repr(v)}
    if isinstance(v, str):
        return {"str": v}
    if isinstance(v, (bytes, bytearray)):
        return {"bytes": base64.b64encode(bytes(v)).decode("ascii")}
    if isinstance(v, dt.datetime):  # before date: a datetime is a date
        return {"datetime": v.isoformat()}
    if isinstance(v, dt.date):
        return {"date": v.isoformat()}
    if isinstance(v, dt.timedelta):  # MySQL TIME, as pymysql returns it
        return {"timedelta_us": str((v.days * 86400 + v.seconds) * 1_000_000 + v.microseconds)}
    if isinstance(v, dt.time):
        return {"time": v.isoformat()}
    raise SchemaError(
        f"a chunk boundary of type {type(v).__name__} ({v!r}) cannot be stored in a checkpoint",
        fix="choose a chunk key of a numeric, string, binary or date/time type with the "
            "option scan.incremental.snapshot.chunk.key-column")


_DECODERS: dict[str, Callable[[Any], Any]] = {
    "int": int,
    "decimal": Decimal,
    "float": float,
    "str": str,
    "bytes": lambda s: base64.b64decode(s.encode("ascii")),
    "datetime": dt.datetime.fromisoformat,
    "date": dt.date.fromisoformat,
    "timedelta_us": lambda s: dt.timedelta(microseconds=int(s)),
    "time": dt.time.fromisoformat,
}


def decode_value(d: Any) -> Any:
    if d is None:
        return None
    try:
        (tag, raw), = d.items()
        return _DECODERS[tag](raw)
    except (AttributeError, ValueError, KeyError, TypeError) as e:
        raise OffsetError(f"malformed chunk boundary {d!r} in a checkpoint: {e!r}",
                          fix="the checkpoint was written by another version or edited; "
                              "start the query with a new checkpoint location") from None


# -- splits ------------------------------------------------------------------------------------


@dataclass(frozen=True)
class SnapshotSplit:
    """One chunk ``[start, end)`` of one table; ``None`` bounds are unbounded. ``where``: a
    condition on the chunk's rows (SQL, the operator's), for a table read again in part
    while it streams (``SplitAssigner.reconcile``'s rereads)."""

    table_id: TableId
    index: int
    start: Any = None
    end: Any = None
    where: str | None = None

    @property
    def split_id(self) -> str:
        return f"{self.table_id}:chunk-{self.index}"

    @property
    def is_first(self) -> bool:
        return self.start is None

    @property
    def is_last(self) -> bool:
        return self.end is None

    def to_dict(self) -> dict[str, Any]:
        d = {"database": self.table_id.database, "table": self.table_id.table,
             "index": self.index, "start": encode_value(self.start),
             "end": encode_value(self.end)}
        if self.where is not None:  # (only then: offsets are compared as JSON text)
            d["where"] = self.where
        return d

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> SnapshotSplit:
        try:
            return cls(TableId(d["database"], d["table"]), int(d["index"]),
                       decode_value(d["start"]), decode_value(d["end"]), d.get("where"))
        except (KeyError, TypeError, ValueError) as e:
            raise OffsetError(f"malformed snapshot split {d!r}: {e!r}") from None

    def to_json(self) -> str:
        return json.dumps(self.to_dict(), separators=(",", ":"), ensure_ascii=False)

    @classmethod
    def from_json(cls, s: str) -> SnapshotSplit:
        try:
            return cls.from_dict(json.loads(s))
        except json.JSONDecodeError as e:
            raise OffsetError(f"malformed snapshot split JSON {s!r}: {e}") from None

    def __str__(self) -> str:
        lo = "-inf" if self.start is None else repr(self.start)
        hi = "+inf" if self.end is None else repr(self.end)
        return f"{self.split_id} [{lo}, {hi})"


# -- options -----------------------------------------------------------------------------------

CHUNK_SIZE = "scan.incremental.snapshot.chunk.size"
FACTOR_LOWER = "chunk-key.even-distribution.factor.lower-bound"
FACTOR_UPPER = "chunk-key.even-distribution.factor.upper-bound"
SAMPLE_THRESHOLD = "sample-sharding.threshold"
SAMPLE_BATCH = "sample-sharding.batch-size"


@dataclass(frozen=True)
class ChunkingOptions:
    """Planner knobs; names and defaults follow Flink CDC (SeaTunnel for the sampling ones)."""

    chunk_size: int = 8096
    factor_lower: float = 0.05
    factor_upper: float = 1000.0
    sample_threshold: int = 1000  # estimated chunks above which uneven keys are sampled
    sample_batch: int = 16  # boundaries fetched per sampling query

    def __post_init__(self):
        if self.chunk_size < 1:
            raise ConfigError(f"{CHUNK_SIZE} must be at least 1, got {self.chunk_size}",
                              fix=f"set {CHUNK_SIZE} to a positive row count, e.g. 8096")
        if not 0 <= self.factor_lower <= self.factor_upper:
            raise ConfigError(
                f"{FACTOR_LOWER} ({self.factor_lower}) must be >= 0 and <= {FACTOR_UPPER} "
                f"({self.factor_upper})", fix="the defaults are 0.05 and 1000.0")
        if self.sample_threshold < 0 or self.sample_batch < 1:
            raise ConfigError(
                f"{SAMPLE_THRESHOLD} must be >= 0 and {SAMPLE_BATCH} >= 1",
                fix="the defaults are 1000 and 16")

    @classmethod
    def from_options(cls, options: dict[str, str]) -> ChunkingOptions:
        """Read the planner's keys from Flink-style string options; other keys are ignored."""
        fields = {CHUNK_SIZE: ("chunk_size", int), FACTOR_LOWER: ("factor_lower", float),
                  FACTOR_UPPER: ("factor_upper", float),
                  SAMPLE_THRESHOLD: ("sample_threshold", int),
                  SAMPLE_BATCH: ("sample_batch", int)}
        kw: dict[str, Any] = {}
        for key, (name, conv) in fields.items():
            if key in options:
                try:
                    kw[name] = conv(str(options[key]).strip())
                except ValueError:
                    raise ConfigError(f"option {key} = {options[key]!r} is not a valid "
                                      f"{conv.__name__}",
                                      fix=f"set {key} to a number") from None
        return cls(**kw)


# -- the probe ---------------------------------------------------------------------------------


class ChunkEnd(NamedTuple):
    key: Any
    after_start: bool  # False: the key equals start (by the server's comparison)


class KeyProbe(Protocol):
    """The questions about one table's chunk key that need the data. Keys are compared by
    the database, so implementations answer from the server, never from Python."""

    def min_max(self) -> tuple[Any, Any] | None:
        """``(MIN(k), MAX(k))`` over non-NULL keys; ``None`` when there are none."""

    def row_count(self) -> int:
        """Approximate number of rows; 0 when unknown."""

    def next_chunk_end(self, start: Any, chunk_size: int) -> ChunkEnd | None:
        """The key ``chunk_size`` rows past the first key ``>= start`` (``None`` start: from
        the smallest key), or ``None`` when fewer rows remain."""

    def next_key_after(self, value: Any) -> Any | None:
        """The smallest key ``> value``, or ``None``."""

    def sample(self, after: Any, every: int, limit: int) -> list[Any]:
        """Keys ``every``, ``2*every``, ... rows past the first key ``>= after`` (at most
        ``limit``), strictly after ``after``, ascending and distinct by the server."""


_INTEGRAL_TYPES = {"tinyint", "smallint", "mediumint", "int", "integer", "bigint"}


def is_integral_column(column: Column) -> bool:
    """True for integer columns and DECIMAL(p, 0): keys the even strategy can step through."""
    t = column.data_type
    if t in _INTEGRAL_TYPES:
        return True
    if t in ("decimal", "numeric"):
        inside = column.column_type.partition("(")[2].partition(")")[0]
        parts = [p.strip() for p in inside.split(",")] if inside else []
        return len(parts) < 2 or parts[1] == "0"
    return False


def distribution_factor(min_key: int, max_key: int, row_count: int) -> Fraction | None:
    """``(max - min + 1) / row_count``, exact; ``None`` (infinite) when the count is unknown."""
    if row_count <= 0:
        return None
    return Fraction(max_key - min_key + 1, row_count)


def even_step(factor: Fraction, chunk_size: int) -> int:
    return max(1, math.floor(factor * chunk_size))


def _as_int(v: Any) -> int | None:
    if isinstance(v, bool):
        return None
    if isinstance(v, int):
        return v
    if isinstance(v, Decimal) and v.is_finite() and v == v.to_integral_value():
        return int(v)
    return None


# -- the planner -------------------------------------------------------------------------------

NEW, EVEN, SAMPLE, WALK, DONE = "new", "even", "sample", "walk", "done"


class ChunkPlanner:
    """Plans one table's chunks lazily; its whole state is a small JSON dict.

    ``next_chunks(probe, n)`` returns up to ``n`` further chunks (an empty list once the
    last, open-ended chunk has been returned). After a restart, ``from_dict`` resumes exactly
    where ``to_dict`` was taken: the chunks already returned are not planned again.
    """

    def __init__(self, table_id: TableId, *, integral_key: bool,
                 options: ChunkingOptions | None = None):
        self.table_id = table_id
        self.integral_key = integral_key
        self.options = options or ChunkingOptions()
        self.phase = NEW
        self.strategy: str | None = None  # how the table was planned, for logs
        self.next_index = 0
        self.cursor: Any = None  # start of the next chunk (None: from minus infinity)
        self.step: int | None = None  # even: the key distance between boundaries
        self.min_key: Any = None  # MIN(k) and MAX(k) when planning began
        self.max_key: Any = None
        self.pending: list[Any] = []  # sample: boundaries fetched but not yet returned

    @property
    def done(self) -> bool:
        return self.phase == DONE

    # -- planning --------------------------------------------------------------------------

    def next_chunks(self, probe: KeyProbe, n: int) -> list[SnapshotSplit]:
        out: list[SnapshotSplit] = []
        if self.phase == NEW and n > 0:
            self._choose(probe)
        while len(out) < n and self.phase != DONE:
            if self.phase == EVEN:
                self._even(out, n)
            elif self.phase == SAMPLE:
                self._sample(probe, out, n)
            elif self.phase == WALK:
                self._walk(probe, out)
            else:  # pragma: no cover - phases are closed
                raise AssertionError(self.phase)
        return out

    def plan_all(self, probe: KeyProbe, batch: int = 256) -> Iterator[SnapshotSplit]:
        while not self.done:
            yield from self.next_chunks(probe, batch)

    def _choose(self, probe: KeyProbe) -> None:
        opts = self.options
        bounds = probe.min_max()
        if bounds is None:  # empty: the walk emits [null, null), or cuts what arrived since
            self._enter(WALK, "walk (empty table)")
            return
        self.min_key, self.max_key = bounds
        rows = probe.row_count()
        lo, hi = (_as_int(bounds[0]), _as_int(bounds[1])) if self.integral_key else (None, None)
        if lo is not None and hi is not None:
            factor = distribution_factor(lo, hi, rows)
            if factor is not None and opts.factor_lower <= factor <= opts.factor_upper:
                step = even_step(factor, opts.chunk_size)
                if self._density_agrees(probe, lo, step):
                    self.step = step
                    self._enter(EVEN, f"even (factor {float(factor):.4g}, step {step})")
                    return
                self._enter(WALK, f"walk (estimate of {rows} rows disagrees with the keys)")
                return
        if rows // opts.chunk_size > opts.sample_threshold:
            self._enter(SAMPLE, f"sample (~{rows} rows)")
            return
        self._enter(WALK, "walk")

    def _density_agrees(self, probe: KeyProbe, lo: int, step: int) -> bool:
        """One indexed look at the first chunk before trusting arithmetic.

        The row count is the server's estimate (``TABLE_ROWS``), which can be far too low
        right after a bulk load, and min/max say nothing about how keys are spread between
        them. If the key ``chunk_size`` rows past the minimum lies well short of
        ``min + step``, chunks cut by arithmetic would hold many times ``chunk.size`` rows
        (an unbounded micro-batch), so the exact walk is used instead.
        """
        seen = probe.next_chunk_end(None, self.options.chunk_size)
        key = None if seen is None else _as_int(seen.key)
        return key is None or key - lo >= step // 2

    def _enter(self, phase: str, strategy: str | None = None) -> None:
        self.phase = phase
        if strategy is not None:
            self.strategy = strategy
            log.info("planning chunks of %s: %s", self.table_id, strategy)

    def _emit(self, out: list[SnapshotSplit], end: Any) -> None:
        out.append(SnapshotSplit(self.table_id, self.next_index, self.cursor, end))
        self.next_index += 1
        self.cursor = end
        if end is None:
            self.phase = DONE

    def _even(self, out: list[SnapshotSplit], n: int) -> None:
        hi = _as_int(self.max_key)
        as_decimal = isinstance(self.max_key, Decimal)
        # the first chunk [null, min + step) owns everything below min as well
        base = _as_int(self.min_key if self.cursor is None else self.cursor)
        assert hi is not None and base is not None and self.step is not None  # even: integral
        while len(out) < n:
            end = base + self.step
            if end > hi:
                # the key space seen at the start is covered: hand over to the walk, which
                # also cuts whatever was inserted past the max since
                self._enter(WALK)
                return
            self._emit(out, Decimal(end) if as_decimal else end)
            base = end

    def _sample(self, probe: KeyProbe, out: list[SnapshotSplit], n: int) -> None:
        if not self.pending:
            self.pending = list(probe.sample(self.cursor, self.options.chunk_size,
                                             self.options.sample_batch))
            if not self.pending:
                self._enter(WALK)
                return
        while self.pending and len(out) < n:
            self._emit(out, self.pending.pop(0))

    def _walk(self, probe: KeyProbe, out: list[SnapshotSplit]) -> None:
        nxt = probe.next_chunk_end(self.cursor, self.options.chunk_size)
        if nxt is None:
            self._emit(out, None)
            return
        end = nxt.key
        # a run of equal keys longer than a chunk: end the chunk after the run. From minus
        # infinity the run is of the min (Python equality of two values the server returned
        # implies equality on the server; the reverse may not hold, which only costs an
        # empty first chunk)
        if not nxt.after_start or (self.cursor is None and end == self.min_key):
            end = probe.next_key_after(end)
        self._emit(out, end)

    # -- state -----------------------------------------------------------------------------

    def to_dict(self) -> dict[str, Any]:
        return {"database": self.table_id.database, "table": self.table_id.table,
                "integral_key": self.integral_key, "phase": self.phase,
                "strategy": self.strategy, "next_index": self.next_index,
                "cursor": encode_value(self.cursor),
                "step": None if self.step is None else str(self.step),
                "min": encode_value(self.min_key),
                "max": encode_value(self.max_key),
                "pending": [encode_value(v) for v in self.pending]}

    @classmethod
    def from_dict(cls, d: dict[str, Any],
                  options: ChunkingOptions | None = None) -> ChunkPlanner:
        try:
            p = cls(TableId(d["database"], d["table"]), integral_key=bool(d["integral_key"]),
                    options=options)
            if d["phase"] not in (NEW, EVEN, SAMPLE, WALK, DONE):
                raise ValueError(f"unknown phase {d['phase']!r}")
            p.phase = d["phase"]
            p.strategy = d.get("strategy")
            p.next_index = int(d["next_index"])
            p.cursor = decode_value(d["cursor"])
            p.step = None if d.get("step") is None else int(d["step"])
            p.min_key = decode_value(d.get("min"))
            p.max_key = decode_value(d.get("max"))
            p.pending = [decode_value(v) for v in d.get("pending", [])]
        except (KeyError, TypeError, ValueError) as e:
            raise OffsetError(f"malformed chunk planner state {d!r}: {e!r}",
                              fix="start the query with a new checkpoint location") from None
        return p
