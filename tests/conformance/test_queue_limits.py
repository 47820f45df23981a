"""Queue limits (docs/flow-control.md#queue-limits), on both stores and in every execution mode:
a queue's max_running is never exceeded (checked from the handlers' own log), its rate spaces
the claims as it says under the test kit's clock (time skipping moves the rate's window), the
queue's stats show the limits and the rate's wait, limits survive a restart of the server on
PostgreSQL, and bad limits are refused, changing nothing."""

from __future__ import annotations

import asyncio
import threading
from datetime import timedelta

import grpc
import pytest

from wiggle import ExecutionMode, InvalidArgument
from wiggle._rpc import wiggle_pb2 as pb
from wiggle._rpc import wiggle_pb2_grpc as pb_grpc

from .conftest import Harness


class RunLog:
    """How many handlers ran at once, at most, and when each ran (the clock's ms)."""

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.running = 0
        self.most = 0
        self.count = 0

    def enter(self) -> None:
        with self.lock:
            self.running += 1
            self.count += 1
            self.most = max(self.most, self.running)

    def leave(self) -> None:
        with self.lock:
            self.running -= 1


async def test_a_queues_max_running_is_never_exceeded(harness: Harness) -> None:
    log = RunLog()

    async def step(ctx):
        log.enter()
        try:
            await asyncio.sleep(0.02)
        finally:
            log.leave()
        return {**ctx, "n": ctx.get("n", 0) + 1}

    bp = harness.define("capped").step(step, name="one").step(step, name="two").build()
    async with harness.running([bp], harness.options(concurrency=12)) as (server, _):
        await server.client.set_queue_limit(bp.name, max_running=2)
        infos = [await server.client.start(bp, {}) for _ in range(16)]
        done = [await harness.finish(server, info.instance_id, timeout=60) for info in infos]
        stat = next(q for q in await server.client.queues() if q.queue == bp.name)
    assert all(d.status == "COMPLETED" and d.context == {"n": 2} for d in done), done
    assert log.count == 32
    assert log.most <= 2, log.most
    assert stat.max_running == 2 and stat.rate_max == 0


async def test_a_rate_limit_spaces_the_claims_under_the_test_kits_clock(harness: Harness) -> None:
    bp = harness.define("rated").step(lambda ctx: {**ctx, "done": True}, name="call").build()
    async with harness.env([bp]) as env:
        await env.client.set_queue_limit(bp.name, rate_max=5, rate_period=10.0)  # one per 2 s
        t0 = env.clock.now()
        infos = [await env.start_workflow(bp, {"n": i}) for i in range(12)]
        done = [await env.wait(info) for info in infos]
        claims = sorted([(await env.history(d))[0].started_at for d in done])
    assert all(d.status == "COMPLETED" for d in done)
    assert claims == [t0 + 2000 * i for i in range(12)], [c - t0 for c in claims]
    for at in claims:  # any window of the period holds at most rate_max claims
        assert sum(1 for c in claims if at <= c < at + 10_000) <= 5


async def test_the_queue_page_shows_a_rate_limited_wait(harness: Harness) -> None:
    bp = harness.define("waits").step(lambda ctx: ctx, name="call").build()
    # the clock moves only when the test moves it (a shared schema's other due moments aside)
    async with harness.env([bp], time_skipping=False) as env:
        await env.client.set_queue_limit(bp.name, rate_max=1, rate_period=60.0)
        first = await env.wait(await env.start_workflow(bp, {}))
        claimed_at = (await env.history(first))[0].started_at
        second = await env.start_workflow(bp, {})
        stat = next(q for q in await env.client.queues() if q.queue == bp.name)
        assert stat.rate_max == 1 and stat.rate_period_millis == 60_000
        assert stat.rate_limited_until == claimed_at + 60_000 and stat.ready == 1, stat
        await env.advance(60)
        done = await env.wait(second)
        started_at = (await env.history(done))[0].started_at
    assert done.status == "COMPLETED"
    assert started_at >= claimed_at + 60_000


