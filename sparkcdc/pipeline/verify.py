"""``sparkcdc verify``: prove that each target equals its source tables, by chunked checksums.

Per target, the key space is cut into ranges (even ranges of a single integral key; one
range otherwise). For each range the source computes, in SQL, ``COUNT(*)`` and the
``BIT_XOR`` of a 64-bit hash of every row (the first 16 hex digits of ``MD5`` of the row's
columns, each rendered as text with its length); the target is read back through its sink
and the same hash is computed per row in Python (Arrow compute renders the values). Shards
merged into one target are summed (counts) and XORed (hashes) over all their tables.

No locks, and writes may go on. A range that differs is compared again *at a fixed
position*: the target is read together with the batch ids it holds (read before and after
the rows, so none landed in between), each source table's position is the end of its last
applied batch (Spark's offset log), and the source range is selected and rolled back to that
position with the binlog (``read_split_as_of``, the same step the snapshot uses). Both sides
are then hashed row by row, so the differing keys are exact. Without a known position (a
table still in its snapshot, no checkpoint) differing ranges are re-checked after the
pipeline caught up instead. FLOAT, DOUBLE and spatial columns are not part of the hash (their
text forms differ between the server and Python); the columns left out are listed.
"""

from __future__ import annotations

import hashlib
import logging
import math
import time
from dataclasses import dataclass, field

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from sparkcdc.core.offsets import BinlogOffset
from sparkcdc.core.schema import Column, TableSchema, quote_ident
from sparkcdc.core.watermark import read_split_as_of
from sparkcdc.mysql.offsets import current_offset
from sparkcdc.mysql.options import SourceConfig
from sparkcdc.pipeline import targets
from sparkcdc.pipeline.checkpoint import Checkpoint
from sparkcdc.pipeline.console import make_console
from sparkcdc.pipeline.definition import PipelineDef
from sparkcdc.pipeline.routing import target_of, transform_of
from sparkcdc.pipeline.status import table_statuses
from sparkcdc.spark.offset_view import position as offset_pos
from sparkcdc.spark.offset_view import table_phase

log = logging.getLogger("sparkcdc.pipeline")

_INTS = ("tinyint", "smallint", "mediumint", "int", "integer", "bigint")
_TEXT = ("char", "varchar", "tinytext", "text", "mediumtext", "longtext", "enum", "set", "json")
_BINARY = ("binary", "varbinary", "tinyblob", "blob", "mediumblob", "longblob")
_SKIPPED = ("float", "double", "real", "geometry", "point", "linestring", "polygon",
            "multipoint", "multilinestring", "multipolygon", "geometrycollection")
_ZERO = "(YEAR({c}) = 0 OR MONTH({c}) = 0 OR DAYOFMONTH({c}) = 0)"


def _base(c: Column) -> str:
    return c.data_type.lower()


def hashed_columns(schema: TableSchema, wanted: list[str] | None = None) -> list[Column]:
    cols = [c for c in schema.columns if _base(c) not in _SKIPPED]
    if wanted is not None:
        cols = [c for c in cols if c.name in wanted]
    return cols


def sql_render(c: Column) -> str:
    """The column as text, in SQL; ``arrow_render`` is its twin on the target's values."""
    q = quote_ident(c.name)
    t = _base(c)
    if t in _INTS or t == "year":
        return f"CAST({q} + 0 AS CHAR)"
    if t == "decimal" or t == "numeric":
        return f"CAST({q} AS CHAR)"
    if t == "bit":
        n = _bit_width(c)
        if n == 1:
            return f"CAST({q} + 0 AS CHAR)"
        return f"LPAD(HEX({q}), {2 * math.ceil(n / 8)}, '0')"
    if t in _TEXT:
        return f"CONVERT({q} USING utf8mb4)"
    if t in _BINARY:
        return f"HEX({q})"
    if t == "date":
        return f"IF({_ZERO.format(c=q)}, NULL, DATE_FORMAT({q}, '%Y-%m-%d'))"
    if t in ("datetime", "timestamp"):
        return f"IF({_ZERO.format(c=q)}, NULL, DATE_FORMAT({q}, '%Y-%m-%d %H:%i:%s.%f'))"
    if t == "time":
        return f"CAST(ROUND(TIME_TO_SEC({q}) * 1000000) AS SIGNED)"
    return f"CONVERT({q} USING utf8mb4)"


