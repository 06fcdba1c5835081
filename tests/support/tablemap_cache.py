"""Parse each distinct TABLE_MAP event once per binlog stream, on the library path.

The reader's default event layer (``sparkcdc.mysql.binlog.protocol``) has its own per-reader cache of
parsed table maps and never builds the library's event objects; this module serves
``BinlogReader(..., events="library")`` (the reference the tests compare with).

The server writes a TABLE_MAP event before the rows of every statement, so a stream of
single-row transactions carries one per row change, and python-mysql-replication parses each
one in full (column definitions, optional metadata, a ``Table`` object): about two thirds of
the reader's time on that workload (docs/benchmarks.md has the profile). A table map's bytes
determine its parse, so the parse of a byte string already seen in this stream is reused.

The library builds the event object itself, so the cache sits in ``TableMapEvent.__init__``:
``install()`` wraps it once, and the wrapper uses a cache only when the stream's control
connection carries one (``enable(connection)``, done by ``BinlogReader`` for its own streams).
Every other use of the library in the process parses exactly as before.
"""

from __future__ import annotations

import functools
from typing import Any

_ATTR = "_sparkcdc_table_maps"
_MAX = 512  # distinct table maps per stream (tables x versions); then the cache restarts
_installed = False


def enable(ctl_connection: Any) -> None:
    """Give one stream (through its control connection) a table-map cache."""
    install()
    setattr(ctl_connection, _ATTR, {})


def install() -> None:
    global _installed
    if _installed:
        return
    from pymysqlreplication.event import BinLogEvent
    from pymysqlreplication.row_event import TableMapEvent

    parse = TableMapEvent.__init__

    @functools.wraps(parse)
    def __init__(self, from_packet, event_size, table_map, ctl_connection, **kwargs):
        cache = getattr(ctl_connection, _ATTR, None)
        if cache is None or kwargs.get("freeze_schema"):
            return parse(self, from_packet, event_size, table_map, ctl_connection, **kwargs)
        raw = from_packet.packet  # pymysql's packet, positioned after the event header
        # the body; not the checksum, which covers the header (timestamp, position) too
        end = len(raw._data) - 4 if kwargs.get("use_checksum") else len(raw._data)
        key = bytes(raw._data[raw._position:end])
        hit = cache.get(key)
        if hit is None:
            parse(self, from_packet, event_size, table_map, ctl_connection, **kwargs)
            if self._processed:
                if len(cache) >= _MAX:
                    cache.clear()
                cache[key] = {k: v for k, v in self.__dict__.items()
                              if k not in ("packet", "table_map", "_ctl_connection")}
            return
        self.__dict__.update(hit)
        # the per-event fields (header, packet, timestamp) from this event, not the first one
        BinLogEvent.__init__(self, from_packet, event_size, table_map, ctl_connection,
                             **kwargs)
        table_map[self.table_id] = self.table_obj

    TableMapEvent.__init__ = __init__
    _installed = True


__all__ = ["enable", "install"]
