"""sparkcdc: change data capture for MySQL and MariaDB on Apache Spark.

Rooms, with one-way doors: ``sparkcdc.core`` (the algorithm; no Spark, no drivers),
``sparkcdc.mysql`` (the dialect; drivers, no Spark), ``sparkcdc.spark`` (the data source).

    import sparkcdc
    sparkcdc.register(spark)
    spark.readStream.format("mysql-cdc").option("hostname", ...).load()
"""

from __future__ import annotations

__version__ = "0.1.0"


def register(spark) -> None:
    """Register the ``mysql-cdc`` data source with a SparkSession."""
    from sparkcdc.spark.source import register as _register

    _register(spark)


def read_snapshot(spark, **options: str):
    """A consistent, lock-free snapshot of the captured tables as a DataFrame, and the
    binlog offset it is consistent at (start a stream there with
    ``scan.startup.mode=specific-offset`` to continue exactly from it)."""
    from sparkcdc.mysql.port import MySQLSource, SourceConfig

    source = MySQLSource(SourceConfig.parse(options))
    tables, flavor = source.discover()
    with source.dialect(flavor, tables) as d:
        as_of = d.current_offset()
    register(spark)
    reader = spark.read.format("mysql-cdc").options(**options)
    df = reader.option("scan.snapshot.as-of", as_of.to_json()).load()
    return df, as_of
