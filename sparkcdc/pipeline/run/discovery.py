"""What the run reads of the source outside the stream: the captured tables and their
schemas, and the server's binlog position now."""

from __future__ import annotations

from sparkcdc.core.schema import TableId, TableSchema
from sparkcdc.pipeline.run.checkpoint import CaptureStatus
from sparkcdc.pipeline.run.state import RunState


class Discovery:
    """Looks at the source for the run (``RunState.flavor`` and ``now`` follow)."""

    def __init__(self, state: RunState):
        self.state = state

    def discover(self, fresh: bool = False) -> dict[str, TableSchema]:
        """The captured tables and their schemas. A table whose schema changes reach its
        target through the pipeline's stream (``RunState.carried_by_stream``) keeps the
        schema the pipeline holds: only the list of tables and the new tables' columns are
        read (``fresh``: every table's columns)."""
        state = self.state
        memo: dict = {}
        known = None if fresh else {
            TableId.parse(t): TableSchema.from_dict(st.schema)
            for t, st in state.states.items()
            if st.status == CaptureStatus.ACTIVE and st.schema
            and state.carried_by_stream(st, memo)}
        tables, state.flavor = state.source().discover(known)
        return {str(t): s for t, s in tables.items()}

    def read_now(self) -> None:
        """The server's binlog position now (``RunState.now``): a run with nothing to do
        stops there, and a table gone from discovery is left to the stream until it has
        read that far."""
        self.state.now = self.state.source().position_now()
