"""Spark's driver JVM started from an archive of the classes an earlier run loaded.

Why: a ``sparkcdc run`` spends seconds before its first change in starting Spark's JVM,
and most of that is loading, parsing and verifying the ten thousand classes of Spark,
Scala, Hadoop and Arrow that every run loads again. HotSpot's class data sharing (a
*dynamic* archive, JDK 13 and later) maps those classes, already parsed and verified, from
a file. On the 2-core test machine it takes the session's start from about 4.0 s to 2.5 s
and the first job from 1.8 s to 1.0 s (docs/benchmarks.md).

How:

* The archive belongs to one JVM binary and one Spark class path: its name is a digest of
  the ``java`` that Spark's launcher runs (path, size, time), the pyspark version, the jars
  of its ``jars/`` folder and ``spark.driver.extraClassPath``. It lives in the cache
  folder (``$SPARKCDC_CACHE_DIR``, else ``$XDG_CACHE_HOME/sparkcdc``, else
  ``~/.cache/sparkcdc``), under ``jvm/``.
* A run that finds it whole (the size it was published with: HotSpot crashes on an
  archive cut short) starts the JVM with ``-XX:SharedArchiveFile`` and
  ``-XX:+VerifySharedSpaces`` (a checksum: an archive damaged inside is not used, where
  it would otherwise hang the JVM). A run that does not asks its JVM to write one when it
  exits (``-XX:ArchiveClassesAtExit``, into a file of its own); when the run closes its
  session, ``publish`` ends the JVM, checks the file with a JVM that must map it
  (``-Xshare:on``) and only then renames it into place and notes its size. Runs that
  start at once each write their own; the last rename wins.
* A session that fails to start from an archive all the same is started once more
  without it; if that works, the archive was at fault and is deleted (``start``).
* The JVM's own warnings about sharing (classes it cannot archive, an archive it cannot
  use) are not printed; its errors go to its stderr (Spark's log), not stdout.

``pipeline.class-cache: false`` turns it off; a JVM option of the user's that already
names an archive or ``-Xshare`` wins over all of this.
"""

from __future__ import annotations

import contextlib
import hashlib
import logging
import os
import shutil
import subprocess
import time
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import Any

log = logging.getLogger("sparkcdc.pipeline")

CACHE_ENV = "SPARKCDC_CACHE_DIR"
# HotSpot's unified logging only for errors, and to stderr (Spark's log) as its other
# messages: the hundreds of warnings of a dump (classes it cannot archive) and of an archive
# it cannot use would otherwise reach the console, on stdout or with -v
QUIET = "-Xlog:disable -Xlog:all=error:stderr -XX:+DisplayVMOutputToStderr"
STALE_SECONDS = 600  # a dump left by a run that died: its JVM is long done by then
UNUSED_DAYS = 30  # an archive of another JVM or Spark, not used for that long, goes


def cache_dir() -> Path:
    """Where sparkcdc keeps what makes later runs faster."""
    env = os.environ.get(CACHE_ENV)
    if env:
        return Path(env)
    base = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    return Path(base) / "sparkcdc"


def unused(paths: Iterable[Path], keep: Path) -> list[Path]:
    """Those of ``paths`` (other than ``keep``, the one in use) that no run used for
    ``UNUSED_DAYS``: what the cache folder forgets (the time of use is a file's mtime)."""
    too_old = time.time() - UNUSED_DAYS * 86400
    out = []
    for p in paths:
        with contextlib.suppress(OSError):
            if p != keep and p.stat().st_mtime < too_old:
                out.append(p)
    return out


def _java() -> Path | None:
    """The ``java`` Spark's launcher (``bin/spark-class``) runs: ``$JAVA_HOME/bin/java``,
    else the one on the PATH."""
    home = os.environ.get("JAVA_HOME")
    found = os.path.join(home, "bin", "java") if home else shutil.which("java")
    return Path(found).resolve() if found and os.path.exists(found) else None


