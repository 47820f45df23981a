"""The instance layer (wiggle/_server/instances.py): one path per operation, and no lost wake-ups.

The race of issue #16 (item 0): a poller claims (nothing yet), and before it waits, a completion
commits and announces work. Each test provokes it deterministically with a store whose
``next_ready_at`` (called between the empty claim and the wait) makes work ready first.
"""

from __future__ import annotations

import asyncio
import copy
import logging
from collections.abc import AsyncIterator, Awaitable, Callable, Iterable, Mapping
from typing import Any

import pytest
from layers import one_step
from pg import TEST_DATABASE_URL

from wiggle import Workflow
from wiggle._engine.engine import Engine, EngineConfig, LoadedDefinition
from wiggle._engine.state import Changes, InstanceState, InstanceStatus, TokenStatus
from wiggle._server.instances import Instances
from wiggle._storage.memory import MemoryStore
from wiggle._storage.postgres import PostgresStore

Hook = Callable[[], Awaitable[None]]


class _HookedMemoryStore(MemoryStore):
    """A memory store that runs ``hook`` once, inside the poll loop's look-then-wait gap."""

    def __init__(self) -> None:
        super().__init__()
        self.hook: Hook | None = None
        self.claims = 0

    async def claim(self, *args: Any, **kwargs: Any) -> Any:
        self.claims += 1
        return await super().claim(*args, **kwargs)

    async def next_ready_at(self, queues: list[str]) -> int | None:
        ready_at = await super().next_ready_at(queues)
        hook, self.hook = self.hook, None
        if hook is not None:
            await hook()  # after the look: what it makes ready is not in ``ready_at``
        return ready_at


class _HookedPostgresStore(PostgresStore):
    """The same on PostgreSQL."""

    hook: Hook | None = None

    async def next_ready_at(self, queues: list[str]) -> int | None:
        ready_at = await super().next_ready_at(queues)
        hook, self.hook = self.hook, None
        if hook is not None:
            await hook()  # after the look: what it makes ready is not in ``ready_at``
        return ready_at


async def _settle(task: asyncio.Future[Any], rounds: int = 100) -> None:
    """Let the event loop run ``task`` as far as it gets without a timer firing."""
    for _ in range(rounds):
        if task.done():
            return
        await asyncio.sleep(0)


async def test_work_announced_between_the_look_and_the_wait_wakes_the_poller() -> None:
    store = _HookedMemoryStore()
    layer = Instances(store, Engine())
    await layer.register(one_step())
    queue = (await layer.start("one", "", {}, "")).tokens[0].queue
    (first,) = await layer.claim("w", [queue], 1)  # the queue is empty again

    started: list[str] = []

    async def start_one() -> None:  # another request commits work in the gap
        started.append((await layer.start("one", "", {}, "")).instance.id)

    store.hook = start_one
    poll = asyncio.ensure_future(layer.poll("w", [queue], 1, 60.0))
    try:
        # No timer can fire here (the wait is 60 s): only the wake-up can end the poll.
        await _settle(poll)
        assert poll.done(), "the poller slept through work announced before it waited"
        (claimed,) = poll.result()
        assert claimed.token.instance_id == started[0] != first.token.instance_id
        assert store.claims == 3  # the setup's claim, the empty look, the look after the wake-up
    finally:
        poll.cancel()
        await asyncio.gather(poll, return_exceptions=True)


async def test_a_wake_up_taken_but_not_acted_on_is_passed_on() -> None:
    store = MemoryStore()
    layer = Instances(store, Engine())
    await layer.register(one_step())
    queue = (await layer.start("one", "", {}, "")).tokens[0].queue
    notifier = store.notifier
    with notifier.watch_work([queue]) as first:
        # first is picked for a counted wake-up while it is still looking, and then leaves
        # without waiting (it found other work): the next waiter must get the wake-up.
        later = asyncio.ensure_future(notifier.wait_work([queue], 60.0))
        await asyncio.sleep(0)
        notifier.work_ready([queue], {queue: 1})
        assert first.woken and first.woken_for == queue
        assert not later.done()
    await _settle(later)
    assert later.done() and later.result() is True


