"""What the failover tests share: the database and the CDC user both servers of
``failover_pair`` (tests/conftest.py) have."""

from types import ModuleType

FAILOVER_DB, FAILOVER_USER, FAILOVER_PASSWORD = "shop", "pipe", "failover-pw"


def tools(server) -> ModuleType:
    """The replication verbs (``replicate``, ``caught_up``, ``promote``) of ``server``'s
    kind: MariaDB's (``gtid_slave_pos``, ``MASTER_GTID_WAIT``) or MySQL's
    (``SOURCE_AUTO_POSITION``, ``WAIT_FOR_EXECUTED_GTID_SET``)."""
    from sparkcdc.testing import mariadb, mysql

    return mysql if isinstance(server, mysql.MySQLSandbox) else mariadb


def failover_yaml(port: int, tmp_path, name: str, base: int) -> str:
    """A pipeline capturing ``shop.t`` through the proxy at ``port`` into local Delta under
    ``tmp_path`` (the password from ``${PIPE_PW}``), server ids from ``base``."""
    return f"""\
source:
  type: mysql
  hostname: 127.0.0.1
  port: {port}
  username: {FAILOVER_USER}
  password: ${{PIPE_PW}}
  tables: {FAILOVER_DB}.t
  server-id: {base}-{base + 9}
  scan.incremental.snapshot.chunk.size: 500
  connect.timeout: 5s
sink:
  type: delta
  path: {tmp_path}/lake
pipeline:
  name: {name}
  parallelism: 1
  max-rows-per-batch: 500
  trigger.interval: 1s
  checkpoint.location: {tmp_path}/ckpt
"""
