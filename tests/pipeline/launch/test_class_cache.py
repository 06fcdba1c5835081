"""Spark's JVM started from the class archive of an earlier run (pipeline/launch/class_cache.py):
real JVMs, each session in a process of its own (one JVM per Python process)."""

from __future__ import annotations

import shutil
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
from pipeline_support import tree_env

from sparkcdc.errors import ConfigError
from sparkcdc.pipeline.definition import parse_pipeline
from sparkcdc.pipeline.launch import class_cache
from sparkcdc.pipeline.launch.class_cache import ClassCache

CHILD = textwrap.dedent("""
    import json, logging, sys
    logging.basicConfig(level=logging.INFO, stream=sys.stderr)
    from sparkcdc.pipeline.definition import PipelineSettings
    from sparkcdc.pipeline.launch.session import build_session
    spark_conf = json.loads(sys.argv[1])
    own = build_session(PipelineSettings(name="cc", parallelism=2, spark=spark_conf), None,
                        sys.argv[2])
    n = own.spark.range(100).selectExpr("sum(id)").first()[0]
    print(json.dumps({"sum": n, "used": own.cache.used,
                      "dump": str(own.cache.dump) if own.cache.dump else None}))
    own.stop()
""")


def _session(tmp: Path, spark_conf: dict | None = None) -> dict:
    """A session built, used and stopped in a child process whose cache is ``tmp/cache``;
    what it said, its stderr (its log) and where it ran (``tmp/cwd``)."""
    import json

    cwd = tmp / "cwd"
    cwd.mkdir(exist_ok=True)
    env = tree_env(tmp / "cache")
    r = subprocess.run([sys.executable, "-c", CHILD, json.dumps(spark_conf or {}),
                        str(tmp / "spark.log")], check=False, env=env, cwd=cwd,
                       capture_output=True, text=True, timeout=600)
    assert r.returncode == 0, r.stderr[-3000:]
    out = json.loads(r.stdout.strip().splitlines()[-1])
    assert out["sum"] == 4950
    return {**out, "stdout": r.stdout, "stderr": r.stderr}


def _archives(tmp: Path) -> list[Path]:
    d = tmp / "cache" / "jvm"
    return sorted(d.iterdir()) if d.is_dir() else []


@pytest.fixture(scope="module")
def written(tmp_path_factory) -> tuple[Path, dict]:
    """A cache that a first session filled: its folder and what that session said."""
    tmp = tmp_path_factory.mktemp("class-cache")
    return tmp, _session(tmp)


def _copy(written, tmp: Path) -> Path:
    """The written cache in a folder of this test's; its archive."""
    shutil.copytree(written[0] / "cache", tmp / "cache")
    return next(p for p in _archives(tmp) if p.suffix == ".jsa")


@pytest.mark.long
def test_a_run_writes_the_archive_and_the_next_maps_spark_from_it(written):
    tmp, first = written
    assert not first["used"] and first["dump"].endswith(".tmp")
    files = _archives(tmp)
    assert [p.suffix for p in files] == [".jsa", ".size"], files  # no dump left behind
    assert files[0].stat().st_size == int(files[1].read_text()) > 10_000_000
    assert "saved Spark's loaded classes" in first["stderr"]
    # HotSpot's warnings about classes it could not archive: neither console nor log
    assert "[cds]" not in first["stdout"] + first["stderr"] + (tmp / "spark.log").read_text()

    loads = tmp / "load.log"
    second = _session(tmp, {"spark.driver.extraJavaOptions":
                            f"-Xlog:class+load=info:file={loads}"})
    assert second["used"] and second["dump"] is None
    shared = [line for line in loads.read_text().splitlines()
              if "org.apache.spark.sql.SparkSession " in line]
    assert shared and "shared objects file (top)" in shared[0], shared
    assert _archives(tmp) == files


