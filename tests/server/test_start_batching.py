"""Starts that batch themselves (wiggle/_client/batching.py): concurrent ``start`` calls of one
client share one StartInstances call while an earlier one is in flight, and each caller gets its
own instance or its own error. A real loopback server on both stores counts the RPCs it saw."""

from __future__ import annotations

import asyncio
import contextlib
import threading
import time
from collections import deque
from collections.abc import AsyncIterator, Callable
from typing import Any

import grpc
import msgspec
import pytest
from held_starts import hold_starts
from pg import STORES, TEST_DATABASE_URL, async_temp_schema

from wiggle import AsyncClient, Client, Workflow
from wiggle._client import batching
from wiggle._client.batching import AsyncStartBatcher, StartBatcher
from wiggle._rpc import wiggle_pb2 as pb
from wiggle._rpc import wiggle_pb2_grpc as pb_grpc
from wiggle.errors import ErrorCode, InvalidArgument, NotFound, Unavailable, WiggleError
from wiggle.testing import EmbeddedServer


def double(ctx: dict[str, Any]) -> dict[str, Any]:
    return {**ctx, "n": ctx["n"] * 2}


FLOW = Workflow.define("coalesced").step(double).build()
OTHER = Workflow.define("coalesced-other").step(double).build()


@pytest.fixture(params=STORES)
async def server(request: pytest.FixtureRequest) -> AsyncIterator[EmbeddedServer]:
    async with contextlib.AsyncExitStack() as stack:
        settings: dict[str, Any] = {"max_payload_bytes": 4096}
        if request.param == "postgres":
            settings["database_url"] = TEST_DATABASE_URL
            settings["database_schema"] = await stack.enter_async_context(async_temp_schema())
        server = await stack.enter_async_context(EmbeddedServer(**settings))
        await server.client.register(FLOW)
        await server.client.register(OTHER)
        yield server


pytestmark = pytest.mark.usefixtures("no_tracing")


def calls(server: EmbeddedServer) -> tuple[int, int]:
    """(StartInstance, StartInstances) calls the server has seen."""
    seen = server.server.metrics.rpc_calls
    return seen["StartInstance"], seen["StartInstances"]


async def count_instances(client: AsyncClient) -> int:
    total = 0
    for name in (FLOW.name, OTHER.name):
        page, _ = await client.list(workflow=name, page_size=200)
        total += len(page)
    return total


async def test_concurrent_tasks_share_one_call_and_each_gets_its_own_instance(
    server: EmbeddedServer,
) -> None:
    async with AsyncClient(server.target) as client:
        infos = await asyncio.gather(*(client.start(FLOW, {"n": i}) for i in range(20)))
        assert calls(server) == (0, 1)  # all queued before the sender ran: one coalesced call
        assert [info.context for info in infos] == [{"n": i} for i in range(20)]
        assert len({info.instance_id for info in infos}) == 20
        assert all(info.workflow == "coalesced" and info.status == "RUNNING" for info in infos)
        async with server.worker([FLOW]):
            done = await client.result(infos[7].instance_id, timeout=30)
        assert done.context == {"n": 14}


async def test_a_lone_start_is_sent_at_once_as_a_call_of_one_start(server: EmbeddedServer) -> None:
    async with AsyncClient(server.target) as client:
        first = await client.start(FLOW, {"n": 1})
        assert calls(server) == (0, 1)  # a message of the client's stream (start_stream.py)
        for n in range(2, 5):  # one after another: never overlapping, never coalesced
            await client.start(FLOW, {"n": n})
        assert calls(server) == (0, 4)
        assert server.server.metrics.client_sessions_open == 1  # all on one stream
        assert (await client.get(first.instance_id)).context == {"n": 1}


