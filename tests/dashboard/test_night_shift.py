"""The dashboard as an operator meets it at night (issue #26): signal waits labelled and sent as
signals, the moments each wait ends, a retry that must name its node, search by node, text and
context field, children behind a toggle, bulk cancel and retry by the filter, the schedule
actions' outcome. On every store, against a real server with real instances."""

from __future__ import annotations

import logging
from datetime import timedelta
from typing import Any
from urllib.parse import urlencode

import aiohttp
import msgspec
import pytest
from pg import TEST_DATABASE_URL

from wiggle import InvalidArgument, Workflow

from .helpers import dashboard_server, until
from .test_api import get, post


def boom(ctx: dict[str, Any]) -> dict[str, Any]:
    raise RuntimeError(f"gateway refused order {ctx.get('order', '?')}")


def noop(ctx: dict[str, Any]) -> dict[str, Any]:
    return ctx


def as_json(value: Any) -> Any:
    """A client value as it reads as JSON (tuples as lists)."""
    return msgspec.json.decode(msgspec.json.encode(value))


async def page_of(http: aiohttp.ClientSession, base: str, iid: str) -> dict[str, Any]:
    status, page = await get(http, f"{base}/api/instances/{iid}")
    assert status == 200, page
    return page


async def test_signal_waits_sleeps_and_their_times(store: str, pg_schema: str) -> None:
    flow = (
        Workflow.define(f"night-waits-{store}")
        .wait_signal("go", timeout=timedelta(hours=2))
        .sleep("nap", timedelta(hours=1))
        .build()
    )
    async with dashboard_server(store, pg_schema, TEST_DATABASE_URL) as (server, base):
        async with aiohttp.ClientSession() as http:
            await server.client.register(flow)
            iid = (await server.client.start(flow, {})).instance_id

            async def waiting_for_go() -> bool:
                return (await page_of(http, base, iid))["node_states"].get("go") == "signal"

            await until(waiting_for_go)
            page = await page_of(http, base, iid)
            now = page["now"]
            assert page["node_labels"]["go"].startswith("awaiting signal go, deadline in ")
            assert page["awaiting_signals"] == [{"node_id": "go", "signal": "go"}]
            assert page["awaiting_user_tasks"] == [] and page["actions"]["complete_user_task"] == []
            [token] = page["tokens"]
            [(what, at)] = [(m["what"], m["at"]) for m in token["times"]]
            assert what == "deadline" and now + 7_100_000 < at <= now + 7_200_000
            async with http.get(f"{base}/instances/{iid}") as r:
                html = await r.text()
            assert 'class="send-signal" data-signal="go"' in html and "complete-task" not in html
            assert "awaiting a person" not in html and f'data-ms="{at}"' in html

            # the button's request: the signal, with a payload, recorded with who sent it
            status, answer = await post(
                http, f"{base}/api/instances/{iid}/signals/go", {"actor": "ada", "data": {"ok": 1}}
            )
            assert (status, answer["outcome"]) == (200, "DELIVERED"), answer

            async def sleeping() -> bool:
                return (await page_of(http, base, iid))["node_states"].get("nap") == "sleeping"

            await until(sleeping)
            page = await page_of(http, base, iid)
            assert page["node_labels"]["nap"].startswith("sleeping, wakes in ")
            [token] = page["tokens"]
            assert [m["what"] for m in token["times"]] == ["wakes at"]
            assert page["instance"]["context"]["ok"] == 1

            # one read model: the page's instance, tokens and list row are what a gRPC client reads
            info = as_json(await server.client.get(iid))
            tokens = info.pop("tokens")
            assert {k: page["instance"][k] for k in info} == info
            assert [{k: t[k] for k in tokens[0]} for t in page["tokens"]] == tokens
            listed_infos, _ = await server.client.list(workflow=flow.name, with_context=False)
            _, rows = await get(http, f"{base}/api/instances?workflow={flow.name}")
            [row] = rows["instances"]
            row_info = as_json(listed_infos[0])
            del row_info["context"]  # a list row carries none unless asked (docs/dashboard.md)
            assert "context" not in row
            assert {k: row[k] for k in row_info} == row_info and row["at"] == ["nap"]


