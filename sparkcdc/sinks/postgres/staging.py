"""A batch's rows loaded by Spark tasks into staging tables of the target's schema, applied
by the driver in one transaction with the batch id (docs/sinks.md, "PostgreSQL: rows from
the tasks").

A task COPYs its rows into a staging table of its own, made and filled in one transaction
(a task that dies leaves no half-filled table: the transaction, table and all, is rolled
back; one that dies after it leaves a whole table no commit names). The name says whose it
is: ``sc_<digest of app id, schema and table>_b<batch>_<kind>_<uuid>`` (``kind``: ``f`` for
a snapshot's new rows, ``c`` for a slice's changes), so the tables of one writer's batch are
found by their prefix, and another writer's (a shard of the same target, another target of
a fanned-out table) are not. The task sends the driver the table's name and row count.

The driver's commit applies only the tables the tasks reported, in the transaction that
records the batch id, and drops them in it (PostgreSQL's DDL is transactional). Then the
writer's staging tables of this batch and of any before it that are still there are
dropped: no commit can use them any more (a batch at or below the recorded id is skipped),
they are what task attempts that died left.

Staging tables are ``UNLOGGED`` (no write-ahead log for rows that live a few seconds). A
server that crashes empties them: the commit counts each table's rows against what its task
reported, and a table short of rows fails the batch as transient (the stream runs it
again, and its tasks load it anew).

The names are made in ``sinks/sql.py``, which the mysql sink's staging tables share (loaded
with multi-row INSERTs; dropped just after its commit, MySQL's DDL committing implicitly).
"""

from __future__ import annotations

from sparkcdc.sinks.sql import StageKind
from sparkcdc.sinks.sql import staging_batch as batch_of
from sparkcdc.sinks.sql import staging_name as name
from sparkcdc.sinks.sql import staging_prefix as prefix

CHANGES, FILES = StageKind.CHANGES, StageKind.FILES

__all__ = ["CHANGES", "FILES", "batch_of", "name", "prefix"]
