"""The dashboard shows why an instance waits for a workflow concurrency slot
(docs/flow-control.md#workflow-concurrency): the instance JSON and the Instance page."""

from __future__ import annotations

import uuid

import aiohttp
from pg import TEST_DATABASE_URL

from wiggle import Limit, Workflow

from .helpers import dashboard_server


async def test_the_instance_page_says_what_slot_it_waits_for(store: str, pg_schema: str) -> None:
    flow = (
        Workflow.define(f"page-conc-{uuid.uuid4().hex[:8]}", concurrency=Limit(key="doc"))
        .user_task("hold")
        .build()
    )
    async with dashboard_server(store, pg_schema, TEST_DATABASE_URL) as (server, base):
        await server.client.register(flow)
        first = await server.client.start(flow, {"doc": "d1"})
        second = await server.client.start(flow, {"doc": "d1"})
        async with aiohttp.ClientSession() as http:
            async with http.get(f"{base}/api/instances/{second.instance_id}") as r:
                detail = await r.json()
            async with http.get(f"{base}/instances/{second.instance_id}") as r:
                page = await r.text()
            async with http.get(f"{base}/api/instances/{first.instance_id}") as r:
                live = await r.json()
        reason = "waiting for a concurrency slot of doc=d1 (limit 1)"
        assert detail["instance"]["waiting_reason"] == reason
        assert detail["instance"]["status"] == "SCHEDULED"
        assert live["instance"]["waiting_reason"] == ""
        assert f'<p id="waiting-reason" class="muted">{reason}</p>' in page
