"""The memory store's byte bound: contexts and history are counted at every write; over the bound a
start is refused RESOURCE_EXHAUSTED naming the limit and the use, after the finished instances
(oldest finished first) were evicted; a refused start leaves nothing behind."""

from __future__ import annotations

import re

import msgspec
import pytest

from wiggle import Workflow
from wiggle._engine.state import Changes, InstanceState
from wiggle._server.app import WiggleServer
from wiggle._server.config import ServerConfig
from wiggle._storage.memory import MemoryStore
from wiggle._storage.memory_bytes import ByteLedger
from wiggle.client import AsyncClient
from wiggle.errors import NotFound, ResourceExhausted
from wiggle.testing import EmbeddedServer
from wiggle.worker import Worker, WorkerOptions

MIB = 1 << 20
BLOB = "x" * (MIB - 1024)  # a context of just under 1 MiB (the payload limit is 1 MiB)


class Ctx(msgspec.Struct):
    blob: str = ""
    n: int = 0


def idle(c: Ctx) -> Ctx:
    return c


# no worker serves this queue: every instance stays RUNNING until cancelled
PARKED = Workflow.define("parked-bytes", Ctx).step(idle, queue="nobody-serves-this").build()


def _store(server: EmbeddedServer) -> MemoryStore:
    store = server.server.store
    assert isinstance(store, MemoryStore)
    return store


async def test_starts_over_the_byte_bound_are_refused_and_finished_ones_evicted_first() -> None:
    bound = int(3.5 * MIB)
    async with EmbeddedServer(max_memory_bytes=bound, max_live_instances=0) as server:
        client, store = server.client, _store(server)
        await client.register(PARKED)
        assert store.bytes_used == 0
        first = [await client.start(PARKED, Ctx(blob=BLOB, n=i)) for i in range(3)]
        used = store.bytes_used
        assert 3 * len(BLOB) < used < bound  # each context counted once, plus its history

        with pytest.raises(ResourceExhausted) as refused:
            await client.start(PARKED, Ctx(blob=BLOB, n=3), request_id="req-refused")
        message = str(refused.value)
        assert f"holds {used} bytes of contexts and history" in message
        assert f"bound of {bound} bytes" in message and "--max-memory-bytes" in message
        assert "WIGGLE_MAX_MEMORY_BYTES" in message
        # nothing of the refused start was kept: no instance, no bytes, no request id
        page, _ = await client.list(page_size=10)
        assert sorted(i.instance_id for i in page) == sorted(s.instance_id for s in first)
        assert store.bytes_used == used and store.evicted == 0

        # two finish (the earlier one first); the next start evicts only the earliest finished
        await client.cancel(first[1].instance_id)
        await client.cancel(first[0].instance_id)
        fourth = await client.start(PARKED, Ctx(blob=BLOB, n=4), request_id="req-refused")
        assert store.evicted == 1
        with pytest.raises(NotFound):
            await client.get(first[1].instance_id)  # finished first: evicted first
        assert (await client.get(first[0].instance_id)).status == "CANCELLED"  # still kept
        assert (await client.get(first[2].instance_id)).status == "RUNNING"
        assert (await client.get(fourth.instance_id)).status == "RUNNING"
        assert store.bytes_used <= bound

        # the next one evicts the other finished instance; then only running ones are left: refused
        await client.start(PARKED, Ctx(blob=BLOB, n=5))
        assert store.evicted == 2
        with pytest.raises(ResourceExhausted, match="no finished instance left to evict"):
            await client.start(PARKED, Ctx(blob=BLOB, n=6))
        assert len((await client.list(page_size=10))[0]) == 3


