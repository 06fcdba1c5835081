"""The package as a user installs it: ``python -m build`` makes the sdist and, from it, a
wheel with the compiled row decoder; without a C compiler (``CC=/bin/false``) the wheel
holds the pure-Python decoder alone. Each wheel goes into a clean venv (no editable
install, no repository on the path) and runs the demo pipeline (demo/demo.py: a sandbox
MariaDB, a pipeline into Delta under writes, verify OK), on a small table.

Minutes of venvs and installs: marker ``wheel``, run by ``make test-compat``."""

from __future__ import annotations

import os
import subprocess
import sys
import venv
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
pytestmark = [pytest.mark.wheel, pytest.mark.timeout(1800)]


def build(out: Path, **env: str) -> Path:
    p = subprocess.run([sys.executable, "-m", "build", "--outdir", str(out), str(ROOT)],
                       capture_output=True, text=True, timeout=900, check=False,
                       env={**os.environ, **env})
    assert p.returncode == 0, p.stdout[-3000:] + p.stderr[-3000:]
    (wheel,) = out.glob("*.whl")
    return wheel


def installed(wheel: Path, where: Path) -> Path:
    """A clean venv with the wheel and its Delta extra; returns its python."""
    venv.create(where, with_pip=True)
    py = where / "bin" / "python"
    p = subprocess.run([str(py), "-m", "pip", "install", "-q", f"{wheel}[delta]"],
                       capture_output=True, text=True, timeout=900, check=False)
    assert p.returncode == 0, p.stderr[-3000:]
    return py


def run_demo(py: Path, cwd: Path) -> str:
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "PYSPARK_PYTHON",
                                                           "PYSPARK_DRIVER_PYTHON")}
    env.update(SPARKCDC_DEMO_ROWS="3000", SPARKCDC_DEMO_STREAM_SECONDS="3")
    p = subprocess.run([str(py), str(ROOT / "demo" / "demo.py")], cwd=cwd, env=env,
                       capture_output=True, text=True, timeout=900, check=False)
    assert p.returncode == 0, p.stdout[-3000:] + p.stderr[-3000:]
    return p.stdout


def where_from(py: Path, cwd: Path) -> tuple[str, bool]:
    """Where the venv imports sparkcdc from, and whether its compiled decoder loads."""
    code = ("import sparkcdc; from sparkcdc.mysql.binlog import fastdecode as f; "
            "print(sparkcdc.__file__); print(f.available())")
    p = subprocess.run([str(py), "-c", code], cwd=cwd, capture_output=True, text=True,
                       check=True, timeout=120)
    file, avail = p.stdout.split()
    return file, avail == "True"


def test_wheels_with_and_without_a_compiler_install_and_run_the_demo(tmp_path):
    compiled = build(tmp_path / "dist-c")
    plain = build(tmp_path / "dist-py", CC="/bin/false")
    assert compiled.name.startswith("sparkcdc-") and plain.name.startswith("sparkcdc-")

    for wheel, has_c in ((compiled, True), (plain, False)):
        py = installed(wheel, tmp_path / f"venv-{has_c}")
        file, avail = where_from(py, tmp_path)
        assert file.startswith(str(tmp_path / f"venv-{has_c}")), file  # not the repository
        assert avail is has_c
        out = run_demo(py, tmp_path)
        assert "verify OK; sandbox and Spark stopped" in out, out[-3000:]
