"""Throwaway servers and faults, for trying and testing sparkcdc; never used by a pipeline at
run time (an import contract says so).

* ``mariadb``: a CDC-ready MariaDB started as a child process on loopback with a temporary
  datadir (``MariaDBSandbox``), or detached for ``sparkcdc sandbox start``;
* ``mysql``: the same for MySQL 9.7 (``MySQLSandbox``, GTIDs on), run chrooted into the
  Debian unstable root ``scripts/setup_mysql.sh`` made;
* ``postgres``: the same for a PostgreSQL target (``PostgresSandbox``);
* ``kafka``: an Apache Kafka broker (KRaft, one node) from the jars `make setup` fetched
  (``KafkaSandbox``), or detached for ``sparkcdc sandbox start kafka``;
* ``proxy``: a TCP proxy that cuts, refuses, delays and throttles connections, for the
  fault tests.
"""