async def test_limits_are_kept_cleared_and_survive_a_restart(harness: Harness) -> None:
    queue = harness.define("kept").name
    async with harness.server() as server:
        await server.client.set_queue_limit(queue, max_running=3, rate_max=50, rate_period=1.0)
        stat = next(q for q in await server.client.queues() if q.queue == queue)
        assert (stat.max_running, stat.rate_max, stat.rate_period_millis) == (3, 50, 1000)
    if harness.store == "postgres":  # a new server on the same database reads them back
        async with harness.server() as server:
            stat = next(q for q in await server.client.queues() if q.queue == queue)
            assert (stat.max_running, stat.rate_max, stat.rate_period_millis) == (3, 50, 1000)
            await server.client.set_queue_limit(queue)  # no limit at all: removed
            assert queue not in [q.queue for q in await server.client.queues()]


BAD_LIMITS = [
    ({"queue": "bad queue", "max_running": 1}, "queue"),
    ({"max_running": -1}, "max_running must be an integer from 0"),
    ({"rate_max": 5}, "a rate limit needs a period"),
    ({"rate_max": 5, "rate_period_millis": 2 * 24 * 3600 * 1000}, "a rate limit needs a period"),
    ({"rate_period_millis": 1000}, "rate_period_millis without rate_max"),
]


async def test_bad_limits_are_refused_and_change_nothing(harness: Harness) -> None:
    queue = harness.define("refused").name
    async with harness.server() as server:
        async with grpc.aio.insecure_channel(server.target) as channel:
            stub = pb_grpc.WiggleControlPlaneStub(channel)
            for fields, words in BAD_LIMITS:
                with pytest.raises(grpc.aio.AioRpcError) as refused:
                    await stub.SetQueueLimit(pb.QueueLimit(**{"queue": queue, **fields}))
                assert refused.value.code() == grpc.StatusCode.INVALID_ARGUMENT, fields
                assert words in (refused.value.details() or ""), (fields, refused.value.details())
        assert queue not in [q.queue for q in await server.client.queues()]
        with pytest.raises(InvalidArgument, match="needs a rate_period"):
            await server.client.set_queue_limit(queue, rate_max=5)
        # a period that is not a whole number of ms was rounded: 0.0001 s stored as 1 ms, 0.0016 s
        # as 2 ms (an outside trial); 2.007 s was stored as 2008 ms
        for period, words in [
            (
                0.0001,
                "a rate limit needs a period from 1 ms to 86400000 ms (a day), got 0.1 ms (rate_period=0.0001 s)",
            ),
            (
                timedelta(microseconds=600),
                "a rate limit needs a period from 1 ms to 86400000 ms (a day), got 0.6 ms",
            ),
            (0.0016, "rate_period must be a whole number of milliseconds"),
        ]:
            with pytest.raises(InvalidArgument) as err:
                await server.client.set_queue_limit(queue, rate_max=1, rate_period=period)
            assert words in str(err.value), (period, str(err.value))
        assert queue not in [q.queue for q in await server.client.queues()]
        await server.client.set_queue_limit(queue, rate_max=1, rate_period=2.007)
        [stat] = [q for q in await server.client.queues() if q.queue == queue]
        assert stat.rate_period_millis == 2007


