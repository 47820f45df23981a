"""The fixes of the outside operator trial of the dashboard that the server decides (the browser's
side is tests/dashboard/test_browser_operator_trial.py): a page's background refresh does not keep
its session alive; every kind of waiting token gets a true label (a parent waiting for its child
is not "awaiting a person" with a moving "deadline"); a retrying instance says so in the list;
the bulk and schedule buttons follow the caller's roles; a context shows its characters; a
schedule's interval reads in seconds or minutes; the dialog's defaults are placeholders; no page
asks for a favicon."""

from __future__ import annotations

import re
from datetime import timedelta
from typing import Any

import aiohttp
from pg import TEST_DATABASE_URL
from security.conftest import Pki, pki  # noqa: F401  (pki: a fixture)

from wiggle import RetryPolicy, Workflow
from wiggle._engine.state import Instance, InstanceStatus, JoinState, Token, TokenStatus
from wiggle._security.tokens import Identity, Role, hash_token
from wiggle._server.web import pages, schedules
from wiggle._server.web.sessions import TOKEN, Sessions
from wiggle._server.web.states import node_states, token_times

from .helpers import call, charge, dashboard_server, secured_server, ship, tls_client, until, validate
from .test_signin import as_browser, sign_in, started

NOW = 1_000_000_000_000


# ---------------------------------------------------------------------- 1. the idle timeout


def test_a_background_read_does_not_count_as_use() -> None:
    now = [1000.0]
    sessions = Sessions(None, idle=60, max_age=3600, clock=lambda: now[0])
    session = sessions.open(Identity("ada", frozenset({Role.ADMIN})), TOKEN, hash_token("tok"))
    for _ in range(5):  # a page refreshing itself for 50 s: read, not used
        now[0] += 10
        assert sessions.get(session.id, touch=False)[0] is session
    now[0] += 10
    found, why = sessions.get(session.id, touch=False)
    assert found is None and "unused for 60 s (session_idle_seconds)" in why


async def test_an_open_page_refreshing_itself_reaches_the_idle_timeout(pki: Pki) -> None:  # noqa: F811
    async with secured_server("memory", "", "", pki) as (server, base):
        tls = tls_client(pki)
        sessions = server._http.side.sessions  # noqa: SLF001 - the port's sessions, to move their clock
        now = [5000.0]
        sessions.clock = lambda: now[0]
        session, _ = await sign_in(base, tls, "tok-watcher")  # signs in, then opens a page: used at 5000
        refresh = {**as_browser(base, session), "X-Fragment": "1", "X-Wiggle-Refresh": "1"}
        person = as_browser(base, session)
        idle = sessions.idle
        now[0] += idle - 1
        assert (await call("GET", f"{base}/instances", tls, headers=person))[0] == 200  # a person: used
        now[0] += idle - 1
        assert (await call("GET", f"{base}/instances", tls, headers=refresh))[0] == 200  # read, not used
        now[0] += 1  # idle since the person's read: the next refresh leads to the sign-in page
        status, _, answer = await call("GET", f"{base}/instances", tls, headers=refresh)
        assert status == 401 and f"unused for {idle:g} s" in answer["error"], answer


# ---------------------------------------------------------------------- 2. true labels


def kid_flow() -> Any:
    return Workflow.define("trial-kid").user_task("ok").build()


def every_kind() -> Any:
    return (
        Workflow.define("trial-kinds")
        .user_task("person", timeout=timedelta(hours=2))
        .user_task("anyone")
        .wait_signal("go", timeout=timedelta(minutes=5))
        .wait_signal("whenever")
        .sleep("nap", timedelta(minutes=4))
        .sub_workflow("kid", kid_flow())
        .fork(lambda b: b.step(validate), lambda b: b.step(ship))
        .join()
        .for_each("items", lambda b: b.step(charge))
        .build()
    )


def token(tid: str, node: str, status: TokenStatus, **fields: Any) -> Token:
    return Token(tid, "wi-p", node, status, **fields)


