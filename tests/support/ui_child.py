"""A Spark session with its web UI on, for the password test: runs a batch read, a stream and
a failing read of the ``mysql-cdc`` source with Python logging at DEBUG, then crawls the UI
(HTML pages and the REST API) and writes every page it fetched to ``<out>/ui/``.

The source options arrive as JSON on stdin (never on the command line); argv[1] is ``out``.
"""

from __future__ import annotations

import json
import logging
import os
import re
import sys
import urllib.parse
import urllib.request
from collections import deque


def crawl(base: str, out_dir: str, app_id: str, limit: int = 400) -> int:
    """Breadth-first over the UI's links (no kill links, no static files) plus the REST API."""
    os.makedirs(out_dir, exist_ok=True)
    api = f"{base}/api/v1/applications/{app_id}"
    seeds = [f"{base}/jobs/", f"{base}/stages/", f"{base}/SQL/", f"{base}/environment/",
             f"{base}/executors/", f"{base}/StreamingQuery/", f"{base}/storage/",
             f"{base}/api/v1/applications", f"{api}/jobs", f"{api}/stages?details=true",
             f"{api}/environment", f"{api}/executors", f"{api}/allexecutors",
             f"{api}/sql?details=true&planDescription=true", f"{api}/storage/rdd"]
    # pages the UI's tables link to are filled in by JavaScript from the REST API: add them
    for kind, page in (("jobs", "jobs/job/?id={jobId}"),
                       ("stages", "stages/stage/?id={stageId}&attempt={attemptId}"),
                       ("sql", "SQL/execution/?id={id}")):
        try:
            with urllib.request.urlopen(f"{api}/{kind}", timeout=30) as r:
                for item in json.loads(r.read()):
                    seeds.append(f"{base}/" + page.format(**item))
        except Exception as e:  # noqa: BLE001 - a failed REST list is printed, the crawl goes on
            print(f"REST {kind}: {e}", flush=True)
    seen, queue, n = set(seeds), deque(seeds), 0
    while queue and n < limit:
        url = queue.popleft()
        try:
            with urllib.request.urlopen(url, timeout=30) as r:
                body = r.read().decode("utf-8", "replace")
        except Exception as e:  # noqa: BLE001 - a page that fails is recorded, not fatal
            body = f"ERROR {e}"
        n += 1
        with open(os.path.join(out_dir, f"{n:04d}.txt"), "w") as f:
            f.write(url + "\n" + body)
        for href in re.findall(r'href="([^"#]+)"', body):
            href = href.replace("&amp;", "&")
            u = urllib.parse.urljoin(url, href)
            if (u.startswith(base) and "/static/" not in u and "kill" not in u
                    and "/logPage" not in u and u not in seen):
                seen.add(u)
                queue.append(u)
    return n


def main() -> None:
    out = sys.argv[1]
    logging.basicConfig(level=logging.DEBUG)  # sparkcdc's own Python logs too
    # py4j at DEBUG logs every JVM call with its arguments (.option("password", ...)
    # included); the CLI keeps it at WARNING, docs/operations.md says why
    logging.getLogger("py4j").setLevel(logging.INFO)
    opts = json.loads(sys.stdin.read())
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    os.environ["SPARK_LOCAL_IP"] = "127.0.0.1"  # the UI on loopback only
    from pyspark.sql import SparkSession

    import sparkcdc

    spark = (SparkSession.builder.master("local[2]").appName("sparkcdc-ui-child")
             .config("spark.ui.enabled", "true").config("spark.ui.port", "0")
             .config("spark.ui.showConsoleProgress", "false")
             .config("spark.sql.shuffle.partitions", "2")
             .config("spark.python.authenticate.socketTimeout", "120s")
             .config("spark.sql.session.timeZone", "UTC").getOrCreate())
    spark.sparkContext.setLogLevel("INFO")  # (PySpark's shell filter still holds Spark's
    # own INFO lines back; Python's loggers, sparkcdc's included, log at DEBUG)
    sparkcdc.register(spark)
    # py4j logs at INFO only when a connection closes, which may not happen in a short run;
    # this line proves the Python log reaches the captured output either way
    logging.getLogger("sparkcdc.ui_child").info("registered the source")
    rows = spark.read.format("mysql-cdc").options(**opts).load().collect()
    print(f"ROWS {len(rows)}", flush=True)
    q = (spark.readStream.format("mysql-cdc").options(**opts).load()
         .writeStream.format("parquet").option("checkpointLocation", f"{out}/ckpt")
         .trigger(availableNow=True).start(f"{out}/data"))
    q.awaitTermination(600)
    print(f"STREAM {q.exception()}", flush=True)
    try:  # an error path too: a user the server refuses
        spark.read.format("mysql-cdc").options(**{**opts, "username": "nobody"}).load()
    except Exception as e:  # noqa: BLE001 - the error path itself: its message is the output
        print(f"FAILED {str(e).splitlines()[0][:300]}", flush=True)
    base = spark.sparkContext.uiWebUrl.rstrip("/")
    pages = crawl(base, f"{out}/ui", spark.sparkContext.applicationId)
    print(f"PAGES {pages}", flush=True)
    spark.stop()


if __name__ == "__main__":
    main()
