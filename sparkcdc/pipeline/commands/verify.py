"""``sparkcdc verify``: prove that each target equals its source tables, by chunked checksums.

Per target, the key space is cut into ranges (even ranges of a single integral key; one
range otherwise). For each range the source computes, in SQL, ``COUNT(*)`` and the
``BIT_XOR`` of a 64-bit hash of every row (the first 16 hex digits of ``SHA2`` of the row's
columns, each rendered as text with its length: ``mysql/checksums.py``); the target is read
back through its sink and the same hash is computed per row in Python (Arrow compute renders
the values). Shards
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

import logging
import time
from dataclasses import dataclass, field

import numpy as np
import pyarrow as pa

from sparkcdc.core.offsets import BinlogOffset
from sparkcdc.core.schema import Column, TableSchema
from sparkcdc.core.watermark import read_split_as_of
from sparkcdc.mysql.port import ChecksumRange as KeyRange
from sparkcdc.mysql.port import (
    MySQLSource,
    SourceConfig,
    arrow_row_hashes,
    hashed_columns,
    integral_key,
    plan_ranges,
)
from sparkcdc.pipeline.commands.console import make_console
from sparkcdc.pipeline.commands.status import table_statuses
from sparkcdc.pipeline.definition import PipelineDef, targets
from sparkcdc.pipeline.definition.routing import targets_of, transform_of
from sparkcdc.pipeline.run.checkpoint import Checkpoint
from sparkcdc.sinks import SinkKind, sink_class

log = logging.getLogger("sparkcdc.pipeline")

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
        self.source = MySQLSource(self.config)

    def groups(self) -> tuple[dict[str, list[TableSchema]], dict]:
        """Targets and their source tables (from the checkpoint's state, else routing)."""
        discovered, self.flavor = self.source.discover()
        found = {str(t): s for t, s in discovered.items()}
        states = Checkpoint(self.defn.checkpoint_dir).load_tables()
        groups: dict[str, list[TableSchema]] = {}
        for table, schema in found.items():
            st = states.get(table)
            routed = ((st.targets or [st.target]) if st else targets_of(self.defn, table))
            for target in routed:  # every target of a table fanned out by its routes
                groups.setdefault(target, []).append(schema)
        return groups, states

    def run(self) -> list[TargetResult]:
        groups, states = self.groups()
        return [self.verify_target(target, schemas, states)
                for target, schemas in sorted(groups.items())]

    def verify_target(self, target: str, schemas: list[TableSchema], states) -> TargetResult:
        res = TargetResult(target, [str(s.table_id) for s in schemas])
        first = schemas[0]
        rules = [t for t in (transform_of(self.defn, x) for x in res.tables) if t is not None]
        if any(t.shapes_rows for t in rules):
            res.not_verified = ("a transform shapes its rows (Spark SQL), which the source's "
                                "SQL checksums cannot reproduce")
            return res
        if any(t.scd_type == 2 or t.apply_as_deletes or t.apply_as_truncates for t in rules):
            res.not_verified = ("its AUTO CDC rules (history, deletes or truncates of their "
                                "own) make it another table than the source")
            return res
        if sink_class(self.defn.sink.type).capabilities.kind is SinkKind.CHANGELOG:
            res.not_verified = (f"a {self.defn.sink.type} target is a changelog, not a table "
                                "(fold it with sparkcdc.apply.materialize to compare)")
            return res
        sink = self._sink(target, states, res.tables[0])
        if sink is None:
            res.not_verified = "the pipeline has not written it yet"
            return res
        table = self._read_target(sink)
        cols = [c for c in hashed_columns(first) if c.name in table.column_names]
        res.skipped_columns = [c.name for c in first.columns if c not in cols]
        keys = list(first.primary_key or (first.chunk_key,))
        single_int = len(keys) == 1 and integral_key(first.column(keys[0]))
        res.key = keys[0] if single_int else None
        ranges = (plan_ranges(*self.source.key_bounds(schemas, keys[0]), self.rows_per_range)
                  if single_int else [KeyRange(0, None, None)])
        src = self.source.range_sums(schemas, cols, ranges, res.key)
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
                src = self.source.range_sums(schemas, cols, bad, res.key)
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
        from sparkcdc.pipeline.run.checkpoint import Checkpoint

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
            if off is None or off.table(t).phase != "done":
                return None
            positions[t] = off.position
        return data, positions

    def _source_as_of(self, schemas, cols, keys, ranges, key, positions) -> dict[int, dict]:
        """Per range, ``{key tuple: row hash}`` of the source rows as of each table's
        position (the chunk is selected now and rolled back with the binlog since)."""
        out: dict[int, dict] = {r.index: {} for r in ranges}
        for s in schemas:
            d = self.source.dialect(self.flavor, {s.table_id: s})
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

        now = self.source.position_now()
        deadline = time.monotonic() + self.catch_up_timeout
        while time.monotonic() < deadline:
            sts = {s.table: s for s in table_statuses(self.defn)}
            behind = [t for t in tables if t not in sts or _behind(sts[t].position, now)]
            if not behind:
                return
            if not any(sts.get(t) and sts[t].running for t in behind):
                return  # nothing is running that could catch up
            time.sleep(1.0)

    def _key_diff(self, res: TargetResult, schemas, cols, keys, ranges, table) -> None:
        src = self.source.row_hashes(schemas, cols, keys, ranges, res.key)
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


def _behind(position: dict | None, now: BinlogOffset) -> bool:
    """Whether a table's target is short of ``now`` (no batch committed counts as short)."""
    return position is None or (
        BinlogOffset.from_dict({**position, "events": 0, "rows": 0}) < now.boundary())


def _offset(d: dict):
    return BinlogOffset.from_dict(d)


def render(results: list[TargetResult], console=None, max_keys: int = 10) -> bool:
    from rich.markup import escape  # names, keys and positions are data, never markup

    console = console or make_console()
    ok = True
    for r in results:
        name = escape(f"{r.target} <- {', '.join(r.tables)}")
        if r.not_verified:
            console.print(f"[yellow]NOT VERIFIED[/] {name}: {escape(str(r.not_verified))}", highlight=False)
            ok = False
            continue
        n_bad = sum(not x.equal for x in r.ranges)
        at = ""
        if r.as_of:
            ps = sorted({f"{p['file']}:{p['pos']}" for p in r.as_of.values()})
            at = escape(f" as of binlog position {', '.join(ps)}")
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
                    console.print(f"    {escape(x.range.describe(r.key))}: source count {x.source[0]}, "
                                  f"target count {x.target[0]}", highlight=False)
            for label, keys in (("missing in the target", r.missing),
                                ("only in the target", r.extra),
                                ("different", r.different)):
                if keys:
                    shown = escape(", ".join(_key_text(k) for k in keys[:max_keys]))
                    more = f" ... and {len(keys) - max_keys} more" if len(keys) > max_keys else ""
                    console.print(f"    {label} ({len(keys)}): {shown}{more}", highlight=False)
        if r.skipped_columns:
            console.print(f"    not hashed (floating point, spatial, or not in the target): "
                          f"{escape(', '.join(r.skipped_columns))}", highlight=False)
    return ok


def _key_text(k: tuple) -> str:
    return str(k[0]) if len(k) == 1 else "(" + ", ".join(map(str, k)) + ")"
