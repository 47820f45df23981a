"""The timed drain of one execution mode: fresh server (+ schema), submission, drain, verification.

The workload is src/wiggle/_bench/worker.py (the same module the worker subprocesses run); the
figures come from figures.py, the verdict from verify.py.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import time
from typing import Any

from wiggle import AsyncClient, InstanceInfo
from wiggle.workflow import Blueprint

from . import worker as workload
from .deploy import ModeProcesses, fetch_all
from .errors import BenchError
from .figures import Snapshot, drain_figures, start_figures
from .pgstats import Postgres, WaitSampler
from .processes import STOP_GRACE, Children, machine_busy, self_cpu
from .progress import Progress
from .submit import StartLog, ThreadSubmitter
from .verify import verify

__all__ = ["SUBMIT_CONCURRENCY", "DrainRun"]

SUBMIT_CONCURRENCY = 64


class DrainRun:
    """One mode: fresh server (+ schema), submission, timed drain, verification.

    ``submit`` is "before" (the instances are started before the window, by SUBMIT_CONCURRENCY
    asynchronous calls, and the window times the workers' drain) or "during" (``--submit-threads``
    client threads start them inside the window, concurrently with the workers: submit.py).
    ``run()`` returns the mode's result: ``{"mode", "submit", "ok"}`` plus the figures
    (drain_figures) and ``"starts"`` (start_figures) when verified, or ``"problems"`` when not.
    """

    def __init__(
        self,
        args: argparse.Namespace,
        mode: str,
        submit: str,
        children: Children,
        pg: Postgres | None,
        progress: Progress,
    ) -> None:
        self.args = args
        self.mode = mode
        self.submit = submit
        # "before" keeps the names of the runs that had no --submit, so existing scripts still match
        label = mode if submit == "before" else f"{mode}-{submit}"
        self.pg = pg
        self.progress = progress
        self.name = workload.workflow_name(mode, args.steps)
        self.schema = f"wiggle_bench_{os.getpid()}_{label.lower().replace('-', '_')}"
        self.procs = ModeProcesses(args, mode, label, children, pg, self.schema)
        self.result: dict[str, Any] = {"mode": mode, "submit": submit, "ok": False}
        self.starts = StartLog()  # the pre-submission's, or the ThreadSubmitter's under "during"

    async def _snapshot(self, after: bool = False) -> Snapshot:
        """The counters at one edge of the window; read in mirror order, so the cheap local ones sit
        closest to the window and the server's stats RPC stays outside it."""
        if not after:
            stats = await self.procs.stats()
            cpu = self.procs.cpu()
            pg_cpu = await asyncio.to_thread(self.pg.cpu_snapshot) if self.pg else None
            driver = self_cpu()
            machine = machine_busy()
            return Snapshot(stats, cpu, pg_cpu, driver, machine)
        driver = self_cpu()
        machine = machine_busy()
        cpu = self.procs.cpu()
        pg_cpu = await asyncio.to_thread(self.pg.cpu_snapshot) if self.pg else None
        stats = await self.procs.stats()
        return Snapshot(stats, cpu, pg_cpu, driver, machine)

    async def _prepare(self, bp: Blueprint[Any]) -> tuple[str, dict[str, int]]:
        """Register ``bp`` and (under --submit before) start every instance; the drain's target
        and PostgreSQL's database counters so far (pgstats.COUNTERS; empty in memory)."""
        procs = self.procs
        _, ready = await procs.start_server("submit")
        self.result["server_impl"] = ready.get("impl")
        self.result["store"] = ready.get("store")
        target = f"127.0.0.1:{ready['port']}"
        async with AsyncClient(target) as client:
            await client.register(bp)
            if self.submit == "before":
                await self._submit(client)
        if self.pg is None:
            return target, {}
        # Drain on a second server process: the first one's backends exit and flush their
        # statistics, so pg_stat_database's counters are exact from here on.
        await procs.stop_server()
        await asyncio.to_thread(self.pg.wait_no_backends)
        counters = await asyncio.to_thread(self.pg.counters)
        _, ready = await procs.start_server("drain", self.args.servers)
        return f"127.0.0.1:{ready['port']}", counters

    async def run(self) -> dict[str, Any]:
        """Run the mode; its result (see the class docstring)."""
        args = self.args
        procs = self.procs
        bp = workload.blueprint(self.mode, args.steps, args.handler, limits=args.limits)
        # -- 1. registration and submission (not timed)
        target, counters_before = await self._prepare(bp)
        # -- 2. workers: connected and registered, waiting for "go"
        self.result["worker_impl"] = await procs.start_workers(bp.version)
        # -- 3. the timed drain (with the starts inside it under --submit during)
        submitter = self._submitter(target)
        waits = WaitSampler(self.pg) if self.pg is not None else None
        async with AsyncClient(target) as client:
            before = await self._snapshot()
            if waits is not None:
                waits.start()
            t_go = time.time()
            mono_go = time.monotonic()
            procs.go()
            if submitter is not None:
                submitter.start()
            try:
                polls = await self._drain(client, mono_go, submitter)
            finally:
                if submitter is not None:
                    submitter.stop()
                    await asyncio.to_thread(submitter.join, STOP_GRACE)
                if waits is not None:
                    await asyncio.to_thread(waits.stop)
            mono_done = time.monotonic()
            after = await self._snapshot(after=True)
            # -- 4. verification (after the measurements)
            infos = await fetch_all(client, self.name)
        problems = verify(infos, self.starts.instance_ids, self.name, args.steps, workload.expected_context)
        if len(self.starts.instance_ids) != args.instances:  # "during" stopped early (a failure)
            problems.insert(
                0, f"started {len(self.starts.instance_ids)} instances, expected {args.instances}"
            )
        # -- 5. stop workers (graceful: they report their own counters), then the server
        worker_stats, pg_counters = await self._stop_all(counters_before)
        if problems:
            self.result["problems"] = problems
            return self.result
        self.result.update(
            drain_figures(
                infos,
                steps=args.steps,
                t_go=t_go,
                observed=mono_done - mono_go,
                polls=polls,
                before=before,
                after=after,
                worker_stats=worker_stats,
                pg_counters=pg_counters,
            )
        )
        self.result["servers"] = len(procs.targets)
        self.result["calls_by_server"] = procs.calls_by_server  # since each server started
        if waits is not None:
            self.result["pg_waits"] = waits.result()
        clients = (
            f"{SUBMIT_CONCURRENCY} async calls"
            if self.submit == "before"
            else f"{args.submit_threads} threads"
            + (", 1 client" if args.submit_client == "shared" else "")
            + (f", {args.submit_rate:g}/s" if args.submit_rate else "")
            + (
                f", to {len(self.procs.targets)} servers"
                if args.submit_to == "all" and len(self.procs.targets) > 1
                else ""
            )
        )
        self.result["starts"] = start_figures(
            self.starts.latencies, self.starts.span, clients, self.starts.behind
        )
        self.result["ok"] = True
        return self.result

    def _submitter(self, target: str) -> ThreadSubmitter | None:
        """Under ``--submit during``, the threads that start the instances while the workers run."""
        if self.submit != "during":
            return None
        args = self.args
        submitter = ThreadSubmitter(
            self.procs.targets if args.submit_to == "all" else target,
            self.name,
            args.instances,
            args.submit_threads,
            workload.initial_context,
            shared=args.submit_client == "shared",
            rate=args.submit_rate,
        )
        self.starts = submitter.log
        return submitter

    async def _stop_all(
        self, counters_before: dict[str, int]
    ) -> tuple[list[dict[str, Any]], dict[str, int] | None]:
        """Stop the workers (gracefully: they report their own counters), then the server; the
        workers' counters and PostgreSQL's counters over the run (None without PostgreSQL)."""
        worker_stats = await self.procs.stop_workers()
        await self.procs.stop_server()
        if self.pg is None:
            return worker_stats, None
        await asyncio.to_thread(self.pg.wait_no_backends)
        after_counters = await asyncio.to_thread(self.pg.counters)
        return worker_stats, {k: v - counters_before.get(k, 0) for k, v in after_counters.items()}

    # -- submission and drain

    async def _submit(self, client: AsyncClient) -> None:
        total = self.args.instances
        log = self.starts
        next_n = 0
        started = time.monotonic()
        label = f"{self.mode} submit"

        async def submitter() -> None:
            nonlocal next_n
            while next_n < total:
                n = next_n
                next_n += 1
                origin = log.began()
                info = await client.start(self.name, workload.initial_context(n))
                log.ended(info.instance_id, n, origin)

        tasks = [asyncio.ensure_future(submitter()) for _ in range(min(SUBMIT_CONCURRENCY, total))]
        try:
            while True:
                done, _ = await asyncio.wait(tasks, timeout=0.2, return_when=asyncio.FIRST_EXCEPTION)
                for task in done:
                    if task.exception() is not None:
                        raise BenchError(f"StartInstance failed: {task.exception()}")
                if len(done) == len(tasks):
                    break
                self.procs.remaining(f"submitting ({len(log.instance_ids)}/{total} submitted)")
                self.progress.show(label, len(log.instance_ids), total, started, "inst")
        finally:
            for task in tasks:
                task.cancel()
        self.progress.show(label, len(log.instance_ids), total, started, "inst", force=True)
        self.progress.end()
        if len(log.instance_ids) != total:
            raise BenchError(f"submitted {len(log.instance_ids)} distinct instances, expected {total}")

    async def _list_one(self, client: AsyncClient, status: str) -> list[InstanceInfo]:
        items, _ = await client.list(workflow=self.name, status=status, page_size=1)
        return list(items)

    async def _drain(self, client: AsyncClient, mono_go: float, submitter: ThreadSubmitter | None) -> int:
        """Wait until every instance is started and none is RUNNING; returns the ListInstances calls.

        Under "during" no RUNNING check is made while ``submitter`` still runs: a moment with
        nothing RUNNING between two starts is not the end.
        """
        target_steps = self.args.instances * self.args.steps
        label = f"{self.mode} drain"
        polls = 0
        last_running = last_failed = 0.0
        while True:
            self.procs.check_alive("the drain was running")
            steps = self.procs.steps
            now = time.monotonic()
            submitting = submitter is not None and not submitter.done
            if submitter is not None and submitter.error is not None:
                raise BenchError(f"StartInstance failed: {submitter.error}")
            if not submitting and now - last_running >= (0.05 if steps >= target_steps else 2.0):
                last_running = now
                polls += 1
                if not await self._list_one(client, "RUNNING"):
                    break
            if now - last_failed >= 2.0:
                last_failed = now
                polls += 1
                if await self._list_one(client, "FAILED"):
                    break  # the verification says what went wrong
            if now > self.procs.deadline:
                self.progress.end()
                raise BenchError(
                    f"timed out after --timeout {self.args.timeout:.0f} s: the workers ran "
                    f"{steps}/{target_steps} steps and instances are still RUNNING"
                )
            self.progress.show(
                label, min(steps, target_steps) // self.args.steps, self.args.instances, mono_go, "inst"
            )
            await asyncio.sleep(0.05)
        steps = self.procs.steps
        self.progress.show(
            label,
            min(steps, target_steps) // self.args.steps,
            self.args.instances,
            mono_go,
            "inst",
            force=True,
        )
        self.progress.end()
        return polls
