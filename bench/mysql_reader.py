"""The binlog reader on MySQL beside MariaDB, for the same changes, and beside each server's
own binlog tool (issue 33).

    .venv/bin/python bench/mysql_reader.py [--inserts 30000] [--updates 3000]
        [--json-rows 3000] [--json-updates 1000] [--rounds 3]
        [--servers mariadb,mysql,mysql-compressed,mariadb-compressed,mysql-zstd,mysql-partial]
        [--ssl-mode preferred|disabled]
        [--reader-only] [--baseline DIR] [--profile] [--instructions] [--json out.json]

One sandbox per server, all started first: MariaDB 10.11, MySQL 9.7, and MySQL 9.7 with
``binlog_transaction_compression=ON`` and ``binlog_row_value_options=PARTIAL_JSON``, and
(``mariadb-compressed``, asked for by name) MariaDB with ``log_bin_compress=ON``: the
compressed MySQL read is then also paired with the compressed MariaDB one. Asked for by name
too, MySQL's two settings apart: ``mysql-zstd`` (compressed transactions alone, the like of
compressed MariaDB) and ``mysql-partial`` (PARTIAL_JSON alone). Each
gets the same change load, made by one stored procedure on the server, in a binlog file of
its own (``FLUSH BINARY LOGS`` before and after): ``--inserts`` single-row INSERT
transactions and ``--updates`` UPDATE transactions of 10 rows on a table of six columns
(a transaction per few rows, where per-transaction costs such as the GTID state show), then
``--json-rows`` single-row INSERTs of a JSON document and ``--json-updates`` transactions of
``JSON_SET`` on 10 rows each (binary JSON on MySQL; with PARTIAL_JSON, logged as diffs).

Then, round by round, each server in turn (the order rotates each round, so the machine's
drift hits every server alike), three readers of that file:

- **sparkcdc**: ``BinlogReader.read_window`` with the compiled decoder, in this process,
  from the offset before the load to the offset after it; every record counted. Its CPU
  seconds are this process's (``time.process_time``);
- **the server's tool, raw**: ``mysqlbinlog`` / ``mariadb-binlog --read-from-remote-server
  --raw``: the file's bytes fetched over the replication protocol and written to a file
  (what any binlog reader pays before decoding);
- **the server's tool, decoded**: the same with ``--base64-output=decode-rows -v``: every
  event parsed and every row printed as pseudo-SQL, to /dev/null.

``--ssl-mode`` is the reader's (sparkcdc's ``ssl.mode``): ``preferred``, a user's default,
reads MySQL over TLS (the sandbox offers it) and MariaDB in the clear (its sandbox does
not); ``disabled`` reads both in the clear, the same transport for the same changes.

``--baseline DIR``: the reader of another checkout too (e.g. main's, ``git archive main``
with its compiled decoder built), *before* beside this one's *after* in every round, each
in a process of its own (``bench/reader_once.py``: the read alone is timed, the order of
the two alternating by round), with the ratio of the two paired by round.

The tools' CPU-seconds are their process's (bench/proctree.py). The server's own CPU is in
no figure. The median of the rounds is reported per server and reader: records/s (the
sparkcdc reader's count for all three), wall and CPU seconds, the load average at each
run's start, and the ratios: the reader on MySQL against the reader on MariaDB, and the
reader against the tool on the same server. ``--profile``: after the rounds, one more read
by the sparkcdc reader per server under cProfile, its top functions by own time (where the
servers differ). ``--instructions``: instead of timed rounds, one read per server (in a
process of its own, ``bench/reader_once.py``) under valgrind's callgrind, which counts the
instructions the whole process executes: the same count for the same work whatever the
machine's load, where this machine's CPU-seconds for the same read vary by up to 2x from
round to round (its two vCPUs are shared with other guests). The count covers the process
(its imports and start-up too, about the same for every server); the part of it spent
printing MySQL's binary JSON as text (the functions of ``_fastjson*.c`` and the DECIMAL
digits they print), which a MariaDB read never does (MariaDB logs JSON as text), is shown
apart, so is the ratio to MariaDB without it. It needs valgrind (``apt-get install
valgrind``); a read takes about 80 times as long as without it. The result goes to stdout (and ``--json``);
docs/benchmarks.md ("MySQL") and docs/mysql-findings.md quote it.
"""

