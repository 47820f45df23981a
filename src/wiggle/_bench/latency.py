"""The latency mode (``wiggle bench --latency N``): one instance at a time on an idle system.

Per execution mode: a fresh server (memory, or a PostgreSQL schema of its own) and the usual
workers; then ``N`` instances of the linear ``--steps``-step workflow (5 unless given), strictly
one after another: ``Client.start``, then ``Client.wait`` until it finished, timed by the driver
(start -> result). One warm-up instance runs first and is verified but not counted. Afterwards
every instance is verified and its history read: the gap between two consecutive steps is the
next step's claim (``started_at``) minus the previous step's end (``ended_at``), which is where a
lost wake-up shows (issue #16: a poller that sleeps out its long-poll wait).

After each measured instance one trivial unary RPC (``GetInstance`` of the instance just
finished: a round trip and one read) is timed the same way, so the run carries its own yardstick:
on a slow or busy machine both figures move, and the report shows the instance's latency as a
multiple of that round trip as well as in milliseconds.
"""

from __future__ import annotations

import argparse
import os
import time
from typing import Any

from wiggle import AsyncClient, HistoryEntry

from . import worker as workload
from .deploy import ModeProcesses, fetch_all
from .errors import BenchError
from .figures import latency_figures
from .pgstats import Postgres
from .processes import Children
from .progress import Progress
from .verify import verify

__all__ = ["GAP_LIMIT_MS", "WARMUP", "LatencyRun"]

GAP_LIMIT_MS = 50  # issue #16's target: no gap between two steps longer than this
WARMUP = 1  # instances run (and verified) before the measured ones; their n is negative


class LatencyRun:
    """One mode's latency run; ``run()`` returns ``{"mode", "kind": "latency", "ok"}`` plus the
    figures (figures.latency_figures) when verified, or ``"problems"`` when not."""

    def __init__(
        self,
        args: argparse.Namespace,
        mode: str,
        children: Children,
        pg: Postgres | None,
        progress: Progress,
    ) -> None:
        self.args = args
        self.mode = mode
        self.pg = pg
        self.progress = progress
        self.name = workload.workflow_name(mode, args.steps)
        self.schema = f"wiggle_bench_{os.getpid()}_{mode.lower()}_latency"
        self.procs = ModeProcesses(args, mode, f"{mode}-latency", children, pg, self.schema)
        self.result: dict[str, Any] = {"mode": mode, "kind": "latency", "ok": False}
        self.instance_ids: dict[str, int] = {}

    async def run(self) -> dict[str, Any]:
        """Run the mode; its result (see the class docstring)."""
        args = self.args
        procs = self.procs
        total = int(args.latency)
        bp = workload.blueprint(self.mode, args.steps, args.handler, limits=args.limits)
        _, ready = await procs.start_server("latency")
        self.result["server_impl"] = ready.get("impl")
        self.result["store"] = ready.get("store")
        target = f"127.0.0.1:{ready['port']}"
        async with AsyncClient(target) as client:
            await client.register(bp)
            self.result["worker_impl"] = await procs.start_workers(bp.version)
            procs.go()
            for n in range(-WARMUP, 0):
                await _timed_get(client, (await self._one(client, n))[0])
            latencies: list[float] = []
            rpcs: list[float] = []  # the yardstick: one GetInstance after each instance
            label = f"{self.mode} latency"
            started = time.monotonic()
            for n in range(total):
                instance_id, latency = await self._one(client, n)
                latencies.append(latency)
                rpcs.append(await _timed_get(client, instance_id))
                self.progress.show(label, n + 1, total, started, "inst")
            elapsed = time.monotonic() - started
            self.progress.show(label, total, total, started, "inst", force=True)
            self.progress.end()
            # -- verification and the histories (after the measurements)
            infos = await fetch_all(client, self.name)
            histories: dict[str, list[HistoryEntry]] = {}
            for instance_id, n in self.instance_ids.items():
                if n >= 0:
                    histories[instance_id] = await client.history(instance_id)
        problems = verify(infos, self.instance_ids, self.name, args.steps, workload.expected_context)
        await procs.stop_workers()
        await procs.stop_server()
        if problems:
            self.result["problems"] = problems
            return self.result
        self.result.update(steps=args.steps, warmup=WARMUP)
        self.result.update(latency_figures(latencies, histories, elapsed, GAP_LIMIT_MS, rpc_latencies=rpcs))
        self.result["ok"] = True
        return self.result

    async def _one(self, client: AsyncClient, n: int) -> tuple[str, float]:
        """Start instance ``n`` and wait for its result; its id and the seconds from calling start
        to the result."""
        self.procs.check_alive("instances ran one at a time")
        origin = time.perf_counter()
        info = await client.start(self.name, workload.initial_context(n))
        self.instance_ids[info.instance_id] = n
        done = await client.wait(info.instance_id, timeout=self.procs.remaining(f"instance n={n} ran"))
        latency = time.perf_counter() - origin
        if not done.finished:
            raise BenchError(
                f"timed out after --timeout {self.args.timeout:.0f} s: instance {info.instance_id} (n={n}) "
                f"is still {done.status}"
            )
        return info.instance_id, latency


async def _timed_get(client: AsyncClient, instance_id: str) -> float:
    """Seconds one ``GetInstance`` round trip takes (the run's yardstick)."""
    origin = time.perf_counter()
    await client.get(instance_id)
    return time.perf_counter() - origin
