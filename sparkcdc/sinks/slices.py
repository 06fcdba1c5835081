"""A target's keys cut into slices for one batch, so that Spark tasks write its changes
with one writer per key (``Sink.plan_changes``): by ranges that follow a stored layout
(Delta's and Iceberg's files), or by a hash every process computes alike (SQL tables)."""

from __future__ import annotations

import zlib
from dataclasses import dataclass
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from sparkcdc.sinks.kinds import Word


class SliceMode(Word):
    """How a key finds its slice (``KeySlices.mode``)."""

    RANGE = "range"  # at the slices' start keys
    HASH = "hash"  # by ``stable_hash`` modulo the slice count


@dataclass(frozen=True)
class KeySlices:
    """A target's keys cut into slices for one batch, so that Spark tasks write its changes
    with one writer per key (``Sink.plan_changes``), by the first key column (``key``).

    ``mode`` says how a key finds its slice:

    * ``RANGE``: at ``starts`` (slice ``i`` holds the keys ``>= starts[i-1]`` and
      ``< starts[i]``), for a target whose stored layout has ranges (Delta's files);
    * ``HASH``: by a hash of the key's value that every process computes alike
      (``stable_hash``), modulo the slice count, for a target with no layout to follow (a
      SQL table: its server finds a key's row through its own index); ``starts`` is empty.

    ``parts`` holds per slice what its task needs besides its rows, the sink's own (for
    Delta, the ``add`` actions of the files the slice owns; None where it needs nothing);
    ``version``: the target's state the cut was made from, which the commit checks."""

    key: str
    starts: tuple[Any, ...]
    parts: tuple[Any, ...]
    version: int
    mode: SliceMode = SliceMode.RANGE

    @classmethod
    def hashed(cls, key: str, count: int, version: int = 0) -> KeySlices:
        """``count`` slices by hash, whose tasks need nothing but their rows."""
        return cls(key, (), (None,) * max(1, count), version, SliceMode.HASH)

    @classmethod
    def by_ranges(cls, key: str, items: list[Any], ranges: list[tuple[Any, Any] | None],
                  rows: list[int], n: int, version: int) -> KeySlices:
        """At most ``n`` range slices of a target's stored files (``items``, each with its
        first key's ``(min, max)`` in ``ranges`` and its row count in ``rows``): files
        whose ranges overlap fall in one group, consecutive groups are packed into slices
        of about equal rows, and slice ``i`` owns the keys from its first file's minimum up
        to the next slice's and its groups' files (its ``parts``). So every stored row of
        one of its keys lies in one of its files: one key has one writer, one file one
        writer of its deletes. A file without a range, or ``n`` of 1, makes one slice."""
        if n <= 1 or any(r is None for r in ranges):
            return cls(key, (), (tuple(items),), version)
        order = sorted(range(len(items)), key=lambda i: ranges[i])  # type: ignore[arg-type, return-value]
        groups: list[list[int]] = []
        hi = None
        for i in order:
            lo_i, hi_i = ranges[i]  # type: ignore[misc]
            if groups and hi is not None and lo_i <= hi:
                groups[-1].append(i)
                hi = max(hi, hi_i)
            else:
                groups.append([i])
                hi = hi_i
        per = (sum(rows) or 1) / min(n, len(groups) or 1)
        slices: list[list[int]] = [[]]
        starts: list[Any] = []
        acc = 0
        for g in groups:
            g_rows = sum(rows[i] for i in g)
            if slices[-1] and acc + g_rows / 2 > per * len(slices) and len(slices) < n:
                slices.append([])
                starts.append(ranges[g[0]][0])  # type: ignore[index]
            slices[-1].extend(g)
            acc += g_rows
        return cls(key, tuple(starts), tuple(tuple(items[i] for i in s) for s in slices),
                   version)

    @property
    def count(self) -> int:
        return len(self.parts)

    def slice_of(self, keys: pa.Array | pa.ChunkedArray) -> pa.Array:
        """The slice of each of ``keys`` (values of the first key column)."""
        if self.mode is SliceMode.HASH:
            if self.count == 1:
                return pa.array(np.zeros(len(keys), np.int32))
            return pa.array((stable_hash(keys) % np.uint64(self.count)).astype(np.int32))
        out = pa.array([0] * len(keys), pa.int32())
        for s in self.starts:
            ge = pc.fill_null(pc.greater_equal(keys, pa.scalar(s, keys.type)), False)
            out = pc.add(out, pc.cast(ge, pa.int32()))
        return out


_MIX = np.uint64(0x9E3779B97F4A7C15)  # 2^64 / the golden ratio (Fibonacci hashing)


def stable_hash(values: pa.Array | pa.ChunkedArray) -> np.ndarray:
    """A uint64 hash of each value that is the same in every process and on every machine
    (Python's ``hash`` of a string is not: each process seeds it). Integers, dates, times
    and booleans by their integer value, mixed (so keys that step by the slice count still
    spread); any other type by the CRC-32 of its text. Nulls hash as 0."""
    values = values.combine_chunks() if isinstance(values, pa.ChunkedArray) else values
    t = values.type
    if pa.types.is_boolean(t):
        values, t = pc.cast(values, pa.int8()), pa.int8()
    if pa.types.is_date32(t) or pa.types.is_time32(t):
        values = values.view(pa.int32())
    elif pa.types.is_date64(t) or pa.types.is_timestamp(t) or pa.types.is_time64(t) \
            or pa.types.is_duration(t):
        values = values.view(pa.int64())
    if pa.types.is_integer(values.type):
        ints = pc.fill_null(values, 0).to_numpy(zero_copy_only=False)
        with np.errstate(over="ignore"):
            return (ints.astype(np.int64).astype(np.uint64) * _MIX) >> np.uint64(32)
    if not (pa.types.is_binary(t) or pa.types.is_large_binary(t)):
        values = pc.cast(values, pa.string())
    return np.fromiter((0 if v is None else zlib.crc32(v if isinstance(v, bytes)
                                                        else v.encode())
                        for v in values.to_pylist()), np.uint64, len(values))
