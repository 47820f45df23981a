"""One mode's processes: benchmark servers (memory, or a PostgreSQL schema) and their workers.

Shared by the timed drain (drain.py) and the latency mode (latency.py): start the server (or, with
``--servers N`` on PostgreSQL, N servers on the same schema, each on its own port) and wait until
they listen, start the workers (worker i connects to server i mod N; with ``--front``, to one of the servers after
the first, which the driver's clients have to themselves) and wait until they have
registered the workflow (they pull only after ``go()``), read the servers' counters (added up),
stop the workers gracefully for their own.
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

__all__ = ["ModeProcesses", "fetch_all", "merge_stats"]


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
        self.servers: list[Child] = []
        self.workers: list[Child] = []
        self.targets: list[str] = []  # the current servers' addresses
        self.calls_by_server: list[dict[str, int]] = []  # each server's RPC calls, as stats() last read
        self.deadline = time.monotonic() + float(args.timeout)

    def remaining(self, what: str) -> float:
        """Seconds left before --timeout; BenchError naming ``what`` was under way if none."""
        remaining = self.deadline - time.monotonic()
        if remaining <= 0:
            raise BenchError(f"timed out after --timeout {self.args.timeout:.0f} s while {what}")
        return remaining

    @property
    def server(self) -> Child | None:
        """The first of the current server processes (the one the driver's clients use)."""
        return self.servers[0] if self.servers else None

    async def start_server(self, stage: str, count: int = 1) -> tuple[Child, dict[str, Any]]:
        """``count`` fresh server processes on the run's store (the current ones from now on); the
        first and its "ready" event (port, impl). ``targets`` lists every one's address."""
        server_args = ["server"]
        if self.pg is not None:
            server_args += ["--database-url", self.pg.url, "--schema", self.schema]
        elif count > 1:
            raise BenchError("several servers need PostgreSQL (--database-url)")
        names = [f"{self.label}-server-{stage}" + (f"-{i}" if count > 1 else "") for i in range(count)]
        servers = [await self.children.spawn(name, server_args) for name in names]
        readies = await asyncio.gather(
            *(
                s.expect("ready", min(READY_TIMEOUT, self.remaining("starting the server")), "starting")
                for s in servers
            )
        )
        self.servers = servers
        self.targets = [f"127.0.0.1:{r['port']}" for r in readies]
        return servers[0], readies[0]

    async def start_workers(self, version: str) -> list[str]:
        """Start the worker processes, worker i against server i mod N; returns their hot-path
        implementations.

        Each registers the benchmark workflow and waits for ``go()``; BenchError if one built a
        different workflow ``version`` than the driver.
        """
        args = self.args
        worker_args = ["worker", "--mode", self.mode, "--steps", str(args.steps)]
        worker_args += ["--concurrency", str(args.concurrency), "--batch-size", str(args.batch_size)]
        worker_args += ["--transport", args.transport, "--handler", args.handler]
        worker_args += ["--chain-steps", str(args.chain_steps)]
        if args.limits:
            worker_args.append("--limits")
        if args.fault:
            worker_args += ["--fault", args.fault]
        self.workers = [
            await self.children.spawn(
                f"{self.label}-worker{i}",
                [*worker_args, "--target", self.worker_target(i), "--index", str(i)],
            )
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

    def worker_target(self, i: int) -> str:
        """Worker ``i``'s server: server i mod N, or with ``--front`` one of the servers after the
        first (which then serves the driver's and the submitting client's calls alone)."""
        targets = self.targets
        if self.args.front and len(targets) > 1:
            return targets[1 + i % (len(targets) - 1)]
        return targets[i % len(targets)]

    def go(self) -> None:
        """Let every worker start pulling."""
        for w in self.workers:
            w.send("go")

    def check_alive(self, what: str) -> None:
        """ChildDied (with its log's tail) if the server or a worker has exited while ``what``."""
        for child in [*self.servers, *self.workers]:
            if not child.alive:
                raise child.died(what)

    @property
    def steps(self) -> int:
        """Handler executions the workers have reported so far (their progress events)."""
        return sum(w.steps for w in self.workers)

    async def stats(self) -> dict[str, Any]:
        """The current servers' "stats" events added up (merge_stats): RPC counters, the stores'
        committed transactions, hand-offs."""
        assert self.servers
        for server in self.servers:
            server.send("stats")
        events = await asyncio.gather(
            *(s.expect("stats", 30.0, "reading its counters") for s in self.servers)
        )
        self.calls_by_server = [dict(e["metrics"].get("rpc_calls", {})) for e in events]
        return merge_stats(events)

    def cpu(self) -> dict[str, float | None]:
        """CPU seconds so far of the servers and of the workers, each role added up (None: a
        process of the role has exited)."""
        return {"server": _summed_cpu(self.servers), "workers": _summed_cpu(self.workers)}

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
        """Stop the current server processes."""
        if self.servers:
            await self.children.shutdown(self.servers)


def _summed_cpu(children: list[Child]) -> float | None:
    cpus = [c.cpu() for c in children]
    return None if any(c is None for c in cpus) else sum(c for c in cpus if c is not None)


def merge_stats(events: list[dict[str, Any]]) -> dict[str, Any]:
    """Several servers' "stats" events as one: counters added up (``rpc_calls``, ``rpc_errors``,
    ``transactions``, ``handed_off``, ``chained``, the store probe's ``store``); one event is
    returned as it is."""
    if len(events) == 1:
        return events[0]
    merged: dict[str, Any] = {
        "metrics": {"rpc_calls": {}, "rpc_errors": {}},
        "transactions": 0,
        "handed_off": 0,
        "chained": 0,
        "store": {},
    }
    for event in events:
        for key in ("rpc_calls", "rpc_errors"):
            _add(merged["metrics"][key], event["metrics"].get(key, {}))
        _add(merged["store"], event.get("store", {}))
        merged["transactions"] += event.get("transactions", 0)
        merged["handed_off"] += event.get("handed_off", 0)
        merged["chained"] += event.get("chained", 0)
    return merged


def _add(into: dict[str, int], counts: dict[str, int]) -> None:
    for name, n in counts.items():
        into[name] = into.get(name, 0) + n


async def fetch_all(client: AsyncClient, workflow: str) -> list[InstanceInfo]:
    """Every instance of ``workflow`` (all pages)."""
    out: list[InstanceInfo] = []
    token = ""
    while True:
        items, token = await client.list(workflow=workflow, page_size=1000, page_token=token)
        out.extend(items)
        if not token:
            return out
