"""``sparkcdc status``: where each table of a pipeline stands, read from its checkpoint.

Everything comes from files, so it works while the pipeline runs and after it stopped:
``pipeline.json`` (tables, targets, generations), Spark's offset and commit logs (phase,
chunks done, binlog position of the last committed batch) and ``live.json`` (rows and rate, as
the runner last saw them). With the source reachable, the lag is the distance from the
committed position to the server's current one.
"""

from __future__ import annotations

import os
import time
from dataclasses import dataclass

from sparkcdc.core.offsets import file_index
from sparkcdc.errors import SparkCDCError
from sparkcdc.mysql.port import MySQLSource, SourceConfig
from sparkcdc.pipeline.commands.console import human_bytes, make_console
from sparkcdc.pipeline.definition import PipelineDef, targets
from sparkcdc.pipeline.definition.routing import targets_of, transform_of
from sparkcdc.pipeline.run.checkpoint import Checkpoint
from sparkcdc.sinks import SinkKind, sink_class


@dataclass
class TableStatus:
    table: str
    target: str
    generation: int
    status: str  # a CaptureStatus: active | dropped | failed
    phase: str  # not started | snapshot | streaming
    chunks_done: int
    chunks_total: int | None
    rows: int | None
    batches: int  # committed micro-batches of this generation
    position: dict | None  # binlog position of the last committed batch
    lag_bytes: int | None = None
    lag_files: int | None = None
    running: bool = False
    note: str = ""
    writer: str = ""  # who writes the target's rows (docs/sinks.md)

    def lag_text(self) -> str:
        if self.position is None:
            return "-"
        if self.lag_files:
            return f"{self.lag_files} binlog file(s)"
        if self.lag_bytes is None:
            return "?"
        return human_bytes(self.lag_bytes)


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
        return True
    except ProcessLookupError:
        return False
    except PermissionError:
        return True


def table_statuses(defn: PipelineDef, current: dict | None = None) -> list[TableStatus]:
    """One ``TableStatus`` per table the pipeline has seen. ``current`` is the server's
    binlog position (``{"file", "pos"}``) for the lag, when known."""
    ck = Checkpoint(defn.checkpoint_dir)
    out = []
    lives = ck.read_live()
    for table, st in sorted(ck.load_tables().items()):
        committed = ck.last_committed(st)
        off = ck.offset(st, committed) if committed is not None else None
        live = lives.entry(table)
        running = bool(live.get("running")) and _alive(int(live.get("pid", 0))) and (
            time.time() - float(live.get("updated", 0)) < 120)
        if off is None:
            phase, done, total, pos = "not started", 0, None, None
        else:
            entry = off.table(table)
            phase = ("streaming" if off.phase == "streaming" or entry.phase == "done"
                     else "snapshot")
            done = entry.chunks_done
            total = entry.chunks_total(done)
            pos = off.position_dict
        ts = TableStatus(table, ", ".join(st.targets or [st.target]), st.generation,
                         str(st.status), phase, done, total,
                         live.get("rows") if live.get("generation") == st.generation else None,
                         (committed + 1) if committed is not None else 0, pos,
                         running=running, note=st.note, writer=writer_of(defn, table))
        if pos and current and (pos.get("server") is None or current.get("server") is None
                                or pos["server"] == current["server"]):
            if pos.get("file") == current.get("file"):
                ts.lag_bytes = max(0, int(current["pos"]) - int(pos["pos"]))
            else:
                ts.lag_files = file_index(current["file"]) - file_index(pos["file"])
        out.append(ts)
    return out


def writer_of(defn: PipelineDef, table: str) -> str:
    """Who writes the table's targets: Spark's own writer where the sink's options and the
    pipeline's ``spark`` section give it (``Sink.writer_for``); else the snapshot's rows by
    the tasks that read them, where every target takes files, its changes by key-slice
    tasks where every target also takes changes (docs/sinks.md), and the rest by the
    driver's writer."""
    try:
        cls = sink_class(defn.sink.type)
    except SparkCDCError:
        return "?"
    options = [targets.target_options(defn.sink.type, defn.sink.options, t)
               for t in targets_of(defn, table)]
    spark_writers = {cls.writer_for(o, defn.pipeline.spark) for o in options}
    if len(spark_writers) == 1 and "" not in spark_writers:  # Spark's own writer takes them
        return spark_writers.pop()
    caps = cls.capabilities
    local = (caps.kind is SinkKind.MERGE and transform_of(defn, table) is None
             and all(cls.may_take_files(o) for o in options))
    files = local and defn.pipeline.snapshot_from_tasks
    changes = local and defn.pipeline.changes_from_tasks and all(
        cls.may_take_changes(o) for o in options)
    if files and changes:
        return f"tasks (changes: {caps.tasks_writer})"
    if files:
        return f"snapshot: tasks; changes: driver ({caps.writer})"
    return f"driver ({caps.writer})"


def server_position(defn: PipelineDef) -> tuple[dict | None, str | None]:
    """The source's current binlog position, or (None, why not)."""

    try:
        off = MySQLSource(SourceConfig.parse(defn.source.options_for())).position_now()
        return {"file": off.file, "pos": off.pos, "server": off.server}, None
    except Exception as e:  # noqa: BLE001 - status must work with the server down
        return None, str(e).splitlines()[0]


def render(statuses: list[TableStatus], console=None, note: str | None = None) -> None:
    from rich.table import Table
    from rich.text import Text

    console = console or make_console()
    t = Table(title="pipeline status", title_justify="left")
    for col in ("table", "target", "state", "phase", "chunks", "rows", "batches", "position",
                "lag", "writer"):
        t.add_column(col, justify="right" if col in ("chunks", "rows", "batches") else "left")
    for s in statuses:
        chunks = f"{s.chunks_done}/{s.chunks_total}" if s.chunks_total else f"{s.chunks_done}/?"
        state = ("running" if s.running else "stopped") if s.status == "active" else s.status
        pos = f"{s.position['file']}:{s.position['pos']}" if s.position else "-"
        cells = (s.table, s.target, f"{state} g{s.generation}", s.phase, chunks,
                 "-" if s.rows is None else f"{s.rows:,}", str(s.batches), pos, s.lag_text(),
                 s.writer)
        t.add_row(*(Text(str(c)) for c in cells))  # names are data, never rich markup
    console.print(t)
    if note:
        console.print(Text(note))
