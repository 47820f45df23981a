"""Per-key rate limits on steps and fair claims across keys (docs/flow-control.md#per-key-rate-limits,
#fair-claims-across-keys), on both stores and in every execution mode: a key's rate admits its
count over virtual time (time skipping jumps to the key's next moment), a key over its rate does
not hold back other keys and its wait shows on the queue page, a group shares one budget between
workflows, a local run never chains into a rate-limited step, bad rate limits are refused when
the workflow is built; a claim rotates over the keys of limited steps, and is not cut short by
one key's backlog ahead of the steps of other keys. On PostgreSQL a rate also holds on the
database's clock, across two servers."""

from __future__ import annotations

import asyncio
import json
import re
import uuid

import grpc
import msgspec
import pytest

from wiggle import ExecutionMode, InvalidArgument, Limit, RateLimit, Workflow
from wiggle._rpc import wiggle_pb2 as pb
from wiggle._rpc import wiggle_pb2_grpc as pb_grpc

from .conftest import Harness


def _group(harness: Harness, base: str) -> str:
    return f"{base}-{harness.mode.value.lower()}-{uuid.uuid4().hex[:8]}"


def _rated(harness: Harness, base: str, rate: RateLimit):
    return harness.define(base).step(lambda ctx: {**ctx, "done": True}, name="call", rate_limit=rate).build()


async def _claim_starts(env, infos) -> list[int]:
    done = [await env.wait(info) for info in infos]
    assert all(d.status == "COMPLETED" for d in done), [d.error for d in done]
    return sorted([(await env.history(d))[0].started_at for d in done])


async def test_a_key_rate_admits_its_count_over_virtual_time(harness: Harness) -> None:
    """20 claims a second for 10 s of virtual time: 200 (memory). PostgreSQL runs a shorter
    stretch of the same (5 a second for 4 s: 20), to keep the test short."""
    per_second, seconds = (20, 10) if harness.store == "memory" else (5, 4)
    bp = _rated(harness, "rated", RateLimit(key="merchant", max=per_second, period=1.0))
    async with harness.env([bp]) as env:
        t0 = env.clock.now()
        infos = [
            await env.start_workflow(bp, {"merchant": "m1", "n": i}) for i in range(per_second * seconds + 10)
        ]
        other = await env.start_workflow(bp, {"merchant": "m2"})  # another key: not held back
        claims = await _claim_starts(env, infos)
        other_claim = await _claim_starts(env, [other])
    within = sum(1 for c in claims if c < t0 + seconds * 1000)
    assert abs(within - per_second * seconds) <= 1, (within, [c - t0 for c in claims[:5]])
    for at in claims:  # any window of the period holds at most max claims
        assert sum(1 for c in claims if at <= c < at + 1000) <= per_second
    assert other_claim[0] < t0 + 1000  # m2 went at once, while m1's backlog waited


async def test_a_key_over_its_rate_waits_visibly_and_other_keys_go(harness: Harness) -> None:
    bp = _rated(harness, "waits", RateLimit(key="merchant", max=1, period=60.0))
    # the clock moves only when the test moves it
    async with harness.env([bp], time_skipping=False) as env:
        first = await env.wait(await env.start_workflow(bp, {"merchant": "m1"}))
        claimed_at = (await env.history(first))[0].started_at
        second = await env.start_workflow(bp, {"merchant": "m1"})
        other = await env.wait(await env.start_workflow(bp, {"merchant": "m2"}))
        assert other.status == "COMPLETED"
        stat = next(q for q in await env.client.queues() if q.queue == bp.name)
        assert stat.rate_waiting == 1 and stat.rate_waiting_until == claimed_at + 60_000, stat
        assert (await env.client.get(second.instance_id)).status == "RUNNING"
        assert not await env.history(second)  # never claimed
        await env.advance(60)
        done = await env.wait(second)
        started_at = (await env.history(done))[0].started_at
        after = next(q for q in await env.client.queues() if q.queue == bp.name)
    assert done.status == "COMPLETED" and started_at >= claimed_at + 60_000
    assert after.rate_waiting == 0 and after.rate_waiting_until == 0


