"""End to end over real gRPC: typed contexts, crashes and redelivery, exclusivity, RPC budgets,
and compatibility between workers and servers of different capabilities.

Crash tests run workers as separate processes (tests/integration/workers/run_worker.py) against an embedded
server in this process, and kill them with SIGKILL (an unclean death) or SIGTERM (a graceful
close). Executions are counted through files, so they are seen across processes.
"""

from __future__ import annotations

import asyncio
import math
import signal
import subprocess
import sys
import threading
from collections import Counter
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import msgspec
import pytest

from wiggle import ExecutionMode, RetryPolicy, WiggleError, WorkerOptions, Workflow
from wiggle._server.service import ControlPlane
from wiggle.errors import ErrorCode
from wiggle.testing import EmbeddedServer

WORKERS = Path(__file__).resolve().parent / "workers"
sys.path.insert(0, str(WORKERS))

import e2e_flows  # noqa: E402

MODES = [ExecutionMode.SERVER, ExecutionMode.LOCAL_SYNC, ExecutionMode.LOCAL_ASYNC]
mode_ids = [m.value for m in MODES]


def _h(name: str, trace=None):
    def handler(ctx):
        if trace is not None:
            trace.hit(name)
        return {**ctx, name: True}

    handler.__name__ = name
    return handler


def linear(name: str, mode: ExecutionMode, n: int, trace=None):
    wf = Workflow.define(name).execution(mode)
    for i in range(1, n + 1):
        wf = wf.step(_h(f"s{i}", trace))
    return wf.build()


# ---------------------------------------------------------------------------- typed contexts


class Order(msgspec.Struct):
    id: int
    items: list[str] = []
    total: float = 0.0
    status: str = "new"
    seen: list[str] = []


@pytest.mark.parametrize("transport", ["unary", "stream"])
@pytest.mark.parametrize("mode", MODES, ids=mode_ids)
async def test_typed_context_with_sync_and_async_handlers(mode: ExecutionMode, transport: str, trace) -> None:
    types: list[str] = []

    def validate(order: Order) -> Order:
        trace.hit("validate")
        types.append(type(order).__name__)
        order.status = "valid"
        order.seen.append(threading.current_thread().name.split("_")[0])
        return order

    async def price(order: Order) -> Order:
        info = trace.hit("price")
        types.append(type(order).__name__)
        await asyncio.sleep(0.001)
        order.total = 2.5 * len(order.items)
        order.seen.append(info.execution_mode)
        return order

    def audit(order: Order) -> None:  # None: the context is unchanged
        trace.hit("audit")
        types.append(type(order).__name__)

    async def finish(order: Order) -> Order:
        trace.hit("finish")
        order.status = "done"
        return order

    bp = (
        Workflow.define(f"typed-{transport}", Order)
        .execution(mode)
        .step(validate)
        .step(price)
        .step(audit)
        .step(finish)
        .build()
    )
    async with EmbeddedServer() as server:
        async with server.worker([bp], WorkerOptions(transport=transport, poll_wait_seconds=1)):
            info = await server.client.start(bp, Order(id=7, items=["a", "b", "c"]))
            done = await server.client.result(info.instance_id, timeout=15)
    assert done.status == "COMPLETED"
    result = msgspec.convert(done.context, Order)
    assert result == Order(
        id=7, items=["a", "b", "c"], total=7.5, status="done", seen=["wiggle-step", mode.value]
    )
    assert types == ["Order", "Order", "Order"]
    assert trace.steps == ["validate", "price", "audit", "finish"]


# ---------------------------------------------------------------------------- worker processes


