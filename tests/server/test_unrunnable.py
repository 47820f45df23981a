"""A worker's claims pass over the nodes it gave back for lack of a handler
(wiggle/_server/unrunnable.py; docs/semantics.md#mixed-fleets).

Before, a worker without a step's handler claimed it again on its next poll and gave it back
again, as fast as it polled, for as long as no worker with the handler came. The claims here run
on both stores: the PostgreSQL cases always run, PostgreSQL being unreachable fails them
(tests/pg.py).
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator

import pytest
from layers import instance_layer, two_steps
from mixed_fleet_versions import mixed_versions

from wiggle import WorkerOptions
from wiggle._engine.state import TokenStatus
from wiggle._server.instances import Instances
from wiggle._server.unrunnable import Unrunnable
from wiggle._storage.notifier import Notifier
from wiggle.testing import EmbeddedServer

QUEUE = "q"


@pytest.fixture(params=["memory", "postgres"])
async def layer(request: pytest.FixtureRequest) -> AsyncIterator[Instances]:
    async with instance_layer(request.param, two_steps(QUEUE)) as instances:
        yield instances


async def _at_b_given_back(layer: Instances) -> str:
    """An instance whose step "b" worker "old" claimed and gave back (no handler): its id."""
    view = await layer.start("two", "", {}, "")
    (first,) = await layer.claim("new", [QUEUE], 1)
    await layer.complete(first.task_id, "new", {"a": True}, None)
    (b,) = await layer.claim("old", [QUEUE], 1)
    assert b.token.node_id == "b"
    await layer.fail(b.task_id, "old", "no handler for node 'b'", True, release=True, no_handler=True)
    await _past_the_release_delay(layer)
    return view.instance.id


async def _past_the_release_delay(layer: Instances) -> None:
    """A step given back is offered again after the engine's release delay: wait it out."""
    await asyncio.sleep(layer.engine.config.release_delay_millis / 1000 + 0.05)


async def test_a_claim_passes_over_the_nodes_its_worker_gave_back(layer: Instances) -> None:
    waiting = await _at_b_given_back(layer)
    later = [(await layer.start("two", "", {"n": n}, "")).instance.id for n in range(2)]
    # "b" is the oldest READY step of the queue, and "old" is offered only the "a"s behind it
    claimed = await layer.claim("old", [QUEUE], 4)
    assert sorted((c.token.instance_id, c.token.node_id) for c in claimed) == sorted((i, "a") for i in later)
    (token,) = (await layer.get_instance(waiting)).tokens
    assert (token.node_id, token.status, token.attempt) == ("b", TokenStatus.READY, 1)
    assert await layer.claim("old", [QUEUE, "other"], 4) == []  # several queues: the same
    # another worker is offered it, and runs it on the same attempt
    (b,) = await layer.claim("new", [QUEUE], 4)
    assert (b.token.instance_id, b.token.node_id, b.token.attempt) == (waiting, "b", 1)


async def test_a_step_given_back_without_no_handler_is_offered_again(layer: Instances) -> None:
    """The server's own give-backs (a poll that had ended) say nothing of the worker."""
    await layer.start("two", "", {}, "")
    (a,) = await layer.claim("w", [QUEUE], 1)
    await layer.fail(a.task_id, "w", "its poll had ended", True, release=True)
    await _past_the_release_delay(layer)
    (again,) = await layer.claim("w", [QUEUE], 1)
    assert again.token.node_id == "a" and again.token.attempt == 1


async def test_a_poll_passing_steps_over_waits_unarmed_and_takes_what_it_can(layer: Instances) -> None:
    await _at_b_given_back(layer)
    poll = asyncio.ensure_future(layer.poll("old", [QUEUE], 4, 10.0))
    notifier = layer.store.notifier
    for _ in range(200):  # waiting: uncounted, and handed nothing (it might not run it)
        if notifier._uncounted.get(QUEUE):
            break
        await asyncio.sleep(0.005)
    assert notifier._uncounted.get(QUEUE) and not notifier._armed
    assert not poll.done()
    view = await layer.start("two", "", {}, "")
    (claimed,) = await asyncio.wait_for(poll, 10.0)
    assert (claimed.token.instance_id, claimed.token.node_id) == (view.instance.id, "a")
    assert layer.handed_off == 0


