"""Which PySpark sparkcdc runs on, and one clear error where it is too old.

The stream reader plans each micro-batch from the offset of the one before: the snapshot's
split assigner travels inside the offset, and ``latestOffset(start, limit)`` is where the
next chunks are taken and the batch is sized. Spark hands a Python stream reader that start
offset and a read limit, and runs it under ``Trigger.AvailableNow``, only since 4.2 (the
admission-control API of ``pyspark.sql.streaming.datasource``). Before 4.2,
``latestOffset()`` takes no arguments, so a restarted query could not know where its
assigner stood. There is no degraded mode worth having: an older PySpark is refused here,
with the versions, before anything is read.
"""

from __future__ import annotations

import importlib.util
import re

from sparkcdc.errors import UnsupportedSpark

OLDEST = (4, 2)  # the stream reader's start offset and read limit (admission control)
NEWEST_TESTED = (4, 3)  # pyproject's upper bound is the next minor release


def pyspark_version() -> tuple[int, int]:
    """The installed PySpark's ``(major, minor)``."""
    import pyspark

    m = re.match(r"(\d+)\.(\d+)", pyspark.__version__)
    if not m:  # a build with an odd version string: judged by its API alone
        return NEWEST_TESTED
    return int(m.group(1)), int(m.group(2))


def require_pyspark() -> None:
    """Raise ``UnsupportedSpark`` if this PySpark cannot run sparkcdc's stream reader."""
    have = pyspark_version()
    api = importlib.util.find_spec("pyspark.sql.streaming.datasource") is not None
    if have >= OLDEST and api:
        return
    import pyspark

    raise UnsupportedSpark(
        f"sparkcdc needs PySpark {OLDEST[0]}.{OLDEST[1]} or newer, and this environment has "
        f"{pyspark.__version__}: its stream reader plans each batch from the previous "
        f"offset under a read limit (the Python data source admission-control API, new in "
        f"Spark {OLDEST[0]}.{OLDEST[1]})",
        fix=f"pip install 'pyspark>={OLDEST[0]}.{OLDEST[1]},<{NEWEST_TESTED[0]}."
            f"{NEWEST_TESTED[1] + 1}' (with delta-spark, PySpark 4.2.0 pairs with "
            f"delta-spark 4.4.1)")
