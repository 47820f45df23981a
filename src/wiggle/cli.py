"""The ``wiggle`` command: run a server, a demo, and operate instances from a shell.

Exit codes: 0 success; 1 the instance FAILED or was CANCELLED (``start --wait``) or another
error; 2 bad arguments (INVALID_ARGUMENT); 3 not found; 4 refused by the state
(FAILED_PRECONDITION); 5 server unreachable or unavailable. ``EXIT_CODES`` maps the
``wiggle.errors.ErrorCode`` of an error to its exit code.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import signal
import subprocess
import sys
from datetime import datetime, timezone
from typing import Any

import msgspec

from ._cli_schedules import add_schedule_parser
from ._engine.state import InstanceStatus
from ._env import EnvError
from ._logging import configure_logging
from ._version import __version__
from .errors import ErrorCode, InvalidArgument, WiggleError

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


def _when(ms: int) -> str:
    if not ms:
        return "-"
    return datetime.fromtimestamp(ms / 1000, tz=timezone.utc).strftime("%Y-%m-%d %H:%M:%S.%f")[:-3] + "Z"


def _print_json(value: Any) -> None:
    print(json.dumps(msgspec.to_builtins(value), indent=2, sort_keys=True))


def _print_instance(info: Any, history: list[Any] | None = None) -> None:
    print(f"instance   {info.instance_id}")
    print(f"workflow   {info.workflow} (version {info.version})")
    print(f"status     {info.status}" + (f"  reason: {info.reason}" if info.reason else ""))
    if info.error:
        print(f"error      {info.error}")
    if info.correlation_id:
        print(f"correlation {info.correlation_id}")
    if info.parent_id:
        print(f"parent     {info.parent_id} (token {info.parent_token_id}, depth {info.depth})")
    print(f"created    {_when(info.created_at)}   finished {_when(info.finished_at)}")
    print(f"context    {json.dumps(info.context, sort_keys=True)}")
    for t in info.tokens:
        line = f"  token {t.token_id} at {t.node_id}: {t.status} (attempt {t.attempt})"
        if t.lease_owner:
            line += f" leased to {t.lease_owner}"
        if t.local_run_owner:
            line += f"; in a local run by {t.local_run_owner} ({t.local_run_steps} steps reported)"
        if t.last_error:
            line += f"; last error: {t.last_error}"
        if t.child_id:
            line += f"; waits for child {t.child_id}"
        print(line)
    for s in getattr(info, "pending_signals", ()):
        print(
            f"  buffered signal {s.name!r} sent {_when(s.sent_at)}"
            + (f" (id {s.signal_id})" if s.signal_id else "")
        )
    if history is not None:
        from ._cli_views import print_history

        print("history")
        for e in history:
            took = f"{e.ended_at - e.started_at} ms" if e.started_at else ""
            line = (
                f"  {_when(e.ended_at)}  {e.node_id:<20} #{e.attempt} {e.outcome:<10} {took:>8} {e.worker_id}"
            )
            if e.child_id:
                line += f"  child: {e.child_id}"
            if e.error:
                line += f"  error: {e.error}"
            print(line)
        print_history(history, sys.stdout)


def _json_arg(text: str | None, what: str) -> Any:
    if text is None:
        return None
    if text.startswith("@"):
        with open(text[1:], encoding="utf-8") as fh:
            text = fh.read()
    try:
        return json.loads(text)
    except json.JSONDecodeError as exc:
        raise InvalidArgument(f"{what} is not valid JSON: {exc}") from None


# ---------------------------------------------------------------------- commands


def cmd_server(args: argparse.Namespace) -> int:
    from ._server.app import serve
    from ._server.config import SETTINGS, from_mapping

    values = {field: getattr(args, field, None) for field, _, _ in SETTINGS}
    config = from_mapping(values)
    configure_logging()
    if config.processes > 1:
        if not config.database_url:
            raise InvalidArgument("--processes > 1 needs a PostgreSQL database (--database-url)")
        return _run_processes(config.processes)
    asyncio.run(serve(config, ready=lambda s: print(f"wiggle server listening on {s.target}", flush=True)))
    return 0


def _run_processes(n: int) -> int:
    """N server processes sharing the port (SO_REUSEPORT); the kernel spreads connections.

    SIGTERM or SIGINT to this parent is passed on to every child, which stops gracefully; so is
    SIGHUP, which makes each child reload its certificate and identity files.
    """
    env = dict(os.environ, WIGGLE_PROCESSES="1", WIGGLE_REUSEPORT="1")
    # argparse keeps the last value of a repeated flag: the children each run one process.
    argv = [*sys.argv[1:], "--processes", "1"]
    children = [subprocess.Popen([sys.executable, "-m", "wiggle.cli", *argv], env=env) for _ in range(n)]

    def forward(signum: int, _frame: object) -> None:
        for child in children:
            if child.poll() is None:
                child.send_signal(signum)

    # SIGHUP too: each child re-reads its certificate and identity files
    forwarded = (signal.SIGTERM, signal.SIGINT, *([signal.SIGHUP] if hasattr(signal, "SIGHUP") else []))
    previous = {sig: signal.signal(sig, forward) for sig in forwarded}
    try:
        codes = [child.wait() for child in children]
    finally:
        for sig, handler in previous.items():
            signal.signal(sig, handler)
    return max((abs(c) for c in codes), default=0)


def cmd_migrate(args: argparse.Namespace) -> int:
    from ._server.config import from_mapping

    configure_logging()
    config = from_mapping({"database_url": args.database_url, "database_schema": args.database_schema})
    if not config.database_url:
        raise InvalidArgument("migrate needs --database-url or WIGGLE_DATABASE_URL")
    from ._storage.postgres import migrate

    applied = asyncio.run(migrate(config.database_url, config.database_schema))
    print(f"schema {config.database_schema!r}: {applied} migration(s) applied; up to date")
    return 0


def cmd_demo(args: argparse.Namespace) -> int:
    from . import _demo
    from ._model import ExecutionMode
    from .testing import EmbeddedServer

    mode = ExecutionMode(args.mode.upper())
    configure_logging(default_level="WARNING")

    async def run() -> int:
        async with EmbeddedServer(metrics_port=args.dashboard_port) as server:
            print(f"embedded server (in-memory store) on {server.target}")
            # the demo's own output is the point: its worker logs warnings (tracebacks) and up
            env = {"WIGGLE_LOG_LEVEL": "WARNING", **os.environ}
            worker = subprocess.Popen(
                [sys.executable, "-m", "wiggle._demo", server.target, mode.value], env=env
            )
            print(f"worker process pid {worker.pid} serving workflow demo-orders in {mode.value} mode")
            try:
                client = server.client
                await client.register(_demo.blueprint(mode))
                ids = []
                for i in range(args.instances):
                    order = _demo.Order(order_id=f"order-{i + 1}", quantity=i + 1, in_stock=(i % 4 != 3))
                    info = await client.start("demo-orders", order, correlation_id=order.order_id)
                    ids.append(info.instance_id)
                    print(f"started {info.instance_id} for {order.order_id}")
                ok = True
                for instance_id in ids:
                    info = await client.wait(instance_id, timeout=60)
                    history = await client.history(instance_id)
                    steps = " -> ".join(
                        f"{e.node_id}{'(retry)' if e.outcome == 'RETRY' else ''}"
                        for e in history
                        if e.kind in ("TASK", "PREDICATE")
                    )
                    extra = f" ({info.reason})" if info.reason else ""
                    print(
                        f"{info.correlation_id}: {info.status}{extra}  steps: {steps}  total_cents={info.context.get('total_cents')}"
                    )
                    ok = ok and info.status == InstanceStatus.COMPLETED
                print("all instances COMPLETED" if ok else "some instances did not complete", flush=True)
                if args.dashboard_port:
                    await _serve_dashboard(server.server.http_port)
                return 0 if ok else 1
            finally:
                worker.terminate()
                try:
                    worker.wait(10)
                except subprocess.TimeoutExpired:
                    worker.kill()

    return asyncio.run(run())


async def _serve_dashboard(port: int) -> None:
    """Keep the demo's server (and its dashboard) up until SIGINT / SIGTERM."""
    print(f"dashboard on http://127.0.0.1:{port}/ (Ctrl-C to stop)", flush=True)
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGINT, signal.SIGTERM):
        loop.add_signal_handler(sig, stop.set)
    await stop.wait()