async def test_a_chained_step_skips_a_worker_that_gave_its_node_back(layer: Instances) -> None:
    await _at_b_given_back(layer)
    view = await layer.start("two", "", {}, "")
    (a,) = await layer.claim("old", [QUEUE], 1)
    assert a.token.instance_id == view.instance.id
    _, chained = await layer.complete_chained(a.task_id, "old", {}, None, next_queues=frozenset([QUEUE]))
    assert chained is None  # "b" is left READY for another worker
    tokens = (await layer.get_instance(view.instance.id)).tokens
    assert [(t.node_id, t.status) for t in tokens] == [("b", TokenStatus.READY)]


def test_a_hold_ends_and_is_per_worker_version_and_node() -> None:
    now = [100.0]
    unrunnable = Unrunnable(clock=lambda: now[0])
    assert not unrunnable.skip_for("w")
    unrunnable.note("w", "wf", "v2", "extra")
    unrunnable.note("", "wf", "v2", "extra")  # no worker id: nothing to hold it against
    assert unrunnable.skip_for("w") == {("wf", "v2", "extra")}
    assert not unrunnable.skip_for("other")
    now[0] += Unrunnable.HOLD_SECONDS - 1
    unrunnable.note("w", "wf", "v2", "later")
    assert unrunnable.skip_for("w") == {("wf", "v2", "extra"), ("wf", "v2", "later")}
    assert unrunnable.holds("w") == [
        ("wf", "v2", "extra", 1.0),
        ("wf", "v2", "later", Unrunnable.HOLD_SECONDS),
    ]
    unrunnable.note("other", "wf", "v2", "extra")
    assert unrunnable.held() == 3
    now[0] += 1  # the first hold ends: offered once more
    assert unrunnable.skip_for("w") == {("wf", "v2", "later")}
    assert unrunnable.held() == 2
    now[0] += Unrunnable.HOLD_SECONDS
    assert not unrunnable.skip_for("w") and unrunnable.held() == 0 and not unrunnable._by_worker


def test_a_poll_with_another_session_ends_the_holds_of_its_worker_id() -> None:
    """A worker restarted under the same explicit id, now with the handler, is offered the node
    at once, not when the hold ends (each process stamps its polls: wiggle/_worker/poller.py)."""
    unrunnable = Unrunnable(clock=lambda: 100.0)
    unrunnable.seen("w", "process-1")
    unrunnable.seen("other", "process-9")
    unrunnable.note("w", "wf", "v2", "extra")
    unrunnable.note("other", "wf", "v2", "extra")
    unrunnable.seen("w", "process-1")  # the same process polls again: still held
    unrunnable.seen("w", "")  # a worker that sends no stamp: nothing said of the process
    assert unrunnable.skip_for("w") == {("wf", "v2", "extra")}
    unrunnable.seen("w", "process-2")  # another process under the id
    assert not unrunnable.skip_for("w")
    assert unrunnable.skip_for("other") == {("wf", "v2", "extra")}  # other ids keep theirs
    unrunnable.note("w", "wf", "v2", "extra")  # the new process gives it back in turn: held
    unrunnable.seen("w", "process-2")
    assert unrunnable.skip_for("w") == {("wf", "v2", "extra")}
    unrunnable.MAX_WORKERS = 2
    for n in range(3):
        unrunnable.seen(f"worker-{n}", "s")
    assert list(unrunnable._sessions) == ["worker-1", "worker-2"]


def test_a_hold_is_shown_under_its_node_s_queue_only() -> None:
    """A worker polling jobs, slow and waits was shown its hold of a jobs node under all three
    (``wiggle queues``, the Queues page)."""
    unrunnable = Unrunnable(clock=lambda: 100.0)
    unrunnable.note("w", "wf", "v2", "audit", "jobs")
    unrunnable.note("w", "wf", "v2", "old", "")  # given back before queues were noted: shown on each
    left = Unrunnable.HOLD_SECONDS
    assert unrunnable.holds("w", "jobs") == [("wf", "v2", "audit", left), ("wf", "v2", "old", left)]
    assert unrunnable.holds("w", "slow") == [("wf", "v2", "old", left)]
    assert unrunnable.holds("w") == [("wf", "v2", "audit", left), ("wf", "v2", "old", left)]
    assert unrunnable.skip_for("w") == {("wf", "v2", "audit"), ("wf", "v2", "old")}  # claims: all