def _bit_width(c: Column) -> int:
    import re

    m = re.search(r"\((\d+)\)", c.column_type)
    return int(m.group(1)) if m else 1


def sql_row_hash(cols: list[Column]) -> str:
    parts = [f"IFNULL(CONCAT(CHAR_LENGTH({r}), ':', {r}), '~')"
             for r in (sql_render(c) for c in cols)]
    row = f"CONCAT_WS('|', {', '.join(parts)})" if parts else "''"
    return f"CAST(CONV(LEFT(MD5({row}), 16), 16, 10) AS UNSIGNED)"


def arrow_render(arr: pa.ChunkedArray, c: Column) -> pa.ChunkedArray | pa.Array:
    t = _base(c)
    typ = arr.type
    if pa.types.is_boolean(typ):
        return pc.cast(pc.cast(arr, pa.int8()), pa.string())
    if t in ("datetime", "timestamp") and pa.types.is_timestamp(typ):
        if typ.unit != "us":
            arr = pc.cast(arr, pa.timestamp("us", typ.tz))
        return pc.strftime(arr, format="%Y-%m-%d %H:%M:%S")
    if pa.types.is_date(typ):
        return pc.strftime(pc.cast(arr, pa.timestamp("s")), format="%Y-%m-%d")
    if pa.types.is_duration(typ):
        return pc.cast(pc.cast(pc.cast(arr, pa.duration("us")), pa.int64()), pa.string())
    if pa.types.is_binary(typ) or pa.types.is_large_binary(typ) or pa.types.is_fixed_size_binary(
            typ):
        return pa.array([None if v is None else v.hex().upper() for v in arr.to_pylist()],
                        pa.string())
    if pa.types.is_decimal(typ):
        return pa.array([None if v is None else format(v, "f") for v in arr.to_pylist()],
                        pa.string())
    return pc.cast(arr, pa.string())


def arrow_row_hashes(table: pa.Table, cols: list[Column]) -> np.ndarray:
    """The SQL hash of every row of ``table`` (as stored in the target), as uint64."""
    n = table.num_rows
    if n == 0:
        return np.zeros(0, dtype=np.uint64)
    parts = []
    for c in cols:
        r = arrow_render(table.column(c.name), c)
        length = pc.cast(pc.utf8_length(r), pa.string())
        parts.append(pc.fill_null(pc.binary_join_element_wise(length, r, ":"), "~"))
    row = pc.binary_join_element_wise(*parts, "|") if parts else pa.array([""] * n)
    out = np.empty(n, dtype=np.uint64)
    for i, s in enumerate(row.to_pylist()):
        out[i] = int(hashlib.md5(s.encode("utf-8")).hexdigest()[:16], 16)
    return out


# -- ranges ---------------------------------------------------------------------------------------

@dataclass(frozen=True)
class KeyRange:
    index: int
    lo: int | None  # inclusive; None: unbounded
    hi: int | None  # exclusive; None: unbounded

    def sql(self, key: str) -> str:
        q = quote_ident(key)
        conds = []
        if self.lo is not None:
            conds.append(f"{q} >= {int(self.lo)}")
        if self.hi is not None:
            conds.append(f"{q} < {int(self.hi)}")
        return " AND ".join(conds) or "1=1"

    def describe(self, key: str | None) -> str:
        if key is None or (self.lo is None and self.hi is None):
            return "all rows"
        lo = "-inf" if self.lo is None else str(self.lo)
        hi = "+inf" if self.hi is None else str(self.hi)
        return f"{key} in [{lo}, {hi})"


