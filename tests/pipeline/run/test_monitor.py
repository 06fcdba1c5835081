"""What the monitor reads from a progress report of the pipeline's stream
(pipeline/run/monitor.py): its source's end and latest offsets, typed; an offset Spark
reports as absent (``null``, or none at all) is none, not a view of nothing."""

from __future__ import annotations

import json

from sparkcdc.pipeline.run.monitor import _offsets

END = {"pos": {"file": "mysql-bin.000001", "pos": 120, "events": 0, "rows": 0, "gtid": None,
               "flavor": "mariadb"},
       "assigner": {"phase": "streaming", "tables": [
           {"table": "d.t", "phase": "done", "chunks_done": 3, "generation": 1}]}}


def test_the_offsets_of_a_progress_report():
    end, latest = _offsets({"sources": [{"endOffset": json.dumps(END),
                                         "latestOffset": "null"}]})
    assert end is not None and latest is None
    assert end.position_dict == END["pos"] and end.table("d.t").chunks_done == 3
    assert end.table("d.t").generation == 1 and end.phase == ""
    end, latest = _offsets({"sources": [{"endOffset": END, "latestOffset": END}]})
    assert end is not None and latest is not None and latest.position.pos == 120
    assert _offsets({"sources": [{"endOffset": None}]}) == (None, None)
    assert _offsets({"sources": [{"endOffset": "{}"}]}) == (None, None)
    assert _offsets({}) == (None, None)
