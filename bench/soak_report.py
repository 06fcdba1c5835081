"""The soak's figures from its samples, and its section of docs/benchmarks.md.

A sample (every ``--sample-every`` seconds) holds ``t`` (seconds since the pipeline's
launch) and whatever was read then: the process tree's ``rss``/``pss`` (MB) and its parts,
its CPU-seconds, the 1-minute load, the writer's changes so far, the lag (``lag_s``, from
the heartbeat; ``lag_bytes``, binlog), the JVM's heap when ``jstat`` was asked.

Memory is judged from minute 2 on (the snapshot and the JVM's warm-up are over by then):
the median of minutes 2-5 against the median of the last 5 minutes of writes, and a
least-squares slope over every sample from minute 2 to the writer's stop, in MB per hour.
Lag likewise: p50/p95/max over the samples from minute 2, and its slope in seconds per
hour (bounded: no upward trend beyond noise).
"""

from __future__ import annotations

import statistics

START = 120.0  # seconds: samples before this are the start-up and the snapshot


def slope_per_hour(points: list[tuple[float, float]]) -> float | None:
    """Least-squares slope of (seconds, value) in value per hour."""
    if len(points) < 3:
        return None
    mx = statistics.fmean(p[0] for p in points)
    my = statistics.fmean(p[1] for p in points)
    sxx = sum((p[0] - mx) ** 2 for p in points)
    if sxx == 0:
        return None
    return sum((p[0] - mx) * (p[1] - my) for p in points) / sxx * 3600


def pct(xs: list[float], p: float) -> float | None:
    if not xs:
        return None
    s = sorted(xs)
    return s[min(len(s) - 1, max(0, round(p / 100 * (len(s) - 1))))]


def median_of(samples: list[dict], key: str, lo: float, hi: float) -> float | None:
    xs = [s[key] for s in samples if lo <= s["t"] <= hi and s.get(key) is not None]
    return statistics.median(xs) if xs else None


def marker_figures(markers: list, writes_end: float) -> dict:
    """Each heartbeat's latency (its write to the commit that brought it into the target)
    from minute 2 on: percentiles, slope, the two halves' medians."""
    if not markers:
        return {}
    t0 = markers[0][0]
    pts = [(t - t0, lat) for t, lat in markers if START <= t - t0 <= writes_end]
    xs = [lat for _, lat in pts]
    mid = (START + writes_end) / 2
    return {"n": len(xs), "p50": pct(xs, 50), "p95": pct(xs, 95), "p99": pct(xs, 99),
            "max": max(xs, default=None), "slope_per_h": slope_per_hour(pts),
            "first_half_p50": pct([x for t, x in pts if t < mid], 50),
            "second_half_p50": pct([x for t, x in pts if t >= mid], 50),
            "last5_p95": pct([x for t, x in pts if t >= writes_end - 300], 95)}


def summarize(samples: list[dict], writes_end: float, caught_up: dict,
              markers: list | None = None) -> dict:
    """The figures of the run: memory start/end/slope, lag percentiles and slope, CPU per
    1,000 changes over the steady part, load."""
    steady = [s for s in samples if START <= s["t"] <= writes_end]
    end_lo = max(START, writes_end - 300)
    out: dict = {"samples": len(samples), "steady_samples": len(steady),
                 "markers": marker_figures(markers or [], writes_end)}
    for key in ("pss", "rss", "pss_jvm", "pss_cli", "pss_py"):
        out[key] = {
            "start": median_of(samples, key, START, min(300.0, writes_end)),
            "end": median_of(samples, key, end_lo, writes_end),
            "max": max((s[key] for s in samples if s.get(key) is not None), default=None),
            "slope_mb_h": slope_per_hour([(s["t"], s[key]) for s in steady
                                          if s.get(key) is not None]),
            # a leak climbs in both halves; a process settling into its size, less and less
            "late_slope_mb_h": slope_per_hour([(s["t"], s[key]) for s in steady
                                               if s.get(key) is not None
                                               and s["t"] >= (START + writes_end) / 2])}
    procs = [s for s in steady if s.get("py_procs") is not None]
    if procs:
        out["py_procs"] = {"min": min(s["py_procs"] for s in procs),
                           "max": max(s["py_procs"] for s in procs),
                           "largest_start": median_of(procs, "py_max", START,
                                                      min(300.0, writes_end)),
                           "largest_end": median_of(procs, "py_max", end_lo, writes_end),
                           "largest_max": max(s["py_max"] for s in procs)}
    heap = [s for s in steady if s.get("jvm_heap_mb") is not None]
    if heap:
        out["jvm_heap"] = {"start": heap[0]["jvm_heap_mb"], "end": heap[-1]["jvm_heap_mb"],
                           "old_start": heap[0]["jvm_old_mb"], "old_end": heap[-1]["jvm_old_mb"],
                           "old_slope_mb_h": slope_per_hour([(s["t"], s["jvm_old_mb"])
                                                             for s in heap])}
    for key in ("lag_s", "lag_bytes", "emit_lag_s"):
        xs = [s[key] for s in steady if s.get(key) is not None]
        out[key] = {"p50": pct(xs, 50), "p95": pct(xs, 95), "max": max(xs, default=None),
                    "slope_per_h": slope_per_hour([(s["t"], s[key]) for s in steady
                                                   if s.get(key) is not None]),
                    "first_half_p50": pct([s[key] for s in steady if s.get(key) is not None
                                           and s["t"] < (START + writes_end) / 2], 50),
                    "second_half_p50": pct([s[key] for s in steady if s.get(key) is not None
                                            and s["t"] >= (START + writes_end) / 2], 50)}
    first = steady[0] if steady else samples[0]
    changes = caught_up["changes"] - first["changes"]
    cpu = caught_up["cpu_s"] - first["cpu_s"]
    out["cpu"] = {"from_t": first["t"], "to_t": caught_up["t"], "cpu_s": cpu,
                  "changes": changes,
                  "per_1000": cpu / changes * 1000 if changes else None,
                  "cores": cpu / (caught_up["t"] - first["t"]) if caught_up["t"] > first["t"]
                  else None}
    loads = [s["load1"] for s in steady] or [s["load1"] for s in samples]
    out["load"] = {"median": statistics.median(loads), "min": min(loads), "max": max(loads)}
    return out


