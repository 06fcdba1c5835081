"""Pipeline YAML into plain definitions: Flink CDC's keys, ${ENV} secrets, routes, transforms,
and errors that name the file, the line and the key. No servers needed."""

from __future__ import annotations

import textwrap

import pytest

from sparkcdc.errors import ConfigError
from sparkcdc.pipeline.definition import load_pipeline, parse_pipeline, parse_table_pattern
from sparkcdc.pipeline.definition.routing import target_of, transform_of

BASE = """\
source:
  type: mysql
  hostname: 127.0.0.1
  port: 3306
  username: cdc
  password: ${PW}
  tables: shop.\\.*, app.orders_[0-9]+
  tables.exclude: shop.tmp_\\.*
  server-id: 5400-5499
sink:
  type: delta
  path: lake
route:
  - source-table: app.orders_(\\d+)
    sink-table: ods.orders
  - source-table: shop.(\\.*)
    sink-table: ods.shop_$1
  - source-table: legacy.\\.*
    sink-table: ods.old_<>
    replace-symbol: <>
transform:
  - source-table: shop.customers
    projection: "*, UPPER(name) AS name_upper"
    filter: "country = 'DE'"
pipeline:
  name: shop-sync
  parallelism: 2
  checkpoint.location: ck
  trigger.interval: 2s
  schema.change.behavior: try_evolve
"""


def parse(text: str = BASE, env=None, base="/base"):
    return parse_pipeline(text, "p.yaml", env={"PW": "s3cret"} if env is None else env,
                          base_dir=base)


def test_a_full_pipeline_becomes_plain_definitions():
    d = parse()
    assert d.source.options["password"] == "s3cret"
    assert d.source.options["port"] == "3306"
    assert [p.text for p in d.source.tables] == ["shop.\\.*", "app.orders_[0-9]+"]
    assert d.source.tables[0].database == "shop" and d.source.tables[0].table == ".*"
    assert d.sink.type == "delta" and d.sink.options["path"] == "/base/lake"
    assert d.pipeline.name == "shop-sync" and d.pipeline.parallelism == 2
    assert d.pipeline.trigger_interval == 2.0
    assert d.pipeline.checkpoint_location == "/base/ck"
    assert d.pipeline.schema_change_behavior == "try_evolve"
    opts = d.source.options_for()
    import re

    table_re, ex_re = re.compile(opts["table-name"]), re.compile(opts["table-name.exclude"])
    assert table_re.fullmatch("shop.customers") and table_re.fullmatch("app.orders_12")
    assert not table_re.fullmatch("app.orders_x") and not table_re.fullmatch("shopxcustomers")
    assert ex_re.fullmatch("shop.tmp_1")
    one = d.source.options_for("shop.my.table")  # names with regex characters are escaped
    assert re.compile(one["table-name"]).fullmatch("shop.my.table")
    assert not re.compile(one["table-name"]).fullmatch("shop.myxtable")


def test_routes_merge_shards_and_use_captures_and_the_replace_symbol():
    d = parse()
    assert target_of(d, "app.orders_1") == target_of(d, "app.orders_22") == "ods.orders"
    assert target_of(d, "shop.items") == "ods.shop_items"
    assert target_of(d, "legacy.users") == "ods.old_users"
    assert target_of(d, "other.t") == "other.t"  # no route: its own name
    t = transform_of(d, "shop.customers")
    assert t.projection.startswith("*, UPPER") and t.filter == "country = 'DE'"
    assert transform_of(d, "shop.items") is None


def test_table_patterns_follow_flink():
    p = parse_table_pattern("db[12].order_\\.*")
    assert (p.database, p.table) == ("db[12]", "order_.*")
    assert p.compiled().fullmatch("db1.order_x") and not p.compiled().fullmatch("db3.order_x")


def test_env_defaults_and_files(tmp_path):
    text = BASE.replace("${PW}", "${NOT_SET_ANYWHERE:-fallback}")
    assert parse(text, env={}).source.options["password"] == "fallback"
    f = tmp_path / "pipe.yaml"
    f.write_text(BASE)
    d = load_pipeline(f, env={"PW": "x"})
    assert d.sink.options["path"] == str(tmp_path / "lake")  # relative to the file


