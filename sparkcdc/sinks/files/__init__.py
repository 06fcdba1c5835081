"""The ``files`` sink: appends the change rows (a changelog) as Parquet or JSON with Spark's
own writers."""

from sparkcdc.sinks.files.config import FilesConfig
from sparkcdc.sinks.files.sink import FilesSink

__all__ = ["FilesConfig", "FilesSink"]