async def drain_on_two_servers(
    postgres_schema: str, name: str, rate_max: int, rate_period: float, count: int
) -> tuple[list[int], list[int]]:
    """Start ``count`` instances of a one-step workflow on a queue with that rate, on two servers
    sharing one database with a worker each, and drain them in real time. Every step ran once at
    its first attempt (asserted); the claims' moments (both servers run in this process: one
    clock), the rate blocks each server took and the steps each handed off."""
    harness = Harness("postgres", ExecutionMode.SERVER, postgres_schema)
    bp = harness.define(name).step(lambda ctx: {**ctx, "done": True}, name="call").build()
    async with harness.server() as one, harness.server() as two:
        await one.client.register(bp)
        await one.client.set_queue_limit(bp.name, rate_max=rate_max, rate_period=rate_period)
        async with one.worker([bp], harness.options()), two.worker([bp], harness.options()):
            infos = [await (one if i % 2 else two).client.start(bp, {"n": i}) for i in range(count)]
            done = [await harness.finish(one, info.instance_id, timeout=60) for info in infos]
            histories = [await one.client.history(d.instance_id) for d in done]
        taken = [server.server.store.rate_blocks.taken for server in (one, two)]  # type: ignore[attr-defined]
        handed = [server.server.instances.handed_off for server in (one, two)]
    assert all(d.status == "COMPLETED" for d in done), [d.error for d in done]
    steps = [[(e.node_id, e.outcome, e.attempt) for e in h if e.kind == "TASK"] for h in histories]
    assert all(s == [("call", "COMPLETED", 1)] for s in steps), steps
    return sorted(h[0].started_at for h in histories), taken, handed


def most_in_a_second(claims: list[int]) -> int:
    return max(sum(1 for c in claims if at <= c < at + 1000) for at in claims)


async def test_a_queue_rate_holds_across_two_servers(postgres_schema: str) -> None:
    """Two servers on one database, a worker on each, real time: however the claims fall between
    the servers, no second holds more than the queue's rate (a bound on counts, not on speed)."""
    claims, taken, handed = await drain_on_two_servers(postgres_schema, "two-servers", 10, 1.0, 25)
    assert most_in_a_second(claims) <= 10, [c - claims[0] for c in claims]
    assert taken == [0, 0] and handed == [0, 0]  # a slow rate: claim by claim, under the row's lock


async def test_two_servers_racing_for_a_spent_rate_admit_one_claim(postgres_schema: str) -> None:
    """A rate of one claim an hour and two READY steps, polled by a worker on each of two
    servers: exactly one is claimed, whichever server's claim commits first; the other waits for
    the rate, visibly."""
    harness = Harness("postgres", ExecutionMode.SERVER, postgres_schema)
    bp = harness.define("spent").step(lambda ctx: {**ctx, "done": True}, name="call").build()
    async with harness.server() as one, harness.server() as two:
        await one.client.register(bp)
        await one.client.set_queue_limit(bp.name, rate_max=1, rate_period=3600.0)
        infos = [await one.client.start(bp, {"n": i}) for i in range(2)]
        async with one.worker([bp], harness.options()), two.worker([bp], harness.options()):

            async def one_done() -> bool:
                return any([(await one.client.get(i.instance_id)).status == "COMPLETED" for i in infos])

            while not await one_done():
                await asyncio.sleep(0.05)
            await asyncio.sleep(1.0)  # both workers poll again meanwhile: a second claim would show
            statuses = sorted([(await one.client.get(i.instance_id)).status for i in infos])
            stat = next(q for q in await two.client.queues() if q.queue == bp.name)
    assert statuses == ["COMPLETED", "RUNNING"], statuses
    assert stat.ready == 1 and stat.rate_limited_until > 0, stat


async def test_two_servers_drain_a_fast_rate_in_blocks(postgres_schema: str) -> None:
    """A rate of 160 claims per 16 s (blocks of up to 8 moments 100 ms apart, each spent at most
    800 ms late: rate_blocks.py) on a queue two servers drain: the claims went through blocks, and
    no second holds more claims than the blocks allow, (1000 + 800) / 100 + 1 = 19 (one claim at
    a time under the row's lock: 11)."""
    claims, taken, _ = await drain_on_two_servers(postgres_schema, "blocks", 160, 16.0, 40)
    assert sum(taken) > 0, taken
    assert most_in_a_second(claims) <= 19, [c - claims[0] for c in claims]
