"""Subprocess entry points of the end-to-end benchmark (bench/e2e.py starts them; not for people).

Two roles, both driven over stdin/stdout with one JSON object per line:

``server``  runs a WiggleServer on a free port (in-memory, or PostgreSQL with --database-url).
            Prints ``{"event": "ready", "port": ...}``; answers ``stats`` with the server's RPC
            counters, the store's committed transactions and the ``StoreProbe``'s counts
            (claims, empty claims, NOTIFYs sent and heard); ``stop`` (or EOF on stdin, or
            SIGTERM) stops it gracefully and prints ``{"event": "stopped"}``.

``worker``  connects and registers the benchmark workflow, prints ``{"event": "ready"}``, waits
            for ``go`` before it starts pulling (so the driver times only the drain), prints
            ``{"event": "progress", "steps": N}`` a few times a second, and on ``stop`` (or EOF)
            closes gracefully and prints ``{"event": "stats", ...}``.

Both die with the driver: PR_SET_PDEATHSIG (Linux) kills them if the driver goes away, and EOF
on stdin makes them stop. Logs go to stderr (the driver keeps them in a file).

The benchmark workflow is ``blueprint(mode, steps)``: a linear pipeline of ``steps`` trivial
TASK steps; step ``s<i>`` sets ``ctx["s<i>"] = i`` and increments ``ctx["count"]``. An instance
started with ``{"n": k, "count": 0}`` must finish with exactly
``{"n": k, "count": steps, "s1": 1, ..., "s<steps>": steps}`` (``expected_context``).
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import ctypes
import json
import logging
import os
import signal
import sys
import threading
import time
from typing import Any

from wiggle import ExecutionMode, Limit, PermanentError, Workflow, _loop
from wiggle._env import env_str
from wiggle._server import process
from wiggle._server.config import ServerConfig, from_mapping
from wiggle.workflow import Blueprint

__all__ = ["blueprint", "expected_context", "initial_context", "workflow_name", "main"]

FAULTS = ("", "context", "fail")
#: ``--limits``: the queue's rate (claims per second), far above any drain's
LIMITS_RATE = 1_000_000


# ---------------------------------------------------------------------- the workflow


def workflow_name(mode: str, steps: int) -> str:
    """The benchmark workflow's name for ``mode`` (SERVER, LOCAL_SYNC, LOCAL_ASYNC)."""
    return f"bench-{mode.lower().replace('_', '-')}-{steps}"


def _make_step(i: int, handler: str, fault: str) -> Any:
    key = f"s{i}"

    def apply(ctx: dict[str, Any]) -> dict[str, Any]:
        if fault and i == 1 and ctx.get("n") == 0:  # --fault: break instance 0 on purpose
            if fault == "fail":
                raise PermanentError("injected fault (--fault fail)")
            ctx[key] = -1
            ctx["count"] = ctx.get("count", 0) + 1
            return ctx
        ctx[key] = i
        ctx["count"] = ctx.get("count", 0) + 1
        return ctx

    if handler == "async":

        async def astep(ctx: dict[str, Any]) -> dict[str, Any]:
            return apply(ctx)

        return astep
    return apply


def blueprint(
    mode: str, steps: int, handler: str = "sync", fault: str = "", limits: bool = False
) -> Blueprint[dict[str, Any]]:
    """The linear ``steps``-step benchmark workflow in execution mode ``mode``.

    ``handler`` ("sync" or "async") and ``fault`` change only the handlers, never the definition,
    so every variant has the same version. ``limits`` (``--limits``) gives step s1 a concurrency
    limit of one attempt per instance (key "n": it never binds) and changes the version.
    """
    if steps < 1:
        raise ValueError("steps must be >= 1")
    wf = Workflow.define(workflow_name(mode, steps), dict).execution(ExecutionMode(mode))
    for i in range(1, steps + 1):
        limit = Limit(key="n", max=1) if limits and i == 1 else None
        wf.step(_make_step(i, handler, fault), name=f"s{i}", concurrency=limit)
    return wf.build()


def initial_context(n: int) -> dict[str, Any]:
    """The context instance ``n`` is started with."""
    return {"n": n, "count": 0}


def expected_context(n: int, steps: int) -> dict[str, Any]:
    """The final context of the instance started with ``{"n": n, "count": 0}``."""
    ctx: dict[str, Any] = {"n": n, "count": steps}
    for i in range(1, steps + 1):
        ctx[f"s{i}"] = i
    return ctx


# ---------------------------------------------------------------------- plumbing


