"""The dashboard's JSON API and health endpoints against a real server with real instances."""

from __future__ import annotations

from typing import Any

import aiohttp
import psycopg
from mixed_fleet_versions import mixed_versions
from pg import TEST_DATABASE_URL
from psycopg import sql

from wiggle import ExecutionMode

from .helpers import dashboard_server, orders, until


async def get(session: aiohttp.ClientSession, url: str) -> tuple[int, Any]:
    async with session.get(url) as r:
        return r.status, await r.json()


async def post(session: aiohttp.ClientSession, url: str, body: object) -> tuple[int, Any]:
    async with session.post(url, json=body) as r:
        return r.status, await r.json()


async def test_health_instances_instance_actions_and_bad_input(store: str, pg_schema: str) -> None:
    flow = orders(f"api-orders-{store}")
    async with dashboard_server(store, pg_schema, TEST_DATABASE_URL) as (server, base):
        async with aiohttp.ClientSession() as http, server.worker([flow]):
            assert await get(http, f"{base}/healthz") == (200, {"status": "ok"})
            status, ready = await get(http, f"{base}/readyz")
            assert status == 200 and ready["ready"], ready
            ids = [
                (await server.client.start(flow, {"n": i, "declined": i == 0})).instance_id for i in range(5)
            ]

            async def all_awaiting() -> bool:
                _, page = await get(http, f"{base}/api/instances?workflow={flow.name}")
                return all(i["at"] == ["approve"] for i in page["instances"]) and len(page["instances"]) == 5

            await until(all_awaiting)
            # paging holds while instances are created: the token is the last id seen
            _, first = await get(http, f"{base}/api/instances?workflow={flow.name}&page_size=2")
            newer = (await server.client.start(flow, {"n": 99})).instance_id
            _, second = await get(
                http,
                f"{base}/api/instances?workflow={flow.name}&page_size=2&page_token={first['next_page_token']}",
            )
            seen = [i["instance_id"] for i in first["instances"] + second["instances"]]
            assert seen == sorted(ids, reverse=True)[:4] and newer not in seen
            assert first["counts"]["RUNNING"] == 5 and second["counts"]["RUNNING"] == 6

            # complete the user task of the declined one: charge fails twice, with tracebacks
            declined = ids[0]
            status, done = await post(
                http,
                f"{base}/api/instances/{declined}/user-tasks/approve",
                {"actor": "ada", "data": {"ok": True}},
            )
            assert status == 200, done
            final = await server.client.wait(declined, timeout=20)
            assert final.status == "FAILED"
            _, detail = await get(http, f"{base}/api/instances/{declined}")
            assert detail["node_states"]["charge"] == "failed"
            assert detail["node_states"]["validate"] == detail["node_states"]["approve"] == "done"
            assert "ship" not in detail["node_states"]
            charges = [e for e in detail["history"] if e["node_id"] == "charge"]
            assert [e["outcome"] for e in charges] == ["RETRY", "FAILED"]
            assert all("RuntimeError: card declined" in e["traceback"] for e in charges)
            operator = [e for e in detail["history"] if e["kind"] == "OPERATOR"]
            assert [(e["outcome"], e["node_id"]) for e in operator] == [("COMPLETED", "approve")]
            assert operator[0]["worker_id"].startswith("ada (dashboard, 127.0.0.1")

            # cancel one: recorded with who did it; a second cancel changes nothing
            victim = ids[1]
            _, before = await get(http, f"{base}/api/instances/{victim}")
            assert before["node_states"]["approve"] == "awaiting" and before["actions"]["cancel"]
            status, answer = await post(
                http, f"{base}/api/instances/{victim}/cancel", {"actor": "grace", "reason": "duplicate"}
            )
            assert (status, answer) == (200, {"changed": True, "status": "CANCELLED"})
            info = await server.client.get(victim)
            assert info.status == "CANCELLED" and info.reason == "duplicate"
            history = await server.client.history(victim)
            assert [(e.kind, e.outcome, e.error) for e in history if e.kind == "OPERATOR"] == [
                ("OPERATOR", "CANCELLED", "duplicate")
            ]
            assert history[-1].worker_id.startswith("grace (dashboard")
            again = await post(http, f"{base}/api/instances/{victim}/cancel", {"actor": "grace"})
            assert again == (200, {"changed": False, "status": "CANCELLED"})

            # bad input: a clear error naming the problem, nothing changed
            for url, body, code, text in [
                (f"{base}/api/instances/{ids[2]}/cancel", {}, 400, '"actor" must name who'),
                (f"{base}/api/instances/{ids[2]}/cancel", ["x"], 400, "must be a JSON object"),
                (
                    f"{base}/api/instances/{ids[2]}/user-tasks/approve",
                    {"actor": "a", "data": [1]},
                    400,
                    '"data" must be a JSON object',
                ),
                (f"{base}/api/instances/{ids[2]}/user-tasks/nope", {"actor": "a"}, 404, "nope"),
                (
                    f"{base}/api/instances/wi-000000000000000000000000/cancel",
                    {"actor": "a"},
                    404,
                    "does not exist",
                ),
                (f"{base}/api/instances/{victim}/user-tasks/approve", {"actor": "a"}, 409, "CANCELLED"),
            ]:
                status, answer = await post(http, url, body)
                assert status == code and text in answer["error"], (url, status, answer)
            assert (await server.client.get(ids[2])).status == "RUNNING"
            for url, code, text in [
                (f"{base}/api/instances?status=DONE", 400, "status must be one of"),
                (f"{base}/api/instances?page_size=0", 400, "page_size must be between 1 and 500"),
                (
                    f"{base}/api/instances?created_after=yesterday",
                    400,
                    "created_after must be a date and time",
                ),
                (f"{base}/api/instances/wi-000000000000000000000000", 404, "does not exist"),
            ]:
                status, answer = await get(http, url)
                assert status == code and text in answer["error"], (url, status, answer)

            _, flows = await get(http, f"{base}/api/workflows")
            assert [w["name"] for w in flows["workflows"]] == [flow.name]
            assert flows["counts"][flow.name]["CANCELLED"] == 1 and flows["counts"][flow.name]["FAILED"] == 1
            _, cluster = await get(http, f"{base}/api/cluster")
            assert cluster["readiness"]["ready"] and sum(n["clock_leader"] for n in cluster["nodes"]) == 1
            assert any(n["this_node"] for n in cluster["nodes"])


