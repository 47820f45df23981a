"""Concurrency limits in a cluster (docs/flow-control.md#concurrency-limits): three ``wiggle
server`` processes on one PostgreSQL schema, four worker processes (two on the first server, one
on each other), 1,000 instances over 20 customers with one charge per customer at a time.

Every instance completes, every charge ran once, and no two charges of one customer ever ran at
once: the handlers check that themselves, through a file each attempt holds exclusively while it
runs (tests/integration/cluster_workers/limits_worker.py). Kept lean for a 2-core CI machine: one
step per instance, a 5 ms handler. The processes and helpers are tests/integration/test_cluster.py's.
"""

from __future__ import annotations

import asyncio
import subprocess
import sys
import time
from pathlib import Path

import pytest

from wiggle import AsyncClient

from .test_cluster import HELPERS, Cluster, close_all, cluster_in, status_counts

pytestmark = [pytest.mark.postgres, pytest.mark.slow]

INSTANCES = 1000
CUSTOMERS = 20
FLOW = "limits-cluster"


@pytest.mark.timeout(600)
async def test_one_charge_per_customer_at_a_time_over_three_servers(tmp_path: Path) -> None:
    with cluster_in(tmp_path) as cluster:
        servers = await cluster.start_servers(["a", "b", "c"])
        # four workers, as issue #25 states the test: the first server gets two
        for name, server in zip("abcd", [*servers, servers[0]], strict=True):
            with open(tmp_path / f"worker-{name}.log", "wb") as out:
                proc = subprocess.Popen(
                    [sys.executable, str(HELPERS / "limits_worker.py"), server.target, str(tmp_path)]
                    + ["--worker-id", f"w{name}"],
                    stdout=out,
                    stderr=subprocess.STDOUT,
                )
            cluster.procs.append(proc)
            cluster.workers[name] = proc
        clients = [AsyncClient(s.target) for s in servers]
        try:
            await _registered(clients[0], cluster)
            ids = await start_instances_with_customers(clients)
            await cluster.wait_finished(FLOW, INSTANCES, timeout=480)
        finally:
            await close_all(clients)
        counts = status_counts(cluster.schema, FLOW)
    assert counts["COMPLETED"] == INSTANCES, dict(counts)
    overlaps = sorted(p.name for p in (tmp_path / "overlaps").iterdir())
    assert overlaps == [], f"two charges of one customer ran at once: {overlaps}"
    runs = [line.split() for path in tmp_path.glob("runs-*") for line in path.read_text().splitlines()]
    assert sorted(instance for instance, _ in runs) == sorted(ids), "every charge ran exactly once"
    per_customer = {customer for _, customer in runs}
    assert len(per_customer) == CUSTOMERS


async def _registered(client: AsyncClient, cluster: Cluster) -> None:
    """Until a worker has registered the flow (they register it when they start)."""
    deadline = time.monotonic() + 60
    while True:
        if await client.list_workflows(FLOW):
            return
        cluster.check_alive()
        assert time.monotonic() < deadline, f"the flow was never registered\n{cluster.logs()}"
        await asyncio.sleep(0.1)


async def start_instances_with_customers(clients: list[AsyncClient]) -> list[str]:
    """1,000 starts over the three servers, customer ``c<n % 20>``; the instance ids."""
    ids: list[str] = []
    for k in range(0, INSTANCES, 100):
        client = clients[(k // 100) % len(clients)]
        contexts = [{"n": n, "customer": f"c{n % CUSTOMERS}"} for n in range(k, k + 100)]
        ids.extend(await client.start_many(FLOW, contexts))
    return ids