async def test_a_bad_start_in_a_batch_fails_only_its_own_caller(server: EmbeddedServer) -> None:
    async with AsyncClient(server.target) as client:
        outcomes = await asyncio.gather(
            client.start(FLOW, {"n": 1}),
            client.start("no-such-workflow", {"n": 2}),
            client.start(OTHER, {"n": 3}),
            client.start(FLOW, {"n": 4}, request_id="bad id with spaces"),
            client.start(FLOW, {"x": "y" * 5000}),  # over max_payload_bytes
            client.start(FLOW, {"n": 6}, priority=1000),
            return_exceptions=True,
        )
        assert calls(server) == (0, 1)
        good = [outcomes[0], outcomes[2]]
        assert [o.context for o in good] == [{"n": 1}, {"n": 3}]  # type: ignore[union-attr]
        assert good[1].workflow == "coalesced-other"  # type: ignore[union-attr]
        assert isinstance(outcomes[1], NotFound) and "no-such-workflow" in str(outcomes[1])
        assert isinstance(outcomes[3], InvalidArgument) and "request_id" in str(outcomes[3])
        assert isinstance(outcomes[4], InvalidArgument) and "4096" in str(outcomes[4])
        assert isinstance(outcomes[5], InvalidArgument) and "priority" in str(outcomes[5])
        assert await count_instances(client) == 2  # the refused starts started nothing


async def test_request_ids_in_and_across_batches_start_one_instance(server: EmbeddedServer) -> None:
    async with AsyncClient(server.target) as client:
        a, b, c = await asyncio.gather(
            client.start(FLOW, {"n": 1}, request_id="order-1"),
            client.start(FLOW, {"n": 2}, request_id="order-1"),
            client.start(FLOW, {"n": 3}, request_id="order-2"),
        )
        assert calls(server) == (0, 1)
        assert a.instance_id == b.instance_id and b.context == {"n": 1}
        assert c.instance_id != a.instance_id
        again = await asyncio.gather(
            client.start(FLOW, {"n": 9}, request_id="order-2"),
            client.start(FLOW, {"n": 9}, request_id="order-1"),
        )
        assert [x.instance_id for x in again] == [c.instance_id, a.instance_id]
        assert await count_instances(client) == 2


async def test_start_options_in_a_batch_apply_to_their_own_start(server: EmbeddedServer) -> None:
    async with AsyncClient(server.target) as client:
        urgent, plain, first, second = await asyncio.gather(
            client.start(FLOW, {"n": 1}, priority=7),
            client.start(FLOW, {"n": 2}),
            client.start(FLOW, {"n": 3}, dedup_key="cart-9"),
            client.start(FLOW, {"n": 4}, dedup_key="cart-9"),
        )
        assert calls(server) == (0, 1)
        assert (urgent.priority, plain.priority) == (7, 0)
        assert first.dedup_key == "cart-9" and not first.deduplicated
        assert second.deduplicated and second.instance_id == first.instance_id
        assert second.context == {"n": 3}
        assert await count_instances(client) == 3


async def test_a_cancelled_caller_leaves_the_others_alone(server: EmbeddedServer) -> None:
    async with AsyncClient(server.target) as client:
        tasks = [asyncio.ensure_future(client.start(FLOW, {"n": i})) for i in range(5)]
        await asyncio.sleep(0)  # every task has queued its start; the sender has not run yet
        tasks[2].cancel()  # still queued: never sent
        infos = [await t for t in (tasks[0], tasks[1], tasks[3], tasks[4])]
        with pytest.raises(asyncio.CancelledError):
            await tasks[2]
        assert [i.context for i in infos] == [{"n": 0}, {"n": 1}, {"n": 3}, {"n": 4}]
        assert await count_instances(client) == 4

        # cancelled while its batch is in flight: the batch goes on, the others get their answers
        tasks = [asyncio.ensure_future(client.start(FLOW, {"n": 10 + i})) for i in range(3)]
        await asyncio.sleep(0)
        sender = client._starts._sender
        assert sender is not None
        while calls(server)[1] < 2:  # the coalesced call has reached the server
            await asyncio.sleep(0.001)
        tasks[0].cancel()
        rest = [await t for t in tasks[1:]]
        assert [i.context for i in rest] == [{"n": 11}, {"n": 12}]
        assert await count_instances(client) == 7  # the cancelled caller's start was sent: it exists
        assert client._starts._sender is None  # drained; the next start sends at once again
        await client.start(FLOW, {"n": 20})


