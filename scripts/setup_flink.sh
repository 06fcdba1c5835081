#!/usr/bin/env bash
# The Flink CDC peer of bench/flink.py (`make bench`): PyFlink in a venv of its own,
# .venv-flink, and Flink CDC's mysql-cdc connector jar in .jars/flink (scripts/fetch_jars.sh).
#
# PyFlink pins its own dependencies (old pyarrow, pandas, numpy, apache-beam) that clash with
# the project's, so it never goes into .venv; and it is not part of `make setup` or
# `make test`: only the benchmark uses it. Idempotent (a stamp file per version).
#
# The pair: Flink CDC 3.x connectors are built for particular Flink versions. 3.5.0 is the
# newest mysql-cdc connector the Maven registry served here (3.6.0 was not found), and it is
# built for Flink 1.19/1.20, so PyFlink is the newest 1.20 (PyPI's 2.x would not load it).
# PyFlink 1.20 supports Python 3.8 to 3.11.
set -euo pipefail
cd "$(dirname "$0")/.."

PYFLINK_VERSION=${PYFLINK_VERSION:-1.20.5}
FLINK_PYTHON=${FLINK_PYTHON:-3.11}
VENV=.venv-flink

find_python() {  # python3.X on PATH, else pyenv's newest 3.X
    if command -v "python$1" >/dev/null 2>&1; then command -v "python$1"; return; fi
    local root=${PYENV_ROOT:-$HOME/.pyenv} found
    found=$(ls -d "$root"/versions/"$1".*/bin/"python$1" 2>/dev/null | sort -V | tail -1 || true)
    [ -n "$found" ] || { echo "setup_flink: no python$1 (PyFlink $PYFLINK_VERSION needs 3.8-3.11; e.g. pyenv install $1)" >&2; return 1; }
    echo "$found"
}

stamp="$VENV/.installed-apache-flink-$PYFLINK_VERSION"
if [ ! -e "$stamp" ]; then
    echo "setup_flink: installing apache-flink $PYFLINK_VERSION into $VENV (once)"
    [ -x "$VENV/bin/python" ] || "$(find_python "$FLINK_PYTHON")" -m venv "$VENV"
    "$VENV/bin/python" -m pip install -q --upgrade pip >/dev/null 2>&1 || true
    "$VENV/bin/python" -m pip install -q "apache-flink==$PYFLINK_VERSION"
    rm -f "$VENV"/.installed-*
    touch "$stamp"
fi
bash scripts/fetch_jars.sh flink
echo "setup_flink: done ($("$VENV/bin/python" -c 'import pyflink.version as v; print("PyFlink", v.__version__)'))"
