"""Queues and versions: a step runs on a worker serving its queue; instances keep their version."""

from __future__ import annotations

from wiggle import Workflow

from .conftest import Harness


async def test_steps_on_two_queues_run_on_the_workers_serving_them(harness: Harness, trace) -> None:
    def intake(ctx):
        trace.hit("intake")
        return {**ctx, "intake": True}

    def charge(ctx):
        trace.hit("charge")
        return {**ctx, "charge": True}

    def receipt(ctx):
        trace.hit("receipt")
        return {**ctx, "receipt": True}

    def notify(ctx):
        trace.hit("notify")
        return {**ctx, "notify": True}

    bp = (
        harness.define("queues")
        .step(intake, queue="front")
        .step(charge, queue="payments")
        .step(receipt, queue="payments")
        .step(notify, queue="front")
        .build()
    )
    async with harness.server() as server:
        front = server.worker([bp], harness.options(worker_id="front-worker", queues=["front"]))
        pay = server.worker([bp], harness.options(worker_id="payments-worker", queues=["payments"]))
        async with front, pay:
            info = await server.client.start(bp, {})
            done = await harness.finish(server, info.instance_id)
    assert done.status == "COMPLETED" and done.error == ""
    assert done.context == {"intake": True, "charge": True, "receipt": True, "notify": True}
    assert trace.steps == ["intake", "charge", "receipt", "notify"]
    assert dict(trace.workers) == {
        "intake": ["front-worker"],
        "charge": ["payments-worker"],
        "receipt": ["payments-worker"],
        "notify": ["front-worker"],
    }
    if harness.local:
        # charge -> receipt is a same-queue run; each queue change is a handback
        assert (pay.stats.local_runs.count, pay.stats.local_runs.steps) == (1, 2)
        assert (front.stats.local_runs.count, front.stats.local_runs.steps) == (2, 2)


async def test_instance_pinned_to_an_older_version(harness: Harness, trace) -> None:
    def start(ctx):
        trace.hit("start")
        return {**ctx, "start": True}

    def old_finish(ctx):
        trace.hit("old_finish")
        return {**ctx, "finish": "old"}

    def new_finish(ctx):
        trace.hit("new_finish")
        return {**ctx, "finish": "new"}

    v1 = harness.define("versions").step(start).step(old_finish).build()
    # the same name, a different graph: a newer version
    v2 = Workflow.define(v1.name).execution(harness.mode).step(start).step(new_finish).build()
    assert v1.version != v2.version
    async with harness.server() as server:
        await server.client.register(v1)
        await server.client.register(v2)
        latest = await server.client.get_workflow(v1.name)
        assert latest.version == v2.version
        async with server.worker([v1, v2], harness.options()):
            pinned = await server.client.start(v1.name, {}, version=v1.version)
            assert pinned.version == v1.version
            done_old = await harness.finish(server, pinned.instance_id)
            unpinned = await server.client.start(v1.name, {})
            assert unpinned.version == v2.version
            done_new = await harness.finish(server, unpinned.instance_id)
    assert done_old.status == "COMPLETED" and done_old.context == {"start": True, "finish": "old"}
    assert done_new.status == "COMPLETED" and done_new.context == {"start": True, "finish": "new"}
    assert trace.steps == ["start", "old_finish", "start", "new_finish"]


async def test_reregistering_the_same_graph_is_a_no_op(harness: Harness) -> None:
    bp = harness.define("same").step(lambda c: c, name="only").build()
    async with harness.server() as server:
        first = await server.client.register(bp)
        again = await server.client.register(bp)
        versions = await server.client.list_workflows(bp.name)
    assert first.created is True and again.created is False
    assert first.version == again.version == bp.version
    assert [w.version for w in versions] == [bp.version]
