"""The PySpark range (sparkcdc/spark/versions.py): an older PySpark is one clear error."""

from __future__ import annotations

import pyspark
import pytest

from sparkcdc.errors import UnsupportedSpark
from sparkcdc.spark import versions


def test_this_pyspark_is_supported():
    assert versions.pyspark_version() >= versions.OLDEST
    versions.require_pyspark()


def test_an_older_pyspark_is_refused_with_the_range(monkeypatch):
    monkeypatch.setattr(pyspark, "__version__", "4.1.1")
    with pytest.raises(UnsupportedSpark) as e:
        versions.require_pyspark()
    assert "needs PySpark 4.2 or newer" in e.value.message and "4.1.1" in e.value.message
    assert e.value.fix.startswith("pip install 'pyspark>=4.2,<4.4'")


def test_a_pyspark_without_the_admission_control_api_is_refused(monkeypatch):
    real = versions.importlib.util.find_spec
    monkeypatch.setattr(versions.importlib.util, "find_spec",
                        lambda name: None if name == "pyspark.sql.streaming.datasource"
                        else real(name))
    with pytest.raises(UnsupportedSpark):
        versions.require_pyspark()
