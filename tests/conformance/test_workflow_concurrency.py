"""Workflow-level concurrency limits (docs/flow-control.md#workflow-concurrency), on both stores:
``Workflow.define(name, concurrency=Limit(key=..., max=N, strategy=...))`` lets at most N
instances per value of the key be live; a start over the limit waits SCHEDULED for a slot
(queue, FIFO per key), is cancelled (cancel_newest), or cancels the oldest live ones
(cancel_oldest). Most workflows here wait at a user task, so an instance stays live until the
test completes it, with no worker."""

from __future__ import annotations

import asyncio
import uuid
from typing import Any

import grpc
import msgspec
import pytest
from pg import STORES

from wiggle import ExecutionMode, Limit, RetryPolicy, Workflow
from wiggle._engine.workflow_limits import CONCURRENCY_KIND
from wiggle._rpc import wiggle_pb2 as pb
from wiggle._rpc import wiggle_pb2_grpc as pb_grpc
from wiggle.testing import WorkflowEnvironment

from .conftest import MODES, Harness


@pytest.fixture(params=STORES)
def harness(request: pytest.FixtureRequest, postgres_schema: str) -> Harness:
    """One store; SERVER mode (the limit is about instances, not how their steps run)."""
    return Harness(request.param, ExecutionMode.SERVER, postgres_schema)


def _held(harness: Harness, base: str, strategy: str = "queue", max: int = 1):
    """A workflow whose instances stay live at the user task "hold" until it is completed."""
    limit = Limit(key="account_id", max=max, strategy=strategy)
    name = f"{base}-{uuid.uuid4().hex[:8]}"
    return Workflow.define(name, concurrency=limit).user_task("hold").build()


async def _status(server, instance_id: str) -> str:
    return str((await server.client.get(instance_id)).status)


async def _until(predicate, what: str, tries: int = 300) -> None:
    for _ in range(tries):
        if await predicate():
            return
        await asyncio.sleep(0.05)
    raise AssertionError(f"never happened: {what}")


async def _release(server, instance_id: str) -> None:
    """Complete the hold of a live instance and wait for it to finish."""
    await server.client.complete_user_task(instance_id, "hold", {})
    await Harness.finish(server, instance_id)


def _limit_entries(history) -> list[tuple[str, str]]:
    return [(e.outcome, e.error) for e in history if e.kind == CONCURRENCY_KIND]


async def test_queue_waits_for_a_slot_and_begins_in_fifo_order(harness: Harness) -> None:
    bp = _held(harness, "queue")
    async with harness.server() as server:
        await server.client.register(bp)
        first = await server.client.start(bp, {"account_id": 42})
        assert first.status == "RUNNING" and first.waiting_reason == ""
        waiting = [await server.client.start(bp, {"account_id": 42, "n": n}) for n in range(3)]
        other = await server.client.start(bp, {"account_id": 7})  # another key is not held back
        assert other.status == "RUNNING"
        for info in waiting:
            assert info.status == "SCHEDULED", info
            assert info.waiting_reason == "waiting for a concurrency slot of account_id=42 (limit 1)"
            assert info.concurrency_key == "account_id=42" and info.concurrency_max == 1
            assert info.concurrency_waiting_since > 0
        # the figure of the metric wiggle_workflow_concurrency_waiting_instances
        assert (await server.server.instances.store.concurrency_waiting()).get(bp.name) == 3
        order = [first, *waiting]
        for i, info in enumerate(order):
            assert await _status(server, info.instance_id) == "RUNNING"
            for later in order[i + 1 :]:
                assert await _status(server, later.instance_id) == "SCHEDULED"
            await _release(server, info.instance_id)  # its finish begins the next, oldest first
        got = await server.client.get(waiting[0].instance_id)
        assert got.status == "COMPLETED" and got.waiting_reason == "" and got.concurrency_waiting_since == 0
        entries = _limit_entries(await server.client.history(waiting[0].instance_id))
        assert [o for o, _ in entries] == ["WAITING", "BEGAN"], entries
        assert "a concurrency slot of account_id=42 was free" in entries[1][1]
        await _release(server, other.instance_id)