from __future__ import annotations

import argparse
import cProfile
import io
import json
import os
import pstats
import re
import shutil
import statistics
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "bench"))

import servers
from proctree import measure

from sparkcdc.core.schema import TableId
from sparkcdc.mysql.binlog.reader import BinlogReader
from sparkcdc.mysql.binlog.server_lookups import load_table_schema
from sparkcdc.mysql.connection import ConnectionOptions
from sparkcdc.mysql.offsets import current_offset

PROCEDURE = """
CREATE PROCEDURE load_changes(n_inserts INT, n_updates INT, n_json INT, n_json_updates INT)
BEGIN
  DECLARE i INT DEFAULT 0;
  WHILE i < n_inserts DO
    INSERT INTO t VALUES (i, i * 7, CONCAT('row ', i), i / 3,
                          TIMESTAMP '2024-01-01 00:00:00' + INTERVAL i SECOND, i % 2);
    SET i = i + 1;
  END WHILE;
  SET i = 0;
  WHILE i < n_updates DO
    UPDATE t SET a = a + 1, b = CONCAT(b, '+') WHERE id >= (i * 10) % n_inserts
      AND id < (i * 10) % n_inserts + 10;
    SET i = i + 1;
  END WHILE;
  SET i = 0;
  WHILE i < n_json DO
    INSERT INTO tj VALUES (i, JSON_OBJECT('n', i, 's', CONCAT('row ', i),
      'a', JSON_ARRAY(i, i + 1, i + 2), 'o', JSON_OBJECT('x', i / 3, 'y', 'text')));
    SET i = i + 1;
  END WHILE;
  SET i = 0;
  WHILE i < n_json_updates DO
    UPDATE tj SET j = JSON_SET(j, '$.n', i, '$.o.y', CONCAT('v', i))
      WHERE id >= (i * 10) % n_json AND id < (i * 10) % n_json + 10;
    SET i = i + 1;
  END WHILE;
END
"""
TOOLS = ("sparkcdc reader", "tool raw", "tool decoded")
# callgrind's "file:function" of printing binary JSON as text (--instructions): its files,
# the header helpers inlined into its functions (named by the function they are inlined
# in, e.g. "_fastvalues.h:fjt_value"), and the DECIMAL printer it calls
JSON_TEXT = re.compile(r"_fastjson\w*\.c:|:(fjt|fjd)_\w*|:(fd_decimal_chars|fd_decimal_size)\b")
BEFORE = "sparkcdc reader (baseline)"  # --baseline: the other checkout's reader


def sandbox(kind: str):
    if kind == "mysql-compressed":
        return servers.sandbox("mysql", "bench-reader-mysqlz", extra_args=(
            "--binlog-transaction-compression=ON", "--binlog-row-value-options=PARTIAL_JSON"))
    if kind == "mysql-zstd":  # compressed transactions alone: like-for-like with MariaDB's
        return servers.sandbox("mysql", "bench-reader-mysqlzstd", extra_args=(
            "--binlog-transaction-compression=ON",))
    if kind == "mysql-partial":  # JSON updates as PARTIAL_JSON diffs alone
        return servers.sandbox("mysql", "bench-reader-mysqlpartial", extra_args=(
            "--binlog-row-value-options=PARTIAL_JSON",))
    if kind == "mariadb-compressed":  # every event of 10+ bytes deflated (zlib), as MySQL
        return servers.sandbox("mariadb", "bench-reader-mariadbz", extra_args=(
            "--log-bin-compress=ON", "--log-bin-compress-min-len=10"))  # its whole transactions
    return servers.sandbox(kind, f"bench-reader-{kind}")


