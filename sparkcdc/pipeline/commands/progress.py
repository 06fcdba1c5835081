"""The live progress display of ``sparkcdc run``: per table phase, chunks, rows, rate, ETA
during the snapshot, then the streaming lag. A rich ``Live`` table on a terminal; one line per
table every few seconds otherwise (logs, CI)."""

from __future__ import annotations

import time

from sparkcdc.pipeline.commands.console import human_bytes, make_console


def _eta(run) -> str:
    if run.phase != "snapshot" or not run.chunks_total or not run.chunks_done:
        return ""
    elapsed = time.monotonic() - (run.snapshot_started or run.started)
    left = run.chunks_total - run.chunks_done
    if left <= 0:
        return "0s"
    secs = elapsed / run.chunks_done * left
    return f"{secs:.0f}s" if secs < 120 else f"{secs / 60:.0f}min"


def rows_of(runner) -> list[tuple]:
    out = []
    for table, run in sorted(runner.runs.items()):
        total = f"/{run.chunks_total}" if run.chunks_total else ""
        chunks = f"{run.chunks_done}{total}" if run.phase == "snapshot" or run.chunks_done else "-"
        if run.phase == "snapshot":
            tail = f"ETA {_eta(run)}" if _eta(run) else ""
        elif run.phase == "streaming":
            tail = "lag " + (human_bytes(run.lag_bytes) if run.lag_bytes is not None else "?")
        else:
            tail = ""
        active = run.active
        state = run.phase if active or run.phase == "starting" else f"{run.phase} (stopped)"
        out.append((table, ", ".join(run.state.targets or [run.state.target]), state, chunks,
                    f"{run.rows:,}",
                    f"{run.rate:,.0f}/s", tail))
    return out


class LiveDisplay:
    """A rich Live table, refreshed by the runner's loop (``update``)."""

    def __init__(self, console=None, title: str = "sparkcdc"):
        from rich.console import Console
        from rich.live import Live

        self.console = console or Console()
        self.title = title
        self.live = Live(console=self.console, refresh_per_second=2, transient=False)
        self.started = False

    def _table(self, runner):
        from rich.markup import escape
        from rich.table import Table
        from rich.text import Text

        t = Table(title=escape(f"{self.title}: {runner.settings.name}"), title_justify="left")
        for col in ("table", "target", "phase", "chunks", "rows", "rate", ""):
            t.add_column(col, justify="right" if col in ("chunks", "rows", "rate") else "left")
        for row in rows_of(runner):
            t.add_row(*(Text(str(c)) for c in row))  # names are data, never rich markup
        return t

    def update(self, runner) -> None:
        if not self.started:
            self.live.start()
            self.started = True
        self.live.update(self._table(runner))

    def close(self) -> None:
        if self.started:
            self.live.stop()
            self.started = False


class LineDisplay:
    """One line per table every ``every`` seconds, for output that is not a terminal."""

    def __init__(self, out=None, every: float = 5.0):
        import sys

        self.out = out or sys.stdout
        self.every = every
        self._last = 0.0

    def update(self, runner) -> None:
        now = time.monotonic()
        if now - self._last < self.every:
            return
        self._last = now
        for table, target, state, chunks, rows, rate, tail in rows_of(runner):
            print(f"[{time.strftime('%H:%M:%S')}] {table} -> {target}: {state}, chunks {chunks}, "
                  f"rows {rows}, {rate} {tail}".rstrip(), file=self.out, flush=True)

    def close(self) -> None:
        pass


def make_display(console=None, live: bool | None = None):
    console = console or make_console()
    if live is None:
        live = console.is_terminal
    return LiveDisplay(console) if live else LineDisplay()
