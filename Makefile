# Two commands for a newcomer: `make demo` and `make test`.
SHELL := /bin/bash
VENV := .venv
PY := $(VENV)/bin/python
STAMP := $(VENV)/.sparkcdc-installed

.PHONY: setup test test-fast test-faults test-compat demo clean

setup: $(STAMP)

# Re-runs only when the dependency list changes; a second `make setup` is a no-op.
$(STAMP): pyproject.toml setup.py sparkcdc/mysql/binlog/_fastdecode.c scripts/setup.sh \
		scripts/setup_mysql.sh scripts/fetch_jars.sh
	bash scripts/setup.sh
	touch $(STAMP)

# make test and test-fast run in TEST_WORKERS pytest-xdist workers (a test file stays on one
# worker; each worker starts its own MariaDB, PostgreSQL, Kafka and Spark session): most tests
# wait on servers and Spark's start, so two workers on two cores take about 60% of the time.
TEST_WORKERS ?= 2
XDIST := -n $(TEST_WORKERS) --dist loadfile

# the full fault-injection suite (marker `faults`), the Spark standalone cluster (`cluster`) and
# the huge transactions and rows (`huge`, minutes each) are left to `make test-faults`
test: setup
	$(VENV)/bin/lint-imports
	$(VENV)/bin/mypy sparkcdc/core sparkcdc/spark sparkcdc/formats sparkcdc/apply.py sparkcdc/errors.py \
		sparkcdc/options.py sparkcdc/pipeline/class_cache.py sparkcdc/pipeline/session.py \
		sparkcdc/pipeline/signals.py sparkcdc/pipeline/warm_python.py sparkcdc/pipeline/run
	$(PY) -m pytest tests $(XDIST) -m "not faults and not cluster and not huge and not spark_delta and not wheel"

# A sandbox MariaDB (or MySQL 9.7: make demo SERVER=mysql), a pipeline into local Delta
# tables under writes, verify; stops it all.
SERVER ?= mariadb
demo: setup
	$(PY) demo/demo.py --server $(SERVER)

test-fast: setup
	$(PY) -m pytest tests $(XDIST) -m "not slow and not faults and not cluster and not huge and not spark_delta and not wheel"

# the fast subset on Python 3.10, 3.12 and 3.13 and on the oldest and newest supported PySpark
# (4.2 with delta-spark's catalog tests, 4.3), each in its own venv under .venv-compat/
test-compat: setup
	bash scripts/compat.sh

# SIGKILLs, cut/refused/slow connections, server restarts, task retries (docs/operations.md),
# and 1,000 tables in one query (make test takes 250); then the faults-marked cases of the
# re-read tests under writes in tests/pipeline (re-keyed, renamed, purged, truncated) and
# a new key on PostgreSQL after the snapshot (make test has it at the sink, test_sql_rekey)
test-faults: setup
	bash scripts/fetch_jars.sh connect
	SPARKCDC_TEST_TABLES=1000 $(PY) -m pytest tests/faults tests/pipeline/test_kill.py \
		tests/pipeline/test_class_cache.py tests/pipeline/test_pipeline_stream.py::test_many_tables_one_query
	$(PY) -m pytest -m faults tests/pipeline/test_reread_retake.py tests/pipeline/test_reread_rename.py \
		tests/pipeline/test_reread_purged.py tests/pipeline/test_kafka_truncate.py \
		tests/pipeline/test_schema_in_stream.py

# side-by-side throughput against mariadb-dump, connectorx, Spark JDBC, python-mysql-replication,
# mariadb-binlog and Debezium embedded (bench/throughput.py); `sparkcdc run` end to end into
# every sink beside the same peers (bench/pipeline.py); each sink's writer against Spark's own
# writers (bench/writers.py, jars fetched with mvn into .jars); 1 to 1,000 tables in one pipeline
# beside Debezium (bench/tables.py); sparkcdc against Flink CDC itself under PyFlink, in
# .venv-flink with its connector jar in .jars/flink (bench/flink.py, scripts/setup_flink.sh);
# MySQL → Kafka, sparkcdc's kafka sink against Debezium's MySQL connector on Kafka Connect
# into one broker (bench/kafka.py); all write docs/benchmarks.md
bench: setup
	$(VENV)/bin/python -m pip install -q -e '.[dev,bench,all]'
	bash scripts/fetch_jars.sh
	bash scripts/fetch_jars.sh connect
	bash scripts/setup_flink.sh
	$(PY) bench/throughput.py $(BENCH_ARGS)
	$(PY) bench/pipeline.py
	$(PY) bench/writers.py
	$(PY) bench/tables.py
	$(PY) bench/flink.py
	$(PY) bench/kafka.py

clean:
	rm -rf $(VENV) .venv-compat .venv-flink .pytest_cache build *.egg-info
