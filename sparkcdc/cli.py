"""The ``sparkcdc`` command line: run, validate, status and verify a pipeline YAML
(docs/pipelines.md), and throwaway sandboxes: MariaDB, MySQL, and a Kafka broker."""

from __future__ import annotations

import argparse
import sys

from sparkcdc.errors import SparkCDCError


def _cmd_sandbox(args: argparse.Namespace) -> int:
    if args.server == "kafka":
        return _kafka_sandbox(args)
    if args.server == "mysql":
        from sparkcdc.testing import mysql as sandbox
        settings_class = sandbox.MySQLSettings
        binary, server, label = "mysqld", " mysql", "MySQL sandbox"
    else:
        from sparkcdc.testing import mariadb as sandbox  # type: ignore[no-redef]
        settings_class = sandbox.ServerSettings
        binary, server, label = "mariadbd", "", "sandbox"

    if args.action == "start":
        settings = (settings_class.misconfigured(args.misconfigured)
                    if args.misconfigured else settings_class())
        info = sandbox.start_detached(args.name, settings)
        print(f"{label} {info.name!r} running: {binary} pid {info.pid}, "
              f"127.0.0.1:{info.port}, server-id {info.server_id}")
        print("source options (CDC user: SELECT, REPLICATION SLAVE, REPLICATION CLIENT):")
        for k, v in info.connection_options().items():
            print(f"  {k}: {v}")
        print(f"admin user (all privileges): {info.admin_user} / {info.admin_password}")
        print(f"socket: {info.socket}")
        print(f"stop it with: sparkcdc sandbox stop{server} --name {info.name}")
        return 0
    return _status_or_stop(args, label, sandbox, lambda info: [
        f"127.0.0.1:{info.port}",
        *(f"  {k}: {v}" for k, v in info.connection_options(password=args.show_password).items())])


def _kafka_sandbox(args: argparse.Namespace) -> int:
    """A detached Kafka broker (sparkcdc/testing/kafka.py) for trying the kafka sink."""
    from sparkcdc.testing import kafka

    if args.misconfigured:
        raise SparkCDCError("--misconfigured is for the MariaDB and MySQL sandboxes",
                            fix="leave it out for `sparkcdc sandbox start kafka`")
    if args.action == "start":
        info = kafka.start_detached(args.name)
        print(f"Kafka sandbox {info.name!r} running: pid {info.pid}, "
              f"bootstrap servers {info.bootstrap_servers} (KRaft, one node)")
        print("sink options:")
        for k, v in info.sink_options().items():
            print(f"  {k}: {v}")
        print(f"log: {info.log_file}")
        print(f"stop it with: sparkcdc sandbox stop kafka --name {info.name}")
        return 0
    return _status_or_stop(args, "Kafka sandbox", kafka,
                           lambda info: [f"bootstrap servers {info.bootstrap_servers}"])


def _status_or_stop(args: argparse.Namespace, label: str, sandbox, details) -> int:
    """``sandbox status`` and ``sandbox stop``, alike for every kind of sandbox: ``details``
    gives the status line's end (where it listens) and any lines to print after it."""
    if args.action == "status":
        info, alive = sandbox.status_detached(args.name)
        if info is None:
            print(f"{label} {args.name!r}: not started")
            return 1
        state = "running" if alive else "not running (stale state)"
        where, *more = details(info)
        print(f"{label} {info.name!r}: {state}, pid {info.pid}, {where}")
        for line in more:
            print(line)
        return 0 if alive else 1
    if args.action == "stop":
        was = sandbox.stop_detached(args.name)
        print(f"{label} {args.name!r}: " + ("stopped" if was else "was not running"))
        return 0
    raise AssertionError(args.action)


