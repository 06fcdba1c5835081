"""One batch of change rows planned on the driver, in Arrow: the same ``ChangeSet`` as
``spark_planner``'s, without a Spark job (``reduce_changes``).

The pipeline plans every batch this way (its rows arrive on the driver as Arrow record
batches), and so does an apply whose rules only this planner has: truncates
(``cut_truncates``) and history tracked on some columns. The spec's SQL rules are read from
the marker columns ``spark_planner.mark_changes`` evaluated.
"""

from __future__ import annotations

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from sparkcdc.apply.spec import DEFAULT_DELETES, DEL_MARK, TRUNC_MARK, ApplySpec
from sparkcdc.errors import ConfigError
from sparkcdc.sinks.base import (
    AMEND,
    CLOSE,
    DELETE,
    END_AT,
    NEW,
    OP,
    START_AT,
    UPSERT,
    VERSION,
    ChangeSet,
)


def reducible_in_arrow(spec: ApplySpec) -> bool:
    """Whether ``reduce_changes`` can plan this spec on the driver: everything but
    ``ignore_null_updates`` (a rule other than the default delete needs its markers,
    ``mark_changes``)."""
    return not spec.ignore_null_updates


def _deleted(table: pa.Table, spec: ApplySpec) -> pa.ChunkedArray:
    if DEL_MARK in table.column_names:
        return pc.fill_null(table[DEL_MARK], False)
    if spec.apply_as_deletes != DEFAULT_DELETES:
        raise ConfigError(f"apply_as_deletes {spec.apply_as_deletes!r} is SQL, which the "
                          "Arrow planner cannot evaluate",
                          fix="evaluate it first with mark_changes(df, spec)")
    return pc.fill_null(pc.equal(table["_change_type"], "delete"), False)


def cut_truncates(table: pa.Table, spec: ApplySpec) -> tuple[pa.Table, bool]:
    """``apply_as_truncates``: the rows after the batch's last truncate (in ``sequence_by``
    order), and whether there was one (the target is then emptied before they are
    written). The truncate rows themselves are no changes of a row."""
    if not spec.apply_as_truncates:
        return table, False
    if TRUNC_MARK not in table.column_names:
        raise ConfigError(f"apply_as_truncates {spec.apply_as_truncates!r} is SQL, which the "
                          "Arrow planner cannot evaluate",
                          fix="evaluate it first with mark_changes(df, spec)")
    marks = pc.fill_null(table[TRUNC_MARK], False)
    if not table.num_rows or not pc.any(marks).as_py():
        return table.drop_columns([TRUNC_MARK]), False
    seq = table[spec.sequence_by]
    last = pc.max(pc.filter(seq, marks))
    after = table.filter(pc.greater(seq, last)).drop_columns([TRUNC_MARK])
    return after, True


def reduce_changes(table: pa.Table, spec: ApplySpec) -> ChangeSet:
    """``plan_changes`` for change rows already on the driver, in Arrow: the same
    ``ChangeSet``, without a Spark job. SCD type 1: the last change per key in
    ``sequence_by`` order, ``__new`` where the key's first change is an insert. SCD type
    2: a version per change, or, with tracked columns, per change of a tracked column (a
    change of the others updates the open version in place: ``AMEND``). Not for
    ``ignore_null_updates`` (``reducible_in_arrow``); rules other than the default delete
    are read from their markers (``mark_changes``), and ``apply_as_truncates`` rows must
    have been cut first (``cut_truncates``).

    Rows are sorted by the sequence (stable: equal sequences keep their arrival order, as
    Spark's window does not promise, but sequences are unique per change), numbered, and
    the highest and lowest number per key pick the last change and the first kind."""
    if not reducible_in_arrow(spec):
        raise ConfigError("reduce_changes does not plan ignore_null_updates",
                          fix="use collect_changes (Spark) for this apply spec")
    names = spec.target_columns([c for c in table.column_names if c not in (DEL_MARK,
                                                                             TRUNC_MARK)])
    if TRUNC_MARK in table.column_names:
        table = table.drop_columns([TRUNC_MARK])
    if spec.stored_as_scd_type == 2:
        return _reduce_scd2(table, spec, names)
    if _inserts_of_distinct_keys(table, spec):  # a snapshot chunk's rows: nothing to reduce
        n = table.num_rows
        out = (table.select(names).append_column(OP, pa.repeat(pa.scalar(UPSERT), n))
               .append_column(NEW, pa.repeat(pa.scalar(True), n)))
        return ChangeSet(table=out, keys=tuple(spec.keys), columns=tuple(names), scd_type=1)
    table = table.append_column("__d", _deleted(table, spec))
    kind = table.column("_change_type")
    table = table.filter(pc.not_equal(kind, "update_preimage"))
    # the rows' order by sequence (a stable sort), and only the keys taken in it: the rows
    # themselves are taken once, the last change of each key
    order = (pc.sort_indices(table, sort_keys=[(spec.sequence_by, "ascending")])
             if table.num_rows else pa.array([], pa.uint64()))
    idx = "__i"
    ranked = table.select(list(spec.keys)).take(order).append_column(
        idx, pa.array(np.arange(table.num_rows, dtype=np.int64)))
    g = ranked.group_by(list(spec.keys), use_threads=False).aggregate(
        [(idx, "max"), (idx, "min")])
    last = table.take(order.take(g.column(f"{idx}_max")))
    first_kind = table.column("_change_type").take(order.take(g.column(f"{idx}_min")))
    deleted = last.column("__d")
    op = pc.if_else(deleted, pa.scalar(DELETE), pa.scalar(UPSERT))
    new = pc.and_(pc.equal(first_kind, "insert"), pc.invert(deleted))
    out = last.select(names).append_column(OP, op).append_column(NEW, new)
    return ChangeSet(table=out, keys=tuple(spec.keys), columns=tuple(names), scd_type=1)


