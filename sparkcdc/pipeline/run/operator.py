"""What the loop does when an operator asks (``sparkcdc snapshot|pause|resume``, the
requests of ``pipeline/run/control.py``), while every other table streams on:

* **snapshot**: the table is *read again* while it streams on (``SplitAssigner``'s
  rereads, docs/algorithm.md "Reading a table again"): its chunks are read again, each
  rolled back to its batch's position and merged over the target, while the stream keeps
  passing every change of the table, deletes included. So a row that differs or is missing
  in the target is made right, and a row the source deletes during the re-read, before or
  after its chunk is read, is deleted from the target as well: afterwards the target
  equals the source. ``--where`` reads only the rows a condition names. A table still in
  its snapshot is read again once that snapshot ends. (A key that exists only in the
  target, written there by hand, is not removed: ``sparkcdc verify`` finds it.)
* **pause**: the table leaves the pipeline's stream; its place is where its target's last
  batch ended. Nothing is read for it until it is resumed. A table paused in its snapshot
  has no such place: on resume its target (a part of a snapshot) is emptied and the table
  snapshotted again, since a key deleted while it was paused would otherwise stay there.
* **resume**: it joins the pipeline's stream again from that place (the members file's
  ``since``), so none of its changes made while it was paused is lost, as long as the
  server keeps the binlog (else ``binlog.purged.behavior`` applies).
"""

from __future__ import annotations

import logging
from collections.abc import Callable

from sparkcdc.core.schema import TableId, TableSchema
from sparkcdc.pipeline.run import control
from sparkcdc.pipeline.run.checkpoint import CaptureStatus, Start, TableState
from sparkcdc.pipeline.run.discovery import Discovery
from sparkcdc.pipeline.run.schema import diff as sc
from sparkcdc.pipeline.run.state import RunState, schema_of
from sparkcdc.pipeline.run.stream import PipelineStream
from sparkcdc.pipeline.run.tables import TableLifecycle

log = logging.getLogger("sparkcdc.pipeline")

Found = dict[str, TableSchema]


class OperatorRequests:
    """Answers the operator's requests waiting in the checkpoint."""

    def __init__(self, state: RunState, discovery: Discovery, tables: TableLifecycle,
                 stream: PipelineStream):
        self.state = state
        self.discovery = discovery
        self.tables = tables
        self.stream = stream
        self._answers: dict[str, Callable[[TableState, Found, control.Request], str | None]] = {
            "snapshot": self._snapshot, "pause": self._pause, "resume": self._resume}

    def take(self) -> None:
        """Answer the requests waiting in the checkpoint, oldest first."""
        state = self.state
        for req in control.pending(state.ckpt.root):
            ans = control.Answer()
            tables = sorted(t for t in state.states if req.matches(t))
            if not tables:
                ans.skipped[req.tables] = "no captured table matches"
            found = (self.discovery.discover(fresh=True) if req.kind == "snapshot" and tables
                     else {})
            for table in tables:
                why = self._answers[req.kind](state.states[table], found, req)
                if why:
                    ans.skipped[table] = why
                else:
                    ans.applied.append(table)
            log.warning("%s requested for %s: %s%s", req.kind, req.tables,
                        ", ".join(ans.applied) or "no table",
                        "".join(f"; {t} skipped ({w})" for t, w in ans.skipped.items()))
            control.answer(req, ans)

    def _snapshot(self, st: TableState, found: Found, req: control.Request) -> str | None:
        if st.status != CaptureStatus.ACTIVE:
            return f"it is {st.status}"
        if st.table not in found:
            return "it is gone from the source"
        if sc.diff(schema_of(st), found[st.table]):
            return "its schema changed and the stream has not brought the change yet; ask again"
        return self._reread(st, req.where or "")

    def _reread(self, st: TableState, where: str) -> str | None:
        """Read the table again (only the rows where ``where`` holds, when given) while it
        streams on: no new generation, nothing emptied, the table's changes passed on
        throughout and the chunks, as of their batch's position, merged over the target
        (``SplitAssigner``'s rereads). A table still in its snapshot takes the reread once
        its snapshot is done: the assigner waits for that."""
        if where:
            why = self.state.source().check_condition(TableId.parse(st.table), where)
            if why is not None:
                return f"the condition does not run on the source: {why}"
        st.reread = {"id": int((st.reread or {}).get("id", 0)) + 1, "where": where}
        st.note = f"snapshot where {where}" if where else "snapshot requested (read again)"
        self.stream.dirty = True  # the members file carries it to the running stream
        self.state.save()
        return None

    def _pause(self, st: TableState, _found: Found, _req: control.Request) -> str | None:
        if st.status != CaptureStatus.ACTIVE:
            return f"it is {st.status}"
        if not self.state.streams(st) and not self.state.can_empty():
            # its resume would have to take it again from an empty target, and this
            # changelog cannot be emptied: the keys deleted meanwhile would stay in it
            return ("it is in its snapshot, and a changelog target cannot be emptied to take "
                    "it again on resume; pause it once it streams")
        sink, _last, offset, snapshot_done = self.tables.halt(st)
        sink.close()
        # a table paused in its snapshot is emptied and snapshotted again on resume
        at = self.tables.target_position(st, offset, snapshot_done)
        st.stream_generation = None
        st.status = CaptureStatus.PAUSED
        st.paused_at = at
        st.note = "paused" if at else "paused in its snapshot (taken again on resume)"
        self.state.save()
        return None

    def _resume(self, st: TableState, _found: Found, _req: control.Request) -> str | None:
        if st.status != CaptureStatus.PAUSED:
            return f"it is {st.status}, not paused"
        sink = self.state.sink_for(st)
        try:
            last = sink.last_batch_id()
            if st.paused_at is None and last is not None:
                # paused in its snapshot: its target holds part of one, where a key deleted
                # while it was paused would stay; emptied, and the table snapshotted again
                if self.state.emptying_hits_others(st):
                    return (f"it was paused in its snapshot, so its target {st.target} must "
                            "be emptied and the table snapshotted again, but the target is "
                            "shared with other tables; empty it yourself and start over with "
                            "a new checkpoint location")
                sink.empty()
        finally:
            sink.close()
        at, st.paused_at = st.paused_at, None
        st.status = CaptureStatus.ACTIVE
        self.tables.next_generation(st, last, Start(at, joins=True) if at else Start(),
                                    "resumed" if at else "resumed (taken again: paused in its "
                                                         "snapshot)")
        self.tables.start(st, schema_of(st))
        return None
