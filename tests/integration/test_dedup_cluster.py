"""Deduplication keys in a cluster (docs/flow-control.md#deduplication): two ``wiggle server``
processes on one PostgreSQL schema, eight threads starting with one key through both at once.

Exactly one instance is created, every other start answers with it, deduplicated. The
processes and helpers are tests/integration/test_cluster.py's.
"""

from __future__ import annotations

import asyncio
import threading
from pathlib import Path

import pytest

from wiggle import Client
from wiggle._model import Node, NodeKind, WorkflowDefinition

from .test_cluster import cluster_in, query

pytestmark = [pytest.mark.postgres, pytest.mark.slow]

# a user task: the instance stays RUNNING (so holds its key) with no worker anywhere
FLOW = WorkflowDefinition(
    name="dedup-cluster",
    start_node="approve",
    nodes=(
        Node(id="approve", kind=NodeKind.USER_TASK, next="done"),
        Node(id="done", kind=NodeKind.END),
    ),
)


@pytest.mark.timeout(180)
async def test_concurrent_starts_with_one_key_on_two_servers_create_one_instance(tmp_path: Path) -> None:
    with cluster_in(tmp_path) as cluster:
        servers = await cluster.start_servers(["a", "b"])
        targets = [s.target for s in servers]
        with Client(targets[0]) as client:
            client.register(FLOW)
        answers: list[tuple[str, bool]] = []
        errors: list[BaseException] = []
        gate = threading.Barrier(8)

        def starter(i: int) -> None:
            try:
                with Client(targets[i % 2]) as client:
                    gate.wait()
                    for n in range(10):
                        info = client.start(FLOW.name, {"who": i, "n": n}, dedup_key="invoice-7")
                        answers.append((info.instance_id, info.deduplicated))
            except BaseException as exc:  # reported below
                errors.append(exc)

        threads = [threading.Thread(target=starter, args=(i,)) for i in range(8)]
        for thread in threads:
            thread.start()
        await asyncio.to_thread(lambda: [thread.join() for thread in threads])
        assert not errors, errors
        assert len(answers) == 80
        assert len({iid for iid, _ in answers}) == 1, cluster.logs()
        assert [d for _, d in answers].count(False) == 1
        rows = query(
            cluster.schema, "SELECT id, dedup_key FROM {s}.instances WHERE workflow = %s", (FLOW.name,)
        )
        assert rows == [(answers[0][0], "invoice-7")]
        keys = query(cluster.schema, "SELECT workflow, dedup_key, instance_id FROM {s}.start_dedup", ())
        assert keys == [(FLOW.name, "invoice-7", answers[0][0])]