class Procs:
    """Worker processes started by one test; all killed (by pid) when the test ends."""

    def __init__(self, directory: Path) -> None:
        self.dir = directory
        self.started: list[subprocess.Popen[bytes]] = []

    def start(
        self, target: str, mode: ExecutionMode, worker_id: str, block_at: str = ""
    ) -> subprocess.Popen[bytes]:
        log = open(self.dir / f"{worker_id}.log", "wb")  # noqa: SIM115 - closed with the process
        proc = subprocess.Popen(
            [
                sys.executable,
                str(WORKERS / "run_worker.py"),
                target,
                mode.value,
                str(self.dir),
                "--block-at",
                block_at,
                "--worker-id",
                worker_id,
            ],
            stdout=log,
            stderr=subprocess.STDOUT,
        )
        log.close()
        self.started.append(proc)
        return proc

    def log(self) -> str:
        return "\n".join(f"--- {p.name}\n{p.read_text()}" for p in sorted(self.dir.glob("*.log")))

    async def wait_file(self, name: str, timeout: float = 30.0) -> None:
        deadline = asyncio.get_running_loop().time() + timeout
        while not (self.dir / name).exists():
            if asyncio.get_running_loop().time() > deadline:
                raise AssertionError(f"{name} never appeared\n{self.log()}")
            for proc in self.started:
                if proc.poll() not in (None, 0, -signal.SIGKILL, -signal.SIGTERM):
                    raise AssertionError(f"a worker process died ({proc.returncode})\n{self.log()}")
            await asyncio.sleep(0.02)

    @staticmethod
    async def wait_exit(proc: subprocess.Popen[bytes], timeout: float = 20.0) -> int:
        deadline = asyncio.get_running_loop().time() + timeout
        while proc.poll() is None:
            if asyncio.get_running_loop().time() > deadline:
                raise AssertionError(f"worker process {proc.pid} did not exit")
            await asyncio.sleep(0.02)
        return proc.returncode

    def cleanup(self) -> None:
        for proc in self.started:
            if proc.poll() is None:
                proc.kill()
                proc.wait(5)


@pytest.fixture
def procs(tmp_path: Path) -> Iterator[Procs]:
    p = Procs(tmp_path)
    try:
        yield p
    finally:
        p.cleanup()


def _counts(directory: Path) -> Counter[str]:
    return Counter(e["node"] for e in e2e_flows.executions(directory))


async def _finish(server: EmbeddedServer, instance_id: str, procs: Procs, timeout: float = 30.0):
    info = await server.client.wait(instance_id, timeout=timeout)
    assert info.finished, f"instance still {info.status}: {info}\n{procs.log()}"
    return info


async def test_sigkill_mid_step_lease_expires_and_another_process_finishes(procs: Procs) -> None:
    bp = e2e_flows.crash_flow(ExecutionMode.SERVER)
    async with EmbeddedServer(lease_millis=1000) as server:
        await server.client.register(bp)
        info = await server.client.start(bp, {})
        doomed = procs.start(server.target, ExecutionMode.SERVER, "doomed", block_at="s3")
        await procs.wait_file("blocked")
        doomed.kill()  # SIGKILL: no report, no heartbeat, nothing
        assert await procs.wait_exit(doomed) == -signal.SIGKILL
        procs.start(server.target, ExecutionMode.SERVER, "rescuer")
        done = await _finish(server, info.instance_id, procs)
        history = await server.client.history(info.instance_id)
    assert done.status == "COMPLETED", procs.log()
    assert done.context == e2e_flows.expected_context()
    runs = sorted((e["node"], e["attempt"], e["worker"]) for e in e2e_flows.executions(procs.dir))
    assert runs == [
        ("s1", 1, "doomed"),
        ("s2", 1, "doomed"),
        ("s3", 1, "doomed"),
        ("s3", 2, "rescuer"),
        ("s4", 1, "rescuer"),
        ("s5", 1, "rescuer"),
        ("s6", 1, "rescuer"),
    ]
    s3 = [(e.outcome, e.attempt, e.worker_id, e.error) for e in history if e.node_id == "s3"]
    assert s3 == [
        ("RETRY", 1, "doomed", "lease expired (worker unreachable)"),
        ("COMPLETED", 2, "rescuer", ""),
    ]


@pytest.mark.parametrize("mode", MODES, ids=mode_ids)
async def test_crash_replay_per_mode(mode: ExecutionMode, procs: Procs) -> None:
    """kill -9 while s4 runs: SERVER and LOCAL_SYNC re-run s4 only; LOCAL_ASYNC re-runs s1..s4."""
    bp = e2e_flows.crash_flow(mode)
    async with EmbeddedServer(lease_millis=1000) as server:
        await server.client.register(bp)
        info = await server.client.start(bp, {})
        first = procs.start(server.target, mode, "first", block_at="s4")
        await procs.wait_file("blocked")
        first.kill()
        await procs.wait_exit(first)
        procs.start(server.target, mode, "second")
        done = await _finish(server, info.instance_id, procs)
        history = await server.client.history(info.instance_id)
    assert done.status == "COMPLETED", procs.log()
    assert done.context == e2e_flows.expected_context()  # every mode converges to the same result
    counts = _counts(procs.dir)
    if mode is ExecutionMode.LOCAL_ASYNC:
        # s1..s3 were buffered, never flushed: the whole unflushed run is replayed
        assert counts == {"s1": 2, "s2": 2, "s3": 2, "s4": 2, "s5": 1, "s6": 1}
        expired_at = "s1"
    else:
        # every step is committed before the next: at most the step in flight runs again
        assert counts == {"s1": 1, "s2": 1, "s3": 1, "s4": 2, "s5": 1, "s6": 1}
        expired_at = "s4"
    retries = [(e.node_id, e.worker_id, e.error) for e in history if e.outcome == "RETRY"]
    assert retries == [(expired_at, "first", "lease expired (worker unreachable)")]


