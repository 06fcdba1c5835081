"""Where a run's wall time goes, from Spark's event log (``bench/pipeline.py
--driver-bytes --keep-events DIR``): each job's span, its stages' spans and task counts,
how busy the executor cores were during the job, and the gaps between jobs (the driver
alone: planning a batch, committing it). Why: CPU-seconds say how much work a run did,
not whether the cores waited for each other or for the driver; a catch-up's changes a
second depend on both.

    .venv/bin/python bench/timeline.py DIR/r1-delta-catchup [--cores 2]
"""

from __future__ import annotations

import argparse
import json
from collections import defaultdict
from pathlib import Path


def events(folder: Path):
    for f in sorted(folder.rglob("*")):
        if f.is_file():
            for line in f.read_text(errors="replace").splitlines():
                if line.startswith("{"):
                    yield json.loads(line)


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("folder")
    p.add_argument("--cores", type=int, default=2)
    a = p.parse_args()
    jobs: dict[int, dict] = {}
    stage_job: dict[int, int] = {}
    tasks: dict[int, list[tuple[float, float]]] = defaultdict(list)
    app_start = app_end = None
    for e in events(Path(a.folder)):
        kind = e.get("Event")
        if kind == "SparkListenerApplicationStart":
            app_start = e["Timestamp"] / 1000
        elif kind == "SparkListenerApplicationEnd":
            app_end = e["Timestamp"] / 1000
        elif kind == "SparkListenerJobStart":
            jobs[e["Job ID"]] = {"start": e["Submission Time"] / 1000,
                                 "desc": (e.get("Properties") or {}).get(
                                     "spark.job.description", "")}
            for sid in e.get("Stage IDs", []):
                stage_job[sid] = e["Job ID"]
        elif kind == "SparkListenerJobEnd":
            jobs[e["Job ID"]]["end"] = e["Completion Time"] / 1000
        elif kind == "SparkListenerTaskEnd":
            info = e["Task Info"]
            tasks[e["Stage ID"]].append((info["Launch Time"] / 1000, info["Finish Time"] / 1000))
    if not jobs:
        raise SystemExit(f"no job in the event log under {a.folder}")
    order = sorted(jobs.items(), key=lambda kv: kv[1]["start"])
    t0 = app_start or order[0][1]["start"]
    busy_total = in_jobs = gaps = 0.0
    last_end = None
    print(f"{'job':>4} {'start':>7} {'span':>6} {'gap':>6} {'busy':>5}  stages (tasks, span)")
    for jid, j in order:
        end = j.get("end", j["start"])
        span = end - j["start"]
        gap = 0.0 if last_end is None else max(0.0, j["start"] - last_end)
        gaps += gap
        in_jobs += span
        stages = sorted(s for s, jj in stage_job.items() if jj == jid and tasks.get(s))
        busy = sum(f - s for st in stages for s, f in tasks[st])
        busy_total += busy
        desc = ", ".join(f"{st}: {len(tasks[st])} ({max(f for _s, f in tasks[st]) - min(s for s, _f in tasks[st]):.2f} s)"
                         for st in stages)
        share = busy / (span * a.cores) if span > 0 else 0.0
        print(f"{jid:>4} {j['start'] - t0:7.2f} {span:6.2f} {gap:6.2f} {share:5.0%}  {desc}")
        last_end = max(end, last_end or end)
    total = (app_end or last_end) - t0
    print(f"\nwhole run {total:.2f} s: in jobs {in_jobs:.2f} s (tasks busy {busy_total:.2f} "
          f"task-s, {busy_total / max(in_jobs * a.cores, 1e-9):.0%} of {a.cores} cores), "
          f"between jobs {gaps:.2f} s, before the first job "
          f"{order[0][1]['start'] - t0:.2f} s, after the last "
          f"{total - (last_end - t0):.2f} s")


if __name__ == "__main__":
    main()
