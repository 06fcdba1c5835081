"""What a chunk read again replaces in its table's target (docs/algorithm.md, "Reading a
table again").

A chunk of a table read again whole (``sparkcdc snapshot`` without ``--where``) holds every
row the source has in its key range at its batch's end: the chunk is rolled back to that
position (``core/watermark.py``), and the batch's binlog window ends there too. So after
the batch, the target's rows in that range are the chunk's rows and no other: a row there
whose key the chunk lacks is one the source deleted before the chunk was read (its delete
reached the target too, as every change of a table read again does) or one written into
the target behind the pipeline. ``replaced`` gives the batch's ranges of a table as
``KeyRange``s, and the sinks delete those rows in the batch's own commit
(``ChangeSet.replaces``).

Not every target can be told which rows lie in a range; where it cannot, nothing is
replaced (such a row stays, and ``sparkcdc verify`` finds it), and the run says why once:

* a changelog target (Kafka, files): it holds changes, not rows; a key only in it is not
  known to sparkcdc, and a consumer that replays it keeps it;
* a table with a transform (its target's rows need not carry the source's columns, and
  skipped operations or a history table keep rows the source no longer has on purpose);
* a target other tables write into (their rows lie in the same ranges);
* a chunk key whose order is not the targets' own: strings (their collation's order),
  floats, times. Integers, decimals and dates compare the same everywhere.
"""

from __future__ import annotations

import logging

import pyarrow as pa

from sparkcdc.pipeline.run.state import RunState
from sparkcdc.pipeline.run.table_run import TableRun
from sparkcdc.sinks import SinkKind
from sparkcdc.sinks.base import KeyRange
from sparkcdc.spark.offset_view import OffsetView

log = logging.getLogger("sparkcdc.pipeline")

_told: set[tuple[str, int]] = set()  # (table, reread id) whose refusal was logged


def replaced(state: RunState, run: TableRun,
             offset: OffsetView | None) -> tuple[KeyRange, ...]:
    """The ranges of ``run``'s chunks the batch that ends at ``offset`` reads again whole,
    when its target can replace them (module docstring); else ()."""
    if offset is None:
        return ()
    st = run.state
    chunks = offset.reread_ranges(st.table)
    if not chunks:
        return ()
    why = _refusal(state, run)
    if why:
        told = (st.table, offset.table(st.table).reread_id)
        if told not in _told:
            _told.add(told)
            log.warning("table %s is read again, but rows only its target %s holds stay "
                        "there (%s): sparkcdc verify finds them", st.table, st.target, why)
        return ()
    key = run.schema.chunk_key
    return tuple(KeyRange(key, start, end) for start, end in chunks)


def _refusal(state: RunState, run: TableRun) -> str:
    """Why the table's target cannot replace a chunk's range ("" when it can)."""
    caps = state.sink_capabilities()
    if caps.kind is SinkKind.CHANGELOG:
        return "a changelog holds changes, not rows"
    if not caps.replaces_ranges:
        return f"the {state.defn.sink.type} sink replaces no key range"
    if run.shaper.active:
        return "the table has a transform"
    if state.shared(run.state):
        return "other tables write into it"
    key = run.schema.chunk_key
    names = run.rows_schema.names if run.rows_schema is not None else []
    if key not in names:
        return f"its chunk key {key} is not a target column"
    t = run.rows_schema.field(key).type
    if not (pa.types.is_integer(t) or pa.types.is_decimal(t) or pa.types.is_date32(t)):
        return (f"its chunk key {key} is {t}, whose order the target need not share with "
                "the source")
    return ""