def _client(args: argparse.Namespace) -> Any:
    from ._security.credentials import Credentials
    from .client import Client

    try:
        credentials = Credentials.from_env(
            ca_file=args.tls_ca,
            cert_file=args.client_cert,
            key_file=args.client_key,
            token_file=args.token_file,
            server_name=args.tls_server_name,
        )
        return Client(args.target, credentials=credentials)
    except ValueError as exc:
        raise SystemExit(f"wiggle: {exc}") from None


def _read_jsonl(path: str) -> list[dict[str, Any]]:
    """The contexts of a JSON-lines file (one JSON object per line, blank lines skipped; - = stdin)."""
    contexts: list[dict[str, Any]] = []
    try:
        fh = sys.stdin if path == "-" else open(path, encoding="utf-8")  # noqa: SIM115
    except OSError as exc:
        raise SystemExit(f"wiggle: --from-file {path}: {exc.strerror}") from None
    with fh:
        for number, line in enumerate(fh, 1):
            if not line.strip():
                continue
            try:
                value = json.loads(line)
            except json.JSONDecodeError as exc:
                raise SystemExit(f"wiggle: {path} line {number} is not valid JSON: {exc}") from None
            if not isinstance(value, dict):
                raise SystemExit(
                    f"wiggle: {path} line {number} must be a JSON object, got {type(value).__name__}"
                )
            contexts.append(value)
    return contexts