async def test_graceful_close_in_local_async_reruns_nothing(procs: Procs) -> None:
    mode = ExecutionMode.LOCAL_ASYNC
    bp = e2e_flows.crash_flow(mode)
    async with EmbeddedServer(lease_millis=1000) as server:
        await server.client.register(bp)
        info = await server.client.start(bp, {})
        first = procs.start(server.target, mode, "first", block_at="s4")
        await procs.wait_file("blocked")
        await asyncio.sleep(0.1)
        first.send_signal(signal.SIGTERM)  # Worker.run(): close() drains the local run
        await asyncio.sleep(0.2)
        (procs.dir / "release").write_text("")
        assert await procs.wait_exit(first) == 0, procs.log()
        mid = await server.client.get(info.instance_id)
        procs.start(server.target, mode, "second")
        done = await _finish(server, info.instance_id, procs)
        history = await server.client.history(info.instance_id)
    # the drained run was flushed: the server had s1..s4 before the second worker started
    assert {k: mid.context.get(k) for k in ("s1", "s2", "s3", "s4")} == {"s1": 1, "s2": 2, "s3": 3, "s4": 4}
    assert [(t.node_id, t.status) for t in mid.tokens] == [("s5", "READY")]
    assert done.status == "COMPLETED"
    assert done.context == e2e_flows.expected_context()
    assert _counts(procs.dir) == {s: 1 for s in e2e_flows.STEPS}
    by_worker = {e["node"]: e["worker"] for e in e2e_flows.executions(procs.dir)}
    assert by_worker == {
        "s1": "first",
        "s2": "first",
        "s3": "first",
        "s4": "first",
        "s5": "second",
        "s6": "second",
    }
    assert [e for e in history if e.outcome == "RETRY"] == []


@pytest.mark.parametrize("transport", ["unary", "stream"])
@pytest.mark.parametrize("mode", MODES, ids=mode_ids)
async def test_graceful_close_leaves_the_next_step_to_other_workers(
    mode: ExecutionMode, transport: str, eventually
) -> None:
    """close() while a step runs: the step finishes and is reported, and the next step is left
    READY for other workers; the closing worker must not claim it (it would sit RUNNING until its
    lease expired, and that expiry would count as a failed attempt)."""
    started, release = threading.Event(), threading.Event()

    def a(ctx):
        return {**ctx, "a": True}

    def b(ctx):
        started.set()
        release.wait(30)
        return {**ctx, "b": True}

    def c(ctx):
        return {**ctx, "c": True}

    bp = (
        Workflow.define("drain")
        .execution(mode)
        .retry(RetryPolicy.none())
        .step(a)
        .step(b)
        .sleep("pause", 0)
        .step(c)
        .build()
    )
    try:
        async with EmbeddedServer(lease_millis=1000) as server:
            options = WorkerOptions(transport=transport, worker_id="leaving", poll_wait_seconds=5)
            leaving = server.worker([bp], options)
            await leaving.start()
            info = await server.client.start(bp, {})
            await eventually(started.is_set, what="step b to start")
            closing = asyncio.ensure_future(leaving.close())
            await asyncio.sleep(0.1)
            release.set()
            await closing

            async def parked_at_c() -> bool:
                tokens = (await server.client.get(info.instance_id)).tokens
                return [t.node_id for t in tokens] == ["c"]

            await eventually(parked_at_c, what="the token to reach c")
            await asyncio.sleep(0.2)
            mid = await server.client.get(info.instance_id)
            async with server.worker(
                [bp], WorkerOptions(transport=transport, worker_id="staying", poll_wait_seconds=1)
            ):
                done = await server.client.wait(info.instance_id, timeout=10)
    finally:
        release.set()
    assert [(t.node_id, t.status, t.lease_owner) for t in mid.tokens] == [("c", "READY", "")]
    assert done.status == "COMPLETED", done.error
    assert done.context == {"a": True, "b": True, "c": True}