async def test_a_waiting_instance_can_be_cancelled_and_is_skipped(harness: Harness) -> None:
    bp = _held(harness, "cancel-waiting")
    async with harness.server() as server:
        await server.client.register(bp)
        first = await server.client.start(bp, {"account_id": "a"})
        second = await server.client.start(bp, {"account_id": "a"})
        third = await server.client.start(bp, {"account_id": "a"})
        info, changed = await server.client.cancel(second.instance_id, "not needed")
        assert changed and info.status == "CANCELLED"
        await _release(server, first.instance_id)
        assert await _status(server, third.instance_id) == "RUNNING"
        assert await _status(server, second.instance_id) == "CANCELLED"
        await _release(server, third.instance_id)


async def test_a_failed_and_a_cancelled_live_instance_free_their_slot(harness: Harness) -> None:
    bp = _held(harness, "frees")
    async with harness.server() as server:
        await server.client.register(bp)
        first = await server.client.start(bp, {"account_id": 1})
        second = await server.client.start(bp, {"account_id": 1})
        await server.client.cancel(first.instance_id, "operator")
        await _until(lambda: _is(server, second.instance_id, "RUNNING"), "the next began")
        await _release(server, second.instance_id)


async def _is(server, instance_id: str, status: str) -> bool:
    return await _status(server, instance_id) == status


async def test_cancel_newest_cancels_a_start_over_the_limit(harness: Harness) -> None:
    bp = _held(harness, "newest", strategy="cancel_newest")
    async with harness.server() as server:
        await server.client.register(bp)
        first = await server.client.start(bp, {"account_id": 42})
        second = await server.client.start(bp, {"account_id": 42})
        assert second.status == "CANCELLED"  # the start's answer says so
        expected = "cancelled: account_id=42 already has 1 live instance(s) (limit 1, strategy cancel_newest)"
        assert second.reason == expected
        assert ("CANCELLED", expected) in _limit_entries(await server.client.history(second.instance_id))
        assert await _status(server, first.instance_id) == "RUNNING"
        await _release(server, first.instance_id)
        third = await server.client.start(bp, {"account_id": 42})  # the slot is free again
        assert third.status == "RUNNING"
        await _release(server, third.instance_id)


async def test_cancel_oldest_makes_room_for_the_new_start(harness: Harness) -> None:
    bp = _held(harness, "oldest", strategy="cancel_oldest", max=2)
    async with harness.server() as server:
        await server.client.register(bp)
        a = await server.client.start(bp, {"account_id": "t"})
        b = await server.client.start(bp, {"account_id": "t"})
        c = await server.client.start(bp, {"account_id": "t"})
        assert c.status == "RUNNING"
        old = await server.client.get(a.instance_id)
        assert old.status == "CANCELLED"
        assert old.reason.startswith(
            f"cancelled to make room for {c.instance_id}: account_id=t already has 2"
        )
        assert "strategy cancel_oldest" in old.reason
        assert [o for o, _ in _limit_entries(await server.client.history(a.instance_id))] == [
            "WAITING",
            "BEGAN",
            "CANCELLED",
        ]
        assert await _status(server, b.instance_id) == "RUNNING"
        for info in (b, c):
            await _release(server, info.instance_id)


def _flaky(harness: Harness):
    def step(ctx: dict[str, Any]) -> dict[str, Any]:
        if ctx.get("boom"):
            raise RuntimeError("boom")
        return {**ctx, "done": True}

    name = f"retry-{uuid.uuid4().hex[:8]}"
    return (
        Workflow.define(name, concurrency=Limit(key="account_id"))
        .user_task("hold")
        .step(step, name="work", retry=RetryPolicy(max_attempts=1))
        .build()
    )


