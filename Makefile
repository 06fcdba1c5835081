# Two commands for a newcomer: `make demo` and `make test`.
SHELL := /bin/bash
VENV := .venv
PY := $(VENV)/bin/python
STAMP := $(VENV)/.sparkcdc-installed

.PHONY: setup test test-long test-mysql test-fast test-faults test-compat demo clean

setup: $(STAMP)

# Re-runs only when the dependency list changes; a second `make setup` is a no-op.
$(STAMP): pyproject.toml setup.py $(wildcard sparkcdc/mysql/binlog/_fast*.[ch]) scripts/setup.sh \
		scripts/setup_mysql.sh scripts/fetch_jars.sh
	bash scripts/setup.sh
	touch $(STAMP)

# make test and test-fast run in TEST_WORKERS pytest-xdist workers (a test file stays on one
# worker; each worker starts its own MariaDB, PostgreSQL, Kafka and Spark session): most tests
# wait on servers and Spark's start, so two workers on two cores take about 60% of the time.
TEST_WORKERS ?= 2
XDIST := -n $(TEST_WORKERS) --dist loadfile

# the full fault-injection suite (marker `faults`), the Spark standalone cluster (`cluster`) and
# the huge transactions and rows (`huge`, minutes each) are left to `make test-faults`; the
# long tests (`long`: whole pipelines under writes, the longest binlog reads; 15 s to 2 min) to
# `make test-long` and, on MySQL, `make test-mysql`, which CI runs after make test
NOT_IN_CI := faults or cluster or huge or spark_delta or wheel
test: setup
	$(VENV)/bin/lint-imports
	$(VENV)/bin/mypy sparkcdc/core sparkcdc/mysql sparkcdc/spark sparkcdc/formats sparkcdc/apply sparkcdc/errors.py \
		sparkcdc/options.py sparkcdc/heap.py sparkcdc/pipeline sparkcdc/sinks
	$(VENV)/bin/ruff check sparkcdc tests bench
	$(PY) -m pytest tests $(XDIST) -m "not long and not ($(NOT_IN_CI))"

# the long tests on the MariaDB sandbox (and on both servers where a test asks for
# both); make test-mysql runs those of them that use the session's source on MySQL 9.7
test-long: setup
	$(PY) -m pytest tests $(XDIST) -m "long and not ($(NOT_IN_CI))"

# make test runs the engine, the types, the dialect, validation, window splits, checksums and
# verify on both servers (the `server` fixture); doubling the rest would not fit its budget.
# test-mysql runs the tests of the pipelines, schema changes, the CLI, the Spark source and
# the sinks end to end on a MySQL 9.7 sandbox instead of the MariaDB one
# (SPARKCDC_TEST_SOURCE=mysql; only the tests that use the session's source server). CI runs
# it after make test.
MYSQL_TESTS := tests/core/test_chunking.py tests/pipeline/test_pipeline.py \
	tests/pipeline/test_pipeline_stream.py \
	tests/pipeline/test_schema_in_stream.py tests/pipeline/test_ddl.py \
	tests/pipeline/test_operator.py tests/pipeline/test_reread.py tests/test_cli.py \
	tests/pipeline/definition/test_routing.py tests/pipeline/run/test_signals.py tests/pipeline/commands/test_metrics.py \
	tests/pipeline/test_zero_dates.py tests/pipeline/test_identifiers_and_secrets.py \
	tests/pipeline/test_online_schema_change.py tests/pipeline/test_flink_examples.py \
	tests/pipeline/kafka/test_runner.py tests/pipeline/test_failover.py \
	tests/pipeline/test_task_changes.py tests/pipeline/test_kafka_truncate.py \
	tests/spark/test_source.py tests/spark/test_arrow_batches.py tests/spark/test_binlog_once.py \
	tests/spark/test_source_faults.py tests/spark/test_source_failover.py \
	tests/sinks/test_end_to_end.py \
	tests/sinks/kafka/test_pipeline.py tests/sinks/delta/test_catalog.py tests/faults/test_network.py \
	tests/pipeline/test_binlog_purged.py tests/pipeline/test_reread_retake.py \
	tests/mysql/test_snapshot.py tests/mysql/binlog/test_failover.py \
	tests/mysql/binlog/test_protocol.py tests/mysql/binlog/test_fastdecode.py \
	tests/testing/test_mariadb.py tests/test_library_reader.py tests/mysql/binlog/test_reader.py
test-mysql: setup
	SPARKCDC_TEST_SOURCE=mysql $(PY) -m pytest $(MYSQL_TESTS) $(XDIST) --source-tests-only \
		-m "not ($(NOT_IN_CI))"

