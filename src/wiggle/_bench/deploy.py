"""One mode's processes: a benchmark server (memory, or a PostgreSQL schema) and its workers.

Shared by the timed drain (drain.py) and the latency mode (latency.py): start the server and wait
until it listens, start the workers and wait until they have registered the workflow (they pull
only after ``go()``), read the server's counters, stop the workers gracefully for their own.
"""

from __future__ import annotations

import argparse
import asyncio
import time
from typing import Any

from wiggle import AsyncClient, InstanceInfo

from .errors import BenchError
from .pgstats import Postgres
from .processes import READY_TIMEOUT, STOP_GRACE, Child, Children

__all__ = ["ModeProcesses", "fetch_all"]


class ModeProcesses:
    """The server and worker processes of one run (``label`` names their logs), under one deadline.

    ``args`` are the benchmark's (arguments.py): workers, concurrency, batch size, transport,
    handler, fault, timeout. ``schema`` is the run's PostgreSQL schema (unused in memory).
    """

    def __init__(
        self,
        args: argparse.Namespace,
        mode: str,
        label: str,
        children: Children,
        pg: Postgres | None,
        schema: str,
    ) -> None:
        self.args = args
        self.mode = mode
        self.label = label
        self.children = children
        self.pg = pg
        self.schema = schema
        self.server: Child | None = None
        self.workers: list[Child] = []
        self.deadline = time.monotonic() + float(args.timeout)

    def remaining(self, what: str) -> float:
        """Seconds left before --timeout; BenchError naming ``what`` was under way if none."""
        remaining = self.deadline - time.monotonic()
        if remaining <= 0:
            raise BenchError(f"timed out after --timeout {self.args.timeout:.0f} s while {what}")
        return remaining

    async def start_server(self, stage: str) -> tuple[Child, dict[str, Any]]:
        """A fresh server process (the current one from now on) and its "ready" event (port, impl)."""
        server_args = ["server"]
        if self.pg is not None:
            server_args += ["--database-url", self.pg.url, "--schema", self.schema]
        server = await self.children.spawn(f"{self.label}-server-{stage}", server_args)
        ready = await server.expect(
            "ready", min(READY_TIMEOUT, self.remaining("starting the server")), "starting"
        )
        self.server = server
        return server, ready

    async def start_workers(self, target: str, version: str) -> list[str]:
        """Start the worker processes against ``target``; returns their hot-path implementations.

        Each registers the benchmark workflow and waits for ``go()``; BenchError if one built a
        different workflow ``version`` than the driver.
        """
        args = self.args
        worker_args = ["worker", "--target", target, "--mode", self.mode, "--steps", str(args.steps)]
        worker_args += ["--concurrency", str(args.concurrency), "--batch-size", str(args.batch_size)]
        worker_args += ["--transport", args.transport, "--handler", args.handler]
        if args.limits:
            worker_args.append("--limits")
        if args.fault:
            worker_args += ["--fault", args.fault]
        self.workers = [
            await self.children.spawn(f"{self.label}-worker{i}", [*worker_args, "--index", str(i)])
            for i in range(args.workers)
        ]
        readies = await asyncio.gather(
            *(
                w.expect("ready", min(READY_TIMEOUT, self.remaining("starting the workers")), "starting")
                for w in self.workers
            )
        )
        if any(r.get("version") != version for r in readies):
            raise BenchError("a worker built a different workflow version than the driver")
        return sorted({str(r.get("impl")) for r in readies})

    def go(self) -> None:
        """Let every worker start pulling."""
        for w in self.workers:
            w.send("go")

    def check_alive(self, what: str) -> None:
        """ChildDied (with its log's tail) if the server or a worker has exited while ``what``."""
        for child in [self.server, *self.workers]:
            if child is not None and not child.alive:
                raise child.died(what)

    @property
    def steps(self) -> int:
        """Handler executions the workers have reported so far (their progress events)."""
        return sum(w.steps for w in self.workers)

    async def stats(self) -> dict[str, Any]:
        """The current server's "stats" event: RPC counters and the store's committed transactions."""
        assert self.server is not None
        self.server.send("stats")
        return await self.server.expect("stats", 30.0, "reading its counters")

    def cpu(self) -> dict[str, float | None]:
        """CPU seconds so far of the server and of all workers together (None: one has exited)."""
        assert self.server is not None
        workers = [w.cpu() for w in self.workers]
        return {
            "server": self.server.cpu(),
            "workers": None if any(c is None for c in workers) else sum(c for c in workers if c is not None),
        }

    async def stop_workers(self) -> list[dict[str, Any]]:
        """Stop the workers gracefully; their "stats" events ({} for one that did not answer)."""
        for w in self.workers:
            w.send("stop")
        stats: list[dict[str, Any]] = []
        for w in self.workers:
            try:
                stats.append(await w.expect("stats", STOP_GRACE, "stopping"))
            except BenchError:
                stats.append({})
        await self.children.shutdown(self.workers)
        return stats

    async def stop_server(self) -> None:
        """Stop the current server process."""
        if self.server is not None:
            await self.children.shutdown([self.server])


async def fetch_all(client: AsyncClient, workflow: str) -> list[InstanceInfo]:
    """Every instance of ``workflow`` (all pages)."""
    out: list[InstanceInfo] = []
    token = ""
    while True:
        items, token = await client.list(workflow=workflow, page_size=1000, page_token=token)
        out.extend(items)
        if not token:
            return out