def line_of(text: str, needle: str) -> int:
    return next(i for i, line in enumerate(text.splitlines(), 1) if needle in line)


@pytest.mark.parametrize("change,key,needle,fix", [
    (("port: 3306", "port: nope"), "source.port", "port: nope", "must be an integer"),
    (("hostname: 127.0.0.1", "hostnam: 127.0.0.1"), "source.hostnam", "hostnam:",
     "did you mean 'hostname'"),
    (("type: delta", "type: deltaa"), "sink.type", "type: deltaa", "did you mean 'delta'"),
    (("path: lake", "pathh: lake"), "sink.pathh", "pathh:", "did you mean 'path'"),
    (("schema.change.behavior: try_evolve", "schema.change.behavior: evolv"),
     "pipeline.schema.change.behavior", "evolv", "did you mean 'evolve'"),
    (("parallelism: 2", "parallelism: -1"), "pipeline.parallelism", "parallelism: -1",
     "positive integer"),
    (("sink-table: ods.shop_$1", "sink-table: ods.shop_$3"), "route[1].sink-table",
     "ods.shop_$3", "capture with parentheses"),
    (("  trigger.interval: 2s", "  trigger.intervall: 2s"), "pipeline.trigger.intervall",
     "intervall", "did you mean 'trigger.interval'"),
    (("    filter: \"country = 'DE'\"", "    filtre: x"), "transform[0].filtre", "filtre",
     "did you mean 'filter'"),
    (("  tables.exclude: shop.tmp_\\.*\n", "  table-name: x\n"), "source.table-name",
     "table-name: x", "select tables with 'tables'"),
    (("tables: shop.\\.*, app.orders_[0-9]+", "tables: shop_no_dot"), "source.tables",
     "tables: shop_no_dot", "the first '.' separates"),
])
def test_every_error_names_the_key_and_the_line(change, key, needle, fix):
    text = BASE.replace(*change)
    assert text != BASE
    with pytest.raises(ConfigError) as e:
        parse(text)
    msg = str(e.value)
    assert f"p.yaml:{line_of(text, needle)}: '{key}'" in msg, msg
    assert fix in msg, msg


def test_a_missing_secret_names_the_variable_and_the_line():
    with pytest.raises(ConfigError) as e:
        parse(env={})
    assert f"p.yaml:{line_of(BASE, '${PW}')}: 'source.password'" in str(e.value)
    assert "PW is not set" in str(e.value) and "export PW=" in str(e.value)


def test_structural_errors():
    with pytest.raises(ConfigError, match=r"p.yaml:3: not valid YAML"):
        parse("source:\n  a: 1\n b: [\n")
    with pytest.raises(ConfigError, match="'sink': is required"):
        parse(BASE.split("sink:")[0])
    with pytest.raises(ConfigError, match="'sources': unknown key"):
        parse("sources: {}\n" + BASE)
    with pytest.raises(ConfigError, match=r"p.yaml:\d+: 'source.port': appears twice"):
        parse(BASE.replace("  port: 3306\n", "  port: 3306\n  port: 3307\n"))
    text = BASE.replace("    sink-table: ods.orders\n", "")
    with pytest.raises(ConfigError, match=r"'route\[0\].sink-table': is required"):
        parse(text)
    text = textwrap.dedent("""\
        source: {type: mysql, hostname: h, username: u, tables: a.b}
        sink: {type: postgres, user: u, database: d, table: fixed}
        """)
    with pytest.raises(ConfigError, match="'sink.table'.*set by the pipeline"):
        parse(text)


def test_flinks_schema_change_switch_is_a_behavior():
    """``schema-change.enabled: false`` (Flink CDC's source key) is the behavior ``ignore``,
    and contradicting it fails at its line."""
    off = BASE.replace("  server-id: 5400-5499\n",
                       "  server-id: 5400-5499\n  schema-change.enabled: false\n")
    with pytest.raises(ConfigError) as e:  # BASE says try_evolve
        parse(off)
    assert f"p.yaml:{line_of(off, 'schema-change.enabled')}:" in str(e.value)
    assert "schema.change.behavior is try_evolve" in str(e.value)
    quiet = off.replace("  schema.change.behavior: try_evolve\n", "")
    assert parse(quiet).pipeline.schema_change_behavior == "ignore"
    on = quiet.replace("schema-change.enabled: false", "schema-change.enabled: true")
    assert parse(on).pipeline.schema_change_behavior == "lenient"  # the default


