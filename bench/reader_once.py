"""One read of a binlog window by sparkcdc's reader from a given source tree, in a process of
its own: what ``bench/mysql_reader.py --baseline DIR`` runs for each tree, so the reader of
another checkout (main's, with its compiled decoder built) and this one's read the same
window side by side in the same round.

    python bench/reader_once.py '{"root": ..., "conn": {...}, "tables": [[db, table], ...],
                                  "start": {...}, "end": {...}, "server_id": N}'

Prints one JSON line: the records read, and the wall and CPU seconds of the read alone
(the imports and the schema lookups before it are not timed).
"""

from __future__ import annotations

import json
import sys
import time


def main() -> None:
    a = json.loads(sys.argv[1])
    sys.path.insert(0, a["root"])  # that tree's sparkcdc, before the installed one
    from sparkcdc.core.offsets import BinlogOffset
    from sparkcdc.core.schema import TableId
    from sparkcdc.mysql.binlog.reader import BinlogReader
    from sparkcdc.mysql.binlog.server_lookups import load_table_schema
    from sparkcdc.mysql.connection import ConnectionOptions

    conn = ConnectionOptions(**a["conn"])
    tables = {TableId(d, t): load_table_schema(conn, TableId(d, t)) for d, t in a["tables"]}
    start, end = BinlogOffset.from_dict(a["start"]), BinlogOffset.from_dict(a["end"])
    reader = BinlogReader(conn, a["server_id"], tables)
    w0, c0 = time.perf_counter(), time.process_time()
    n = sum(1 for _ in reader.read_window(start, end))
    wall, cpu = time.perf_counter() - w0, time.process_time() - c0
    print(json.dumps({"records": n, "wall_s": wall, "cpu_s": cpu}))


if __name__ == "__main__":
    main()
