"""``reduce_changes`` (the driver's Arrow planning) gives exactly what ``plan_changes``
(Spark's) gives, on random change streams (SCD type 1 and 2): inserts, updates, deletes, a
key deleted and inserted again, composite keys of several types."""

from __future__ import annotations

import random
from decimal import Decimal

import pyarrow as pa
import pytest

from sparkcdc.apply import ApplySpec, collect_changes, reduce_changes

KINDS = ("insert", "update_preimage", "update_postimage", "delete")


def _stream(seed: int, n: int, keys: int) -> pa.Table:
    """A plausible change stream: per key, insert, then updates (pre + post), a delete, and
    maybe an insert again; interleaved across keys; unique, increasing _seq."""
    rng = random.Random(seed)
    rows, seq = [], 1000
    alive: dict[tuple, bool] = {}
    for _ in range(n):
        k = (rng.randrange(keys), rng.choice(["a", "b", "ü"]))
        seq += rng.randrange(1, 5)
        v = rng.randrange(10**6)
        if not alive.get(k, rng.random() < 0.3):  # some keys were there before the batch
            alive[k] = True
            rows.append((*k, v, "insert", seq))
        elif rng.random() < 0.2:
            alive[k] = False
            rows.append((*k, v, "delete", seq))
        else:
            alive[k] = True
            rows.append((*k, v - 1, "update_preimage", seq))
            rows.append((*k, v, "update_postimage", seq + 1))
            seq += 1
    rng.shuffle(rows)  # arrival order is not sequence order
    return pa.table({
        "id": pa.array([r[0] for r in rows], pa.int64()),
        "tag": pa.array([r[1] for r in rows], pa.string()),
        "v": pa.array([r[2] for r in rows], pa.int32()),
        "_change_type": pa.array([r[3] for r in rows], pa.string()),
        "_database": pa.array(["db"] * len(rows)),
        "_table": pa.array(["t"] * len(rows)),
        "_op_ts": pa.nulls(len(rows), pa.timestamp("us", tz="UTC")),
        "_seq": pa.array([Decimal(r[4]) for r in rows], pa.decimal128(38, 0)),
    })


def _sorted(t: pa.Table, keys) -> list[dict]:
    extra = [c for c in ("__op", "__START_AT") if c in t.column_names]
    return t.sort_by([(k, "ascending") for k in (*keys, *extra)]).to_pylist()


@pytest.mark.parametrize("scd", [1, 2], ids=["scd1", "scd2"])
@pytest.mark.parametrize("keys", [("id",), ("tag", "id")], ids=["one-key", "composite"])
@pytest.mark.parametrize("seed", [1, 2, 3])
def test_same_plan_as_spark(spark, seed, keys, scd):
    t = _stream(seed, 3000, 400)
    spec = ApplySpec(keys=keys, stored_as_scd_type=scd)
    ours = reduce_changes(t, spec)
    theirs = collect_changes(spark.createDataFrame(t), spec)
    assert ours.columns == theirs.columns and ours.keys == theirs.keys
    assert _sorted(ours.table, keys) == _sorted(theirs.table.cast(ours.table.schema), keys)
    counts = ours.counts()
    if scd == 1:
        assert 0 < counts["delete"] < ours.num_rows
        assert 0 < sum(ours.table["__new"].to_pylist()) < ours.num_rows
    else:
        assert 0 < counts["close"] < counts["version"]


def test_empty_batch_and_unsupported_specs():
    t = _stream(4, 0, 1)
    empty = reduce_changes(t, ApplySpec(keys=("id",)))
    assert empty.num_rows == 0 and empty.columns == ("id", "tag", "v")
    assert reduce_changes(t, ApplySpec(keys=("id",), stored_as_scd_type=2)).num_rows == 0
    from sparkcdc.errors import ConfigError

    with pytest.raises(ConfigError, match="collect_changes"):
        reduce_changes(t, ApplySpec(keys=("id",), ignore_null_updates=True))
    with pytest.raises(ConfigError, match="mark_changes"):  # SQL rules need their markers
        reduce_changes(t, ApplySpec(keys=("id",), apply_as_deletes="v < 0"))


@pytest.mark.parametrize("keys", [("id",), ("tag", "id")], ids=["one-key", "composite"])
def test_inserts_of_distinct_keys_plan_as_spark_does(spark, keys):
    """A snapshot chunk's rows (every row an insert of its own key) skip the sort and
    group-by, and plan the same as Spark; a repeated key takes the full reduction."""
    t = _stream(5, 3000, 400)
    t = t.filter(pa.compute.equal(t["_change_type"], "insert"))
    seen, keep = set(), []
    for i, r in enumerate(t.select(list(keys)).to_pylist()):
        k = tuple(r.values())
        if k not in seen:
            seen.add(k)
            keep.append(i)
    distinct = t.take(keep)
    repeated = pa.concat_tables([distinct, distinct.slice(0, 5).set_column(
        7, "_seq", pa.array([Decimal(10**9 + i) for i in range(5)], pa.decimal128(38, 0)))])
    spec = ApplySpec(keys=keys)
    for rows in (distinct, repeated):
        ours = reduce_changes(rows, spec)
        theirs = collect_changes(spark.createDataFrame(rows), spec)
        assert ours.table.schema == theirs.table.cast(ours.table.schema).schema
        assert _sorted(ours.table, keys) == _sorted(theirs.table.cast(ours.table.schema), keys)
    assert reduce_changes(distinct, spec).num_rows == distinct.num_rows
    assert reduce_changes(repeated, spec).num_rows == distinct.num_rows
    # the shortcut's rows are typed as the full reduction's
    assert (reduce_changes(distinct, spec).table.schema
            == reduce_changes(repeated, spec).table.schema)
