"""A streaming query in its own process, for crash tests: the parent SIGKILLs or restarts it.

Arguments come as one JSON document on stdin (not argv: the source options hold the
password, and a command line is visible to every user in ``ps``):
  options        source options
  out            directory for the sinks
  crash_batch    if set: the foreachBatch sink writes that batch, then SIGKILLs the process
                 (before Spark records the batch as committed, so a restart must replay it)
  master         Spark master (default local[2]; local[2,3] retries failed tasks)
  continuous     if true: processing-time triggers until killed (fault tests kill it from
                 outside at random points), instead of availableNow
  batch_read     if set: a batch read (spark.read) written as parquet to this directory,
                 instead of the streams

Two queries run side by side on the same source: Spark's parquet file sink, and a
foreachBatch sink that writes every attempt of every batch to its own folder (so replays
can be compared byte for byte). Both use availableNow and exit when caught up.
"""

from __future__ import annotations

import json
import os
import signal
import sys
import time
import uuid


def main() -> None:
    args = json.loads(sys.stdin.read())
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    from pyspark.sql import SparkSession

    import sparkcdc

    spark = (SparkSession.builder.master(args.get("master", "local[2]")).appName("sparkcdc-child")
             .config("spark.ui.enabled", "false")
             .config("spark.sql.shuffle.partitions", "2")
             .config("spark.python.authenticate.socketTimeout", "120s")  # slow starts under load
             .config("spark.sql.session.timeZone", "UTC").getOrCreate())
    spark.sparkContext.setLogLevel("ERROR")
    sparkcdc.register(spark)
    out = args["out"]
    crash_batch = args.get("crash_batch")
    attempt = uuid.uuid4().hex[:8]

    def sink(df, batch_id):
        path = os.path.join(out, "foreach", f"batch={batch_id:05d}", f"attempt={attempt}")
        df.write.mode("overwrite").parquet(path)
        print(f"BATCH {batch_id} {df.count()}", flush=True)
        if crash_batch is not None and batch_id == crash_batch:
            os.kill(os.getpid(), signal.SIGKILL)

    def stream():
        return spark.readStream.format("mysql-cdc").options(**args["options"]).load()

    trigger = ({"processingTime": "500 milliseconds"} if args.get("continuous")
               else {"availableNow": True})
    if args.get("batch_read"):
        (spark.read.format("mysql-cdc").options(**args["options"]).load()
         .write.mode("overwrite").parquet(args["batch_read"]))
    else:
        q_files = (stream().writeStream.format("parquet")
                   .option("checkpointLocation", os.path.join(out, "ckpt-files"))
                   .trigger(**trigger).start(os.path.join(out, "files")))
        # The second query starts once the first has run a batch. Spark's streaming source
        # runner adds its entries to the data source's PythonFunction environment, one Java
        # HashMap that both queries' tasks serialize; a first runner's additions while the
        # other query's task was serialized made that task fail to deserialize
        # (java.io.OptionalDataException in HashMap.readObject; both tasks failed at once,
        # once in a make test-faults run). Later runners only put the same entries again.
        deadline = time.monotonic() + 300
        while q_files.isActive and not q_files.recentProgress and time.monotonic() < deadline:
            time.sleep(0.1)
        q_each = (stream().writeStream.foreachBatch(sink)
                  .option("checkpointLocation", os.path.join(out, "ckpt-foreach"))
                  .trigger(**trigger).start())
        q_each.awaitTermination()
        q_files.awaitTermination()
    print(f"FAILED_TASKS {_failed_tasks(spark)}", flush=True)
    print("DONE", flush=True)
    spark.stop()


def _failed_tasks(spark) -> int:
    """Task attempts that failed (and were retried, or failed the job) in this process."""
    tracker = spark.sparkContext.statusTracker()
    failed = 0
    for job in tracker.getJobIdsForGroup(None):
        info = tracker.getJobInfo(job)
        for stage in (info.stageIds if info else []):
            s = tracker.getStageInfo(stage)
            failed += s.numFailedTasks if s else 0
    return failed


if __name__ == "__main__":
    main()