def cmd_start_many(args: argparse.Namespace) -> int:
    if args.context is not None or args.wait:
        raise SystemExit("wiggle: --from-file takes the contexts from the file: drop --context and --wait")
    contexts = _read_jsonl(args.from_file)
    if not contexts:
        raise SystemExit(f"wiggle: {args.from_file} holds no contexts (one JSON object per line)")
    with _client(args) as client:
        ids = client.start_many(
            args.workflow,
            contexts,
            version=args.version or "",
            correlation_id=args.correlation_id or "",
            request_id=args.request_id or "",
        )
    if args.json:
        _print_json(ids)
    else:
        print("\n".join(ids))
    return 0


def cmd_start(args: argparse.Namespace) -> int:
    if args.from_file is not None:
        return cmd_start_many(args)
    with _client(args) as client:
        info = client.start(
            args.workflow,
            _json_arg(args.context, "--context") or {},
            version=args.version or "",
            correlation_id=args.correlation_id or "",
            request_id=args.request_id or "",
        )
        if args.wait:
            info = client.wait(info.instance_id, timeout=args.timeout)
        _print_json(info) if args.json else _print_instance(info)
        if args.wait and info.status in (InstanceStatus.FAILED, InstanceStatus.CANCELLED):
            return 1
    return 0


def cmd_get(args: argparse.Namespace) -> int:
    with _client(args) as client:
        info = client.get(args.instance_id)
        history = client.history(args.instance_id) if args.history else None
        if args.json:
            _print_json({"instance": info, "history": history} if history is not None else info)
        else:
            _print_instance(info, history)
    return 0


def cmd_history(args: argparse.Namespace) -> int:
    from ._cli_views import print_history

    with _client(args) as client:
        history = client.history(args.instance_id)
        if args.json:
            _print_json(history)
        else:
            print_history(history, sys.stdout, tracebacks=not args.no_tracebacks, indent="")
    return 0


def cmd_cancel(args: argparse.Namespace) -> int:
    with _client(args) as client:
        info, changed = client.cancel(args.instance_id, args.reason)
        if args.json:
            _print_json({"instance": info, "changed": changed})
        else:
            print(
                f"{info.instance_id}: {'cancelled' if changed else f'already {info.status}; nothing changed'}"
            )
    return 0