def _cut(archive: Path, *, keep_size_note: bool) -> None:
    """Cut the archive to a third (a full disk, a copy that stopped); with
    ``keep_size_note`` its noted size says it is whole."""
    archive.chmod(0o644)
    with open(archive, "r+b") as f:
        f.truncate(archive.stat().st_size // 3)
    if keep_size_note:
        archive.with_suffix(".size").write_text(str(archive.stat().st_size))


@pytest.mark.faults  # a damaged archive: make test-faults
def test_an_archive_cut_short_is_not_used_and_is_written_again(written, tmp_path):
    archive = _copy(written, tmp_path)
    _cut(archive, keep_size_note=False)
    r = _session(tmp_path)
    assert not r["used"] and r["dump"]  # HotSpot would crash on it: a new one is written
    assert "did not start" not in r["stderr"]
    assert archive.stat().st_size == int(archive.with_suffix(".size").read_text())
    assert archive.stat().st_size > 10_000_000


@pytest.mark.faults  # a damaged archive: make test-faults
def test_an_archive_that_crashes_the_jvm_is_dropped_and_the_session_starts_without(
        written, tmp_path, monkeypatch):
    archive = _copy(written, tmp_path)
    _cut(archive, keep_size_note=True)
    r = _session(tmp_path)
    assert not r["used"]
    assert "did not start from the class archive" in r["stderr"]
    assert not archive.exists()
    assert not list((tmp_path / "cwd").iterdir())  # the crash report is not in the cwd
    assert [p.name[:6] for p in _archives(tmp_path)] == ["crash-"]
    monkeypatch.setenv(class_cache.CACHE_ENV, str(tmp_path / "cache"))
    assert ClassCache.for_conf({}).dump is not None  # the next run writes a new one


def test_options_follow_the_cache_and_give_way_to_the_users(tmp_path, monkeypatch):
    monkeypatch.setenv(class_cache.CACHE_ENV, str(tmp_path))
    c = ClassCache.for_conf({})
    assert c.archive is not None and c.archive.parent == tmp_path / "jvm"
    assert "-XX:ArchiveClassesAtExit=" in c.options() and c.dump is not None
    c.archive.write_bytes(b"x")
    assert ClassCache.for_conf({}).dump is not None  # no size noted: not known whole
    c.archive.with_suffix(".size").write_text("1")
    assert "-XX:SharedArchiveFile=" in ClassCache.for_conf({}).options()
    # another class path, another archive
    other = ClassCache.for_conf({"spark.driver.extraClassPath": "/opt/x.jar"}).archive
    assert other is not None and other != c.archive
    for theirs in ("-Xshare:off", f"-XX:SharedArchiveFile={tmp_path}/mine.jsa"):
        assert ClassCache.for_conf({"spark.driver.extraJavaOptions": theirs}).options() == ""
    assert ClassCache.for_conf({}, enabled=False).options() == ""


def test_class_cache_is_a_pipeline_key():
    def parse(extra: str):
        return parse_pipeline("source:\n  type: mysql\n  hostname: h\n  username: u\n"
                              "  password: p\n  tables: a.b\nsink:\n  type: console\n"
                              f"pipeline:\n  name: x\n{extra}", "p.yaml", env={})

    assert parse("").pipeline.class_cache
    assert not parse("  class-cache: false\n").pipeline.class_cache
    with pytest.raises(ConfigError, match="p.yaml:11: 'pipeline.class-cache'"):
        parse("  class-cache: sometimes\n")


def test_a_session_built_over_a_running_jvm_leaves_it_be(spark, tmp_path, monkeypatch):
    """A runner given no session in a process that has one (an embedding caller, the
    tests) gets that JVM: no archive options, and stopping it must not end that JVM."""
    monkeypatch.setenv(class_cache.CACHE_ENV, str(tmp_path))
    c = ClassCache.for_conf({})
    assert c.dump is not None  # an empty cache: it would ask for an archive
    assert c.start(lambda opts: opts) == ""  # ...but the JVM runs: no options
    assert c.archive is None and c.dump is None and not c.used
    c.publish(spark)  # nothing to publish: the JVM goes on
    assert spark.range(3).count() == 3


def test_each_spark_install_has_an_archive_of_its_own(tmp_path, monkeypatch):
    """Two installs of the same Spark (two venvs) hold the same jars at other paths; the
    JVM maps an archive only for the class path it was written with, so each gets its own
    (one shared would be used by one install and silently ignored by the other)."""
    homes = []
    for name in ("a", "b"):
        jars = tmp_path / name / "jars"
        jars.mkdir(parents=True)
        (jars / "spark-core.jar").write_bytes(b"x" * 10)
        homes.append(tmp_path / name)
    paths = []
    for home in homes:
        monkeypatch.setattr(class_cache, "_spark_home", lambda home=home: home)
        paths.append(class_cache.archive_path({}))
    assert None not in paths and paths[0] != paths[1]
    monkeypatch.setattr(class_cache, "_spark_home", lambda: homes[0])
    assert class_cache.archive_path({}) == paths[0]  # the same install: the same archive
