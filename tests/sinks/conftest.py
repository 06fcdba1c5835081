"""Fixtures of the sink tests: ``make_target`` makes fresh targets of each sink type in turn
(tests/support/sink_support.py), so one test runs once per sink."""

from __future__ import annotations

import pytest
from sink_support import SINK_IDS, TargetFactory


@pytest.fixture(params=SINK_IDS)
def make_target(request, tmp_path):
    f = TargetFactory(request.param, request, tmp_path)
    yield f
    f.close()
