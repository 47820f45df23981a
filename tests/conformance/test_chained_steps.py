"""Chained steps (docs/semantics.md#chained-steps): a CompleteTask that names the worker's queues
(``next_queues``) gets its instance's next step, leased to it in the report's own commit.

Over the real gRPC server on every store: what a chained step is (a claim like any other: lease,
attempt, context, fence), what is never chained (another queue, a limited queue, a step with a
key, the second branch of a fork), that a refused report chains nothing, and, with the Python
worker, that a slot takes at most ``chain_steps`` steps in a row and leaves a clean history.
Then the same for a local run's final AdvanceRun at a fork, a join or a queue change.
"""

from __future__ import annotations

import asyncio
from typing import Any

import grpc
import pytest

from wiggle import Limit, RetryPolicy
from wiggle._engine.records import TaskDone
from wiggle._fast import encode_batch
from wiggle._rpc import wiggle_pb2 as pb

from .conftest import Harness
from .test_fencing import WORKER, Raw, _step, raw


def _complete(act: pb.TaskActivation, queues: list[str], ctx: bytes = b"") -> pb.CompleteTaskRequest:
    request = pb.CompleteTaskRequest(task_id=act.task_id, lease_owner=act.lease_owner, next_queues=queues)
    if ctx:
        request.context_json = ctx
    return request


async def _nothing_to_claim(r: Raw, queue: str) -> None:
    response = await r.stub.PollTasks(
        pb.PollTasksRequest(worker_id="other", queues=[queue], max_tasks=5, wait_millis=0)
    )
    assert list(response.tasks) == []


async def test_a_report_naming_its_queue_gets_the_next_step_leased_in_its_commit(
    server_harness: Harness,
) -> None:
    bp = server_harness.define("chain").step(_step("s1")).step(_step("s2")).step(_step("s3")).build()
    async with raw(server_harness) as r:
        await r.register(bp)
        iid = await r.start(bp)
        act = await r.poll(bp)
        seen = [act.node_id]
        while True:
            result = await r.stub.CompleteTask(_complete(act, [bp.name]))
            if not result.HasField("next_task"):
                break
            following = result.next_task
            # a claim like any other: this worker's lease, a new fence, the context so far
            assert following.instance_id == iid and following.lease_owner == WORKER
            assert following.attempt == 1 and following.queue == bp.name
            assert following.execution_mode == "SERVER" and following.lease_expires_at > 0
            assert following.task_id != act.task_id
            assert following.context_json  # the step before it ran
            await _nothing_to_claim(r, bp.name)  # leased: no one else can take it
            seen.append(following.node_id)
            act = following
        assert result.instance_status == "COMPLETED"
        assert seen == ["s1", "s2", "s3"]
        status, context, tokens, history = await r.state(iid)
        assert status == "COMPLETED" and tokens == []
        assert history == [("s1", "COMPLETED", 1), ("s2", "COMPLETED", 1), ("s3", "COMPLETED", 1)]
        assert r.server.server.instances.chained == 2


async def test_a_report_that_does_not_ask_leaves_the_next_step_to_a_claim(server_harness: Harness) -> None:
    bp = server_harness.define("nochain").step(_step("s1")).step(_step("s2")).build()
    async with raw(server_harness) as r:
        await r.register(bp)
        # not asked; asked for a queue the next step is not on
        for queues in ([], ["some-other-queue"]):
            iid = await r.start(bp)
            act = await r.poll(bp)
            assert (act.instance_id, act.node_id) == (iid, "s1")
            result = await r.stub.CompleteTask(_complete(act, queues))
            assert not result.HasField("next_task")
            act = await r.poll(bp)  # READY: claimed
            assert (act.instance_id, act.node_id) == (iid, "s2")
            result = await r.stub.CompleteTask(_complete(act, queues))
            assert result.instance_status == "COMPLETED"
        assert r.server.server.instances.chained == 0


