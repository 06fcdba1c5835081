#!/usr/bin/env bash
# Fetch JVM jars into .jars/ (git-ignored), with mvn: the Kafka broker the tests and
# `sparkcdc sandbox start kafka` run, and the jars bench/writers.py puts on spark.jars.
# Idempotent: a group whose stamp file exists is skipped, so a second run is a no-op.
#
#   scripts/fetch_jars.sh            every group
#   scripts/fetch_jars.sh kafka      only the groups named (`make setup` fetches kafka)
#   scripts/fetch_jars.sh connect    Kafka Connect and Debezium's MySQL connector (the fault
#                                    tests' fixture runs this itself when they are missing)
#   scripts/fetch_jars.sh flink      Flink CDC's mysql-cdc connector and the MySQL JDBC driver
#                                    (bench/flink.py; scripts/setup_flink.sh runs this)
#
#   .jars/kafka/    Apache Kafka's broker (kafka_2.13) with every runtime jar it needs, and
#                   log4j's binding for the slf4j API it logs through (sparkcdc/testing/kafka.py)
#   .jars/connect/  Kafka Connect's worker (connect-runtime, connect-json, connect-file) with
#                   its runtime jars and log4j's binding (sparkcdc/testing/kafka_connect.py)
#   .jars/connect-plugins/debezium-connector-mysql/
#                   Debezium's MySQL connector as a Connect plugin (isolated class loader):
#                   its runtime jars less those the worker already has (kafka-clients, ...)
#   .jars/delta/    delta-spark and the runtime jars it needs that pyspark does not ship
#   .jars/iceberg/  the Iceberg Spark runtime (one shaded jar)
#   .jars/jdbc/     the PostgreSQL and MariaDB JDBC drivers
#   .jars/flink/    Flink CDC's SQL connector for MySQL (one shaded jar, Debezium inside) and
#                   the MySQL JDBC driver it needs but does not ship (its licence differs)
#
# Versions can be overridden from the environment. As of 2026-11 no delta-spark or Iceberg
# release is built for Spark 4.3: the defaults are the newest releases (built for Spark 4.2
# and 4.1), which load but fail on pyspark 4.3.0 (see docs/benchmarks.md, "Writers").
# Without mvn the bench groups are skipped with a note (exit 0); the kafka group needs it
# (scripts/setup.sh installs Debian's maven).
set -euo pipefail
cd "$(dirname "$0")/.."

KAFKA_VERSION=${KAFKA_VERSION:-4.3.1}
LOG4J_VERSION=${LOG4J_VERSION:-2.25.4}  # the log4j-core that kafka_2.13 depends on
CONNECT_VERSION=${CONNECT_VERSION:-$KAFKA_VERSION}  # Kafka Connect: the broker's version
# Debezium's MySQL connector: 3.6.1.Final is the newest the registry served here (3.6.3 and
# the separate MariaDB connector were not found); 3.x needs Java 17 and Kafka Connect 4
DEBEZIUM_VERSION=${DEBEZIUM_VERSION:-3.6.1.Final}
DELTA_ARTIFACT=${DELTA_ARTIFACT:-io.delta:delta-spark_2.13}
DELTA_VERSION=${DELTA_VERSION:-4.4.0}
ICEBERG_ARTIFACT=${ICEBERG_ARTIFACT:-org.apache.iceberg:iceberg-spark-runtime-4.1_2.13}
ICEBERG_VERSION=${ICEBERG_VERSION:-1.12.0}
PG_JDBC_VERSION=${PG_JDBC_VERSION:-42.7.14}
MARIADB_JDBC_VERSION=${MARIADB_JDBC_VERSION:-3.5.11}
# Flink CDC: 3.5.0 is the newest the registry served here (3.6.0 was not found); it is built
# for Flink 1.19/1.20, the PyFlink of scripts/setup_flink.sh. Its docs name an 8.0 driver.
FLINK_CDC_VERSION=${FLINK_CDC_VERSION:-3.5.0}
MYSQL_JDBC_VERSION=${MYSQL_JDBC_VERSION:-8.0.33}
DEP_PLUGIN=org.apache.maven.plugins:maven-dependency-plugin:3.8.1
JARS=${JARS_DIR:-.jars}

