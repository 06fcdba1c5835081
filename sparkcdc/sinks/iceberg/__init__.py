"""The ``iceberg`` sink: Apache Iceberg tables through pyiceberg (SQL catalog on SQLite by
default)."""

from sparkcdc.sinks.iceberg.config import IcebergConfig
from sparkcdc.sinks.iceberg.sink import IcebergSink

__all__ = ["IcebergConfig", "IcebergSink"]
