"""Which changes a source table's schema change makes to its target, by
``schema.change.behavior`` (docs/pipelines.md has the table of behaviors), and the target's
columns afterwards. The pipeline decides here; the sink makes each change itself
(``Sink.can_change``, ``Sink.evolve``: sinks/evolution.py).
"""

from __future__ import annotations

import logging

from sparkcdc.core.schema import TableSchema
from sparkcdc.errors import SchemaError
from sparkcdc.pipeline.definition.conversions import arrow_schema
from sparkcdc.pipeline.definition.flink_keys import SourceExtras
from sparkcdc.pipeline.run.schema.diff import Diff
from sparkcdc.sinks.evolution import Change, ChangeKind

log = logging.getLogger("sparkcdc.pipeline")


def evolve_target(table: str, target: str, columns: list | None, new: TableSchema, d: Diff,
                  sink, behavior: str, transformed: bool,
                  extras: SourceExtras | None = None, statements: tuple[str, ...] = ()) -> list:
    """Change the target as ``behavior`` says; the target's columns afterwards.

    evolve: the target follows the source (add, drop, rename, retype), or the change
    stops with a fix. try_evolve: the same where the target can; otherwise as lenient.
    lenient: columns are added, never dropped; a renamed column is added under the new
    name with the old one's values (the old column stays for its readers); types change
    where the target can, else values are cast. ignore: the target keeps its columns."""
    from pyspark.sql.pandas.types import from_arrow_schema, to_arrow_type


    cols = [dict(c) for c in (columns or [])]
    if behavior == "ignore":
        return cols
    names = {c["name"] for c in cols}
    new_fields = {f.name: f for f in from_arrow_schema(arrow_schema(new, extras),
                                                       prefer_timestamp_ntz=True).fields}

    def arrow(c):
        return to_arrow_type(new_fields[c].dataType)

    plan: list[Change] = []
    renamed_to: dict[str, str] = {}
    for a, b in d.renamed:
        if a not in names or b not in new_fields or transformed:
            continue
        if behavior == "lenient":
            plan += [Change(ChangeKind.ADD, b, type=arrow(b)), Change(ChangeKind.COPY, a, b)]
        else:
            plan.append(Change(ChangeKind.RENAME, a, b))
            renamed_to[a] = b
    for c in d.added:
        if c in new_fields and c not in names and not transformed:
            plan.append(Change(ChangeKind.ADD, c, type=arrow(c)))
    if behavior in ("evolve", "try_evolve"):
        plan += [Change(ChangeKind.DROP, c) for c in d.dropped if c in names]
    for col in cols:
        now_named = renamed_to.get(str(col["name"]), str(col["name"]))
        f = new_fields.get(now_named)
        if f is not None and f.dataType.jsonValue() != col["type"]:
            plan.append(Change(ChangeKind.RETYPE, now_named, type=arrow(now_named)))
    if not plan:
        return cols
    current = sink.stored_columns()
    done: list[Change] = []
    for ch in plan:
        if ch.kind is ChangeKind.COPY and not any(x.kind is ChangeKind.ADD and x.name == ch.new_name
                                         for x in done):
            continue
        stored = (current.field(ch.name).type if ch.kind is ChangeKind.RETYPE and current is not None
                  and ch.name in current.names else None)
        why = None
        if not sink.can_change(ch, stored):
            why = sink.refusal(ch)
        else:
            try:
                sink.evolve([ch], tuple(new.primary_key))
            except Exception as e:  # noqa: BLE001 - any target's refusal becomes the reason
                why = f"{target}: {ch.describe()} failed: {str(e).splitlines()[0]}"
        if why is None:
            done.append(ch)
            continue
        if behavior == "evolve":
            raise SchemaError(f"table {table} changed ({d.describe()}); {why}",
                              fix="use schema.change.behavior: try_evolve or lenient (the "
                                  "target keeps what it cannot change), or recreate the "
                                  "target with a new checkpoint location")
        log.warning("%s (%s: %s)", why, behavior, {
            ChangeKind.ADD: "left out", ChangeKind.DROP: "kept, null from now on",
            ChangeKind.RENAME: "the new name is added, the old one kept",
            ChangeKind.COPY: "not copied",
            ChangeKind.RETYPE: "the target keeps its type, values are cast"}[ch.kind])
        if ch.kind is ChangeKind.RENAME and ch.new_name:  # fall back to lenient's rename
            ch_add = Change(ChangeKind.ADD, ch.new_name, type=arrow(ch.new_name))
            try:
                if sink.can_change(ch_add):
                    sink.evolve([ch_add], tuple(new.primary_key))
                    done.append(ch_add)
            except Exception as e:  # noqa: BLE001 - lenient: logged, the run goes on
                log.warning("%s: %s failed: %s", target, ch_add.describe(), e)
    for ch in done:
        if ch.kind is ChangeKind.ADD:
            # nullable in the target whatever the source says: the rows written before it
            # (and those of the batch before the ALTER) have no value for it
            cols.append(dict(new_fields[ch.name].jsonValue(), nullable=True))
        elif ch.kind is ChangeKind.DROP:
            cols = [c for c in cols if c["name"] != ch.name]
        elif ch.kind is ChangeKind.RENAME:
            cols = [dict(c, name=ch.new_name) if c["name"] == ch.name else c for c in cols]
        elif ch.kind is ChangeKind.RETYPE:
            cols = [dict(c, type=new_fields[ch.name].dataType.jsonValue())
                    if c["name"] == ch.name else c for c in cols]
    log.info("%s: target %s: %s", table, target,
             "; ".join(ch.describe() for ch in done) or "unchanged")
    if done:  # the target changed: tell readers who learn it from the data (kafka topics)
        sink.announce(new, tuple(statements), tuple(c["name"] for c in cols),
                      {"added": tuple(c for c in d.added if c in new_fields),
                       "dropped": d.dropped, "modified": tuple(m[0] for m in d.modified)})
    return cols

