"""``sparkcdc run --metrics-port N``: the running pipeline in Prometheus' text format.

A monitoring system scrapes ``http://host:N/metrics`` (Debezium exposes JMX, Flink per-table
gauges; Prometheus text is what both end up in most often). The numbers are what the
runner's loop already keeps for its display (``TableRun``), read when a scrape arrives:
nothing is computed for the metrics alone, and a scrape never touches Spark or the server.
The server binds to ``127.0.0.1`` unless a host is given (``--metrics-host``): the page
names tables and targets, never credentials.
"""

from __future__ import annotations

import http.server
import threading
from typing import Any

PHASES = ("starting", "snapshot", "streaming")


def _label(v: str) -> str:
    return v.replace("\\", "\\\\").replace("\n", "\\n").replace('"', '\\"')


def render(runner: Any) -> str:
    """The metrics page for ``runner`` (a ``pipeline.run.loop.Runner``)."""
    name = _label(runner.settings.name)
    out: list[str] = []

    def family(metric: str, kind: str, help_: str, samples: list[tuple[str, float]]) -> None:
        out.append(f"# HELP sparkcdc_{metric} {help_}")
        out.append(f"# TYPE sparkcdc_{metric} {kind}")
        for labels, value in samples:
            out.append(f"sparkcdc_{metric}{{{labels}}} {value:g}")

    runs = list(runner.runs.values())

    def per_table(value) -> list[tuple[str, float]]:
        samples = []
        for r in runs:
            v = value(r)
            if v is not None:
                samples.append(((f'pipeline="{name}",table="{_label(r.state.table)}",'
                                 f'target="{_label(r.state.target)}"'), float(v)))
        return samples

    family("table_rows_total", "counter", "change rows applied to the table's target",
           per_table(lambda r: r.rows))
    family("table_batches_total", "counter", "micro-batches that carried rows of the table",
           per_table(lambda r: r.batches))
    family("table_rows_per_second", "gauge", "rows per second in the table's last batch",
           per_table(lambda r: r.rate))
    family("table_snapshot_chunks_done", "gauge", "snapshot chunks of the table read",
           per_table(lambda r: r.chunks_done))
    family("table_snapshot_chunks_total", "gauge",
           "snapshot chunks of the table, when its planner can tell",
           per_table(lambda r: r.chunks_total))
    family("table_lag_bytes", "gauge",
           "binlog bytes between the table's last batch and the server's position",
           per_table(lambda r: r.lag_bytes))
    family("table_emit_lag_seconds", "gauge",
           "seconds from the commit of the newest change in the table's last batch of "
           "changes to its write (tables of the pipeline's stream)",
           per_table(lambda r: r.emit_lag))
    family("table_restarts", "gauge", "failures in a row its stream was restarted for",
           per_table(lambda r: r.restarts))
    family("table_failed", "gauge", "1 when the table's stream failed for good",
           per_table(lambda r: 1 if r.error else 0))
    phases = []
    for r in runs:
        for p in PHASES:
            phases.append((f'pipeline="{name}",table="{_label(r.state.table)}",phase="{p}"',
                           1.0 if r.phase == p else 0.0))
    family("table_phase", "gauge", "1 for the phase the table is in", phases)
    family("table_generation", "gauge", "how many times the table was taken again",
           per_table(lambda r: r.state.generation))
    queries = {id(r.query): r for r in runs if r.query is not None}
    family("streams", "gauge", "Spark streaming queries the pipeline runs",
           [(f'pipeline="{name}"', float(len(queries)))])
    family("batch_seconds", "gauge", "duration of the pipeline's last micro-batch",
           [(f'pipeline="{name}"', float(runner.last_batch_seconds))]
           if runner.last_batch_seconds is not None else [])
    return "\n".join(out) + "\n"


class MetricsServer:
    """An HTTP server in a daemon thread serving ``render(runner)`` at ``/metrics``."""

    def __init__(self, runner: Any, port: int, host: str = "127.0.0.1"):
        page = render

        class Handler(http.server.BaseHTTPRequestHandler):
            def do_GET(self) -> None:  # (the name is the http.server API)
                if self.path.split("?")[0] not in ("/metrics", "/"):
                    self.send_error(404)
                    return
                body = page(runner).encode()
                self.send_response(200)
                self.send_header("Content-Type", "text/plain; version=0.0.4; charset=utf-8")
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

            def log_message(self, *args) -> None:  # scrapes are not worth a log line
                pass

        self._server = http.server.ThreadingHTTPServer((host, port), Handler)
        self._server.daemon_threads = True
        self.port = self._server.server_address[1]
        self._thread = threading.Thread(target=self._server.serve_forever,
                                        name="sparkcdc-metrics", daemon=True)

    def start(self) -> MetricsServer:
        self._thread.start()
        return self

    def close(self) -> None:
        self._server.shutdown()
        self._server.server_close()
