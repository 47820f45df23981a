"""What upstream workers' reports do: CompleteTask's shallow diff, a predicate's branch, FailTask
with and without retries (docs/upstream.md#worker-reports).
"""

from __future__ import annotations

from collections.abc import AsyncIterator

import pytest

from wiggle._clock import VirtualClock
from wiggle._rpc.upstream import wiggle_pb2 as upb

from .service_kit import STORES, Up, document, end, flow, open_server, predicate, task, unique


@pytest.fixture(params=STORES)
async def up(request: pytest.FixtureRequest) -> AsyncIterator[Up]:
    async with open_server(request.param, VirtualClock(start=1_700_000_000_000)) as server:
        yield server


def _clock(up: Up) -> VirtualClock:
    assert up.clock is not None
    return up.clock


# ---------------------------------------------------------------------------- diffs


async def test_complete_applies_a_shallow_diff_to_the_stored_context(up: Up) -> None:
    name = unique("up-diff")
    await up.register(flow(name, "a", "b", "c"))
    iid = await up.start(name, {"keep": 1, "drop": 2, "x": 0, "deep": {"a": 1, "b": 2}})
    a = await up.claim(name)
    assert await up.context(iid) == {"keep": 1, "drop": 2, "x": 0, "deep": {"a": 1, "b": 2}}
    # keys left out are kept, a null removes its key, a nested object replaces (shallow), a nested null stays
    await up.complete(a, {"x": 1, "drop": None, "deep": {"a": None}, "new": [1, None]})
    expected = {"keep": 1, "x": 1, "deep": {"a": None}, "new": [1, None]}
    assert await up.context(iid) == expected
    b = await up.claim(name)
    assert b.step_name == "b"
    await up.complete(b, None)  # a null result changes nothing
    assert await up.context(iid) == expected
    c = await up.claim(name)
    await up.complete(c, {})  # nor does an empty one
    assert await up.status(iid) == "COMPLETED"
    assert await up.context(iid) == expected


def _fork(name: str) -> dict:
    return document(
        name,
        [
            {"id": "f", "kind": "FORK", "branches": ["l", "r"]},
            task("l", name, "left", "j"),
            task("r", name, "right", "j"),
            {"id": "j", "kind": "JOIN", "next": "n3", "expected": 2},
            task("n3", name, "after", "end"),
            end(),
        ],
    )


@pytest.mark.parametrize("first", ["left", "right"])
async def test_branch_diffs_land_in_arrival_order(up: Up, first: str) -> None:
    name = unique("up-fork")
    await up.register(_fork(name))
    iid = await up.start(name, {"keep": 1, "drop": 2, "shared": "base"})
    tasks = {t.step_name: t for t in await up.poll(name, max_tasks=2)}
    assert sorted(tasks) == ["left", "right"]
    # both branches saw the same context; each reports only what it changed
    writes = {"left": {"shared": "L", "drop": None, "l": 1}, "right": {"shared": "R", "r": 1}}
    second = "right" if first == "left" else "left"
    await up.complete(tasks[first], writes[first])
    await up.complete(tasks[second], writes[second])
    after = await up.claim(name)
    assert after.step_name == "after"
    # the last to arrive wins "shared"; neither branch's stale view undoes the other's write
    assert await up.context(iid) == {"keep": 1, "shared": writes[second]["shared"], "l": 1, "r": 1}


# ---------------------------------------------------------------------------- predicates


def _gate(name: str) -> dict:
    return document(
        name,
        [
            predicate("p", name, "in-stock", "n1", "no"),
            task("n1", name, "ship", "end"),
            end(),
            end("no", reason="gated:in-stock"),
        ],
    )


async def test_a_predicate_routes_true_to_next_and_false_to_alt_next(up: Up) -> None:
    name = unique("up-gate")
    await up.register(_gate(name))
    yes = await up.start(name, {"q": 3})
    no = await up.start(name, {"q": 0})
    gates = {t.instance_id: t for t in await up.poll(name, max_tasks=2)}
    assert {t.kind for t in gates.values()} == {"PREDICATE"}
    assert {t.activity for t in gates.values()} == {f"{name}#in-stock"}
    await up.complete(gates[yes], {"value": True})
    await up.complete(gates[no], {"value": False})
    ship = await up.claim(name)
    assert (ship.instance_id, ship.step_name, ship.kind) == (yes, "ship", "TASK")
    await up.complete(ship, {"shipped": True})
    done = (await up.get(yes)).instance
    assert done.status == "COMPLETED" and not done.HasField("termination_reason")
    gated = (await up.get(no)).instance
    assert (gated.status, gated.termination_reason) == ("COMPLETED", "gated:in-stock")
    # a predicate's value does not enter the context
    assert await up.context(yes) == {"q": 3, "shipped": True}
    assert await up.context(no) == {"q": 0}


# ---------------------------------------------------------------------------- failures


def _retrying(name: str) -> dict:
    retry = {"maxAttempts": 3, "initialBackoffMillis": 2_000, "multiplier": 2.0, "maxBackoffMillis": 60_000}
    return document(name, [task("n0", name, "flaky", "end", retry=retry), end()])


async def _fail(up: Up, t: upb.TaskActivation, message: str, retryable: bool) -> None:
    await up.stub.FailTask(
        upb.TaskFailureRequest(
            task_id=t.task_id, lease_owner=t.lease_owner, message=message, retryable=retryable
        ),
        timeout=15,
    )


async def test_fail_not_retryable_fails_the_instance_at_once(up: Up) -> None:
    name = unique("up-permanent")
    await up.register(_retrying(name))
    iid = await up.start(name, {"k": 1})
    t = await up.claim(name)
    await _fail(up, t, "no such customer", retryable=False)
    detail = await up.get(iid)
    assert detail.instance.status == "FAILED"
    assert "no such customer" in detail.instance.error
    assert not detail.tokens
    assert not await up.poll(name, wait_millis=0)


async def test_fail_retryable_retries_by_the_policy_then_fails(up: Up) -> None:
    name = unique("up-retry")
    await up.register(_retrying(name))
    iid = await up.start(name, {"k": 1})
    clock = _clock(up)
    for attempt, backoff in ((1, 2_000), (2, 4_000)):
        t = await up.claim(name)
        assert t.attempt == attempt
        await _fail(up, t, f"blip {attempt}", retryable=True)
        [token] = (await up.get(iid)).tokens
        assert token.status == "READY" and token.attempt == attempt + 1
        assert token.last_error == f"blip {attempt}"
        assert token.available_at == clock.now() + backoff
        clock.advance(backoff - 1)
        assert not await up.poll(name, wait_millis=0)  # not before its backoff
        clock.advance(1)
    last = await up.claim(name)
    assert last.attempt == 3
    await _fail(up, last, "blip 3", retryable=True)
    detail = await up.get(iid)
    assert detail.instance.status == "FAILED" and "blip 3" in detail.instance.error
    assert await up.context(iid) == {"k": 1}


async def test_a_failure_message_with_a_nul_character_is_kept_readable(up: Up) -> None:
    # PostgreSQL cannot store NUL: the message keeps U+FFFD in its place, on every store
    name = unique("up-nul")
    await up.register(_retrying(name))
    iid = await up.start(name)
    t = await up.claim(name)
    await _fail(up, t, "bad byte \x00 here", retryable=True)
    [token] = (await up.get(iid)).tokens
    assert token.last_error == "bad byte \ufffd here"
    _clock(up).advance(2_000)
    await _fail(up, await up.claim(name), "\x00 for good", retryable=False)
    failed = (await up.get(iid)).instance
    assert failed.status == "FAILED" and "\ufffd for good" in failed.error