async def test_threads_of_one_blocking_client_share_one_call(
    server: EmbeddedServer, eventually: Callable[..., Any]
) -> None:
    # The server holds the first start until the other threads have queued theirs behind it.
    release = hold_starts(server.server.instances)
    results: dict[int, Any] = {}
    with Client(server.target) as client:

        def start(n: int) -> None:
            try:
                results[n] = client.start("coalesced" if n != 3 else "missing", {"n": n})
            except Exception as exc:  # recorded for the assertions below
                results[n] = exc

        threads = [threading.Thread(target=start, args=(n,)) for n in range(8)]
        threads[0].start()
        await eventually(
            lambda: calls(server) == (0, 1), timeout=60, what="the first start reached the server"
        )
        for thread in threads[1:]:
            thread.start()
        await eventually(lambda: len(client._starts._pending) == 7, timeout=60, what="seven starts queued")
        release.set()
        await eventually(lambda: len(results) == 8, timeout=60, what="every thread answered")
        for thread in threads:
            await asyncio.to_thread(thread.join, 10)
    assert calls(server) == (0, 2)  # the lone first start, then the seven queued behind it
    assert isinstance(results[3], NotFound)
    ok = [results[n] for n in range(8) if n != 3]
    assert sorted(info.context["n"] for info in ok) == [0, 1, 2, 4, 5, 6, 7]
    assert len({info.instance_id for info in ok}) == 7


async def test_a_coalesced_call_with_bulk_fields_is_refused(server: EmbeddedServer) -> None:
    ok = pb.StartInstanceRequest(workflow="coalesced", context_json=msgspec.json.encode({"n": 1}))
    async with grpc.aio.insecure_channel(server.target) as channel:
        stub = pb_grpc.WiggleControlPlaneStub(channel)
        with pytest.raises(grpc.aio.AioRpcError) as err:
            await stub.StartInstances(pb.StartInstancesRequest(workflow="coalesced", starts=[ok]), timeout=10)
        assert err.value.code() == grpc.StatusCode.INVALID_ARGUMENT
        assert "workflow" in (err.value.details() or "")
        reply = await stub.StartInstances(pb.StartInstancesRequest(starts=[ok, ok]), timeout=10)
        assert [r.instance.context_json for r in reply.results] == [ok.context_json] * 2
        assert not any(r.HasField("error") for r in reply.results)


# ---------------------------------------------------------------- the batchers alone (no server)


def _info(request: pb.StartInstanceRequest) -> pb.InstanceInfo:
    return pb.InstanceInfo(instance_id=f"wi-{request.request_id}", workflow=request.workflow)


async def test_an_old_server_refusing_the_batch_gets_the_starts_one_by_one() -> None:
    sent: list[str] = []

    async def one(request: pb.StartInstanceRequest) -> pb.InstanceInfo:
        sent.append("one")
        if request.workflow == "missing":
            raise NotFound("workflow missing is not registered")
        return _info(request)

    async def many(request: pb.StartInstancesRequest) -> pb.StartInstancesResponse:
        sent.append("many")
        raise InvalidArgument("workflow: a name must not be empty")  # what an older server says

    batcher = AsyncStartBatcher(one, many)
    requests = [pb.StartInstanceRequest(workflow=w, request_id=str(i)) for i, w in enumerate("aab")]
    requests[1].workflow = "missing"
    outcomes = await asyncio.gather(*(batcher.start(r) for r in requests), return_exceptions=True)
    assert sent == ["many", "one", "one", "one"] and batcher.coalesce is False
    assert isinstance(outcomes[1], NotFound)
    assert [o.instance_id for o in (outcomes[0], outcomes[2])] == ["wi-0", "wi-2"]  # type: ignore[union-attr]
    await asyncio.gather(batcher.start(requests[0]), batcher.start(requests[2]))
    assert sent[4:] == ["one", "one"]  # no longer coalesced


async def test_a_failed_coalesced_call_fails_every_caller_of_its_batch() -> None:
    async def one(request: pb.StartInstanceRequest) -> pb.InstanceInfo:
        return _info(request)

    async def many(request: pb.StartInstancesRequest) -> pb.StartInstancesResponse:
        raise Unavailable("the server is going away")

    batcher = AsyncStartBatcher(one, many)
    outcomes = await asyncio.gather(
        *(batcher.start(pb.StartInstanceRequest(workflow="a")) for _ in range(3)), return_exceptions=True
    )
    assert all(isinstance(o, Unavailable) for o in outcomes) and batcher.coalesce is True


