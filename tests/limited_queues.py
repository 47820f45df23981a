"""Queues whose limits are in use, for the tests of what shows them: the dashboard's Queues page
(tests/dashboard/test_queue_limits_page.py, test_browser.py) and ``wiggle queues``
(tests/server/test_cli_limits.py).

``hold_limited_queues(client, prefix)`` registers two workflows and leaves, on a running server:

- queue ``<prefix>-keyed`` with ``max_running=3``; its one step has ``Limit(key="customer",
  max=1)`` and a 2-hour attempt limit (past the lease: the lease ends first), in a workflow with a
  3-hour time limit: ada's and
  bob's attempts are claimed and never reported (they hold 2 key slots), two more of ada's wait
  for hers;
- queue ``<prefix>-rated`` with a rate of 1 claim per hour: one claim made, a second step
  waits for the rate (``rate_limited_until`` = that claim + 1 h).

The claims are made through the client's gRPC stub as workers that never report (``HOLDER`` on
the keyed queue, ``RATE_HOLDER`` on the rated one), so nothing moves while a test reads. Give the server a lease longer than the test
(``lease_millis``), or the held slots come back when their leases run out.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from wiggle import Limit, Workflow
from wiggle._rpc import wiggle_pb2 as pb

__all__ = ["LimitedQueues", "hold_limited_queues", "HOLDER", "RATE_HOLDER", "LONG_LEASE_MILLIS"]

HOLDER = "holder"
RATE_HOLDER = "rate-holder"
#: a lease no test outlives: the held slots stay held while the test reads
LONG_LEASE_MILLIS = 3_600_000


def _charge(ctx: dict[str, Any]) -> dict[str, Any]:
    return {**ctx, "charged": True}


def _call(ctx: dict[str, Any]) -> dict[str, Any]:
    return {**ctx, "called": True}


@dataclass
class LimitedQueues:
    keyed: str  # the queue (and workflow) with max_running 3 and a key limit of 1
    rated: str  # the queue (and workflow) with 1 claim per hour
    held: list[pb.TaskActivation]  # ada's and bob's claimed attempts on ``keyed``
    waiting: list[str]  # the instances of ada's two steps waiting for her slot
    rated_claim: pb.TaskActivation  # the claim that started the rate's hour
    rate_limited_until: int  # ms: that claim + 1 h


async def _claim(client: Any, queue: str, worker: str) -> pb.TaskActivation:
    """One step of ``queue`` claimed as ``worker`` (long polls until the claim is made)."""
    for _ in range(60):
        reply = await client.stub.PollTasks(
            pb.PollTasksRequest(worker_id=worker, queues=[queue], max_tasks=1, wait_millis=1000)
        )
        if reply.tasks:
            assert len(reply.tasks) == 1, reply
            return reply.tasks[0]
    raise AssertionError(f"nothing to claim on {queue!r}")


async def hold_limited_queues(client: Any, prefix: str) -> LimitedQueues:
    """Register, limit, start and claim as the module says; what was held and until when."""
    keyed = (
        Workflow.define(f"{prefix}-keyed", timeout=3 * 3600)
        .step(_charge, name="charge", timeout=2 * 3600, concurrency=Limit(key="customer", max=1))
        .build()
    )
    rated = Workflow.define(f"{prefix}-rated").step(_call, name="call").build()
    for flow in (keyed, rated):
        await client.register(flow)
    await client.set_queue_limit(keyed.name, max_running=3)
    await client.set_queue_limit(rated.name, rate_max=1, rate_period=3600)
    held = []
    for customer in ("ada", "bob"):
        await client.start(keyed, {"customer": customer})
        held.append(await _claim(client, keyed.name, HOLDER))
    waiting = [(await client.start(keyed, {"customer": "ada"})).instance_id for _ in range(2)]
    await client.start(rated, {})
    first = await _claim(client, rated.name, RATE_HOLDER)
    await client.start(rated, {})
    claimed_at = first.lease_expires_at - first.lease_millis
    return LimitedQueues(keyed.name, rated.name, held, waiting, first, claimed_at + 3_600_000)
