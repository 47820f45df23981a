"""Concurrency limits on steps (docs/flow-control.md#concurrency-limits), on both stores and in
every execution mode: a limit of N per key is never exceeded (checked from the handlers' own
log), a step waiting for its key does not hold back other keys, a slot held by a worker that
died comes back with its lease, a cancel frees it, a local run never chains into a limited step,
and the queue's stats show what is held and what waits."""

from __future__ import annotations

import asyncio
import threading

import grpc
import pytest

from wiggle import InvalidArgument, Limit, RetryPolicy, Workflow
from wiggle._rpc import wiggle_pb2 as pb
from wiggle._rpc import wiggle_pb2_grpc as pb_grpc

from .conftest import Harness


class KeyLog:
    """What the handlers saw: per key, how many attempts ran at once, at most."""

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.running: dict[str, int] = {}
        self.most: dict[str, int] = {}
        self.runs: list[str] = []

    def enter(self, key: str) -> None:
        with self.lock:
            self.running[key] = self.running.get(key, 0) + 1
            self.most[key] = max(self.most.get(key, 0), self.running[key])
            self.runs.append(key)

    def leave(self, key: str) -> None:
        with self.lock:
            self.running[key] -= 1


def _charging(harness: Harness, base: str, log: KeyLog, limit: int = 1):
    async def charge(ctx):
        log.enter(ctx["customer"])
        try:
            await asyncio.sleep(0.02)  # long enough for other claims to overlap it
        finally:
            log.leave(ctx["customer"])
        return {**ctx, "charged": True}

    return (
        harness.define(base)
        .step(lambda ctx: {**ctx, "checked": True}, name="check")
        .step(charge, name="charge", concurrency=Limit(key="customer", max=limit))
        .step(lambda ctx: {**ctx, "receipt": True}, name="receipt")
        .build()
    )


@pytest.mark.parametrize("limit", [1, 2])
async def test_a_limit_per_key_is_never_exceeded(harness: Harness, limit: int) -> None:
    log = KeyLog()
    bp = _charging(harness, "pay", log, limit)
    customers = ["ada", "bob", "cy"]
    async with harness.running([bp], harness.options(concurrency=12)) as (server, _):
        infos = [await server.client.start(bp, {"customer": customers[i % 3], "n": i}) for i in range(24)]
        done = [await harness.finish(server, info.instance_id, timeout=60) for info in infos]
    assert all(d.status == "COMPLETED" for d in done), [d.error for d in done]
    assert all(d.context["charged"] and d.context["receipt"] for d in done)
    assert sorted(log.runs) == sorted(customers[i % 3] for i in range(24))  # each step ran once
    assert max(log.most.values()) <= limit, log.most


async def _raw_claim(server, queue: str, worker: str = "raw-worker"):
    """Claim one step as a worker that will never report (it "died")."""
    async with grpc.aio.insecure_channel(server.target) as channel:
        stub = pb_grpc.WiggleControlPlaneStub(channel)
        for _ in range(100):
            reply = await stub.PollTasks(
                pb.PollTasksRequest(worker_id=worker, queues=[queue], max_tasks=1, wait_millis=200)
            )
            if reply.tasks:
                return reply.tasks[0]
    raise AssertionError(f"nothing to claim on {queue!r}")


def _limited(harness: Harness, base: str, fn=None):
    return (
        harness.define(base)
        .step(fn or (lambda ctx: {**ctx, "done": True}), name="charge", concurrency=Limit(key="customer"))
        .build()
    )


async def _queue(server, name: str):
    for q in await server.client.queues():
        if q.queue == name:
            return q
    return None


async def _until(predicate, what: str, tries: int = 200) -> None:
    for _ in range(tries):
        if await predicate():
            return
        await asyncio.sleep(0.05)
    raise AssertionError(f"never happened: {what}")


async def test_a_waiting_key_does_not_hold_back_other_keys(harness: Harness) -> None:
    bp = _limited(harness, "hol")
    async with harness.server() as server:
        await server.client.register(bp)
        first = await server.client.start(bp, {"customer": "ada"})
        await _raw_claim(server, bp.name)  # ada's slot is taken and kept
        second = await server.client.start(bp, {"customer": "ada"})
        other = await server.client.start(bp, {"customer": "bob"})
        async with server.worker([bp], harness.options()):
            done = await harness.finish(server, other.instance_id)
            assert done.status == "COMPLETED"
            stat = await _queue(server, bp.name)
            assert stat is not None and stat.limit_held == 1 and stat.limit_waiting == 1, stat
            assert (await server.client.get(second.instance_id)).status == "RUNNING"
            assert not await server.client.history(second.instance_id)  # never claimed
            await server.client.cancel(first.instance_id)  # a cancel frees ada's slot
            again = await harness.finish(server, second.instance_id)
    assert again.status == "COMPLETED" and again.context["done"]


async def test_a_dead_workers_slot_comes_back_after_its_lease(harness: Harness) -> None:
    bp = (
        harness.define("dead")
        .step(
            lambda ctx: {**ctx, "done": True},
            name="charge",
            concurrency=Limit(key="customer"),
            retry=RetryPolicy.fixed(3, 0.05),
        )
        .build()
    )
    async with harness.server(lease_millis=1000) as server:
        await server.client.register(bp)
        first = await server.client.start(bp, {"customer": "ada"})
        await _raw_claim(server, bp.name)  # the worker dies holding ada's slot
        second = await server.client.start(bp, {"customer": "ada"})
        async with server.worker([bp], harness.options()):
            done = [await harness.finish(server, i.instance_id) for i in (first, second)]
            history = await server.client.history(first.instance_id)
    assert [d.status for d in done] == ["COMPLETED", "COMPLETED"]
    assert history[0].outcome == "RETRY" and "lease expired" in history[0].error, history