async def test_a_cancelled_sender_gives_its_callers_an_error_not_their_own_cancellation() -> None:
    # Only the sender task was cancelled (its loop closing, say): its callers were not, and a bare
    # CancelledError escaping them was the close() trial's finding (tests/server/test_client_close.py)
    sending = asyncio.Event()

    async def one(request: pb.StartInstanceRequest) -> pb.InstanceInfo:
        sending.set()
        await asyncio.sleep(60)
        return _info(request)

    async def many(request: pb.StartInstancesRequest) -> pb.StartInstancesResponse:
        raise AssertionError("one start: sent alone")

    batcher = AsyncStartBatcher(one, many)
    caller = asyncio.ensure_future(batcher.start(pb.StartInstanceRequest(workflow="a")))
    await sending.wait()
    assert batcher._sender is not None
    batcher._sender.cancel()
    with pytest.raises(WiggleError, match="may or may not have been applied") as cut:
        await caller
    assert cut.value.code is ErrorCode.CANCELLED and not caller.cancelled()


def test_the_blocking_batcher_sends_what_queued_behind_a_call_in_flight() -> None:
    in_flight = threading.Event()
    go_on = threading.Event()
    sent: list[list[str]] = []

    def one(request: pb.StartInstanceRequest) -> pb.InstanceInfo:
        sent.append([request.request_id])
        in_flight.set()
        assert go_on.wait(10)
        return _info(request)

    def many(request: pb.StartInstancesRequest) -> pb.StartInstancesResponse:
        sent.append([s.request_id for s in request.starts])
        reply = pb.StartInstancesResponse()
        for start in request.starts:
            if start.request_id == "3":
                reply.results.add().error.CopyFrom(pb.RpcError(code=5, message="nope"))
            else:
                reply.results.add().instance.CopyFrom(_info(start))
        return reply

    batcher = StartBatcher(one, many)
    results: dict[str, Any] = {}

    def start(n: int) -> None:
        try:
            results[str(n)] = batcher.start(pb.StartInstanceRequest(workflow="a", request_id=str(n)))
        except NotFound as exc:
            results[str(n)] = exc

    threads = [threading.Thread(target=start, args=(n,)) for n in range(6)]
    threads[0].start()
    assert in_flight.wait(10)
    for thread in threads[1:]:
        thread.start()
    while len(batcher._pending) < 5:
        threading.Event().wait(0.001)
    go_on.set()
    for thread in threads:
        thread.join(10)
    assert sent[0] == ["0"] and sorted(sent[1]) == ["1", "2", "3", "4", "5"] and len(sent) == 2
    assert isinstance(results["3"], NotFound) and str(results["3"]) == "nope"
    assert {k: v.instance_id for k, v in results.items() if k != "3"} == {
        n: f"wi-{n}" for n in ("0", "1", "2", "4", "5")
    }


class _CountedWaits:
    """A Condition's stand-in counting the sender's waits for more starts (``_arrived``) and
    the callers' wake-ups of it."""

    def __init__(self, real: threading.Condition) -> None:
        self.real = real
        self.waits = 0
        self.notified = 0

    def wait(self, timeout: float | None = None) -> bool:
        self.waits += 1
        return self.real.wait(timeout)

    def notify(self) -> None:
        self.notified += 1
        self.real.notify()


def _recording() -> tuple[StartBatcher, list[list[str]]]:
    sent: list[list[str]] = []

    def one(request: pb.StartInstanceRequest) -> pb.InstanceInfo:
        sent.append([request.request_id])
        return _info(request)

    def many(request: pb.StartInstancesRequest) -> pb.StartInstancesResponse:
        sent.append([s.request_id for s in request.starts])
        reply = pb.StartInstancesResponse()
        for start in request.starts:
            reply.results.add().instance.CopyFrom(_info(start))
        return reply

    return StartBatcher(one, many), sent


