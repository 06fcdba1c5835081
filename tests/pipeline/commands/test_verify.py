"""``sparkcdc verify`` on both source servers (MariaDB 10.11 and MySQL 9.7, which has no
MD5()): a pipeline into Delta takes a snapshot and then changes of every kind, verify says the
target equals its source, and a target that lost a row and holds a wrong value is caught key
by key. The hash itself is tested in tests/mysql/test_checksums.py."""

from __future__ import annotations

import json

import deltalake
from pipeline_support import source_yaml

from sparkcdc.pipeline.commands.verify import TargetResult, Verifier, render
from sparkcdc.pipeline.definition import parse_pipeline
from sparkcdc.pipeline.run.loop import Runner


def _row(i: int) -> tuple:
    doc = json.dumps({"n": i, "f": 104.66666666666667, "tags": ["a", str(i)]})
    return (i, f"v{i}", doc, f"{i}.0000", f"-00:00:0{i % 10}.5", f"2024-01-02 03:04:{i % 60:02d}.5",
            bytes([i % 256, 0]))


def test_verify_a_delta_target_on_both_servers(spark, server, server_db, tmp_path):
    db = server_db
    with server.admin_connection(db) as c, c.cursor() as cur:
        cur.execute("SET time_zone = '+00:00'")
        cur.execute("CREATE TABLE t (id INT PRIMARY KEY, v VARCHAR(20), j JSON, d DECIMAL(10,4),"
                    " tm TIME(3), ts TIMESTAMP(6) NULL, b VARBINARY(8), f DOUBLE)")
        cur.executemany("INSERT INTO t VALUES (%s, %s, %s, %s, %s, %s, %s, 0.1)",
                        [_row(i) for i in range(1, 301)])
    text = f"""
{source_yaml(server, db + ".t", 10)}
sink:
  type: delta
  path: {tmp_path}/lake
pipeline:
  name: v
  parallelism: 1
  checkpoint.location: {tmp_path}/ckpt
"""
    defn = parse_pipeline(text, "v.yaml", env={"TEST_PW": server.info.cdc_password})
    Runner(defn, spark, until_caught_up=True).run()  # the snapshot
    with server.admin_connection(db) as c, c.cursor() as cur:
        cur.executemany("INSERT INTO t VALUES (%s, %s, %s, %s, %s, %s, %s, 0.2)",
                        [_row(i) for i in range(301, 351)])
        cur.execute("UPDATE t SET v = CONCAT(v, '!'), j = JSON_SET(j, '$.n', 1.5000) "
                    "WHERE id % 7 = 0")
        cur.execute("DELETE FROM t WHERE id % 11 = 0")
    Runner(defn, spark, until_caught_up=True).run()  # the changes, streamed

    (res,) = Verifier(defn, rows_per_range=100).run()
    assert res.ok, render([res])
    assert res.source_rows == res.target_rows == 350 - 31
    assert res.skipped_columns == ["f"]  # a DOUBLE is not hashed: said, not hidden
    assert len(res.ranges) == 4

    target = deltalake.DeltaTable(str(tmp_path / "lake" / db / "t"))
    target.delete("id = 12")
    target.update(updates={"v": "'tampered'"}, predicate="id = 130")
    (bad,) = Verifier(defn, rows_per_range=100, rechecks=1, catch_up_timeout=0).run()
    assert not bad.ok
    assert bad.missing == [(12,)] and bad.different == [(130,)] and bad.extra == []


def test_render_prints_names_and_keys_as_they_are():
    """Keys, table names and messages are data: a key such as ``[bold]k`` or ``[/]`` is
    printed as it is, not taken as rich markup (which dropped or refused it)."""
    import io

    from rich.console import Console

    out = io.StringIO()
    result = TargetResult(target="lake/[a]", tables=["db.[b]"], key="k",
                          missing=[("[bold]k1",)], extra=[("[/]",)],
                          skipped_columns=["[red]f"])
    assert render([result], console=Console(file=out, width=200)) is False
    text = out.getvalue()
    assert "DIFFERENT lake/[a] <- db.[b]" in text
    assert "missing in the target (1): [bold]k1" in text
    assert "only in the target (1): [/]" in text
    assert "[red]f" in text
    out = io.StringIO()
    render([TargetResult(target="t", tables=["x"], not_verified="no key [x]")],
           console=Console(file=out, width=200))
    assert "no key [x]" in out.getvalue()


def test_status_prints_names_as_they_are():
    """``sparkcdc status``'s table shows a table or target named with brackets as it is."""
    import io

    from rich.console import Console

    from sparkcdc.pipeline.commands.status import TableStatus
    from sparkcdc.pipeline.commands.status import render as render_status

    out = io.StringIO()
    s = TableStatus(table="db.[b]x", target="lake/[bold]t", generation=1, status="active",
                    phase="streaming", chunks_done=1, chunks_total=1, rows=5, batches=2,
                    position={"file": "b.000001", "pos": 4}, writer="driver")
    render_status([s], console=Console(file=out, width=200), note="host [x]:3306")
    text = out.getvalue()
    assert "db.[b]x" in text and "lake/[bold]t" in text and "host [x]:3306" in text
