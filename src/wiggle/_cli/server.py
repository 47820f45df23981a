"""The ``wiggle`` verbs that run something here: server (one process or several), migrate, demo."""

from __future__ import annotations

import argparse
import asyncio
import enum
import logging
import signal
import subprocess
import sys
from typing import TYPE_CHECKING, Any

from .._engine.state import InstanceStatus
from .._env import child_environment, warn_unknown_variables
from .._logging import configure_logging
from .._urls import host_address
from ..errors import InvalidArgument
from .common import QUIET_FLAG, print_json
from .parent import exit_status, follow_parent, killed_by, parent_marker

if TYPE_CHECKING:
    from .._server.app import WiggleServer

__all__ = ["cmd_server", "cmd_migrate", "cmd_demo"]

log = logging.getLogger("wiggle.server")


def cmd_server(args: argparse.Namespace) -> int:
    from .._loop import run
    from .._server.app import serve
    from .._server.config import SETTINGS, from_mapping

    # Logging first: what reading the settings warns of (an older variable's name) goes through
    # it, in the log's format (WIGGLE_LOG_FORMAT=json), not to bare stderr.
    configure_logging()
    child = getattr(args, "no_variable_warnings", False)  # a child of --processes N: its parent warned
    if not child:
        for old, new in getattr(args, "deprecated_flags", []):
            log.warning("%s is deprecated: use %s", old, new)
    values = {field: getattr(args, field, None) for field, _, _ in SETTINGS}
    config = from_mapping(values, warn=not child)
    if not child:
        warn_unknown_variables(log)  # a misspelled setting is read by nothing: say so, once
    if config.processes > 1:
        return _run_processes(config.processes, config.http_port)
    if child:
        follow_parent()  # a parent killed outright takes this process with it (wiggle/_cli/parent.py)
    run(serve(config, ready=_announce), config.event_loop)  # uvloop where installed (process.py)
    return 0


def _announce(server: WiggleServer) -> None:
    extra = f" and {host_address(server.config.host, server.upstream_port)}" if server.upstream_port else ""
    print(f"wiggle server listening on {server.target}{extra}", flush=True)


def _run_processes(n: int, http_port: int = 0) -> int:
    """N server processes sharing the gRPC port (SO_REUSEPORT); the kernel spreads connections.
    With an HTTP port, process i serves HTTP on the port + i (its own /metrics, /healthz and
    /readyz; the dashboard on each), as ``wiggle worker --processes`` does: counters scraped from
    whichever process a shared port picked would jump between processes.

    SIGTERM or SIGINT to this parent is passed on to every child, which stops gracefully; so is
    SIGHUP, which makes each child reload its certificate and identity files. A child that ends
    on its own (it could not start: a port taken, the database refusing) stops the others, and
    its exit status is the parent's: a group short of a process does not run on unnoticed. One
    killed by signal N (SIGKILL, the out-of-memory killer) gives 128 + N, as a shell says it.
    """
    env = child_environment(WIGGLE_PROCESSES="1", WIGGLE_REUSE_PORT="1", **parent_marker())
    # argparse keeps the last value of a repeated flag: the children each run one process.
    argv = [*sys.argv[1:], "--processes", "1", QUIET_FLAG]
    children = [
        subprocess.Popen(
            [
                sys.executable,
                "-m",
                "wiggle.cli",
                *argv,
                *([f"--http-port={http_port + i}"] if http_port else []),
            ],
            env=env,
        )
        for i in range(n)
    ]
    asked_to_stop: list[bool] = []  # a SIGTERM or SIGINT came (SIGHUP only reloads)

    def forward(signum: int, _frame: object) -> None:
        if signum != getattr(signal, "SIGHUP", None):
            asked_to_stop.append(True)
        for child in children:
            if child.poll() is None:
                child.send_signal(signum)

    # SIGHUP too: each child re-reads its certificate and identity files
    forwarded = (signal.SIGTERM, signal.SIGINT, *([signal.SIGHUP] if hasattr(signal, "SIGHUP") else []))
    previous = {sig: signal.signal(sig, forward) for sig in forwarded}
    first: int | None = None  # the status of a child that ended while nobody asked it to
    try:
        while running := [c for c in children if c.poll() is None]:
            ended = [c for c in children if c.returncode is not None]
            if ended and first is None and not asked_to_stop:
                first = ended[0].returncode
                log.error(
                    "server process %d of %d %s; stopping the others",
                    children.index(ended[0]) + 1,
                    n,
                    f"ended with status {first}" if first >= 0 else killed_by(first),
                )
                forward(signal.SIGTERM, None)
            try:
                running[0].wait(0.5)
            except subprocess.TimeoutExpired:
                pass
    finally:
        for sig, handler in previous.items():
            signal.signal(sig, handler)
    # a child killed by signal N: 128 + N, as a shell says it (its N alone read as the child's exit(N))
    if first is not None:
        return exit_status(first) or 1
    return max((exit_status(c.returncode or 0) for c in children), default=0)


