"""Typed options of the ``files`` sink."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from sparkcdc.options import REQUIRED, Opt, Options
from sparkcdc.sinks.base import sub_path

FORMATS = ("parquet", "json")
OPTIONS = {
    "path": Opt(REQUIRED, "a directory Spark can write (local path or a Hadoop URI)"),
    "format": Opt("parquet", "one of " + ", ".join(FORMATS)),
    "compression": Opt(None, "a codec of Spark's writer for the format (snappy, zstd, gzip...)"),
}


@dataclass(frozen=True)
class FilesConfig:
    path: str
    format: str = "parquet"
    compression: str | None = None

    @classmethod
    def parse(cls, options: Mapping[str, Any]) -> FilesConfig:
        o = Options("files sink", OPTIONS, options)
        return cls(path=o.given("path").rstrip("/"), format=o.choice("format", FORMATS),
                   compression=o.text("compression"))


def target_options(options: Mapping[str, str], db: str, table: str) -> dict[str, str]:
    """A pipeline's files destination: one changelog per target, ``<path>/<db>/<table>``."""
    return {**options, "path": sub_path("files", options, db, table)}
