"""Direct hand-off (wiggle/_storage/handoff.py) and queues known empty (Notifier.known_empty).

A step made READY while a poller of its queue waits on this node is leased to that poller inside
the commit that made it READY: the poll returns it with no claim of its own. Each way a
reservation can end is provoked here on both stores: delivered, released (no commit), and
orphaned (the poller gone by the commit), plus a start whose request id is already taken.

The PostgreSQL cases always run: PostgreSQL being unreachable fails them (tests/pg.py).
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from typing import Any

import psycopg
import pytest
from layers import instance_layer, postgres_nodes, two_steps, waiting_poll

from wiggle._engine.state import TokenStatus
from wiggle._model import Node, NodeKind, RetryPolicy, WorkflowDefinition
from wiggle._server.instances import Instances
from wiggle._storage import handoff as handoff_module
from wiggle._storage.base import NewInstance, Store
from wiggle._storage.memory import MemoryStore
from wiggle._storage.queue_limits import QueueLimit
from wiggle.errors import Unavailable

QUEUE = "q"  # every task node below runs on it


def _counting(store: Store) -> list[int]:
    """Count the store's claims (each a transaction on PostgreSQL)."""
    count = [0]
    real = store.claim

    async def claim(*args: Any, **kwargs: Any) -> Any:
        count[0] += 1
        return await real(*args, **kwargs)

    store.claim = claim  # type: ignore[method-assign]
    return count


@pytest.fixture(params=["memory", "postgres"])
async def layer(request: pytest.FixtureRequest) -> AsyncIterator[Instances]:
    async with instance_layer(request.param, two_steps(QUEUE)) as instances:
        yield instances


async def _waiting(layer: Instances, worker: str = "w", max_tasks: int = 4) -> asyncio.Task[Any]:
    return await waiting_poll(layer, worker, [QUEUE], max_tasks)


async def _given_back(layer: Instances, *instance_ids: str) -> list[Any]:
    """The tokens of ``instance_ids`` once all are READY again (a hand-off given back), no attempt used."""
    for _ in range(200):
        tokens = [t for i in instance_ids for t in (await layer.get_instance(i)).tokens]
        if all(t.status == TokenStatus.READY for t in tokens):
            break
        await asyncio.sleep(0.01)
    assert all(t.status == TokenStatus.READY and t.attempt <= 1 for t in tokens), tokens
    return tokens


async def test_a_start_hands_its_first_step_to_the_waiting_poller(layer: Instances) -> None:
    poll = await _waiting(layer)
    claims = _counting(layer.store)
    view = await layer.start("two", "", {"n": 1}, "")
    (claimed,) = await asyncio.wait_for(poll, 10.0)
    assert claimed.token.instance_id == view.instance.id
    assert claimed.token.status == TokenStatus.RUNNING and claimed.token.lease_owner == "w"
    assert claims[0] == 0 and layer.handed_off == 1
    # stored as leased: the worker's report is accepted, and the next step is handed on too
    poll = await _waiting(layer)
    await layer.complete(claimed.token.id, "w", {"n": 2}, None)
    (second,) = await asyncio.wait_for(poll, 10.0)
    assert second.token.node_id == "b" and second.context == {"n": 2}
    assert claims[0] == 0 and layer.handed_off == 2
    stored = (await layer.get_instance(view.instance.id)).tokens
    assert [(t.node_id, t.status, t.lease_owner) for t in stored] == [("b", TokenStatus.RUNNING, "w")]


async def test_a_step_nobody_waits_for_stays_ready_and_is_claimed(layer: Instances) -> None:
    view = await layer.start("two", "", {}, "")
    assert layer.handed_off == 0
    (token,) = (await layer.get_instance(view.instance.id)).tokens
    assert token.status == TokenStatus.READY
    (claimed,) = await layer.poll("w", [QUEUE], 4, 1.0)
    assert claimed.token.id == token.id


async def test_a_failed_start_releases_the_poller_which_keeps_waiting(layer: Instances) -> None:
    poll = await _waiting(layer)
    real = layer.store.insert_many

    async def broken(items: list[NewInstance]) -> list[str]:
        raise RuntimeError("the commit failed")

    layer.store.insert_many = broken  # type: ignore[method-assign]
    with pytest.raises(RuntimeError):
        await layer.start("two", "", {}, "")
    layer.store.insert_many = real  # type: ignore[method-assign]
    await asyncio.sleep(0.05)
    assert not poll.done()  # released: it looked again (nothing) and waits
    view = await layer.start("two", "", {}, "")
    (claimed,) = await asyncio.wait_for(poll, 10.0)
    assert claimed.token.instance_id == view.instance.id