def _die_with_parent() -> None:
    """Get SIGKILL when the driver dies (Linux); exit now if it is already gone."""
    parent = env_str("WIGGLE_BENCH_PARENT")
    with contextlib.suppress(Exception):
        libc = ctypes.CDLL(None, use_errno=True)
        libc.prctl(1, signal.SIGKILL)  # PR_SET_PDEATHSIG
    if parent and os.getppid() != int(parent):
        os._exit(3)


def _emit(event: str, **fields: Any) -> None:
    sys.stdout.write(json.dumps({"event": event, **fields}) + "\n")
    sys.stdout.flush()


def _commands(loop: asyncio.AbstractEventLoop) -> asyncio.Queue[str | None]:
    """Lines from stdin (stripped); None at EOF."""
    queue: asyncio.Queue[str | None] = asyncio.Queue()

    def read() -> None:
        for line in sys.stdin:
            loop.call_soon_threadsafe(queue.put_nowait, line.strip())
        loop.call_soon_threadsafe(queue.put_nowait, None)

    threading.Thread(target=read, name="bench-stdin", daemon=True).start()
    for sig in (signal.SIGTERM, signal.SIGINT):
        with contextlib.suppress(NotImplementedError, RuntimeError, ValueError):
            loop.add_signal_handler(sig, queue.put_nowait, None)
    return queue


# ---------------------------------------------------------------------- roles


class StoreProbe:
    """Counts, in a benchmark server, what its store does that can be wasted work between servers.

    It wraps three methods of the one store instance (no code outside the benchmark changes):
    ``claim`` (calls, calls that found nothing, steps claimed), ``next_ready_at`` (the poller's
    "is there anything due?" read after an empty claim), and on PostgreSQL the cluster's
    ``dispatch`` (NOTIFYs heard from other servers on the work channel); ``notifies`` is the
    cluster's own count of NOTIFY statements sent (wiggle/_storage/postgres/cluster.py).
    """

    def __init__(self, store: Any) -> None:
        self.counts = {"claims": 0, "empty_claims": 0, "claimed": 0, "next_ready_reads": 0, "work_heard": 0}
        self.cluster = getattr(store, "cluster", None)
        # on PostgreSQL, the group commit's copies of what the server last wrote (state_cache.py)
        self.cache = getattr(getattr(store, "group", None), "cache", None)
        claim, next_ready_at = store.claim, store.next_ready_at
        counts = self.counts

        async def counted_claim(*args: Any, **kwargs: Any) -> Any:
            claimed = await claim(*args, **kwargs)
            counts["claims"] += 1
            counts["claimed"] += len(claimed)
            if not claimed:
                counts["empty_claims"] += 1
            return claimed

        async def counted_next_ready_at(*args: Any, **kwargs: Any) -> Any:
            counts["next_ready_reads"] += 1
            return await next_ready_at(*args, **kwargs)

        store.claim = counted_claim
        store.next_ready_at = counted_next_ready_at
        if self.cluster is not None:
            dispatch, work = self.cluster.dispatch, self.cluster.channel_work

            def counted_dispatch(channel: str, payload: str) -> None:
                if channel == work:
                    counts["work_heard"] += 1
                dispatch(channel, payload)

            self.cluster.dispatch = counted_dispatch

    def snapshot(self) -> dict[str, int]:
        """The counts so far, with ``notifies`` (NOTIFY statements this server sent) and, on
        PostgreSQL, the group commits run on kept copies and the kept copies' checks that failed
        (wiggle/_storage/postgres/state_cache.py)."""
        notifies = getattr(self.cluster, "notifies_sent", 0) if self.cluster is not None else 0
        out = {**self.counts, "notifies": int(notifies)}
        if self.cache is not None:
            out["kept_groups"], out["kept_stale"] = int(self.cache.hits), int(self.cache.stale)
        return out


def server_config(args: argparse.Namespace) -> ServerConfig:
    """The benchmark server's settings: a free loopback port, the run's database and schema, and
    the rest from WIGGLE_* variables as ``wiggle server`` takes them."""
    values: dict[str, Any] = {"host": "127.0.0.1", "port": 0, "http_port": 0, "processes": 1}
    values["database_url"] = args.database_url or ""
    if args.schema:
        values["database_schema"] = args.schema
    return from_mapping(values)


