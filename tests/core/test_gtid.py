"""GTID states and the order of offsets across servers (core/gtid.py, core/offsets.py)."""

from __future__ import annotations

import pytest

from sparkcdc.core import gtid
from sparkcdc.core.offsets import BinlogOffset
from sparkcdc.errors import OffsetError

A = "3e11fa47-71ca-11e1-9e33-c80aa9429562"
B = "4f22ab58-82db-22f2-8f44-d91bb8530673"


def test_mariadb_positions_order_by_sequence_per_domain():
    assert gtid.compare("0-1-150", "0-2-151", "mariadb") == -1
    assert gtid.compare("0-2-151", "0-1-150", "mariadb") == 1
    assert gtid.compare("0-1-150", "0-1-150", "mariadb") == 0
    assert gtid.compare("0-1-5,1-1-9", "0-2-6,1-1-9", "mariadb") == -1
    assert gtid.compare("0-1-5", "0-1-5,1-3-1", "mariadb") == -1  # a new domain
    assert gtid.compare("0-1-5,1-1-9", "0-1-6,1-1-8", "mariadb") is None  # not nested
    assert gtid.compare(None, "0-1-1", "mariadb") is None


def test_mysql_sets_order_by_inclusion():
    assert gtid.compare(f"{A}:1-5", f"{A}:1-7", "mysql") == -1
    assert gtid.compare(f"{A}:1-7,{B}:1", f"{A}:1-7", "mysql") == 1
    assert gtid.compare(f"{A}:1-3:5", f"{A}:1-5", "mysql") == -1  # a gap
    assert gtid.compare(f"{A}:1-3:4-5", f"{A}:1-5", "mysql") == 0  # spelled apart
    assert gtid.compare(f"{A.upper()}:1-5", f"{A}:1-5", "mysql") == 0
    assert gtid.compare(f"{A}:1-5", f"{B}:1-5", "mysql") is None
    assert gtid.compare(f"{A}:1-5,\n{B}:1", f"{B}:1,{A}:1-5", "mysql") == 0


def test_contains_and_missing():
    assert gtid.contains("0-1-150", "0-2-150", "mariadb")
    assert not gtid.contains("0-1-150", "0-2-151", "mariadb")
    assert not gtid.contains("0-1-150", "1-1-1", "mariadb")
    assert gtid.contains(f"{A}:1-3:7-9", f"{A}:8", "mysql")
    assert not gtid.contains(f"{A}:1-3:7-9", f"{A}:5", "mysql")
    assert not gtid.contains(None, "0-1-1", "mariadb")
    assert gtid.missing("0-1-5", "0-1-9,1-1-2", "mariadb") == (
        "domain 0 up to seq 9 (the server has 5), domain 1 up to seq 2 (the server has 0)")
    assert gtid.missing(f"{A}:1-5", f"{A}:1-5,{B}:1-2", "mysql") == f"{B}:1-2"
    assert gtid.missing("0-1-9", "0-1-5", "mariadb") == ""


def test_malformed_states_name_themselves():
    with pytest.raises(OffsetError, match="not a MariaDB GTID position"):
        gtid.mariadb_position("0-1")
    with pytest.raises(OffsetError, match="not a MySQL GTID set"):
        gtid.mysql_set(f"{A}:x-2")


def test_offsets_of_two_servers_order_by_gtid_state_then_counters():
    old = BinlogOffset("binlog.000009", 900, gtid="0-1-150", server="1")
    new = BinlogOffset("binlog.000002", 300, gtid="0-2-151", server="2")
    assert old < new and new > old  # although its file and position are smaller
    same_point = BinlogOffset("binlog.000001", 4000, gtid="0-1-150", server="2")
    assert same_point == old and hash(same_point) == hash(old)
    inside = BinlogOffset("binlog.000001", 4000, 2, 1, gtid="0-1-150", server="2")
    assert old < inside < new
    # one server (or an offset that names none): file and position, as before
    assert BinlogOffset("binlog.000009", 900, server="1") > BinlogOffset("binlog.000002", 300,
                                                                         server="1")
    assert BinlogOffset("binlog.000009", 900) > BinlogOffset("binlog.000002", 300, server="2")
    with pytest.raises(OffsetError, match="no GTID state"):
        _ = BinlogOffset("binlog.000009", 900, server="1") < new
    with pytest.raises(OffsetError, match="do not hold one another"):
        _ = BinlogOffset("b.000001", 4, gtid=f"{A}:1-5", flavor="mysql", server="1") < \
            BinlogOffset("b.000001", 4, gtid=f"{B}:1-5", flavor="mysql", server="2")


def test_the_server_travels_in_json_and_old_offsets_still_read():
    off = BinlogOffset("binlog.000003", 77, 1, 2, gtid="0-1-5", server="12")
    assert BinlogOffset.from_json(off.to_json()).server == "12"
    assert off.to_json().endswith(',"server":"12"}')
    legacy = '{"file":"binlog.000003","pos":77,"events":0,"rows":0,"gtid":null,' \
             '"flavor":"mariadb"}'
    assert BinlogOffset.from_json(legacy).server is None
    assert BinlogOffset.from_json(legacy).to_json() == legacy  # unchanged, byte for byte
