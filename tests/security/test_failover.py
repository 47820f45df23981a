"""Workers fail over: given several server addresses, a worker moves on when its server is down."""

from __future__ import annotations

import msgspec
import pytest

from wiggle import ExecutionMode, Workflow
from wiggle._client.targets import join_targets
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
    with pytest.raises(ValueError, match="not host:port"):
        join_targets(["127.0.0.1", "127.0.0.1:2"])
    with pytest.raises(ValueError, match="mix IPv4 and IPv6"):
        join_targets(["127.0.0.1:1", "[::1]:2"])
    with pytest.raises(ValueError, match="no server address"):
        join_targets(" , ")


@pytest.mark.parametrize("transport", ["stream", "unary"])
async def test_worker_moves_to_the_next_server_when_its_own_stops(transport: str) -> None:
    first = await EmbeddedServer().start()
    second = await EmbeddedServer().start()
    stopped = False
    try:
        await second.client.register(BP)
        options = WorkerOptions(concurrency=2, poll_wait_seconds=0.5, transport=transport)
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
