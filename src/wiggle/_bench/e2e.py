"""The end-to-end benchmark (bench/README.md): a linear S-step pipeline, I instances, per mode.

For each execution mode it starts a fresh server process (in-memory, or PostgreSQL on a fresh
schema), registers a linear workflow of ``--steps`` trivial steps, pre-submits ``--instances``
instances, starts ``--workers`` worker processes of ``--concurrency`` each, and times the drain
from the moment the workers may start pulling until the last instance finished. Then it fetches
every instance and checks it COMPLETED with exactly the expected context; a wrong result is
reported (what was wrong, never a figure) and the exit code is 1.

Reported per mode: instances/s and steps/s over the drain; p50/p99 instance latency
(created_at -> finished_at; the instances are all submitted before the drain, so this includes
their wait in the queue); RPCs served per instance by method (the server's own counters, deltas
around the drain); the store's committed transactions per instance, and on PostgreSQL the
database's xact_commit per instance (pg_stat_database); CPU seconds by role (server, workers,
PostgreSQL backends of the benchmark database and PostgreSQL background processes, this driver);
the starts: starts/s and the latency percentiles of each ``StartInstance`` call.

``--submit during`` is the user's view of throughput (issue #16): no instance exists when the
window opens; ``--submit-threads`` threads sharing one blocking ``Client`` (``--submit-client
per-thread``: each with its own) start them while the workers run, and the window closes at the
last ``finished_at``. Its runs are labelled ``<MODE> during`` beside ``<MODE> before`` and use a
schema of their own (``..._<mode>_during``).

``--latency N`` replaces the drain by the idle-latency measurement of latency.py: per mode, N
instances of a 5-step workflow (``--steps`` changes it) run strictly one after another, each timed
from ``Client.start`` to the result; reported are p50/p90/p99/max and the gaps between consecutive
steps from the instances' histories.

    python bench/e2e.py --modes SERVER,LOCAL_SYNC,LOCAL_ASYNC
    python bench/e2e.py --database-url postgresql://postgres@127.0.0.1:5432/test --json
    wiggle bench --steps 5 --instances 100
    wiggle bench --submit before,during
    wiggle bench --latency 1000 --database-url postgresql://postgres@127.0.0.1:5432/test

Settings (flag, environment variable, default):

    --modes        WIGGLE_EXECUTION_MODE      SERVER,LOCAL_SYNC,LOCAL_ASYNC (the env var names one mode)
    --steps        WIGGLE_BENCH_STEPS         20
    --instances    WIGGLE_BENCH_INSTANCES     1000
    --workers      WIGGLE_BENCH_WORKERS       4
    --servers      WIGGLE_BENCH_SERVERS       1    (server processes on one PostgreSQL schema for the drain)
    --front        -                          with --servers N >= 2: clients on the first server, workers on the rest
    --concurrency  WIGGLE_BENCH_CONCURRENCY   16
    --batch-size   WIGGLE_LOCAL_BATCH_SIZE    64   (LOCAL_ASYNC flush size)
    --chain-steps  WIGGLE_WORKER_CHAIN_STEPS  16   (SERVER mode: steps a slot takes with its reports before polling)
    --transport    WIGGLE_BENCH_TRANSPORT     stream (or unary)
    --handler      WIGGLE_BENCH_HANDLER       sync (plain functions, run in the worker's thread pool) or async
    --database-url WIGGLE_DATABASE_URL        unset: the in-memory store
    --impl         WIGGLE_IMPL                hot paths of server and workers: auto, cython, python
    --timeout      WIGGLE_BENCH_TIMEOUT       600 seconds per mode
    --submit       WIGGLE_BENCH_SUBMIT        before (pre-submitted drain), during, or before,during
    --submit-threads WIGGLE_BENCH_SUBMIT_THREADS 8 client threads calling Client.start under --submit during
    --submit-client WIGGLE_BENCH_SUBMIT_CLIENT shared (one Client for the threads) or per-thread
    --latency N    -                          latency mode: N instances one at a time per mode (5 steps)
    --json         print one JSON document on stdout (the tables go to stderr)
    --keep         keep the PostgreSQL database/schemas and the process logs

On PostgreSQL the benchmark creates its own database ``wiggle_bench_<pid>`` next to the one in the
URL (so pg_stat_database counts only the benchmark's transactions; when it may not create
databases it falls back to the URL's database and says the counts may include other sessions),
and one schema ``wiggle_bench_<pid>_<mode>`` per mode. Both are dropped at the end unless --keep.
Registration and submission run on one server process; the drain runs on a second one started on
the same schema after the first has exited, so the database's transaction counters (flushed when a
backend exits) are exact around the drain.

Exit codes: 0 every mode verified; 1 a mode produced a wrong result, failed or timed out; 2 bad
arguments; 130 interrupted. Every subprocess is stopped on the way out, whatever happens.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import os
import platform
import shutil
import signal
import sys
import tempfile
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any

from .._env import child_environment, setting
from .arguments import parse_args
from .drain import DrainRun
from .errors import BenchError
from .latency import LatencyRun
from .pgstats import Postgres
from .probe import probe_ms
from .processes import READY_TIMEOUT, Children
from .progress import Progress
from .report import emit

__all__ = ["main", "parse_args"]


# Passed to each child explicitly by the benchmark, never inherited from the caller's shell.
_NOT_INHERITED = (
    "WIGGLE_DATABASE_URL",
    "WIGGLE_DATABASE_SCHEMA",
    "WIGGLE_HTTP_PORT",
    "WIGGLE_METRICS_PORT",  # its older name (wiggle/_server/config.py)
    "WIGGLE_PORT",
    "WIGGLE_PROCESSES",
)


def _child_env(args: argparse.Namespace) -> dict[str, str]:
    env = child_environment(_NOT_INHERITED, WIGGLE_BENCH_PARENT=str(os.getpid()), PYTHONUNBUFFERED="1")
    if args.impl:
        env["WIGGLE_IMPL"] = args.impl
    return env


def _document(args: argparse.Namespace) -> dict[str, Any]:
    """The report's skeleton: the settings and the machine; each mode's result is appended."""
    settings = (
        "modes steps instances servers front workers concurrency batch_size chain_steps transport handler submit"
        " submit_threads submit_client submit_rate submit_to latency limits"
    )
    return {
        "settings": {
            **{name: getattr(args, name) for name in settings.split()},
            "timeout_s": args.timeout,
            "impl": args.impl or setting("WIGGLE_IMPL"),
        },
        "environment": {
            "python": platform.python_version(),
            "platform": platform.platform(),
            "cpus": os.cpu_count(),
            "store": "memory",
            "probe_ms_before": probe_ms(),
        },
        "modes": [],
    }


async def _open_postgres(args: argparse.Namespace, environment: dict[str, Any]) -> Postgres:
    """The benchmark's database (BenchError if it cannot be used), noted in ``environment``."""
    try:
        pg = await asyncio.to_thread(Postgres, args.database_url, args.keep)
    except ImportError:
        raise SystemExit(
            "e2e: --database-url needs psycopg (pip install 'wiggle-workflows[postgres]')"
        ) from None
    except Exception as exc:
        raise BenchError(f"cannot use PostgreSQL at {args.database_url}: {exc}") from None
    environment["store"] = f"postgresql {pg.version} (database {pg.dbname})"
    environment["database"] = pg.dbname
    environment["own_database"] = pg.created_db
    if pg.note:
        environment["postgres_note"] = pg.note
    if pg.stale:
        print(
            f"e2e: note: database(s) left by an earlier, killed benchmark run: {', '.join(pg.stale)} "
            f"(drop with: DROP DATABASE <name>)",
            file=sys.stderr,
        )
    return pg