async def test_a_retry_that_must_name_its_node_and_a_failed_childs_header(store: str, pg_schema: str) -> None:
    child = Workflow.define(f"night-child-{store}").step(boom).build()
    parent = Workflow.define(f"night-parent-{store}").step(noop).sub_workflow("call", child).build()
    refused = (
        Workflow.define(f"night-refused-{store}").step(noop).end("refused by policy", success=False).build()
    )
    async with dashboard_server(store, pg_schema, TEST_DATABASE_URL) as (server, base):
        async with aiohttp.ClientSession() as http, server.worker([child, parent, refused]):
            pid = (await server.client.start(parent, {"order": 7})).instance_id
            rid = (await server.client.start(refused, {})).instance_id
            assert (await server.client.wait(pid, timeout=30)).status == "FAILED"
            assert (await server.client.wait(rid, timeout=30)).status == "FAILED"
            page = await page_of(http, base, pid)
            assert page["actions"]["retry_from"] == {
                "failed_at": ["call"],
                "needs_from_node": False,
                "nodes": ["noop", "call"],
            }
            kid = page["children"][-1]  # the sub-workflow node is retried: one child per attempt
            kid_page = await page_of(http, base, kid["instance_id"])
            # the failed child's header counts its attempts (the runaway guard's steps said 0)
            assert kid_page["instance"]["step_attempts"] == kid_page["instance"]["failed_attempts"] == 3
            async with http.get(f"{base}/instances/{kid['instance_id']}") as r:
                assert "3 step attempts, 3 failed" in await r.text()

            # failed at an END: nothing to restart as it was, the dialog must offer the nodes
            page = await page_of(http, base, rid)
            assert page["actions"]["retry_from"] == {
                "failed_at": [],
                "needs_from_node": True,
                "nodes": ["noop"],
            }
            async with http.get(f"{base}/instances/{rid}") as r:
                html = await r.text()
            assert 'id="retry"' in html and 'data-failed-at=""' in html and 'data-nodes="noop"' in html
            status, answer = await post(http, f"{base}/api/instances/{rid}/retry", {"actor": "ada"})
            assert status == 409 and "name a node" in answer["error"], answer
            status, answer = await post(
                http, f"{base}/api/instances/{rid}/retry", {"actor": "ada", "from_node": "noop"}
            )
            assert status == 200, answer
            assert (await server.client.wait(rid, timeout=30)).status == "FAILED"  # refused again
            [resumed] = [e for e in await server.client.history(rid) if e.kind == "RETRY"]
            assert resumed.node_id == "noop" and resumed.worker_id.startswith("ada (dashboard")


async def listed(http: aiohttp.ClientSession, base: str, **args: Any) -> list[str]:
    status, page = await get(http, f"{base}/api/instances?{urlencode(args)}")
    assert status == 200, page
    return [i["instance_id"] for i in page["instances"]]