async def test_a_step_under_a_limit_is_never_chained(server_harness: Harness) -> None:
    limited = server_harness.define("limited").step(_step("s1")).step(_step("s2")).build()
    keyed = (
        server_harness.define("keyed")
        .step(_step("s1"))
        .step(_step("s2"), concurrency=Limit(key="k", max=1))
        .build()
    )
    async with raw(server_harness) as r:
        await r.register(limited)
        await r.register(keyed)
        await r.server.client.set_queue_limit(limited.name, max_running=5)
        for bp in (limited, keyed):
            await r.stub.StartInstance(pb.StartInstanceRequest(workflow=bp.name, context_json=b'{"k": "x"}'))
            act = await r.poll(bp)
            result = await r.stub.CompleteTask(_complete(act, [bp.name]))
            assert not result.HasField("next_task"), bp.name
            act = await r.poll(bp)  # claimed, where the limit is counted
            assert act.node_id == "s2"
        assert r.server.server.instances.chained == 0


async def test_a_fork_chains_one_branch_and_leaves_the_other_to_a_claim(server_harness: Harness) -> None:
    bp = (
        server_harness.define("forked")
        .step(_step("s0"))
        .fork(lambda b: b.step(_step("left")), lambda b: b.step(_step("right")))
        .join()
        .build()
    )
    async with raw(server_harness) as r:
        await r.register(bp)
        iid = await r.start(bp)
        act = await r.poll(bp)
        result = await r.stub.CompleteTask(_complete(act, [bp.name]))
        chained = result.next_task
        other = await r.poll(bp)
        assert {chained.node_id, other.node_id} == {"left", "right"}
        assert chained.task_id.rpartition("@")[0] != other.task_id.rpartition("@")[0]
        await _nothing_to_claim(r, bp.name)
        for act in (chained, other):
            await r.stub.CompleteTask(_complete(act, []))
        assert (await r.state(iid))[0] == "COMPLETED"


async def test_a_refused_report_chains_nothing_and_changes_nothing(server_harness: Harness) -> None:
    bp = server_harness.define("refused").step(_step("s1")).step(_step("s2")).build()
    async with raw(server_harness) as r:
        await r.register(bp)
        iid = await r.start(bp)
        act = await r.poll(bp)
        before = await r.state(iid)
        with pytest.raises(grpc.aio.AioRpcError) as bad:
            await r.stub.CompleteTask(_complete(act, [" spaced"]))
        assert bad.value.code() == grpc.StatusCode.INVALID_ARGUMENT
        assert "next_queues" in (bad.value.details() or "")
        assert await r.state(iid) == before  # s1 still leased, nothing applied
        result = await r.stub.CompleteTask(_complete(act, [bp.name]))
        assert result.next_task.node_id == "s2"
        assert await r.state(iid) != before


async def test_a_resent_report_gets_the_step_it_chained_again_and_changes_nothing(
    server_harness: Harness,
) -> None:
    """The report's answer was lost and the worker sends it again: the report is settled, so
    nothing is applied twice, and the answer is the first one's — the same chained step, same
    claim — so the step does not sit leased to a worker that never got it until its lease runs
    out. Only the same report of the same worker gets it, and only while that claim stands."""
    bp = server_harness.define("resent").step(_step("s1")).step(_step("s2")).step(_step("s3")).build()
    async with raw(server_harness) as r:
        await r.register(bp)
        iid = await r.start(bp)
        act = await r.poll(bp)
        first = await r.stub.CompleteTask(_complete(act, [bp.name], b'{"s1": 1}'))
        chained = first.next_task
        assert chained.node_id == "s2"
        after = await r.state(iid)
        again = await r.stub.CompleteTask(_complete(act, [bp.name], b'{"s1": 1}'))
        assert again.next_task == chained  # the same claim, fence, lease, attempt and context
        assert again.instance_status == "RUNNING"
        assert await r.state(iid) == after  # nothing applied, nothing leased again
        assert r.server.server.instances.chained == 1 and r.server.server.instances.chained_again == 1
        # not the same report: without next_queues, or from another worker, it is refused as before
        details = await r.refused("CompleteTask", _complete(act, []))
        assert "already settled" in details
        other = pb.CompleteTaskRequest(task_id=act.task_id, lease_owner="someone-else", next_queues=[bp.name])
        await r.refused("CompleteTask", other)
        assert await r.state(iid) == after
        # once the chained step is reported, its claim no longer stands: the old report is refused
        third = await r.stub.CompleteTask(_complete(chained, [bp.name]))
        assert third.next_task.node_id == "s3"
        await r.refused("CompleteTask", _complete(act, [bp.name]))
        done = await r.stub.CompleteTask(_complete(third.next_task, [bp.name]))
        assert done.instance_status == "COMPLETED" and not done.HasField("next_task")
        await r.refused("CompleteTask", _complete(third.next_task, [bp.name]))  # finished: nothing to chain
        status, _, tokens, history = await r.state(iid)
        assert status == "COMPLETED" and tokens == []
        assert history == [("s1", "COMPLETED", 1), ("s2", "COMPLETED", 1), ("s3", "COMPLETED", 1)]