# ---------------------------------------------------------------------------- exclusivity


@pytest.mark.parametrize("mode", MODES, ids=mode_ids)
async def test_two_workers_never_run_the_same_token_at_once(mode: ExecutionMode, trace) -> None:
    instances = 200

    async def step(ctx, name):
        trace.hit(name)
        await asyncio.sleep(0)
        return {**ctx, name: True}

    async def a(ctx):
        return await step(ctx, "a")

    async def b(ctx):
        return await step(ctx, "b")

    async def c(ctx):
        return await step(ctx, "c")

    bp = Workflow.define("exclusive").execution(mode).step(a).step(b).step(c).build()
    async with EmbeddedServer() as server:
        options = [WorkerOptions(worker_id=f"w{i}", concurrency=8, poll_wait_seconds=1) for i in (1, 2)]
        async with server.worker([bp], options[0]) as w1, server.worker([bp], options[1]) as w2:
            # all at once, a backlog both workers claim from: started one by one, each one's steps
            # can all go to the worker that last came back (docs/semantics.md, "Hand-off"), and
            # one worker then ran every step (seen once in CI, LOCAL_ASYNC)
            ids = await server.client.start_many(bp, [{"i": i} for i in range(instances)])
            results = [await server.client.wait(i, timeout=30) for i in ids]
    assert Counter(r.status for r in results) == {"COMPLETED": instances}
    assert all(r.context == {"i": i, "a": True, "b": True, "c": True} for i, r in enumerate(results))
    duplicates = {k: v for k, v in trace.runs.items() if v != 1}
    assert duplicates == {}
    assert len(trace.runs) == instances * 3
    assert {inst for inst, _, _ in trace.runs} == set(ids)
    assert w1.stats.steps + w2.stats.steps == instances * 3
    assert w1.stats.steps > 0 and w2.stats.steps > 0  # both took part


# ---------------------------------------------------------------------------- cancel while a step runs


@pytest.mark.parametrize("mode", MODES, ids=mode_ids)
async def test_cancel_while_a_step_runs_refuses_the_late_completion(mode: ExecutionMode, eventually) -> None:
    started, release = threading.Event(), threading.Event()
    ran: list[str] = []

    def block(ctx):
        ran.append("block")
        started.set()
        release.wait(30)
        return {**ctx, "block": True}

    def after(ctx):
        ran.append("after")
        return ctx

    bp = Workflow.define("cancel-e2e").execution(mode).step(block).sleep("pause", 0).step(after).build()
    try:
        async with EmbeddedServer() as server:
            metrics = server.server.metrics
            async with server.worker([bp], WorkerOptions(transport="unary", poll_wait_seconds=1)) as worker:
                info = await server.client.start(bp, {"v": 1})
                await eventually(started.is_set, what="the step to start")
                cancelled, changed = await server.client.cancel(info.instance_id, "too slow")
                assert changed and cancelled.status == "CANCELLED"
                history_before = await server.client.history(info.instance_id)
                tx_before = server.server.store.stats.transactions
                release.set()
                if mode is ExecutionMode.SERVER:
                    await eventually(
                        lambda: metrics.rpc_errors["CompleteTask"] == 1, what="CompleteTask refused"
                    )
                else:
                    await eventually(
                        lambda: (worker.stats.local_runs.count, worker.stats.local_runs.steps) == (1, 1),
                        what="the local run to end",
                    )
                    assert worker.stats.calls["AdvanceRun"] == 1  # the (ignored) handback; no probe
                await asyncio.sleep(0.1)
                final = await server.client.get(info.instance_id)
                history_after = await server.client.history(info.instance_id)
                tx_after = server.server.store.stats.transactions
    finally:
        release.set()
    assert final == cancelled  # nothing changed: context, status, reason, timestamps
    assert final.reason == "too slow" and final.context == {"v": 1}
    assert history_after == history_before
    assert ran == ["block"]
    if mode is ExecutionMode.SERVER:
        assert tx_after == tx_before  # a refused report commits nothing


