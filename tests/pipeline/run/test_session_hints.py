"""What a run tells the session it starts (``batch.session_hints``, ``SessionHints``): the
modules its tasks import, which the warm interpreter imports before it forks them
(tests/pipeline/launch/test_warm_python.py runs them)."""

from __future__ import annotations

from sparkcdc.pipeline.definition import parse_pipeline
from sparkcdc.pipeline.run.batch import session_hints

SOURCE = "source: {type: mysql, hostname: h, username: u, tables: d.t}\n"


def test_the_sinks_writers_and_the_task_stages_are_the_task_modules():
    delta = session_hints(parse_pipeline(f"{SOURCE}sink: {{type: delta, path: /tmp/x}}\n"))
    assert {"deltalake", "sparkcdc.sinks.delta", "sparkcdc.pipeline.run.task_changes",
            "sparkcdc.pipeline.run.task_files"} <= set(delta.task_modules)
    ice = session_hints(parse_pipeline(f"{SOURCE}sink: {{type: iceberg, warehouse: /tmp/w}}\n"))
    assert {"pyiceberg", "sparkcdc.sinks.iceberg", "pyiceberg.catalog.sql"} <= set(ice.task_modules)
    assert "deltalake" not in ice.task_modules
