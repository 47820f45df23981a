"""The clock seam: production reads the wall clock and nothing in production can move it."""

from __future__ import annotations

import pathlib
import re
import time

import pytest

from wiggle._clock import WALL_CLOCK, Clock, VirtualClock, WallClock
from wiggle._server.app import WiggleServer
from wiggle._server.config import ServerConfig
from wiggle._server.instances import Instances
from wiggle._storage.memory import MemoryStore

SRC = pathlib.Path(__file__).resolve().parents[2] / "src" / "wiggle"

# Modules that may read the wall clock directly, and why (workflow time goes through the Clock).
WALL_READERS = {
    "_clock.py": "the wall clock itself",
    "_engine/state.py": "now_millis() and new_instance_id's default (callers pass the clock's time)",
    "_storage/postgres/migrations.py": "when a schema migration was applied (not workflow time)",
    "_worker/local_run.py": "the worker's view of its lease (a worker has no server clock)",
}


def test_the_default_clock_is_the_wall_clock() -> None:
    before = time.time_ns() // 1_000_000
    read = WALL_CLOCK.now()
    after = time.time_ns() // 1_000_000
    assert before <= read <= after
    store = MemoryStore()
    assert store.clock is WALL_CLOCK
    assert Instances(store).clock is WALL_CLOCK
    server = WiggleServer(ServerConfig(port=0))
    assert server.instances.clock is WALL_CLOCK and server.store.clock is WALL_CLOCK


def test_nothing_can_move_the_wall_clock() -> None:
    public = {name for name in dir(WallClock) if not name.startswith("_")}
    assert public == {"now"}, f"the wall clock must offer nothing but now(): {public}"
    with pytest.raises(AttributeError):
        WALL_CLOCK.offset = 5  # type: ignore[attr-defined]  # __slots__: no state to change
    assert isinstance(WALL_CLOCK, Clock) and not isinstance(WALL_CLOCK, VirtualClock)


def test_only_the_test_kit_builds_a_virtual_clock() -> None:
    users = sorted(
        str(path.relative_to(SRC))
        for path in SRC.rglob("*.py")
        if "VirtualClock" in path.read_text() and path.name != "_clock.py"
    )
    assert all(u.startswith(("testing", "_testing")) for u in users), users


def test_no_module_reads_the_wall_clock_for_workflow_time() -> None:
    pattern = re.compile(r"(?<![.\w])now_millis\(\)|\btime\.time(_ns)?\(\)")
    offenders = []
    for path in SRC.rglob("*.py"):
        rel = str(path.relative_to(SRC))
        if rel in WALL_READERS or rel.startswith(("_bench/", "_rpc/")):
            continue
        for n, line in enumerate(path.read_text().splitlines(), 1):
            if pattern.search(line):
                offenders.append(f"{rel}:{n}: {line.strip()}")
    assert not offenders, "read the Clock (Instances.clock / Store.clock) instead:\n" + "\n".join(offenders)


def test_the_instance_layer_and_its_store_share_one_clock() -> None:
    clock = VirtualClock(start=1_000)
    store = MemoryStore()
    instances = Instances(store, clock=clock)
    assert instances.clock is clock and store.clock is clock
    assert clock.advance(500) == 1_500 and store.clock.now() == 1_500
    assert clock.advance_to(1_200) == 1_500  # never backwards
    with pytest.raises(ValueError, match="only moves forward"):
        clock.advance(-1)
    with pytest.raises(ValueError, match=">= 0"):
        VirtualClock(start=-5)