async def test_queues_show_depth_age_workers_and_local_runs(store: str, pg_schema: str) -> None:
    flow = orders(f"api-queues-{store}", ExecutionMode.LOCAL_ASYNC)
    async with dashboard_server(store, pg_schema, TEST_DATABASE_URL) as (server, base):
        await server.client.register(flow)
        for i in range(3):
            await server.client.start(flow, {"n": i})
        async with aiohttp.ClientSession() as http:
            _, page = await get(http, f"{base}/api/queues")
            (queue,) = [q for q in page["queues"] if q["queue"] == flow.name]
            assert queue["ready"] == 3 and queue["oldest_ready_age_ms"] >= 0 and queue["workers"] == []
            async with server.worker([flow]):

                async def polled_and_drained() -> bool:
                    _, page = await get(http, f"{base}/api/queues")
                    q = [q for q in page["queues"] if q["queue"] == flow.name]
                    return bool(q) and q[0]["ready"] == 0 and len(q[0]["workers"]) == 1

                await until(polled_and_drained)
            _, page = await get(http, f"{base}/api/queues")
            (queue,) = [q for q in page["queues"] if q["queue"] == flow.name]
            wait = queue["schedule_to_start"]
            # three steps were claimed after waiting for the worker; their wait is measured
            assert wait["claimed"] >= 3 and wait["mean_seconds"] >= 0
            assert wait["p95_seconds_at_most"] is None or wait["p95_seconds_at_most"] > 0
            status, html = 0, ""
            async with http.get(f"{base}/queues") as r:
                status, html = r.status, await r.text()
            assert status == 200 and f'data-queue="{flow.name}"' in html and "p95 ≤" in html


async def test_readyz_says_not_ready_when_the_schema_is_behind(pg_schema: str) -> None:
    flow = orders("api-ready")
    async with dashboard_server("postgres", pg_schema, TEST_DATABASE_URL) as (server, base):
        await server.client.register(flow)
        with psycopg.connect(TEST_DATABASE_URL, autocommit=True) as conn:
            conn.execute(
                sql.SQL(
                    "DELETE FROM {}.schema_version WHERE version = (SELECT max(version) FROM {}.schema_version)"
                ).format(sql.Identifier(pg_schema), sql.Identifier(pg_schema))
            )
        async with aiohttp.ClientSession() as http:
            status, body = await get(http, f"{base}/readyz")
            assert status == 503 and not body["ready"]
            assert body["schema_version"] < body["expected_schema_version"]
            assert "this server needs" in body["detail"]
            assert (await get(http, f"{base}/healthz"))[0] == 200  # alive all the same


async def test_queues_say_which_nodes_a_worker_passes_over(store: str, pg_schema: str) -> None:
    """A worker of an old version gave back a new step (no handler): the Queues page says so, beside it."""
    old, new = mixed_versions(f"api-passes-over-{store}")
    async with dashboard_server(store, pg_schema, TEST_DATABASE_URL) as (server, base):
        await server.client.register(new)
        await server.client.start(new, {})
        async with aiohttp.ClientSession() as http, server.worker([old]) as worker:

            async def passed_over() -> bool:
                _, page = await get(http, f"{base}/api/queues")
                (queue,) = [q for q in page["queues"] if q["queue"] == old.name]
                return any(w["passes_over"] for w in queue["workers"])

            await until(passed_over)
            _, page = await get(http, f"{base}/api/queues")
            (queue,) = [q for q in page["queues"] if q["queue"] == old.name]
            (held,) = [w for w in queue["workers"] if w["worker_id"] == worker.worker_id][0]["passes_over"]
            assert (held["workflow"], held["version"], held["node"]) == (new.name, new.version, "extra")
            assert 0 < held["for_seconds"] <= 10
            async with http.get(f"{base}/queues") as r:
                html = await r.text()
            assert f"no handler: passes over extra of {new.name} version {new.version}" in html, html
