#!/usr/bin/env bash
# Idempotent setup for a fresh Debian 12 machine: Debian packages that are missing, then the venv.
set -euo pipefail
cd "$(dirname "$0")/.."

need_pkgs=()
command -v mariadbd >/dev/null 2>&1 || [ -x /usr/sbin/mariadbd ] || need_pkgs+=(mariadb-server)
command -v mariadb >/dev/null 2>&1 || need_pkgs+=(mariadb-client)
command -v java >/dev/null 2>&1 || need_pkgs+=(openjdk-17-jre-headless)
# the Kafka tests run Apache Kafka's broker from Maven Central's jars, fetched with mvn
command -v mvn >/dev/null 2>&1 || need_pkgs+=(maven)
# the postgres sink tests run their own PostgreSQL server (initdb + postgres, no system cluster)
command -v initdb >/dev/null 2>&1 || ls /usr/lib/postgresql/*/bin/initdb >/dev/null 2>&1 || need_pkgs+=(postgresql)
# the online schema change test runs Percona's pt-online-schema-change on a captured table
command -v pt-online-schema-change >/dev/null 2>&1 || need_pkgs+=(percona-toolkit)
# the compiled row decoder (setup.py, optional: without these sparkcdc falls back to Python)
command -v gcc >/dev/null 2>&1 || need_pkgs+=(gcc)
PYTHON=${PYTHON:-python3.11}
command -v "$PYTHON" >/dev/null 2>&1 || PYTHON=python3
if command -v "$PYTHON" >/dev/null 2>&1 && ! [ -f "$("$PYTHON" -c 'import sysconfig; print(sysconfig.get_paths()["include"])')/Python.h" ]; then
    need_pkgs+=(python3-dev)
fi
if [ ${#need_pkgs[@]} -gt 0 ]; then
    echo "setup: installing Debian packages: ${need_pkgs[*]}"
    SUDO=""
    [ "$(id -u)" -eq 0 ] || SUDO="sudo"
    $SUDO apt-get update -qq
    DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq --no-install-recommends "${need_pkgs[@]}"
    # Debian's package starts a system server; we run our own throwaway servers instead.
    $SUDO systemctl disable --now mariadb >/dev/null 2>&1 || true
    $SUDO systemctl disable --now postgresql >/dev/null 2>&1 || true
fi

# MySQL 9.7 for the MySQL sandbox (sparkcdc/testing/mysql.py): a Debian unstable root with
# Debian's mysql-server-core, made once under /opt/sparkcdc-mysql (SPARKCDC_MYSQL_ROOT)
bash scripts/setup_mysql.sh

if [ ! -x .venv/bin/python ]; then
    echo "setup: creating .venv with $PYTHON"
    "$PYTHON" -m venv .venv
fi
.venv/bin/python -m pip install -q --upgrade pip >/dev/null 2>&1 || true
echo "setup: installing sparkcdc (editable) with the dev extra and every sink's driver"
.venv/bin/python -m pip install -q -e '.[dev,all]'
echo "setup: fetching the Kafka broker's jars into .jars (once)"
# Kafka Connect and Debezium (the `connect` group) serve only `make test-faults`, whose
# fixture fetches them when missing: `make test` does not wait for them
bash scripts/fetch_jars.sh kafka
.venv/bin/python -c "from sparkcdc.mysql.binlog import fastdecode as f; print('setup: compiled row decoder', 'built' if f.available() else 'NOT built (pure-Python fallback)')"
echo "setup: done"
