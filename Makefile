# Two commands for a newcomer: `make demo` and `make test`.
SHELL := /bin/bash
VENV := .venv
PY := $(VENV)/bin/python
STAMP := $(VENV)/.sparkcdc-installed

.PHONY: setup test test-fast test-faults demo clean

setup: $(STAMP)

# Re-runs only when the dependency list changes; a second `make setup` is a no-op.
$(STAMP): pyproject.toml setup.py sparkcdc/mysql/_fastdecode.c scripts/setup.sh
	bash scripts/setup.sh
	touch $(STAMP)

# the full fault-injection suite (marker `faults`), the Spark standalone cluster (`cluster`) and
# the huge transactions and rows (`huge`, minutes each) are left to `make test-faults`
test: setup
	$(PY) -m pytest tests -m "not faults and not cluster and not huge"

# A sandbox MariaDB, a pipeline into local Delta tables under writes, verify; stops it all.
demo: setup
	$(PY) demo/demo.py

test-fast: setup
	$(PY) -m pytest tests -m "not slow and not faults and not cluster and not huge"

# SIGKILLs, cut/refused/slow connections, server restarts, task retries (docs/operations.md)
test-faults: setup
	$(PY) -m pytest $(wildcard tests/test_faults*.py) tests/test_cluster.py tests/test_huge.py

# side-by-side throughput against mariadb-dump, connectorx, Spark JDBC, python-mysql-replication,
# mariadb-binlog and Debezium embedded; writes docs/benchmarks.md (bench/throughput.py --help)
bench: setup
	$(VENV)/bin/python -m pip install -q -e '.[dev,bench]'
	$(PY) bench/throughput.py $(BENCH_ARGS)

clean:
	rm -rf $(VENV) .pytest_cache build *.egg-info