async def test_search_by_node_text_context_children_and_human_times(store: str, pg_schema: str) -> None:
    child = Workflow.define(f"night-kid-{store}").user_task("kid_waits").build()
    flow = Workflow.define(f"night-search-{store}").user_task("review").sub_workflow("call", child).build()
    fields = {"context_search_fields": "customer_id"} if store == "postgres" else {}
    async with dashboard_server(store, pg_schema, TEST_DATABASE_URL, **fields) as (server, base):
        async with aiohttp.ClientSession() as http:
            await server.client.register(child)
            await server.client.register(flow)
            a = (await server.client.start(flow, {"customer_id": "c-42"})).instance_id
            b = (await server.client.start(flow, {"customer_id": 42})).instance_id
            c = (await server.client.start(flow, {"customer_id": "c-7"})).instance_id
            await server.client.cancel(c, "Fraud suspected by the 100% check")
            await server.client.complete_user_task(b, "review", {})

            async def child_started() -> bool:
                return bool(await listed(http, base, parent_id=b))

            await until(child_started)
            [kid] = await listed(http, base, parent_id=b)
            w = flow.name
            assert await listed(http, base, workflow=w, ctx="customer_id = c-42") == [a]
            assert await listed(http, base, workflow=w, ctx='ctx.customer_id = "c-42"') == [a]
            assert await listed(http, base, workflow=w, ctx="customer_id = 42") == [b]
            assert await listed(http, base, ctx="customer_id = nobody") == []
            assert await listed(http, base, workflow=w, node="review") == [a]
            assert await listed(http, base, workflow=w, node="call") == [b]
            assert await listed(http, base, workflow=w, text="fraud SUSPECTED") == [c]
            assert await listed(http, base, workflow=w, text="100%") == [c]  # % is no wildcard
            assert await listed(http, base, workflow=w, text="1_0") == []  # nor is _
            # children hide behind the toggle; a parent filter shows them
            assert kid not in await listed(http, base)
            assert kid in await listed(http, base, children=1)
            assert await listed(http, base, parent_id=b) == [kid]
            _, page = await get(http, f"{base}/api/instances?{urlencode({'children': 1})}")
            assert page["filters"]["children"] is True
            [row] = [i for i in page["instances"] if i["instance_id"] == kid]
            assert row["parent_id"] == b
            # times as a person writes them: a time ago, a date and time (UTC), ms
            assert set(await listed(http, base, workflow=w, created_after="1h")) == {a, b, c}
            assert await listed(http, base, workflow=w, created_before="2h ago") == []
            assert await listed(http, base, workflow=w, created_after="2000-01-01 00:00") != []
            assert await listed(http, base, workflow=w, created_after="2999-01-01T00:00:00+01:00") == []
            _, page = await get(http, f"{base}/api/instances?created_after=946684800000")
            assert page["filters"]["created_after"] == "2000-01-01T00:00:00Z"
            for bad, says in (
                ("ctx=customer-id%20%3D%201", "ctx must be FIELD = VALUE"),
                ("ctx=customer_id", "ctx must be FIELD = VALUE"),
                ("created_after=tomorrowish", "created_after must be a date and time"),
                ("node=a%20b", "node"),
            ):
                status, answer = await get(http, f"{base}/api/instances?{bad}")
                assert status == 400 and says in answer["error"], (bad, answer)
            # the same search through gRPC ListInstances (the clients, wiggle list)
            found, _ = await server.client.list(workflow=w, context={"customer_id": "c-42"})
            assert [i.instance_id for i in found] == [a]
            found, _ = await server.client.list(workflow=w, node="call", text="", top_level=True)
            assert [i.instance_id for i in found] == [b]
            found, _ = await server.client.list(text="fraud")
            assert [i.instance_id for i in found] == [c]
            assert kid in [i.instance_id for i in (await server.client.list())[0]]  # all, by default
            assert kid not in [i.instance_id for i in (await server.client.list(top_level=True))[0]]
            with pytest.raises(InvalidArgument, match="context field 'a-b'"):
                await server.client.list(context={"a-b": "1"})
            if store == "postgres":
                await context_index_is_used(server, pg_schema)


async def context_index_is_used(server: Any, schema: str) -> None:
    """The store made the index of the named field, and a context search goes through it."""
    import psycopg

    from wiggle._storage.base import InstanceQuery
    from wiggle._storage.postgres.statements import list_conditions

    conds, params = list_conditions(InstanceQuery(context=(("customer_id", "c-42"),)), schema)
    async with await psycopg.AsyncConnection.connect(TEST_DATABASE_URL, autocommit=True) as conn:
        cur = await conn.execute(
            "SELECT indexdef FROM pg_indexes WHERE schemaname = %s AND indexname = 'instances_ctx_customer_id'",
            (schema,),
        )
        [(definition,)] = await cur.fetchall()
        assert "context_text(context, 'customer_id'::text)" in definition, definition
        await conn.execute("SET enable_seqscan = off")
        sql = f'EXPLAIN SELECT id FROM "{schema}".instances WHERE {" AND ".join(conds)} ORDER BY id DESC LIMIT 5'
        plan = "\n".join(r[0] for r in await (await conn.execute(sql, params)).fetchall())
        assert "instances_ctx_customer_id" in plan, plan


