#!/usr/bin/env bash
# make test-compat: the fast subset below on each supported Python and on the oldest and the
# newest supported PySpark (README, "Supported versions"), then the built wheels run the demo
# from clean venvs; `make test` runs everything on one.
#
# Each cell is python:pyspark[:delta], one venv in .venv-compat/ (installed once, again when
# pyproject.toml or setup.py change). A cell marked delta also runs the tests that need
# delta-spark in the Spark session (marker spark_delta): delta-spark 4.4 runs on PySpark 4.2,
# and its jars come from scripts/fetch_jars.sh (Spark's own Delta writer, the catalog); the
# pipelines into Spark's Delta run there on MariaDB, then on MySQL 9.7. Pythons are found on
# PATH or under pyenv.
set -euo pipefail
cd "$(dirname "$0")/.."

MATRIX=${COMPAT_MATRIX:-"3.10:4.2.0:delta 3.12:4.3.0 3.13:4.3.0"}
TESTS=(tests/spark/test_versions.py tests/core/test_watermark.py tests/core/test_assigner.py
       tests/mysql/test_types.py tests/mysql/binlog/test_fastdecode.py tests/spark/test_source.py
       tests/sinks/test_sinks.py tests/pipeline/test_pipeline.py tests/pipeline/test_schema_in_stream.py
       tests/test_cli.py tests/sinks/delta/test_catalog.py tests/sinks/delta/test_changes.py
       tests/sinks/delta/test_spark_writer.py tests/pipeline/test_spark_delta.py
       tests/pipeline/test_spark_delta_paths.py
       tests/pipeline/launch/test_warm_python.py)
SPARK_DELTA_TESTS=(tests/pipeline/test_spark_delta.py tests/pipeline/test_spark_delta_paths.py)
stamp_of() { cat pyproject.toml setup.py | sha1sum | cut -c1-12; }

find_python() {  # python3.X on PATH (one that runs: a pyenv shim may not), else pyenv's newest 3.X
    if command -v "python$1" >/dev/null 2>&1 && "python$1" -c "" >/dev/null 2>&1; then
        command -v "python$1"; return
    fi
    local root=${PYENV_ROOT:-$HOME/.pyenv}
    local found
    found=$(ls -d "$root"/versions/"$1".*/bin/"python$1" 2>/dev/null | sort -V | tail -1 || true)
    [ -n "$found" ] || { echo "test-compat: no python$1 (install it, e.g. pyenv install $1)" >&2; return 1; }
    echo "$found"
}

bash scripts/fetch_jars.sh >/dev/null
failed=()
for cell in $MATRIX; do
    IFS=: read -r py ps extra <<<"$cell"
    venv=.venv-compat/py$py-pyspark$ps
    stamp="$venv/.installed-$(stamp_of)"
    if [ ! -e "$stamp" ]; then
        echo "test-compat: installing $venv"
        [ -x "$venv/bin/python" ] || "$(find_python "$py")" -m venv "$venv"
        "$venv/bin/python" -m pip install -q --upgrade pip >/dev/null 2>&1 || true
        "$venv/bin/python" -m pip install -q -e '.[dev,all]' "pyspark==$ps"
        rm -f "$venv"/.installed-*
        touch "$stamp"
    fi
    markers="not slow"
    [ "$extra" = delta ] || markers="$markers and not spark_delta"
    echo "test-compat: Python $py, PySpark $ps ($markers)"
    if ! "$venv/bin/python" -m pytest -q -p no:cacheprovider -m "$markers" "${TESTS[@]}"; then
        failed+=("$cell")
    fi
    # the pipelines into Spark's own Delta again on a MySQL 9.7 source (about 12 minutes)
    if [ "$extra" = delta ] && ! SPARKCDC_TEST_SOURCE=mysql "$venv/bin/python" -m pytest -q \
            -p no:cacheprovider -m spark_delta --source-tests-only "${SPARK_DELTA_TESTS[@]}"; then
        failed+=("$cell-mysql")
    fi
done
# the main venv's editable install is put back (a cell's install rewrote the shared metadata)
[ -x .venv/bin/python ] && .venv/bin/python -m pip install -q --no-deps -e . >/dev/null 2>&1 || true
# the package as a user installs it: sdist, wheels with and without a compiler, the demo
# from clean venvs (tests/test_packaging.py)
if ! .venv/bin/python -m pytest -q -p no:cacheprovider -m wheel tests/test_packaging.py; then
    failed+=("wheel")
fi
if [ ${#failed[@]} -gt 0 ]; then
    echo "test-compat: FAILED in ${failed[*]}" >&2
    exit 1
fi
echo "test-compat: passed in $MATRIX"