stamp() {  # the stamp file of a group for a set of coordinates
    echo "$JARS/$1/.fetched-$(echo "$2" | tr ':/ ' '___')"
}

groups=("$@")
[ ${#groups[@]} -gt 0 ] || groups=(kafka delta iceberg jdbc)
wanted() {  # is group $1 asked for?
    local g
    for g in "${groups[@]}"; do [ "$g" = "$1" ] && return 0; done
    return 1
}

if ! command -v mvn >/dev/null 2>&1; then
    if wanted kafka || wanted connect || wanted flink; then
        echo "fetch_jars: mvn not found; the Kafka broker's, Kafka Connect's and Flink CDC's jars need it (apt-get install maven)" >&2
        exit 1
    fi
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

fetch_with_deps() {  # group, all|unshipped|plugin, g:a:v...: the artifacts and their runtime jars
    local group=$1 keep=$2
    shift 2
    local key="$*"
    if [ -e "$(stamp "$group" "$key")" ]; then
        echo "fetch_jars: $group present ($key)"
        return
    fi
    echo "fetch_jars: $group: $key and the runtime dependencies"
    local deps="" g a v coords
    for coords in "$@"; do
        IFS=: read -r g a v <<<"$coords"
        deps+="<dependency><groupId>$g</groupId><artifactId>$a</artifactId><version>$v</version></dependency>"
    done
    cat >"$work/pom.xml" <<EOF
<project>
  <modelVersion>4.0.0</modelVersion>
  <groupId>local.sparkcdc</groupId><artifactId>fetch-jars</artifactId><version>0</version>
  <dependencies>$deps</dependencies>
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
        if [ "$keep" = unshipped ] && shipped "$artifact"; then
            continue
        fi
        # a Connect plugin leaves out what the worker has: Connect loads org.apache.kafka
        # and slf4j from the worker's class path, whatever the plugin folder holds
        if [ "$keep" = plugin ] && compgen -G "$JARS/connect/$artifact-[0-9]*.jar" >/dev/null; then
            continue
        fi
        cp "$jar" "$JARS/$group/"
    done
    touch "$(stamp "$group" "$key")"
}

# a broker runs in a JVM of its own: every runtime jar, whatever pyspark ships
if wanted kafka; then
    fetch_with_deps kafka all "org.apache.kafka:kafka_2.13:$KAFKA_VERSION" \
        "org.apache.logging.log4j:log4j-slf4j-impl:$LOG4J_VERSION"
fi
# Kafka Connect runs in a JVM of its own as well; the connector is a plugin beside it
if wanted connect; then
    fetch_with_deps connect all "org.apache.kafka:connect-runtime:$CONNECT_VERSION" \
        "org.apache.kafka:connect-json:$CONNECT_VERSION" \
        "org.apache.kafka:connect-file:$CONNECT_VERSION" \
        "org.apache.logging.log4j:log4j-slf4j-impl:$LOG4J_VERSION"
    fetch_with_deps connect-plugins/debezium-connector-mysql plugin \
        "io.debezium:debezium-connector-mysql:$DEBEZIUM_VERSION"
fi
if wanted delta; then
    fetch_with_deps delta unshipped "$DELTA_ARTIFACT:$DELTA_VERSION"
fi
if wanted iceberg; then
    fetch_single iceberg "$ICEBERG_ARTIFACT:$ICEBERG_VERSION"
fi
if wanted jdbc; then
    fetch_single jdbc "org.postgresql:postgresql:$PG_JDBC_VERSION" \
        "org.mariadb.jdbc:mariadb-java-client:$MARIADB_JDBC_VERSION"
fi
if wanted flink; then
    fetch_single flink "org.apache.flink:flink-sql-connector-mysql-cdc:$FLINK_CDC_VERSION" \
        "com.mysql:mysql-connector-j:$MYSQL_JDBC_VERSION"
fi
echo "fetch_jars: done ($JARS)"