async def test_a_resent_report_does_not_get_a_step_the_worker_claimed_by_a_poll(
    server_harness: Harness,
) -> None:
    """The next step was claimed by a poll of the same worker (the report did not ask): a resend
    that now asks is refused, so the step is never given to two slots at once."""
    bp = server_harness.define("polled").step(_step("s1")).step(_step("s2")).build()
    async with raw(server_harness) as r:
        await r.register(bp)
        iid = await r.start(bp)
        act = await r.poll(bp)
        first = await r.stub.CompleteTask(_complete(act, []))
        assert not first.HasField("next_task")
        second = await r.poll(bp)
        assert second.node_id == "s2" and second.task_id.rpartition("@")[0] == act.task_id.rpartition("@")[0]
        before = await r.state(iid)
        await r.refused("CompleteTask", _complete(act, [bp.name]))
        assert await r.state(iid) == before


@pytest.mark.parametrize("chain_steps", [0, 2, 16])
async def test_a_worker_chains_at_most_chain_steps_in_a_row_and_leaves_a_clean_history(
    server_harness: Harness, chain_steps: int
) -> None:
    steps = 7
    wf = server_harness.define("worker-chain")
    for i in range(steps):
        wf = wf.step(_step(f"s{i}"))
    bp = wf.build()
    options = Harness.options(concurrency=4, chain_steps=chain_steps)
    async with server_harness.running([bp], options) as (server, worker):
        ids = [(await server.client.start(bp, {})).instance_id for _ in range(6)]
        for iid in ids:
            info = await Harness.finish(server, iid)
            assert info.status == "COMPLETED"
            assert info.context == {f"s{i}": 1 for i in range(steps)}
            history = await server.client.history(iid)
            runs = [(e.node_id, e.outcome, e.attempt) for e in history if e.kind == "TASK"]
            assert runs == [(f"s{i}", "COMPLETED", 1) for i in range(steps)]  # no expiry, no retry
        # per instance: the first step is polled for, then up to chain_steps follow from reports,
        # then a poll again (each poll's step begins a new chain)
        per_instance = steps - 1 - (steps - 1) // (chain_steps + 1) if chain_steps else 0
        assert worker.stats.chained == per_instance * len(ids)
        assert server.server.instances.chained == worker.stats.chained
        assert worker.stats.calls["PollTasks"] >= len(ids) * (steps - per_instance) / 4


@pytest.mark.parametrize("chain_seconds", [0.01, 0.0])
async def test_a_chain_of_slow_steps_goes_back_to_the_queue_after_chain_seconds(
    server_harness: Harness, chain_seconds: float
) -> None:
    """Each step takes 50 ms. With ``chain_seconds=0.01`` a chain has outlived its bound by the
    time its second step begins, so that step's report does not ask: a poll, a chained step, a
    poll... — two steps of five chained. ``0`` is no time bound: four of five."""

    def slow(name: str) -> Any:
        async def handler(ctx: dict[str, Any]) -> dict[str, Any]:
            await asyncio.sleep(0.05)
            return {**ctx, name: 1}

        handler.__name__ = name
        return handler

    wf = server_harness.define("slow-chain")
    for i in range(5):
        wf = wf.step(slow(f"s{i}"))
    bp = wf.build()
    options = Harness.options(concurrency=1, chain_steps=16, chain_seconds=chain_seconds)
    async with server_harness.running([bp], options) as (server, worker):
        iid = (await server.client.start(bp, {})).instance_id
        info = await Harness.finish(server, iid)
        assert info.status == "COMPLETED" and info.context == {f"s{i}": 1 for i in range(5)}
        history = await server.client.history(iid)
        assert [(e.node_id, e.outcome, e.attempt) for e in history if e.kind == "TASK"] == [
            (f"s{i}", "COMPLETED", 1) for i in range(5)
        ]
        assert worker.stats.chained == (2 if chain_seconds else 4)


