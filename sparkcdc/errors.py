"""The one exceptions module of sparkcdc.

Every error says what went wrong, where, and what the user can do about it. Each class
marks whether retrying can help (``retryable``), so retry loops never spin on a terminal
error and never give up on a transient one. All errors pickle (Spark ships exceptions from
executors to the driver), which is why every constructor takes only its message plus
keyword fields that are stored as plain attributes.
"""

from __future__ import annotations


class SparkCDCError(Exception):
    """Base class: a message for humans, ``fix`` for what to do, ``retryable`` for loops."""

    retryable = False

    def __init__(self, message: str, *, fix: str | None = None):
        self.message = message
        self.fix = fix
        super().__init__(message if not fix else f"{message}\n  fix: {fix}")

    def __reduce__(self):
        return (_rebuild, (type(self), self.message, self.fix, self.__dict__))


def _rebuild(cls, message, fix, state):
    err = cls.__new__(cls)
    SparkCDCError.__init__(err, message, fix=fix)
    err.__dict__.update(state)
    return err


class ConfigError(SparkCDCError):
    """An option or a pipeline key is unknown, missing or malformed. Terminal. ``key`` names
    the option when one is to blame, so a caller (the pipeline YAML's reader) can point at
    its line without reading the message."""

    def __init__(self, message: str, *, fix: str | None = None, key: str | None = None):
        super().__init__(message, fix=fix)
        self.key = key


class UnsupportedSpark(SparkCDCError):
    """The installed PySpark lacks an API sparkcdc needs. Terminal: only an upgrade helps."""


class SandboxError(SparkCDCError):
    """A throwaway server (MariaDB, PostgreSQL, Kafka) could not be started, reached or stopped."""


class ServerConfigError(SparkCDCError):
    """The source server is not set up for CDC (binlog off, wrong format, privileges...)."""


class SchemaError(SparkCDCError):
    """A captured table cannot be captured as it is (no primary key and no chunk key...)."""


class ConnectionFailed(SparkCDCError):
    """The server could not be reached or the connection broke. Usually transient."""

    retryable = True


class AuthenticationFailed(SparkCDCError):
    """The server refused the user name or password. Terminal."""


class TLSError(SparkCDCError):
    """TLS to the server failed: not offered, the certificate is not trusted or does not
    name the host, or the account requires TLS that is turned off. Terminal."""


class BinlogUnavailable(SparkCDCError):
    """A binlog file the reader needs has been purged from the server. Terminal."""


class OffsetError(SparkCDCError):
    """An offset could not be parsed, compared or resumed from. Terminal."""


class DecodeError(SparkCDCError):
    """A binlog event or a column value could not be decoded. Terminal."""


class SchemaChangeStop(SparkCDCError):
    """schema.change.behavior is ``exception`` and a captured table changed."""


class PipelineFailed(SparkCDCError):
    """A table's stream failed for a reason other than a schema change."""


class MissingPackage(ConfigError):
    """An optional package a feature needs is not installed (a sink's driver: deltalake,
    pyiceberg, psycopg, confluent-kafka). Terminal: ``fix`` names what to ``pip install``
    (the package's extra, ``sparkcdc[delta]``); ``package`` is the module that is missing."""

    def __init__(self, message: str, *, fix: str | None = None, key: str | None = None,
                 package: str | None = None):
        super().__init__(message, fix=fix, key=key)
        self.package = package