def with_transform_keys(extra: str, sink: str = "  type: delta\n  path: lake\n") -> str:
    text = BASE.replace('    filter: "country = \'DE\'"\n',
                        '    filter: "country = \'DE\'"\n' + extra)
    return text.replace("  type: delta\n  path: lake\n", sink)


def test_partition_keys_and_table_options_reach_the_targets_creation_or_are_refused():
    """A transform's ``partition-keys`` and ``table-options`` (Flink's ``k=v`` pairs, with
    their delimiter) are kept for the delta and iceberg targets' creation, and refused, with
    the reason, for a sink that cannot honour them: never accepted and ignored."""
    from sparkcdc.pipeline.definition.targets import table_creation_options

    d = parse(with_transform_keys("    partition-keys: country, city\n"
                                  "    table-options: comment=app order;owner=ops\n"
                                  "    table-options.delimiter: ';'\n"))
    t = transform_of(d, "shop.customers")
    assert t.partition_keys == ("country", "city")
    assert t.table_options == {"comment": "app order", "owner": "ops"}
    assert table_creation_options("delta", t.partition_keys, t.table_options) == {
        "partition-by": "country,city", "table-property.comment": "app order",
        "table-property.owner": "ops"}
    pg = "  type: postgres\n  host: h\n  user: u\n  database: d\n"
    for extra, key in (("    partition-keys: country\n", "partition-keys"),
                       ("    table-options: a=b\n", "table-options")):
        text = with_transform_keys(extra, pg)
        with pytest.raises(ConfigError) as e:
            parse(text)
        msg = str(e.value)
        assert f"p.yaml:{line_of(text, key + ':')}: 'transform[0].{key}'" in msg, msg
        assert "postgres sink" in msg and "partitions a table by range" in msg
    with pytest.raises(ConfigError, match="is not key=value"):
        parse(with_transform_keys("    table-options: justakey\n"))


def test_flinks_pipeline_keys_are_honoured_accepted_or_refused():
    """route-mode and execution.runtime-mode are honoured; Flink's operator and partitioning
    keys are accepted (they mean nothing here, docs/pipelines.md says why); its UDFs and
    models are refused with what to do instead."""
    assert parse().pipeline.route_mode == "all_match"
    extra = ("  route-mode: FIRST_MATCH\n  execution.runtime-mode: BATCH\n"
             "  operator.uid.prefix: x\n  schema.operator.uid: y\n"
             "  schema-operator.rpc-timeout: 3 min\n  sink.partitioning.strategy: TABLE_ID\n"
             "  transform.decimal.precision.mode: UP_TO_38\n")
    d = parse(BASE + extra)
    assert d.pipeline.route_mode == "first_match" and d.pipeline.batch
    with pytest.raises(ConfigError, match="ALL_MATCH"):
        parse(BASE + "  route-mode: SOME\n")
    udf = BASE + "  user-defined-function:\n    - name: addone\n      classpath: a.B\n"
    with pytest.raises(ConfigError) as e:
        parse(udf)
    assert f"p.yaml:{line_of(udf, 'user-defined-function')}" in str(e.value)
    assert "Spark SQL" in str(e.value)


def test_route_mode_all_match_fans_a_table_out():
    """Flink's default route-mode (ALL_MATCH) sends a table to every route that matches it;
    FIRST_MATCH to the first; no match keeps the table's name."""
    from sparkcdc.pipeline.definition.routing import targets_of

    text = BASE.replace("  - source-table: legacy.\\.*\n", "  - source-table: shop.items\n"
                        "    sink-table: ods.items_copy\n  - source-table: legacy.\\.*\n")
    d = parse(text)
    assert targets_of(d, "shop.items") == ("ods.shop_items", "ods.items_copy")
    assert target_of(d, "shop.items") == "ods.shop_items"
    assert targets_of(d, "other.t") == ("other.t",)
    first = parse(text + "  route-mode: FIRST_MATCH\n")
    assert targets_of(first, "shop.items") == ("ods.shop_items",)


