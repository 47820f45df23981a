"""``wiggle worker MODULE:ATTR ...``: run workers for blueprints named by import path.

Every ``WorkerOptions`` field is an option (``--poll-wait-seconds``) and a variable
(``WIGGLE_WORKER_POLL_WAIT_SECONDS``); the option wins, then the variable, then the default.
The blueprints and import folders may come from ``WIGGLE_WORKER_BLUEPRINTS`` and
``WIGGLE_WORKER_PATH`` instead (a container image or a service unit configured by variables).
SIGTERM or SIGINT drains: polling stops, running steps finish (up to 30 s, ``Worker.close``) and
local runs flush, then the process exits 0. ``--processes N`` runs N worker processes under one parent, which passes
SIGTERM/SIGINT on to each and waits for all of them; process i gets the worker id ``X-i`` when
one (``X``) is given (``--worker-id``, ``WIGGLE_WORKER_WORKER_ID``), and the metrics port + i.
What each option does: ``WorkerOptions`` (docs/configuration.md#worker-options, "Worker options").
"""

from __future__ import annotations

import argparse
import importlib
import logging
import os
import signal
import subprocess
import sys
import time
from collections.abc import Callable, Mapping
from typing import Any

import msgspec

from .._env import EnvError, child_environment, environment, setting, warn_unknown_variables
from .._logging import configure_logging
from .._spelling import with_closest
from ..errors import InvalidArgument
from .common import QUIET_FLAG, checked_target, credentials_from_args
from .parent import exit_status, follow_parent, killed_by, parent_marker

log = logging.getLogger("wiggle.worker")

__all__ = ["add_parsers", "cmd_worker", "blueprints_at", "options_from", "COMMAND_VARIABLES", "ENV_PREFIX"]

EXAMPLE = """examples:
  wiggle worker myapp.flows:orders myapp.flows:payments --concurrency 32
  wiggle worker myapp.flows:ALL --queues payments,mail --processes 4
  wiggle worker myapp.flows            (every blueprint the module defines)
  WIGGLE_WORKER_BLUEPRINTS=myapp.flows:ALL WIGGLE_WORKER_CONCURRENCY=32 wiggle worker"""

#: The env variable of a WorkerOptions field (WIGGLE_WORKER_CONCURRENCY, ...).
ENV_PREFIX = "WIGGLE_WORKER_"

#: The variables of the command itself (not WorkerOptions fields): how many processes, which
#: blueprints (when no MODULE:ATTR is given) and the folders to import them from (declared, with
#: their defaults, in wiggle/_env.py ``VARIABLES``).
COMMAND_VARIABLES = (ENV_PREFIX + "PROCESSES", ENV_PREFIX + "BLUEPRINTS", ENV_PREFIX + "PATH")

#: Fields with a closed set of values: argparse choices.
_CHOICES = {
    "transport": ("stream", "unary"),
    "balance": ("round_robin", "pick_first"),
    "sync_handlers": ("auto", "thread", "inline"),
}


def _fields() -> list[msgspec.structs.FieldInfo]:
    from .._worker.options import WorkerOptions

    return list(msgspec.structs.fields(WorkerOptions))


def _kind(field: msgspec.structs.FieldInfo) -> type:
    """int, float, bool, str, or list for ``queues``."""
    name = field.name
    if name == "queues":
        return list
    kind: type = field.type
    if kind in (bool, int, float, str):
        return kind
    raise AssertionError(f"WorkerOptions.{name} has a type the command line does not know: {field.type}")


def _queues(text: str) -> list[str]:
    return [q.strip() for q in text.split(",") if q.strip()]


def _parse(kind: type, text: str, where: str) -> Any:
    if kind is list:
        return _queues(text)
    if kind is bool:
        lowered = text.strip().lower()
        if lowered in ("1", "true", "yes", "on"):
            return True
        if lowered in ("0", "false", "no", "off"):
            return False
        raise InvalidArgument(f"{where} must be true or false, got {text!r}")
    try:
        return kind(text)
    except ValueError:
        raise InvalidArgument(
            f"{where} must be {'an integer' if kind is int else 'a number'}, got {text!r}"
        ) from None


