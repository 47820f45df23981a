"""The benchmark's command line: flags, their environment-variable defaults, validation.

``wiggle bench`` hands every argument after ``bench`` to ``parse_args`` here (src/wiggle/cli.py
does not know the flags), so a new flag needs no change outside this package.
"""

from __future__ import annotations

import argparse
import math
from collections.abc import Sequence

from .._cli.parser import OneLineErrors
from .._env import EnvError, env_int, env_str

__all__ = ["MODES", "SUBMITS", "build_parser", "parse_args"]

MODES = ("SERVER", "LOCAL_SYNC", "LOCAL_ASYNC")
SUBMITS = ("before", "during")


def _env_int(name: str, default: int) -> int:
    try:
        return env_int(name, default)
    except EnvError as exc:
        raise SystemExit(f"e2e: {exc}") from None


def positive(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not an integer") from None
    if value < 1:
        raise argparse.ArgumentTypeError(f"must be >= 1, got {value}")
    return value


def rate(text: str) -> float:
    """A rate a second: a finite number >= 0 (0: no pacing)."""
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a number") from None
    if not math.isfinite(value) or value < 0:
        raise argparse.ArgumentTypeError(
            f"must be a finite number >= 0 (0: as fast as the threads go), got {text!r}"
        )
    return value


def parse_modes(text: str) -> list[str]:
    modes = [m.strip().upper() for m in text.split(",") if m.strip()]
    if not modes:
        raise argparse.ArgumentTypeError("no mode given")
    for m in modes:
        if m not in MODES:
            raise argparse.ArgumentTypeError(f"mode {m!r} is not one of {', '.join(MODES)}")
    return modes


def parse_submit(text: str) -> list[str]:
    """``before``, ``during`` or both (comma-separated, run in that order per mode)."""
    wanted = {m.strip().lower() for m in text.split(",") if m.strip()}
    if not wanted:
        raise argparse.ArgumentTypeError("no submit mode given")
    for m in wanted:
        if m not in SUBMITS:
            raise argparse.ArgumentTypeError(f"submit mode {m!r} is not one of {', '.join(SUBMITS)}")
    return [m for m in SUBMITS if m in wanted]


def _float(name: str, default: float) -> float:
    raw = env_str(name)
    try:
        return float(raw) if raw else default
    except ValueError:
        raise SystemExit(f"e2e: {name} must be a number, got {raw!r}") from None


# Each flag once: its environment variable (the default's source; None: no variable) and the rest
# of add_argument's keywords. The epilog's list of variables is made from this table.
_FLAGS: tuple[tuple[str, str | None, dict[str, object]], ...] = (
    (
        "--modes",
        "WIGGLE_EXECUTION_MODE",
        dict(type=parse_modes, default=",".join(MODES), help="comma-separated execution modes, run in turn"),
    ),
    (
        "--steps",
        "WIGGLE_BENCH_STEPS",
        dict(type=positive, default=None, help="steps of the linear workflow (default 20; 5 with --latency)"),
    ),
    ("--instances", "WIGGLE_BENCH_INSTANCES", dict(type=positive, default=1000)),
    ("--workers", "WIGGLE_BENCH_WORKERS", dict(type=positive, default=4, help="worker processes")),
    (
        "--servers",
        "WIGGLE_BENCH_SERVERS",
        dict(
            type=positive,
            default=1,
            help="server processes on the one PostgreSQL schema for the drain, each on its own port; "
            "worker i connects to server i mod N, the driver and the submitting client to the first",
        ),
    ),
    (
        "--front",
        None,
        dict(
            action="store_true",
            help="with --servers N >= 2: the first server takes the driver's and the submitting "
            "client's calls only, the workers connect to the other N-1 (worker i to server 1 + i mod "
            "(N-1)): starts apart from steps (docs/deployment.md#starts-apart-from-steps)",
        ),
    ),
    ("--concurrency", "WIGGLE_BENCH_CONCURRENCY", dict(type=positive, default=16, help="per worker")),
    (
        "--batch-size",
        "WIGGLE_LOCAL_BATCH_SIZE",
        dict(type=positive, default=64, help="LOCAL_ASYNC flush size"),
    ),
    (
        "--chain-steps",
        "WIGGLE_WORKER_CHAIN_STEPS",
        dict(
            type=int,
            default=16,
            help="SERVER mode: steps a worker slot takes with its reports before it polls again "
            "(WorkerOptions.chain_steps; 0: every step is polled for)",
        ),
    ),
    ("--transport", "WIGGLE_BENCH_TRANSPORT", dict(choices=("stream", "unary"), default="stream")),
    (
        "--handler",
        "WIGGLE_BENCH_HANDLER",
        dict(
            choices=("sync", "async"),
            default="sync",
            help="sync: plain functions (run in the worker's thread pool); async: async def",
        ),
    ),
    ("--database-url", "WIGGLE_DATABASE_URL", dict(default="", help="PostgreSQL URL; unset: in-memory")),
    (
        "--impl",
        None,
        dict(choices=("auto", "cython", "python"), default=None, help="WIGGLE_IMPL for server and workers"),
    ),
    ("--timeout", "WIGGLE_BENCH_TIMEOUT", dict(type=float, default=600.0, help="seconds per mode")),
    ("--json", None, dict(action="store_true", help="print a JSON document on stdout (tables go to stderr)")),
    (
        "--submit",
        "WIGGLE_BENCH_SUBMIT",
        dict(
            type=parse_submit,
            default="before",
            help="before: start every instance, then time the workers' drain (default); during: start "
            "them from --submit-threads client threads inside the timed window, concurrently with the "
            "workers; before,during: both, one after the other per mode",
        ),
    ),
    (
        "--submit-threads",
        "WIGGLE_BENCH_SUBMIT_THREADS",
        dict(type=positive, default=8, help="client threads calling Client.start under --submit during"),
    ),
    (
        "--submit-rate",
        "WIGGLE_BENCH_SUBMIT_RATE",
        dict(
            type=rate,
            default=0.0,
            metavar="R",
            help="under --submit during: start the instances at R a second in all, instance n due at "
            "n/R seconds into the window (an open loop: a slow start does not delay the next one's "
            "due time); 0, as fast as the threads go (default)",
        ),
    ),
    (
        "--submit-to",
        "WIGGLE_BENCH_SUBMIT_TO",
        dict(
            choices=("first", "all"),
            default="first",
            help="with --servers N under --submit during: first: every start on the first server "
            "(default); all: instance n started on server n mod N, as a load balancer in front of "
            "the servers would spread them",
        ),
    ),
    (
        "--submit-client",
        "WIGGLE_BENCH_SUBMIT_CLIENT",
        dict(
            choices=("shared", "per-thread"),
            default="shared",
            help="under --submit during: shared: the threads share one Client, whose concurrent starts "
            "batch themselves (default); per-thread: each thread has its own Client",
        ),
    ),
    (
        "--latency",
        None,
        dict(
            type=positive,
            default=None,
            metavar="N",
            help="latency mode: N instances one at a time (start -> result) per mode, on an otherwise "
            "idle system, instead of the throughput drain; reports p50/p90/p99/max and the largest gap "
            "between two steps (--instances and --submit do not apply)",
        ),
    ),
    (
        "--limits",
        None,
        dict(
            action="store_true",
            help="put limits on the workflow that never bind (the limits' own cost, bench/limits.py): "
            "step s1 limited to one attempt per instance (Limit(key='n', max=1)) and a queue rate of "
            "1,000,000 claims/s",
        ),
    ),
    ("--keep", None, dict(action="store_true", help="keep the PostgreSQL database/schemas and the logs")),
    ("--no-progress", None, dict(action="store_true", help="no progress bar on stderr")),
    ("--fault", None, dict(choices=("", "context", "fail"), default="", help=argparse.SUPPRESS)),  # tests
)


def _env_default(variable: str | None, default: object) -> object:
    """The flag's default as its variable sets it (steps: resolved in parse_args, after --latency)."""
    if variable is None or default is None:
        return default
    if isinstance(default, bool):
        return default
    if isinstance(default, int):
        return _env_int(variable, default)
    if isinstance(default, float):
        return _float(variable, default)
    return env_str(variable, str(default))


def build_parser() -> argparse.ArgumentParser:
    variables = [v for _, v, _ in _FLAGS if v] + ["WIGGLE_IMPL"]
    p = OneLineErrors(  # a bad argument is one line, as for every wiggle verb
        prog="wiggle bench",
        description="End-to-end benchmark: a linear S-step workflow, I pre-submitted instances, timed drain.",
        epilog="Environment variables give the defaults: " + ", ".join(variables) + ".",
    )
    for flag, variable, options in _FLAGS:
        kwargs = dict(options)
        kwargs["default"] = _env_default(variable, kwargs.get("default"))
        if variable and kwargs.get("help") is not argparse.SUPPRESS:
            kwargs["help"] = f"{kwargs.get('help') or flag[2:]} (${variable})"
        p.add_argument(flag, **kwargs)  # type: ignore[arg-type]
    return p


def parse_args(argv: Sequence[str] | None) -> argparse.Namespace:
    """The validated settings of ``argv``; SystemExit (a message, or argparse's code) if unusable."""
    args = build_parser().parse_args(list(argv) if argv is not None else None)
    if args.steps is None:
        args.steps = _env_int("WIGGLE_BENCH_STEPS", 5 if args.latency else 20)
    if args.latency and args.submit != ["before"]:
        raise SystemExit("e2e: --latency runs one instance at a time; --submit does not apply to it")
    if not math.isfinite(args.submit_rate) or args.submit_rate < 0:  # from WIGGLE_BENCH_SUBMIT_RATE
        raise SystemExit(
            f"e2e: WIGGLE_BENCH_SUBMIT_RATE must be a finite number >= 0, got {args.submit_rate}"
        )
    if args.submit_rate and "during" not in args.submit:
        raise SystemExit("e2e: --submit-rate paces the starts of --submit during; add --submit during")
    if args.timeout <= 0:
        raise SystemExit("e2e: --timeout must be > 0")
    if args.servers > 1 and not args.database_url:
        raise SystemExit("e2e: --servers > 1 needs PostgreSQL (--database-url): servers share a database")
    if args.servers > 1 and args.latency:
        raise SystemExit("e2e: --servers applies to the drain, not to --latency")
    if args.submit_to == "all" and args.front:
        raise SystemExit("e2e: --front keeps the starts on the first server; --submit-to all spreads them")
    if args.front and args.servers < 2:
        raise SystemExit(
            "e2e: --front needs --servers 2 or more: one server for the clients, the rest for the workers"
        )
    if args.database_url and not args.database_url.startswith(("postgresql://", "postgres://")):
        raise SystemExit("e2e: --database-url must be a postgresql:// URL")
    return args