@pytest.mark.parametrize("key,value,option,mapped", [
    ("jdbc.properties.useSSL", "false", "ssl.mode", "disabled"),
    ("jdbc.properties.sslMode", "REQUIRED", "ssl.mode", "required"),
    ("jdbc.properties.requireSSL", "true", "ssl.mode", "required"),
    ("jdbc.properties.serverTimezone", "Asia/Shanghai", "server-time-zone", "Asia/Shanghai"),
    ("jdbc.properties.connectTimeout", "5000", "connect.timeout", "5000ms"),
    ("jdbc.properties.characterEncoding", "UTF-8", None, None),
    ("debezium.snapshot.mode", "schema_only", "scan.startup.mode", "latest-offset"),
    ("debezium.snapshot.mode", "initial_only", "scan.startup.mode", "snapshot"),
    ("debezium.snapshot.fetch.size", "512", "scan.snapshot.fetch.size", "512"),
    ("debezium.heartbeat.interval.ms", "5000", "heartbeat.interval", "5000ms"),
    ("debezium.database.ssl.mode", "disabled", "ssl.mode", "disabled"),
    ("debezium.snapshot.locking.mode", "none", None, None),
    ("debezium.decimal.handling.mode", "precise", None, None),
    ("debezium.database.history.store.only.captured.tables.ddl", "true", None, None),
    ("connection.pool.size", "20", None, None),
    ("chunk-meta.group.size", "1000", None, None),
    ("scan.incremental.close-idle-reader.enabled", "true", None, None),
    ("scan.incremental.snapshot.unbounded-chunk-first.enabled", "true", None, None),
])
def test_flinks_source_keys_are_mapped_or_accepted(key, value, option, mapped):
    d = parse(BASE.replace("  server-id: 5400-5499\n",
                           f"  server-id: 5400-5499\n  {key}: '{value}'\n"))
    if option is not None:
        assert d.source.options[option] == mapped
    assert not any(k.startswith(("jdbc.", "debezium.")) for k in d.source.options)


@pytest.mark.parametrize("key,value,needle", [
    ("jdbc.properties.zeroDateTimeBehavior", "EXCEPTION", "reads zero dates as null"),
    ("jdbc.properties.trustCertificateKeyStoreUrl", "file:x.jks", "PEM"),
    ("jdbc.properties.someMadeUpThing", "1", "has no equivalent here"),
    ("debezium.decimal.handling.mode", "double", "CAST it in a transform"),
    ("debezium.event.deserialization.failure.handling.mode", "ignore", "would lose"),
    ("debezium.column.exclude.list", "shop.a.b", "transform projection"),
    ("debezium.table.include.list", "shop.a", "tables.exclude"),
    ("debezium.snapshot.mode", "schema_only_recovery", "scan.startup.mode"),
    ("debezium.skipped.operations", "x", "not an operation"),
    ("debezium.made.up", "1", "has no equivalent here"),
    ("metadata.list", "op_ts,commit_lsn", "commit_lsn"),
    ("treat-tinyint1-as-boolean.enabled", "maybe", "true or false"),
])
def test_flinks_source_keys_that_cannot_be_honoured_are_refused_at_their_line(key, value,
                                                                              needle):
    text = BASE.replace("  server-id: 5400-5499\n",
                        f"  server-id: 5400-5499\n  {key}: '{value}'\n")
    with pytest.raises(ConfigError) as e:
        parse(text)
    msg = str(e.value)
    assert f"p.yaml:{line_of(text, key)}: 'source.{key}'" in msg, msg
    assert needle in msg, msg


def test_connector_j_tls_properties_are_read_together():
    def mode(props: str):
        text = BASE.replace("  server-id: 5400-5499\n", "  server-id: 5400-5499\n" + props)
        return parse(text).source.options.get("ssl.mode")

    assert mode("  jdbc.properties.useSSL: 'true'\n"
                "  jdbc.properties.verifyServerCertificate: 'true'\n"
                "  ssl.ca: /etc/ssl/certs/ca-certificates.crt\n") == "verify_ca"
    assert mode("  jdbc.properties.useSSL: 'true'\n"
                "  jdbc.properties.verifyServerCertificate: 'false'\n") == "required"
    assert mode("  jdbc.properties.useSSL: 'false'\n"
                "  jdbc.properties.sslMode: PREFERRED\n") == "preferred"  # sslMode first