# A sandbox MariaDB (or MySQL 9.7: make demo SERVER=mysql), a pipeline into local Delta
# tables under writes, verify; stops it all.
SERVER ?= mariadb
demo: setup
	$(PY) demo/demo.py --server $(SERVER)

test-fast: setup
	$(PY) -m pytest tests $(XDIST) -m "not slow and not long and not ($(NOT_IN_CI))"

# the fast subset on Python 3.10, 3.12 and 3.13 and on the oldest and newest supported PySpark
# (4.2 with delta-spark's catalog tests, 4.3), each in its own venv under .venv-compat/; the
# pipelines into Spark's own Delta (4.2) on MariaDB, then on MySQL 9.7
test-compat: setup
	bash scripts/compat.sh

# SIGKILLs, cut/refused/slow connections, server restarts, task retries (docs/operations.md),
# and 1,000 tables in one query (make test takes 250); then every test marked faults elsewhere;
# then the SIGKILL, task-write and task-retry fault tests (the one during a failover too: two
# MySQL, a primary and its promoted replica) again on a MySQL 9.7 source (MYSQL_FAULT_TESTS,
# every test of those files that uses the session's source server or the failover pair;
# docs/mysql-findings.md), and the network faults and restarts (MYSQL_SLOW_TESTS)
MYSQL_FAULT_TESTS := tests/faults/test_kill.py tests/faults/test_reread_kill.py \
	tests/faults/test_task_changes_kill.py tests/faults/test_failover.py tests/pipeline/test_kill.py \
	tests/pipeline/test_task_files.py tests/faults/test_kafka.py \
	tests/faults/test_sql_tasks_kill.py tests/faults/test_iceberg_tasks_kill.py \
	tests/faults/test_cluster.py tests/faults/test_huge.py \
	tests/pipeline/test_task_changes_iceberg.py tests/pipeline/test_task_changes_sql.py \
	tests/faults/test_tasks.py
# and the `faults` tests of these files of make test-mysql (it runs their fast ones): connections
# cut mid-transfer, a slow link, a server away 40 s and restarted; a source TRUNCATE into Kafka
MYSQL_SLOW_TESTS := tests/faults/test_network.py tests/pipeline/test_kafka_truncate.py \
	tests/pipeline/test_reread_rename.py tests/pipeline/test_reread_retake.py
test-faults: setup
	bash scripts/fetch_jars.sh connect
	SPARKCDC_TEST_TABLES=1000 $(PY) -m pytest tests/faults \
		tests/pipeline/test_pipeline_stream.py::test_many_tables_one_query
	# the slower variants kept out of make test, wherever they live
	$(PY) -m pytest tests --ignore=tests/faults -m faults
	SPARKCDC_TEST_SOURCE=mysql $(PY) -m pytest $(MYSQL_FAULT_TESTS) --source-tests-only
	SPARKCDC_TEST_SOURCE=mysql $(PY) -m pytest $(MYSQL_SLOW_TESTS) --source-tests-only -m faults

# side-by-side throughput against mariadb-dump, connectorx, Spark JDBC, python-mysql-replication,
# mariadb-binlog and Debezium embedded (bench/throughput.py); `sparkcdc run` end to end into
# every sink beside the same peers (bench/pipeline.py); each sink's writer against Spark's own
# writers (bench/writers.py, jars fetched with mvn into .jars); 1 to 1,000 tables in one pipeline
# beside Debezium (bench/tables.py); sparkcdc against Flink CDC itself under PyFlink, in
# .venv-flink with its connector jar in .jars/flink (bench/flink.py, scripts/setup_flink.sh);
# MySQL → Kafka, sparkcdc's kafka sink against Debezium's MySQL connector on Kafka Connect
# into one broker (bench/kafka.py); `sparkcdc run` for SOAK_MINUTES under 500 row changes/s
# (memory, lag, CPU per change; bench/soak.py, 30 minutes unless SOAK_MINUTES says less); all
# write docs/benchmarks.md
SOAK_MINUTES ?= 30
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
	$(PY) bench/pipeline.py --server mysql --sinks delta
	$(PY) bench/flink.py --server mysql
	$(PY) bench/mysql_reader.py
	command -v valgrind >/dev/null || DEBIAN_FRONTEND=noninteractive apt-get install -y -qq valgrind
	$(PY) bench/mysql_reader.py --instructions \
		--servers mariadb,mysql,mysql-partial,mysql-zstd,mariadb-compressed
	$(PY) bench/soak.py --minutes $(SOAK_MINUTES)

clean:
	rm -rf $(VENV) .venv-compat .venv-flink .pytest_cache build *.egg-info
