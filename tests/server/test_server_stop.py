"""A server that stops lets go at once of what only waits (docs/operations.md#stopping-a-server):
its worker streams answer what they read and end, long polls and instance waits are answered
UNAVAILABLE, a report brings no next step; only the calls in flight are waited for. A rolling
restart on PostgreSQL then loses nothing and adds no retry, and a client's wait rides through it."""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator, Callable
from typing import Any

import grpc
import msgspec
import pytest
from both_clients import EitherClient
from pg import STORES, TEST_DATABASE_URL
from ports import free_port

from wiggle import AsyncClient, Client, Workflow
from wiggle._rpc import wiggle_pb2 as pb
from wiggle._rpc import wiggle_pb2_grpc as pb_grpc
from wiggle._server.config import ServerConfig
from wiggle._worker.reporter import Reporter
from wiggle.errors import Unavailable
from wiggle.testing import EmbeddedServer
from wiggle.worker import WorkerOptions


def first(ctx: dict[str, Any]) -> dict[str, Any]:
    return {**ctx, "first": True}


def second(ctx: dict[str, Any]) -> dict[str, Any]:
    return {**ctx, "second": True}


PAIR = Workflow.define("stop-pair").step(first).step(second).build()


def config_for(store: str, schema: str, port: int = 0) -> ServerConfig:
    if store == "postgres":
        return ServerConfig(port=port, database_url=TEST_DATABASE_URL, database_schema=schema)
    return ServerConfig(port=port)


class HeldStep:
    """A step (``slow``) that runs until ``released``; ``running`` once it has begun."""

    def __init__(self) -> None:
        self.running = asyncio.Event()
        self.released = asyncio.Event()

    async def slow(self, ctx: dict[str, Any]) -> dict[str, Any]:
        self.running.set()
        await self.released.wait()
        return {**ctx, "slow": True}


@pytest.fixture
async def server() -> AsyncIterator[EmbeddedServer]:
    async with EmbeddedServer() as server:
        await server.client.register(PAIR)
        yield server


@pytest.fixture
async def stub(server: EmbeddedServer) -> AsyncIterator[pb_grpc.WiggleControlPlaneStub]:
    async with grpc.aio.insecure_channel(server.target) as channel:
        yield pb_grpc.WiggleControlPlaneStub(channel)


@pytest.mark.parametrize("store", STORES)
async def test_a_server_with_a_worker_connected_stops_without_waiting_out_its_grace(
    store: str, request: pytest.FixtureRequest
) -> None:
    # The worker's poll waits on the server; before, the stop waited for it the whole grace
    # (60 s here: the 30 s bound fails first).
    schema = request.getfixturevalue("pg_schema") if store == "postgres" else ""
    server = await EmbeddedServer(config_for(store, schema)).start()
    stopped = False
    try:
        await server.client.register(PAIR)
        async with server.worker([PAIR], WorkerOptions(poll_wait_seconds=30)):
            info = await server.client.result((await server.client.start(PAIR, {})).instance_id, timeout=30)
            assert info.context == {"first": True, "second": True}
            assert server.server.metrics.sessions_open == 1
            await server.client.close()
            await asyncio.wait_for(server.server.stop(grace=60), 30)
            stopped = True
            assert server.server.metrics.sessions_open == 0
    finally:
        if not stopped:
            await server.stop()


async def test_a_waiting_poll_on_the_worker_stream_is_answered_unavailable_and_the_stream_ends(
    server: EmbeddedServer, stub: pb_grpc.WiggleControlPlaneStub
) -> None:
    outgoing: asyncio.Queue[pb.WorkerBatch | None] = asyncio.Queue()

    async def frames() -> AsyncIterator[pb.WorkerBatch]:
        while (frame := await outgoing.get()) is not None:
            yield frame

    call = stub.WorkerSession(frames())
    poll = pb.PollTasksRequest(worker_id="w1", queues=["nobody-serves-this"], max_tasks=1, wait_millis=30_000)
    outgoing.put_nowait(pb.WorkerBatch(messages=[pb.WorkerMessage(request_id=7, poll=poll)]))
    while not server.server.service.pollers.snapshot():  # the poll is waiting on the server
        await asyncio.sleep(0.01)
    server.server.service.let_go()
    frame = await asyncio.wait_for(call.read(), 10)
    (reply,) = frame.messages
    assert reply.request_id == 7 and reply.WhichOneof("body") == "error"
    assert reply.error.code == grpc.StatusCode.UNAVAILABLE.value[0]
    assert "server is stopping" in reply.error.message
    assert await asyncio.wait_for(call.read(), 10) is grpc.aio.EOF
    assert await call.code() == grpc.StatusCode.OK
    outgoing.put_nowait(None)