async def test_a_start_whose_request_id_is_taken_hands_nothing(layer: Instances) -> None:
    first = await layer.start("two", "", {}, "", "order-1")
    (claimed,) = await layer.claim("w", [QUEUE], 4)
    poll = await _waiting(layer)
    again = await layer.start("two", "", {}, "", "order-1")
    assert again.instance.id == first.instance.id
    await asyncio.sleep(0.05)
    assert not poll.done()  # the duplicate was not stored: its step was not handed over
    poll.cancel()
    await asyncio.gather(poll, return_exceptions=True)
    assert claimed.token.instance_id == first.instance.id


async def test_a_step_handed_to_a_poll_that_ended_is_given_back(layer: Instances) -> None:
    store = layer.store
    poll = await _waiting(layer, worker="gone")
    if isinstance(store, MemoryStore):
        real_insert = store.insert_many

        async def slow_insert(items: list[NewInstance]) -> list[str]:
            await asyncio.sleep(0.05)  # the poll's call is cancelled before the commit
            return await real_insert(items)

        store.insert_many = slow_insert  # type: ignore[method-assign]
    starting = asyncio.ensure_future(layer.start("two", "", {}, ""))
    for _ in range(200):  # reserved (the poller left the waiting lists), not yet committed
        if not store.notifier.armed:
            break
        await asyncio.sleep(0)
    poll.cancel()
    await asyncio.gather(poll, return_exceptions=True)
    view = await starting
    # the commit leased it to "gone"; it is given back (READY again) without a lease expiry
    (token,) = await _given_back(layer, view.instance.id)
    (claimed,) = await layer.poll("other", [QUEUE], 4, 5.0)
    assert claimed.token.id == token.id and claimed.token.lease_owner == "other"


async def test_one_poll_takes_the_first_steps_of_several_starts(layer: Instances) -> None:
    first = await _waiting(layer, worker="w1", max_tasks=2)
    second = await _waiting(layer, worker="w2", max_tasks=2)
    claims = _counting(layer.store)
    _, ids = await layer.start_many("two", "", [{"i": i} for i in range(3)], "")
    got_first = await asyncio.wait_for(first, 10.0)
    got_second = await asyncio.wait_for(second, 10.0)
    # the newest poll fills up to what it asked for, the one before takes the rest; nothing claimed
    assert [c.token.instance_id for c in got_second] == ids[:2]
    assert [c.token.instance_id for c in got_first] == ids[2:]
    assert {c.token.lease_owner for c in got_second} == {"w2"} and got_first[0].token.lease_owner == "w1"
    assert claims[0] == 0 and layer.handed_off == 3


async def test_a_report_hands_the_next_step_to_the_reporting_workers_poll(layer: Instances) -> None:
    """The step a report makes READY goes to a waiting poll of the worker that reported, though
    another worker's poll started waiting after it (without the preference, the newest poll)."""
    await layer.start("two", "", {"n": 1}, "")
    (first,) = await layer.claim("w1", [QUEUE], 1)
    mine = await _waiting(layer, worker="w1")
    other = await _waiting(layer, worker="w2")
    await layer.complete(first.token.id, "w1", {"n": 2}, None)
    (second,) = await asyncio.wait_for(mine, 10.0)
    assert second.token.node_id == "b" and second.token.lease_owner == "w1"
    assert not other.done()
    other.cancel()
    await asyncio.gather(other, return_exceptions=True)
    # a report by a worker with no poll waiting hands it to the newest poll of another
    old = await _waiting(layer, worker="w2")
    new = await _waiting(layer, worker="w3")
    await layer.start("two", "", {"n": 1}, "")
    (third,) = await asyncio.wait_for(new, 10.0)
    await layer.complete(third.token.id, "w3", {"n": 2}, None)
    (fourth,) = await asyncio.wait_for(old, 10.0)
    assert fourth.token.node_id == "b" and fourth.token.lease_owner == "w2"


async def _slow_first_insert(store: Store, fail: bool) -> asyncio.Event:
    """The next insert_many waits for the returned event, then commits (or fails, ``fail``);
    the ones after it go straight through."""
    real = store.insert_many
    go = asyncio.Event()
    calls = [0]

    async def insert_many(items: list[NewInstance]) -> list[str]:
        calls[0] += 1
        if calls[0] == 1:
            await go.wait()
            if fail:
                raise RuntimeError("the commit failed")
        return await real(items)

    store.insert_many = insert_many  # type: ignore[method-assign]
    return go