async def test_a_retry_is_not_chained_and_the_chain_goes_on_after_it(server_harness: Harness) -> None:
    """A failed step's retry waits out its backoff: it is claimed, never chained; the report of
    the retried step's success chains the step after it."""
    calls: list[str] = []

    def flaky(ctx: dict[str, Any]) -> dict[str, Any]:
        calls.append("flaky")
        if len(calls) == 1:
            raise RuntimeError("first call fails")
        return {**ctx, "flaky": True}

    bp = (
        server_harness.define("retry-chain")
        .step(_step("s1"))
        .step(flaky, retry=RetryPolicy(max_attempts=2, initial_backoff_millis=10))
        .step(_step("s3"))
        .build()
    )
    async with server_harness.running([bp], Harness.options(concurrency=1)) as (server, worker):
        iid = (await server.client.start(bp, {})).instance_id
        info = await Harness.finish(server, iid)
        assert info.status == "COMPLETED"
        history = await server.client.history(iid)
        runs = [(e.node_id, e.outcome, e.attempt) for e in history if e.kind == "TASK"]
        assert runs == [
            ("s1", "COMPLETED", 1),
            ("flaky", "RETRY", 1),
            ("flaky", "COMPLETED", 2),
            ("s3", "COMPLETED", 1),
        ]
        assert worker.stats.chained == 2  # s1 -> flaky attempt 1; flaky attempt 2 -> s3


async def test_a_step_chained_while_the_worker_begins_to_close_is_given_back(server_harness: Harness) -> None:
    """The report asked before ``close()`` began and its answer came after: the slot does not run
    the step it brought but gives it back at once (READY again, no attempt spent), so it is
    claimed again and runs as attempt 1 well within its 60 s lease — not after the lease ran out."""
    bp = server_harness.define("closing").step(_step("s1")).step(_step("s2")).build()
    async with server_harness.server(lease_millis=60_000) as server:
        async with server.worker([bp], Harness.options(concurrency=1)) as worker:
            reporter = worker._reporter
            assert reporter is not None
            complete = reporter.complete
            closing: list[bool] = []

            async def complete_then_close(request: pb.CompleteTaskRequest, *more: Any) -> Any:
                result = await complete(request, *more)
                if request.next_queues and not closing:  # the first report that asked
                    closing.append(True)
                    worker._closing = True  # as close() does first, while the answer was on its way
                return result

            reporter.complete = complete_then_close  # type: ignore[method-assign]
            iid = (await server.client.start(bp, {})).instance_id
            info = await Harness.finish(server, iid, timeout=15.0)
        assert info.status == "COMPLETED" and closing == [True]
        history = await server.client.history(iid)
        runs = [(e.node_id, e.outcome, e.attempt) for e in history if e.kind == "TASK"]
        assert runs == [("s1", "COMPLETED", 1), ("s2", "COMPLETED", 1)]  # given back, not expired
        assert worker.stats.chained == 0 and worker.stats.completed == 2


class _AnswerLost(grpc.RpcError):
    """What a worker sees when a report's answer is lost on the way (the server applied it)."""

    def code(self) -> grpc.StatusCode:
        return grpc.StatusCode.UNAVAILABLE

    def details(self) -> str:
        return "the answer was lost (test)"