async def _run_one(
    run: DrainRun | LatencyRun,
    args: argparse.Namespace,
    children: Children,
    pg: Postgres | None,
    progress: Progress,
) -> dict[str, Any]:
    """One mode's result; whatever happens, its processes and schema are gone afterwards."""
    limit = args.timeout + 3 * READY_TIMEOUT
    try:
        return dict(await asyncio.wait_for(run.run(), limit))
    except asyncio.TimeoutError:
        return dict(run.result, ok=False, problems=[f"did not finish within {limit:.0f} s"])
    except BenchError as exc:
        return dict(run.result, ok=False, problems=[str(exc)])
    finally:
        progress.end()
        children.kill_all()  # whatever is left of this mode
        await children.shutdown(grace=1.0)
        if pg is not None:
            with contextlib.suppress(Exception):
                await asyncio.to_thread(pg.wait_no_backends)
                await asyncio.to_thread(pg.drop_schema, run.schema)


async def amain(args: argparse.Namespace) -> int:
    """Run every mode of ``args`` in turn, print the report; returns the exit code."""
    log_dir = Path(tempfile.mkdtemp(prefix="wiggle-bench-"))
    children = Children(log_dir, _child_env(args))
    progress = Progress(not args.no_progress)
    me = asyncio.current_task()
    with contextlib.suppress(NotImplementedError, RuntimeError):
        asyncio.get_running_loop().add_signal_handler(signal.SIGTERM, lambda: me.cancel() if me else None)
    pg: Postgres | None = None
    doc = _document(args)
    failed_logs = False
    try:
        if args.database_url:
            try:
                pg = await _open_postgres(args, doc["environment"])
            except BenchError as exc:
                print(f"e2e: {exc}", file=sys.stderr)
                return 1
        # Generators: each run is built when its turn comes, so its --timeout deadline starts then.
        runs: Iterator[DrainRun | LatencyRun]
        if args.latency:
            runs = (LatencyRun(args, mode, children, pg, progress) for mode in args.modes)
        else:
            runs = (DrainRun(args, m, how, children, pg, progress) for m in args.modes for how in args.submit)
        for run in runs:
            if pg is not None:
                doc["environment"].setdefault("schemas", []).append(run.schema)
            result = await _run_one(run, args, children, pg, progress)
            failed_logs = failed_logs or not result.get("ok")
            doc["modes"].append(result)
            for key in ("server_impl", "worker_impl"):
                if result.get(key):
                    doc["environment"][key] = result[key]
    except asyncio.CancelledError:
        print("\ne2e: interrupted; stopping every subprocess", file=sys.stderr)
        return 130
    finally:
        children.kill_all()
        with contextlib.suppress(BaseException):
            await asyncio.wait_for(children.shutdown(grace=1.0), 15)
        if pg is not None:
            with contextlib.suppress(Exception):
                await asyncio.to_thread(pg.close)
        if args.keep or failed_logs:
            print(f"e2e: process logs kept in {log_dir}", file=sys.stderr)
        else:
            shutil.rmtree(log_dir, ignore_errors=True)
    doc["ok"] = all(m.get("ok") for m in doc["modes"])
    doc["environment"]["probe_ms_after"] = probe_ms()
    emit(doc, args.json)
    return 0 if doc["ok"] else 1


def main(argv: Sequence[str] | None = None) -> int:
    """Run the benchmark with ``argv`` (default sys.argv[1:]); returns the exit code."""
    argv = list(sys.argv[1:] if argv is None else argv)
    if argv[:1] == ["--"]:  # `wiggle bench -- --steps 5 ...` passes the separator through
        argv = argv[1:]
    try:
        args = parse_args(argv)
    except SystemExit as exc:  # argparse: --help (0) or a bad argument (2)
        code = exc.code
        if isinstance(code, str):
            print(code, file=sys.stderr)
            return 2
        return int(code or 0)
    try:
        return asyncio.run(amain(args))
    except KeyboardInterrupt:
        print("\ne2e: interrupted", file=sys.stderr)
        return 130


if __name__ == "__main__":
    sys.exit(main())