@pytest.mark.parametrize("first_commits", [True, False])
async def test_a_poll_takes_steps_of_two_transactions_once_both_settle(first_commits: bool) -> None:
    async with instance_layer("memory", two_steps(QUEUE)) as layer:
        poll = await _waiting(layer, max_tasks=4)
        claims = _counting(layer.store)
        go = await _slow_first_insert(layer.store, fail=not first_commits)
        slow = asyncio.ensure_future(layer.start("two", "", {"n": 1}, ""))
        await asyncio.sleep(0.01)  # reserved the poller, its commit held back
        assert not layer.store.notifier.armed
        fast = await layer.start("two", "", {"n": 2}, "")  # its share of the same reservation
        await asyncio.sleep(0.02)
        assert not poll.done()  # delivered only when every share has settled
        go.set()
        if first_commits:
            view = await slow
            got = await asyncio.wait_for(poll, 10.0)
            assert sorted(c.token.instance_id for c in got) == sorted([view.instance.id, fast.instance.id])
        else:
            with pytest.raises(RuntimeError):
                await slow
            (claimed,) = await asyncio.wait_for(poll, 10.0)  # the failed start's step is void
            assert claimed.token.instance_id == fast.instance.id
        assert claims[0] == 0


async def test_a_slow_share_is_not_waited_for_and_its_step_is_given_back(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(handoff_module, "PARTIAL_SECONDS", 0.05)
    async with instance_layer("memory", two_steps(QUEUE)) as layer:
        poll = await _waiting(layer, max_tasks=4)
        go = await _slow_first_insert(layer.store, fail=False)
        slow = asyncio.ensure_future(layer.start("two", "", {}, ""))
        await asyncio.sleep(0.01)
        fast = await layer.start("two", "", {}, "")
        # the other share's commit is held back: the poll returns the delivered step without it
        (claimed,) = await asyncio.wait_for(poll, 5.0)
        assert claimed.token.instance_id == fast.instance.id and not slow.done()
        go.set()
        view = await slow
        # committed as leased to a poll that had returned: given back
        (token,) = await _given_back(layer, view.instance.id)
        (again,) = await layer.poll("other", [QUEUE], 4, 5.0)
        assert again.token.id == token.id


async def test_a_share_committed_after_the_poll_ended_is_given_back() -> None:
    async with instance_layer("memory", two_steps(QUEUE)) as layer:
        poll = await _waiting(layer, worker="gone", max_tasks=4)
        go = await _slow_first_insert(layer.store, fail=False)
        slow = asyncio.ensure_future(layer.start("two", "", {}, ""))
        await asyncio.sleep(0.01)
        fast = await layer.start("two", "", {}, "")  # delivered, but the poll waits for the other
        poll.cancel()
        await asyncio.gather(poll, return_exceptions=True)
        go.set()
        view = await slow
        # both were committed as leased to "gone": both are given back, READY for the next poll
        ids = {view.instance.id, fast.instance.id}
        await _given_back(layer, *ids)
        # each falls due release_delay_millis after its own give-back, so one poll may find only
        # the first: poll until both are claimed (the second within that delay)
        got: set[str] = set()
        for _ in range(5):
            got |= {c.token.instance_id for c in await layer.poll("other", [QUEUE], 4, 1.0)}
            if got == ids:
                break
        assert got == ids


async def test_a_step_claimed_for_a_poll_cancelled_meanwhile_is_given_back(layer: Instances) -> None:
    # The poll's call ends (the worker's deadline passed, it closed) while its claim is being
    # committed: the claim still finishes, and what it leased goes back with no lease expiry.
    view = await layer.start("two", "", {}, "")  # nobody waits: the step stays READY
    store = layer.store
    real_claim = store.claim
    committed = asyncio.Event()

    async def slow_answer(*args: Any, **kwargs: Any) -> Any:
        claimed = await real_claim(*args, **kwargs)
        committed.set()
        await asyncio.sleep(0.05)  # the commit's answer on its way when the poll is cancelled
        return claimed

    store.claim = slow_answer  # type: ignore[method-assign]
    poll = asyncio.ensure_future(layer.poll("gone", [QUEUE], 4, 5.0))
    await asyncio.wait_for(committed.wait(), 5.0)
    poll.cancel()
    await asyncio.gather(poll, return_exceptions=True)
    store.claim = real_claim  # type: ignore[method-assign]
    (token,) = await _given_back(layer, view.instance.id)
    (claimed,) = await layer.poll("other", [QUEUE], 4, 5.0)
    assert claimed.token.id == token.id and claimed.token.lease_owner == "other"
    assert claimed.token.attempt == 1  # given back, not expired: no attempt spent


async def test_a_poll_after_a_short_claim_does_not_claim_again(layer: Instances) -> None:
    await layer.start("two", "", {}, "")
    claims = _counting(layer.store)
    (claimed,) = await layer.poll("w", [QUEUE], 4, 1.0)  # asked for 4, got 1: the queue is empty
    assert claims[0] == 1
    poll = asyncio.ensure_future(layer.poll("w", [QUEUE], 4, 0.2))
    assert await poll == []
    assert claims[0] == 1  # known empty: no claim, only the wait
    # anything announced ends that: it is found (handed over, or claimed)
    poll = await _waiting(layer)
    view = await layer.start("two", "", {}, "")
    (found,) = await asyncio.wait_for(poll, 10.0)
    assert found.token.instance_id == view.instance.id
    assert claimed.token.instance_id != view.instance.id


async def test_a_delayed_retry_falls_due_without_an_announcement(layer: Instances) -> None:
    flow = WorkflowDefinition(
        name="retry",
        start_node="a",
        nodes=(
            Node(
                id="a",
                kind=NodeKind.TASK,
                queue=QUEUE,
                next="end",
                retry=RetryPolicy(max_attempts=2, initial_backoff_millis=300, max_backoff_millis=300),
            ),
            Node(id="end", kind=NodeKind.END),
        ),
    )
    await layer.register(flow)
    view = await layer.start("retry", "", {}, "")
    (claimed,) = await layer.poll("w", [QUEUE], 4, 1.0)
    await layer.fail(claimed.token.id, "w", "boom", True)  # READY again in 300 ms
    (again,) = await asyncio.wait_for(layer.poll("w", [QUEUE], 4, 10.0), 5.0)
    assert again.token.instance_id == view.instance.id and again.token.attempt == 2


@pytest.mark.parametrize("failure", ["transient", "final"])
async def test_a_report_whose_commit_fails_or_is_retried_hands_off_once(failure: str) -> None:
    async with postgres_nodes(1, two_steps(QUEUE)) as ((store,), (layer,)):
        view = await layer.start("two", "", {}, "")
        (first,) = await layer.claim("w", [QUEUE], 4)
        poll = await _waiting(layer)
        real = store.group.persist
        failures = [0]

        async def persist_failing_once(*args: Any) -> Any:
            if failures[0] == 0:
                failures[0] += 1
                if failure == "transient":  # db.run retries: the action runs again
                    raise psycopg.OperationalError("connection lost")
                raise Unavailable("database unavailable")
            return await real(*args)

        store.group.persist = persist_failing_once  # type: ignore[method-assign]
        if failure == "final":
            with pytest.raises(Unavailable):
                await layer.complete(first.token.id, "w", {"x": 1}, None)
            await asyncio.sleep(0.05)
            assert not poll.done()  # released, looked again, waits
            await layer.complete(first.token.id, "w", {"x": 1}, None)
        else:
            await layer.complete(first.token.id, "w", {"x": 1}, None)
        assert failures[0] == 1
        (second,) = await asyncio.wait_for(poll, 10.0)
        assert second.token.node_id == "b" and second.token.lease_owner == "w"
        (token,) = (await layer.get_instance(view.instance.id)).tokens
        assert token.id == second.token.id and token.status == TokenStatus.RUNNING


@pytest.mark.postgres
@pytest.mark.parametrize(("rate_max", "handed"), [(1_000_000, 1), (100, 0)])
async def test_a_fast_rate_lets_the_commit_hand_a_step_off(rate_max: int, handed: int) -> None:
    """On PostgreSQL, a queue rate of 160 or more claims a period comes in blocks of moments
    (wiggle/_storage/postgres/rate_blocks.py): the commit that makes a step READY hands it to the
    waiting poll, spending a moment of the server's block as a claim would. A slower rate is
    exact, taken claim by claim: its steps are claimed, never handed off. (A minute's period: a
    block's moments may be spent up to 3 s late, however slow the machine.)"""
    limit = QueueLimit(queue=QUEUE, rate_max=rate_max, rate_period_millis=60_000)
    async with instance_layer("postgres", two_steps(QUEUE)) as layer:
        await layer.store.set_queue_limit(limit)
        await layer.start("two", "", {"n": 1}, "")
        (claimed,) = await layer.poll("w", [QUEUE], 4, 5.0)
        assert layer.handed_off == 0
        poll = await _waiting(layer)
        blocks = layer.store.rate_blocks  # type: ignore[attr-defined]
        if handed:  # a block with a moment due for the hand-off (the claim's may be spent)
            await blocks.fill([limit], 1, layer.store.clock.now())
        await layer.complete(claimed.token.id, "w", {"n": 2}, None)
        (second,) = await asyncio.wait_for(poll, 10.0)
        assert second.token.node_id == "b" and second.context == {"n": 2}
        assert layer.handed_off == handed
        assert (blocks.taken > 0) == bool(handed)
