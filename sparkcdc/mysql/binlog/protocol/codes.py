"""The replication protocol's vocabulary: the numbers it names things by and the layouts
everything else reads them in.

Every part of the protocol (``dump_stream``, ``events``, ``table_map``), the reader and the
row decoders speak of events by their type number and of columns by their ``ColumnType``,
and read the same 19-byte event header and length-encoded integers; they live here, once,
below all of them.
"""

from __future__ import annotations

import enum
import struct

from sparkcdc.errors import DecodeError

# event types
UNKNOWN, START_V3, QUERY, STOP, ROTATE, INTVAR = 0, 1, 2, 3, 4, 5
RAND, USER_VAR, FORMAT_DESCRIPTION, XID = 13, 14, 15, 16
BEGIN_LOAD_QUERY, EXECUTE_LOAD_QUERY, TABLE_MAP = 17, 18, 19
WRITE_ROWS_V1, UPDATE_ROWS_V1, DELETE_ROWS_V1 = 23, 24, 25
HEARTBEAT, ROWS_QUERY = 27, 29
WRITE_ROWS_V2, UPDATE_ROWS_V2, DELETE_ROWS_V2 = 30, 31, 32
GTID, ANONYMOUS_GTID, PREVIOUS_GTIDS = 33, 34, 35
XA_PREPARE, PARTIAL_UPDATE_ROWS = 38, 39
# not a server's: a GTID (or anonymous GTID) event and the QUERY event BEGIN after it, read
# as one by the reader (``fold_begins``), of type FOLDED + the GTID event's type
FOLDED = 256
# not a server's either: what the compiled event loop (``_fastloop.c``) hands the reader's
# loop besides events, as events of these types with the value at the start field: the
# records it made, the buffer the events it hands next are in (a payload's), the window's
# end, a heartbeat that is due
LOOP_RECORDS, LOOP_DATA, LOOP_DONE, LOOP_BEAT = 512, 513, 514, 515
MARIADB_ANNOTATE_ROWS, MARIADB_BINLOG_CHECKPOINT, MARIADB_GTID, MARIADB_GTID_LIST = (
    160, 161, 162, 163)
MARIADB_START_ENCRYPTION = 164
# MariaDB's compressed events (log_bin_compress=ON)
QUERY_COMPRESSED = 165
WRITE_ROWS_COMPRESSED_V1, UPDATE_ROWS_COMPRESSED_V1, DELETE_ROWS_COMPRESSED_V1 = 166, 167, 168
WRITE_ROWS_COMPRESSED, UPDATE_ROWS_COMPRESSED, DELETE_ROWS_COMPRESSED = 169, 170, 171

# row event type -> (mode, version): mode 0 insert, 1 delete, 2 update (the C decoder's)
ROW_EVENTS = {
    WRITE_ROWS_V1: (0, 1), DELETE_ROWS_V1: (1, 1), UPDATE_ROWS_V1: (2, 1),
    WRITE_ROWS_V2: (0, 2), DELETE_ROWS_V2: (1, 2), UPDATE_ROWS_V2: (2, 2),
    PARTIAL_UPDATE_ROWS: (2, 2),
}
# events python-mysql-replication dropped before the reader saw them (the reader's
# only_events did not list them); they neither begin, end nor move anything
IGNORED_EVENTS = frozenset({INTVAR, RAND, USER_VAR, BEGIN_LOAD_QUERY, EXECUTE_LOAD_QUERY,
                            ROWS_QUERY, MARIADB_ANNOTATE_ROWS})
# MariaDB's compressed row events, as ROW_EVENTS (and among them): the header and bitmaps of
# their plain twins, as they are, then the row images compressed (``mariadb_inflate``).
# 166-168 have the v1 header; 169-171 the v2 one (MariaDB's format description gives them
# the v2 post-header length), though MariaDB servers write only 166-168.
COMPRESSED_ROW_EVENTS = {
    WRITE_ROWS_COMPRESSED_V1: (0, 1), DELETE_ROWS_COMPRESSED_V1: (1, 1),
    UPDATE_ROWS_COMPRESSED_V1: (2, 1), WRITE_ROWS_COMPRESSED: (0, 2),
    DELETE_ROWS_COMPRESSED: (1, 2), UPDATE_ROWS_COMPRESSED: (2, 2),
}
ROW_EVENTS.update(COMPRESSED_ROW_EVENTS)

LOG_EVENT_ARTIFICIAL = 0x20
HEADER = struct.Struct("<IBIIIH")  # timestamp, type, server id, event size, log pos, flags
MARIADB_GTID_BODY = struct.Struct("<QIB")  # sequence number, domain, flags


class ColumnType(enum.IntEnum):
    """The column types TABLE_MAP events carry (``enum_field_types``), by public name."""

    DECIMAL, TINY, SHORT, LONG, FLOAT, DOUBLE, NULL, TIMESTAMP = 0, 1, 2, 3, 4, 5, 6, 7
    LONGLONG, INT24, DATE, TIME, DATETIME, YEAR, NEWDATE, VARCHAR = 8, 9, 10, 11, 12, 13, 14, 15
    BIT, TIMESTAMP2, DATETIME2, TIME2 = 16, 17, 18, 19
    JSON, NEWDECIMAL, ENUM, SET = 245, 246, 247, 248
    TINY_BLOB, MEDIUM_BLOB, LONG_BLOB, BLOB, VAR_STRING, STRING, GEOMETRY = (
        249, 250, 251, 252, 253, 254, 255)


def _packed_int(d: bytes, p: int) -> tuple[int, int]:
    """A length-encoded integer at ``p``: (value, next position)."""
    c = d[p]
    if c < 251:
        return c, p + 1
    if c == 252:
        return d[p + 1] | d[p + 2] << 8, p + 3
    if c == 253:
        return int.from_bytes(d[p + 1:p + 4], "little"), p + 4
    if c == 254:
        return int.from_bytes(d[p + 1:p + 9], "little"), p + 9
    raise DecodeError(f"bad length-encoded integer 0x{c:02x} in a binlog event")
