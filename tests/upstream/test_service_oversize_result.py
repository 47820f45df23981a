"""An upstream worker's step result over the payload limit fails the step for good.

Upstream's worker turns a refused CompleteTask into a retryable FailTask, which its default policy
(retry forever, 1 s apart) reruns without end. So the server fails the step non-retryably, naming
the size and the limit (as our own CompleteTask does with an oversize context), and answers the
CompleteTask ``ok``: the worker has nothing left to retry.
"""

from __future__ import annotations

from collections.abc import AsyncIterator

import pytest

from wiggle._clock import VirtualClock
from wiggle._rpc.upstream import wiggle_pb2 as upb

from .service_kit import FOREVER, NOT_FOUND, STORES, Up, document, end, open_server, task, unique, value

LIMIT = 4096
BIG = {"x": "y" * (LIMIT + 10)}


@pytest.fixture(params=STORES)
async def up(request: pytest.FixtureRequest) -> AsyncIterator[Up]:
    async with open_server(
        request.param, VirtualClock(start=1_700_000_000_000), max_payload_bytes=LIMIT
    ) as server:
        yield server


def _flow(name: str) -> dict:
    # upstream's default: retry forever, 1 s apart (what an upstream DSL step gets)
    return document(
        name, [task("n0", name, "big", "n1", retry=FOREVER), task("n1", name, "after", "end"), end()]
    )


async def test_an_oversize_result_fails_the_step_for_good(up: Up) -> None:
    name = unique("up-oversize")
    await up.register(_flow(name))
    iid = await up.start(name, {"k": 1})
    t = await up.claim(name)
    request = upb.TaskResultRequest(task_id=t.task_id, lease_owner=t.lease_owner, result=value(BIG))
    size = request.result.ByteSize()
    ack = await up.stub.CompleteTask(request, timeout=15)
    assert ack.ok  # settled: the worker does not turn it into a retryable failure
    assert await up.status(iid) == "FAILED"
    detail = await up.get(iid)
    reason = f"{detail.instance.termination_reason} {detail.instance.error}"
    assert f"step result is {size} bytes; the limit is {LIMIT} bytes" in reason, reason
    (entry,) = [e for e in await up.history(iid) if e.node_id == "big"]
    assert entry.outcome != "RETRY"
    assert f"the limit is {LIMIT} bytes" in entry.error
    # nothing to rerun: no task comes back, even after upstream's 1 s backoff
    assert up.clock is not None
    up.clock.advance(120_000)
    assert await up.poll(name, wait_millis=0) == []
    assert await up.context(iid) == {"k": 1}


async def test_an_oversize_result_for_a_task_not_held_is_not_found(up: Up) -> None:
    name = unique("up-oversize-stale")
    await up.register(_flow(name))
    iid = await up.start(name, {"k": 1})
    t = await up.claim(name)
    request = upb.TaskResultRequest(task_id=t.task_id, lease_owner="intruder", result=value(BIG))
    await up.fails("CompleteTask", request, NOT_FOUND)
    assert await up.status(iid) == "RUNNING"  # the real owner can still report
    await up.complete(t, {"small": True})
    after = await up.claim(name)
    assert after.step_name == "after"
