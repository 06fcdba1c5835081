"""A real Structured Streaming query feeding every sink through ``foreachBatch``.

A simulated source table takes random inserts, updates, deletes and key changes; each round
of changes lands as one Parquet file of change rows; a file stream reads one file per
micro-batch and one ``foreachBatch`` applies each batch to all sinks. Then the query
"crashes" after its last batch (its commit is removed from the checkpoint), so Spark re-runs
that batch with the same id on restart; every sink must skip it. Every sink's table must
equal the simulated source table.
"""

from __future__ import annotations

import os
import random

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from sink_support import SINK_IDS, D, TargetFactory, arrow_schema, table_rows

from sparkcdc.apply import apply_changes

DDL = "id int, name string, qty long, price decimal(10,2)"
CHANGE_SCHEMA = pa.schema([
    ("id", pa.int32()), ("name", pa.string()), ("qty", pa.int64()),
    ("price", pa.decimal128(10, 2)), ("_change_type", pa.string()), ("_database", pa.string()),
    ("_table", pa.string()), ("_op_ts", pa.timestamp("us", tz="UTC")),
    ("_seq", pa.decimal128(38, 0))])


def simulate(rounds: int, per_round: int, seed: int = 7):
    """Rounds of change rows and the table they leave behind."""
    rng = random.Random(seed)
    table: dict[int, dict] = {}
    seq, next_id, out = 0, 1, []

    def row(i, r, kind):
        nonlocal seq
        seq += 1
        return {"id": i, **r, "_change_type": kind, "_database": "shop", "_table": "orders",
                "_op_ts": None, "_seq": D(seq)}

    for _ in range(rounds):
        rows = []
        for _ in range(per_round):
            p = rng.random()
            if p < 0.35 or not table:
                r = {"name": rng.choice(["a", "b", "ü😀", None]), "qty": rng.randrange(-5, 10**12),
                     "price": D(rng.randrange(-10**8, 10**8)) / 100}
                table[next_id] = r
                rows.append(row(next_id, r, "insert"))
                next_id += 1
            elif p < 0.75:
                i = rng.choice(list(table))
                old, new = table[i], {**table[i], "qty": rng.randrange(0, 1000),
                                      "name": rng.choice(["x", None, "y'z"])}
                rows += [row(i, old, "update_preimage"), row(i, new, "update_postimage")]
                table[i] = new
            elif p < 0.9:
                i = rng.choice(list(table))
                rows.append(row(i, table.pop(i), "delete"))
            else:  # a primary-key change: delete of the old key, insert of the new one
                i = rng.choice(list(table))
                r = table.pop(i)
                rows.append(row(i, r, "delete"))
                table[next_id] = r
                rows.append(row(next_id, r, "insert"))
                next_id += 1
        rng.shuffle(rows)  # within a micro-batch, only _seq orders the rows
        out.append(rows)
    expected = [{"id": i, **table[i]} for i in sorted(table)]
    return out, expected


@pytest.mark.long
def test_stream_into_every_sink_and_replay(spark, request, tmp_path):
    rounds, expected = simulate(rounds=4, per_round=150)
    src = tmp_path / "changes"
    src.mkdir()
    for n, rows in enumerate(rounds):
        path = src / f"part-{n:03d}.parquet"
        pq.write_table(pa.Table.from_pylist(rows, schema=CHANGE_SCHEMA), path)
        os.utime(path, (1_700_000_000 + n, 1_700_000_000 + n))  # the file source's order

    factories = [TargetFactory(s, request, tmp_path) for s in SINK_IDS]
    targets = [f("orders_" + f.sink_id.replace("-", "_")) for f in factories]
    appliers = [apply_changes(t, keys=["id"]) for t in targets]
    seen: list[tuple[int, int]] = []

    def fan_out(df, batch_id):
        df = df.persist()
        try:
            seen.append((batch_id, df.count()))
            for a in appliers:
                a(df, batch_id)
        finally:
            df.unpersist()

    schema = spark.createDataFrame([], DDL + ", _change_type string, _database string, "
                                   "_table string, _op_ts timestamp, _seq decimal(38,0)").schema
    ckpt = str(tmp_path / "ckpt")

    def run():
        q = (spark.readStream.schema(schema).option("maxFilesPerTrigger", 1).parquet(str(src))
             .writeStream.foreachBatch(fan_out).option("checkpointLocation", ckpt)
             .trigger(availableNow=True).start())
        q.awaitTermination(300)
        assert q.exception() is None, q.exception()

    try:
        run()
        assert [b for b, _ in seen] == [0, 1, 2, 3]
        assert [n for _, n in seen] == [len(r) for r in rounds]
        # crash after the last batch was applied but before Spark committed it
        for name in ("3", ".3.crc"):
            os.remove(os.path.join(ckpt, "commits", name))
        run()
        assert [b for b, _ in seen] == [0, 1, 2, 3, 3]
        for a in appliers:
            assert [r.batch_id for r in a.results] == [0, 1, 2, 3, 3]
            assert a.results[-1].skipped and not any(r.skipped for r in a.results[:-1])

        want = arrow_schema(spark, DDL)
        for t in targets:
            got = table_rows(t, spark, ["id"], schema=want)
            assert got == expected, f"{t.type} sink differs from the source table"
            assert t.last_batch_id() == 3
    finally:
        for f in factories:
            f.close()