async def test_unary_polls_and_instance_waits_in_flight_are_answered_unavailable(
    server: EmbeddedServer, stub: pb_grpc.WiggleControlPlaneStub
) -> None:
    instance_id = (await server.client.start(PAIR, {})).instance_id  # no worker: it stays RUNNING
    poll = stub.PollTasks(pb.PollTasksRequest(worker_id="w1", queues=["elsewhere"], wait_millis=30_000))
    wait = stub.GetInstance(pb.GetInstanceRequest(instance_id=instance_id, wait_millis=30_000))
    await asyncio.sleep(0.3)  # both are waiting on the server
    server.server.service.let_go()
    for call, what in ((poll, "poll again"), (wait, f"wait for instance {instance_id} again")):
        with pytest.raises(grpc.aio.AioRpcError) as raised:
            await asyncio.wait_for(call, 10)
        assert raised.value.code() == grpc.StatusCode.UNAVAILABLE
        assert f"the server is stopping; {what}" in raised.value.details()
    # what does not wait is still answered
    assert (await server.client.get(instance_id)).status == "RUNNING"


async def test_a_report_to_a_stopping_server_brings_no_next_step(
    server: EmbeddedServer, stub: pb_grpc.WiggleControlPlaneStub
) -> None:
    instance_id = (await server.client.start(PAIR, {})).instance_id
    queue = "stop-pair"  # a workflow's steps run on the queue named after it
    (task,) = (await stub.PollTasks(pb.PollTasksRequest(worker_id="w1", queues=[queue], max_tasks=1))).tasks
    server.server.service.let_go()
    report = await stub.CompleteTask(
        pb.CompleteTaskRequest(
            task_id=task.task_id,
            lease_owner=task.lease_owner,
            context_json=b'{"first": true}',
            next_queues=[queue],
        )
    )
    # left READY for a poll of another server, or of this one once it is back
    assert not report.HasField("next_task")
    info = await server.client.get(instance_id)
    assert [t.status for t in info.tokens] == ["READY"]
    assert info.context == {"first": True}


@pytest.mark.parametrize("mode", ["SERVER", "LOCAL_SYNC"])
@pytest.mark.parametrize("blocking", [False, True], ids=["async", "blocking"])
async def test_a_rolling_restart_loses_nothing_retries_nothing_and_a_wait_rides_through(
    mode: str, blocking: bool, pg_schema: str, eventually: Callable[..., Any]
) -> None:
    # A step is running in the worker when its server stops; the stop does not wait for it, the
    # server comes back on its port, the worker's report lands there, and the instance finishes
    # with one attempt per step. A client waiting for the instance all along gets its result.
    held = HeldStep()
    flow = (
        Workflow.define(f"rolling-{mode.lower()}")
        .execution(mode)
        .step(first)
        .step(held.slow)
        .step(second)
        .build()
    )
    port = free_port()
    config = config_for("postgres", pg_schema, port)
    old = await EmbeddedServer(config).start()
    new: EmbeddedServer | None = None
    target = f"127.0.0.1:{port}"
    try:
        await old.client.register(flow)
        async with old.worker([flow]) as worker:
            instance_id = (await old.client.start(flow, {})).instance_id
            await asyncio.wait_for(held.running.wait(), 30)
            if blocking:
                waiting_client: Any = Client(target)
                waiter = asyncio.ensure_future(asyncio.to_thread(waiting_client.wait, instance_id, 60))
            else:
                waiting_client = AsyncClient(target)
                waiter = asyncio.ensure_future(waiting_client.wait(instance_id, 60))
            try:
                await asyncio.sleep(0.2)  # the wait is on the server
                await old.client.close()
                began = time.monotonic()
                await asyncio.wait_for(old.server.stop(grace=60), 30)
                print(f"stopped in {time.monotonic() - began:.3f} s with a step running")
                assert not waiter.done()
                new = await EmbeddedServer(config).start()
                held.released.set()
                info = await asyncio.wait_for(waiter, 60)
            finally:
                if blocking:
                    await asyncio.to_thread(waiting_client.close)
                else:
                    await waiting_client.close()
            assert info.status == "COMPLETED", info
            assert info.context == {"first": True, "slow": True, "second": True}
            await eventually(lambda: new is not None and new.server.metrics.sessions_open == 1)
            del worker
        assert new is not None
        history = await new.client.history(instance_id)
        assert [e.node_id for e in history if e.kind == "TASK"] == ["first", "slow", "second"], history
        for entry in history:
            assert entry.attempt == 1, entry
            assert entry.outcome != "RETRY", entry
            assert "lease" not in entry.error, entry
    finally:
        held.released.set()
        if new is not None:
            await new.stop()
        await old.server.stop(grace=0)


