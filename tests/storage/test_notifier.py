"""The Notifier: counted, first-in-first-out wake-ups of long-polling workers."""

from __future__ import annotations

import asyncio

import pytest

from wiggle._engine.engine import Engine
from wiggle._engine.state import Changes, Token
from wiggle._model import Node, NodeKind, WorkflowDefinition
from wiggle._server.instances import Instances
from wiggle._storage.base import InstanceQuery, Notifier, ready_counts
from wiggle._storage.memory import MemoryStore


async def _waiters(
    notifier: Notifier, queues: list[list[str]], timeout: float = 5.0
) -> list[asyncio.Task[bool]]:
    """Start one wait_work per entry, in order (each registered before the next starts)."""
    tasks = []
    for qs in queues:
        tasks.append(asyncio.ensure_future(notifier.wait_work(qs, timeout)))
        await asyncio.sleep(0)  # let it register: arrival order is the order of this list
    return tasks


async def _settle() -> None:
    for _ in range(5):
        await asyncio.sleep(0)


def _woken(tasks: list[asyncio.Task[bool]]) -> list[int]:
    return [i for i, t in enumerate(tasks) if t.done()]


async def _finish(tasks: list[asyncio.Task[bool]]) -> None:
    for t in tasks:
        t.cancel()
    await asyncio.gather(*tasks, return_exceptions=True)


async def test_a_count_wakes_that_many_waiters_oldest_first() -> None:
    n = Notifier()
    tasks = await _waiters(n, [["q"]] * 5)
    n.work_ready(["q"], {"q": 1})
    await _settle()
    assert _woken(tasks) == [0]
    assert tasks[0].result() is True
    n.work_ready(["q"], {"q": 2})
    await _settle()
    assert _woken(tasks) == [0, 1, 2]
    n.work_ready(["q"], {"q": 10})  # more work than waiters: everyone left wakes
    await _settle()
    assert _woken(tasks) == [0, 1, 2, 3, 4]
    assert all(t.result() is True for t in tasks)
    assert not n._queue_waiters  # nothing left behind


async def test_an_unknown_count_wakes_everyone() -> None:
    n = Notifier()
    tasks = await _waiters(n, [["q"], ["q"], ["other"]])
    n.work_ready(["q"])  # e.g. a notification from another node: the count is unknown
    await _settle()
    assert _woken(tasks) == [0, 1]
    n.work_ready(["other"], {"q": 1})  # counts that don't name the queue: unknown too
    await _settle()
    assert _woken(tasks) == [0, 1, 2]


async def test_a_zero_count_or_no_waiters_wakes_nobody() -> None:
    n = Notifier()
    n.work_ready(["q"], {"q": 3})  # nobody waits: nothing happens, nothing is remembered
    tasks = await _waiters(n, [["q"]], timeout=0.05)
    n.work_ready(["q"], {"q": 0})
    assert await tasks[0] is False  # timed out
    assert not n._queue_waiters


async def test_a_waiter_on_several_queues_is_counted_once() -> None:
    n = Notifier()
    tasks = await _waiters(n, [["a", "b"], ["a"], ["b"]])
    # one token on each queue: the first waiter is woken for "a", so "b"'s wake-up goes to the
    # next waiter of "b", not to the first one again
    n.work_ready(["a", "b"], {"a": 1, "b": 1})
    await _settle()
    assert _woken(tasks) == [0, 2]
    n.work_ready(["b"], {"b": 1})  # the first waiter left every queue when woken
    await _settle()
    assert _woken(tasks) == [0, 2]
    n.work_ready(["a"], {"a": 1})
    await _settle()
    assert _woken(tasks) == [0, 1, 2]
    assert not n._queue_waiters


async def test_duplicate_queue_names_register_once() -> None:
    n = Notifier()
    tasks = await _waiters(n, [["q", "q"], ["q"]])
    n.work_ready(["q"], {"q": 1})
    await _settle()
    assert _woken(tasks) == [0]
    await _finish(tasks)


async def test_a_woken_waiter_that_is_cancelled_passes_its_wake_up_on() -> None:
    n = Notifier()
    tasks = await _waiters(n, [["q"]] * 3)
    n.work_ready(["q"], {"q": 1})
    tasks[0].cancel()  # picked, but cancelled before it could run (a poll cancelled by its worker)
    await _settle()
    assert tasks[0].cancelled()
    assert _woken(tasks) == [0, 1]  # the next in line got the wake-up instead
    assert tasks[1].result() is True
    assert not tasks[2].done()
    tasks[2].cancel()  # an unpicked waiter that is cancelled passes nothing on
    await _settle()
    assert not n._queue_waiters


async def test_work_ready_names_the_queues_with_steps_no_waiter_here_was_woken_for() -> None:
    n = Notifier()
    tasks = await _waiters(n, [["a"], ["a"], ["b"]])
    # two steps on a, two waiters: covered; two on b, one waiter: one step for other nodes; c: none
    assert n.work_ready(["a", "b", "c"], {"a": 2, "b": 2, "c": 1}) == ["b", "c"]
    await _settle()
    assert _woken(tasks) == [0, 1, 2]
    tasks = await _waiters(n, [["a"]])
    assert n.work_ready(["a"]) == ["a"]  # uncounted (another node's news): never covered
    await _settle()
    assert _woken(tasks) == [0]


