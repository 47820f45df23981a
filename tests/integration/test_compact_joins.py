"""A wide fork over a large context with ``join_diffs`` on (docs/upgrading.md#compact-joins), on
both stores and in every mode, through a real server and worker: the same end and a clean
history as without it (what the join state holds: tests/engine/test_join_merge_engine.py)."""

from __future__ import annotations

import pytest
from pg import STORES, TEST_DATABASE_URL

from wiggle import ExecutionMode, Workflow
from wiggle.testing import EmbeddedServer

BRANCHES = 12
PAD = "p" * 20_000


def _branch(i: int):
    def handler(ctx: dict) -> dict:
        return {**ctx, f"b{i}": i}

    handler.__name__ = f"b{i}"
    return handler


@pytest.mark.parametrize("store", STORES)
@pytest.mark.parametrize("mode", list(ExecutionMode)[1:], ids=lambda m: m.value)
@pytest.mark.parametrize("join_diffs", [False, True], ids=["whole", "diffs"])
async def test_a_wide_fork_over_a_large_context_ends_the_same_with_join_diffs(
    store: str, mode: ExecutionMode, join_diffs: bool, pg_schema: str
) -> None:
    flow = Workflow.define(f"compact-{mode.value.lower()}-{store}-{join_diffs}").execution(mode)
    flow = flow.fork(*[(lambda b, i=i: b.step(_branch(i))) for i in range(BRANCHES)]).join()
    bp = flow.step(lambda ctx: {**ctx, "after": True}, name="after").build()
    settings: dict = {"join_diffs": join_diffs}
    if store == "postgres":
        settings.update(database_url=TEST_DATABASE_URL, database_schema=pg_schema)
    async with EmbeddedServer(**settings) as server:
        await server.client.register(bp)
        async with server.worker([bp]):
            info = await server.client.start(bp, {"pad": PAD})
            done = await server.client.wait(info.instance_id, timeout=60)
        history = await server.client.history(info.instance_id)
    assert done.status == "COMPLETED", done
    assert done.context == {"pad": PAD, "after": True, **{f"b{i}": i for i in range(BRANCHES)}}
    assert not [h for h in history if h.outcome in ("RETRY", "FAILED") or "lease" in h.error], history