def _spark_home() -> Path:
    import pyspark

    env = os.environ.get("SPARK_HOME")
    return Path(env) if env else Path(pyspark.__file__).parent


def archive_path(conf: dict[str, str]) -> Path | None:
    """The archive for this JVM and this Spark class path (None without a ``java``)."""
    import pyspark

    java = _java()
    if java is None:
        return None
    h = hashlib.sha1()
    st = java.stat()
    h.update(f"{java}\0{st.st_size}\0{st.st_mtime_ns}\0{pyspark.__version__}\0".encode())
    jars = _spark_home() / "jars"
    # the JVM maps an archive only for the class path it was written with (else it starts
    # without it, silently): another Spark install of the same version (a second venv)
    # gets an archive of its own
    h.update(f"{jars.resolve()}\0".encode())
    for p in sorted(jars.glob("*.jar")) if jars.is_dir() else ():
        h.update(f"{p.name}\0{p.stat().st_size}\0".encode())
    h.update(conf.get("spark.driver.extraClassPath", "").encode())
    return cache_dir() / "jvm" / f"spark-{pyspark.__version__}-{h.hexdigest()[:16]}.jsa"


class ClassCache:
    """One session's use of the archive: the JVM options to start with (``options``), the
    start with a fallback (``start``), the publication of a new archive (``publish``)."""

    def __init__(self, archive: Path | None):
        self.archive = archive
        self.dump: Path | None = None  # where this session's JVM writes a new archive
        self.used = False  # the JVM was started from the archive
        if archive is not None and not _whole(archive):
            self.dump = archive.with_name(f"{archive.stem}.{os.getpid()}.tmp")

    @classmethod
    def for_conf(cls, conf: dict[str, str], enabled: bool = True) -> ClassCache:
        """Off when disabled, or when the user's JVM options already speak of sharing."""
        mine = conf.get("spark.driver.extraJavaOptions", "")
        if not enabled or any(o in mine for o in ("SharedArchiveFile", "ArchiveClassesAtExit",
                                                  "-Xshare")):
            return cls(None)
        try:
            return cls(archive_path(conf))
        except OSError as e:  # an unreadable jars folder: start as Spark does
            log.debug("class cache: off (%s)", e)
            return cls(None)

    def options(self) -> str:
        """The JVM options for the driver: map the archive, or write one at exit."""
        if self.archive is None:
            return ""
        if self.dump is None:  # checked as mapped (a damaged one is not used), and a crash's
            # report beside it rather than in the working directory
            crash = self.archive.with_name("crash-%p.log")
            return (f"-XX:SharedArchiveFile={self.archive} -XX:+VerifySharedSpaces "
                    f"-XX:ErrorFile={crash} {QUIET}")
        try:
            self.dump.parent.mkdir(parents=True, exist_ok=True)
        except OSError as e:
            log.debug("class cache: no archive (%s)", e)
            self.archive = self.dump = None
            return ""
        self._forget_stale()
        return f"-XX:ArchiveClassesAtExit={self.dump} {QUIET}"

    def start(self, launch: Callable[[str], Any]) -> Any:
        """``launch(options)`` (the session's start with these JVM options). A start from
        the archive that fails is tried once more without it; if that one works, the
        archive was at fault and is removed."""
        from pyspark import SparkContext

        if SparkContext._gateway is not None:  # a JVM runs already: none of this applies,
            self.archive = self.dump = None  # and stopping must not end that JVM
        opts = self.options()
        self.used = self.archive is not None and self.dump is None
        try:
            session = launch(opts)
        except Exception:
            if not self.used:
                raise
            log.warning("Spark's JVM did not start from the class archive %s (its report, "
                        "if it crashed: crash-<pid>.log beside it): starting it without the "
                        "archive, which is then removed if that works", self.archive)
            self.used = False
            session = launch("")
            assert self.archive is not None
            _remove(self.archive)
            return session
        if self.used and self.archive is not None:  # its time of use keeps it from _prune
            with contextlib.suppress(OSError):
                os.utime(self.archive)
        return session

    def publish(self, spark) -> None:
        """After the session stopped: end its JVM (it writes the archive as it exits),
        check the archive and put it in place. Only for a session that was asked to write
        one; any failure leaves things as they were (the next run writes one again)."""
        if self.dump is None or self.archive is None:
            return
        dump, self.dump = self.dump, None
        try:
            classpath = spark._jvm.java.lang.System.getProperty("java.class.path")
        except Exception as e:  # noqa: BLE001 - no JVM to ask: nothing to publish
            log.debug("class cache: not published (%s)", e)
            return
        t0 = time.monotonic()
        if not _end_jvm():
            log.debug("class cache: Spark's JVM did not end; no archive")
            return
        try:
            if dump.exists() and _maps(dump, classpath):
                size = dump.stat().st_size
                os.replace(dump, self.archive)
                _size_file(self.archive).write_text(str(size))
                log.info("saved Spark's loaded classes to %s (%.1f s): later runs start "
                         "faster", self.archive, time.monotonic() - t0)
                self._prune()
            else:
                log.debug("class cache: the archive written at exit is not usable")
        finally:
            with contextlib.suppress(OSError):
                dump.unlink()

    def _forget_stale(self) -> None:
        """Dumps of runs that died before publishing theirs."""
        assert self.dump is not None
        now = time.time()
        for p in self.dump.parent.glob("*.tmp"):
            with contextlib.suppress(OSError):
                if now - p.stat().st_mtime > STALE_SECONDS:
                    p.unlink()

    def _prune(self) -> None:
        """Archives of other JVMs or Spark versions that no run used for a month (their
        time of use is the archive's, not its size note's), and old crash reports."""
        assert self.archive is not None
        d = self.archive.parent
        for p in unused([*d.glob("*.jsa"), *d.glob("crash-*")], keep=self.archive):
            _remove(p)


