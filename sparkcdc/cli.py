"""The ``sparkcdc`` command line."""

from __future__ import annotations

import argparse
import sys

from sparkcdc.errors import SparkCDCError


def _cmd_sandbox(args: argparse.Namespace) -> int:
    from sparkcdc import sandbox

    if args.action == "start":
        settings = (sandbox.ServerSettings.misconfigured(args.misconfigured)
                    if args.misconfigured else sandbox.ServerSettings())
        info = sandbox.start_detached(args.name, settings)
        print(f"sandbox {info.name!r} running: mariadbd pid {info.pid}, "
              f"127.0.0.1:{info.port}, server-id {info.server_id}")
        print("source options (CDC user: SELECT, REPLICATION SLAVE, REPLICATION CLIENT):")
        for k, v in info.connection_options().items():
            print(f"  {k}: {v}")
        print(f"admin user (all privileges): {info.admin_user} / {info.admin_password}")
        print(f"socket: {info.socket}")
        print(f"stop it with: sparkcdc sandbox stop --name {info.name}")
        return 0
    if args.action == "status":
        info, alive = sandbox.status_detached(args.name)
        if info is None:
            print(f"sandbox {args.name!r}: not started")
            return 1
        state = "running" if alive else "not running (stale state)"
        print(f"sandbox {info.name!r}: {state}, pid {info.pid}, 127.0.0.1:{info.port}")
        for k, v in info.connection_options(password=args.show_password).items():
            print(f"  {k}: {v}")
        return 0 if alive else 1
    if args.action == "stop":
        was = sandbox.stop_detached(args.name)
        print(f"sandbox {args.name!r}: " + ("stopped" if was else "was not running"))
        return 0
    raise AssertionError(args.action)


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="sparkcdc", description=__doc__)
    sub = parser.add_subparsers(dest="command", required=True)
    sb = sub.add_parser("sandbox", help="a throwaway local MariaDB configured for CDC")
    sb.add_argument("action", choices=["start", "stop", "status"])
    sb.add_argument("--name", default="default", help="several sandboxes can run side by side")
    sb.add_argument("--misconfigured", default=None,
                    help="start broken on purpose: statement, mixed, no-binlog, "
                         "minimal-image, noblob-image, minimal-metadata")
    sb.add_argument("--show-password", action="store_true", help="status: print the password")
    sb.set_defaults(func=_cmd_sandbox)
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
