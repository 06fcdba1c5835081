"""Pipeline YAML into plain definitions: Flink CDC's keys, ${ENV} secrets, routes, transforms,
and errors that name the file, the line and the key. No servers needed."""

from __future__ import annotations

import textwrap

import pytest

from sparkcdc.errors import ConfigError
from sparkcdc.pipeline.definition import load_pipeline, parse_pipeline, parse_table_pattern
from sparkcdc.pipeline.routing import target_of, transform_of

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


def test_flinks_schema_change_switch_is_a_behavior_and_partition_keys_are_never_ignored():
    """``schema-change.enabled: false`` (Flink CDC's source key) is the behavior ``ignore``,
    and contradicting it fails at its line; a transform's ``partition-keys`` is refused,
    naming the sink option that does it, rather than accepted and ignored."""
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
    part = BASE.replace('    filter: "country = \'DE\'"\n',
                        '    filter: "country = \'DE\'"\n    partition-keys: country\n')
    assert part != BASE
    with pytest.raises(ConfigError) as e:
        parse(part)
    assert "partition-keys" in str(e.value) and "partition-by" in str(e.value)