async def test_bulk_cancel_and_retry_by_the_filter(
    store: str, pg_schema: str, caplog: pytest.LogCaptureFixture
) -> None:
    waits = Workflow.define(f"night-bulk-{store}").user_task("hold").build()
    fails = Workflow.define(f"night-bulkfail-{store}").step(boom).build()
    caplog.set_level(logging.INFO, logger="wiggle.server")
    async with dashboard_server(store, pg_schema, TEST_DATABASE_URL) as (server, base):
        async with aiohttp.ClientSession() as http:
            await server.client.register(waits)
            ids = [(await server.client.start(waits, {"n": i})).instance_id for i in range(3)]
            other = (await server.client.start(waits, {"n": 99})).instance_id
            await server.client.cancel(other, "not part of it")
            url = f"{base}/api/bulk/cancel?{urlencode({'workflow': waits.name})}"
            status, dry = await post(http, url, {"dry_run": True})
            assert status == 200 and dry["count"] == 3 and sorted(dry["ids"]) == sorted(ids), dry
            status, answer = await post(http, url, {"actor": "ada", "expected": 2})
            assert status == 409 and "now matches 3" in answer["error"], answer
            status, answer = await post(http, url, {"actor": "ada"})
            assert status == 400 and '"expected"' in answer["error"]
            assert [(await server.client.get(i)).status for i in ids] == ["RUNNING"] * 3  # nothing done
            status, answer = await post(http, url, {"actor": "ada", "expected": 3, "reason": "storm"})
            assert (status, answer["done"], answer["errors"]) == (200, 3, []), answer
            for i in ids:
                info = await server.client.get(i)
                assert (info.status, info.reason) == ("CANCELLED", "storm")
                [entry] = [e for e in await server.client.history(i) if e.kind == "OPERATOR"]
                assert entry.outcome == "CANCELLED" and entry.worker_id.startswith("ada (dashboard")
            lines = [r.getMessage() for r in caplog.records if "bulk cancel" in r.getMessage()]
            assert len(lines) == 1 and "3 instances" in lines[0] and "ada (dashboard" in lines[0], lines

            async with server.worker([fails]):
                failed = [(await server.client.start(fails, {"order": i})).instance_id for i in range(2)]
                for i in failed:
                    assert (await server.client.wait(i, timeout=30)).status == "FAILED"
                url = (
                    f"{base}/api/bulk/retry?{urlencode({'workflow': fails.name, 'text': 'gateway refused'})}"
                )
                status, dry = await post(http, url, {"dry_run": True})
                assert dry["count"] == 2, dry
                status, answer = await post(http, url, {"actor": "grace", "expected": 2})
                assert (status, answer["done"]) == (200, 2), answer
                for i in failed:
                    assert (await server.client.wait(i, timeout=30)).status == "FAILED"  # fails again
                    [entry] = [e for e in await server.client.history(i) if e.kind == "RETRY"]
                    assert entry.worker_id.startswith("grace (dashboard")
            status, answer = await post(http, f"{base}/api/bulk/explode", {"dry_run": True})
            assert status == 400 and "bulk action must be" in answer["error"]


async def test_schedule_actions_say_what_happened(
    store: str, pg_schema: str, caplog: pytest.LogCaptureFixture
) -> None:
    flow = Workflow.define(f"night-sched-{store}").user_task("hold").build()
    caplog.set_level(logging.INFO, logger="wiggle.server")
    async with dashboard_server(store, pg_schema, TEST_DATABASE_URL) as (server, base):
        async with aiohttp.ClientSession() as http:
            await server.client.register(flow)
            await server.client.create_schedule("nightly", flow, {}, cron="0 3 * * *")
            status, answer = await post(http, f"{base}/api/schedules/nightly/trigger", {"actor": "ada"})
            assert status == 200 and answer["started_instance_id"].startswith("wi-"), answer
            started = answer["started_instance_id"]
            async with http.get(f"{base}/schedules") as r:
                assert f'class="last-instance" href="/instances/{started}"' in await r.text()
            status, answer = await post(http, f"{base}/api/schedules/nobody/pause", {"actor": "ada"})
            assert status == 404, answer
            messages = [r.getMessage() for r in caplog.records if getattr(r, "actor", "").startswith("ada")]
            assert any("triggered schedule nightly" in m for m in messages), messages
            assert any("pause refused schedule nobody" in m for m in messages), messages
            assert not any(
                m.endswith("paused schedule nobody") or "paused schedule nobody (" in m for m in messages
            )
