"""How change rows become target rows: ``ApplySpec``, the rules of one apply, named as
``dlt.create_auto_cdc_flow`` names them.

Both planners (``spark_planner``, ``arrow_planner``) and the flow that hands their plans to a
sink read the same spec; it checks itself once, when it is made, and names what is wrong.
The SQL rules the Arrow planner cannot evaluate are evaluated by Spark into the marker
columns named here (``DEL_MARK``, ``TRUNC_MARK``).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from sparkcdc.core.records import META_COLUMNS
from sparkcdc.errors import ConfigError, SchemaError
from sparkcdc.sinks.base import END_AT, OP, START_AT

DEFAULT_DELETES = "_change_type = 'delete'"
DEL_MARK, TRUNC_MARK = "__del", "__trunc"  # the SQL rules, evaluated (``mark_changes``)


@dataclass(frozen=True)
class ApplySpec:
    """How change rows become target rows. The names follow ``dlt.create_auto_cdc_flow``.

    ``apply_as_deletes`` is a SQL boolean expression over the change row. The target's columns
    are ``column_list`` (default: every column of the change rows except the metadata
    columns ``_change_type``, ``_database``, ``_table``, ``_op_ts``, ``_seq``), minus
    ``except_column_list``.
    """

    keys: tuple[str, ...]
    sequence_by: str = "_seq"
    apply_as_deletes: str = DEFAULT_DELETES
    column_list: tuple[str, ...] | None = None
    except_column_list: tuple[str, ...] = ()
    ignore_null_updates: bool = False
    stored_as_scd_type: int = 1
    apply_as_truncates: str | None = None
    track_history_column_list: tuple[str, ...] | None = None
    track_history_except_column_list: tuple[str, ...] | None = None

    def __post_init__(self):
        if not self.keys:
            raise ConfigError("apply_changes needs at least one key column",
                              fix="pass keys=['id'] (the target's primary key)")
        if self.stored_as_scd_type not in (1, 2):
            raise ConfigError(f"stored_as_scd_type must be 1 or 2, got "
                              f"{self.stored_as_scd_type!r}",
                              fix="1 keeps the latest row per key; 2 keeps every version")
        if self.ignore_null_updates and self.stored_as_scd_type == 2:
            raise ConfigError("ignore_null_updates is supported for stored_as_scd_type=1 only",
                              fix="send full rows for SCD type 2 targets")
        overlap = set(self.keys) & set(self.except_column_list)
        if overlap:
            raise ConfigError(f"key columns {sorted(overlap)} are in except_column_list",
                              fix="the target needs its key columns")
        tracking = (self.track_history_column_list is not None
                    or self.track_history_except_column_list is not None)
        if tracking and self.stored_as_scd_type != 2:
            raise ConfigError("track_history_column_list / track_history_except_column_list "
                              "choose which changes make a new version, which only SCD type "
                              "2 keeps", fix="add stored_as_scd_type=2")
        if (self.track_history_column_list is not None
                and self.track_history_except_column_list is not None):
            raise ConfigError("track_history_column_list and track_history_except_column_list "
                              "are both given",
                              fix="name the tracked columns, or the untracked ones, not both")
        if self.apply_as_truncates and self.stored_as_scd_type != 1:
            raise ConfigError("apply_as_truncates empties the target, which SCD type 2 never "
                              "does (as in Databricks' AUTO CDC)",
                              fix="use apply_as_truncates with stored_as_scd_type=1")
        if self.apply_as_truncates and self.ignore_null_updates:
            raise ConfigError("apply_as_truncates and ignore_null_updates together are not "
                              "supported", fix="send full rows, or leave one of them out")

    @property
    def in_arrow(self) -> bool:
        """Whether batches are planned on the driver in Arrow (``reduce_changes``): the
        rules only the Arrow planner has (truncates, tracked history)."""
        return bool(self.apply_as_truncates or self.track_history_column_list is not None
                    or self.track_history_except_column_list is not None)

    def tracked_columns(self, names: Sequence[str]) -> tuple[str, ...] | None:
        """The columns whose change makes a new SCD type 2 version (None: every change
        does, the default)."""
        if self.track_history_column_list is not None:
            missing = [c for c in self.track_history_column_list if c not in names]
            if missing:
                raise SchemaError(f"track_history_column_list names columns the target "
                                  f"lacks: {missing}",
                                  fix=f"the target columns are: {', '.join(names)}")
            return tuple(self.track_history_column_list)
        if self.track_history_except_column_list is not None:
            missing = [c for c in self.track_history_except_column_list if c not in names]
            if missing:
                raise SchemaError(f"track_history_except_column_list names columns the "
                                  f"target lacks: {missing}",
                                  fix=f"the target columns are: {', '.join(names)}")
            return tuple(c for c in names if c not in self.keys
                         and c not in self.track_history_except_column_list)
        return None

    def target_columns(self, available: Sequence[str]) -> list[str]:
        if self.column_list is not None:
            missing = [c for c in self.column_list if c not in available]
            if missing:
                raise SchemaError(f"column_list names columns the change rows lack: {missing}",
                                  fix=f"the change rows have: {', '.join(available)}")
            cols = list(self.column_list)
        else:
            cols = [c for c in available if c not in META_COLUMNS]
        cols = [c for c in cols if c not in self.except_column_list]
        missing = [k for k in self.keys if k not in cols]
        if missing:
            raise SchemaError(f"key columns {missing} are not among the target columns",
                              fix=f"the target columns are: {', '.join(cols)}")
        if self.sequence_by not in available:
            raise SchemaError(f"the sequence column '{self.sequence_by}' is not in the change "
                              f"rows", fix="pass sequence_by= a column that orders the changes")
        for c in (START_AT, END_AT, OP):
            if c in cols:
                raise SchemaError(f"the change rows have a column named '{c}', which the sink "
                                  f"uses itself", fix="rename it or add it to except_column_list")
        return cols


def make_spec(keys, sequence_by, apply_as_deletes, column_list, except_column_list,
              ignore_null_updates, stored_as_scd_type, apply_as_truncates=None,
              track_history_column_list=None, track_history_except_column_list=None
              ) -> ApplySpec:
    """The spec that ``apply_changes``' and ``materialize``'s keyword arguments describe
    (a key or a list of keys, lists or ``None``), checked as ``ApplySpec`` checks it."""
    if isinstance(keys, str):
        keys = [keys]
    deletes = apply_as_deletes
    if deletes is None:
        deletes = DEFAULT_DELETES
    elif not isinstance(deletes, str):
        raise ConfigError("apply_as_deletes must be a SQL expression string",
                          fix="e.g. apply_as_deletes=\"_change_type = 'delete'\"")
    return ApplySpec(keys=tuple(keys), sequence_by=sequence_by, apply_as_deletes=deletes,
                     column_list=None if column_list is None else tuple(column_list),
                     except_column_list=tuple(except_column_list or ()),
                     ignore_null_updates=bool(ignore_null_updates),
                     stored_as_scd_type=int(stored_as_scd_type),
                     apply_as_truncates=apply_as_truncates or None,
                     track_history_column_list=_names(track_history_column_list),
                     track_history_except_column_list=_names(
                         track_history_except_column_list))


def _names(value) -> tuple[str, ...] | None:
    if value is None:
        return None
    return (value,) if isinstance(value, str) else tuple(value)