def test_every_kind_of_waiting_token_gets_a_true_label() -> None:
    definition = every_kind().definition
    # the fields each kind's token has as the engine parks it (wiggle/_engine/drive.py, children.py)
    person = token("t1", "person", TokenStatus.AWAITING, kind="USER_TASK", available_at=NOW + 7_200_000)
    anyone = token("t2", "anyone", TokenStatus.AWAITING, kind="USER_TASK")
    go = token("t3", "go", TokenStatus.AWAITING, kind="SIGNAL", available_at=NOW + 300_000)
    whenever = token("t4", "whenever", TokenStatus.AWAITING, kind="SIGNAL")
    nap = token("t5", "nap", TokenStatus.WAITING, kind="SLEEP", available_at=NOW + 240_000, started_at=NOW)
    kid = token(
        "t6",
        "kid",
        TokenStatus.AWAITING,
        kind="SUB_WORKFLOW",
        available_at=NOW + 30_000,  # only when the server re-reads the child next
        started_at=NOW - 5_000,
        child_id="wi-child",
    )
    joined = token("t7", "join", TokenStatus.JOINED, kind="JOIN", fork_stack=[("g1", 0)])
    element = token("t8", "charge", TokenStatus.RUNNING, lease_owner="w1", fork_stack=[("g2", 1)])
    tokens = [person, anyone, go, whenever, nap, kid, joined, element]
    instance = Instance(
        "wi-p",
        "trial-kinds",
        "v1",
        InstanceStatus.RUNNING,
        {},
        joins={
            "g1": JoinState("fork", 2, {}, arrived={"0": {}}, joined_tokens=["t7"]),
            "g2": JoinState("for_each", 5, {}, for_each=True, started=3, results={"0": 2}),
        },
    )
    states, labels = node_states([], tokens, definition, NOW, instance)
    assert labels == {
        "person": "awaiting a person, deadline in 2.0 h",
        "anyone": "awaiting a person",
        "go": "awaiting signal go, deadline in 5 min",
        "whenever": "awaiting signal whenever",
        "nap": "sleeping, wakes in 4 min",
        "kid": "waits for child wi-child",
        "fork": "1 of 2 branches at the join",
        "join": "1 of 2 branches here, waiting for the rest",
        "for_each": "1 of 5 done, 2 under way",
        "charge": "running on w1 (attempt 1)",
    }
    assert states == {
        "person": "awaiting",
        "anyone": "awaiting",
        "go": "signal",
        "whenever": "signal",
        "nap": "sleeping",
        "kid": "child",
        "fork": "forked",
        "join": "joined",
        "for_each": "forked",
        "charge": "running",
    }
    kinds = {n.id: n.kind for n in definition.nodes}
    times = {t.node_id: token_times(t, kinds[t.node_id], NOW) for t in tokens}
    assert times["kid"] == []  # the child's re-check is no deadline
    assert times["person"] == [{"what": "deadline", "at": NOW + 7_200_000}]
    assert times["go"] == [{"what": "deadline", "at": NOW + 300_000}]
    assert times["anyone"] == times["whenever"] == times["join"] == []
    assert times["nap"] == [{"what": "wakes at", "at": NOW + 240_000}]
    # a child not started yet; a delayed start (its instance SCHEDULED), which is no sleep
    starting = token(
        "t9", "kid", TokenStatus.AWAITING, kind="SUB_WORKFLOW", available_at=NOW, child_id="wi-c2"
    )
    assert node_states([], [starting], definition, NOW, instance)[1]["kid"] == "starting child wi-c2"
    delayed = token("t0", "person", TokenStatus.WAITING, available_at=NOW + 60_000)
    scheduled = Instance("wi-d", "trial-kinds", "v1", InstanceStatus.SCHEDULED, {})
    assert node_states([], [delayed], definition, NOW, scheduled) == (
        {"person": "scheduled"},
        {"person": "delayed start, starts in 1 min"},
    )
    assert token_times(delayed, kinds["person"], NOW, delayed_start=True) == [
        {"what": "starts at", "at": NOW + 60_000}
    ]