# ---------------------------------------------------------------------------- RPC and commit budgets


@pytest.mark.parametrize(
    "mode, batch, chain, expected_reports, expected_tx",
    [
        # per instance, after the first: (reports of the expected kind, committed transactions);
        # a step handed to the waiting poll by the commit that made it READY needs no claim
        # (docs/semantics.md, "Hand-off"): each hand-off is one transaction less
        # start, 1 claim, N CompleteTask, each but the last bringing the next step (chained steps)
        (ExecutionMode.SERVER, 64, 16, 6, 1 + 1 + 6),
        (ExecutionMode.SERVER, 64, 2, 6, 1 + 2 + 6),  # a claim, 2 chained, a claim, 2 chained
        (ExecutionMode.SERVER, 64, 0, 6, 1 + 6 + 6),  # start, N claims, N CompleteTask
        (ExecutionMode.LOCAL_SYNC, 64, 16, 6, 1 + 1 + 6),  # start, 1 claim, N AdvanceRun
        (ExecutionMode.LOCAL_ASYNC, 4, 16, math.ceil(6 / 4), 1 + 1 + 2),  # start, 1 claim, ceil(N/batch)
        (ExecutionMode.LOCAL_ASYNC, 64, 16, 1, 1 + 1 + 1),
    ],
    ids=[
        "SERVER",
        "SERVER-chain2",
        "SERVER-chain0",
        "LOCAL_SYNC",
        "LOCAL_ASYNC-batch4",
        "LOCAL_ASYNC-batch64",
    ],
)
async def test_rpc_and_commit_counts_per_mode(
    mode: ExecutionMode, batch: int, chain: int, expected_reports: int, expected_tx: int
) -> None:
    n = 6
    bp = linear("budget", mode, n)
    options = WorkerOptions(
        transport="unary", local_batch_size=batch, concurrency=1, poll_wait_seconds=5, chain_steps=chain
    )
    report = "CompleteTask" if mode is ExecutionMode.SERVER else "AdvanceRun"
    other = "AdvanceRun" if mode is ExecutionMode.SERVER else "CompleteTask"
    async with EmbeddedServer() as server:
        store = server.server.store
        async with server.worker([bp], options) as worker:
            for _ in range(3):
                calls_before = Counter(worker.stats.calls)
                tx_before = store.stats.transactions
                handed_before = server.server.instances.handed_off
                info = await server.client.start(bp, {})
                done = await server.client.wait(info.instance_id, timeout=15)
                assert done.status == "COMPLETED"
                assert done.context == {f"s{i}": True for i in range(1, n + 1)}
                calls = Counter(worker.stats.calls)
                calls.subtract(calls_before)
                assert calls[report] == expected_reports, dict(calls)  # no probe AdvanceRun, even first
                assert calls[other] == 0
                assert calls["FailTask"] == 0 and calls["HeartbeatTask"] == 0
                handed = server.server.instances.handed_off - handed_before
                # concurrency 1: only a poll made while no step runs can be waiting, for the start
                assert handed in (0, 1)
                assert store.stats.transactions - tx_before == expected_tx - handed
        metrics = server.server.metrics.rpc_calls
        assert metrics[report] == 3 * expected_reports
        assert metrics[other] == 0


# ---------------------------------------------------------------------------- compatibility


async def test_worker_without_local_modes_uses_complete_task_only() -> None:
    bp = linear("compat-off", ExecutionMode.LOCAL_ASYNC, 4)
    async with EmbeddedServer() as server:
        options = WorkerOptions(use_local_modes=False, transport="unary", poll_wait_seconds=1)
        async with server.worker([bp], options) as worker:
            ids = [(await server.client.start(bp, {})).instance_id for _ in range(3)]
            results = [await server.client.wait(i, timeout=15) for i in ids]
    assert [r.status for r in results] == ["COMPLETED"] * 3
    assert all(r.context == {"s1": True, "s2": True, "s3": True, "s4": True} for r in results)
    assert worker.stats.calls["AdvanceRun"] == 0
    assert worker.stats.calls["CompleteTask"] == 12
    assert worker.stats.local_runs.count == 0


