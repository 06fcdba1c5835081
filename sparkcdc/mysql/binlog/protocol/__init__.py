"""Our own binlog event layer: the replication protocol and the events the reader needs.

``BinlogReader`` (``binlog/reader.py``) reads its streams through this package, so no
per-event work goes through python-mysql-replication's event classes. It is one idea in
four parts, each importing none of the others but ``codes``:

* ``codes``: the protocol's numbers (event types, ``ColumnType``) and layouts (the 19-byte
  event header, the length-encoded integer).
* ``dump_stream``: ``DumpStream``, one connection registered as a replica and sent
  ``COM_BINLOG_DUMP`` from an explicit file and position; its socket split into events
  (MySQL packets, an event of 16 MB or more joined, error packets raised as pymysql's,
  the EOF of a non-blocking dump), in C when the extension is built.
* ``events``: the events that move the reader: ROTATE, the GTID events, QUERY (and MariaDB's
  QUERY_COMPRESSED), FORMAT_DESCRIPTION; a MySQL GTID and its BEGIN folded into one
  (``fold_begins``). The checksum: CRC32 events carry 4 trailing bytes;
  whether they do is learned from every FORMAT_DESCRIPTION (its checksum-algorithm byte),
  so files written with and without checksums can follow each other; the fake ROTATE the
  server sends before a file's format description is checked against its CRC. MariaDB's
  compressed events (``log_bin_compress=ON``) are their plain twins with the statement or
  the row images compressed; ``mariadb_inflate`` restores that part.
* ``table_map``: ``TableMap``, a TABLE_MAP event parsed once per distinct body, with the
  optional metadata of ``binlog_row_metadata=FULL``; ``rows_header``, the header of the row
  events whose images go to a row decoder as they are.

This face hands on the parts' names for the reader (``protocol as E``) and the
row decoders, which read the protocol as one module.
"""

from __future__ import annotations

from sparkcdc.mysql.binlog.protocol.codes import (
    ANONYMOUS_GTID,
    BEGIN_LOAD_QUERY,
    COMPRESSED_ROW_EVENTS,
    DELETE_ROWS_COMPRESSED,
    DELETE_ROWS_COMPRESSED_V1,
    DELETE_ROWS_V1,
    DELETE_ROWS_V2,
    EXECUTE_LOAD_QUERY,
    FOLDED,
    FORMAT_DESCRIPTION,
    GTID,
    HEADER,
    HEARTBEAT,
    IGNORED_EVENTS,
    INTVAR,
    LOG_EVENT_ARTIFICIAL,
    LOOP_BEAT,
    LOOP_DATA,
    LOOP_DONE,
    LOOP_RECORDS,
    MARIADB_ANNOTATE_ROWS,
    MARIADB_BINLOG_CHECKPOINT,
    MARIADB_GTID,
    MARIADB_GTID_BODY,
    MARIADB_GTID_LIST,
    MARIADB_START_ENCRYPTION,
    PARTIAL_UPDATE_ROWS,
    PREVIOUS_GTIDS,
    QUERY,
    QUERY_COMPRESSED,
    RAND,
    ROTATE,
    ROW_EVENTS,
    ROWS_QUERY,
    START_V3,
    STOP,
    TABLE_MAP,
    UNKNOWN,
    UPDATE_ROWS_COMPRESSED,
    UPDATE_ROWS_COMPRESSED_V1,
    UPDATE_ROWS_V1,
    UPDATE_ROWS_V2,
    USER_VAR,
    WRITE_ROWS_COMPRESSED,
    WRITE_ROWS_COMPRESSED_V1,
    WRITE_ROWS_V1,
    WRITE_ROWS_V2,
    XA_PREPARE,
    XID,
    ColumnType,
    _packed_int,
)
from sparkcdc.mysql.binlog.protocol.dump_stream import (
    DumpStream,
    checksum_mismatch,
    corrupt_event,
    split_events,
)
from sparkcdc.mysql.binlog.protocol.events import (
    compressed_query_text,
    fold_begins,
    format_description,
    has_crc,
    mariadb_gtid_list,
    mariadb_inflate,
    mysql_gtid,
    mysql_gtid_parts,
    previous_gtids,
    query_db,
    query_text,
    rotate,
)
from sparkcdc.mysql.binlog.protocol.table_map import (
    ColumnMeta,
    TableMap,
    parse_table_map,
    rows_header,
)

__all__ = [
    "ANONYMOUS_GTID",
    "BEGIN_LOAD_QUERY",
    "COMPRESSED_ROW_EVENTS",
    "DELETE_ROWS_COMPRESSED",
    "DELETE_ROWS_COMPRESSED_V1",
    "DELETE_ROWS_V1",
    "DELETE_ROWS_V2",
    "EXECUTE_LOAD_QUERY",
    "FOLDED",
    "FORMAT_DESCRIPTION",
    "GTID",
    "HEADER",
    "HEARTBEAT",
    "IGNORED_EVENTS",
    "INTVAR",
    "LOG_EVENT_ARTIFICIAL",
    "LOOP_BEAT",
    "LOOP_DATA",
    "LOOP_DONE",
    "LOOP_RECORDS",
    "MARIADB_ANNOTATE_ROWS",
    "MARIADB_BINLOG_CHECKPOINT",
    "MARIADB_GTID",
    "MARIADB_GTID_BODY",
    "MARIADB_GTID_LIST",
    "MARIADB_START_ENCRYPTION",
    "PARTIAL_UPDATE_ROWS",
    "PREVIOUS_GTIDS",
    "QUERY",
    "QUERY_COMPRESSED",
    "RAND",
    "ROTATE",
    "ROWS_QUERY",
    "ROW_EVENTS",
    "START_V3",
    "STOP",
    "TABLE_MAP",
    "UNKNOWN",
    "UPDATE_ROWS_COMPRESSED",
    "UPDATE_ROWS_COMPRESSED_V1",
    "UPDATE_ROWS_V1",
    "UPDATE_ROWS_V2",
    "USER_VAR",
    "WRITE_ROWS_COMPRESSED",
    "WRITE_ROWS_COMPRESSED_V1",
    "WRITE_ROWS_V1",
    "WRITE_ROWS_V2",
    "XA_PREPARE",
    "XID",
    "ColumnMeta",
    "ColumnType",
    "DumpStream",
    "TableMap",
    "_packed_int",
    "checksum_mismatch",
    "compressed_query_text",
    "corrupt_event",
    "fold_begins",
    "format_description",
    "has_crc",
    "mariadb_gtid_list",
    "mariadb_inflate",
    "mysql_gtid",
    "mysql_gtid_parts",
    "parse_table_map",
    "previous_gtids",
    "query_db",
    "query_text",
    "rotate",
    "rows_header",
    "split_events",
]