class Server:
    """One sandbox with the change load in a binlog file of its own."""

    def __init__(self, kind: str, a: argparse.Namespace):
        self.kind = kind
        self.sb = sandbox(kind)
        self.sb.start()
        i = self.sb.info
        self.conn_kwargs = {"hostname": i.host, "port": i.port, "username": i.cdc_user,
                            "password": i.cdc_password, "ssl_mode": a.ssl_mode}
        self.conn = ConnectionOptions(**self.conn_kwargs)
        self.baseline: str | None = a.baseline
        self.sb.execute("CREATE DATABASE bench")
        self.sb.execute("CREATE TABLE t (id INT PRIMARY KEY, a BIGINT, b VARCHAR(200), "
                        "c DOUBLE, d DATETIME, e TINYINT)",
                        "CREATE TABLE tj (id INT PRIMARY KEY, j JSON)", PROCEDURE,
                        database="bench")
        self.sb.execute("FLUSH BINARY LOGS")
        self.start = current_offset(self.conn)
        t0 = time.perf_counter()
        self.sb.execute(f"CALL load_changes({a.inserts}, {a.updates}, {a.json_rows}, "
                        f"{a.json_updates})", database="bench")
        self.made_s = time.perf_counter() - t0
        self.end = current_offset(self.conn)
        self.sb.execute("FLUSH BINARY LOGS")
        if self.start.file != self.end.file:
            raise SystemExit(f"{kind}: the load spans {self.start.file}..{self.end.file}; "
                             "one file was expected (--max-binlog-size)")
        self.file = self.start.file
        self.binlog_bytes = self.end.pos
        self.version = servers.version(self.sb)
        self.tables = {s.table_id: s for s in (
            load_table_schema(self.conn, TableId("bench", n)) for n in ("t", "tj"))}
        print(f"{kind} {self.version}: the load took {self.made_s:.1f} s, {self.file} "
              f"{self.binlog_bytes:,} bytes", flush=True)
        self.records: int | None = None

    def read_in_child(self, root: str, server_id: int) -> tuple[int, float, float]:
        """One read by the reader of the tree at ``root``, in a process of its own."""
        arg = json.dumps({"root": root, "conn": self.conn_kwargs, "server_id": server_id,
                          "tables": [[t.database, t.table] for t in self.tables],
                          "start": self.start.to_dict(), "end": self.end.to_dict()})
        out = subprocess.run([sys.executable, str(ROOT / "bench" / "reader_once.py"), arg],
                             capture_output=True, text=True, check=False)
        if out.returncode != 0:
            raise RuntimeError(f"bench/reader_once.py ({root}): {out.stderr[-1500:]}")
        got = json.loads(out.stdout.strip().splitlines()[-1])
        return got["records"], got["wall_s"], got["cpu_s"]

    def read(self, tool: str, server_id: int, log: Path) -> dict:
        before = os.getloadavg()[0]
        if tool.startswith("sparkcdc reader"):
            if self.baseline is not None:  # both trees' readers in processes of their own
                n, wall, cpu = self.read_in_child(
                    self.baseline if tool == BEFORE else str(ROOT), server_id)
            else:
                reader = BinlogReader(self.conn, server_id, self.tables)
                w0, c0 = time.perf_counter(), time.process_time()
                n = sum(1 for _ in reader.read_window(self.start, self.end))
                wall, cpu = time.perf_counter() - w0, time.process_time() - c0
            if self.records is not None and n != self.records:
                raise RuntimeError(f"{self.kind}: {n} records, {self.records} before")
            self.records = n
            return {"wall_s": wall, "cpu_s": cpu, "records": n, "load": before}
        raw = servers.raw_folder(self.sb.info.server) if tool == "tool raw" else None
        try:
            cmd = servers.binlog_command(self.sb, [self.file], raw_dir=raw)
            m = measure(cmd, None, log, discard_stdout=raw is None)
            if m.rc != 0:
                raise RuntimeError(f"{' '.join(cmd[:4])} exited {m.rc}: "
                                   f"{log.read_text(errors='replace')[-1500:]}")
            if raw is not None:
                got = (raw / self.file).stat().st_size
                if got < self.binlog_bytes:
                    raise RuntimeError(f"--raw wrote {got} bytes of {self.binlog_bytes}")
        finally:
            if raw is not None:
                shutil.rmtree(raw, ignore_errors=True)
        return {"wall_s": m.seconds, "cpu_s": m.cpu_s, "load": before}

    def instructions(self, server_id: int, keep: str | None = None) -> dict:
        """One read by this tree's reader under callgrind (module docstring): the process's
        instructions, and those of printing binary JSON as text. ``keep``: a folder to leave
        callgrind's file in (callgrind-<server>.out), to set two servers' reads side by side
        function by function with callgrind_annotate."""
        arg = json.dumps({"root": str(ROOT), "conn": self.conn_kwargs, "server_id": server_id,
                          "tables": [[t.database, t.table] for t in self.tables],
                          "start": self.start.to_dict(), "end": self.end.to_dict()})
        out = Path(servers.raw_folder("mariadb")) / f"callgrind-{self.kind}.out"
        out.parent.mkdir(parents=True, exist_ok=True)
        # no OpenBLAS helper threads; one hash seed, so dicts probe alike in every read
        env = {**os.environ, "OMP_NUM_THREADS": "1", "PYTHONHASHSEED": "0"}
        run = subprocess.run(["valgrind", "--tool=callgrind", f"--callgrind-out-file={out}",
                              sys.executable, str(ROOT / "bench" / "reader_once.py"), arg],
                             capture_output=True, text=True, check=False, env=env)
        if run.returncode != 0:
            raise RuntimeError(f"callgrind of bench/reader_once.py: {run.stderr[-1500:]}")
        self.records = json.loads(run.stdout.strip().splitlines()[-1])["records"]
        total = int(re.search(r"Collected : (\d+)", run.stderr).group(1))
        listing = subprocess.run(["callgrind_annotate", "--auto=no", "--threshold=100",
                                  str(out)], capture_output=True, text=True, check=True).stdout
        json_text = 0
        for line in listing.splitlines():
            m = re.match(r"\s*([\d,]+) \([^)]*\)\s+(\S+)", line)
            if m and JSON_TEXT.search(m.group(2)):
                json_text += int(m.group(1).replace(",", ""))
        if keep:
            Path(keep).mkdir(parents=True, exist_ok=True)
            shutil.move(str(out), str(Path(keep) / out.name))
        else:
            out.unlink()
        return {"instructions": total, "json_text": json_text}

    def profile(self, server_id: int, top: int = 14) -> str:
        reader = BinlogReader(self.conn, server_id, self.tables)
        prof = cProfile.Profile()
        prof.enable()
        sum(1 for _ in reader.read_window(self.start, self.end))
        prof.disable()
        buf = io.StringIO()
        pstats.Stats(prof, stream=buf).sort_stats("tottime").print_stats(top)
        keep = [ln.replace(str(ROOT) + "/", "") for ln in buf.getvalue().splitlines()
                if ln.strip() and ("ncalls" in ln or ln.lstrip()[:1].isdigit())]
        return "\n".join(keep)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--inserts", type=int, default=30000)
    ap.add_argument("--updates", type=int, default=3000)
    ap.add_argument("--json-rows", type=int, default=3000)
    ap.add_argument("--json-updates", type=int, default=1000)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--servers", default="mariadb,mysql,mysql-compressed")
    ap.add_argument("--ssl-mode", default="preferred", choices=("preferred", "disabled"))
    ap.add_argument("--reader-only", action="store_true",
                    help="only the sparkcdc reader, not the servers' tools (more rounds in "
                         "the same time)")
    ap.add_argument("--baseline", default=None, metavar="DIR",
                    help="another checkout whose reader reads beside this one's (before and "
                         "after in the same rounds)")
    ap.add_argument("--profile", action="store_true")
    ap.add_argument("--instructions", action="store_true",
                    help="count each server's read in instructions under callgrind instead "
                         "of timing rounds (needs valgrind)")
    ap.add_argument("--keep-callgrind", default=None, metavar="DIR",
                    help="with --instructions: leave each read's callgrind file in DIR")
    ap.add_argument("--json", default=None)
    a = ap.parse_args()
    readers = ((BEFORE,) if a.baseline else ()) + TOOLS[:1]
    tools = readers + (() if a.reader_only else TOOLS[1:])
    started = time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime())
    print(f"{started}, load average before: {os.getloadavg()}, ssl.mode {a.ssl_mode}",
          flush=True)
    kinds = a.servers.split(",")
    log = Path(servers.raw_folder("mariadb")) / "tools.log"
    made: list[Server] = []
    profiles: dict[str, str] = {}
    if a.instructions and shutil.which("valgrind") is None:
        raise SystemExit("--instructions needs valgrind's callgrind: apt-get install valgrind")
    try:
        for k in kinds:
            made.append(Server(k, a))
        if a.instructions:
            counted(made, a)
            return
        runs: dict[tuple[str, str], list[dict]] = {}
        sid = 7600
        for r in range(a.rounds):
            order = made[r % len(made):] + made[:r % len(made)]
            for s in order:
                # --baseline: before and after in turn, the first alternating by round
                for tool in (tools if r % 2 == 0 else readers[::-1] + tools[len(readers):]):
                    sid += 1
                    x = s.read(tool, sid, log)
                    runs.setdefault((s.kind, tool), []).append(x)
                    print(f"  round {r + 1} {s.kind:16} {tool:26} {x['wall_s']:6.2f} s wall "
                          f"{x['cpu_s']:6.2f} CPU-s  load {x['load']:.1f}", flush=True)
        counts = {s.kind: s.records for s in made}
        if len(set(counts.values())) != 1:
            raise SystemExit(f"the servers' records differ: {counts}")
        out = []
        for s in made:
            for tool in tools:
                rs = runs[(s.kind, tool)]
                wall = statistics.median(x["wall_s"] for x in rs)
                out.append({"server": s.kind, "version": s.version, "tool": tool if
                            tool.startswith("sparkcdc reader") else tool.replace(
                                "tool", servers.tool_name(s.sb.info.server, "binlog")),
                            "records": s.records, "binlog_bytes": s.binlog_bytes,
                            "records_per_s": round(s.records / wall), "wall_s": round(wall, 3),
                            "cpu_s": round(statistics.median(x["cpu_s"] for x in rs), 3),
                            "walls": [round(x["wall_s"], 2) for x in rs],
                            "cpus": [round(x["cpu_s"], 3) for x in rs],
                            "loads": [round(x["load"], 1) for x in rs],
                            "load_seconds": round(s.made_s, 1)})
        if a.profile:
            for s in made:
                sid += 1
                profiles[s.kind] = s.profile(sid)
    finally:
        for s in made:
            s.sb.stop()
        shutil.rmtree(log.parent, ignore_errors=True)
    print(f"\n{'server':17} {'reader':28} {'records':>8} {'records/s':>10} {'wall s':>7} "
          f"{'CPU s':>6}  walls / loads")
    for x in out:
        print(f"{x['server']:17} {x['tool']:28} {x['records']:>8} {x['records_per_s']:>10,} "
              f"{x['wall_s']:>7.2f} {x['cpu_s']:>6.2f}  {x['walls']} / {x['loads']}")
    by = {(x["server"], x["tool"]): x for x in out}
    for reader in readers:
        if len(readers) > 1:
            print(f"\n{reader}:")
        for s in made:
            mine = by[(s.kind, reader)]
            decoded = next((x for x in out if x["server"] == s.kind
                            and x["tool"].endswith("decoded")), None)
            line = (f"{s.kind}: the reader is {decoded['wall_s'] / mine['wall_s']:.2f}x the "
                    f"speed of {decoded['tool']}" if decoded else f"{s.kind}: the reader")
            # against MariaDB; compressed MySQL also against compressed MariaDB (each server
            # inflating its own binlog: the same changes, the same kind of work)
            peers = [k for k in ("mariadb", "mariadb-compressed") if k != s.kind
                     and (k == "mariadb" or s.kind in ("mysql-compressed", "mysql-zstd"))
                     and by.get((k, reader)) is not None]
            for peer in peers:
                base = by[(peer, reader)]
                name = "MariaDB" if peer == "mariadb" else "compressed MariaDB"
                line += (f"; {base['wall_s'] / mine['wall_s']:.2f}x its {name} speed (wall), "
                         f"{base['cpu_s'] / mine['cpu_s']:.2f}x per CPU-second")
                # each round's MariaDB read over this server's, in the same round (the
                # machine's drift, which moves both, cancels): the median of those ratios
                paired = [m["cpu_s"] / x["cpu_s"] for m, x in zip(
                    runs[(peer, reader)], runs[(s.kind, reader)])]
                key = "paired_cpu_ratio" if peer == "mariadb" else f"paired_cpu_ratio_{peer}"
                mine[key] = round(statistics.median(paired), 3)
                line += (f"; paired by round {mine[key]:.2f}x per CPU-second "
                         f"({', '.join(f'{r:.2f}' for r in paired)})")
            if reader != BEFORE and BEFORE in readers:  # after against before, paired
                gain = [b["cpu_s"] / x["cpu_s"] for b, x in zip(
                    runs[(s.kind, BEFORE)], runs[(s.kind, reader)])]
                mine["paired_gain"] = round(statistics.median(gain), 3)
                line += (f"; {mine['paired_gain']:.2f}x the baseline's speed per CPU-second, "
                         f"paired ({', '.join(f'{r:.2f}' for r in gain)})")
            print(line)
    for kind, text in profiles.items():
        print(f"\nthe reader on {kind}, cProfile, by own time:\n{text}")
    if a.json:
        Path(a.json).write_text(json.dumps({"started": started, "results": out,
                                            "profiles": profiles}, indent=1))


