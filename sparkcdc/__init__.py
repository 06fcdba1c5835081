"""sparkcdc: change data capture for MySQL and MariaDB on Apache Spark.

Rooms, with one-way doors: ``sparkcdc.core`` (the algorithm; no Spark, no drivers),
``sparkcdc.mysql`` (the dialect; drivers, no Spark), ``sparkcdc.spark`` (the data source).
"""

__version__ = "0.1.0"