async def test_a_retry_waits_for_a_slot_like_a_queued_start(harness: Harness) -> None:
    bp = _flaky(harness)
    async with harness.running([bp]) as (server, _):
        failed = await server.client.start(bp, {"account_id": 5, "boom": True})
        await server.client.complete_user_task(failed.instance_id, "hold", {})
        assert (await Harness.finish(server, failed.instance_id)).status == "FAILED"
        live = await server.client.start(bp, {"account_id": 5})  # the failed one holds no slot
        assert live.status == "RUNNING"
        retried = await server.client.retry(failed.instance_id, context={"account_id": 5})
        assert retried.status == "SCHEDULED"
        assert retried.waiting_reason == "a retry waiting for a concurrency slot of account_id=5 (limit 1)"
        await server.client.complete_user_task(live.instance_id, "hold", {})
        assert (await Harness.finish(server, live.instance_id)).status == "COMPLETED"
        done = await Harness.finish(server, failed.instance_id)  # the retry ran once the slot was free
        assert done.status == "COMPLETED" and done.context["done"], done
        finished_live = (await server.client.get(live.instance_id)).finished_at
        began = [e for e in await server.client.history(failed.instance_id) if e.outcome == "BEGAN"]
        assert began and began[-1].started_at >= finished_live
        # with a slot free, a retry begins at once (its answer says so)
        again = await server.client.start(bp, {"account_id": 6, "boom": True})
        await server.client.complete_user_task(again.instance_id, "hold", {})
        assert (await Harness.finish(server, again.instance_id)).status == "FAILED"
        with pytest.raises(Exception, match="nope"):  # refused before it waits: nothing changed
            await server.client.retry(again.instance_id, from_node="nope")
        assert await _status(server, again.instance_id) == "FAILED"
        retried = await server.client.retry(again.instance_id, from_node="hold", context={"account_id": 6})
        assert retried.status == "RUNNING" and retried.waiting_reason == ""
        await _release(server, again.instance_id)
        # a refused retry changes nothing
        with pytest.raises(Exception, match="only a FAILED instance can be retried"):
            await server.client.retry(again.instance_id)


async def test_time_skipping_moves_the_queue_on(harness: Harness) -> None:
    name = f"skip-{uuid.uuid4().hex[:8]}"
    bp = Workflow.define(name, concurrency=Limit(key="k")).sleep("nap", 3600).build()
    settings: dict[str, Any] = {}
    if harness.store == "postgres":
        from .conftest import POSTGRES_URL

        settings = {"database_url": POSTGRES_URL, "database_schema": harness.schema}
    async with WorkflowEnvironment([bp], **settings) as env:
        first = await env.start_workflow(bp, {"k": 1})
        second = await env.start_workflow(bp, {"k": 1})
        assert second.status == "SCHEDULED"
        done = await env.result(second)
        one = await env.result(first)
        assert done.status == "COMPLETED"
        assert done.finished_at - one.finished_at >= 3_600_000  # it slept after the first ended


@pytest.fixture
def pg(postgres_schema: str) -> Harness:
    """PostgreSQL (the scenarios of several servers and restarts)."""
    return Harness("postgres", ExecutionMode.SERVER, postgres_schema)


@pytest.mark.postgres
async def test_postgres_waiting_instances_begin_after_a_restart(pg: Harness) -> None:
    harness = pg
    bp = _held(harness, "restart")
    async with harness.server() as server:
        await server.client.register(bp)
        first = await server.client.start(bp, {"account_id": 9})
        second = await server.client.start(bp, {"account_id": 9})
        third = await server.client.start(bp, {"account_id": 9})
    async with harness.server() as server:
        assert await _status(server, second.instance_id) == "SCHEDULED"
        await _release(server, first.instance_id)
        assert await _status(server, second.instance_id) == "RUNNING"
        # A finish whose admission is lost (a crash right after its commit): the clock duties'
        # sweep of the next server begins the waiting one.
        server.server.instances.limits._next_sweep = 2**62  # nor does this server's sweep
        server.server.instances.limits.after = _nothing  # type: ignore[method-assign]
        await _release(server, second.instance_id)
        assert await _status(server, third.instance_id) == "SCHEDULED"
    async with harness.server() as server:
        await _until(lambda: _is(server, third.instance_id, "RUNNING"), "the sweep began it")
        await _release(server, third.instance_id)


