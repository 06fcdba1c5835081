"""The peers' own type tests on a real server: Flink CDC's and Debezium's MySQL type-test
tables (their DDL, their rows, and the values their tests assert, restated in
tests/support/peer_types_flink.py, peer_types_debezium.py and peer_types_debezium_json.py, with
the file and commit each comes from) are created on MySQL 9.7 and MariaDB 10.11 (the
``server`` fixture) and read through sparkcdc's snapshot reader and binlog reader, on the
inserts and on updates to other values. Both paths must give the peer's value, in
sparkcdc's canonical form (docs/types.md), and the same value as each other for the same
row. Where sparkcdc deliberately differs from a peer, the data says why at the value, and
docs/types.md ("Compared with Flink CDC and Debezium") lists the differences."""

from __future__ import annotations

import peer_types_debezium
import peer_types_debezium_json
import peer_types_flink
import pytest
from peer_types_support import PeerFile, run_peer_tables

FILES = [*peer_types_flink.FILES, *peer_types_debezium.FILES,
         *peer_types_debezium_json.FILES]


@pytest.mark.parametrize("peer_file", FILES, ids=[f.__name__ for f in FILES])
def test_peer_type_tables_read_as_the_peer_expects_on_both_paths(server, server_db, peer_file):
    mysql = server.info.server == "mysql"
    peer: PeerFile = peer_file(mysql)
    if not mysql and peer.mariadb_skip:
        pytest.skip(peer.mariadb_skip)
    run_peer_tables(server, server_db, peer.tables)
