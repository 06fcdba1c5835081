"""Source options: Flink CDC names and defaults, one clear message per bad option."""

from __future__ import annotations

import pytest

from sparkcdc.errors import ConfigError
from sparkcdc.mysql.options import SourceConfig

BASE = {"hostname": "h", "username": "u", "password": "secret-pw", "database-name": "db",
        "table-name": "db\\.t"}


def parse(**kw):
    return SourceConfig.parse({**BASE, **kw})


def test_defaults_follow_flink_cdc():
    c = parse()
    assert c.connection.port == 3306
    assert c.startup_mode == "initial"
    assert c.chunk_size == 8096
    assert (c.factor_lower, c.factor_upper) == (0.05, 1000.0)
    assert c.connection.connect_timeout == 30.0 and c.connection.max_retries == 3
    assert c.heartbeat_interval == 30.0 and c.backfill_skip is False
    assert len(c.server_ids) == 9 and c.max_rows_per_batch is None


def test_password_never_in_repr_or_raw():
    c = parse()
    assert "secret-pw" not in repr(c) and "secret-pw" not in str(c.connection)
    assert "password" not in c.raw


def test_server_id_single_and_range():
    assert parse(**{"server-id": "5400"}).server_ids == (5400,)
    assert parse(**{"server-id": "5400-5403"}).server_ids == (5400, 5401, 5402, 5403)


@pytest.mark.parametrize("opts,needle", [
    ({"hostnme": "x"}, "unknown option 'hostnme'.*did you mean 'hostname'"),
    ({"scan.incremental.snapshot.chunk.sise": "10"},
     "did you mean 'scan.incremental.snapshot.chunk.size'"),
    ({"port": "abc"}, "option 'port' must be an integer"),
    ({"port": "70000"}, "option 'port' is out of range"),
    ({"scan.startup.mode": "latest"}, "unknown value 'latest'.*did you mean 'latest-offset'"),
    ({"server-id": "9-3"}, "server-id"),
    ({"server-id": "abc"}, "malformed value 'abc'"),
    ({"connect.timeout": "soon"}, "'connect.timeout' has the malformed value"),
    ({"scan.incremental.snapshot.chunk.size": "0"}, "out of range"),
    ({"scan.incremental.snapshot.backfill.skip": "yes"}, "must be true or false"),
    ({"table-name": "db.(t"}, "not a valid regular expression"),
    ({"chunk-key.even-distribution.factor.lower-bound": "-1"}, "must be positive"),
    ({"maxRowsPerBatch": "0"}, "out of range"),
    ({"scan.startup.mode": "specific-offset"}, "needs a position"),
    ({"scan.startup.mode": "specific-offset", "scan.startup.specific-offset.file": "b.1"},
     "specific-offset.pos' is required"),
    ({"scan.startup.mode": "timestamp"}, "'scan.startup.timestamp-millis' is required"),
])
def test_bad_options_name_the_option_and_the_fix(opts, needle):
    with pytest.raises(ConfigError, match="(?s)" + needle) as e:
        parse(**opts)
    assert "secret-pw" not in str(e.value)


@pytest.mark.parametrize("missing", ["hostname", "username", "database-name", "table-name"])
def test_required_options(missing):
    opts = {k: v for k, v in BASE.items() if k != missing}
    with pytest.raises(ConfigError, match=f"option '{missing}' is required"):
        SourceConfig.parse(opts)


def test_startup_modes_parse():
    c = parse(**{"scan.startup.mode": "specific-offset",
                 "scan.startup.specific-offset.file": "binlog.000003",
                 "scan.startup.specific-offset.pos": "1234",
                 "scan.startup.specific-offset.skip-events": "2",
                 "scan.startup.specific-offset.skip-rows": "5"})
    assert (c.startup.file, c.startup.pos, c.startup.skip_events, c.startup.skip_rows) == \
        ("binlog.000003", 1234, 2, 5)
    assert parse(**{"scan.startup.mode": "timestamp",
                    "scan.startup.timestamp-millis": "1700000000000"}).startup.timestamp_ms \
        == 1700000000000
    assert parse(MAXROWSPERBATCH="100").max_rows_per_batch == 100