async def test_a_start_larger_than_the_whole_bound_evicts_nothing() -> None:
    async with EmbeddedServer(max_memory_bytes=MIB // 2, max_live_instances=0) as server:
        client, store = server.client, _store(server)
        await client.register(PARKED)
        small = await client.start(PARKED, Ctx(n=1))
        await client.cancel(small.instance_id)
        with pytest.raises(
            ResourceExhausted, match=rf"more than the in-memory store's whole bound of {MIB // 2} bytes"
        ):
            await client.start(PARKED, Ctx(blob=BLOB))
        assert store.evicted == 0 and (await client.get(small.instance_id)).status == "CANCELLED"


def grow(c: Ctx) -> Ctx:
    return Ctx(blob="y" * 100_000, n=c.n + 1)


GROWS = Workflow.define("grows-bytes", Ctx).step(grow).step(idle).build()


async def test_the_count_follows_every_write_and_eviction() -> None:
    async with EmbeddedServer(max_memory_bytes=64 * MIB, max_live_instances=0, retention_seconds=0) as server:
        client, store = server.client, _store(server)
        await client.register(GROWS)
        started = await client.start(GROWS, Ctx(n=1))
        at_start = store.bytes_used
        assert 0 < at_start < 100  # a tiny context, no history yet
        async with server.worker([GROWS]):
            await client.result(started.instance_id, timeout=30)
        history = await client.history(started.instance_id)
        assert [e.outcome for e in history] == ["COMPLETED", "COMPLETED", "END"]
        # the step's new context and the three history entries are counted
        assert 100_000 + 3 * 120 < store.bytes_used - at_start < 100_000 + 3 * 400
        assert store.ledger.of(started.instance_id) == store.bytes_used
        await store.purge_finished(older_than=2**62, limit=10)
        assert store.bytes_used == 0


def test_the_default_bound_is_declared_and_documented() -> None:
    assert ServerConfig().max_memory_bytes == 1 << 30
    from pathlib import Path

    readme = (Path(__file__).resolve().parents[2] / "README.md").read_text()
    row = re.search(r"\| `WIGGLE_MAX_MEMORY_BYTES` \| `--max-memory-bytes` \| `(\d+)` \|", readme)
    assert row is not None and int(row.group(1)) == 1 << 30
    with pytest.raises(ValueError, match="max_bytes must be 0"):
        MemoryStore(max_bytes=-1)


def left(c: dict[str, object]) -> dict[str, object]:
    return {**c, "left": "l" * 5000}


def right(c: dict[str, object]) -> dict[str, object]:
    return {**c, "right": "r" * 7000}


def body(c: dict[str, object]) -> dict[str, object]:
    return {**c, "result": "b" * 3000}


BRANCHY = (
    Workflow.define("branchy-bytes")
    .fork(lambda b: b.step(left), lambda b: b.step(right))
    .join()
    .for_each("xs", lambda b: b.step(body), concurrency=3)
    .build()
)


class CheckedStore(MemoryStore):
    """After every write, the running count must equal a count made from scratch."""

    def __init__(self) -> None:
        super().__init__(max_bytes=1 << 30)
        self.checked = 0

    def _apply(self, state: InstanceState, changes: Changes, counted: bool = False) -> None:
        super()._apply(state, changes, counted)
        fresh = Changes()
        fresh.tokens = dict(state.tokens)
        fresh.history = list(self._history.get(state.instance.id, ()))
        expected = ByteLedger().measure(state, fresh).total
        assert self.ledger.of(state.instance.id) == expected, (changes.tokens.keys(), changes.history)
        self.checked += 1


async def test_the_running_count_equals_a_fresh_count_at_every_write_of_forks_and_for_each() -> None:
    store = CheckedStore()
    server = WiggleServer(ServerConfig(port=0), store=store)
    await server.start()
    try:
        async with AsyncClient(server.target) as client:
            await client.register(BRANCHY)
            started = await client.start(BRANCHY, {"xs": list(range(7))})
            async with Worker(server.target, [BRANCHY], WorkerOptions(concurrency=4)):
                done = await client.result(started.instance_id, timeout=60)
            assert done.status == "COMPLETED" and len(done.context["results"]) == 7
        assert store.checked >= 10  # each start, claim, step and join arrival was checked
        assert store.bytes_used == store.ledger.of(started.instance_id)
        assert store.bytes_used > 5000 + 7000 + 7 * 3000  # the folded context holds them all
    finally:
        await server.stop(grace=0.5)