async def _nothing(states: Any) -> None:
    return None


@pytest.mark.postgres
async def test_postgres_two_servers_racing_starts_of_one_key_never_have_two_live(pg: Harness) -> None:
    bp = _held(pg, "race")
    async with pg.server() as one, pg.server() as two:
        await one.client.register(bp)
        servers = (one, two)
        infos = await asyncio.gather(
            *(servers[i % 2].client.start(bp, {"account_id": "hot", "n": i}) for i in range(40))
        )
        assert len({i.instance_id for i in infos}) == 40
        done: set[str] = set()
        for round_ in range(40):
            page, _ = await one.client.list(workflow=bp.name, status="RUNNING", page_size=100)
            assert len(page) == 1, (round_, [i.instance_id for i in page])
            live = page[0].instance_id
            await _release(servers[round_ % 2], live)  # finished on either server
            done.add(live)
        assert done == {i.instance_id for i in infos}
        # From the history: each instance began after the one before it had finished.
        spans = []
        for info in infos:
            began = [e.started_at for e in await one.client.history(info.instance_id) if e.outcome == "BEGAN"]
            finished = (await one.client.get(info.instance_id)).finished_at
            spans.append((began[0], finished))
        spans.sort()
        for (_, end), (start, _) in zip(spans, spans[1:], strict=False):
            assert start >= end, spans


async def test_a_delayed_start_waits_for_a_slot_at_its_start_time(harness: Harness) -> None:
    bp = _held(harness, "delayed")
    async with harness.server() as server:
        await server.client.register(bp)
        first = await server.client.start(bp, {"account_id": 3})
        later = await server.client.start(bp, {"account_id": 3}, start_delay=0.2)
        assert later.status == "SCHEDULED" and later.waiting_reason == ""  # its time has not come
        await _until(
            lambda: _reason(server, later.instance_id), "the delayed start waits for a slot at its time"
        )
        await _release(server, first.instance_id)
        assert await _status(server, later.instance_id) == "RUNNING"
        await _release(server, later.instance_id)


async def _reason(server, instance_id: str) -> bool:
    return (await server.client.get(instance_id)).waiting_reason.startswith("waiting for a concurrency slot")


async def test_sub_workflow_children_count_under_their_own_limit(harness: Harness) -> None:
    child = _held(harness, "child")
    parent = Workflow.define(f"parent-{uuid.uuid4().hex[:8]}").sub_workflow("run", child.name).build()
    async with harness.server() as server:
        await server.client.register(child)
        await server.client.register(parent)
        p1 = await server.client.start(parent, {"account_id": 8})
        p2 = await server.client.start(parent, {"account_id": 8})

        async def children() -> list:
            page, _ = await server.client.list(workflow=child.name, page_size=10)
            return sorted(page, key=lambda i: i.created_at)

        async def two() -> bool:
            return len(await children()) == 2

        await _until(two, "both children exist")
        kids = await children()
        statuses = sorted(str(k.status) for k in kids)
        assert statuses == ["RUNNING", "SCHEDULED"], statuses
        running = next(k for k in kids if k.status == "RUNNING")
        waiting = next(k for k in kids if k.status == "SCHEDULED")
        assert await _status(server, waiting.parent_id) == "RUNNING"  # the parent waits for it
        await _release(server, running.instance_id)
        await Harness.finish(server, running.parent_id)
        await _until(lambda: _is(server, waiting.instance_id, "RUNNING"), "the second child began")
        await _release(server, waiting.instance_id)
        for p in (p1, p2):
            assert (await Harness.finish(server, p.instance_id)).status == "COMPLETED"