def _inserts_of_distinct_keys(table: pa.Table, spec: ApplySpec) -> bool:
    """Whether every row is an insert of a key no other row has (with the default delete
    rule): each row is then its key's first and last change, and the reduction would give
    the rows back as new upserts. The rows of a snapshot chunk are so (one SELECT over
    distinct keys); checking it costs far less than the sort and group-by."""
    n = table.num_rows
    if not n or DEL_MARK in table.column_names or spec.apply_as_deletes != DEFAULT_DELETES:
        return False
    if pc.all(pc.equal(table["_change_type"], "insert")).as_py() is not True:
        return False
    keys = list(spec.keys)
    if len(keys) == 1:
        col = table[keys[0]]
        if n > 1 and col.null_count == 0:  # a chunk's rows come in key order: no hashing
            try:
                if pc.all(pc.less(col[:-1], col[1:])).as_py() is True:
                    return True
            except (pa.ArrowNotImplementedError, pa.ArrowInvalid):
                pass  # a type Arrow cannot order: count instead
        return pc.count_distinct(col, mode="all").as_py() == n
    return table.select(keys).group_by(keys, use_threads=False).aggregate([]).num_rows == n


def _reduce_scd2(table: pa.Table, spec: ApplySpec, names: list[str]) -> ChangeSet:
    """SCD type 2 in Arrow (``reduce_changes``). Per key, in sequence order: an insert
    opens a version; an update opens one when a tracked column differs from the row
    before it (its pre-image, else the key's previous change in the batch; with neither,
    it is taken to differ), and otherwise joins the version it continues, whose values
    become its own; a delete ends the version. A key's first change ends the target's
    open version (``CLOSE`` at its sequence) or, when it continues it, updates it in
    place (``AMEND``: the values, and ``__END_AT`` if a later change of the batch ends it)."""
    seq_name = spec.sequence_by
    tracked = spec.tracked_columns(names)
    keys = list(spec.keys)
    n = table.num_rows
    table = table.append_column("__d", _deleted(table, spec)).append_column(
        "__i", pa.array(range(n), pa.int64()))
    if n:
        table = table.sort_by([(k, "ascending") for k in keys] + [(seq_name, "ascending")])
    key_vals = list(zip(*(table.column(k).to_pylist() for k in keys))) if n else []
    kinds = table.column("_change_type").to_pylist()
    seqs = table.column(seq_name).to_pylist()
    dels = table.column("__d").to_pylist()
    track_vals = (list(zip(*(table.column(c).to_pylist() for c in tracked)))
                  if tracked and n else [()] * n)
    take, ops, starts, ends = [], [], [], []

    def emit(row: int, op: str, start, end) -> None:
        take.append(row)
        ops.append(op)
        starts.append(start)
        ends.append(end)

    i = 0
    while i < n:
        j = i
        while j < n and key_vals[j] == key_vals[i]:
            j += 1
        prev = None  # the row before: (deleted, tracked values)
        cur: list | None = None  # the open run: [op, start, last row]
        first = True
        for r in range(i, j):
            if kinds[r] == "update_preimage":
                prev = (False, track_vals[r])
                continue
            if dels[r]:
                if cur is not None:
                    emit(cur[2], cur[0], cur[1], seqs[r])
                elif first:
                    emit(r, CLOSE, None, seqs[r])
                cur, first, prev = None, False, (True, track_vals[r])
                continue
            goes_on = (tracked is not None and kinds[r] != "insert" and prev is not None
                       and not prev[0] and prev[1] == track_vals[r])
            if goes_on:
                if cur is None:  # it continues the target's open version
                    cur = [AMEND, None, r]
                else:
                    cur[2] = r
            else:
                if cur is not None:
                    emit(cur[2], cur[0], cur[1], seqs[r])
                elif first:
                    emit(r, CLOSE, None, seqs[r])
                cur = [VERSION, seqs[r], r]
            first, prev = False, (False, track_vals[r])
        if cur is not None:
            emit(cur[2], cur[0], cur[1], None)
        i = j
    seq_type = table.schema.field(seq_name).type
    out = (table.take(pa.array(take, pa.int64())).select(names)
           .append_column(START_AT, pa.array(starts, seq_type))
           .append_column(END_AT, pa.array(ends, seq_type))
           .append_column(OP, pa.array(ops, pa.string())))
    return ChangeSet(table=out, keys=tuple(spec.keys), columns=tuple(names), scd_type=2)