@pytest.mark.parametrize("mode", ["SERVER", "LOCAL_SYNC"])
async def test_a_report_waits_out_a_restart_longer_than_its_tries_within_its_lease(
    mode: str, pg_schema: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    # The worker's two tries (0.1 s) end long before the server is back (1.5 s); the step's lease
    # (10 s) has not, so its report keeps trying (wiggle/_worker/reporter.py) and lands: one
    # attempt per step. Given up after its tries, the step would run again once its lease expired.
    monkeypatch.setattr(Reporter, "ATTEMPTS", 2)
    held = HeldStep()
    flow = Workflow.define(f"outlasting-{mode.lower()}").execution(mode).step(held.slow).step(second).build()
    port = free_port()
    config = msgspec.structs.replace(config_for("postgres", pg_schema, port), lease_millis=10_000)
    old = await EmbeddedServer(config).start()
    new: EmbeddedServer | None = None
    try:
        await old.client.register(flow)
        async with old.worker([flow]):
            instance_id = (await old.client.start(flow, {})).instance_id
            await asyncio.wait_for(held.running.wait(), 30)
            await old.client.close()
            await asyncio.wait_for(old.server.stop(grace=60), 30)
            held.released.set()  # the report is sent to no server, and tried again
            await asyncio.sleep(1.5)
            new = await EmbeddedServer(config).start()
            info = await new.client.wait(instance_id, 60)
        assert info.status == "COMPLETED" and info.context == {"slow": True, "second": True}, info
        history = await new.client.history(instance_id)
        assert [(e.node_id, e.attempt) for e in history if e.kind == "TASK"] == [("slow", 1), ("second", 1)]
        assert not [e for e in history if e.error], history
    finally:
        held.released.set()
        if new is not None:
            await new.stop()
        await old.server.stop(grace=0)


@pytest.mark.parametrize("blocking", [False, True], ids=["async", "blocking"])
async def test_a_start_with_a_request_id_rides_through_a_restart_and_one_without_fails_fast(
    blocking: bool, pg_schema: str
) -> None:
    # While the server is away, a start with a request id is asked again (repeating the id can
    # start nothing twice) until the server is back; one without is not (it may or may not have
    # happened): Unavailable at once, for the caller to decide.
    port = free_port()
    config = config_for("postgres", pg_schema, port)
    old = await EmbeddedServer(config).start()
    new: EmbeddedServer | None = None
    target = f"127.0.0.1:{port}"
    client = EitherClient(target, blocking)

    async def start(**kwargs: Any) -> Any:
        return await client.call("start", PAIR, {"n": 1}, **kwargs)

    async def start_many(request_id: str) -> list[str]:
        return list(await client.call("start_many", PAIR, [{}, {}, {}], request_id=request_id))

    try:
        await old.client.register(PAIR)
        first = await start(request_id="order-1")
        await old.client.close()
        await asyncio.wait_for(old.server.stop(grace=60), 30)
        with pytest.raises(Unavailable):
            await asyncio.wait_for(start(), 20)
        pending = asyncio.ensure_future(start(request_id="order-2"))
        pending_many = asyncio.ensure_future(start_many("batch-1"))
        await asyncio.sleep(1.0)
        assert not pending.done() and not pending_many.done()  # still asking
        new = await EmbeddedServer(config).start()
        second = await asyncio.wait_for(pending, 20)
        many = await asyncio.wait_for(pending_many, 20)
        again = await start(request_id="order-2")  # the same request id: the same instance
        assert second.instance_id == again.instance_id != first.instance_id
        assert await start_many("batch-1") == many and len(set(many)) == 3
        page, _ = await new.client.list(workflow="stop-pair")
        assert len(page) == 5, page
    finally:
        await client.close()
        if new is not None:
            await new.stop()
        await old.server.stop(grace=0)


@pytest.mark.parametrize("blocking", [False, True], ids=["async", "blocking"])
async def test_a_client_that_never_reached_its_server_does_not_wait_for_it(blocking: bool) -> None:
    # A wrong target (a closed port here) is a mistake to report, not a restart to ride through: a
    # client that has never reached its server asks again for 3 s at most (core.FIRST_CONTACT),
    # not the wait's 60 s nor a start's 30 s.
    client = EitherClient(f"127.0.0.1:{free_port()}", blocking)
    call = client.call

    try:
        with pytest.raises(Unavailable):
            await asyncio.wait_for(call("wait", "wi-000000000000000000000000", 60), 20)
        with pytest.raises(Unavailable):
            await asyncio.wait_for(call("start", PAIR, {}, request_id="order-3"), 20)
    finally:
        await client.close()
