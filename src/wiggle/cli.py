"""The ``wiggle`` command: run a server, a demo, and operate instances from a shell.

Exit codes: 0 success; 1 the instance FAILED or was CANCELLED (``start --wait``) or another
error; 2 bad arguments (INVALID_ARGUMENT); 3 not found; 4 refused by the state
(FAILED_PRECONDITION); 5 server unreachable or unavailable. ``EXIT_CODES`` maps the
``wiggle.errors.ErrorCode`` of an error to its exit code.
"""

from __future__ import annotations

import argparse
import os
import signal
import sys
from typing import Any

from ._cli_admin import cmd_bench, cmd_describe, cmd_doctor, cmd_queues, cmd_token, cmd_workflows
from ._cli_common import client_from_args, json_arg, print_json
from ._cli_instances import (
    cmd_cancel,
    cmd_complete_task,
    cmd_get,
    cmd_history,
    cmd_list,
    cmd_retry,
    cmd_signal,
    cmd_start,
)
from ._cli_schedules import add_schedule_parser
from ._cli_server import cmd_demo, cmd_migrate, cmd_server
from ._cli_views import when
from ._env import EnvError
from ._version import __version__
from .errors import ErrorCode, WiggleError

__all__ = ["main"]

EXIT_CODES = {
    ErrorCode.INVALID_ARGUMENT: 2,
    ErrorCode.NOT_FOUND: 3,
    ErrorCode.FAILED_PRECONDITION: 4,
    ErrorCode.UNAVAILABLE: 5,
    ErrorCode.DEADLINE_EXCEEDED: 5,
}


def _impl_line() -> str:
    from . import _fast

    return f"hot paths: {_fast.IMPL} ({_fast.IMPL_REASON})"


# ---------------------------------------------------------------------- parser


def _parser_with(common: argparse.ArgumentParser) -> type[argparse.ArgumentParser]:
    """A subcommand parser class that also accepts ``common``'s options (not for ``bench``)."""

    class SubParser(argparse.ArgumentParser):
        def __init__(self, **kwargs: Any) -> None:
            if kwargs.get("add_help", True):
                kwargs["parents"] = [*kwargs.get("parents", []), common]
            super().__init__(**kwargs)

    return SubParser


