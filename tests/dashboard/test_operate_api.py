"""The dashboard's operating API: signal, retry, parent and children, the schedule and parent
filters, the Schedules page and its actions, against a real server with real instances."""

from __future__ import annotations

import aiohttp
from pg import TEST_DATABASE_URL

from wiggle import Workflow

from .helpers import dashboard_server, orders, until
from .test_api import get, post


async def test_signal_and_retry_are_recorded_with_who_did_them(store: str, pg_schema: str) -> None:
    flow = orders(f"op-orders-{store}")
    async with dashboard_server(store, pg_schema, TEST_DATABASE_URL) as (server, base):
        async with aiohttp.ClientSession() as http, server.worker([flow]):
            iid = (await server.client.start(flow, {"declined": True})).instance_id

            async def awaiting() -> bool:
                _, page = await get(http, f"{base}/api/instances/{iid}")
                return bool(page["awaiting_user_tasks"])

            await until(awaiting)
            _, before = await get(http, f"{base}/api/instances/{iid}")
            assert before["actions"]["signal"] and not before["actions"]["retry"]
            assert before["actions"]["signal_names"] == ["approve"]
            # bad input changes nothing: a name no node waits for, data not an object, no actor
            status, answer = await post(
                http, f"{base}/api/instances/{iid}/signals/nobody", {"actor": "ada", "data": {}}
            )
            assert status == 404 and answer["code"] == "NOT_FOUND", answer
            status, answer = await post(
                http, f"{base}/api/instances/{iid}/signals/approve", {"actor": "ada", "data": [1]}
            )
            assert status == 400 and '"data"' in answer["error"]
            status, answer = await post(http, f"{base}/api/instances/{iid}/retry", {"actor": "ada"})
            assert status == 409 and "only a FAILED instance" in answer["error"], answer
            status, answer = await post(http, f"{base}/api/instances/{iid}/retry", {})
            assert status == 400 and '"actor"' in answer["error"]
            assert not [e for e in await server.client.history(iid) if e.kind in ("OPERATOR", "RETRY")]

            # the signal completes the user task; charge then fails (declined): FAILED
            status, answer = await post(
                http, f"{base}/api/instances/{iid}/signals/approve", {"actor": "ada", "data": {"ok": 1}}
            )
            assert status == 200 and answer["outcome"] == "DELIVERED", answer
            assert (await server.client.wait(iid, timeout=20)).status == "FAILED"
            _, failed = await get(http, f"{base}/api/instances/{iid}")
            assert failed["actions"]["retry"] and not failed["actions"]["signal"]
            ops = [e for e in failed["history"] if e["kind"] == "OPERATOR"]
            assert [(e["outcome"], e["node_id"]) for e in ops] == [("SIGNALLED", "approve")]
            assert ops[0]["worker_id"].startswith("ada (dashboard, 127.0.0.1")

            status, answer = await post(http, f"{base}/api/instances/{iid}/retry", {"actor": "grace"})
            assert status == 200, answer
            assert (await server.client.wait(iid, timeout=20)).status == "FAILED"  # still declined
            _, again = await get(http, f"{base}/api/instances/{iid}")
            retries = [e for e in again["history"] if e["kind"] == "RETRY"]
            assert len(retries) == 1 and retries[0]["node_id"] == "charge"
            assert retries[0]["worker_id"].startswith("grace (dashboard, 127.0.0.1")
            charges = [
                e["outcome"] for e in again["history"] if e["node_id"] == "charge" and e["kind"] != "RETRY"
            ]
            assert charges == ["RETRY", "FAILED", "RETRY", "FAILED"]