def cmd_migrate(args: argparse.Namespace) -> int:
    from .._server.config import from_mapping

    configure_logging()
    config = from_mapping({"database_url": args.database_url, "database_schema": args.database_schema})
    warn_unknown_variables(log)  # a misspelled WIGGLE_DATABASE_SCHEMA would migrate another schema
    if not config.database_url:
        raise InvalidArgument("migrate needs --database-url or WIGGLE_DATABASE_URL")
    from .._storage.postgres import migrate

    applied = asyncio.run(migrate(config.database_url, config.database_schema))
    if getattr(args, "json", False):
        print_json({"schema": config.database_schema, "applied": applied, "up_to_date": True})
    else:
        print(f"schema {config.database_schema!r}: {applied} migration(s) applied; up to date")
    return 0


def cmd_demo(args: argparse.Namespace) -> int:
    from .. import _demo
    from .._model import ExecutionMode
    from .._server.app import HttpPortUnavailable
    from ..testing import EmbeddedServer

    mode = ExecutionMode(args.mode.upper())
    configure_logging(default_level="WARNING")

    as_json = getattr(args, "json", False)
    say = (lambda *_args, **_kwargs: None) if as_json else print  # --json: one object at the end

    async def run() -> int:
        try:
            return await demo()
        except HttpPortUnavailable as exc:  # the demo's HTTP port is its --dashboard-port
            raise HttpPortUnavailable(
                exc.address, exc.why, "--dashboard-port", "the dashboard port"
            ) from None

    async def demo() -> int:
        async with EmbeddedServer(http_port=args.dashboard_port) as server:
            say(f"embedded server (in-memory store) on {server.target}")
            # the demo's own output is the point: its worker logs warnings (tracebacks) and up
            env = {"WIGGLE_LOG_LEVEL": "WARNING", **child_environment()}
            worker = subprocess.Popen(
                [sys.executable, "-m", "wiggle._demo", server.target, mode.value], env=env
            )
            say(f"worker process pid {worker.pid} serving workflow demo-orders in {mode.value} mode")
            try:
                client = server.client
                await client.register(_demo.blueprint(mode))
                ids = []
                for i in range(args.instances):
                    order = _demo.Order(order_id=f"order-{i + 1}", quantity=i + 1, in_stock=(i % 4 != 3))
                    info = await client.start("demo-orders", order, correlation_id=order.order_id)
                    ids.append(info.instance_id)
                    say(f"started {info.instance_id} for {order.order_id}")
                done = [await _outcome(client, instance_id) for instance_id in ids]
                for outcome in done:
                    say(_outcome_line(outcome))
                ok = all(o["status"] == InstanceStatus.COMPLETED for o in done)
                say("all instances COMPLETED" if ok else "some instances did not complete", flush=True)
                if as_json:
                    print_json(
                        {"target": server.target, "mode": mode.value, "instances": done, "completed": ok}
                    )
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


async def _outcome(client: Any, instance_id: str) -> dict[str, Any]:
    """A demo instance once finished: what ``--json`` prints of it (``_outcome_line``: the text)."""
    info = await client.wait(instance_id, timeout=60)
    history = await client.history(instance_id)
    return {
        "instance_id": instance_id,
        "correlation_id": info.correlation_id,
        "status": str(info.status),
        "reason": info.reason,
        "steps": [
            f"{e.node_id}{'(retry)' if e.outcome == 'RETRY' else ''}"
            for e in history
            if e.kind in ("TASK", "PREDICATE")
        ],
        "total_cents": info.context.get("total_cents"),
    }


def _outcome_line(outcome: dict[str, Any]) -> str:
    reason = f" ({outcome['reason']})" if outcome["reason"] else ""
    return (
        f"{outcome['correlation_id']}: {outcome['status']}{reason}  steps: {' -> '.join(outcome['steps'])}  "
        f"total_cents={outcome['total_cents']}"
    )


async def _serve_dashboard(port: int) -> None:
    """Keep the demo's server (and its dashboard) up until SIGINT / SIGTERM."""
    print(f"dashboard on http://127.0.0.1:{port}/ (Ctrl-C to stop)", flush=True)
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGINT, signal.SIGTERM):
        loop.add_signal_handler(sig, stop.set)
    await stop.wait()


