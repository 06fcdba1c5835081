"""The soak's last word: each Delta target equals its source table, row for row, every
column, read without sparkcdc's code (the source through pymysql in UTC, the target through
delta-rs' DataFusion scan, which applies deletion vectors).

Values are compared as Python values: a TIMESTAMP (UTC in the target) against the server's
value in a UTC session, DECIMAL as Decimal, DOUBLE exactly (the binlog carries the double).
"""

from __future__ import annotations

import datetime as dt
from pathlib import Path

TABLES = {"orders": "id", "customers": "id", "settings": "k", "heartbeat": "id"}


def _norm(v):
    if isinstance(v, dt.datetime) and v.tzinfo is not None:
        return v.astimezone(dt.timezone.utc).replace(tzinfo=None)
    return v


def source_rows(sb, db: str, table: str, key: str) -> tuple[list[str], dict]:
    with sb.admin_connection(db) as conn, conn.cursor() as cur:
        cur.execute("SET time_zone = '+00:00'")
        cur.execute(f"SELECT * FROM {table} ORDER BY {key}")
        cols = [d[0] for d in cur.description]
        rows = cur.fetchall()
    k = cols.index(key)
    return cols, {r[k]: tuple(_norm(v) for v in r) for r in rows}


def target_rows(path: Path, cols: list[str], key: str) -> dict:
    import pyarrow as pa
    from deltalake import DeltaTable, QueryBuilder

    t = DeltaTable(str(path))
    got = pa.table(QueryBuilder().register("t", t).execute(  # (an arro3 table: to pyarrow)
        "SELECT " + ", ".join(f'"{c}"' for c in cols) + " FROM t").read_all())
    k = cols.index(key)
    out: dict = {}
    dups = 0
    for r in got.to_pylist():
        row = tuple(_norm(r[c]) for c in cols)
        dups += row[k] in out
        out[row[k]] = row
    if dups:
        out["__duplicates__"] = dups
    return out


def compare(sb, lake: Path, db: str, examples: int = 5) -> dict:
    """Per table: rows, missing in the target, extra in it, different; and one summary."""
    per: dict = {}
    equal = True
    for table, key in TABLES.items():
        cols, src = source_rows(sb, db, table, key)
        tgt = target_rows(lake / db / table, cols, key)
        dups = tgt.pop("__duplicates__", 0)
        missing = [k for k in src if k not in tgt]
        extra = [k for k in tgt if k not in src]
        diff = [k for k in src if k in tgt and src[k] != tgt[k]]
        ok = not (missing or extra or diff or dups)
        equal &= ok
        per[table] = {"source_rows": len(src), "target_rows": len(tgt), "equal": ok,
                      "missing": missing[:examples], "extra": extra[:examples],
                      "different": [(repr(src[k]), repr(tgt[k])) for k in diff[:examples]],
                      "n_missing": len(missing), "n_extra": len(extra),
                      "n_different": len(diff), "duplicates": dups}
    summary = ("equal, every column: " if equal else "DIFFERENT: ") + "; ".join(
        f"{t} {r['source_rows']:,} rows" + ("" if r["equal"] else
                                            f" (missing {r['n_missing']}, extra {r['n_extra']},"
                                            f" different {r['n_different']}, duplicates "
                                            f"{r['duplicates']})")
        for t, r in per.items())
    return {"equal": equal, "tables": per, "summary": summary}


def heartbeat_latencies(path: Path) -> list[tuple[float, float]]:
    """Each heartbeat's (write time, seconds from its write to the commit that brought it
    into the target), from the Delta log: commits in order, the rows of each file a commit
    adds, a heartbeat counted at the first commit holding it (compaction adds it again
    later). The commit's time is ``commitInfo.timestamp`` (ms), stamped by the writer of the
    target on the same machine's clock as the heartbeat's."""
    import json
    from urllib.parse import unquote

    import pyarrow.parquet as pq

    seen: set[int] = set()
    out: list[tuple[float, float]] = []
    logs = sorted(p for p in (path / "_delta_log").glob("*.json") if p.stem.isdigit())
    for commit in logs:
        when, adds = None, []
        for line in commit.read_text().splitlines():
            action = json.loads(line)
            if "commitInfo" in action:
                when = action["commitInfo"].get("timestamp")
            elif "add" in action:
                adds.append(unquote(action["add"]["path"]))
        if when is None:
            continue
        for rel in adds:
            t = pq.read_table(path / rel, columns=["id", "sent_us"])
            for i, sent in zip(t.column("id").to_pylist(), t.column("sent_us").to_pylist()):
                if i not in seen:
                    seen.add(i)
                    out.append((sent / 1e6, when / 1e3 - sent / 1e6))
    return sorted(out)
