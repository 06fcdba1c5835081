"""What a sink can do, declared on its class (``Sink.capabilities``), as dlt's destinations
declare theirs: the pipeline asks these instead of probing a sink for methods or branching
on its type.

The declaration is checked against the class when it is defined (``Sink.__init_subclass__``):
a sink that says it takes files from tasks implements those operations, a merge sink
implements ``write``, and so on, so a declaration cannot drift from the code.
"""

from __future__ import annotations

from dataclasses import dataclass

from sparkcdc.sinks.evolution import ChangeKind
from sparkcdc.sinks.kinds import SinkKind, Word


class Emptying(Word):
    """How a target is emptied for a table taken again (``Sink.empty``): its rows deleted;
    an event naming the table written (the kafka sink's truncate: other tables' rows in the
    same target are untouched); or not at all (the files sink's changelog)."""

    ROWS = "rows"
    EVENT = "event"
    NEVER = "never"


@dataclass(frozen=True)
class TableLayout:
    """How a sink creates a table with a transform's ``partition-keys`` and
    ``table-options`` (Flink's keys): the option that partitions it and the prefix of its
    table properties."""

    partition_option: str
    property_prefix: str


@dataclass(frozen=True)
class Capabilities:
    """A sink's declared capabilities.

    ``kind``: what it holds (``SinkKind``). ``writer``: the library that writes it, and
    ``tasks_writer``: how Spark tasks write it where they do (both as ``sparkcdc status``
    names them). ``files_from_tasks``: its type can take a snapshot's new rows as files
    written by the tasks (``Sink.may_take_files``, ``takes_files``, ``write_files``,
    ``commit_files``); ``changes_from_tasks``: the changes, by key slices
    (``plan_changes``, ``write_changes``, ``commit_changes``); ``spark_writer``: Spark's
    own writer for its format may write it (``writer_for``, ``takes_frames``,
    ``write_frame``). Each is what the type can do; a target of it answers for itself
    (a Delta table on an object store takes no files). ``takes_arrow``: a changelog sink
    also takes the change rows as the Arrow table the driver holds. ``replaces_ranges``: it
    deletes the rows of ``ChangeSet.replaces`` (a chunk read again whole). ``empties``: how
    it is emptied (``Emptying``). ``schema_changes``: the kinds of column change it can
    make (``Sink.can_change`` may refuse one further, for a type it cannot promote).
    ``shares_targets``: several source tables routed into one target each write it (their
    batch ids kept apart); the files sink's batch folders are one per batch id, so no.
    ``table_layout``: how it creates a partitioned table with properties, or None, and
    then ``no_layout``: why not, for the user."""

    kind: SinkKind
    writer: str
    tasks_writer: str = ""
    files_from_tasks: bool = False
    changes_from_tasks: bool = False
    spark_writer: bool = False
    takes_arrow: bool = False
    replaces_ranges: bool = False
    empties: Emptying = Emptying.NEVER
    schema_changes: frozenset[ChangeKind] = frozenset()
    shares_targets: bool = True
    table_layout: TableLayout | None = None
    no_layout: str = ""

    def __post_init__(self) -> None:
        merge = self.kind is SinkKind.MERGE
        if not merge and (self.files_from_tasks or self.changes_from_tasks
                          or self.spark_writer or self.replaces_ranges):
            raise TypeError("a changelog sink takes change rows: no files, slices, frames "
                            "or ranges replaced")
        if merge and self.takes_arrow:
            raise TypeError("takes_arrow is a changelog sink's (a merge sink takes a ChangeSet)")
        if (self.table_layout is None) == (not self.no_layout):
            raise TypeError("declare a table_layout, or say why not in no_layout")
        if (self.files_from_tasks or self.changes_from_tasks) and not self.tasks_writer:
            raise TypeError("a sink that Spark tasks write names how (tasks_writer)")

    @property
    def empties_by_event(self) -> bool:
        """``empty()`` writes an event naming the table rather than deleting rows: it
        empties the table for a changelog's reader and touches no other table's rows, so a
        target other tables share may be emptied for one of them."""
        return self.empties is Emptying.EVENT

    @property
    def can_empty(self) -> bool:
        """Whether the pipeline can empty a target to take a table again."""
        return self.empties is not Emptying.NEVER