async def test_worker_with_a_different_blueprint_version_runs_server_style(trace) -> None:
    server_bp = linear("compat-version", ExecutionMode.LOCAL_SYNC, 3)
    # same name and node names, a different graph (retry policy): another version
    wf = (
        Workflow.define("compat-version")
        .execution(ExecutionMode.LOCAL_SYNC)
        .retry(RetryPolicy.fixed(2, 0.01))
    )
    for i in (1, 2, 3):
        wf = wf.step(_h(f"s{i}", trace))
    worker_bp = wf.build()
    assert worker_bp.version != server_bp.version
    async with EmbeddedServer() as server:
        await server.client.register(server_bp)
        options = WorkerOptions(register=False, transport="unary", poll_wait_seconds=1)
        async with server.worker([worker_bp], options) as worker:
            info = await server.client.start(server_bp.name, {}, version=server_bp.version)
            done = await server.client.wait(info.instance_id, timeout=15)
    assert done.status == "COMPLETED" and done.version == server_bp.version
    assert done.context == {"s1": True, "s2": True, "s3": True}
    assert trace.steps == ["s1", "s2", "s3"]
    assert worker.stats.calls["AdvanceRun"] == 0
    assert worker.stats.calls["CompleteTask"] == 3


class Unimplemented(WiggleError):
    code = ErrorCode.UNIMPLEMENTED


class OldControlPlane(ControlPlane):
    """A server from before AdvanceRun existed."""

    async def advance_run(self, request: Any) -> Any:
        raise Unimplemented("Method not found: AdvanceRun")


@pytest.mark.parametrize("transport", ["unary", "stream"])
async def test_worker_falls_back_to_server_style_without_advance_run(transport: str, trace) -> None:
    bp = linear("compat-old-server", ExecutionMode.LOCAL_ASYNC, 3, trace)
    server = EmbeddedServer()
    server.server.service = OldControlPlane(server.server.instances, server.server.metrics)
    async with server:
        async with server.worker(
            [bp], WorkerOptions(transport=transport, concurrency=1, poll_wait_seconds=1)
        ) as worker:
            ids = [(await server.client.start(bp, {})).instance_id for _ in range(2)]
            results = [await server.client.wait(i, timeout=15) for i in ids]
    assert [r.status for r in results] == ["COMPLETED", "COMPLETED"]
    assert all(r.context == {"s1": True, "s2": True, "s3": True} for r in results)
    assert worker.stats.calls["AdvanceRun"] == 1  # the first local run's handback, once
    assert worker.stats.calls["CompleteTask"] == 6
    # Without a probe the first run learns at its handback: s1 is reported SERVER style, and s2,
    # s3 (run locally, never committed) run again SERVER style, as after a LOCAL_ASYNC crash.
    assert Counter(trace.steps) == {"s1": 2, "s2": 3, "s3": 3}
    assert worker.stats.local_runs.count == 0  # no local runs: every step went SERVER style


# ---------------------------------------------------------------------------- hand-off


@pytest.mark.parametrize("transport", ["unary", "stream"])
@pytest.mark.parametrize(
    "mode", [ExecutionMode.SERVER, ExecutionMode.LOCAL_SYNC], ids=["SERVER", "LOCAL_SYNC"]
)
async def test_a_waiting_worker_gets_each_step_handed_over_the_wire(
    mode: ExecutionMode, transport: str
) -> None:
    # Concurrency 1 and an idle worker: its poll is waiting (armed) when the start commits, so the
    # first step goes to it in that commit over either transport (docs/semantics.md, "Hand-off").
    # Later steps are claimed (SERVER: the worker polls again only after its report) or run
    # locally (LOCAL_SYNC).
    n = 4
    bp = linear(f"handed-{transport}", mode, n)
    options = WorkerOptions(transport=transport, concurrency=1, poll_wait_seconds=5)
    async with EmbeddedServer() as server:
        instances = server.server.instances
        notifier = server.server.store.notifier
        async with server.worker([bp], options):
            for _ in range(3):
                for _ in range(500):  # the worker's poll is waiting before the start commits
                    if notifier.armed:
                        break
                    await asyncio.sleep(0.01)
                assert notifier.armed
                before = instances.handed_off
                info = await server.client.start(bp, {})
                done = await server.client.wait(info.instance_id, timeout=15)
                assert done.status == "COMPLETED"
                assert done.context == {f"s{i}": True for i in range(1, n + 1)}
                handed = instances.handed_off - before
                assert 1 <= handed <= n  # the start's first step at least