async def test_a_local_run_never_chains_into_a_limited_step_and_groups_share_a_limit(
    harness: Harness,
) -> None:
    """Two workflows share one limit (its group). While a worker that died holds ada's slot in
    one, the other's step before the limited one runs, and the limited one waits: the run that
    ran the step before it (LOCAL_*) hands back instead of chaining into it."""
    group = Limit(key="customer", group=f"payments-{harness.mode.value.lower()}-{id(harness)}")
    log = KeyLog()

    def charge(ctx):
        log.enter(ctx["customer"])
        log.leave(ctx["customer"])
        return {**ctx, "charged": True}

    refund = harness.define("refund").step(charge, name="charge", concurrency=group).build()
    pay = (
        harness.define("pay")
        .step(lambda ctx: {**ctx, "checked": True}, name="check")
        .step(charge, name="charge", concurrency=group)
        .step(lambda ctx: {**ctx, "receipt": True}, name="receipt")
        .build()
    )
    async with harness.server() as server:
        await server.client.register(refund)
        held = await server.client.start(refund, {"customer": "ada"})
        await _raw_claim(server, refund.name)  # the group's slot for ada, held by a dead worker
        async with server.worker([pay], harness.options()):
            info = await server.client.start(pay, {"customer": "ada"})

            async def parked() -> bool:
                now = await server.client.get(info.instance_id)
                return [(t.node_id, t.status) for t in now.tokens] == [("charge", "READY")]

            await _until(parked, "pay's charge step READY after its check step")
            assert [h.node_id for h in await server.client.history(info.instance_id)] == ["check"]
            assert log.runs == []
            await server.client.cancel(held.instance_id)
            done = await harness.finish(server, info.instance_id)
    assert done.status == "COMPLETED" and done.context["charged"] and done.context["receipt"]
    assert log.runs == ["ada"]


async def test_a_server_never_takes_a_limited_step_from_a_run_it_did_not_claim(harness: Harness) -> None:
    """A worker that chains into a limited step anyway (not this SDK's worker) gets it cut off:
    the steps before it stand, the limited step is handed back READY for a claim of its own."""
    bp = _charging(harness, "cut", KeyLog())
    async with harness.server() as server:
        await server.client.register(bp)
        info = await server.client.start(bp, {"customer": "ada"})
        act = await _raw_claim(server, bp.name)
        steps = [
            pb.StepResult(node_id=node, context_json=f'{{"customer": "ada", "{node}": true}}'.encode())
            for node in ("check", "charge", "receipt")
        ]
        request = pb.AdvanceRunRequest(
            task_id=act.task_id, lease_owner="raw-worker", steps=steps, final=False
        )
        async with grpc.aio.insecure_channel(server.target) as channel:
            stub = pb_grpc.WiggleControlPlaneStub(channel)
            if harness.local:
                result = await stub.AdvanceRun(request)
                assert result.applied_steps == 1 and result.token_status == "READY", result
            else:  # SERVER mode: one step per claim, whatever the worker sends
                with pytest.raises(grpc.aio.AioRpcError) as refused:
                    await stub.AdvanceRun(request)
                assert refused.value.code() == grpc.StatusCode.FAILED_PRECONDITION
        now = await server.client.get(info.instance_id)
        history = await server.client.history(info.instance_id)
    if harness.local:
        assert [h.node_id for h in history] == ["check"]
        assert now.context == {"customer": "ada", "check": True}
        assert [(t.node_id, t.status) for t in now.tokens] == [("charge", "READY")]
    else:
        assert not history and now.context == {"customer": "ada"}


async def test_bad_limits_are_refused_when_the_workflow_is_built(harness: Harness) -> None:
    for bad, words in [
        (Limit(key="", max=1), "must name a context key"),
        (Limit(key="customer", max=0), "at least 1"),
        (Limit(key="customer", max=-1), "concurrency max"),
        (Limit(key="customer", group="no spaces"), "concurrency group"),
    ]:
        with pytest.raises(InvalidArgument, match=words):
            harness.define("bad").step(lambda ctx: ctx, name="s", concurrency=bad).build()
    with pytest.raises(InvalidArgument, match="wiggle.Limit"):
        Workflow.define("bad").step(lambda ctx: ctx, name="s", concurrency=1)  # type: ignore[arg-type]


async def test_a_freed_slot_wakes_the_waiting_steps_when_its_report_chains_the_next(harness: Harness) -> None:
    """The attempt that leaves a key's slot wakes the pollers of its queue. When its report also
    leased the instance's next step on that queue (a chained step, SERVER mode's default), the
    wake-up was dropped with the queue's announcement: the steps waiting for the slot sat until
    some poll timed out (10 s per round by default; an outside flow-control trial: 30 instances,
    2 slots of 0.4 s, 40.7 s against 2.3 s). With polls that wait 60 s, 12 instances through 2
    slots finish in a few seconds, or at the test's timeout without it."""
    import time

    def hold(ctx):
        time.sleep(0.1)
        return {**ctx, "held": True}

    bp = (
        harness.define("freed-slot")
        .step(hold, name="hold", concurrency=Limit(key="customer", max=2))
        .step(lambda ctx: {**ctx, "after": True}, name="after")
        .build()
    )
    async with harness.running([bp], harness.options(poll_wait_seconds=60.0, concurrency=8)) as (server, _):
        infos = [await server.client.start(bp, {"customer": "c1"}) for _ in range(12)]
        done = [await harness.finish(server, info.instance_id, timeout=30) for info in infos]
    assert all(d.status == "COMPLETED" and d.context["after"] for d in done), done
