"""The data-platform trial's dashboard findings: the Instances list and ``GET /api/instances`` carry
no contexts unless asked; a bulk cancel whose first cancel finishes the rest (a child's cancel
fails its parent, which cancels its other children) says so: done + errors + skipped is the count."""

from __future__ import annotations

from urllib.parse import urlencode

import aiohttp
from pg import TEST_DATABASE_URL

from wiggle import Workflow

from .helpers import dashboard_server, until

BIG = {"records": [{"id": i, "name": f"record {i}"} for i in range(500)]}


async def test_the_list_and_its_api_carry_no_context_unless_asked(store: str, pg_schema: str) -> None:
    flow = Workflow.define(f"trial-e-list-{store}").user_task("hold").build()
    async with dashboard_server(store, pg_schema, TEST_DATABASE_URL) as (server, base):
        await server.client.register(flow)
        iid = (await server.client.start(flow, BIG)).instance_id
        async with aiohttp.ClientSession() as http:
            async with http.get(f"{base}/api/instances?workflow={flow.name}") as r:
                listed = await r.json()
            async with http.get(f"{base}/api/instances?workflow={flow.name}&with_context=1") as r:
                asked = await r.json()
            async with http.get(f"{base}/instances?workflow={flow.name}") as r:
                page = await r.text()
            async with http.get(f"{base}/api/instances/{iid}") as r:
                one = await r.json()
    (row,) = listed["instances"]
    assert row["instance_id"] == iid and row["status"] == "RUNNING"
    assert "context" not in row and listed["filters"]["with_context"] is False
    assert asked["instances"][0]["context"] == BIG
    assert iid in page and "record 499" not in page
    assert one["instance"]["context"] == BIG  # the instance page keeps its context


async def test_a_bulk_cancel_counts_what_a_cascade_finished_first(store: str, pg_schema: str) -> None:
    child = Workflow.define(f"trial-e-kid-{store}").user_task("hold").build()
    parent = (
        Workflow.define(f"trial-e-parent-{store}")
        .for_each("items", lambda b: b.sub_workflow("each", child, input_keys=["item"], result_key="result"))
        .build()
    )
    async with dashboard_server(store, pg_schema, TEST_DATABASE_URL) as (server, base):
        await server.client.register(child)
        await server.client.register(parent)
        pid = (await server.client.start(parent, {"items": list(range(5))})).instance_id

        async def five_children_running() -> bool:
            found, _ = await server.client.list(parent_id=pid, status="RUNNING", with_context=False)
            return len(found) == 5

        await until(five_children_running)
        url = f"{base}/api/bulk/cancel?{urlencode({'parent_id': pid, 'status': 'RUNNING'})}"
        headers = {"Origin": base}
        async with aiohttp.ClientSession() as http:
            async with http.post(url, json={"dry_run": True}, headers=headers) as r:
                dry = await r.json()
            assert dry["count"] == 5, dry
            async with http.post(url, json={"actor": "ada", "expected": 5}, headers=headers) as r:
                answer = await r.json()
    assert r.status == 200, answer
    assert answer["done"] + len(answer["errors"]) + len(answer["skipped"]) == answer["count"] == 5, answer
    # the first cancel failed the parent, which cancelled the others before their turn
    assert answer["done"] >= 1 and answer["skipped"], answer
    for skipped in answer["skipped"]:
        assert skipped["status"] == "CANCELLED" and skipped["reason"] == "already CANCELLED", skipped


async def test_a_misspelt_list_filter_is_named_not_ignored(store: str, pg_schema: str) -> None:
    """``GET /api/instances?stauts=FAILED`` answered every instance, as if unfiltered, and a bulk
    action's count took the same filter for none. Both are a 400 naming the parameter (with the
    closest one the list takes), and nothing is cancelled; every parameter the list takes is
    accepted, and the pages stay lenient (their own links carry only these)."""
    flow = Workflow.define(f"trial-e-typo-{store}").user_task("hold").build()
    async with dashboard_server(store, pg_schema, TEST_DATABASE_URL) as (server, base):
        await server.client.register(flow)
        iid = (await server.client.start(flow, {})).instance_id
        headers = {"Origin": base}
        async with aiohttp.ClientSession() as http:
            async with http.get(f"{base}/api/instances?stauts=FAILED") as r:
                listed = await r.json()
                assert r.status == 400, listed
            async with http.post(
                f"{base}/api/bulk/cancel?wrkflow={flow.name}", json={"dry_run": True}, headers=headers
            ) as r:
                dry = await r.json()
                assert r.status == 400, dry
            every = {
                "workflow": flow.name,
                "status": "RUNNING",
                "correlation_id": "",
                "schedule_id": "",
                "parent_id": "",
                "created_after": "1d",
                "created_before": "",
                "node": "hold",
                "text": "",
                "ctx": "",
                "children": "1",
                "page_size": "10",
                "page_token": "",
                "with_context": "1",
            }
            async with http.get(f"{base}/api/instances?{urlencode(every)}") as r:
                found = await r.json()
                assert r.status == 200, found
            async with http.get(f"{base}/instances?workflow={flow.name}&utm_source=mail") as r:
                assert r.status == 200
        still = await server.client.get(iid)
    assert "unknown list parameter 'stauts' (did you mean 'status'?); the list takes" in listed["error"]
    assert "unknown list parameter 'wrkflow' (did you mean 'workflow'?)" in dry["error"]
    assert [row["instance_id"] for row in found["instances"]] == [iid]
    assert str(still.status) == "RUNNING"


async def test_the_other_json_answers_name_a_query_parameter_they_do_not_read(
    store: str, pg_schema: str
) -> None:
    """``GET /api/queues?queue=payments`` answered every queue, as if it filtered; the JSON
    answers that read no parameter refuse any, and ``/api/schedules`` names a misspelt
    ``workflow``. The pages stay lenient."""
    flow = Workflow.define(f"trial-e-other-{store}").user_task("hold").build()
    async with dashboard_server(store, pg_schema, TEST_DATABASE_URL) as (server, base):
        await server.client.register(flow)
        iid = (await server.client.start(flow, {})).instance_id
        refused: dict[str, str] = {}
        async with aiohttp.ClientSession() as http:
            for path in (
                "queues?queue=payments",
                f"instances/{iid}?with_context=0",
                "workflows?name=x",
                "cluster?node=a",
                "schedules?workflw=x",
            ):
                async with http.get(f"{base}/api/{path}") as r:
                    answer = await r.json()
                    assert r.status == 400, (path, answer)
                    refused[path.split("?")[0]] = answer["error"]
            for path in (
                "api/schedules?workflow=x",
                "api/queues",
                "queues?queue=payments",
                "schedules?workflw=x",
            ):
                async with http.get(f"{base}/{path}") as r:
                    assert r.status == 200, path
    assert refused["queues"].startswith("GET /api/queues takes no query parameters, got 'queue'")
    assert refused[f"instances/{iid}"].startswith(f"GET /api/instances/{iid} takes no query parameters")
    assert "GET /api/workflows takes no query parameters, got 'name'" in refused["workflows"]
    assert "GET /api/cluster takes no query parameters, got 'node'" in refused["cluster"]
    assert refused["schedules"].startswith(
        "unknown schedules list parameter 'workflw' (did you mean 'workflow'?); the schedules list takes workflow"
    )