def _size_file(archive: Path) -> Path:
    return archive.with_suffix(".size")


def _remove(archive: Path) -> None:
    """An archive and its size note (or a crash report, which has none)."""
    for p in (archive, _size_file(archive)):
        with contextlib.suppress(OSError):
            p.unlink()


def _whole(archive: Path) -> bool:
    """Whether the archive is there with the size it was published with: HotSpot crashes
    on an archive cut short (a full disk, a copy that stopped) instead of falling back,
    while a damaged one of the right size fails its check and is not used."""
    try:
        return archive.stat().st_size == int(_size_file(archive).read_text())
    except (OSError, ValueError):
        return False


def _end_jvm(timeout: float = 120.0) -> bool:
    """End the JVM of this process's stopped SparkContext and wait for it: it reads its
    stdin and exits at its end (PySpark's gateway server). A later session launches a new
    one."""
    from pyspark import SparkContext

    gw = SparkContext._gateway
    proc = getattr(gw, "proc", None)
    if gw is None or proc is None:
        return False
    with contextlib.suppress(Exception):
        gw.shutdown()
    with contextlib.suppress(OSError):
        if proc.stdin is not None:
            proc.stdin.close()
    try:
        proc.wait(timeout)
    except subprocess.TimeoutExpired:
        return False
    finally:
        SparkContext._gateway = None
        SparkContext._jvm = None
    return proc.returncode == 0


def _maps(archive: Path, classpath: str) -> bool:
    """Whether a JVM with Spark's class path maps ``archive`` and finds it intact."""
    java = _java()
    if java is None:
        return False
    try:
        r = subprocess.run([str(java), "-cp", classpath, f"-XX:SharedArchiveFile={archive}",
                            "-Xshare:on", "-XX:+VerifySharedSpaces", *QUIET.split(),
                            "-version"], check=False, capture_output=True, timeout=60)
    except (OSError, subprocess.TimeoutExpired):
        return False
    return r.returncode == 0
