"""A task's CPU by stage (sparkcdc/spark/task_cpu.py): off, the iterator is passed as it is;
on, each stage's iterator writes one line with its own CPU, its whole CPU, batches, rows."""

from __future__ import annotations

import json

import pyarrow as pa

from sparkcdc.spark.task_cpu import TASK_CPU_ENV, accounted


def _batches():
    for n in (3, 5):
        sum(i * i for i in range(200_000))  # the stage's own work
        yield pa.record_batch({"x": list(range(n))})


def test_off_the_iterator_is_passed_as_it_is(monkeypatch):
    monkeypatch.delenv(TASK_CPU_ENV, raising=False)
    it = _batches()
    assert accounted(it, "window") is it


def test_on_each_stage_writes_its_cpu(monkeypatch, tmp_path):
    monkeypatch.setenv(TASK_CPU_ENV, str(tmp_path))
    got = []
    for b in accounted(_batches(), "window"):
        sum(i * i for i in range(400_000))  # the consumer's work: the task's, not the stage's
        got.append(b.num_rows)
    assert got == [3, 5]
    (line,) = [json.loads(f.read_text()) for f in tmp_path.glob("window-*.json")]
    assert line["stage"] == "window" and line["batches"] == 2 and line["rows"] == 8
    assert 0 < line["own_cpu_s"] < line["task_cpu_s"]