async def test_a_parent_waiting_for_its_child_says_so_and_links_it(store: str, pg_schema: str) -> None:
    kid = kid_flow()
    parent = Workflow.define(f"trial-parent-{store}").sub_workflow("kid", kid).build()
    async with dashboard_server(store, pg_schema, TEST_DATABASE_URL) as (server, base):
        await server.client.register(kid)
        await server.client.register(parent)
        pid = (await server.client.start(parent, {})).instance_id

        async def child_waits() -> bool:
            """the parent's token waits for a started child, which awaits its user task"""
            tokens = (await server.client.get(pid)).tokens
            started = any(e.outcome == "CHILD_STARTED" for e in await server.client.history(pid))
            if not started or not tokens or not tokens[0].child_id:
                return False
            child = await server.client.get(tokens[0].child_id)
            return any(t.status == "AWAITING" for t in child.tokens)

        await until(child_waits)
        cid = (await server.client.get(pid)).tokens[0].child_id
        async with aiohttp.ClientSession() as http:
            async with http.get(f"{base}/api/instances/{pid}") as r:
                data = await r.json()
            async with http.get(f"{base}/instances/{pid}") as r:
                page = await r.text()
        assert data["node_states"]["kid"] == "child"
        assert data["node_labels"]["kid"] == f"waits for child {cid}"
        [kid_token] = data["tokens"]
        assert kid_token["times"] == [] and kid_token["child_id"] == cid
        row = page.split('<table id="tokens">')[1].split("</table>")[0]
        assert f'waits for child <a class="child" href="/instances/{cid}">{cid}</a>' in row
        assert "deadline" not in row and "awaiting a person" not in page
        assert f'<a class="node-link" href="/instances/{cid}"><g class="node child" data-node="kid"' in page


# ---------------------------------------------------------------------- 4. retrying in the list


async def test_a_retrying_instance_says_so_in_the_list(store: str, pg_schema: str) -> None:
    flow = Workflow.define(f"trial-retrying-{store}").step(charge, retry=RetryPolicy.fixed(3, 120)).build()
    async with dashboard_server(store, pg_schema, TEST_DATABASE_URL) as (server, base):
        async with server.worker([flow]):
            iid = (await server.client.start(flow, {"declined": True})).instance_id

            async def in_its_backoff() -> bool:
                """the first attempt failed; the second waits for its time"""
                return any(t.attempt == 2 for t in (await server.client.get(iid)).tokens)

            await until(in_its_backoff)
            async with aiohttp.ClientSession() as http:
                async with http.get(f"{base}/api/instances?workflow={flow.name}") as r:
                    data = await r.json()
                async with http.get(f"{base}/instances?workflow={flow.name}") as r:
                    page = await r.text()
    [row] = data["instances"]
    assert row["status"] == "RUNNING" and row["error"] == "" and row["reason"] == ""
    [retry] = row["retrying"]
    assert (retry["node_id"], retry["attempt"], retry["status"]) == ("charge", 2, "READY")
    assert "card declined" in retry["last_error"] and retry["next_attempt_at"] > data["now"]
    cell = page.split(f'data-id="{iid}"')[1].split("</tr>")[0].split('<td class="err">')[1]
    assert re.fullmatch(
        r'<span class="retrying">retrying charge: attempt 2 in (1|2) min — last error: .*card declined.*</span></td>',
        cell,
        re.DOTALL,
    ), cell


# ---------------------------------------------------------------------- 5. buttons by role


async def test_bulk_and_schedule_buttons_follow_the_callers_roles(pki: Pki) -> None:  # noqa: F811
    async with secured_server("memory", "", "", pki) as (server, base):
        tls = tls_client(pki)
        await started(server, pki, "trial-roles")
        async with pki.client(server.target, "ops") as admin:
            await admin.create_schedule("trial-nightly", "trial-roles", {}, cron="0 3 * * *")
        seen = {}
        for who in ("watcher", "app", "ops"):
            bearer = {"Authorization": f"Bearer tok-{who}"}
            _, _, instances = await call("GET", f"{base}/instances", tls, headers=bearer)
            _, _, listed = await call("GET", f"{base}/api/instances", tls, headers=bearer)
            _, _, scheduled = await call("GET", f"{base}/schedules", tls, headers=bearer)
            _, _, plan = await call("GET", f"{base}/api/schedules", tls, headers=bearer)
            buttons = re.findall(r'id="(bulk-\w+)"', instances) + re.findall(
                r'class="(schedule-\w+)"', scheduled
            )
            seen[who] = (buttons, listed["actions"], plan["actions"])
        # a viewer and a client may neither cancel nor retry (admin only), nor pause or trigger
        for who in ("watcher", "app"):
            assert seen[who] == (
                [],
                {"bulk_cancel": False, "bulk_retry": False},
                {"pause": False, "resume": False, "trigger": False},
            ), who
        assert seen["ops"] == (
            ["bulk-cancel", "bulk-retry", "schedule-pause", "schedule-trigger"],
            {"bulk_cancel": True, "bulk_retry": True},
            {"pause": True, "resume": True, "trigger": True},
        )