def test_a_mapped_key_never_overrides_the_option_itself():
    text = BASE.replace("  server-id: 5400-5499\n", "  server-id: 5400-5499\n"
                        "  ssl.mode: required\n  jdbc.properties.useSSL: 'false'\n")
    with pytest.raises(ConfigError, match="ssl.mode is required already"):
        parse(text)
    same = text.replace("useSSL: 'false'", "useSSL: 'true'")
    assert parse(same).source.options["ssl.mode"] == "required"


def test_source_extras_metadata_tinyint_json_and_skipped_operations():
    text = BASE.replace("  server-id: 5400-5499\n", "  server-id: 5400-5499\n"
                        "  metadata.list: op_ts, table_name\n"
                        "  treat-tinyint1-as-boolean.enabled: true\n"
                        "  use.legacy.json.format: true\n"
                        "  debezium.skipped.operations: d,t\n")
    x = parse(text).source.extras
    assert x.metadata == ("op_ts", "table_name") and x.tinyint1_as_boolean and x.compact_json
    assert x.skipped_operations == {"d", "t"}
    assert parse().source.extras.metadata == () and not parse().source.extras.tinyint1_as_boolean


def test_transform_converter_projection_escape_and_auto_cdc_keys():
    d = parse(with_transform_keys("    converter-after-transform: soft_delete\n").replace(
        'projection: "*, UPPER(name) AS name_upper"', 'projection: "\\\\*, 1 AS one"'))
    t = transform_of(d, "shop.customers")
    assert t.converter == "SOFT_DELETE" and t.projection == "*, 1 AS one"
    with pytest.raises(ConfigError, match="SOFT_DELETE"):
        parse(with_transform_keys("    converter-after-transform: HARD_DELETE\n"))
    d = parse(with_transform_keys("    stored-as-scd-type: 2\n"
                                  "    track-history-except-column-list: country\n"))
    t = transform_of(d, "shop.customers")
    assert t.scd_type == 2 and t.track_history_except == ("country",)
    for extra, needle in (
            ("    track-history-column-list: a\n", "stored-as-scd-type: 2"),
            ("    stored-as-scd-type: 3\n", "not 1 or 2"),
            ("    stored-as-scd-type: 2\n    apply-as-truncates: \"x\"\n", "SCD type 2"),
            (("    stored-as-scd-type: 2\n    track-history-column-list: a\n"
              "    track-history-except-column-list: b\n"), "not both")):
        with pytest.raises(ConfigError, match=needle):
            parse(with_transform_keys(extra))
    only = BASE.replace('    projection: "*, UPPER(name) AS name_upper"\n'
                        '    filter: "country = \'DE\'"\n', "    apply-as-truncates: \"op = 'T'\"\n")
    assert only != BASE
    assert transform_of(parse(only), "shop.customers").apply_as_truncates == "op = 'T'"


# Flink CDC's own key lists (MySqlDataSourceOptions, PipelineOptions and its YAML parser's
# route and transform keys, at the commit tests/pipeline/flink_examples/README.md names),
# with a value each: every one parses (none is an unknown key), and docs/pipelines.md names it
FLINK_SOURCE_KEYS = {
    "port": "3306", "server-time-zone": "UTC", "server-id": "5400-5499",
    "scan.incremental.snapshot.chunk.size": "8096", "scan.snapshot.fetch.size": "1024",
    "connect.timeout": "30s", "connection.pool.size": "20", "connect.max-retries": "3",
    "scan.startup.mode": "initial", "heartbeat.interval": "30s",
    "chunk-meta.group.size": "1000", "chunk-key.even-distribution.factor.upper-bound": "1000",
    "chunk-key.even-distribution.factor.lower-bound": "0.05",
    "scan.incremental.snapshot.chunk.key-column": "shop.t:id",
    "scan.incremental.close-idle-reader.enabled": "false",
    "scan.newly-added-table.enabled": "false", "schema-change.enabled": "true",
    "tables.exclude": "shop.tmp", "scan.binlog.newly-added-table.enabled": "false",
    "metadata.list": "op_ts", "scan.parse.online.schema.changes.enabled": "false",
    "include-comments.enabled": "false", "treat-tinyint1-as-boolean.enabled": "true",
    "use.legacy.json.format": "true",
    "scan.incremental.snapshot.unbounded-chunk-first.enabled": "false",
    "scan.incremental.snapshot.backfill.skip": "false",
}
FLINK_PIPELINE_KEYS = {
    "name": "Flink CDC Pipeline Job", "parallelism": "1", "execution.runtime-mode": "STREAMING",
    "schema.change.behavior": "lenient", "route-mode": "ALL_MATCH",
    "local-time-zone": "UTC", "operator.uid.prefix": "p", "schema.operator.uid": "u",
    "schema-operator.rpc-timeout": "3min", "sink.partitioning.strategy": "SINK_DEFINED",
    "transform.decimal.precision.mode": "UP_TO_19",
}
FLINK_TRANSFORM_KEYS = ("source-table", "projection", "filter", "primary-keys",
                        "partition-keys", "table-options", "table-options.delimiter",
                        "description", "converter-after-transform")