SERVER_HELP = """Run a Wiggle server: the gRPC API for clients and workers, the clock duties (timers,
leases, schedules, retention) and, with --http-port, the dashboard, /metrics, /healthz and
/readyz. Without --database-url the store is in memory (development); with it, any number of
servers on one PostgreSQL database form a cluster. Every flag is also a WIGGLE_* variable
(shown in brackets); a flag wins over its variable. SIGTERM or SIGINT stops it gracefully."""

SERVER_EXAMPLE = """examples:
  wiggle server                                   (in memory, 127.0.0.1:7233)
  wiggle server --database-url postgresql://wiggle@db:5432/wiggle --http-port 9464
  WIGGLE_HOST=0.0.0.0 WIGGLE_TLS_CERT=/etc/wiggle/tls.crt WIGGLE_TLS_KEY=/etc/wiggle/tls.key \\
    WIGGLE_AUTH_FILE=/etc/wiggle/identities.json wiggle server --database-url ...
  wiggle server --processes 4 --database-url ...   (4 processes on one port)"""


def add_parsers(sub: Any) -> None:
    """Add ``server``, ``migrate`` and ``demo`` to the ``wiggle`` parser's subparsers ``sub``."""
    from .._server.config import OLD_FLAGS, SETTINGS, ServerConfig, flag_name

    p = sub.add_parser(
        "server",
        help="run a server (in-memory unless --database-url)",
        description=SERVER_HELP,
        epilog=SERVER_EXAMPLE,
    )
    defaults = ServerConfig()
    for field, var, text in SETTINGS:
        flag = flag_name(field)
        default = getattr(defaults, field)
        if isinstance(default, bool):  # a switch: --insecure, --open-metrics
            p.add_argument(flag, dest=field, action="store_true", default=None, help=f"{text} [{var}]")
            continue
        shown = (
            f"; default {default.value if isinstance(default, enum.Enum) else default}"
            if default != ""
            else ""
        )
        # an enum setting (--execution-mode) names its values in its help; from_mapping checks them
        p.add_argument(flag, dest=field, default=None, help=f"{text} [{var}{shown}]")
    for old, field in OLD_FLAGS.items():  # older names, kept working: they warn
        new = flag_name(field)
        p.add_argument(old, dest=field, default=None, action=_deprecated(old, new), help=f"deprecated: {new}")
    p.add_argument(QUIET_FLAG, action="store_true", help=argparse.SUPPRESS)
    p.set_defaults(func=cmd_server)

    p = sub.add_parser(
        "migrate",
        help="create or migrate the PostgreSQL schema, then exit",
        description="Apply the schema migrations a server of this version needs, then exit. Servers "
        "migrate on start too; run this first in a rolling deploy, so a new server never waits for "
        "the lock. Safe to run twice, and from several hosts at once (an advisory lock).",
        epilog="examples:\n  wiggle migrate --database-url postgresql://wiggle@db:5432/wiggle\n"
        "  WIGGLE_DATABASE_URL=... wiggle migrate --database-schema wiggle_staging",
    )
    p.add_argument("--database-url", default=None, help="postgresql:// URL [WIGGLE_DATABASE_URL]")
    p.add_argument(
        "--database-schema",
        default=None,
        help="the schema to migrate [WIGGLE_DATABASE_SCHEMA; default wiggle]",
    )
    p.set_defaults(func=cmd_migrate)

    p = sub.add_parser(
        "demo",
        help="embedded server + a worker process + a sample workflow",
        description="Run an in-memory server, a worker process and a sample order workflow (a gate, "
        "a step that fails once and is retried), print what each instance did, and exit 0 when "
        "every instance completed.",
        epilog="examples:\n  wiggle demo\n  wiggle demo --mode server --instances 20\n"
        "  wiggle demo --dashboard-port 9464      (then open http://127.0.0.1:9464/; Ctrl-C stops)",
    )
    p.add_argument("--instances", type=int, default=8, help="instances to start (default 8)")
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
        help="the workflow's execution mode (any case; default LOCAL_SYNC)",
    )
    p.set_defaults(func=cmd_demo)


def _deprecated(old: str, new: str) -> type[argparse.Action]:
    """An argparse action that stores the value and notes that ``old`` is now ``new``."""

    class Deprecated(argparse.Action):
        def __call__(
            self, parser: Any, namespace: argparse.Namespace, values: Any, option: Any = None
        ) -> None:
            # said once logging is set up (cmd_server), in the log's format
            namespace.deprecated_flags = [*getattr(namespace, "deprecated_flags", []), (old, new)]
            setattr(namespace, self.dest, values)

    return Deprecated
