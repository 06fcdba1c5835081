"""The records of one decoded rows event, with their offsets, as cheaply as Python allows.

This runs for every captured row change, in both of the reader's event layers (its own
and the tests' reference over python-mysql-replication), which is why it is one function
both call rather than a loop in each.
"""

from __future__ import annotations

from collections.abc import Iterable
from itertools import chain, repeat

from sparkcdc.core.offsets import unchecked_offset
from sparkcdc.core.records import ChangeRecord
from sparkcdc.core.schema import TableId
from sparkcdc.mysql.binlog.read_state import ReadState

__all__ = ["event_records", "offset_at"]


offset_at = unchecked_offset  # ``BinlogOffset(...)`` without validating again


def event_records(state: ReadState, key: tuple, decoded: list, op: str, table_id: TableId,
                   end_key: tuple | None, flavor: str
                   ) -> tuple[Iterable[ChangeRecord], tuple, bool]:
    """The records of one decoded rows event (at ``key``) inside ``[state.low_key, end_key)``,
    for both event layers: the records, the ``low_key`` after them, and whether ``end_key``
    cut the event short (the window is done). The caller yields the records, then sets
    ``state.low_key``: only the next event (or a reconnect after it) reads it.

    This runs for every captured row change, and a generator here would cost a frame switch
    per row, so the records come back in containers the caller's ``yield from`` iterates in
    C: the rows are a slice (not a comparison each); a small event's records a tuple or a
    list, a large one's a lazy ``map`` built as they are yielded (a list would hold the
    whole event's records at once). Interleaved A/B against the loop inlined in both
    callers: no difference beyond noise."""
    low_key = state.low_key
    first = low_key[3] if key[:3] == low_key[:3] else 0
    n = stop = len(decoded)
    if end_key is not None and end_key[:3] == key[:3] and end_key[3] < stop:
        stop = end_key[3]
    if first >= stop:
        return (), low_key, stop < n
    ev = key[2]
    base = offset_at(state.file, state.txn_pos, ev, first, state.txn_gtid_before, flavor,
                   state.server)
    ts, gtid = state.txn_ts * 1000, state.txn_gtid
    after_key = (key[0], key[1], ev, stop)
    if stop - first <= 256:  # most events are small: a list is cheaper to set up
        before, after = decoded[first]
        rec = ChangeRecord(op, table_id, before, after, base, ts, gtid)
        if stop - first == 1:
            return (rec,), after_key, stop < n
        recs = [rec]
        at_row = base.at_row
        for i in range(first + 1, stop):
            before, after = decoded[i]
            recs.append(ChangeRecord(op, table_id, before, after, at_row(i), ts, gtid))
        return recs, after_key, stop < n
    befores, afters = zip(*(decoded if first == 0 and stop == n else decoded[first:stop]))
    offsets = chain((base,), map(base.at_row, range(first + 1, stop)))
    many = map(ChangeRecord, repeat(op), repeat(table_id), befores, afters, offsets,
               repeat(ts), repeat(gtid))
    return many, after_key, stop < n
