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

from .service_kit import NOT_FOUND, STORES, WORKER, Up, flow, open_server, unique

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
    assert await _duties(up, eventually) >= 1
    [token] = (await up.get(iid)).tokens
    assert token.status == "READY" and not token.HasField("lease_owner")
    # an expired lease is a retryable failure: the step's retry policy (upstream's default, 1 s)
    assert token.available_at == clock.now() + 1_000 and token.attempt == 2
    clock.advance(1_000)
    again = await up.claim(name, worker="up-worker-2")
    assert again.task_id == t.task_id and again.attempt == 2 and again.lease_owner == "up-worker-2"
    # the first worker lost it: each of its reports is NOT_FOUND and changes nothing
    before = await up.snapshot()
    await up.fails("CompleteTask", upb.TaskResultRequest(task_id=t.task_id, lease_owner=WORKER), NOT_FOUND)
    await up.fails("HeartbeatTask", upb.HeartbeatRequest(task_id=t.task_id, lease_owner=WORKER), NOT_FOUND)
    await up.fails("FailTask", upb.TaskFailureRequest(task_id=t.task_id, lease_owner=WORKER), NOT_FOUND)
    assert await up.snapshot() == before
    await up.complete(again, {"by": 2})
    assert await up.context(iid) == {"k": 1, "by": 2}