async def test_the_limit_goes_over_the_wire_and_a_bad_one_is_refused(harness: Harness) -> None:
    bp = _held(harness, "wire", strategy="cancel_oldest", max=3)
    async with harness.server() as server:
        await server.client.register(bp)
        got = await server.client.get_workflow(bp.name)
        assert got.definition.concurrency == Limit(key="account_id", max=3, strategy="cancel_oldest")
        data = msgspec.json.decode(bp.definition.to_json())
        data["concurrency"]["strategy"] = "newest"
        async with grpc.aio.insecure_channel(server.target) as channel:
            stub = pb_grpc.WiggleControlPlaneStub(channel)
            with pytest.raises(grpc.aio.AioRpcError) as err:
                await stub.RegisterWorkflow(
                    pb.RegisterWorkflowRequest(definition_json=msgspec.json.encode(data))
                )
        assert err.value.code() == grpc.StatusCode.INVALID_ARGUMENT
        assert "concurrency strategy 'newest' is not one of" in (err.value.details() or "")


async def test_wiggle_get_says_what_slot_an_instance_waits_for(
    harness: Harness, capsys: pytest.CaptureFixture[str]
) -> None:
    from wiggle import cli

    bp = _held(harness, "cli")
    async with harness.server() as server:
        await server.client.register(bp)
        await server.client.start(bp, {"account_id": "x"})
        waiting = await server.client.start(bp, {"account_id": "x"})
        capsys.readouterr()
        code = await asyncio.to_thread(cli.main, ["--target", server.target, "get", waiting.instance_id])
        out = capsys.readouterr().out
    assert code == 0
    assert "status     SCHEDULED" in out
    assert "waiting    waiting for a concurrency slot of account_id=x (limit 1)" in out


async def test_a_signal_to_a_waiting_instance_is_buffered_until_it_waits_for_it(harness: Harness) -> None:
    name = f"signalled-{uuid.uuid4().hex[:8]}"
    bp = Workflow.define(name, concurrency=Limit(key="account_id")).wait_signal("go").build()
    async with harness.server() as server:
        await server.client.register(bp)
        first = await server.client.start(bp, {"account_id": 1})
        second = await server.client.start(bp, {"account_id": 1})
        sent = await server.client.signal(second.instance_id, "go", {"early": True})
        assert sent.outcome == "BUFFERED" and sent.instance.status == "SCHEDULED"
        await server.client.signal(first.instance_id, "go", {})
        done = await Harness.finish(server, second.instance_id)  # took its buffered signal
        assert done.status == "COMPLETED" and done.context["early"] is True


async def test_an_admission_lost_after_a_finish_is_made_good_by_the_clock_duties(harness: Harness) -> None:
    from wiggle._server.workflow_limits import SWEEP_MILLIS

    bp = _held(harness, "sweep")
    async with harness.server() as server:
        await server.client.register(bp)
        full = _held(harness, "sweep-full")  # a key at its limit is not admitted by the sweep
        await server.client.register(full)
        first = await server.client.start(bp, {"account_id": 2})
        second = await server.client.start(bp, {"account_id": 2})
        await server.client.start(full, {"account_id": 2})
        await server.client.start(full, {"account_id": 2})
        layer = server.server.instances
        store_keys = await layer.store.waiting_keys(100)
        assert (bp.name, "account_id=2") not in store_keys and (full.name, "account_id=2") not in store_keys
        layer.limits._next_sweep = 2**62  # the server's own clock loop sweeps nothing meanwhile
        admit_after, layer.limits.after = layer.limits.after, _nothing  # type: ignore[method-assign]
        await _release(server, first.instance_id)  # its admission is "lost"
        assert await _status(server, second.instance_id) == "SCHEDULED"
        assert (bp.name, "account_id=2") in await layer.store.waiting_keys(100)
        layer.limits.after = admit_after  # type: ignore[method-assign]
        layer.limits._next_sweep = 0
        await layer.run_clock_duties(layer.now() + SWEEP_MILLIS)
        assert await _status(server, second.instance_id) == "RUNNING"
        await _release(server, second.instance_id)


