"""The members file as one typed value both sides agree on (``spark/members.py``)."""

from __future__ import annotations

import json

import pytest

from sparkcdc.core.offsets import BinlogOffset
from sparkcdc.core.schema import Column, TableId, TableSchema
from sparkcdc.spark.members import Members, Reread

A, B = TableId("d", "a"), TableId("d", "b")


def _schema(t: TableId) -> TableSchema:
    return TableSchema(t, (Column("id", "int", False), Column("v", "varchar(10)")), ("id",), "id")


def test_what_the_pipeline_writes_the_source_reads_back_equal():
    m = Members({A: 3, B: 1}, {A: _schema(A), B: _schema(B)},
                {B: BinlogOffset("binlog.000002", 1234, gtid="0-1-77", flavor="mariadb")},
                {A: Reread(2, "id < 10")})
    text = json.dumps(m.to_dict(), sort_keys=True)
    back = Members.parse(text)
    assert back == m
    assert json.loads(text)["rereads"] == {"d.a": {"id": 2, "where": "id < 10"}}
    assert json.loads(text)["since"]["d.b"]["pos"] == 1234


def test_an_older_file_of_bare_generations_reads():
    assert Members.parse('{"d.a": 2}') == Members({A: 2})


@pytest.mark.parametrize("text", ['{"generations": {"d.a": "x"}}', "[1]", "{",
                                  '{"generations": {}, "rereads": {"d.a": {"id": 1}}}'])
def test_a_damaged_file_raises_what_the_source_catches(text):
    # the source keeps its last members on these (CDCStreamReader._read_members)
    with pytest.raises((ValueError, KeyError, TypeError, AttributeError)):
        Members.parse(text)
