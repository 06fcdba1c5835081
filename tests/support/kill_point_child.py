"""``sparkcdc run`` (``sparkcdc.cli.main``, arguments as given) that SIGKILLs its own process
group at a chosen point of the ``kafka`` source's batches, where a kill from outside lands
only by luck. ``SPARKCDC_TEST_KILL`` names the point:

  write:<k>   right after the k-th target write of this run: inside a batch's apply, some
              of its targets have the batch and the others not yet
  commit:<k>  the k-th batch of this run wrote every target; killed before its commit is
              logged (between the sinks' commits and the checkpoint's)

Without it the run is a plain ``sparkcdc run``. The line ``KILLPOINT ...`` is printed
(flushed) just before the kill, so the test can tell the point was reached.
"""

from __future__ import annotations

import os
import signal
import sys


def _die(what: str) -> None:
    print(f"KILLPOINT {what}", flush=True)
    os.killpg(0, signal.SIGKILL)  # the run's group: this process, its JVM and workers


def _install(point: str) -> None:
    from sparkcdc.pipeline.kafka import runner as kafka_runner

    kind, _, count = point.partition(":")
    at = int(count)
    seen = {"write": 0, "commit": 0}
    if kind == "write":
        original = kafka_runner.KafkaRunner._write

        def write(self, table, info, rows, n, *more, **named):
            out = original(self, table, info, rows, n, *more, **named)
            seen["write"] += 1
            if seen["write"] == at:
                _die(f"write {at}: batch {n}, table {table} written")
            return out

        kafka_runner.KafkaRunner._write = write
    elif kind == "commit":
        original_json = kafka_runner.write_json

        def write_json(path, data):
            if path.parent.name == "commits":
                seen["commit"] += 1
                if seen["commit"] == at:
                    _die(f"commit {at}: batch {path.stem} in every target, not committed")
            original_json(path, data)

        kafka_runner.write_json = write_json
    else:
        raise SystemExit(f"SPARKCDC_TEST_KILL={point!r}: write:<k> or commit:<k>")


def main() -> int:
    point = os.environ.get("SPARKCDC_TEST_KILL")
    if point:
        _install(point)
    from sparkcdc.cli import main as cli

    return cli(sys.argv[1:])


if __name__ == "__main__":
    sys.exit(main())