async def test_await_completion_registered_before_its_read() -> None:
    store = MemoryStore()
    layer = Instances(store, Engine())
    await layer.register(one_step())
    view = await layer.start("one", "", {}, "")
    (claimed,) = await layer.claim("w", [view.tokens[0].queue], 1)
    real_get = store.get_instance
    calls = 0

    async def get_then_finish(instance_id: str) -> Any:
        nonlocal calls
        calls += 1
        seen = copy.deepcopy(await real_get(instance_id))  # as read then, not the live state
        if calls == 1:  # the wait's first read: the instance finishes right after it
            await layer.complete(claimed.token.id, "w", {"done": True}, None)
        return seen

    store.get_instance = get_then_finish  # type: ignore[method-assign]
    waiting = asyncio.ensure_future(layer.wait_finished(view.instance.id, 60.0))
    try:
        await _settle(waiting)
        assert waiting.done(), "the await-completion slept through the finish"
        assert waiting.result().instance.status == InstanceStatus.COMPLETED
    finally:
        waiting.cancel()
        await asyncio.gather(waiting, return_exceptions=True)


async def test_clock_dispatch_is_written_once_for_every_store() -> None:
    # A lease expiry goes through Instances.run_clock_duties -> Store.due_tokens -> Store.mutate.
    store = MemoryStore()
    layer = Instances(store, Engine(EngineConfig(lease_millis=1000)))
    await layer.register(one_step())
    view = await layer.start("one", "", {}, "")
    (claimed,) = await layer.claim("w", [view.tokens[0].queue], 1)
    expiry = claimed.token.lease_expires_at
    assert await layer.next_due_at() == expiry
    assert await layer.run_clock_duties(expiry - 1) == 0
    assert await layer.run_clock_duties(expiry) == 1
    (token,) = (await layer.get_instance(view.instance.id)).tokens
    assert token.status == TokenStatus.READY
    assert await layer.run_clock_duties(expiry + 10_000) == 0  # exactly once


async def test_a_refused_mutation_writes_nothing() -> None:
    store = MemoryStore()
    layer = Instances(store, Engine())
    await layer.register(one_step())
    view = await layer.start("one", "", {}, "")
    before = store.stats.transactions

    def refuse(loaded: LoadedDefinition, state: InstanceState, now: int) -> tuple[None, Changes]:
        raise ValueError("refused")

    with pytest.raises(ValueError):
        await store.mutate(view.instance.id, "gone", refuse)
    assert store.stats.transactions == before
    assert await store.mutate(view.instance.id, "gone", lambda loaded, state, now: (7, None)) == (
        7,
        store._instances[view.instance.id],
    )
    assert store.stats.transactions == before  # None: nothing to write


# ---------------------------------------------------------------------- PostgreSQL


@pytest.fixture
async def pg_layers(pg_schema: str) -> AsyncIterator[Callable[[], Awaitable[Instances]]]:  # noqa: F811
    layers: list[Instances] = []

    async def factory() -> Instances:
        store = _HookedPostgresStore(TEST_DATABASE_URL, pg_schema, pool_size=4)
        await store.open()
        layers.append(Instances(store, Engine()))
        return layers[-1]

    yield factory
    for layer in layers:
        await layer.store.close()


@pytest.mark.postgres
async def test_postgres_poller_woken_by_its_own_server(pg_layers: Any) -> None:
    layer = await pg_layers()
    store: _HookedPostgresStore = layer.store
    await layer.register(one_step())
    queue = (await layer.start("one", "", {}, "")).tokens[0].queue
    await layer.claim("w", [queue], 1)

    started: list[str] = []

    async def start_one() -> None:
        started.append((await layer.start("one", "", {}, "")).instance.id)

    store.hook = start_one
    # A lost wake-up would sleep out the whole 60 s wait; 30 s is far beyond any real claim.
    (claimed,) = await asyncio.wait_for(layer.poll("w", [queue], 1, 60.0), 30.0)
    assert claimed.token.instance_id == started[0]