def _f(x, fmt: str = "{:,.0f}", none: str = "-") -> str:
    return none if x is None else fmt.format(x)


def render(meta: dict, fig: dict, samples: list[dict], begin: str, end: str) -> str:
    m = meta["machine"]
    w = meta["writer"]
    mins = meta["minutes"]
    lines = [begin, "", "## The 30-minute soak (issue 31)" if mins >= 30 else
             f"## The soak, {mins:g} minutes (issue 31)", "",
             f"`{meta['command']}`, run {meta['started']} (UTC), server {meta['server']}. "
             f"`sparkcdc run pipeline.yaml --no-progress --metrics-port N` (continuous, the "
             "whole process: the CLI, its JVM and Python workers) from a table of "
             f"{meta['rows']:,} rows and 11 columns and three small tables (customers, "
             f"settings, heartbeat) into Delta on local disk, trigger interval "
             f"{meta['trigger']}; a writer started with it at {meta['rate']:,} row changes/s "
             "(transactions of 1-9 changes: 60% updates, 20% inserts, 20% deletes, now and "
             "then a small table; a heartbeat row a second) for "
             f"{mins:g} minutes. Every {meta['every']:g} s: the tree's RSS and PSS and "
             "CPU-seconds (bench/proctree.py), the lag. Machine: "
             f"{m['cpu']}, {m['cores']} cores, {m['memory_gb']} GB; "
             + ", ".join(f"{k} {v}" for k, v in m["versions"].items()) + ".", "",
             (f"Writer: {w['changes']:,} row changes in {w['transactions']:,} transactions "
             f"({w['updates']:,} updates, {w['inserts']:,} inserts, {w['deletes']:,} "
             f"deletes, {w['small']:,} small-table updates, {w['heartbeats']:,} heartbeats), "
             f"{w['changes'] / meta['writes_s']:,.0f}/s; at most {w['behind_s']:.1f} s behind "
             f"its pace. Caught up {meta['catchup_s']:.1f} s after the writer stopped; stopped "
             f"by SIGTERM in {meta['stop_s']:.1f} s, exit {meta['rc']}. Target = source: "
             f"{meta['check']}."), "",
             "| figure | value |", "|---|---:|"]
    p, r = fig["pss"], fig["rss"]
    lines += [
        f"| PSS of the tree, minutes 2-5 median | {_f(p['start'])} MB |",
        f"| PSS, last 5 minutes median | {_f(p['end'])} MB |",
        f"| PSS slope from minute 2 | {_f(p['slope_mb_h'], '{:+,.0f}')} MB/hour |",
        (f"| PSS slope over the second half | {_f(p.get('late_slope_mb_h'), '{:+,.0f}')} "
         "MB/hour |"),
        (f"| RSS, minutes 2-5 / last 5 / slope | {_f(r['start'])} / {_f(r['end'])} MB / "
        f"{_f(r['slope_mb_h'], '{:+,.0f}')} MB/hour |")]
    for key, name in (("pss_jvm", "the JVM"), ("pss_cli", "the CLI (Python driver)"),
                      ("pss_py", "Spark's Python processes")):
        q = fig[key]
        lines.append(f"| PSS of {name}: start / end / slope (second half) | "
                     f"{_f(q['start'])} / {_f(q['end'])} MB / "
                     f"{_f(q['slope_mb_h'], '{:+,.0f}')} "
                     f"({_f(q.get('late_slope_mb_h'), '{:+,.0f}')}) MB/hour |")
    if "py_procs" in fig:
        n = fig["py_procs"]
        lines.append(f"| Spark's Python processes: how many; the largest one's PSS start / end "
                     f"/ max | {n['min']}-{n['max']}; {_f(n['largest_start'])} / "
                     f"{_f(n['largest_end'])} / {_f(n['largest_max'])} MB |")
    if "jvm_heap" in fig:
        h = fig["jvm_heap"]
        lines.append(f"| JVM heap used (jstat): first / last; old gen first / last / slope | "
                     f"{_f(h['start'])} / {_f(h['end'])} MB; {_f(h['old_start'])} / "
                     f"{_f(h['old_end'])} MB / {_f(h['old_slope_mb_h'], '{:+,.0f}')} MB/hour |")
    ls, lb, le = fig["lag_s"], fig["lag_bytes"], fig["emit_lag_s"]
    mk = fig.get("markers") or {}
    if mk:
        lines += [
            (f"| each heartbeat's write to its commit in the target ({mk['n']:,} from minute "
             f"2): p50 / p95 / p99 / max | {_f(mk['p50'], '{:.1f}')} / "
             f"{_f(mk['p95'], '{:.1f}')} / {_f(mk['p99'], '{:.1f}')} / "
             f"{_f(mk['max'], '{:.1f}')} s |"),
            (f"| its slope; p50 first / second half; p95 of the last 5 minutes | "
             f"{_f(mk['slope_per_h'], '{:+.1f}')} s/hour; {_f(mk['first_half_p50'], '{:.1f}')} "
             f"/ {_f(mk['second_half_p50'], '{:.1f}')} s; {_f(mk['last5_p95'], '{:.1f}')} s |")]
    lines += [
        (f"| lag sampled every 10 s (now - newest heartbeat in the target): p50 / p95 / "
         f"max | {_f(ls['p50'], '{:.1f}')} / "
        f"{_f(ls['p95'], '{:.1f}')} / {_f(ls['max'], '{:.1f}')} s |"),
        (f"| sampled lag's slope; p50 first / second half | "
        f"{_f(ls['slope_per_h'], '{:+.1f}')} s/hour; {_f(ls['first_half_p50'], '{:.1f}')} / "
        f"{_f(ls['second_half_p50'], '{:.1f}')} s |"),
        (f"| lag, binlog bytes (`status`): p50 / p95 / max | {_f(lb['p50'])} / "
        f"{_f(lb['p95'])} / {_f(lb['max'])} B |"),
        (f"| emit lag (metrics): p50 / p95 / max | {_f(le['p50'], '{:.1f}')} / "
        f"{_f(le['p95'], '{:.1f}')} / {_f(le['max'], '{:.1f}')} s |")]
    c = fig["cpu"]
    lines += [
        (f"| CPU-seconds of the tree per 1,000 changes (minute {c['from_t'] / 60:.0f} to caught "
        f"up) | {_f(c['per_1000'], '{:.2f}')} ({c['cpu_s']:,.0f} CPU-s for {c['changes']:,} "
        f"changes; {_f(c['cores'], '{:.2f}')} cores) |"),
        (f"| load average (1 min) from minute 2: median (min-max) | {fig['load']['median']:.1f} "
        f"({fig['load']['min']:.1f}-{fig['load']['max']:.1f}) |"), "",
        "Along the run (the sample nearest each minute named):", "",
        ("| minute | PSS MB | RSS MB | JVM PSS | CLI PSS | Python PSS | lag s | lag bytes | "
        "load | changes |"),
        "|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|"]
    marks = [0.5, *range(1, int(mins) + 1)] if mins < 10 else [0.5, 2, *range(5, int(mins) + 1, 5)]
    for mk in marks:
        s = min(samples, key=lambda x: abs(x["t"] - mk * 60))
        lines.append(f"| {s['t'] / 60:.1f} | {_f(s['pss'])} | {_f(s['rss'])} | "
                     f"{_f(s.get('pss_jvm'))} | {_f(s.get('pss_cli'))} | {_f(s.get('pss_py'))} | "
                     f"{_f(s.get('lag_s'), '{:.1f}')} | {_f(s.get('lag_bytes'))} | "
                     f"{s['load1']:.1f} | {s['changes']:,} |")
    lines += ["", end]
    return "\n".join(lines)