async def test_cancel_oldest_cancels_the_children_of_the_instance_it_cancels(harness: Harness) -> None:
    child = Workflow.define(f"kid-{uuid.uuid4().hex[:8]}").user_task("hold").build()
    parent = (
        Workflow.define(
            f"rebuild-{uuid.uuid4().hex[:8]}", concurrency=Limit(key="tenant", strategy="cancel_oldest")
        )
        .sub_workflow("run", child.name)
        .build()
    )
    async with harness.server() as server:
        await server.client.register(child)
        await server.client.register(parent)
        old = await server.client.start(parent, {"tenant": "t1"})

        async def kids() -> list:
            page, _ = await server.client.list(workflow=child.name, page_size=10)
            return page

        async def one_kid() -> bool:
            return len(await kids()) == 1

        await _until(one_kid, "the first parent's child started")
        new = await server.client.start(parent, {"tenant": "t1"})
        assert new.status == "RUNNING"
        assert await _status(server, old.instance_id) == "CANCELLED"
        (first_kid,) = [k.instance_id for k in await kids() if k.parent_id == old.instance_id]
        await _until(
            lambda: _is(server, first_kid, "CANCELLED"), "the cancelled parent's child was cancelled"
        )
        await server.client.cancel(new.instance_id, "done")


@pytest.fixture(params=[(s, m) for s in STORES for m in MODES], ids=lambda p: f"{p[0]}-{p[1].value}")
def moded(request: pytest.FixtureRequest, postgres_schema: str) -> Harness:
    """One store and execution mode."""
    return Harness(request.param[0], request.param[1], postgres_schema)


async def test_queued_instances_run_one_at_a_time_in_every_mode(moded: Harness) -> None:
    wf = Workflow.define(
        f"modes-{moded.mode.value.lower().replace('_', '-')}-{uuid.uuid4().hex[:8]}",
        concurrency=Limit(key="account_id"),
    ).execution(moded.mode)
    bp = wf.step(lambda ctx: {**ctx, "a": 1}, name="a").step(lambda ctx: {**ctx, "b": 1}, name="b").build()
    async with moded.running([bp]) as (server, _):
        infos = [await server.client.start(bp, {"account_id": 1, "n": n}) for n in range(4)]
        done = [await Harness.finish(server, i.instance_id) for i in infos]
        assert all(d.status == "COMPLETED" and d.context["b"] == 1 for d in done)
        spans = []
        for info in done:
            began = [
                e.started_at for e in await server.client.history(info.instance_id) if e.outcome == "BEGAN"
            ]
            spans.append((began[0], info.finished_at))
        assert [s for s, _ in spans] == sorted(s for s, _ in spans)  # FIFO
        for (_, end), (start, _) in zip(spans, spans[1:], strict=False):
            assert start >= end, spans


async def test_instances_a_schedule_starts_take_the_limit(harness: Harness) -> None:
    bp = _held(harness, "scheduled")
    async with harness.server() as server:
        await server.client.register(bp)
        sid = f"s-{uuid.uuid4().hex[:8]}"
        await server.client.create_schedule(
            sid, bp, {"account_id": "s"}, every=3600, paused=True, overlap="ALLOW"
        )
        first = await server.client.trigger_schedule(sid)
        second = await server.client.trigger_schedule(sid)
        assert await _status(server, first.instance_id) == "RUNNING"
        assert await _reason(server, second.instance_id)
        await _release(server, first.instance_id)
        assert await _status(server, second.instance_id) == "RUNNING"
        await _release(server, second.instance_id)
        await server.client.delete_schedule(sid)