@pytest.mark.postgres
async def test_postgres_poller_woken_by_another_server(pg_layers: Any) -> None:
    here = await pg_layers()
    there = await pg_layers()  # opened second: it counts `here` as a peer and NOTIFYs it
    store: _HookedPostgresStore = here.store
    await there.register(one_step())
    queue = (await there.start("one", "", {}, "")).tokens[0].queue
    await there.claim("w", [queue], 1)

    heard = asyncio.Event()
    work_ready = store.notifier.work_ready

    def spy(queues: Iterable[str], counts: Mapping[str, int] | None = None) -> None:
        work_ready(queues, counts)
        heard.set()

    # A poll of `here` waits once: from then on `there` sends it the NOTIFYs of this queue
    # (wiggle/_storage/postgres/wakeups.py), for a while after that poll too.
    assert await here.poll("w", [queue], 1, 0.3) == []
    assert ("work", queue) in store.cluster.wakeups.written()
    store.notifier.not_empty([queue])  # that poll found it empty: the next one would not look
    store.notifier.work_ready = spy  # type: ignore[method-assign]
    started: list[str] = []

    async def start_there() -> None:  # the other server commits; its NOTIFY arrives in the gap
        started.append((await there.start("one", "", {}, "")).instance.id)
        await asyncio.wait_for(heard.wait(), 20.0)

    store.hook = start_there
    (claimed,) = await asyncio.wait_for(here.poll("w", [queue], 1, 60.0), 40.0)
    assert claimed.token.instance_id == started[0]


@pytest.mark.postgres
async def test_postgres_poller_woken_by_another_server_before_it_wanted_its_notifies(
    pg_layers: Any,
) -> None:
    """The other server commits in the gap of a poll whose node has not yet asked for its
    NOTIFYs, so none is sent: the poll is woken when its node's row is written and finds the step
    (wiggle/_storage/postgres/wakeups.py, "No lost wake-up"), long before its wait would end."""
    here = await pg_layers()
    there = await pg_layers()
    store: _HookedPostgresStore = here.store
    await there.register(one_step())
    queue = (await there.start("one", "", {}, "")).tokens[0].queue
    await there.claim("w", [queue], 1)
    for _ in range(500):  # there knows here filters its NOTIFYs (here's peer count) and vice versa
        if there.store.cluster.filtering and store.cluster.filtering and store.cluster.peers:
            break
        await asyncio.sleep(0.01)
    started: list[str] = []

    async def start_there() -> None:
        started.append((await there.start("one", "", {}, "")).instance.id)

    store.hook = start_there
    assert ("work", queue) not in store.cluster.wakeups.written()
    (claimed,) = await asyncio.wait_for(here.poll("w", [queue], 1, 60.0), 20.0)
    assert claimed.token.instance_id == started[0]


# ---------------------------------------------------------------------- failure tracebacks


def test_a_long_traceback_keeps_its_head_and_tail_within_the_bound() -> None:
    import re

    from wiggle._server.failures import MAX_TRACEBACK_CHARS, bound_traceback

    short = "Traceback (most recent call last):\nValueError: x\n"
    assert bound_traceback(short) == short
    frames = "".join(f"  frame {i}\n" for i in range(5000))
    long = "Traceback (most recent call last):\n" + frames + "ValueError: end\n"
    bounded = bound_traceback(long)
    assert len(bounded) == MAX_TRACEBACK_CHARS
    assert bounded.startswith("Traceback (most recent call last):\n  frame 0\n")
    assert bounded.endswith("  frame 4999\nValueError: end\n")
    match = re.search(r"\n\.\.\. (\d+) characters cut \.\.\.\n", bounded)
    assert match is not None
    head, tail = bounded[: match.start()], bounded[match.end() :]
    assert long.startswith(head) and long.endswith(tail)
    assert len(head) + int(match.group(1)) + len(tail) == len(long)  # the note counts what is gone


async def test_expired_leases_are_logged_once_per_worker_naming_the_steps(
    caplog: pytest.LogCaptureFixture,
) -> None:
    """An operator trial: a worker killed with 12 steps in flight left no server log line naming
    an instance or a step (a counter and the histories only)."""
    store = MemoryStore()
    layer = Instances(store, Engine(EngineConfig(lease_millis=1000)))
    await layer.register(one_step())
    views = [await layer.start("one", "", {}, "") for _ in range(5)]
    claimed = await layer.claim("w-killed", [views[0].tokens[0].queue], 5)
    assert len(claimed) == 5
    expiry = max(c.token.lease_expires_at for c in claimed)
    with caplog.at_level(logging.WARNING, logger="wiggle.server"):
        assert await layer.run_clock_duties(expiry) == 5
    (line,) = [r.getMessage() for r in caplog.records if "lease expired" in r.getMessage()]
    assert line.startswith("lease expired on 5 step(s) of worker w-killed"), line
    assert any(f"instance {v.instance.id} node " in line for v in views), line
    assert line.count("instance ") == 3 and "and 2 more" in line, line


