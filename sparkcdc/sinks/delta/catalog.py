"""A Delta target named in a Spark catalog as well as by its path.

delta-rs writes the table at its path, as for any Delta target, and a Spark catalog (the
session's Hive metastore, Glue, or another catalog that keeps Delta tables by location)
names it, so readers say ``spark.table("lake.orders")`` rather than ``delta.`<path>```.
The entry holds the name, the location and the format only: Delta keeps the schema in its
log, so a column delta-rs adds later reaches every reader without touching the catalog.

Spark makes the entry itself (``CREATE TABLE ... USING delta LOCATION``), so the pipeline's
Spark session needs Delta Lake. The table is external: dropping it in Spark keeps its files.

The entry is checked when the table joins a pipeline, before anything is written. An entry
of that name at another location, or of another format, is one error naming both, and
nothing is written: one name for two tables is how a reader silently loses data. The entry
is made once the table exists (after its first write, or at once when it exists already).
"""

from __future__ import annotations

import os
import re

from sparkcdc.errors import ConfigError
from sparkcdc.sinks.delta.config import DeltaConfig

DELTA_IN_SPARK = (
    "give the pipeline's Spark session Delta Lake built for its Spark version, in the YAML's "
    "spark section: spark.jars (or spark.jars.packages) with delta-spark, "
    "spark.sql.extensions: io.delta.sql.DeltaSparkSessionExtension and "
    "spark.sql.catalog.spark_catalog: org.apache.spark.sql.delta.catalog.DeltaCatalog "
    "(delta-spark 4.4 runs on PySpark 4.2); or leave out the sink's 'catalog' and read the "
    "tables by path")


def _ident(*parts: str) -> str:
    return ".".join("`" + p.replace("`", "``") + "`" for p in parts)


def full_name(cfg: DeltaConfig) -> str:
    assert cfg.catalog is not None and cfg.catalog_table is not None
    return _ident(cfg.catalog, *cfg.catalog_table)


def same_location(a: str, b: str) -> bool:
    """Whether two spellings of a location name one place (Spark writes a local path as
    ``file:/x``, delta-rs takes ``/x``)."""
    return _plain(a) == _plain(b)


def _plain(loc: str) -> str:
    loc = loc.rstrip("/")
    if loc.startswith("file:"):
        return re.sub(r"^/+", "/", loc[len("file:"):])
    if "://" not in loc:
        return os.path.abspath(loc)
    return loc


def entry(spark, cfg: DeltaConfig) -> tuple[str, str] | None:
    """The catalog's entry for the target: its location and format, or None."""
    name = full_name(cfg)
    if not spark.catalog.tableExists(name):
        return None
    info = {r.col_name: r.data_type for r in spark.sql(f"DESCRIBE TABLE EXTENDED {name}")
            .collect()}
    return str(info.get("Location") or ""), str(info.get("Provider") or "").lower()


def publish(spark, cfg: DeltaConfig, exists: bool) -> bool:
    """Check the catalog's entry for the target (``ConfigError`` if it names another table)
    and make it when the table ``exists`` and the entry does not. Returns whether the name
    is in place; a target not created yet is named after its first write."""
    name = full_name(cfg)
    found = entry(spark, cfg)
    if found is not None:
        where, fmt = found
        if fmt != "delta":
            raise ConfigError(
                f"{name} in Spark's catalog is a {fmt or 'non-Delta'} table, and this "
                f"pipeline writes a Delta table under that name ({cfg.path})",
                fix="route the source table to another name (route: sink-table), or drop "
                    "that catalog entry")
        if not same_location(where, cfg.path):
            raise ConfigError(
                f"{name} in Spark's catalog is the Delta table at {where}, and this pipeline "
                f"writes that target at {cfg.path}",
                fix="set the sink's path so that <path>/<database>/<table> is that location, "
                    "route the source table to another name, or drop the catalog entry (an "
                    "external table's files stay)")
        return True
    if not exists:
        _check_delta(spark, cfg)  # before the first write, not after it
        return False
    db, _table = cfg.catalog_table  # type: ignore[misc]
    try:
        spark.sql(f"CREATE DATABASE IF NOT EXISTS {_ident(cfg.catalog, db)}")  # type: ignore[arg-type]
        loc = cfg.path.replace("\\", "\\\\").replace("'", "\\'")
        spark.sql(f"CREATE TABLE IF NOT EXISTS {name} USING delta LOCATION '{loc}'")
    except Exception as e:  # Spark's own error, wrapped with what to do about it
        raise ConfigError(f"Spark could not name the Delta table at {cfg.path} {name} in its "
                          f"catalog: {str(e).strip().splitlines()[0]}",
                          fix=DELTA_IN_SPARK) from e
    return True


def _check_delta(spark, cfg: DeltaConfig) -> None:
    """Fail now if the session cannot read Delta tables (no delta-spark): the catalog entry
    could not be made after the first write."""
    try:
        spark.read.format("delta").load(cfg.path).schema  # noqa: B018 (analysis only)
    except Exception as e:
        if "DATA_SOURCE_NOT_FOUND" in str(e):
            raise ConfigError(f"the delta sink's catalog {cfg.catalog!r} needs Delta Lake in "
                              "the pipeline's Spark session, and it has none",
                              fix=DELTA_IN_SPARK) from e
