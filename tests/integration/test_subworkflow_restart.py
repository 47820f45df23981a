"""A sleeping parent and its child survive a server restart (docs/semantics.md#sub-workflows).

A real ``wiggle server`` process on PostgreSQL: a parent waits on a child that sleeps; the server
is killed (SIGKILL) while both wait, and started again on the same port. The child's timer fires
on the new process, the child completes, and the parent resumes exactly once with the child's
context; the parent's history names the child, and the child names its parent.
"""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest

from wiggle import AsyncClient, Workflow

from .test_cluster import cluster_in, query

pytestmark = [pytest.mark.postgres, pytest.mark.slow]

CHILD_SLEEP_SECONDS = 3.0


def flows(tag: str):
    child = Workflow.define(f"restart-child-{tag}").sleep("nap", CHILD_SLEEP_SECONDS).build()
    grandchild_parent = (
        Workflow.define(f"restart-middle-{tag}").sub_workflow("call-child", child, result_key="inner").build()
    )
    parent = (
        Workflow.define(f"restart-parent-{tag}")
        .sleep("first", 0.2)
        .sub_workflow("call-middle", grandchild_parent, result_key="outer")
        .build()
    )
    return child, grandchild_parent, parent


@pytest.mark.timeout(120)
async def test_sleeping_parent_and_child_survive_a_server_restart(tmp_path: Path) -> None:
    with cluster_in(tmp_path) as cluster:
        (server,) = await cluster.start_servers(["only"])
        child, middle, parent = flows(tmp_path.name[-8:].replace("_", "-"))
        async with AsyncClient(server.target) as client:
            for bp in (child, middle, parent):
                await client.register(bp)
            started = [await client.start(parent.name, {"n": k}) for k in range(3)]

            async def chain_waits() -> None:
                # every parent waits on a middle child that waits on a sleeping grandchild
                while True:
                    rows = query(
                        cluster.schema,
                        "SELECT count(*) FROM {s}.tokens WHERE status = 'WAITING' AND node_id = 'nap'",
                    )
                    if rows[0][0] == len(started):
                        return
                    cluster.check_alive()
                    await asyncio.sleep(0.05)

            await asyncio.wait_for(chain_waits(), 30)
        cluster.kill(server.proc)
        restarted = await cluster.ready(cluster.spawn_server("only", port=server.port))
        async with AsyncClient(restarted.target) as client:
            for info in started:
                done = await client.wait(info.instance_id, timeout=60)
                assert done.status == "COMPLETED", f"{done}\n{cluster.logs()}"
                assert done.context == {
                    "n": done.context["n"],
                    "outer": {"n": done.context["n"], "inner": {"n": done.context["n"]}},
                }
                history = await client.history(info.instance_id)
                calls = [(h.outcome, h.child_id) for h in history if h.node_id == "call-middle"]
                assert [o for o, _ in calls] == ["CHILD_STARTED", "COMPLETED"], history
                middle_id = calls[0][1]
                assert calls[1][1] == middle_id
                kid = await client.get(middle_id)
                assert (kid.status, kid.parent_id, kid.depth) == ("COMPLETED", info.instance_id, 1)
        # exactly one child per waiting token, never a second start
        rows = query(
            cluster.schema,
            "SELECT workflow, count(*) FROM {s}.instances GROUP BY workflow ORDER BY workflow",
        )
        assert dict(rows) == {child.name: 3, middle.name: 3, parent.name: 3}
