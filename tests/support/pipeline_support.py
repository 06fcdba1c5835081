"""Helpers shared by the pipeline tests (``sparkcdc.pipeline`` over the sandbox MariaDB)."""

from __future__ import annotations

import os
import random
from pathlib import Path

import deltalake
from sink_support import read_delta

from sparkcdc.pipeline.launch import class_cache

ROOT = Path(__file__).resolve().parents[2]


def tree_env(cache: Path) -> dict[str, str]:
    """The environment of a child Python process that runs this source tree, with its own
    sparkcdc cache folder ``cache`` (the class archive, the warm workers' stand-in)."""
    return {**os.environ, class_cache.CACHE_ENV: str(cache),
            "PYTHONPATH": os.pathsep.join(filter(None, [str(ROOT), os.environ.get("PYTHONPATH")]))}


def source_yaml(sb, tables: str, server_ids: int) -> str:
    """A pipeline's ``source:`` block capturing ``tables`` from the sandbox ``sb`` as its CDC
    user (the password from ``${TEST_PW}``), over ``server_ids`` random server ids."""
    o = sb.source_options()
    base = random.randint(100_000, 3_000_000_000)
    return f"""source:
  type: mysql
  hostname: {o['hostname']}
  port: {o['port']}
  username: {o['username']}
  password: ${{TEST_PW}}
  tables: {tables}
  server-id: {base}-{base + server_ids - 1}
"""


def delta_rows_by_key(tmp_path, db, table) -> dict:
    """A Delta target under ``tmp_path/lake`` by its ``id``: the other columns in name order
    (no key held twice)."""
    t = read_delta(deltalake.DeltaTable(str(tmp_path / "lake" / db / table)))
    rows = t.to_pylist()
    assert len(rows) == len({r["id"] for r in rows}), f"{table}: a key is held twice"
    return {r["id"]: tuple(v for k, v in sorted(r.items()) if k != "id") for r in rows}


def source_rows_by_key(mariadb, db, table) -> dict:
    """The source table the same way, to compare with ``delta_rows_by_key``."""
    cols = [r[0] for r in mariadb.query(
        "SELECT column_name FROM information_schema.columns WHERE table_schema = %s AND "
        "table_name = %s ORDER BY column_name", (db, table))]
    other = [c for c in cols if c != "id"]
    got = mariadb.query(f"SELECT id, {', '.join(other)} FROM `{db}`.`{table}`")
    return {r[0]: tuple(r[1:]) for r in got}