def plan_ranges(lo: int | None, hi: int | None, count: int, rows_per_range: int
                ) -> list[KeyRange]:
    if lo is None or hi is None or count <= rows_per_range:
        return [KeyRange(0, None, None)]
    n = max(1, math.ceil(count / rows_per_range))
    step = max(1, math.ceil((hi - lo + 1) / n))
    bounds = list(range(lo + step, hi + 1, step))
    edges = [None] + bounds + [None]
    return [KeyRange(i, edges[i], edges[i + 1]) for i in range(len(edges) - 1)]


# -- results ---------------------------------------------------------------------------------------

@dataclass
class RangeResult:
    range: KeyRange
    source: tuple[int, int]
    target: tuple[int, int]

    @property
    def equal(self) -> bool:
        return self.source == self.target


@dataclass
class TargetResult:
    target: str
    tables: list[str]
    key: str | None = None
    ranges: list[RangeResult] = field(default_factory=list)
    rechecks: int = 0
    missing: list = field(default_factory=list)  # keys in the source, not in the target
    extra: list = field(default_factory=list)  # keys in the target, not in the source
    different: list = field(default_factory=list)  # keys whose rows differ
    skipped_columns: list[str] = field(default_factory=list)
    not_verified: str | None = None
    source_rows: int = 0
    target_rows: int = 0
    as_of: dict | None = None  # source table -> binlog offset dict, for a fixed-position check

    @property
    def ok(self) -> bool:
        return self.not_verified is None and all(r.equal for r in self.ranges) and not (
            self.missing or self.extra or self.different)


# -- the checks --------------------------------------------------------------------------------------