def test_callers_a_batch_just_answered_are_gathered_into_the_next_one(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # Three callers were answered a moment ago; the first one back waits for the other two
    # instead of sending alone (and making them wait for its round trip).
    monkeypatch.setattr(batching, "GATHER_SECONDS", 30.0)  # never the deadline here
    batcher, sent = _recording()
    batcher._answered, batcher._answered_at = 3, time.monotonic()
    arrived = batcher._arrived = _CountedWaits(batcher._arrived)  # type: ignore[assignment]
    results: dict[str, Any] = {}

    def start(n: int) -> None:
        results[str(n)] = batcher.start(pb.StartInstanceRequest(workflow="a", request_id=str(n)))

    first = threading.Thread(target=start, args=(0,))
    first.start()
    deadline = time.monotonic() + 30
    while not arrived.waits:  # the first is back and waits for the others (not sent alone)
        assert not sent and time.monotonic() < deadline, sent
        threading.Event().wait(0.001)
    assert sent == []
    others = [threading.Thread(target=start, args=(n,)) for n in (1, 2)]
    for thread in others:
        thread.start()
    for thread in (first, *others):
        thread.join(30)
    assert len(sent) == 1 and sorted(sent[0]) == ["0", "1", "2"]
    assert {k: v.instance_id for k, v in results.items()} == {n: f"wi-{n}" for n in ("0", "1", "2")}
    assert (batcher._answered, batcher._pending) == (3, deque())


def test_a_gathering_sender_is_woken_once_by_the_last_caller_it_waits_for(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # Four callers were answered a moment ago. The first back gathers; the second and third
    # queue without waking it (each wake-up would cost the sender a GIL hand-off for nothing:
    # bench/README.md, "Round thirty-one"); the fourth, the last it waits for, wakes it once.
    monkeypatch.setattr(batching, "GATHER_SECONDS", 30.0)
    batcher, sent = _recording()
    batcher._answered, batcher._answered_at = 4, time.monotonic()
    arrived = batcher._arrived = _CountedWaits(batcher._arrived)  # type: ignore[assignment]

    def start(n: int) -> None:
        batcher.start(pb.StartInstanceRequest(workflow="a", request_id=str(n)))

    threads = [threading.Thread(target=start, args=(n,)) for n in range(4)]
    deadline = time.monotonic() + 30
    for n, thread in enumerate(threads[:3]):
        thread.start()
        while len(batcher._pending) < n + 1 or not arrived.waits:  # queued; the first gathers
            assert time.monotonic() < deadline
            threading.Event().wait(0.001)
        assert (arrived.notified, arrived.waits, sent) == (0, 1, [])
    threads[3].start()
    for thread in threads:
        thread.join(30)
    assert len(sent) == 1 and sorted(sent[0]) == ["0", "1", "2", "3"]
    assert (arrived.notified, arrived.waits) == (1, 1)


def test_threads_queued_behind_more_than_one_batch_each_get_their_own_answer(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # Batches of at most two: most callers' starts wait behind one or more batches, and a sender's
    # own start may not be in the batch it sends; the sender's turn passes to the oldest start
    # still queued until none is left, and every caller gets the answer to its own start.
    real_take = batching.take
    monkeypatch.setattr(batching, "take", lambda pending: real_take(pending, 2))
    batcher, sent = _recording()
    results: dict[str, str] = {}
    errors: list[BaseException] = []

    def caller(n: int) -> None:
        try:
            for k in range(5):
                rid = f"{n}-{k}"
                results[rid] = batcher.start(
                    pb.StartInstanceRequest(workflow="a", request_id=rid)
                ).instance_id
        except BaseException as exc:  # pragma: no cover - reported below
            errors.append(exc)

    threads = [threading.Thread(target=caller, args=(n,)) for n in range(12)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(30)
    assert not errors and not any(t.is_alive() for t in threads)
    assert results == {f"{n}-{k}": f"wi-{n}-{k}" for n in range(12) for k in range(5)}
    assert sorted(r for batch in sent for r in batch) == sorted(results) and max(map(len, sent)) <= 2
    assert (batcher._sending, batcher._pending) == (False, deque())


def test_a_lone_caller_and_a_late_one_are_never_held(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(batching, "GATHER_SECONDS", 30.0)
    batcher, sent = _recording()
    arrived = batcher._arrived = _CountedWaits(batcher._arrived)  # type: ignore[assignment]
    for n in range(3):  # one caller, one start after another: each batch was of one
        batcher.start(pb.StartInstanceRequest(workflow="a", request_id=str(n)))
    # a batch of three answered long ago: whoever comes now goes at once
    batcher._answered, batcher._answered_at = 3, time.monotonic() - 60
    batcher.start(pb.StartInstanceRequest(workflow="a", request_id="3"))
    assert sent == [["0"], ["1"], ["2"], ["3"]] and arrived.waits == 0


class _InterruptedWait:
    """A caller's wake-up lock whose first blocking wait is interrupted (KeyboardInterrupt), at
    once or just as the sender's turn is handed to it."""

    def __init__(self, when_handed: bool) -> None:
        self.real = threading.Lock()
        self.when_handed = when_handed
        self.fired = False

    def acquire(self, blocking: bool = True) -> bool:
        if blocking and not self.fired:
            self.fired = True
            while self.when_handed and self.real.locked():
                threading.Event().wait(0.001)
            raise KeyboardInterrupt
        return self.real.acquire(blocking)

    def release(self) -> None:
        self.real.release()


def _interrupting(monkeypatch: pytest.MonkeyPatch, request_id: str, when_handed: bool) -> None:
    """Starts with ``request_id`` wait on an ``_InterruptedWait``."""

    class Interrupted(batching._Blocked):
        def __init__(self, request: pb.StartInstanceRequest) -> None:
            super().__init__(request)
            if request.request_id == request_id:
                wake = _InterruptedWait(when_handed)
                wake.real.acquire()
                self.wake = wake  # type: ignore[assignment]

    monkeypatch.setattr(batching, "_Blocked", Interrupted)


@pytest.mark.parametrize("when_handed", [False, True], ids=["while-queued", "as-its-turn-comes"])
def test_a_caller_interrupted_while_it_waits_leaves_its_start_unsent_and_the_others_going(
    monkeypatch: pytest.MonkeyPatch, when_handed: bool
) -> None:
    # "s" is in flight; "b" queues and is interrupted (Ctrl-C in the main thread) while it waits,
    # or just as the sender's turn is handed to it; "c" queues behind. "b"'s start is never sent,
    # and the turn goes on to "c" (nobody is left waiting for a turn that went to "b").
    _interrupting(monkeypatch, "b", when_handed)
    go_on = threading.Event()
    in_flight = threading.Event()
    sent: list[list[str]] = []

    def one(request: pb.StartInstanceRequest) -> pb.InstanceInfo:
        sent.append([request.request_id])
        if request.request_id == "s":
            in_flight.set()
            assert go_on.wait(10)
        return _info(request)

    def many(request: pb.StartInstancesRequest) -> pb.StartInstancesResponse:  # pragma: no cover
        raise AssertionError(f"one start at a time here, got {[s.request_id for s in request.starts]}")

    batcher = StartBatcher(one, many)
    outcomes: dict[str, Any] = {}

    def start(rid: str) -> None:
        try:
            outcomes[rid] = batcher.start(pb.StartInstanceRequest(workflow="a", request_id=rid)).instance_id
        except KeyboardInterrupt as exc:
            outcomes[rid] = exc

    first = threading.Thread(target=start, args=("s",))
    first.start()
    assert in_flight.wait(10)
    b = threading.Thread(target=start, args=("b",))
    b.start()
    if not when_handed:
        b.join(10)
        assert isinstance(outcomes["b"], KeyboardInterrupt) and list(batcher._pending) == []
    c = threading.Thread(target=start, args=("c",))
    c.start()
    deadline = time.monotonic() + 10
    while len(batcher._pending) < (2 if when_handed else 1):
        assert time.monotonic() < deadline
        threading.Event().wait(0.001)
    go_on.set()
    for thread in (first, b, c):
        thread.join(10)
    assert isinstance(outcomes.pop("b"), KeyboardInterrupt)
    assert outcomes == {"s": "wi-s", "c": "wi-c"} and sent == [["s"], ["c"]]
    assert (batcher._sending, batcher._pending) == (False, deque())


def test_a_sender_interrupted_before_its_call_passes_the_turn_on(monkeypatch: pytest.MonkeyPatch) -> None:
    batcher, sent = _recording()
    real_gather = batcher._gather
    calls = [0]

    def gather() -> None:
        calls[0] += 1
        if calls[0] == 1:
            raise KeyboardInterrupt
        real_gather()

    monkeypatch.setattr(batcher, "_gather", gather)
    with pytest.raises(KeyboardInterrupt):
        batcher.start(pb.StartInstanceRequest(workflow="a", request_id="gone"))
    assert (batcher._sending, batcher._pending) == (False, deque())
    assert batcher.start(pb.StartInstanceRequest(workflow="a", request_id="next")).instance_id == "wi-next"
    assert sent == [["next"]]