async def test_a_worker_whose_report_answer_is_lost_gets_the_chained_step_from_its_resend(
    server_harness: Harness,
) -> None:
    """The server applies a report that chained s2, and its answer never reaches the worker,
    which sends the report again: the resend brings s2, so it runs at once as attempt 1 — not
    after its 60 s lease runs out — and the history is one clean attempt a step."""
    bp = server_harness.define("lost").step(_step("s1")).step(_step("s2")).step(_step("s3")).build()
    async with server_harness.server(lease_millis=60_000) as server:
        async with server.worker([bp], Harness.options(concurrency=1)) as worker:
            reporter = worker._reporter
            assert reporter is not None
            transport = reporter.transport
            complete = transport.complete
            lost: list[str] = []

            async def complete_answer_lost(request: pb.CompleteTaskRequest, timeout: float) -> Any:
                result = await complete(request, timeout)
                if not lost and result.HasField("next_task"):
                    lost.append(result.next_task.node_id)
                    raise _AnswerLost()
                return result

            transport.complete = complete_answer_lost  # type: ignore[method-assign]
            iid = (await server.client.start(bp, {})).instance_id
            info = await Harness.finish(server, iid, timeout=15.0)
        assert info.status == "COMPLETED" and lost == ["s2"]
        assert {k: info.context[k] for k in ("s1", "s2", "s3")} == {"s1": 1, "s2": 1, "s3": 1}
        history = await server.client.history(iid)
        runs = [(e.node_id, e.outcome, e.attempt) for e in history if e.kind == "TASK"]
        assert runs == [("s1", "COMPLETED", 1), ("s2", "COMPLETED", 1), ("s3", "COMPLETED", 1)]
        assert [(e.kind, e.outcome) for e in history if e.kind != "TASK"] == [("END", "END")]  # no expiry
        assert server.server.instances.chained == 2 and worker.stats.chained == 2
        assert server.server.instances.chained_again == 1


async def test_a_step_handed_back_by_a_late_answer_is_not_run_when_the_resend_brings_it(
    server_harness: Harness,
) -> None:
    """The stream transport gives back a step that a late answer brought (the worker had stopped
    waiting and resent the report); the resend's answer then brings the same step again. The
    slot must not run it — the give-back releases it — so it runs once, claimed again, and no
    run of it overlaps another."""
    runs: list[str] = []

    async def slow(ctx: dict[str, Any]) -> dict[str, Any]:
        runs.append("s2")
        await asyncio.sleep(0.3)  # long enough for the give-back to land while it would run
        return {**ctx, "s2": 1}

    slow.__name__ = "s2"
    bp = server_harness.define("late").step(_step("s1")).step(slow).build()
    async with server_harness.server(lease_millis=60_000) as server:
        async with server.worker([bp], Harness.options(concurrency=1)) as worker:
            reporter = worker._reporter
            poller = worker._poller
            assert reporter is not None and poller is not None
            complete = reporter.complete
            late: list[str] = []

            async def complete_after_a_late_answer(request: pb.CompleteTaskRequest, *more: Any) -> Any:
                result = await complete(request, *more)
                if not late and result is not None and result.HasField("next_task"):
                    late.append(result.next_task.node_id)
                    poller.hand_back_orphans([result.next_task])  # as the late first answer did
                return result

            reporter.complete = complete_after_a_late_answer  # type: ignore[method-assign]
            iid = (await server.client.start(bp, {})).instance_id
            info = await Harness.finish(server, iid, timeout=15.0)
        assert info.status == "COMPLETED" and late == ["s2"] and runs == ["s2"]
        history = await server.client.history(iid)
        assert [(e.node_id, e.outcome, e.attempt) for e in history if e.kind == "TASK"] == [
            ("s1", "COMPLETED", 1),
            ("s2", "COMPLETED", 1),
        ]
        assert worker.stats.chained == 0


# ---------------------------------------------------------------------------- local runs' handbacks


