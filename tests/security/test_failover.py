"""Workers fail over: given several server addresses, a worker moves on when its server is down."""

from __future__ import annotations

from collections import Counter

import msgspec
import pytest

from wiggle import AsyncClient, Client, ExecutionMode, Workflow
from wiggle._client.targets import balancing, join_targets
from wiggle.errors import NotFound, Unavailable
from wiggle.testing import EmbeddedServer
from wiggle.worker import Worker, WorkerOptions


class Ctx(msgspec.Struct):
    n: int = 0


def bump(c: Ctx) -> Ctx:
    c.n += 1
    return c


BP = Workflow.define("failover-wf", Ctx).execution(ExecutionMode.SERVER).step(bump).build()


def test_join_targets() -> None:
    assert join_targets("127.0.0.1:7233") == "127.0.0.1:7233"
    assert join_targets("dns:///svc.internal:7233") == "dns:///svc.internal:7233"
    assert join_targets(["127.0.0.1:1", "127.0.0.2:2"]) == "ipv4:127.0.0.1:1,127.0.0.2:2"
    assert join_targets("127.0.0.1:1, localhost:2").startswith("ipv")
    assert join_targets(["[::1]:5", "::1:6"]) == "ipv6:[::1]:5,[::1]:6"
    with pytest.raises(ValueError, match="'127.0.0.1' has no port: add it, e.g. '127.0.0.1:7233'"):
        join_targets(["127.0.0.1", "127.0.0.1:2"])
    with pytest.raises(ValueError, match="mix IPv4 and IPv6"):
        join_targets(["127.0.0.1:1", "[::1]:2"])
    with pytest.raises(ValueError, match="no server address"):
        join_targets(" , ")


@pytest.mark.parametrize("target", [7233, None, b"127.0.0.1:1", ["127.0.0.1:1", 2]])
def test_a_target_of_another_type_is_named(target: object) -> None:
    """``Client(7233)`` met "'int' object is not iterable", ``Client(b"...")`` "'int' object has no
    attribute 'strip'"; the worker's client the same, at its start."""
    with pytest.raises(
        TypeError, match=r"the server address must be 'host:port' \(a str\), or a list of them, got"
    ):
        Client(target)  # type: ignore[arg-type]
    with pytest.raises(TypeError, match=r"the server address must be 'host:port'"):
        Worker(target, [BP])  # type: ignore[arg-type]  # at once, not at its start


@pytest.mark.parametrize("transport", ["stream", "unary"])
async def test_worker_moves_to_the_next_server_when_its_own_stops(transport: str) -> None:
    """Each server here has its own in-memory store, so the worker keeps to the first while it is
    up (pick_first: its reports go where its polls went), then moves to the second."""
    first = await EmbeddedServer().start()
    second = await EmbeddedServer().start()
    stopped = False
    try:
        await first.client.register(BP)
        await second.client.register(BP)
        options = WorkerOptions(
            concurrency=2, poll_wait_seconds=0.5, transport=transport, balance="pick_first"
        )
        async with Worker([first.target, second.target], [BP], options):
            started = await first.client.start(BP, Ctx())
            assert (await first.client.result(started.instance_id, timeout=30)).context == {"n": 1}
            await first.stop()  # the worker's server goes away
            stopped = True
            moved = await second.client.start(BP, Ctx(n=10))
            done = await second.client.result(moved.instance_id, timeout=60)
            assert done.context == {"n": 11}
    finally:
        if not stopped:
            await first.stop()
        await second.stop()


def test_several_servers_are_served_round_robin() -> None:
    assert balancing(join_targets(["127.0.0.1:1", "127.0.0.2:2"])) == [
        ("grpc.service_config", '{"loadBalancingConfig": [{"round_robin": {}}]}')
    ]
    assert balancing(join_targets("127.0.0.1:1")) == []  # one server: gRPC's default (pick_first)
    assert balancing("dns:///svc.internal:7233") == []


async def test_calls_spread_over_the_servers_given() -> None:
    """A client given two servers sends its calls to both in turn (each server here has its own
    in-memory store, so a call that reached the other one finds no such instance)."""
    async with EmbeddedServer() as a, EmbeddedServer() as b:
        for server in (a, b):
            await server.client.register(BP)
        on_a = await a.client.start(BP, Ctx())
        seen: Counter[str] = Counter()
        async with AsyncClient([a.target, b.target]) as both:
            for _ in range(20):
                try:
                    await both.get(on_a)
                    seen["a"] += 1
                except NotFound:
                    seen["b"] += 1
        assert seen["a"] >= 5 and seen["b"] >= 5, seen


async def test_pick_first_keeps_the_first_server() -> None:
    """``balance="pick_first"``: the order is a preference, every call goes to the first server
    (docs/deployment.md#starts-apart-from-steps)."""
    async with EmbeddedServer() as a, EmbeddedServer() as b:
        for server in (a, b):
            await server.client.register(BP)
        on_a = await a.client.start(BP, Ctx())
        async with AsyncClient([a.target, b.target], balance="pick_first") as first:
            for _ in range(10):
                assert (await first.get(on_a)).instance_id == on_a.instance_id


def test_an_unknown_balance_is_refused() -> None:
    with pytest.raises(ValueError, match="balance must be 'round_robin' or 'pick_first', got 'random'"):
        AsyncClient(["127.0.0.1:1", "127.0.0.1:2"], balance="random")
    with pytest.raises(ValueError, match="balance must be"):
        Worker("127.0.0.1:1", [BP], WorkerOptions(balance="random"))


@pytest.mark.parametrize("blocking", [False, True])
async def test_a_call_not_safe_to_repeat_is_repeated_only_while_nothing_was_applied(blocking: bool) -> None:
    """A start without a request id answered "nothing applied" is made again; once a try may
    have been applied (a COMMIT's answer lost), it is not made again, whatever came before."""
    answers = [
        Unavailable("database unavailable: no connection within 5 s", not_applied=True),
        Unavailable("database unavailable: no connection within 5 s", not_applied=True),
        Unavailable("database connection lost while committing: may or may not have been applied"),
        "started",
    ]
    tries: list[object] = []

    def send() -> object:
        answer = answers[len(tries)]
        tries.append(answer)
        if isinstance(answer, Exception):
            raise answer
        return answer

    async def asend() -> object:
        return send()

    client: Client | AsyncClient = Client("127.0.0.1:1") if blocking else AsyncClient("127.0.0.1:1")
    client._reached = True  # a server answered before: a restart, not a wrong target
    with pytest.raises(Unavailable, match="may or may not"):
        if isinstance(client, Client):
            client._again_while_away(send, None)
        else:
            await client._again_while_away(asend, None)
    assert len(tries) == 3
    client.close() if isinstance(client, Client) else await client.close()