async def test_parent_and_children_links_and_the_parent_filter(store: str, pg_schema: str) -> None:
    child = Workflow.define(f"op-child-{store}").user_task("go").build()
    parent = Workflow.define(f"op-parent-{store}").sub_workflow("call", child, result_key="kid").build()
    async with dashboard_server(store, pg_schema, TEST_DATABASE_URL) as (server, base):
        async with aiohttp.ClientSession() as http:
            await server.client.register(child)
            await server.client.register(parent)
            pid = (await server.client.start(parent, {})).instance_id
            other = (await server.client.start(parent, {})).instance_id

            async def children_started() -> bool:
                for i in (pid, other):
                    _, page = await get(http, f"{base}/api/instances/{i}")
                    if not page["children"]:
                        return False
                    # the child's id is on the token before the child's own commit: wait for both
                    status, _ = await get(http, f"{base}/api/instances/{page['children'][0]['instance_id']}")
                    if status != 200:
                        return False
                return True

            await until(children_started)
            _, page = await get(http, f"{base}/api/instances/{pid}")
            [kid] = page["children"]
            assert kid["node_id"] == "call" and page["instance"]["parent_id"] == ""
            _, kid_page = await get(http, f"{base}/api/instances/{kid['instance_id']}")
            assert kid_page["instance"]["parent_id"] == pid
            _, found = await get(http, f"{base}/api/instances?parent_id={pid}")
            assert [i["instance_id"] for i in found["instances"]] == [kid["instance_id"]]
            assert found["filters"]["parent_id"] == pid and found["instances"][0]["parent_id"] == pid
            _, none = await get(http, f"{base}/api/instances?parent_id=wi-nobody")
            assert none["instances"] == []
            status, answer = await get(http, f"{base}/api/instances?parent_id=bad%20id")
            assert status == 400 and "parent_id" in answer["error"]

            # the pages link both ways
            async with http.get(f"{base}/instances/{pid}") as r:
                html = await r.text()
            assert f'href="/instances/{kid["instance_id"]}"' in html
            async with http.get(f"{base}/instances/{kid['instance_id']}") as r:
                html = await r.text()
            assert f'id="parent" href="/instances/{pid}"' in html


async def test_schedules_page_actions_and_the_schedule_filter(store: str, pg_schema: str) -> None:
    flow = orders(f"op-sched-{store}")
    async with dashboard_server(store, pg_schema, TEST_DATABASE_URL) as (server, base):
        async with aiohttp.ClientSession() as http, server.worker([flow]):
            await server.client.create_schedule("hourly", flow, {}, every=3600)
            await server.client.start(flow, {}, correlation_id="by-hand")
            status, page = await get(http, f"{base}/api/schedules")
            assert status == 200
            [s] = page["schedules"]
            assert s["id"] == "hourly" and not s["paused"] and len(s["next_fire_times"]) == 3
            assert s["next_fire_times"][0] > page["now"] and s["correlation_id"] == "schedule:hourly"

            status, answer = await post(http, f"{base}/api/schedules/hourly/pause", {"actor": "ada"})
            assert (
                status == 200 and answer["schedule"]["paused"] and answer["schedule"]["next_fire_times"] == []
            )
            assert (await server.client.get_schedule("hourly")).paused
            status, answer = await post(http, f"{base}/api/schedules/hourly/trigger", {"actor": "ada"})
            assert status == 200 and answer["started_instance_id"], answer
            started = answer["started_instance_id"]
            status, answer = await post(http, f"{base}/api/schedules/hourly/resume", {"actor": "ada"})
            assert status == 200 and not answer["schedule"]["paused"]
            assert len(answer["schedule"]["next_fire_times"]) == 3

            # bad input: an unknown action, an unknown schedule, no actor
            status, answer = await post(http, f"{base}/api/schedules/hourly/explode", {"actor": "ada"})
            assert status == 400 and "pause, resume, trigger" in answer["error"]
            status, answer = await post(http, f"{base}/api/schedules/nope/pause", {"actor": "ada"})
            assert status == 404, answer
            status, answer = await post(http, f"{base}/api/schedules/hourly/pause", {})
            assert status == 400 and not (await server.client.get_schedule("hourly")).paused

            # the schedule's instances, by schedule id or by its correlation id
            _, by_id = await get(http, f"{base}/api/instances?schedule_id=hourly")
            _, by_corr = await get(http, f"{base}/api/instances?correlation_id=schedule:hourly")
            assert [i["instance_id"] for i in by_id["instances"]] == [started]
            assert [i["instance_id"] for i in by_corr["instances"]] == [started]
            status, answer = await get(
                http, f"{base}/api/instances?schedule_id=hourly&correlation_id=by-hand"
            )
            assert status == 400 and "disagree" in answer["error"]

            async with http.get(f"{base}/schedules") as r:
                html = await r.text()
            assert r.status == 200 and 'data-schedule="hourly"' in html and 'href="/schedules"' in html
            _, detail = await get(http, f"{base}/api/instances/{started}")
            assert detail["instance"]["schedule_id"] == "hourly"