async def test_a_wake_up_passed_on_with_nobody_left_here_goes_to_the_other_nodes() -> None:
    n = Notifier()
    told: list[str] = []
    n.spill = told.append
    tasks = await _waiters(n, [["q"]] * 2)
    assert n.work_ready(["q"], {"q": 1}) == []
    tasks[0].cancel()  # took the wake-up, left without acting: the second waiter gets it
    await _settle()
    assert _woken(tasks) == [0, 1] and tasks[1].result() is True and told == []
    tasks = await _waiters(n, [["q"]])
    assert n.work_ready(["q"], {"q": 1}) == []
    tasks[0].cancel()  # and now nobody else waits here: the other nodes are told
    await _settle()
    assert told == ["q"]
    assert not n._queue_waiters


async def test_timeouts_leave_nothing_behind_and_later_waiters_still_wake() -> None:
    n = Notifier()
    assert await n.wait_work(["q"], 0) is False
    assert await n.wait_work(["q"], 0.01) is False
    assert not n._queue_waiters
    tasks = await _waiters(n, [["q"]])
    n.work_ready(["q"], {"q": 1})
    assert await tasks[0] is True


async def test_wake_all_wakes_every_kind_of_waiter() -> None:
    n = Notifier()
    work = await _waiters(n, [["a"], ["b", "c"]])
    instance = asyncio.ensure_future(n.wait_instance("wi-1", 5.0))
    clock = asyncio.ensure_future(n.wait_clock(5.0))
    await _settle()
    n.wake_all()
    await asyncio.wait_for(asyncio.gather(*work, instance, clock), 1.0)
    assert [t.result() for t in work] == [True, True]
    assert not n._queue_waiters and not n._instance_waiters and not n._any_waiters


def test_ready_counts_counts_ready_tokens_per_named_queue() -> None:
    changes = Changes()
    changes.ready_queues = {"a", "b"}
    for i, (status, queue) in enumerate(
        [("READY", "a"), ("READY", "a"), ("RUNNING", "a"), ("READY", "c"), ("COMPLETED", "b")]
    ):
        token = Token(id=f"wi-x.{i}", instance_id="wi-x", node_id="n", status=status, queue=queue)
        changes.tokens[token.id] = token
    # "b" gained no READY token that is still READY (merged away): one wake-up, to be safe;
    # "c" was not announced as gaining work, so it is not counted
    assert ready_counts(changes) == {"a": 2, "b": 1}


def _fan_out() -> WorkflowDefinition:
    return WorkflowDefinition(
        name="fan",
        start_node="fork",
        nodes=(
            Node(id="fork", kind=NodeKind.FORK, branches=("a", "b", "c"), join="join"),
            Node(id="a", kind=NodeKind.TASK, next="join"),
            Node(id="b", kind=NodeKind.TASK, next="join"),
            Node(id="c", kind=NodeKind.TASK, next="join"),
            Node(id="join", kind=NodeKind.JOIN, fork="fork", next="end"),
            Node(id="end", kind=NodeKind.END),
        ),
    )


async def test_the_memory_store_wakes_one_poller_per_new_ready_token() -> None:
    store = Instances(MemoryStore(), Engine())
    await store.register(_fan_out())
    view = await store.start("fan", "", {}, "")
    queues = {t.queue for t in view.tokens}
    assert len(queues) == 1 and len(view.tokens) == 3
    (queue,) = queues
    tasks = await _waiters(store.store.notifier, [[queue]] * 5)
    await store.start("fan", "", {}, "")  # three READY tokens: three pollers wake, two sleep on
    await _settle()
    assert _woken(tasks) == [0, 1, 2]
    await _finish(tasks)


async def test_memory_list_instances_pages_newest_first() -> None:
    store = Instances(MemoryStore(), Engine())
    await store.register(_fan_out())
    ids = [(await store.start("fan", "", {}, "cid" if i % 2 else "")).instance.id for i in range(7)]
    assert ids == sorted(ids)
    seen: list[str] = []
    token = ""
    while True:
        page, token = await store.list_instances(InstanceQuery(page_size=3, page_token=token))
        seen.extend(v.instance.id for v in page)
        if not token:
            break
    assert seen == ids[::-1]
    page, token = await store.list_instances(InstanceQuery(correlation_id="cid", page_size=2))
    assert [v.instance.id for v in page] == [ids[5], ids[3]] and token == ids[3]
    page, token = await store.list_instances(
        InstanceQuery(correlation_id="cid", page_size=2, page_token=token)
    )
    assert [v.instance.id for v in page] == [ids[1]] and token == ""
    # a page token that is not an existing id (e.g. a purged instance) still seeks correctly
    page, _ = await store.list_instances(InstanceQuery(page_size=10, page_token=ids[4] + "x"))
    assert [v.instance.id for v in page] == ids[4::-1]
    page, _ = await store.list_instances(InstanceQuery(page_size=10, page_token="wi-0"))
    assert page == []


@pytest.mark.parametrize("count", [1, 2])
async def test_work_on_several_queues_wakes_per_queue(count: int) -> None:
    n = Notifier()
    tasks = await _waiters(n, [["a"], ["b"], ["a"], ["b"]])
    n.work_ready(["a", "b"], {"a": count, "b": count})
    await _settle()
    assert _woken(tasks) == ([0, 1] if count == 1 else [0, 1, 2, 3])
    await _finish(tasks)


async def test_a_waiter_cancelled_before_the_wake_up_is_not_counted() -> None:
    n = Notifier()
    tasks = await _waiters(n, [["q"]] * 3)
    tasks[0].cancel()  # its wait is over, though its task has not run its clean-up yet
    n.work_ready(["q"], {"q": 1})
    await _settle()
    assert tasks[0].cancelled()
    assert _woken(tasks) == [0, 1]  # the wake-up went to a waiter that still waits
    assert tasks[1].result() is True and not tasks[2].done()
    await _finish(tasks)