class Verifier:
    def __init__(self, defn: PipelineDef, rows_per_range: int = 100_000, rechecks: int = 3,
                 catch_up_timeout: float = 60.0, max_keys: int = 10):

        self.defn = defn
        self.rows_per_range = rows_per_range
        self.rechecks = rechecks
        self.catch_up_timeout = catch_up_timeout
        self.max_keys = max_keys
        self.config = SourceConfig.parse(defn.source.options_for())

    def _connect(self):
        c = self.config.connection.connect()
        with c.cursor() as cur:
            cur.execute("SET time_zone = '+00:00'")
            cur.execute("SET NAMES utf8mb4")
        return c

    def groups(self) -> tuple[dict[str, list[TableSchema]], dict]:
        """Targets and their source tables (from the checkpoint's state, else routing)."""
        from sparkcdc.spark.source import discover_tables

        found, self.flavor = discover_tables(self.config)
        found = {str(t): s for t, s in found.items()}
        states = Checkpoint(self.defn.checkpoint_dir).load_tables()
        groups: dict[str, list[TableSchema]] = {}
        for table, schema in found.items():
            st = states.get(table)
            target = st.target if st else target_of(self.defn, table)
            groups.setdefault(target, []).append(schema)
        return groups, states

    def run(self) -> list[TargetResult]:
        groups, states = self.groups()
        return [self.verify_target(target, schemas, states)
                for target, schemas in sorted(groups.items())]

    def verify_target(self, target: str, schemas: list[TableSchema], states) -> TargetResult:

        res = TargetResult(target, [str(s.table_id) for s in schemas])
        first = schemas[0]
        if any(transform_of(self.defn, t) for t in res.tables):
            res.not_verified = ("a transform shapes its rows (Spark SQL), which the source's "
                                "SQL checksums cannot reproduce")
            return res
        sink = self._sink(target, states, res.tables[0])
        if sink is None:
            res.not_verified = "the pipeline has not written it yet"
            return res
        table = self._read_target(sink)
        cols = [c for c in hashed_columns(first) if c.name in table.column_names]
        res.skipped_columns = [c.name for c in first.columns if c not in cols]
        keys = list(first.primary_key or (first.chunk_key,))
        single_int = len(keys) == 1 and _base(first.column(keys[0])) in _INTS
        res.key = keys[0] if single_int else None
        ranges = self._ranges(schemas, keys[0]) if single_int else [KeyRange(0, None, None)]
        src = self._source_sums(schemas, cols, ranges, res.key)
        tgt = self._target_sums(table, cols, ranges, res.key)
        res.ranges = [RangeResult(r, src[r.index], tgt[r.index]) for r in ranges]
        bad = [r.range for r in res.ranges if not r.equal]
        snap = self._target_snapshot(target, res.tables, states) if bad else None
        if snap is not None:
            # compare at a fixed position: the target as of its last applied batches, the
            # source ranges rolled back to the same binlog positions (no locks, writes go on)
            table, positions = snap
            res.as_of = {t: p.to_dict() for t, p in positions.items()}
            src_keys = self._source_as_of(schemas, cols, keys, bad, res.key, positions)
            tgt_keys = self._target_keys(table, cols, keys, bad, res.key)
            fresh = {}
            for r in bad:
                a, b = src_keys[r.index], tgt_keys[r.index]
                fresh[r.index] = RangeResult(r, _fold(a), _fold(b))
            res.ranges = [fresh.get(r.range.index, r) for r in res.ranges]
            res.rechecks = 1
            merged_src = {k: h for d in src_keys.values() for k, h in d.items()}
            merged_tgt = {k: h for d in tgt_keys.values() for k, h in d.items()}
            _diff_keys(res, merged_src, merged_tgt)
        else:
            for _ in range(self.rechecks):
                bad = [r.range for r in res.ranges if not r.equal]
                if not bad:
                    break
                res.rechecks += 1
                self._wait_caught_up(res.tables, states)
                table = self._read_target(sink)
                src = self._source_sums(schemas, cols, bad, res.key)
                tgt = self._target_sums(table, cols, bad, res.key)
                fresh = {r.index: RangeResult(r, src[r.index], tgt[r.index]) for r in bad}
                res.ranges = [fresh.get(r.range.index, r) for r in res.ranges]
            bad = [r.range for r in res.ranges if not r.equal]
            if bad:
                self._key_diff(res, schemas, cols, keys, bad, table)
        res.source_rows = sum(r.source[0] for r in res.ranges)
        res.target_rows = sum(r.target[0] for r in res.ranges)
        sink.close()
        return res

    # -- the fixed-position check --------------------------------------------------------------

    def _target_snapshot(self, target: str, tables: list[str], states):
        """The target's rows and, per source table, the binlog position they stand at: the
        end of the table's last applied batch (read before and after the rows, so no batch
        landed in between). None when a position is unknown (a table still in its snapshot,
        or no state)."""
        from sparkcdc.pipeline.checkpoint import Checkpoint

        if any(t not in states for t in tables):
            return None
        ck = Checkpoint(self.defn.checkpoint_dir)
        sinks = {t: targets.create_sink(self.defn.sink.type, self.defn.sink.options, target,
                                        states[t].app_id) for t in tables}
        try:
            main = next(iter(sinks.values()))
            for _ in range(5):
                before = {t: s.last_batch_id() for t, s in sinks.items()}
                data = main.read()
                after = {t: s.last_batch_id() for t, s in sinks.items()}
                if before == after:
                    break
            else:
                return None
        finally:
            for s in sinks.values():
                s.close()
        positions = {}
        for t, b in after.items():
            st = states[t]
            if b is None:
                return None
            if b < st.batch_base:  # nothing applied since this generation started
                if st.start.offset is None or st.gap:
                    return None
                positions[t] = _offset(st.start.offset)
                continue
            off = ck.offset(st, b - st.batch_base)
            if off is None or table_phase(off, t) != "done":
                return None
            positions[t] = offset_pos(off)
        return data, positions

    def _source_as_of(self, schemas, cols, keys, ranges, key, positions) -> dict[int, dict]:
        """Per range, ``{key tuple: row hash}`` of the source rows as of each table's
        position (the chunk is selected now and rolled back with the binlog since)."""
        from sparkcdc.spark.source import open_dialect

        out: dict[int, dict] = {r.index: {} for r in ranges}
        for s in schemas:
            d = open_dialect(self.config, self.flavor, {s.table_id: s})
            try:
                for r in ranges:
                    rows = read_split_as_of(d, s, f"{s.table_id}:verify-{r.index}", r.lo,
                                            r.hi, positions[str(s.table_id)]).rows
                    out[r.index].update(_key_hashes(rows, cols, keys))
            finally:
                d.close()
        return out

    def _target_keys(self, table: pa.Table, cols, keys, ranges, key) -> dict[int, dict]:
        idx = self._range_index(table, ranges, key)
        out = {}
        for r in ranges:
            sub = table.filter(pa.array(idx == r.index))
            out[r.index] = _key_hashes(sub, cols, keys)
        return out

    def _sink(self, target: str, states, table: str):

        st = states.get(table)
        app = st.app_id if st else f"{self.defn.pipeline.name}.{table}"
        sink = targets.create_sink(self.defn.sink.type, self.defn.sink.options, target, app)
        if sink.last_batch_id() is None:
            sink.close()
            return None
        return sink

    def _read_target(self, sink) -> pa.Table:
        return sink.read()

    def _ranges(self, schemas: list[TableSchema], key: str) -> list[KeyRange]:
        lo = hi = None
        count = 0
        with self._connect() as c, c.cursor() as cur:
            for s in schemas:
                q = quote_ident(key)
                cur.execute(f"SELECT MIN({q}), MAX({q}), COUNT(*) FROM {s.table_id.quoted()}")
                a, b, n = cur.fetchone()
                count += int(n)
                if a is not None:
                    lo = int(a) if lo is None else min(lo, int(a))
                    hi = int(b) if hi is None else max(hi, int(b))
        return plan_ranges(lo, hi, count, self.rows_per_range)

    def _source_sums(self, schemas, cols, ranges, key) -> dict[int, tuple[int, int]]:
        h = sql_row_hash(cols)
        out = {r.index: (0, 0) for r in ranges}
        with self._connect() as c, c.cursor() as cur:
            for s in schemas:
                for r in ranges:
                    where = r.sql(key) if key else "1=1"
                    cur.execute(f"SELECT COUNT(*), COALESCE(BIT_XOR({h}), 0) FROM "
                                f"{s.table_id.quoted()} WHERE {where}")
                    n, x = cur.fetchone()
                    cn, cx = out[r.index]
                    out[r.index] = (cn + int(n), cx ^ int(x))
        return out

    def _range_index(self, table: pa.Table, ranges: list[KeyRange], key: str | None
                     ) -> np.ndarray:
        n = table.num_rows
        if key is None or len(ranges) == 1 and ranges[0].lo is None and ranges[0].hi is None:
            return np.full(n, ranges[0].index if ranges else -1)
        keys = table.column(key).to_numpy(zero_copy_only=False).astype(np.int64)
        idx = np.full(n, -1)
        for r in ranges:
            m = np.ones(n, dtype=bool)
            if r.lo is not None:
                m &= keys >= r.lo
            if r.hi is not None:
                m &= keys < r.hi
            idx[m] = r.index
        return idx

    def _target_sums(self, table: pa.Table, cols, ranges, key) -> dict[int, tuple[int, int]]:
        out = {r.index: (0, 0) for r in ranges}
        if table.num_rows == 0:
            return out
        idx = self._range_index(table, ranges, key)
        keep = idx >= 0
        sub = table.filter(pa.array(keep))
        hashes = arrow_row_hashes(sub, cols)
        sidx = idx[keep]
        for r in ranges:
            m = sidx == r.index
            x = int(np.bitwise_xor.reduce(hashes[m])) if m.any() else 0
            out[r.index] = (int(m.sum()), x)
        return out

    def _wait_caught_up(self, tables: list[str], states) -> None:
        """Until every table's committed position reaches the server's current one (or the
        timeout: a stopped pipeline never catches up)."""
        from sparkcdc.core.offsets import BinlogOffset

        with self.config.connection.connect() as c:
            now = current_offset(c)
        deadline = time.monotonic() + self.catch_up_timeout
        while time.monotonic() < deadline:
            sts = {s.table: s for s in table_statuses(self.defn)}
            behind = [t for t in tables if t not in sts or sts[t].position is None or
                      BinlogOffset.from_dict({**sts[t].position, "events": 0, "rows": 0})
                      < now.boundary()]
            if not behind:
                return
            if not any(sts.get(t) and sts[t].running for t in behind):
                return  # nothing is running that could catch up
            time.sleep(1.0)

    def _key_diff(self, res: TargetResult, schemas, cols, keys, ranges, table) -> None:
        h = sql_row_hash(cols)
        kq = ", ".join(quote_ident(k) for k in keys)
        src: dict = {}
        with self._connect() as c, c.cursor() as cur:
            for s in schemas:
                for r in ranges:
                    where = r.sql(res.key) if res.key else "1=1"
                    cur.execute(f"SELECT {kq}, {h} FROM {s.table_id.quoted()} WHERE {where}")
                    for row in cur.fetchall():
                        src[tuple(row[:-1])] = int(row[-1])
        idx = self._range_index(table, ranges, res.key)
        wanted = {r.index for r in ranges}
        keep = np.isin(idx, list(wanted))
        sub = table.filter(pa.array(keep))
        hashes = arrow_row_hashes(sub, cols)
        key_rows = zip(*[sub.column(k).to_pylist() for k in keys])
        tgt = {tuple(k): int(hv) for k, hv in zip(key_rows, hashes)}
        _diff_keys(res, src, tgt)


