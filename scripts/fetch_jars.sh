#!/usr/bin/env bash
# Fetch the JVM jars bench/writers.py puts on spark.jars into .jars/ (git-ignored), with mvn.
# Idempotent: a group whose stamp file exists is skipped, so a second run is a no-op.
#
#   .jars/delta/    delta-spark and the runtime jars it needs that pyspark does not ship
#   .jars/iceberg/  the Iceberg Spark runtime (one shaded jar)
#   .jars/jdbc/     the PostgreSQL and MariaDB JDBC drivers
#
# Versions can be overridden from the environment. As of 2026-11 no delta-spark or Iceberg
# release is built for Spark 4.3: the defaults are the newest releases (built for Spark 4.2
# and 4.1), which load but fail on pyspark 4.3.0 (see docs/benchmarks.md, "Writers").
# Without mvn this prints a note and exits 0: only bench/writers.py needs these jars.
set -euo pipefail
cd "$(dirname "$0")/.."

DELTA_ARTIFACT=${DELTA_ARTIFACT:-io.delta:delta-spark_2.13}
DELTA_VERSION=${DELTA_VERSION:-4.4.0}
ICEBERG_ARTIFACT=${ICEBERG_ARTIFACT:-org.apache.iceberg:iceberg-spark-runtime-4.1_2.13}
ICEBERG_VERSION=${ICEBERG_VERSION:-1.12.0}
PG_JDBC_VERSION=${PG_JDBC_VERSION:-42.7.14}
MARIADB_JDBC_VERSION=${MARIADB_JDBC_VERSION:-3.5.11}
DEP_PLUGIN=org.apache.maven.plugins:maven-dependency-plugin:3.8.1
JARS=${JARS_DIR:-.jars}

stamp() {  # the stamp file of a group for a set of coordinates
    echo "$JARS/$1/.fetched-$(echo "$2" | tr ':/ ' '___')"
}

if ! command -v mvn >/dev/null 2>&1; then
    echo "fetch_jars: mvn not found; skipping (needed only by bench/writers.py; apt-get install maven)"
    exit 0
fi

MVN=(mvn -B -q -Dstyle.color=never)
[ -n "${MAVEN_REPO_LOCAL:-}" ] && MVN+=(-Dmaven.repo.local="$MAVEN_REPO_LOCAL")
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
mvn_run() {  # mvn, quiet unless it fails
    if ! "${MVN[@]}" "$@" >"$work/mvn.log" 2>&1; then
        cat "$work/mvn.log" >&2
        echo "fetch_jars: mvn $* failed" >&2
        return 1
    fi
}

# pyspark's own jars: a dependency pyspark already ships is left out (its version wins on the
# classpath anyway, and a second copy only invites conflicts)
spark_jars=""
if [ -x .venv/bin/python ]; then
    spark_jars=$(.venv/bin/python -c 'import os, pyspark; print(os.path.join(os.path.dirname(pyspark.__file__), "jars"))' 2>/dev/null || true)
fi
shipped() {  # is artifact $1 (file name without version) in pyspark's jars?
    [ -n "$spark_jars" ] && compgen -G "$spark_jars/$1-[0-9]*.jar" >/dev/null
}

fetch_single() {  # group, then g:a:v coordinates; no transitive dependencies
    local group=$1; shift
    local key="$*"
    if [ -e "$(stamp "$group" "$key")" ]; then
        echo "fetch_jars: $group present ($key)"
        return
    fi
    rm -rf "${JARS:?}/$group"
    mkdir -p "$JARS/$group"
    for coords in "$@"; do
        echo "fetch_jars: $group: $coords"
        mvn_run "$DEP_PLUGIN:copy" -Dartifact="$coords" -DoutputDirectory="$JARS/$group"
    done
    touch "$(stamp "$group" "$key")"
}

fetch_with_deps() {  # group, g:a:v; the artifact and its runtime dependencies
    local group=$1 coords=$2
    if [ -e "$(stamp "$group" "$coords")" ]; then
        echo "fetch_jars: $group present ($coords)"
        return
    fi
    echo "fetch_jars: $group: $coords and its runtime dependencies"
    IFS=: read -r g a v <<<"$coords"
    cat >"$work/pom.xml" <<EOF
<project>
  <modelVersion>4.0.0</modelVersion>
  <groupId>local.sparkcdc</groupId><artifactId>fetch-jars</artifactId><version>0</version>
  <dependencies>
    <dependency><groupId>$g</groupId><artifactId>$a</artifactId><version>$v</version></dependency>
  </dependencies>
</project>
EOF
    rm -rf "$work/out"
    mvn_run -f "$work/pom.xml" "$DEP_PLUGIN:copy-dependencies" -DincludeScope=runtime \
        -DoutputDirectory="$work/out"
    rm -rf "${JARS:?}/$group"
    mkdir -p "$JARS/$group"
    for jar in "$work"/out/*.jar; do
        name=$(basename "$jar" .jar)
        artifact=$(echo "$name" | sed -E 's/-[0-9][^-]*(-[A-Za-z0-9]+)?$//')
        if shipped "$artifact"; then
            continue
        fi
        cp "$jar" "$JARS/$group/"
    done
    touch "$(stamp "$group" "$coords")"
}

fetch_with_deps delta "$DELTA_ARTIFACT:$DELTA_VERSION"
fetch_single iceberg "$ICEBERG_ARTIFACT:$ICEBERG_VERSION"
fetch_single jdbc "org.postgresql:postgresql:$PG_JDBC_VERSION" \
    "org.mariadb.jdbc:mariadb-java-client:$MARIADB_JDBC_VERSION"
echo "fetch_jars: done ($JARS)"