async def run_server(args: argparse.Namespace, config: ServerConfig) -> int:
    from wiggle import _fast
    from wiggle._server.app import WiggleServer

    commands = _commands(asyncio.get_running_loop())
    server = WiggleServer(config)
    port = await server.start()
    process.tune_collector(config.gc_threshold)  # as wiggle server's process does (app.py serve)
    probe = StoreProbe(server.store)
    _emit(
        "ready",
        port=port,
        pid=os.getpid(),
        impl=_fast.IMPL,
        impl_reason=_fast.IMPL_REASON,
        store=type(server.store).__name__,
        pool_size=config.pool_size,
        lease_millis=config.lease_millis,
    )
    try:
        while True:
            command = await commands.get()
            if command is None or command == "stop":
                break
            if command == "stats":
                _emit(
                    "stats",
                    metrics=server.metrics.snapshot(),
                    transactions=server.store.stats.transactions,
                    handed_off=server.instances.handed_off,
                    chained=server.instances.chained,
                    store=probe.snapshot(),
                    time=time.time(),
                )
    finally:
        await server.stop(grace=2.0)
    _emit("stopped")
    return 0


async def _register(client: Any, bp: Blueprint[Any], timeout: float) -> None:
    deadline = time.monotonic() + timeout
    while True:
        try:
            await client.register(bp)
            return
        except Exception:
            if time.monotonic() > deadline:
                raise
            await asyncio.sleep(0.2)


async def run_worker(args: argparse.Namespace) -> int:
    from wiggle import _fast
    from wiggle.client import AsyncClient
    from wiggle.worker import Worker, WorkerOptions

    commands = _commands(asyncio.get_running_loop())
    bp = blueprint(args.mode, args.steps, args.handler, args.fault, args.limits)
    client = AsyncClient(args.target)
    try:
        await _register(client, bp, 30.0)
        if args.limits and args.index == 0:  # a rate that never binds: its cost is measured
            await client.set_queue_limit(bp.name, rate_max=LIMITS_RATE, rate_period=1.0)
        _emit("ready", pid=os.getpid(), impl=_fast.IMPL, version=bp.version)
        command = await commands.get()
        if command != "go":
            return 0
        options = WorkerOptions(
            concurrency=args.concurrency,
            local_batch_size=args.batch_size,
            transport=args.transport,
            chain_steps=args.chain_steps,
            register=False,
            worker_id=f"bench-w{args.index}-{os.getpid()}",
        )
        worker = Worker(client, [bp], options)
        await worker.start()
        stop = asyncio.ensure_future(commands.get())
        last = -1
        while not stop.done():
            if worker.stats.steps != last:
                last = worker.stats.steps
                _emit("progress", steps=last)
            await asyncio.wait({stop}, timeout=0.2)
        await worker.close(timeout=10.0)
        runs = worker.stats.local_runs
        _emit(
            "stats",
            steps=worker.stats.steps,
            calls=dict(worker.stats.calls),
            handbacks=dict(worker.stats.handbacks),
            local_runs=runs.count,
            local_run_steps=runs.steps,
            local_run_max=runs.longest,
        )
        return 0
    finally:
        await client.close()


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="wiggle._bench.worker", description=__doc__.splitlines()[0])
    sub = parser.add_subparsers(dest="role", required=True)
    p = sub.add_parser("server")
    p.add_argument("--database-url", default="")
    p.add_argument("--schema", default="")
    p = sub.add_parser("worker")
    p.add_argument("--target", required=True)
    p.add_argument(
        "--mode", required=True, choices=[m.value for m in ExecutionMode if m is not ExecutionMode.DEFAULT]
    )
    p.add_argument("--steps", type=int, required=True)
    p.add_argument("--concurrency", type=int, default=16)
    p.add_argument("--batch-size", type=int, default=64)
    p.add_argument("--transport", choices=("stream", "unary"), default="stream")
    p.add_argument("--chain-steps", type=int, default=16)
    p.add_argument("--handler", choices=("sync", "async"), default="sync")
    p.add_argument("--fault", choices=FAULTS, default="")
    p.add_argument("--index", type=int, default=0)
    p.add_argument("--limits", action="store_true")
    args = parser.parse_args(argv)
    _die_with_parent()
    logging.basicConfig(level=logging.WARNING, format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    try:
        if args.role == "server":  # on the event loop wiggle server's process would run (process.py)
            config = server_config(args)
            return _loop.run(run_server(args, config), config.event_loop)
        # as Worker.run() would (WorkerOptions.event_loop's default, WIGGLE_WORKER_EVENT_LOOP);
        # a bad value is refused naming that variable
        variable = "WIGGLE_WORKER_EVENT_LOOP"
        return _loop.run(run_worker(args), env_str(variable, "auto"), variable)
    except KeyboardInterrupt:
        return 130


if __name__ == "__main__":
    sys.exit(main())