async def test_a_step_past_its_time_limit_is_not_logged_as_a_dead_worker(
    caplog: pytest.LogCaptureFixture,
) -> None:
    """An outside trial: every step timeout logged "lease expired on 1 step(s) of worker W
    (stopped, killed or unreachable)" at WARNING while W was alive: a false alarm for anyone
    watching for dead workers. A timeout is an INFO line saying what it is; a silent step past
    its heartbeat timeout says that."""
    layer = Instances(MemoryStore(), Engine(EngineConfig(lease_millis=60_000)))
    timed = Workflow.define("timed").step(lambda ctx: ctx, name="slow", timeout=2).build()
    beating = Workflow.define("beating").step(lambda ctx: ctx, name="quiet", heartbeat_timeout=3).build()
    for bp in (timed, beating):
        await layer.register(bp.definition)
        await layer.start(bp.name, "", {}, "")
    (slow,) = await layer.claim("w-alive", ["timed"], 1)
    (quiet,) = await layer.claim("w-alive", ["beating"], 1)
    with caplog.at_level(logging.INFO, logger="wiggle.server"):
        assert await layer.run_clock_duties(max(slow.token.deadline_at, quiet.token.lease_expires_at)) == 2
    lines = {r.getMessage(): r.levelno for r in caplog.records if "w-alive" in r.getMessage()}
    assert not [m for m in lines if "stopped, killed or unreachable" in m], lines
    ((timeout, timeout_level),) = [(m, lv) for m, lv in lines.items() if "time limit" in m]
    assert timeout.startswith("1 step(s) of worker w-alive ran past their time limit (start-to-close)")
    assert "node 'slow'" in timeout and timeout_level == logging.INFO
    ((silent, silent_level),) = [(m, lv) for m, lv in lines.items() if "heartbeat" in m]
    assert silent.startswith("1 step(s) of worker w-alive sent no heartbeat within their heartbeat timeout")
    assert "node 'quiet'" in silent and silent_level == logging.WARNING


async def test_schedules_fire_before_a_backlog_of_due_tokens_and_a_run_is_time_boxed(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """An outside trial: a for_each over 500 sub-workflows made hundreds of tokens due at once,
    and a 2 s schedule's ticks came 6.8 s apart (some skipped) on healthy servers, because the
    schedules ran after every round of due tokens. They run first now, and a run takes no more
    rounds once CLOCK_RUN_SECONDS have gone by (the loop comes straight back for the rest)."""
    from wiggle._server import clock_duties

    store = MemoryStore()
    layer = Instances(store, Engine(EngineConfig(lease_millis=1000)))
    await layer.register(one_step())
    views = [await layer.start("one", "", {}, "") for _ in range(250)]
    claimed = await layer.claim("w-gone", [views[0].tokens[0].queue], 250)
    expiry = max(c.token.lease_expires_at for c in claimed)
    order: list[str] = []

    async def run_duties(now: int) -> int:
        order.append("schedules")
        return 0

    due_tokens = store.due_tokens

    async def noting_due_tokens(now: int, limit: int) -> list[str]:
        order.append("tokens")
        return await due_tokens(now, limit)

    monkeypatch.setattr(layer.schedules, "run_duties", run_duties)
    monkeypatch.setattr(store, "due_tokens", noting_due_tokens)
    monkeypatch.setattr(clock_duties, "CLOCK_RUN_SECONDS", 0.0)  # one round a run
    assert await layer.run_clock_duties(expiry) == clock_duties.CLOCK_BATCH
    assert order == ["schedules", "tokens"]
    assert await layer.run_clock_duties(expiry) == 250 - clock_duties.CLOCK_BATCH  # the rest, next run
    assert order == ["schedules", "tokens", "schedules", "tokens"]
