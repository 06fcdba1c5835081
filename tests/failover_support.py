"""What the failover tests share: the database and the CDC user both servers of
``failover_pair`` (tests/conftest.py) have."""

FAILOVER_DB, FAILOVER_USER, FAILOVER_PASSWORD = "shop", "pipe", "failover-pw"