async def test_a_group_without_a_key_is_one_budget_across_workflows(harness: Harness) -> None:
    rate = RateLimit(max=1, period=60.0, group=_group(harness, "stripe"))
    pay = _rated(harness, "pay", rate)
    refund = _rated(harness, "refund", rate)
    async with harness.env([pay, refund], time_skipping=False) as env:
        first = await env.wait(await env.start_workflow(pay, {"merchant": "m1"}))
        claimed_at = (await env.history(first))[0].started_at
        second = await env.start_workflow(refund, {"merchant": "m2"})  # another workflow, another value
        stat = None
        for _ in range(100):
            stat = next((q for q in await env.client.queues() if q.queue == refund.name), None)
            if stat is not None and stat.rate_waiting == 1:
                break
            await asyncio.sleep(0.02)
        assert stat is not None and stat.rate_waiting == 1, stat
        assert not await env.history(second)
        await env.advance(60)
        done = await env.wait(second)
        started_at = (await env.history(done))[0].started_at
    assert done.status == "COMPLETED" and started_at >= claimed_at + 60_000


async def test_a_local_run_never_chains_into_a_rate_limited_step(harness: Harness) -> None:
    bp = (
        harness.define("chain")
        .step(lambda ctx: {**ctx, "checked": True}, name="check")
        .step(
            lambda ctx: {**ctx, "charged": True},
            name="charge",
            rate_limit=RateLimit(key="m", max=1, period=60.0),
        )
        .step(lambda ctx: {**ctx, "receipt": True}, name="receipt")
        .build()
    )
    async with harness.env([bp], time_skipping=False) as env:
        first = await env.wait(await env.start_workflow(bp, {"m": "m1"}))
        assert first.status == "COMPLETED" and first.context["receipt"]
        second = await env.start_workflow(bp, {"m": "m1"})
        for _ in range(200):
            now = await env.client.get(second.instance_id)
            if [(t.node_id, t.status) for t in now.tokens] == [("charge", "READY")]:
                break
            await asyncio.sleep(0.02)
        assert [(t.node_id, t.status) for t in now.tokens] == [("charge", "READY")], now.tokens
        assert [h.node_id for h in await env.history(second)] == ["check"]
        await env.advance(60)
        done = await env.wait(second)
    assert done.status == "COMPLETED" and done.context["charged"] and done.context["receipt"]


async def test_bad_rate_limits_are_refused_when_the_workflow_is_built(harness: Harness) -> None:
    for bad, words in [
        (RateLimit(key="", max=1), "step 's': a rate limit's key must name a context key"),
        (RateLimit(key="m", max=0), "step 's': rate limit max must be at least 1"),
        (RateLimit(key="m", max=-1), "step 's': rate limit max"),
        (RateLimit(key="m", max=1, period=0), "step 's': rate limit period must be from 0.001"),
        (RateLimit(key="m", max=1, period=-1.0), "step 's': rate limit period"),
        (RateLimit(key="m", max=1, period=2 * 86400.0), "step 's': rate limit period"),
        (RateLimit(key="m", max=1, period=float("nan")), "step 's': rate limit period"),
        # under 1 ms ran as 1 ms, 1.6 ms as 2 ms (an outside trial)
        (RateLimit(key="m", max=1, period=0.0006), "step 's': rate limit period must be from 0.001"),
        (
            RateLimit(key="m", max=1, period=0.0016),
            r"step 's': rate limit period must be a whole number of milliseconds .*got 0.0016 \(1.6 ms\)",
        ),
        (RateLimit(max=1, group="no spaces"), "rate limit group"),
    ]:
        with pytest.raises(InvalidArgument, match=words):
            harness.define("bad").step(lambda ctx: ctx, name="s", rate_limit=bad).build()
    with pytest.raises(InvalidArgument, match="wiggle.RateLimit"):
        Workflow.define("bad").step(lambda ctx: ctx, name="s", rate_limit=5)  # type: ignore[arg-type]


