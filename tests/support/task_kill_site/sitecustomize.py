"""Imported by every Python process whose path holds this folder (a run of the kill-point
tests: tests/support/task_kill_points.py): with ``SPARKCDC_TEST_KILL`` set, its point installed."""

import os
import sys

if os.environ.get("SPARKCDC_TEST_KILL"):
    sys.path.append(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    import task_kill_points

    task_kill_points.install()
