"""The ``mysql`` sink: MySQL or MariaDB targets through PyMySQL, multi-row statements, one
transaction per batch."""

from sparkcdc.sinks.mysql.config import MySQLConfig
from sparkcdc.sinks.mysql.sink import MySQLSink

__all__ = ["MySQLConfig", "MySQLSink"]
