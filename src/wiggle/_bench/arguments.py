"""The benchmark's command line: flags, their environment-variable defaults, validation.

``wiggle bench`` hands every argument after ``bench`` to ``parse_args`` here (src/wiggle/cli.py
does not know the flags), so a new flag needs no change outside this package.
"""

from __future__ import annotations

import argparse
import os
from collections.abc import Sequence

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


def build_parser() -> argparse.ArgumentParser:
    env_mode = os.environ.get("WIGGLE_EXECUTION_MODE", "").strip()
    p = argparse.ArgumentParser(
        prog="wiggle bench",
        description="End-to-end benchmark: a linear S-step workflow, I pre-submitted instances, timed drain.",
        epilog="Environment variables give the defaults: WIGGLE_EXECUTION_MODE, WIGGLE_BENCH_STEPS, "
        "WIGGLE_BENCH_INSTANCES, WIGGLE_BENCH_WORKERS, WIGGLE_BENCH_CONCURRENCY, WIGGLE_LOCAL_BATCH_SIZE, "
        "WIGGLE_BENCH_TRANSPORT, WIGGLE_BENCH_HANDLER, WIGGLE_DATABASE_URL, WIGGLE_IMPL, WIGGLE_BENCH_TIMEOUT, "
        "WIGGLE_BENCH_SUBMIT, WIGGLE_BENCH_SUBMIT_THREADS.",
    )
    p.add_argument(
        "--modes",
        type=parse_modes,
        default=env_mode or ",".join(MODES),
        help="comma-separated execution modes, run in turn (default: $WIGGLE_EXECUTION_MODE, else all three)",
    )
    p.add_argument(
        "--steps",
        type=positive,
        default=None,
        help="steps of the linear workflow (default: $WIGGLE_BENCH_STEPS, else 20; 5 with --latency)",
    )
    p.add_argument("--instances", type=positive, default=_env_int("WIGGLE_BENCH_INSTANCES", 1000))
    p.add_argument(
        "--workers", type=positive, default=_env_int("WIGGLE_BENCH_WORKERS", 4), help="worker processes"
    )
    p.add_argument(
        "--concurrency", type=positive, default=_env_int("WIGGLE_BENCH_CONCURRENCY", 16), help="per worker"
    )
    p.add_argument(
        "--batch-size",
        type=positive,
        default=_env_int("WIGGLE_LOCAL_BATCH_SIZE", 64),
        help="LOCAL_ASYNC flush size",
    )
    p.add_argument(
        "--transport",
        choices=("stream", "unary"),
        default=os.environ.get("WIGGLE_BENCH_TRANSPORT", "stream") or "stream",
    )
    p.add_argument(
        "--handler",
        choices=("sync", "async"),
        default=os.environ.get("WIGGLE_BENCH_HANDLER", "sync") or "sync",
        help="sync: plain functions (run in the worker's thread pool); async: async def",
    )
    p.add_argument(
        "--database-url",
        default=os.environ.get("WIGGLE_DATABASE_URL", ""),
        help="PostgreSQL URL; unset: in-memory",
    )
    p.add_argument(
        "--impl",
        choices=("auto", "cython", "python"),
        default=None,
        help="WIGGLE_IMPL for server and workers",
    )
    p.add_argument(
        "--timeout",
        type=float,
        default=float(os.environ.get("WIGGLE_BENCH_TIMEOUT", "") or 600),
        help="seconds per mode",
    )
    p.add_argument(
        "--json", action="store_true", help="print a JSON document on stdout (tables go to stderr)"
    )
    p.add_argument(
        "--submit",
        type=parse_submit,
        default=env_str("WIGGLE_BENCH_SUBMIT", "before"),
        help="before: start every instance, then time the workers' drain (default); during: start them "
        "from --submit-threads client threads inside the timed window, concurrently with the workers; "
        "before,during: both, one after the other per mode",
    )
    p.add_argument(
        "--submit-threads",
        type=positive,
        default=_env_int("WIGGLE_BENCH_SUBMIT_THREADS", 8),
        help="client threads calling Client.start under --submit during (default 8)",
    )
    p.add_argument(
        "--latency",
        type=positive,
        default=None,
        metavar="N",
        help="latency mode: N instances one at a time (start -> result) per mode, on an otherwise idle "
        "system, instead of the throughput drain; reports p50/p90/p99/max and the largest gap between two "
        "steps (--instances and --submit do not apply)",
    )
    p.add_argument("--keep", action="store_true", help="keep the PostgreSQL database/schemas and the logs")
    p.add_argument("--no-progress", action="store_true", help="no progress bar on stderr")
    p.add_argument(
        "--fault", choices=("", "context", "fail"), default="", help=argparse.SUPPRESS
    )  # tests the verification
    return p


def parse_args(argv: Sequence[str] | None) -> argparse.Namespace:
    """The validated settings of ``argv``; SystemExit (a message, or argparse's code) if unusable."""
    args = build_parser().parse_args(list(argv) if argv is not None else None)
    if args.steps is None:
        args.steps = _env_int("WIGGLE_BENCH_STEPS", 5 if args.latency else 20)
    if args.latency and args.submit != ["before"]:
        raise SystemExit("e2e: --latency runs one instance at a time; --submit does not apply to it")
    if args.timeout <= 0:
        raise SystemExit("e2e: --timeout must be > 0")
    if args.database_url and not args.database_url.startswith(("postgresql://", "postgres://")):
        raise SystemExit("e2e: --database-url must be a postgresql:// URL")
    return args
