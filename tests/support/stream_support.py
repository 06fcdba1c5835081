"""Helpers shared by tests that run the ``mysql-cdc`` stream in this process's Spark."""

from __future__ import annotations

from pathlib import Path


def stream_available(spark, options: dict, checkpoint: Path, seen: list) -> None:
    """One ``availableNow`` run of the ``mysql-cdc`` stream from ``checkpoint`` on, its rows
    appended to ``seen`` as dicts; fails if the query failed."""

    def collect(batch, batch_id):
        seen.extend(r.asDict() for r in batch.collect())

    q = (spark.readStream.format("mysql-cdc").options(**options).load()
         .writeStream.foreachBatch(collect)
         .option("checkpointLocation", str(checkpoint))
         .trigger(availableNow=True).start())
    q.awaitTermination(300)
    assert q.exception() is None