def cmd_list(args: argparse.Namespace) -> int:
    with _client(args) as client:
        items, next_token = client.list(
            workflow=args.workflow or "",
            status=(args.status or "").upper(),
            correlation_id=args.correlation_id or "",
            page_size=args.page_size,
            page_token=args.page_token or "",
        )
        if args.json:
            _print_json({"instances": items, "next_page_token": next_token})
            return 0
        print(f"{'INSTANCE':<28}  {'WORKFLOW':<20} {'STATUS':<10} {'CREATED':<24}  CORRELATION")
        for i in items:
            print(
                f"{i.instance_id:<28}  {i.workflow:<20} {i.status:<10} {_when(i.created_at):<24}  {i.correlation_id}"
            )
        if next_token:
            print(f"more: --page-token {next_token}")
    return 0


def cmd_complete_task(args: argparse.Namespace) -> int:
    with _client(args) as client:
        info = client.complete_user_task(args.instance_id, args.name, _json_arg(args.data, "--data") or {})
        _print_json(info) if args.json else _print_instance(info)
    return 0


def cmd_signal(args: argparse.Namespace) -> int:
    with _client(args) as client:
        data = _json_arg(args.data, "--data") or {}
        result = client.signal(args.instance_id, args.name, data, args.signal_id, sender=args.sender or "")
        if args.json:
            _print_json(result)
        else:
            print(f"{args.instance_id}: signal {args.name!r} {result.outcome.lower()}")
    return 0


def cmd_retry(args: argparse.Namespace) -> int:
    with _client(args) as client:
        context = _json_arg(args.context, "--context")
        info = client.retry(
            args.instance_id, from_node=args.from_node or "", context=context, requested_by=args.by
        )
        if args.wait:
            info = client.wait(info.instance_id, timeout=args.timeout)
        _print_json(info) if args.json else _print_instance(info)
        if args.wait and info.status in (InstanceStatus.FAILED, InstanceStatus.CANCELLED):
            return 1
    return 0


def cmd_doctor(args: argparse.Namespace) -> int:
    from ._cli_ops import doctor_checks

    database_url = args.database_url or os.environ.get("WIGGLE_DATABASE_URL", "")
    schema = args.database_schema or os.environ.get("WIGGLE_DATABASE_SCHEMA", "") or "wiggle"
    checks = doctor_checks(args.target, database_url, schema)
    if args.json:
        _print_json([{"check": name, "ok": ok, "detail": detail} for name, ok, detail in checks])
    else:
        print(f"{'CHECK':<18} {'OK':<4} DETAIL")
        for name, ok, detail in checks:
            print(f"{name:<18} {'yes' if ok else 'NO':<4} {detail}")
    return 0 if all(ok for _, ok, _ in checks) else 1


def cmd_workflows(args: argparse.Namespace) -> int:
    from ._cli_ops import print_workflows

    with _client(args) as client:
        items = client.list_workflows(args.name or "")
        if args.json:
            _print_json(items)
        else:
            print_workflows(items, sys.stdout)
    return 0


def cmd_queues(args: argparse.Namespace) -> int:
    from ._cli_ops import print_queues

    with _client(args) as client:
        items = client.queues()
        if args.json:
            _print_json(items)
        else:
            print_queues(items, sys.stdout)
    return 0


def cmd_describe(args: argparse.Namespace) -> int:
    from ._cli_ops import describe

    with _client(args) as client:
        info = client.get_workflow(args.workflow, args.version or "")
        if args.json:
            _print_json(info)
        else:
            describe(info, sys.stdout)
    return 0


def cmd_token(args: argparse.Namespace) -> int:
    from ._security.tokens import hash_token, new_token

    token = new_token()
    entry: dict[str, Any] = {
        "name": args.name,
        "roles": args.role or ["client"],
        "token_sha256": hash_token(token),
    }
    if args.queue:
        entry["queues"] = args.queue
    print(f"token (give it to the caller; it is not stored): {token}")
    print('identity (add it to the --auth-file\'s "identities" list):')
    print(json.dumps(entry))
    return 0


def cmd_bench(args: argparse.Namespace) -> int:
    from ._bench import e2e

    return int(e2e.main(args.bench_args))


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

    add_schedule_parser(sub, (_client, _print_json, _json_arg, _when))
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