def counted(made: list[Server], a: argparse.Namespace) -> None:
    """--instructions: each server's read counted once, printed beside MariaDB's."""
    got = {s.kind: s.instructions(7900 + i, a.keep_callgrind) for i, s in enumerate(made)}
    counts = {s.kind: s.records for s in made}
    if len(set(counts.values())) != 1:
        raise SystemExit(f"the servers' records differ: {counts}")
    base = got.get("mariadb")
    print(f"\n{'server':20} {'records':>8} {'instructions':>15} {'per record':>11} "
          f"{'JSON as text':>13}  against MariaDB (without the JSON text)")
    out = []
    for s in made:
        g = got[s.kind]
        line = (f"{s.kind:20} {s.records:>8} {g['instructions']:>15,} "
                f"{g['instructions'] / s.records:>11,.0f} {g['json_text']:>13,}")
        x = {"server": s.kind, "version": s.version, "records": s.records, **g}
        if base is not None and s.kind != "mariadb":
            x["speed_vs_mariadb"] = round(base["instructions"] / g["instructions"], 3)
            x["speed_vs_mariadb_without_json_text"] = round(
                (base["instructions"] - base["json_text"])
                / (g["instructions"] - g["json_text"]), 3)
            line += (f"  {x['speed_vs_mariadb']:.3f}x "
                     f"({x['speed_vs_mariadb_without_json_text']:.3f}x)")
        out.append(x)
        print(line)
    if a.json:
        Path(a.json).write_text(json.dumps({"instructions": out}, indent=1))


if __name__ == "__main__":
    main()