async def test_one_group_with_two_budgets_in_a_workflow_is_refused_by_the_sdk_and_the_server(
    harness: Harness,
) -> None:
    def two(first: dict[str, object], second: dict[str, object]) -> Workflow:
        return (
            harness.define("split")
            .step(lambda ctx: ctx, name="a", **first)  # type: ignore[arg-type]
            .step(lambda ctx: ctx, name="b", **second)  # type: ignore[arg-type]
        )

    rate = "rate group 'sms' with different budgets (max=10, period=1.0 on 'a', max=20, period=1.0 on 'b')"
    for first, second, words in [
        (
            {"rate_limit": RateLimit(max=10, group="sms")},
            {"rate_limit": RateLimit(max=20, group="sms")},
            rate,
        ),
        (
            {"rate_limit": RateLimit(max=10, period=1.0, group="sms")},
            {"rate_limit": RateLimit(max=10, period=60.0, group="sms")},
            "max=10, period=60.0 on 'b'",
        ),
        (
            {"concurrency": Limit(key="c", max=1, group="card")},
            {"concurrency": Limit(key="c", max=2, group="card")},
            "concurrency group 'card' with different budgets (max=1 on 'a', max=2 on 'b')",
        ),
    ]:
        with pytest.raises(InvalidArgument, match=re.escape(words)):
            two(first, second).build()
    # the same budget twice is one group; different groups (or none) are independent
    two(
        {"rate_limit": RateLimit(max=10, group="sms")}, {"rate_limit": RateLimit(max=10, group="sms")}
    ).build()
    two(
        {"rate_limit": RateLimit(max=10, group="sms")}, {"rate_limit": RateLimit(max=20, group="mms")}
    ).build()
    two({"rate_limit": RateLimit(max=10)}, {"rate_limit": RateLimit(max=20)}).build()
    # a definition that bypasses the SDK (another client, a hand-written JSON) is refused by the
    # server, and nothing is registered
    bp = two(
        {"rate_limit": RateLimit(max=10, group="sms")}, {"rate_limit": RateLimit(max=10, group="sms")}
    ).build()
    data = msgspec.json.decode(bp.definition.to_json())
    rated = [node for node in data["nodes"] if node.get("rate")]
    assert len(rated) == 2
    rated[1]["rate"]["max"] = 20
    async with harness.server() as server:
        async with grpc.aio.insecure_channel(server.target) as channel:
            stub = pb_grpc.WiggleControlPlaneStub(channel)
            with pytest.raises(grpc.aio.AioRpcError) as err:
                await stub.RegisterWorkflow(
                    pb.RegisterWorkflowRequest(definition_json=msgspec.json.encode(data))
                )
        assert err.value.code() == grpc.StatusCode.INVALID_ARGUMENT
        assert "share the rate group 'sms' with different budgets" in (err.value.details() or "")
        assert bp.name not in [w.name for w in await server.client.list_workflows()]


async def test_a_rate_limit_travels_with_the_definition(harness: Harness) -> None:
    rate = RateLimit(key="merchant", max=50, period=1.0, group=_group(harness, "stripe"))
    bp = _rated(harness, "wire", rate)
    async with harness.server() as server:
        await server.client.register(bp)
        info = await server.client.get_workflow(bp.name)
    node = next(n for n in info.definition.nodes if n.id == "call")
    assert node.rate == rate


# ---------------------------------------------------------------- fair claims across keys


async def _claim(server, queue: str, n: int) -> list[pb.TaskActivation]:
    """One claim of up to ``n`` steps by a worker that never reports (its steps stay RUNNING)."""
    async with grpc.aio.insecure_channel(server.target) as channel:
        stub = pb_grpc.WiggleControlPlaneStub(channel)
        for _ in range(100):
            reply = await stub.PollTasks(
                pb.PollTasksRequest(worker_id="raw-worker", queues=[queue], max_tasks=n, wait_millis=200)
            )
            if reply.tasks:
                return list(reply.tasks)
    raise AssertionError(f"nothing to claim on {queue!r}")