def build_parser() -> argparse.ArgumentParser:
    from ._server.config import SETTINGS, ServerConfig

    parser = argparse.ArgumentParser(
        prog="wiggle", description="Wiggle for Python: a durable workflow engine."
    )
    parser.add_argument("--version", action="version", version=f"wiggle {__version__}; {_impl_line()}")
    parser.add_argument(
        "--target",
        default=os.environ.get("WIGGLE_TARGET", "127.0.0.1:7233"),
        help="server host:port, or several comma-separated for fail-over (WIGGLE_TARGET)",
    )
    # the client's TLS and token (wiggle/_security/credentials.py); unset: the WIGGLE_* variable
    parser.add_argument("--tls-ca", default=None, help="CA of the server's certificate (WIGGLE_TLS_CA)")
    parser.add_argument(
        "--client-cert", default=None, help="client certificate for mTLS (WIGGLE_TLS_CLIENT_CERT)"
    )
    parser.add_argument("--client-key", default=None, help="its private key (WIGGLE_TLS_CLIENT_KEY)")
    parser.add_argument(
        "--token-file", default=None, help="file holding a bearer token (WIGGLE_TOKEN_FILE; or WIGGLE_TOKEN)"
    )
    parser.add_argument(
        "--tls-server-name",
        default=None,
        help="name to check the server certificate against (WIGGLE_TLS_SERVER_NAME)",
    )
    parser.add_argument("--json", action="store_true", help="print JSON instead of text")
    # The same options after the subcommand too (`wiggle list --target h:1 --json`): SUPPRESS
    # leaves the value given before the subcommand (or the default) when they are absent.
    common = argparse.ArgumentParser(add_help=False)
    common.add_argument("--target", default=argparse.SUPPRESS, help="server host:port (WIGGLE_TARGET)")
    common.add_argument("--json", action="store_true", default=argparse.SUPPRESS, help="print JSON")
    sub = parser.add_subparsers(dest="command", required=True, parser_class=_parser_with(common))

    p = sub.add_parser("server", help="run a server (in-memory unless --database-url)")
    for field, var, text in SETTINGS:
        flag = "--" + field.replace("_", "-")
        if isinstance(getattr(ServerConfig(), field), bool):  # a switch: --insecure, --open-metrics
            p.add_argument(flag, dest=field, action="store_true", default=None, help=f"{text} [{var}]")
            continue
        p.add_argument(flag, dest=field, default=None, help=f"{text} [{var}]")
    p.set_defaults(func=cmd_server)

    p = sub.add_parser("migrate", help="create or migrate the PostgreSQL schema, then exit")
    p.add_argument("--database-url", default=None)
    p.add_argument("--database-schema", default=None)
    p.set_defaults(func=cmd_migrate)

    p = sub.add_parser("demo", help="embedded server + a worker process + a sample workflow")
    p.add_argument("--instances", type=int, default=8)
    p.add_argument(
        "--dashboard-port",
        type=int,
        default=0,
        help="serve the dashboard on this port and keep running until Ctrl-C (needs the dashboard extra)",
    )
    p.add_argument(
        "--mode",
        default="LOCAL_SYNC",
        type=str.upper,
        choices=["SERVER", "LOCAL_SYNC", "LOCAL_ASYNC"],
        help="SERVER, LOCAL_SYNC or LOCAL_ASYNC",
    )
    p.set_defaults(func=cmd_demo)

    p = sub.add_parser("start", help="start an instance")
    p.add_argument("workflow")
    p.add_argument("--context", help="JSON object (or @file)")
    p.add_argument("--version", dest="version")
    p.add_argument("--correlation-id")
    p.add_argument(
        "--request-id",
        help="idempotency key: a start repeating it returns the instance the first one started",
    )
    p.add_argument(
        "--from-file",
        metavar="FILE.jsonl",
        help="start one instance per line (a JSON object each; - reads stdin) in bulk; prints the ids in order",
    )
    p.add_argument(
        "--wait", action="store_true", help="wait until it finishes; exit 1 if it FAILED or was CANCELLED"
    )
    p.add_argument("--timeout", type=float, default=60.0)
    p.set_defaults(func=cmd_start)

    p = sub.add_parser("get", help="show an instance")
    p.add_argument("instance_id")
    p.add_argument("--history", action="store_true", help="with every step attempt")
    p.set_defaults(func=cmd_get)

    p = sub.add_parser("history", help="an instance's step attempts, with each failure's traceback")
    p.add_argument("instance_id")
    p.add_argument("--no-tracebacks", action="store_true", help="the error lines only")
    p.set_defaults(func=cmd_history)

    p = sub.add_parser("cancel", help="cancel an instance")
    p.add_argument("instance_id")
    p.add_argument("--reason", default="cancelled by operator")
    p.set_defaults(func=cmd_cancel)

    p = sub.add_parser("list", help="list instances, newest first")
    p.add_argument("--workflow")
    p.add_argument("--status")
    p.add_argument("--correlation-id")
    p.add_argument("--page-size", type=int, default=50)
    p.add_argument("--page-token")
    p.set_defaults(func=cmd_list)

    p = sub.add_parser("complete-task", help="complete a user task")
    p.add_argument("instance_id")
    p.add_argument("name")
    p.add_argument("--data", help="JSON object merged into the context (or @file)")
    p.set_defaults(func=cmd_complete_task)

    add_schedule_parser(sub, (client_from_args, print_json, json_arg, when))
    p = sub.add_parser("signal", help="send a named signal to an instance (buffered if not yet awaited)")
    p.add_argument("instance_id")
    p.add_argument("name", help="the signal name a wait_signal node listens for")
    p.add_argument("--data", help="JSON object: the signal's data (or @file)")
    p.add_argument("--id", dest="signal_id", help="a signal id: a second send with the same id is a no-op")
    p.add_argument("--sender", help="who sends it (recorded in the history)")
    p.set_defaults(func=cmd_signal)

    p = sub.add_parser("retry", help="resume a FAILED instance from the steps that failed (or --from NODE)")
    p.add_argument("instance_id")
    p.add_argument("--from", dest="from_node", help="restart from this node (on the main line)")
    p.add_argument("--context", help="JSON object replacing the context (or @file)")
    p.add_argument("--by", help="who asks (recorded in the history; default user@host)")
    p.add_argument("--wait", action="store_true", help="wait until the instance finishes")
    p.add_argument("--timeout", type=float, default=60.0)
    p.set_defaults(func=cmd_retry)

    p = sub.add_parser("token", help="make a bearer token and its --auth-file identity entry")
    p.add_argument("name", help="the identity's name (a worker's ids are prefixed with it)")
    p.add_argument(
        "--role", action="append", choices=["admin", "client", "worker", "viewer"], help="repeatable (client)"
    )
    p.add_argument("--queue", action="append", help="a queue a worker may serve (repeatable; * for all)")
    p.set_defaults(func=cmd_token)

    p = sub.add_parser(
        "doctor", help="check the server, the schema, the extras and the hot-path implementation"
    )
    p.add_argument("--database-url", default=None, help="check this database's schema (WIGGLE_DATABASE_URL)")
    p.add_argument("--database-schema", default=None)
    p.set_defaults(func=cmd_doctor)

    p = sub.add_parser("workflows", help="list registered workflow versions")
    p.add_argument("--name", help="only this workflow's versions")
    p.set_defaults(func=cmd_workflows)

    p = sub.add_parser("queues", help="queues: ready depth, oldest ready step, workers polling")
    p.set_defaults(func=cmd_queues)

    p = sub.add_parser("describe", help="a workflow's graph as text")
    p.add_argument("workflow")
    p.add_argument("--version", dest="version", help="a version (default: the latest)")
    p.set_defaults(func=cmd_describe)

    p = sub.add_parser("bench", help="the end-to-end benchmark (see bench/README.md)", add_help=False)
    p.add_argument("bench_args", nargs=argparse.REMAINDER)
    p.set_defaults(func=cmd_bench)
    return parser


def main(argv: list[str] | None = None) -> int:
    """Entry point of the ``wiggle`` command."""
    argv = sys.argv[1:] if argv is None else argv
    if argv and argv[0] == "bench":  # every later argument belongs to the benchmark's own parser
        return cmd_bench(argparse.Namespace(bench_args=argv[1:]))
    args = build_parser().parse_args(argv)
    try:
        code = int(args.func(args))
        sys.stdout.flush()  # a closed pipe shows here, inside the handler below
        return code
    except BrokenPipeError:
        # `wiggle list | head`: the reader left. Point stdout at /dev/null so the interpreter's
        # own flush at exit does not fail again, and exit as a process killed by SIGPIPE would.
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
        return 128 + signal.SIGPIPE
    except WiggleError as exc:
        print(f"wiggle: {exc.code.name}: {exc}", file=sys.stderr)
        return EXIT_CODES.get(exc.code, 1)
    except EnvError as exc:  # a malformed WIGGLE_* variable: bad input
        print(f"wiggle: {exc}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        return 130


if __name__ == "__main__":
    sys.exit(main())
