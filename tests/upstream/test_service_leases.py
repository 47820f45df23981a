"""Leases through upstream Wiggle's service, on a virtual clock so every expiry is exact.

PollTasks' ``lease_millis`` and HeartbeatTask's ``extend_millis`` are honoured, clamped to
[1000, WIGGLE_MAX_LEASE_MILLIS]; 0 asks for the server's lease (docs/upstream.md#worker-reports). An
expired lease (the clock duty) makes the step claimable again, and the old owner's reports are
NOT_FOUND.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Callable
from typing import Any

import pytest

from wiggle._clock import VirtualClock
from wiggle._rpc.upstream import wiggle_pb2 as upb

from .service_kit import NOT_FOUND, STORES, WORKER, Up, document, end, flow, open_server, task, unique

LEASE = 30_000  # the server's lease
MAX_LEASE = 120_000  # the longest a worker may ask for
MIN_LEASE = 1_000  # the shortest (wiggle/_engine/engine.py MIN_LEASE_MILLIS)


@pytest.fixture(params=STORES)
async def up(request: pytest.FixtureRequest) -> AsyncIterator[Up]:
    clock = VirtualClock(start=1_700_000_000_000)
    async with open_server(request.param, clock, lease_millis=LEASE, max_lease_millis=MAX_LEASE) as server:
        yield server


def _clock(up: Up) -> VirtualClock:
    assert up.clock is not None
    return up.clock


async def _duties(up: Up, eventually: Callable[..., Any]) -> int:
    """Run the clock duties now (on PostgreSQL once this node leads them); how many acted."""
    instances = up.server.instances
    await eventually(instances.store.clock_leader, what="this node leads the clock duties")
    return await instances.run_clock_duties(_clock(up).now())


@pytest.mark.parametrize(
    ("asked", "granted"),
    [(0, LEASE), (5_000, 5_000), (10, MIN_LEASE), (10**9, MAX_LEASE), (MAX_LEASE, MAX_LEASE)],
)
async def test_poll_lease_millis_is_honoured_and_clamped(up: Up, asked: int, granted: int) -> None:
    name = unique("up-lease")
    await up.register(flow(name, "a"))
    iid = await up.start(name)
    t = await up.claim(name, lease_millis=asked)
    now = _clock(up).now()
    assert t.lease_expires_at - now == granted
    assert t.lease_owner == WORKER
    info = await up.info(iid)
    assert [tok.lease_expires_at for tok in info.tokens] == [t.lease_expires_at]


@pytest.mark.parametrize(
    ("asked", "granted"),
    [(0, LEASE), (45_000, 45_000), (1, MIN_LEASE), (10**12, MAX_LEASE)],
)
async def test_heartbeat_extend_millis_is_honoured_and_clamped(up: Up, asked: int, granted: int) -> None:
    name = unique("up-beat")
    await up.register(flow(name, "a"))
    iid = await up.start(name)
    t = await up.claim(name, lease_millis=5_000)
    clock = _clock(up)
    clock.advance(4_000)
    beat = await up.stub.HeartbeatTask(
        upb.HeartbeatRequest(task_id=t.task_id, lease_owner=t.lease_owner, extend_millis=asked), timeout=15
    )
    assert beat.lease_expires_at - clock.now() == granted  # from now, not from the old expiry
    info = await up.info(iid)
    assert [tok.lease_expires_at for tok in info.tokens] == [beat.lease_expires_at]


async def test_a_lease_runs_out_when_asked_and_not_before(up: Up, eventually: Callable[..., Any]) -> None:
    name = unique("up-expiry")
    await up.register(flow(name, "a"))
    iid = await up.start(name, {"k": 1})
    t = await up.claim(name, lease_millis=5_000)
    clock = _clock(up)

    clock.advance(4_999)  # a moment before: still the first worker's
    await _duties(up, eventually)
    [token] = (await up.get(iid)).tokens
    assert (token.status, token.lease_owner) == ("RUNNING", WORKER)
    beat = await up.stub.HeartbeatTask(
        upb.HeartbeatRequest(task_id=t.task_id, lease_owner=WORKER, extend_millis=5_000), timeout=15
    )
    assert beat.lease_expires_at == clock.now() + 5_000

    clock.advance(5_000)  # the extended lease runs out
    # the duty runs here, or in the server's own clock loop woken by the clock: either way, once
    await _duties(up, eventually)

    async def expired() -> bool:
        [token] = (await up.get(iid)).tokens
        return bool(token.status == "READY")

    await eventually(expired, what="the expired lease makes the step READY again")
    [token] = (await up.get(iid)).tokens
    assert token.status == "READY" and not token.HasField("lease_owner")
    # an expired lease is a retryable failure: the step's retry policy (upstream's default, 1 s)
    assert token.available_at == clock.now() + 1_000 and token.attempt == 2
    clock.advance(1_000)
    again = await up.claim(name, worker="up-worker-2")
    # the same token, a new claim: its task id fences the first worker's reports off
    assert again.task_id == t.task_id.replace("@1", "@2") and again.attempt == 2
    assert again.lease_owner == "up-worker-2"
    # the first worker lost it: each of its reports is NOT_FOUND and changes nothing
    before = await up.snapshot()
    await up.fails("CompleteTask", upb.TaskResultRequest(task_id=t.task_id, lease_owner=WORKER), NOT_FOUND)
    await up.fails("HeartbeatTask", upb.HeartbeatRequest(task_id=t.task_id, lease_owner=WORKER), NOT_FOUND)
    await up.fails("FailTask", upb.TaskFailureRequest(task_id=t.task_id, lease_owner=WORKER), NOT_FOUND)
    assert await up.snapshot() == before
    await up.complete(again, {"by": 2})
    assert await up.context(iid) == {"k": 1, "by": 2}


async def test_an_empty_short_poll_says_when_the_next_step_is_due(up: Up) -> None:
    """retry_after_millis: 0 after a long poll, or with nothing due; after a short poll the time
    until the next step on the queues is due (a retry's backoff here), at most 5 s."""
    name = unique("up-comeback")
    retry = {"maxAttempts": 3, "initialBackoffMillis": 3_000, "multiplier": 1.0, "maxBackoffMillis": 3_000}
    await up.register(document(name, [task("n0", name, "flaky", "end", retry=retry), end()]))

    async def empty_poll(wait_millis: int) -> int:
        reply = await up.stub.PollTasks(
            upb.PollRequest(worker_id=WORKER, queues=[name], max=1, wait_millis=wait_millis), timeout=15
        )
        assert not reply.tasks
        return int(reply.retry_after_millis)

    assert await empty_poll(0) == 0  # nothing on the queue at all
    await up.start(name)
    (step,) = await up.poll(name)
    await up.stub.FailTask(
        upb.TaskFailureRequest(
            task_id=step.task_id, lease_owner=step.lease_owner, message="blip", retryable=True
        ),
        timeout=15,
    )
    assert await empty_poll(0) == 3_000
    _clock(up).advance(1_000)
    assert await empty_poll(0) == 2_000
    assert await empty_poll(1) == 0  # a long poll that found nothing: poll again at once
    long_retry = {**retry, "initialBackoffMillis": 60_000, "maxBackoffMillis": 60_000}
    other = unique("up-comeback-long")
    await up.register(document(other, [task("n0", other, "slow", "end", retry=long_retry), end()]))
    await up.start(other)
    (step,) = await up.poll(other)
    await up.stub.FailTask(
        upb.TaskFailureRequest(
            task_id=step.task_id, lease_owner=step.lease_owner, message="blip", retryable=True
        ),
        timeout=15,
    )
    reply = await up.stub.PollTasks(upb.PollRequest(worker_id=WORKER, queues=[other], max=1), timeout=15)
    assert not reply.tasks and reply.retry_after_millis == 5_000  # capped
