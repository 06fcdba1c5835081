"""The pipeline state's typed fields (pipeline/run/checkpoint.py) round-trip its JSON, and read
the words older state files hold."""

from __future__ import annotations

import json

from sparkcdc.pipeline.run.checkpoint import CaptureStatus, Checkpoint, Start, TableState


def test_table_state_round_trips_with_its_start_and_status(tmp_path):
    ck = Checkpoint(tmp_path)
    off = {"file": "b.000002", "pos": 4, "events": 0, "rows": 0}
    states = {"d.a": TableState("d.a", "l.a"),
              "d.b": TableState("d.b", "l.b", 2, start=Start(off, joins=True),
                                status=CaptureStatus.DROPPED)}
    ck.save_tables("p", states, 3)
    raw = json.loads(ck.state_path.read_text())["tables"]
    assert raw["d.a"]["start"] == {"mode": "initial"} and raw["d.a"]["status"] == "active"
    assert raw["d.b"]["start"] == {"mode": "specific-offset", "offset": off, "joins": True}
    back = ck.load_tables()
    assert back == states
    assert back["d.b"].start.mode == "specific-offset" and back["d.a"].start.mode == "initial"
    assert f"{back['d.b'].status}" == "dropped" and back["d.b"].status == "dropped"


def test_an_older_start_without_joins_reads_as_an_offset_it_does_not_join_at():
    st = TableState.from_dict({"table": "d.a", "target": "l.a", "status": "failed",
                               "start": {"mode": "specific-offset",
                                         "offset": {"file": "b.1", "pos": 4}}})
    assert st.start == Start({"file": "b.1", "pos": 4}, joins=False)
    assert st.status is CaptureStatus.FAILED


def test_what_the_stream_saw_happen_to_a_table_round_trips(tmp_path):
    from sparkcdc.pipeline.run.checkpoint import Gone

    ck = Checkpoint(tmp_path)
    off = {"file": "b.000002", "pos": 4, "events": 0, "rows": 0}
    renamed = TableState("d.a", "l.a", gone=Gone("renamed", off, 7, to="d.b", streaming=False))
    rekey = TableState("d.c", "l.c", gone=Gone("rekeyed", off, 3, schema={"x": 1},
                                               statements=("ALTER TABLE c ADD PRIMARY KEY (k)",)))
    ck.save_tables("p", {"d.a": renamed, "d.c": rekey})
    assert ck.load_tables() == {"d.a": renamed, "d.c": rekey}


def test_live_is_one_file_and_an_older_checkpoints_per_table_files_still_read(tmp_path):
    ck = Checkpoint(tmp_path)
    assert ck.read_live().entry("d.a") == {}
    ck.write_live(123, 1000.5, {"d.a": {"rows": 7, "running": True, "generation": 1}})
    assert list(tmp_path.iterdir()) == [tmp_path / "live.json"]
    got = ck.read_live()
    assert got.entry("d.a") == {"rows": 7, "running": True, "generation": 1, "pid": 123,
                                "updated": 1000.5}
    # a table the run did not write: an older run's live/<table>.json, as it was
    (tmp_path / "live").mkdir()
    (tmp_path / "live" / "d.b.json").write_text(json.dumps({"rows": 3, "pid": 9}))
    assert got.entry("d.b") == {"rows": 3, "pid": 9}
    (tmp_path / "live.json").write_text("{torn")
    assert ck.read_live().entry("d.a") == {}