def _key_of(task: pb.TaskActivation) -> str:
    return json.loads(task.context_json)["customer"]


def _limited(harness: Harness, base: str, most: int):
    return (
        harness.define(base)
        .step(lambda ctx: ctx, name="charge", concurrency=Limit(key="customer", max=most))
        .build()
    )


async def test_consecutive_claims_rotate_over_the_keys(harness: Harness) -> None:
    """ada's six steps are the oldest; bob, cy and dee have two each, younger. One claim of four
    takes one step of each key; then single claims go round the keys, not down ada's backlog."""
    bp = _limited(harness, "fair", most=10)
    async with harness.server() as server:
        await server.client.register(bp)
        for _ in range(6):
            await server.client.start(bp, {"customer": "ada"})
        for _ in range(2):
            for key in ("bob", "cy", "dee"):
                await server.client.start(bp, {"customer": key})
        first = [_key_of(t) for t in await _claim(server, bp.name, 4)]
        singles = [_key_of((await _claim(server, bp.name, 1))[0]) for _ in range(4)]
    assert sorted(first) == ["ada", "bob", "cy", "dee"], first
    assert singles == ["ada", "bob", "cy", "dee"], singles


async def test_a_claim_is_not_cut_short_by_one_keys_backlog(harness: Harness) -> None:
    """Ten steps of a key with room for one, then five of five other keys: a claim of five
    takes five (one of the first key and four others); with the first key full, the five others."""
    bp = _limited(harness, "short", most=1)
    async with harness.server() as server:
        await server.client.register(bp)
        for _ in range(10):
            await server.client.start(bp, {"customer": "ada"})
        for key in ("bob", "cy", "dee", "eve", "fay"):
            await server.client.start(bp, {"customer": key})
        taken = [_key_of(t) for t in await _claim(server, bp.name, 5)]
        assert sorted(taken) == ["ada", "bob", "cy", "dee", "eve"], taken
        # ada is full now (one running); fay is the only other key with a step left
        rest = [_key_of(t) for t in await _claim(server, bp.name, 5)]
        assert rest == ["fay"], rest

    full = _limited(harness, "full", most=1)
    async with harness.server() as server:
        await server.client.register(full)
        await server.client.start(full, {"customer": "ada"})
        assert [_key_of(t) for t in await _claim(server, full.name, 1)] == ["ada"]  # ada is full
        for _ in range(10):
            await server.client.start(full, {"customer": "ada"})
        for key in ("bob", "cy", "dee", "eve", "fay"):
            await server.client.start(full, {"customer": key})
        taken = [_key_of(t) for t in await _claim(server, full.name, 5)]
    assert sorted(taken) == ["bob", "cy", "dee", "eve", "fay"], taken


# ---------------------------------------------------------------- PostgreSQL: the database's clock


@pytest.mark.postgres
async def test_a_key_rate_holds_on_the_databases_clock_across_two_servers(postgres_schema: str) -> None:
    """Two servers on one database, a worker on each, real time: however the claims fall between
    them, no second holds more than the key's rate (a bound on counts, not on speed)."""
    harness = Harness("postgres", ExecutionMode.SERVER, postgres_schema)
    bp = _rated(harness, "db-clock", RateLimit(key="merchant", max=10, period=1.0))
    async with harness.server() as one, harness.server() as two:
        await one.client.register(bp)
        async with one.worker([bp], harness.options()), two.worker([bp], harness.options()):
            infos = [await (one if i % 2 else two).client.start(bp, {"merchant": "m1"}) for i in range(25)]
            done = [await harness.finish(one, info.instance_id, timeout=60) for info in infos]
            claims = sorted([(await one.client.history(d.instance_id))[0].started_at for d in done])
    assert all(d.status == "COMPLETED" for d in done)
    for at in claims:  # the claims' clock is the servers' (one machine's clock with the database's)
        assert sum(1 for c in claims if at <= c < at + 1000) <= 10 + 1, [c - claims[0] for c in claims]
