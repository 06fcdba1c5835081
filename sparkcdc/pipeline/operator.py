"""What the loop does when an operator asks (``sparkcdc snapshot|pause|resume``, the
requests of ``pipeline/control.py``), while every other table streams on:

* **snapshot**: the table is snapshotted again inside the pipeline's stream under a new
  generation, as a newly added table is, and streams on from there. Its target is not
  emptied: the snapshot's rows are merged over it, so a row that differs or is missing
  there is made right, and the stream is never without the table's rows. (A row that
  exists only in the target stays; empty the target first for a clean reload.)
* **pause**: the table leaves the pipeline's stream; its place is where its target's last
  batch ended (a table paused in its snapshot is snapshotted again on resume). Nothing is
  read for it until it is resumed.
* **resume**: it joins the pipeline's stream again from that place (the members file's
  ``since``), so none of its changes made while it was paused is lost, as long as the
  server keeps the binlog (else ``binlog.purged.behavior`` applies).
"""

from __future__ import annotations

import logging

from sparkcdc.core.schema import TableId, TableSchema
from sparkcdc.pipeline import control
from sparkcdc.pipeline import schema_change as sc
from sparkcdc.pipeline.checkpoint import CaptureStatus, Start, TableState
from sparkcdc.spark import offset_view as ov

log = logging.getLogger("sparkcdc.pipeline")


class OperatorRequests:
    """Mixed into ``Runner``: uses its states, ``_halt``, ``_next_generation``, ``_start``,
    ``discover`` and ``_save``."""

    def _take_requests(self) -> None:
        """Answer the requests waiting in the checkpoint, oldest first."""
        for req in control.pending(self.ckpt.root):
            ans = control.Answer()
            tables = sorted(t for t in self.states if req.matches(t))
            if not tables:
                ans.skipped[req.tables] = "no captured table matches"
            found = self.discover(fresh=True) if req.kind == "snapshot" and tables else {}
            for table in tables:
                st = self.states[table]
                why = getattr(self, f"_{req.kind}_request")(st, found, req)
                if why:
                    ans.skipped[table] = why
                else:
                    ans.applied.append(table)
            log.warning("%s requested for %s: %s%s", req.kind, req.tables,
                        ", ".join(ans.applied) or "no table",
                        "".join(f"; {t} skipped ({w})" for t, w in ans.skipped.items()))
            control.answer(req, ans)

    def _snapshot_request(self, st: TableState, found: dict[str, TableSchema],
                          req: control.Request) -> str | None:
        if st.status != CaptureStatus.ACTIVE:
            return f"it is {st.status}"
        if st.table not in found:
            return "it is gone from the source"
        if req.where:
            return self._reread(st, req.where)
        if sc.diff(TableSchema.from_dict(st.schema), found[st.table]):
            return "its schema changed and the stream has not brought the change yet; ask again"
        sink, last, _offset, _done = self._halt(st)
        sink.close()
        self._next_generation(st, last, Start(), "snapshot requested")
        self._start(st, found[st.table])
        return None

    def _reread(self, st: TableState, where: str) -> str | None:
        """Read the rows of the table where ``where`` holds again, while it streams on:
        no new generation, its target merged over (``SplitAssigner``'s rereads)."""
        b = self.ckpt.last_committed(st)
        off = self.ckpt.offset(st, b) if b is not None else None
        if off is None or ov.table_phase(off, st.table) != "done":
            return "it is in its snapshot, which reads every row (ask again once it streams)"
        table = TableId.parse(st.table)
        try:
            with self._source_config().connection.connect() as c, c.cursor() as cur:
                cur.execute(f"SELECT 1 FROM {table.quoted()} WHERE ({where}) LIMIT 0")
        except Exception as e:  # the server's own words, as the answer
            return f"the condition does not run on the source: {str(e)[:300]}"
        st.reread = {"id": int((st.reread or {}).get("id", 0)) + 1, "where": where}
        st.note = f"snapshot where {where}"
        self._group_dirty = True  # the members file carries it to the running stream
        self._save()
        return None

    def _pause_request(self, st: TableState, _found, _req=None) -> str | None:
        if st.status != CaptureStatus.ACTIVE:
            return f"it is {st.status}"
        sink, _last, offset, snapshot_done = self._halt(st)
        sink.close()
        # a table paused in its snapshot is snapshotted again on resume, merged over its
        # target
        at = self._target_position(st, offset, snapshot_done)
        st.group = None
        st.status = CaptureStatus.PAUSED
        st.paused_at = at
        st.note = "paused" if at else "paused in its snapshot (taken again on resume)"
        self._save()
        return None

    def _resume_request(self, st: TableState, _found, _req=None) -> str | None:
        if st.status != CaptureStatus.PAUSED:
            return f"it is {st.status}, not paused"
        sink = self._sink_for(st)
        try:
            last = sink.last_batch_id()
        finally:
            sink.close()
        at, st.paused_at = st.paused_at, None
        st.status = CaptureStatus.ACTIVE
        self._next_generation(st, last, Start(at, joins=True) if at else Start(),
                              "resumed" if at else "resumed (taken again: paused in its "
                                                   "snapshot)")
        self._start(st, TableSchema.from_dict(st.schema))
        return None
