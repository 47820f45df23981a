"""A schedule in a cluster (docs/semantics.md#schedules): three ``wiggle server`` processes on one
PostgreSQL schema, the clock leader killed (kill -9) while a one-second schedule runs.

Every tick from the first to the last starts exactly one instance: none twice (the tick's unique
key, and the schedule's revision), none lost across the change of leader (catch-up ALL starts
the ticks the takeover missed). The processes and helpers are tests/integration/test_cluster.py's.
"""

from __future__ import annotations

import asyncio
import time
from collections import Counter
from pathlib import Path

import pytest

from wiggle import AsyncClient
from wiggle._model import Node, NodeKind, WorkflowDefinition

from .test_cluster import Cluster, close_all, cluster_in, query

pytestmark = [pytest.mark.postgres, pytest.mark.slow]

# no worker step: each instance completes as it starts, so no worker process is needed
FLOW = WorkflowDefinition(
    name="sched-cluster", start_node="done", nodes=(Node(id="done", kind=NodeKind.END),)
)


def ticks(cluster: Cluster, schedule_id: str) -> list[int]:
    rows = query(
        cluster.schema,
        "SELECT schedule_tick_at FROM {s}.instances WHERE schedule_id = %s ORDER BY schedule_tick_at",
        (schedule_id,),
    )
    return [r[0] for r in rows]


async def wait_ticks(cluster: Cluster, schedule_id: str, count: int, timeout: float = 60.0) -> list[int]:
    deadline = time.monotonic() + timeout
    while True:
        found = ticks(cluster, schedule_id)
        if len(found) >= count:
            return found
        cluster.check_alive()
        if time.monotonic() > deadline:
            raise AssertionError(f"{len(found)} of {count} ticks after {timeout} s\n{cluster.logs()}")
        await asyncio.sleep(0.2)


@pytest.mark.timeout(180)
async def test_one_instance_per_tick_across_a_leader_kill(tmp_path: Path) -> None:
    with cluster_in(tmp_path) as cluster:
        servers = await cluster.start_servers(["a", "b", "c"])
        leader = await cluster.wait_leader()
        survivors = [s for s in servers if s is not leader]
        clients = [AsyncClient(s.target) for s in survivors]
        try:
            await clients[0].register(FLOW)
            created = await clients[1].create_schedule(
                "heartbeat", FLOW.name, {"from": "schedule"}, every=1, overlap="ALLOW", catchup="ALL"
            )
            assert created.next_fire_times[1] - created.next_fire_times[0] == 1000
            before = await wait_ticks(cluster, "heartbeat", 3)
            cluster.kill(leader.proc)
            successor = await cluster.wait_leader(exclude=[leader], timeout=30)
            assert successor in survivors
            # ticks fired after the takeover: at least three more than at the kill
            after = await wait_ticks(cluster, "heartbeat", len(ticks(cluster, "heartbeat")) + 3)
            assert len(after) > len(before)
            await clients[0].pause_schedule("heartbeat")
            final = ticks(cluster, "heartbeat")

            duplicates = [t for t, n in Counter(final).items() if n > 1]
            assert duplicates == [], f"ticks fired twice: {duplicates}"
            first = created.next_fire_times[0]
            assert final == [first + 1000 * k for k in range(len(final))], "a tick was lost or misplaced"
            rows = query(
                cluster.schema,
                "SELECT status, correlation_id, count(*) FROM {s}.instances GROUP BY 1, 2",
            )
            assert rows == [("COMPLETED", "schedule:heartbeat", len(final))]
            ticked = query(cluster.schema, "SELECT count(*) FROM {s}.schedule_ticks")[0][0]
            assert ticked == len(final)
            info = await clients[0].get_schedule("heartbeat")
            assert info.fired == len(final) and info.paused
        finally:
            await close_all(clients)