def _diff_keys(res: TargetResult, src: dict, tgt: dict) -> None:
    res.missing = sorted((k for k in src if k not in tgt), key=repr)
    res.extra = sorted((k for k in tgt if k not in src), key=repr)
    res.different = sorted((k for k in src if k in tgt and src[k] != tgt[k]), key=repr)


def _key_hashes(rows: pa.Table, cols: list[Column], keys: list[str]) -> dict:
    hashes = arrow_row_hashes(rows, cols)
    key_rows = zip(*[rows.column(k).to_pylist() for k in keys])
    return {tuple(k): int(h) for k, h in zip(key_rows, hashes)}


def _fold(d: dict) -> tuple[int, int]:
    x = 0
    for h in d.values():
        x ^= h
    return (len(d), x)


def _offset(d: dict):

    return BinlogOffset.from_dict(d)


def render(results: list[TargetResult], console=None, max_keys: int = 10) -> bool:

    console = console or make_console()
    ok = True
    for r in results:
        name = f"{r.target} <- {', '.join(r.tables)}"
        if r.not_verified:
            console.print(f"[yellow]NOT VERIFIED[/] {name}: {r.not_verified}", highlight=False)
            ok = False
            continue
        n_bad = sum(not x.equal for x in r.ranges)
        at = ""
        if r.as_of:
            ps = sorted({f"{p['file']}:{p['pos']}" for p in r.as_of.values()})
            at = f" as of binlog position {', '.join(ps)}"
        if r.ok:
            console.print(f"[bold green]OK[/] {name}: {r.source_rows:,} rows in "
                          f"{len(r.ranges)} range(s) match{at}"
                          + (" (the target's position)" if r.as_of else ""), highlight=False)
        else:
            ok = False
            console.print(f"[bold red]DIFFERENT[/] {name}: {n_bad} of {len(r.ranges)} range(s) "
                          f"differ{at} (source {r.source_rows:,} rows, target "
                          f"{r.target_rows:,})", highlight=False)
            for x in r.ranges:
                if not x.equal:
                    console.print(f"    {x.range.describe(r.key)}: source count {x.source[0]}, "
                                  f"target count {x.target[0]}", highlight=False)
            for label, keys in (("missing in the target", r.missing),
                                ("only in the target", r.extra),
                                ("different", r.different)):
                if keys:
                    shown = ", ".join(_key_text(k) for k in keys[:max_keys])
                    more = f" ... and {len(keys) - max_keys} more" if len(keys) > max_keys else ""
                    console.print(f"    {label} ({len(keys)}): {shown}{more}", highlight=False)
        if r.skipped_columns:
            console.print(f"    not hashed (floating point, spatial, or not in the target): "
                          f"{', '.join(r.skipped_columns)}", highlight=False)
    return ok


def _key_text(k: tuple) -> str:
    return str(k[0]) if len(k) == 1 else "(" + ", ".join(map(str, k)) + ")"
