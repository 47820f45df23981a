"""AdvanceRun in upstream's message shapes: a local run (LOCAL_SYNC) of upstream's Java workers,
reported step by step or in one batch (docs/upstream.md#local-runs-advancerun, docs/semantics.md#advancerun).
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import Any

import pytest

from wiggle._clock import VirtualClock
from wiggle._rpc.upstream import wiggle_pb2 as upb

from .service_kit import (
    NOT_FOUND,
    PRECONDITION,
    STORES,
    WORKER,
    Up,
    document,
    end,
    open_server,
    predicate,
    task,
    unique,
    value,
)

LEASE = 30_000


@pytest.fixture(params=STORES)
async def up(request: pytest.FixtureRequest) -> AsyncIterator[Up]:
    clock = VirtualClock(start=1_700_000_000_000)
    async with open_server(request.param, clock, lease_millis=LEASE) as server:
        yield server


def _local(name: str) -> dict[str, Any]:
    """validate (TASK) -> in-stock (PREDICATE: false ends "gated") -> charge (TASK) -> END, one queue."""
    return document(
        name,
        [
            task("n0", name, "validate", "n1"),
            predicate("n1", name, "in-stock", "n2", "gated"),
            task("n2", name, "charge", "end"),
            end(),
            end("gated", reason="gated:in-stock"),
        ],
        executionMode="LOCAL_SYNC",
        queues=[name],
    )


def merge(node_id: str, diff: dict[str, Any]) -> upb.StepResult:
    return upb.StepResult(node_id=node_id, merge=value(diff))


def branch(node_id: str, taken: bool) -> upb.StepResult:
    return upb.StepResult(node_id=node_id, predicate_value=taken)


async def _advance(
    up: Up, t: upb.TaskActivation, *steps: upb.StepResult, final: bool = False
) -> upb.AdvanceRunResult:
    request = upb.AdvanceRunRequest(task_id=t.task_id, lease_owner=t.lease_owner, steps=steps, final=final)
    return await up.stub.AdvanceRun(request, timeout=15)


async def _where(up: Up, iid: str) -> tuple[str, str, str]:
    [token] = (await up.get(iid)).tokens
    return token.node_id, token.status, token.lease_owner


async def test_a_local_run_step_by_step(up: Up) -> None:
    name = unique("up-local")
    await up.register(_local(name))
    iid = await up.start(name, {"order": 7, "drop": True})
    t = await up.claim(name)
    assert (t.execution_mode, t.step_name, t.kind) == ("LOCAL_SYNC", "validate", "TASK")
    assert up.clock is not None
    now = up.clock.now()

    first = await _advance(up, t, merge("validate", {"valid": True, "drop": None}))
    assert (first.instance_status, first.next_task_id) == ("RUNNING", t.task_id)
    assert first.lease_expires_at == now + LEASE
    assert await _where(up, iid) == ("in-stock", "RUNNING", WORKER)
    assert await up.context(iid) == {"order": 7, "valid": True}

    second = await _advance(up, t, branch("in-stock", True))
    assert (second.instance_status, second.next_task_id) == ("RUNNING", t.task_id)
    assert await _where(up, iid) == ("charge", "RUNNING", WORKER)

    # a step that does not follow the graph, or another worker's report: refused, nothing applied
    before = await up.snapshot()
    details = await up.fails(
        "AdvanceRun",
        upb.AdvanceRunRequest(task_id=t.task_id, lease_owner=WORKER, steps=[merge("validate", {"x": 1})]),
        PRECONDITION,
    )
    assert "'validate'" in details and "'charge'" in details and "nothing was applied" in details
    details = await up.fails(
        "AdvanceRun",
        upb.AdvanceRunRequest(
            task_id=t.task_id, lease_owner="intruder", steps=[merge("charge", {"x": 1})], final=True
        ),
        NOT_FOUND,
    )
    assert "intruder" in details
    assert await up.snapshot() == before

    last = await _advance(up, t, merge("charge", {"charged": 70}))
    assert (last.instance_status, last.next_task_id) == ("COMPLETED", "")
    detail = await up.get(iid)
    assert detail.instance.status == "COMPLETED" and not detail.tokens
    assert await up.context(iid) == {"order": 7, "valid": True, "charged": 70}
    ran = [e.node_id for e in await up.history(iid) if e.node_id in ("validate", "in-stock", "charge")]
    assert ran == ["validate", "in-stock", "charge"]


async def test_a_local_run_in_one_batch_and_the_false_path(up: Up) -> None:
    name = unique("up-batch")
    await up.register(_local(name))
    whole = await up.start(name, {"order": 1})
    t = await up.claim(name)
    done = await _advance(
        up,
        t,
        merge("validate", {"valid": True}),
        branch("in-stock", True),
        merge("charge", {"c": 1}),
        final=True,
    )
    assert (done.instance_status, done.next_task_id) == ("COMPLETED", "")
    assert await up.context(whole) == {"order": 1, "valid": True, "c": 1}

    gated = await up.start(name, {"order": 2})
    t = await up.claim(name)
    out = await _advance(up, t, merge("validate", {"valid": False}), branch("in-stock", False))
    assert (out.instance_status, out.next_task_id) == ("COMPLETED", "")
    view = (await up.get(gated)).instance
    assert (view.status, view.termination_reason) == ("COMPLETED", "gated:in-stock")
    assert await up.context(gated) == {"order": 2, "valid": False}

    # a report on the finished run applies nothing and answers the status
    again = await _advance(up, t, merge("charge", {"late": True}), final=True)
    assert (again.instance_status, again.next_task_id) == ("COMPLETED", "")
    assert await up.context(gated) == {"order": 2, "valid": False}


async def test_final_hands_the_run_back(up: Up) -> None:
    name = unique("up-final")
    await up.register(_local(name))
    iid = await up.start(name)
    t = await up.claim(name)
    out = await _advance(up, t, merge("validate", {"v": 1}), final=True)
    assert (out.instance_status, out.next_task_id) == ("RUNNING", "")
    node, status, _ = await _where(up, iid)
    assert (node, status) == ("in-stock", "READY")
    # the worker holds nothing now: the next step is claimed anew
    await up.fails(
        "AdvanceRun",
        upb.AdvanceRunRequest(task_id=t.task_id, lease_owner=WORKER, steps=[branch("in-stock", True)]),
        NOT_FOUND,
    )
    nxt = await up.claim(name)
    # the same token, claimed anew: a new claim number in its task id (docs/semantics.md#fencing)
    token_id = t.task_id.rpartition("@")[0]
    assert (nxt.task_id, nxt.step_name, nxt.kind) == (f"{token_id}@2", "in-stock", "PREDICATE")