def test_every_flink_key_parses_and_is_documented():
    from pathlib import Path

    docs = (Path(__file__).parents[3] / "docs" / "pipelines.md").read_text()
    base = BASE.replace("  tables.exclude: shop.tmp_\\.*\n", "").replace(
        "  server-id: 5400-5499\n", "")
    for key, value in FLINK_SOURCE_KEYS.items():
        text = base.replace("  tables: ", f"  {key}: '{value}'\n  tables: ")
        parse(text.replace("  port: 3306\n", "") if key == "port" else text)
        assert f"`{key}`" in docs, key
    for prefix in ("jdbc.properties.", "debezium."):
        assert f"`{prefix}*`" in docs
    for key, value in FLINK_PIPELINE_KEYS.items():
        text = base.replace("  name: shop-sync\n", "").replace(
            "  parallelism: 2\n", "").replace("  schema.change.behavior: try_evolve\n", "")
        parse(text + f"  {key}: '{value}'\n")
        assert f"`{key}`" in docs, key
    for key in (*FLINK_TRANSFORM_KEYS, "source-table", "sink-table", "replace-symbol"):
        assert f"`{key}`" in docs, key
    for key in ("user-defined-function", "model"):
        assert f"`{key}`" in docs, key


BROKER_TOPIC = "  properties.bootstrap.servers: b:9092\n  topic: a\n"


def test_a_kafka_source_is_parsed_and_its_bad_options_named():
    from sparkcdc.pipeline.definition.kafka_source import KafkaSourceConfig

    def parse(src: str):
        return parse_pipeline(f"source:\n  type: kafka\n{src}\nsink:\n  type: console\n",
                              "k.yaml")

    defn = parse("  properties.bootstrap.servers: b:9092\n  topic: a.b;c.d\n"
                 "  value.format: canal-json\n  scan.startup.mode: latest-offset\n"
                 "  primary-keys: shop.t:id,sku\n  tables: shop.\\.*")
    c = KafkaSourceConfig.parse(defn.source.options)
    assert defn.source.type == "kafka" and c.topics == ("a.b", "c.d")
    assert (c.value_format, c.startup_mode) == ("canal-json", "latest-offset")
    assert c.primary_keys == (("shop.t", ("id", "sku")),)
    for src, match in [
        ("  topic: a", "needs the option 'properties.bootstrap.servers'"),
        ("  properties.bootstrap.servers: b:9092", "needs one of 'topic' and 'topic-pattern'"),
        ("  properties.bootstrap.servers: b:9092\n  topic: a\n  errors.tolerance: all",
         "needs errors.deadletterqueue.topic.name"),
        (BROKER_TOPIC + "  debezium-json.ignore-parse-errors: true",
         "would skip bad messages silently"),
        ("  properties.bootstrap.servers: b:9092\n  topic: a\n  scan.startup.mode: timestamp",
         "scan.startup.timestamp-millis"),
        (BROKER_TOPIC + "  properties.isolation.level: read_uncommitted", "cannot be set"),
        ("  properties.bootstrap.servers: b:9092\n  topic: a\n  value.format: avro",
         "debezium-json, canal-json, changelog-json"),
    ]:
        with pytest.raises(ConfigError, match=match) as e:
            parse(src)
        assert e.value.fix and "k.yaml:" in str(e.value)