async def test_a_final_advance_run_at_a_queue_change_gets_the_next_step(local_harness: Harness) -> None:
    """A local run hands back where the next step is on another queue; its final AdvanceRun names
    the worker's queues and gets that step, leased in the handback's commit, in the answer."""
    other = f"{local_harness.define('q').name}-other"
    bp = local_harness.define("handback").step(_step("s1")).step(_step("s2"), queue=other).build()
    async with raw(local_harness) as r:
        await r.register(bp)
        iid = await r.start(bp)
        act = await r.poll(bp)
        assert act.node_id == "s1" and act.execution_mode == local_harness.mode.value
        batch = encode_batch([TaskDone("s1", {"s1": 1}, [])])
        request = pb.AdvanceRunRequest(
            task_id=act.task_id, lease_owner=WORKER, steps_batch=batch, next_queues=[bp.name, other]
        )
        before = await r.state(iid)
        with pytest.raises(grpc.aio.AioRpcError) as bad:
            await r.stub.AdvanceRun(request)  # not final: nothing to hand back, nothing applied
        assert bad.value.code() == grpc.StatusCode.INVALID_ARGUMENT
        assert "next_queues" in (bad.value.details() or "") and "final" in (bad.value.details() or "")
        assert await r.state(iid) == before
        request.final = True
        request.handback_reason = "OTHER_QUEUE"
        result = await r.stub.AdvanceRun(request)
        following = result.next_task
        assert (following.node_id, following.queue, following.lease_owner) == ("s2", other, WORKER)
        assert following.attempt == 1 and following.execution_mode == local_harness.mode.value
        await _nothing_to_claim(r, other)
        # the same final batch again (its answer lost): the same step again, nothing applied twice
        after = await r.state(iid)
        again = await r.stub.AdvanceRun(request)
        assert again.next_task == following and again.instance_status == "RUNNING"
        assert await r.state(iid) == after
        del request.next_queues[:]
        await r.refused("AdvanceRun", request)  # nothing asked: refused as before
        done = await r.stub.AdvanceRun(
            pb.AdvanceRunRequest(
                task_id=following.task_id,
                lease_owner=WORKER,
                steps_batch=encode_batch([TaskDone("s2", {"s2": 1}, [])]),
                final=True,
                handback_reason="TERMINAL",
                next_queues=[bp.name, other],
            )
        )
        assert done.instance_status == "COMPLETED" and not done.HasField("next_task")
        status, _, tokens, history = await r.state(iid)
        assert status == "COMPLETED" and tokens == []
        assert history == [("s1", "COMPLETED", 1), ("s2", "COMPLETED", 1)]


async def test_a_worker_takes_the_step_after_a_fork_a_join_or_a_queue_change_from_the_handback(
    local_harness: Harness,
) -> None:
    """One worker, one slot: each instance's run hands back at the fork (one branch comes back
    with the answer), at each branch's join (the last one's brings the step after the join) and
    where the queue changes (the step on the other queue comes back): three steps an instance
    reach the worker without a poll, and the history is one clean attempt a step."""
    other = f"{local_harness.define('q').name}-other"
    bp = (
        local_harness.define("handbacks")
        .step(_step("s0"))
        .fork(lambda b: b.step(_step("left")), lambda b: b.step(_step("right")))
        .join()
        .step(_step("s1"))
        .step(_step("s2"), queue=other)
        .build()
    )
    async with local_harness.running([bp], Harness.options(concurrency=1)) as (server, worker):
        ids = [(await server.client.start(bp, {})).instance_id for _ in range(3)]
        for iid in ids:
            info = await Harness.finish(server, iid)
            assert info.status == "COMPLETED"
            assert {k: info.context[k] for k in ("s0", "left", "right", "s1", "s2")} == dict.fromkeys(
                ("s0", "left", "right", "s1", "s2"), 1
            )
            history = await server.client.history(iid)
            runs = sorted((e.node_id, e.outcome, e.attempt) for e in history if e.kind == "TASK")
            assert runs == sorted((n, "COMPLETED", 1) for n in ("s0", "left", "right", "s1", "s2"))
        # per instance: a branch at the fork, s1 at the last join, s2 at the queue change
        assert worker.stats.chained == 3 * len(ids)
        assert server.server.instances.chained == worker.stats.chained