def test_holds_are_bounded() -> None:
    unrunnable = Unrunnable()
    for n in range(Unrunnable.MAX_NODES + 10):
        unrunnable.note("w", "wf", "v", f"n{n}")
    held = unrunnable.skip_for("w")
    assert len(held) == Unrunnable.MAX_NODES and ("wf", "v", "n0") not in held
    unrunnable.MAX_WORKERS = 3
    for n in range(5):
        unrunnable.note(f"worker-{n}", "wf", "v", "x")
    assert list(unrunnable._by_worker) == ["worker-2", "worker-3", "worker-4"]


async def test_an_uncounted_waiter_is_woken_besides_the_counted_ones_and_passes_nothing_on() -> None:
    notifier = Notifier()
    spilled: list[str] = []
    notifier.spill = spilled.append
    with notifier.watch_work([QUEUE], counted=False) as skipping, notifier.watch_work([QUEUE]) as counted:
        assert notifier.work_ready([QUEUE], {QUEUE: 1}) == []  # the counted waiter covers the step
        assert skipping.woken and skipping.woken_for is None
        assert counted.woken_for == QUEUE and await notifier.wait(counted, 1.0)  # taken
    with notifier.watch_work([QUEUE], counted=False) as alone:
        # only a waiter that may not run it: the step is announced to the other nodes too
        assert notifier.work_ready([QUEUE], {QUEUE: 1}) == [QUEUE]
        assert alone.woken
    assert spilled == []  # it left without passing anything on
    assert not notifier._uncounted and not notifier._queue_waiters


async def test_a_poll_waiting_when_its_worker_gives_a_step_back_does_not_spin(layer: Instances) -> None:
    """The give-back is noted while a poll of the same worker waits: that poll passes the step
    over from then on and waits as a skipping poll does, instead of claiming again every
    millisecond because the store says the step it passes over is due (found by
    bench/give_backs.py: a server 100% busy for as long as such a poll lasted)."""
    await layer.start("two", "", {}, "")
    (a,) = await layer.claim("new", [QUEUE], 1)
    await layer.complete(a.task_id, "new", {}, None)
    (b,) = await layer.claim("old", [QUEUE], 1)
    poll = asyncio.ensure_future(layer.poll("old", [QUEUE], 4, 10.0))
    await asyncio.sleep(0.1)  # waiting, on the ordinary path (nothing given back yet)
    claims = 0
    real = layer.store.claim

    async def counted(*args, **kwargs):  # type: ignore[no-untyped-def]
        nonlocal claims
        claims += 1
        return await real(*args, **kwargs)

    layer.store.claim = counted  # type: ignore[method-assign]
    await layer.fail(b.task_id, "old", "no handler for node 'b'", True, release=True, no_handler=True)
    await asyncio.sleep(1.5)  # "b" is due again after 0.2 s: the poll wakes, and passes it over
    assert not poll.done()
    assert 1 <= claims <= 5, claims
    poll.cancel()
    await asyncio.gather(poll, return_exceptions=True)


async def test_a_worker_restarted_under_its_id_with_the_handler_runs_the_step_at_once(
    eventually, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A worker with an explicit id and without the handler gave the step back; the same id,
    restarted with the handler, runs it without waiting for the hold to end."""
    monkeypatch.setattr(Unrunnable, "HOLD_SECONDS", 3600.0)  # waited out, this test would time out
    old, new = mixed_versions("restarted-under-its-id")
    options = WorkerOptions(worker_id="payments-0")
    async with EmbeddedServer() as server:
        await server.client.register(new)
        started = await server.client.start(new, {})
        unrunnable = server.server.instances.delivery.unrunnable
        async with server.worker([old], options):
            await eventually(
                lambda: unrunnable.holds("payments-0"), what="the old worker to give 'extra' back"
            )
        async with server.worker([new], options):
            done = await server.client.wait(started, timeout=30)
        history = await server.client.history(started)
    assert done.status == "COMPLETED", done
    assert done.context == {"first": True, "extra": True}
    ran = [(e.node_id, e.attempt, e.outcome, e.worker_id) for e in history if e.kind == "TASK"]
    assert ran[-1] == ("extra", 1, "COMPLETED", "payments-0"), ran  # the attempt given back is unspent
    assert not any("lease" in e.error for e in history), history