def add_parsers(sub: Any) -> None:
    """Add ``worker`` to the ``wiggle`` parser's subparsers ``sub``."""
    p = sub.add_parser(
        "worker",
        help="run workers for blueprints given by import path (module:attribute)",
        description=__doc__,
        epilog=EXAMPLE,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    p.add_argument(
        "blueprints",
        nargs="*",
        metavar="MODULE[:ATTR]",
        help="a Blueprint, or a list of them, at module:attribute; a module alone: every Blueprint in it "
        f"[{ENV_PREFIX}BLUEPRINTS: separated by spaces or commas, when none is given here]",
    )
    p.add_argument(
        "--processes",
        type=int,
        default=None,
        help=f"worker processes to run (default 1) [{ENV_PREFIX}PROCESSES]",
    )
    p.add_argument(
        "--path",
        action="append",
        default=[],
        help=f"a folder to import from, before the current one (repeatable) [{ENV_PREFIX}PATH: "
        f"folders separated by {os.pathsep!r}, after the ones given here]",
    )
    for field in _fields():
        kind = _kind(field)
        flag = "--" + field.name.replace("_", "-")
        var = ENV_PREFIX + field.name.upper()
        if kind is bool:
            p.add_argument(
                flag, dest=field.name, action=argparse.BooleanOptionalAction, default=None, help=f"[{var}]"
            )
        elif kind is list:
            p.add_argument(flag, dest=field.name, type=_queues, default=None, help=f"comma-separated [{var}]")
        else:
            p.add_argument(
                flag,
                dest=field.name,
                type=kind,
                choices=_CHOICES.get(field.name),
                default=None,
                help=f"[{var}]",
            )
    p.add_argument(QUIET_FLAG, action="store_true", help=argparse.SUPPRESS)  # --processes' children
    p.set_defaults(func=cmd_worker)


def options_from(args: argparse.Namespace, env: Mapping[str, str] | None = None) -> Any:
    """The WorkerOptions of ``args``: an option given, else its WIGGLE_WORKER_* variable, else the default."""
    from .._worker.options import WorkerOptions

    env = environment() if env is None else env
    values: dict[str, Any] = {}
    for field in _fields():
        given = getattr(args, field.name)
        if given is not None:
            values[field.name] = given
            continue
        var = ENV_PREFIX + field.name.upper()
        if env.get(var, "").strip():
            values[field.name] = _parse(_kind(field), env[var], var)
    try:
        from .._worker.options import check_options

        options = WorkerOptions(**values)
        check_options(options)
    except ValueError as exc:
        raise InvalidArgument(_named(str(exc))) from None
    return options


def _named(message: str) -> str:
    """check_options' message (``poll_wait_seconds must be ...``, a field's name first) with the
    option and the variable that set it in front, as ``wiggle server`` names its settings."""
    field = message.split(" ", 1)[0]
    if field not in {f.name for f in _fields()}:
        return message
    return f"--{field.replace('_', '-')} ({ENV_PREFIX}{field.upper()}): {message}"


def blueprints_at(path: str) -> list[Any]:
    """The blueprints at ``module:attr`` (a Blueprint or an iterable of them), or every Blueprint
    a module defines at its top level; InvalidArgument naming what is wrong."""
    from ..workflow import Blueprint

    module_name, _, attr = path.partition(":")
    if not module_name:
        raise InvalidArgument(f"{path!r} names no module; write module:attribute, e.g. myapp.flows:orders")
    try:
        module = importlib.import_module(module_name)
    except ImportError as exc:
        raise InvalidArgument(
            f"cannot import {module_name!r} (from {path!r}): {exc}{_path_hint(path, exc)}"
        ) from None
    if not attr:
        found = [v for v in vars(module).values() if isinstance(v, Blueprint)]
        if not found:
            # a list of blueprints at the top level is not scanned: name it
            lists = [
                name
                for name, v in vars(module).items()
                if isinstance(v, (list, tuple, set, frozenset))
                and v
                and all(isinstance(b, Blueprint) for b in v)
            ]
            hint = (
                f"; it has a list of them: {', '.join(f'{module_name}:{n}' for n in sorted(lists))}"
                if lists
                else ""
            )
            raise InvalidArgument(f"module {module_name!r} defines no Blueprint at its top level{hint}")
        return found
    value: Any = module
    for part in attr.split("."):
        try:
            value = getattr(value, part)
        except AttributeError:
            names = [n for n in dir(value) if not n.startswith("_")]
            shown = with_closest([part], names) if part == attr else f"{attr!r} ({part!r} is missing)"
            raise InvalidArgument(f"{module_name!r} has no attribute {shown}") from None
    if isinstance(value, Blueprint):
        return [value]
    if (
        isinstance(value, (list, tuple, set, frozenset))
        and value
        and all(isinstance(v, Blueprint) for v in value)
    ):
        return list(value)
    raise InvalidArgument(
        f"{path} is a {type(value).__name__}, not a Blueprint or a list of Blueprints (call .build() on a Workflow)"
    )


def _path_hint(path: str, exc: ImportError) -> str:
    """What to write instead, when ``path`` (no ':') names no module to be found: a dotted path
    (``orders.orders``) or a file (``orders.py``) where ``module:attribute`` was meant. "" when
    the module was found and failed on an import of its own."""
    missing = exc.name if isinstance(exc, ModuleNotFoundError) else None
    if ":" in path or not missing or not (path == missing or path.startswith(missing + ".")):
        return ""
    if path.endswith(".py"):  # a file: its module, imported from its folder
        folder, file = os.path.split(path)
        stem = file.removesuffix(".py")
        example = f"{stem}:NAME, or {stem} alone for every Blueprint in it" + (
            f", with --path {folder}" if folder else ""
        )
    elif "." in path:
        head, _, tail = path.rpartition(".")
        example = f"{head}:{tail}"
    else:
        example = f"{path}:NAME"
    return (
        f"; blueprints are given as module:attribute (e.g. {example}), the module imported from the "
        f"current folder or one given with --path ({ENV_PREFIX}PATH)"
    )


def cmd_worker(args: argparse.Namespace) -> int:
    processes = args.processes
    if processes is None:
        processes = _parse(int, setting(ENV_PREFIX + "PROCESSES"), ENV_PREFIX + "PROCESSES")
    if processes < 1:
        raise InvalidArgument(f"--processes must be 1 or more, got {processes}")
    folders = [*args.path, *filter(None, setting(ENV_PREFIX + "PATH").split(os.pathsep))]
    for folder in reversed([os.getcwd(), *folders]):
        if folder not in sys.path:
            sys.path.insert(0, folder)
    paths = args.blueprints or setting(ENV_PREFIX + "BLUEPRINTS").replace(",", " ").split()
    if not paths:
        raise InvalidArgument(
            f"name the blueprints to serve: wiggle worker MODULE:ATTR ... (or {ENV_PREFIX}BLUEPRINTS)"
        )
    blueprints = [bp for path in paths for bp in blueprints_at(path)]
    options = options_from(args)  # checked here, before any process starts
    checked_target(args)
    # as Worker.run() would (after the blueprints' imports: a program's own setup wins), so the
    # warnings below are formatted as the worker's other lines
    configure_logging(only_if_unconfigured=True)
    if not getattr(args, "no_variable_warnings", False):  # not a child of --processes N: its parent warned
        warn_unknown_variables(log)
    if options.metrics_port and options.metrics_port + processes - 1 > 65535:
        raise InvalidArgument(
            f"--metrics-port {options.metrics_port} with --processes {processes}: process i serves on "
            f"the port + i, past 65535"
        )
    if processes > 1:
        return _supervise(args.argv, processes, options.metrics_port, options.worker_id)
    if getattr(args, "no_variable_warnings", False):
        follow_parent()  # a parent killed outright takes this process with it (wiggle/_cli/parent.py)
    return _run_one(args, blueprints, options)


def _run_one(args: argparse.Namespace, blueprints: list[Any], options: Any) -> int:
    from ..worker import Worker

    try:
        credentials = credentials_from_args(args)
    except (ValueError, EnvError) as exc:
        raise InvalidArgument(str(exc)) from None
    worker = Worker(args.target, blueprints, options, credentials=credentials)
    worker.run()  # returns once drained
    left = worker.handler_threads_left()
    if left:
        # steps cut at the drain's end, or sync steps abandoned at their time limit, still run in
        # handler threads, which Python would wait for before it exits: the drain is over (the
        # server has those steps back, or will at their lease), so the process ends now
        if not worker.cut_steps:
            log.warning(
                "%d handler thread(s) abandoned at a time limit still run: exiting without them", left
            )
        logging.shutdown()
        sys.stdout.flush()
        sys.stderr.flush()
        os._exit(0)
    return 0


def _supervise(given: list[str], processes: int, http_port: int, worker_id: str = "") -> int:
    """Run ``processes`` copies of this command (each one worker); SIGTERM/SIGINT go to each.
    With an HTTP port P (``--metrics-port``, WIGGLE_WORKER_METRICS_PORT), process i serves on
    P + i: one port cannot be bound twice. With a worker id X (``--worker-id``,
    WIGGLE_WORKER_WORKER_ID), process i is ``X-i``: leases, histories and ``wiggle queues`` tell
    the processes apart (without one, each makes its own: host, process id, a random suffix)."""
    argv = _without(_without(_without(given, "--processes"), "--metrics-port"), "--worker-id")
    env = child_environment(
        drop=[ENV_PREFIX + "PROCESSES", ENV_PREFIX + "METRICS_PORT", ENV_PREFIX + "WORKER_ID"],
        **parent_marker(),
    )
    children: list[subprocess.Popen[bytes]] = []
    forwarded: set[int] = set()

    def forward(signum: int, _frame: object) -> None:
        forwarded.add(signum)
        for child in children:
            if child.poll() is None:
                child.send_signal(signum)

    # the handlers first: a signal that comes while the children start is passed on (or stops
    # the starting) instead of killing this process and leaving them behind
    previous: dict[signal.Signals, Callable[..., Any] | int | None] = {}
    for sig in (signal.SIGTERM, signal.SIGINT):
        previous[sig] = signal.signal(sig, forward)

    def start(i: int) -> subprocess.Popen[bytes]:
        own = {ENV_PREFIX + "METRICS_PORT": str(http_port + i)} if http_port else {}
        # the option last: it wins over any spelling of it left in argv (an abbreviation)
        named = [f"--worker-id={worker_id}-{i}"] if worker_id else []
        return subprocess.Popen(
            [sys.executable, "-m", "wiggle.cli", *argv, *named, QUIET_FLAG], env={**env, **own}
        )

    try:
        for i in range(processes):
            if forwarded:
                break
            child = start(i)
            children.append(child)
            for signum in list(forwarded):  # it came while this child was being made: pass it on
                child.send_signal(signum)
        codes = _watch(children, start, forwarded)
    finally:
        for sig, handler in previous.items():
            signal.signal(sig, handler)
    # a child stopped by the signal passed on before it had set up its own handling (still starting:
    # nothing of its ran) stopped as asked
    return group_status(codes, forwarded)


def group_status(codes: list[int], forwarded: set[int]) -> int:
    """The group parent's exit status from its processes' ``codes``: the largest, a process killed
    by signal N counting as 128 + N (the shell's way; a negative code made ``sys.exit`` give 247
    for SIGKILL). One stopped by a signal passed on before it had set up its own handling (still
    starting: nothing of its ran) stopped as asked: 0."""
    return max((0 if -code in forwarded else exit_status(code) for code in codes), default=0)


#: A worker process that dies this soon after its start, this many times in a row, is not started
#: again: the group stops (its code says why) rather than restart a process that cannot run.
QUICK_DEATH_SECONDS = 10.0
QUICK_DEATHS = 5


def _watch(
    children: list[subprocess.Popen[bytes]],
    start: Callable[[int], subprocess.Popen[bytes]],
    forwarded: set[int],
) -> list[int]:
    """Wait for the group; a worker process that ends before a stop signal came (killed, out of
    memory, crashed) is logged and started again in its place, so the group keeps its size. Before,
    it was neither (an outside trial: a group ran on at half its capacity, the parent healthy to
    its supervisor, the log silent). One that keeps dying within QUICK_DEATH_SECONDS of its start
    stops the group after QUICK_DEATHS in a row, and one that exits 2 (bad input) at once, with
    that process's exit code. The codes, once every process has ended."""
    began = {i: time.monotonic() for i in range(len(children))}
    quick = {i: 0 for i in range(len(children))}
    while True:
        if all(child.poll() is not None for child in children):
            return [child.returncode for child in children]
        for i, child in enumerate(children):
            code = child.poll()
            if code is None or forwarded:
                continue
            how = killed_by(code)
            lived = time.monotonic() - began[i]
            quick[i] = quick[i] + 1 if lived < QUICK_DEATH_SECONDS else 0
            if code == 2 or quick[i] >= QUICK_DEATHS:  # 2: bad input (the CLI's), the same each time
                log.error(
                    "worker process %d (pid %d) %s (%d time(s) within %g s of its start): stopping the group",
                    i,
                    child.pid,
                    how,
                    quick[i],
                    QUICK_DEATH_SECONDS,
                )
                forwarded.add(signal.SIGTERM)
                for other in children:
                    if other.poll() is None:
                        other.send_signal(signal.SIGTERM)
                break
            log.warning(
                "worker process %d (pid %d) %s after %.0f s; starting another in its place",
                i,
                child.pid,
                how,
                lived,
            )
            children[i] = start(i)
            began[i] = time.monotonic()
        time.sleep(0.2)


def _without(argv: list[str], flag: str) -> list[str]:
    """``argv`` without ``flag`` and its value (``--flag V`` or ``--flag=V``)."""
    out: list[str] = []
    skip = False
    for arg in argv:
        if skip:
            skip = False
            continue
        if arg == flag:
            skip = True
            continue
        if arg.startswith(flag + "="):
            continue
        out.append(arg)
    return out