# ---------------------------------------------------------------------- 7, 8. what the pages say


async def test_a_context_shows_its_characters_still_escaped() -> None:
    flow = Workflow.define("trial-unicode").user_task("look").build()
    async with dashboard_server("memory", "", "") as (server, base):
        await server.client.register(flow)
        context = {"name": "Zoë Ørsted", "city": "東京", "note": "<b>&'\"</b>", "emoji": "🚚"}
        iid = (await server.client.start(flow, context)).instance_id
        async with aiohttp.ClientSession() as http:
            async with http.get(f"{base}/instances/{iid}") as r:
                page = await r.text()
    shown = page.split('<pre id="context">')[1].split("</pre>")[0]
    assert "Zoë Ørsted" in shown and "東京" in shown and "🚚" in shown and "\\u" not in shown
    assert "&lt;b&gt;&amp;&#x27;\\&quot;&lt;/b&gt;" in shown and "<b>" not in shown


def test_a_schedules_interval_reads_in_seconds_minutes_and_hours() -> None:
    assert [pages.duration(ms) for ms in (250, 1500, 30_000, 90_000, 300_000, 5_400_000, 86_400_000)] == [
        "250 ms",
        "1.5 s",
        "30 s",
        "1 min 30 s",
        "5 min",
        "1 h 30 min",
        "1 d",
    ]
    row = {
        "id": "every-half-minute",
        "workflow": "w",
        "cron": "",
        "timezone": "",
        "interval_millis": 30_000,
        "paused": False,
        "next_fire_times": [],
        "last_tick_at": 0,
        "last_instance_id": "",
        "fired": 0,
        "skipped": 0,
    }
    html = schedules.schedules_html({"schedules": [row], "actions": {"pause": True, "trigger": True}})
    assert '<span title="30000 ms">every 30 s</span>' in html and "30000 ms<" not in html


def test_the_dialogs_defaults_are_placeholders_and_no_favicon_is_fetched() -> None:
    html = pages.layout("instances", "instances", "<p>x</p>", "ada", "csrf-token")
    assert (
        '<input id="reason" placeholder="cancelled from the dashboard">' in html
    )  # no value: typing replaces
    assert '<textarea id="data" rows="4" placeholder="{}"></textarea>' in html
    assert '<link rel="icon" href="data:,">' in html  # an empty icon: nothing to fetch (CSP img-src data:)
    assert '<meta name="viewport" content="width=device-width, initial-scale=1">' in html
    assert '<p id="stale" class="hidden" role="status"></p>' in html


async def test_a_cancel_with_the_reason_left_empty_records_the_default() -> None:
    flow = Workflow.define("trial-reason").user_task("look").build()
    async with dashboard_server("memory", "", "") as (server, base):
        await server.client.register(flow)
        one, many = [(await server.client.start(flow, {})).instance_id for _ in range(2)]
        origin = {"Origin": base}
        status, _, _ = await call(
            "POST", f"{base}/api/instances/{one}/cancel", None, {"actor": "ada"}, origin
        )
        assert status == 200
        bulk = f"{base}/api/bulk/cancel?workflow={flow.name}"
        status, _, answer = await call("POST", bulk, None, {"dry_run": True}, origin)
        status, _, answer = await call(
            "POST", bulk, None, {"actor": "ada", "expected": answer["count"]}, origin
        )
        assert status == 200 and answer["done"] == 1, answer
        assert (await server.client.get(one)).reason == "cancelled from the dashboard"
        assert (await server.client.get(many)).reason == "cancelled in bulk from the dashboard"