def _logging(verbose: int) -> None:
    import logging

    level = logging.WARNING if verbose == 0 else logging.INFO if verbose == 1 else logging.DEBUG
    logging.basicConfig(level=level, format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    logging.getLogger("py4j").setLevel(logging.WARNING)


def _cmd_run(args: argparse.Namespace) -> int:
    from sparkcdc.pipeline import load_pipeline
    from sparkcdc.pipeline.commands.progress import make_display
    from sparkcdc.pipeline.run.loop import Runner
    from sparkcdc.pipeline.run.signals import stacks_on_sigusr1

    _logging(args.verbose)
    stacks_on_sigusr1()  # kill -USR1: where each thread of a run that seems stuck waits
    defn = load_pipeline(args.pipeline)
    if defn.source.type == "kafka":
        return _run_kafka(args, defn)
    display = None if args.no_progress else make_display()
    runner = Runner(defn, master=args.master, until_caught_up=args.until_caught_up,
                    display=display, spark_log_to_console=args.verbose > 0)
    metrics = None
    if args.metrics_port is not None:
        from sparkcdc.pipeline.commands.metrics import MetricsServer

        metrics = MetricsServer(runner, args.metrics_port, args.metrics_host).start()
        print(f"metrics: http://{args.metrics_host}:{metrics.port}/metrics", flush=True)
    try:
        runner.run()
    finally:
        if metrics is not None:
            metrics.close()
        if display is not None:
            display.close()
        runner.close()
    what = _ended(args, runner)
    if runner.nothing_to_do:
        what += " (nothing to do since the last run; Spark was not started)"
    print(f"pipeline {defn.pipeline.name!r} {what}; checkpoint: {defn.checkpoint_dir}"
          + ("" if runner.nothing_to_do else f"; Spark's log: {runner.ckpt.spark_log}"))
    return 0


def _run_kafka(args: argparse.Namespace, defn) -> int:
    """A pipeline reading Kafka topics (pipeline/kafka/runner.py): no progress table or
    metrics yet; its log says what each batch did (-v)."""
    from sparkcdc.errors import ConfigError
    from sparkcdc.pipeline.kafka.runner import KafkaRunner

    if args.metrics_port is not None:
        raise ConfigError("--metrics-port is not available for a kafka source yet",
                          fix="leave it out; -v logs each batch's messages and tables")
    runner = KafkaRunner(defn, master=args.master, until_caught_up=args.until_caught_up,
                         spark_log_to_console=args.verbose > 0)
    try:
        runner.run()
    finally:
        runner.close()
    print(f"pipeline {defn.pipeline.name!r} {_ended(args, runner)}; "
          f"checkpoint: {defn.checkpoint_dir}")
    return 0


def _ended(args: argparse.Namespace, runner) -> str:
    """How a run ended, for its last line: a run ``--until-caught-up`` stopped by Ctrl-C or
    SIGTERM did not catch up, and must not say it did."""
    if not args.until_caught_up:
        return "stopped"
    return "stopped before it caught up" if runner.interrupted else "caught up"


def _mysql_only(defn, command: str) -> None:
    from sparkcdc.errors import ConfigError

    if defn.source.type == "kafka":
        raise ConfigError(f"sparkcdc {command} reads a MySQL source; this pipeline's source "
                          "is kafka", fix="sparkcdc run reads it; its positions are in "
                          f"{defn.checkpoint_dir}/kafka (offsets/ and commits/)")


def _cmd_validate(args: argparse.Namespace) -> int:
    from sparkcdc.pipeline import load_pipeline
    from sparkcdc.pipeline.commands.validate import render, validate_pipeline

    _logging(args.verbose)
    defn = load_pipeline(args.pipeline)
    _mysql_only(defn, "validate")
    report = validate_pipeline(defn)
    render(report)
    return 0 if report.ok else 1


def _cmd_status(args: argparse.Namespace) -> int:
    from sparkcdc.pipeline import load_pipeline
    from sparkcdc.pipeline.commands.status import render, server_position, table_statuses

    _logging(args.verbose)
    defn = load_pipeline(args.pipeline)
    _mysql_only(defn, "status")
    current, why = server_position(defn)
    statuses = table_statuses(defn, current)
    if not statuses:
        print(f"pipeline {defn.pipeline.name!r} has not run yet "
              f"(no state in {defn.checkpoint_dir})")
        return 1
    note = None
    if current is None:
        note = f"binlog lag unknown: the source is not reachable ({why})"
    else:
        note = f"server binlog position: {current['file']}:{current['pos']}"
    render(statuses, note=note)
    return 0


def _cmd_verify(args: argparse.Namespace) -> int:
    from sparkcdc.pipeline import load_pipeline
    from sparkcdc.pipeline.commands.verify import Verifier, render

    _logging(args.verbose)
    defn = load_pipeline(args.pipeline)
    _mysql_only(defn, "verify")
    results = Verifier(defn, rows_per_range=args.rows_per_range, rechecks=args.rechecks,
                       catch_up_timeout=args.timeout).run()
    ok = render(results, max_keys=args.max_keys)
    return 0 if ok else 1


def _cmd_request(args: argparse.Namespace) -> int:
    """``snapshot``, ``pause`` or ``resume``: a request the running pipeline takes
    (pipeline/run/control.py); without one running, it waits for the next start."""
    from sparkcdc.pipeline import load_pipeline
    from sparkcdc.pipeline.run import control

    _logging(args.verbose)
    defn = load_pipeline(args.pipeline)
    path = control.submit(defn.checkpoint_dir, args.command, args.tables,
                          getattr(args, "where", None))
    ans = control.wait(path, args.timeout)
    if ans is None:
        print(f"{args.command} of {args.tables!r} requested; no running pipeline took it within "
              f"{args.timeout:g}s, so it waits in {path.parent} for the next start of "
              f"pipeline {defn.pipeline.name!r}")
        return 0
    done = {"snapshot": "snapshotted again (the others stream on)", "pause": "paused",
            "resume": "resumed from where it was paused"}[args.command]
    if getattr(args, "where", None):
        done = f"rows where {args.where} read again (it streams on)"
    for table in ans.applied:
        print(f"{table}: {done}")
    past = {"snapshot": "snapshotted", "pause": "paused", "resume": "resumed"}[args.command]
    for table, why in ans.skipped.items():
        print(f"{table}: not {past}: {why}")
    return 0 if ans.applied else 1


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="sparkcdc", description=__doc__)
    sub = parser.add_subparsers(dest="command", required=True)
    sb = sub.add_parser("sandbox", help="a throwaway local MariaDB or MySQL configured for CDC, "
                                        "or a Kafka broker")
    sb.add_argument("action", choices=["start", "stop", "status"])
    sb.add_argument("server", nargs="?", choices=["mariadb", "mysql", "kafka"],
                    default="mariadb",
                    help="mariadb (the default); mysql: MySQL 9.7 with GTIDs on, from the root "
                         "`make setup` made (scripts/setup_mysql.sh); or kafka: Apache Kafka 4 "
                         "in KRaft mode, one node on loopback, from the jars `make setup` "
                         "fetched")
    sb.add_argument("--name", default="default", help="several sandboxes can run side by side")
    sb.add_argument("--misconfigured", default=None,
                    help="start broken on purpose: statement, mixed, no-binlog, "
                         "minimal-image, noblob-image, minimal-metadata (mysql also: no-gtid)")
    sb.add_argument("--show-password", action="store_true", help="status: print the password")
    sb.set_defaults(func=_cmd_sandbox)

    def pipeline_cmd(name: str, help: str, func):
        p = sub.add_parser(name, help=help, description=help)
        p.add_argument("pipeline", help="the pipeline YAML file")
        p.add_argument("-v", "--verbose", action="count", default=0,
                       help="log more (-v: info, and Spark's own warnings on the console as well as "
                            "in its log file; -vv: debug)")
        p.set_defaults(func=func)
        return p

    run = pipeline_cmd("run", "run a pipeline: snapshot, then stream changes (Ctrl-C stops it; "
                              "running it again resumes)", _cmd_run)
    run.add_argument("--until-caught-up", action="store_true",
                     help="stop once every table reached the binlog position of the start")
    run.add_argument("--master", default=None,
                     help="Spark master URL (default local[*]), e.g. spark://host:7077")
    run.add_argument("--no-progress", action="store_true", help="no live progress display")
    run.add_argument("--metrics-port", type=int, default=None,
                     help="serve Prometheus metrics at http://HOST:PORT/metrics while it runs "
                          "(0: any free port)")
    run.add_argument("--metrics-host", default="127.0.0.1",
                     help="the address the metrics server binds to (default 127.0.0.1)")
    pipeline_cmd("validate", "check the server, privileges, tables, keys, routes and sink; "
                             "print each problem with its fix", _cmd_validate)
    pipeline_cmd("status", "per table phase, chunks, rows, position and binlog lag, read from "
                           "the checkpoint", _cmd_status)
    ver = pipeline_cmd("verify", "prove each target equals its source tables by chunked "
                                 "checksums; print differing keys", _cmd_verify)
    ver.add_argument("--rows-per-range", type=int, default=100_000,
                     help="rows per checksummed key range (default 100000)")
    ver.add_argument("--rechecks", type=int, default=3,
                     help="re-checks of differing ranges after catching up (default 3)")
    ver.add_argument("--timeout", type=float, default=60.0,
                     help="seconds to wait for a running pipeline to catch up before a "
                          "re-check (default 60)")
    ver.add_argument("--max-keys", type=int, default=10, help="differing keys printed per table")
    for name, what in (("snapshot", ("snapshot the chosen tables again while the pipeline runs "
                                     "(their targets are merged over, not emptied)")),
                       ("pause", ("stop reading the chosen tables; their changes wait in the "
                                  "binlog")),
                       ("resume", "go on with paused tables from where they stopped")):
        req = pipeline_cmd(name, what, _cmd_request)
        req.add_argument("--tables", required=True,
                         help="a regular expression matched against 'database.table'")
        req.add_argument("--timeout", type=float, default=60.0,
                         help="seconds to wait for the running pipeline to take the request "
                              "(default 60)")
        if name == "snapshot":
            req.add_argument("--where", default=None,
                             help="only the rows where this SQL condition holds, read again "
                                  "while the table streams on, e.g. \"id > 1000\"")
    return parser


def main(argv: list[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    try:
        return args.func(args)
    except SparkCDCError as e:
        print(f"sparkcdc: error: {e}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    sys.exit(main())
