"""The Queues page and its JSON show flow control against a real server (docs/dashboard.md,
docs/flow-control.md): a queue's limits, its steps in use, the steps holding a key's slot and
waiting for one, and until when its rate holds its steps back; the Instance page shows a running
step's time limit and the instance's own. The queues are set up by tests/limited_queues.py."""

from __future__ import annotations

import msgspec
from limited_queues import HOLDER, LONG_LEASE_MILLIS, hold_limited_queues
from pg import TEST_DATABASE_URL

from wiggle._client.types import QueueInfo

from .helpers import call, dashboard_server


async def test_the_queues_page_shows_limits_slots_and_the_rate_wait(store: str, pg_schema: str) -> None:
    async with dashboard_server(store, pg_schema, TEST_DATABASE_URL, lease_millis=LONG_LEASE_MILLIS) as (
        server,
        base,
    ):
        scene = await hold_limited_queues(server.client, f"page-limits-{store}")
        status, _, page = await call("GET", f"{base}/api/queues")
        assert status == 200, page
        shown = {q["queue"]: q for q in page["queues"]}
        keyed, rated = shown[scene.keyed], shown[scene.rated]
        assert (keyed["max_running"], keyed["rate_max"], keyed["rate_limited_until"]) == (3, 0, 0), keyed
        assert (keyed["running"], keyed["limit_held"], keyed["ready"], keyed["limit_waiting"]) == (2, 2, 2, 2)
        assert [w["in_flight"] for w in keyed["workers"] if w["worker_id"] == HOLDER] == [2]
        assert (rated["rate_max"], rated["rate_period_millis"], rated["max_running"]) == (1, 3_600_000, 0)
        assert rated["rate_limited_until"] == scene.rate_limited_until, (rated, scene.rated_claim)
        assert (rated["running"], rated["ready"], rated["limit_held"], rated["limit_waiting"]) == (1, 1, 0, 0)
        # the same fields, with the same values, as ListQueues (wiggle queues --json) answers them
        for info in await server.client.queues():
            row = shown[info.queue]
            for field in set(QueueInfo.__struct_fields__) - {"workers", "oldest_ready_age_millis"}:
                assert row[field] == msgspec.to_builtins(getattr(info, field)), (info.queue, field)

        status, _, html = await call("GET", f"{base}/queues")
        assert status == 200
        keyed_row = html.split(f'data-queue="{scene.keyed}"')[1].split("</tr>")[0]
        rated_row = html.split(f'data-queue="{scene.rated}"')[1].split("</tr>")[0]
        assert '<td class="limits">max running 3 <span class="muted">(2 in use)</span></td>' in keyed_row
        assert '<td class="slots">2 held<br>2 waiting</td>' in keyed_row
        assert (
            '<td class="limits">rate 1 / 1 h<br><span class="err rate-limited">rate limited until '
            in rated_row
        )
        assert f'<time data-ms="{scene.rate_limited_until}"' in rated_row
        assert '<td class="slots">-</td>' in rated_row


async def test_the_instance_page_shows_the_steps_and_the_instances_time_limits(
    store: str, pg_schema: str
) -> None:
    async with dashboard_server(store, pg_schema, TEST_DATABASE_URL, lease_millis=LONG_LEASE_MILLIS) as (
        server,
        base,
    ):
        scene = await hold_limited_queues(server.client, f"page-times-{store}")
        claim = scene.held[0]  # a running attempt with a 2-hour limit, of an instance with 3 hours
        claimed_at = claim.lease_expires_at - claim.lease_millis  # its 1-hour lease ends first
        status, _, page = await call("GET", f"{base}/api/instances/{claim.instance_id}")
        assert status == 200, page
        inst = page["instance"]
        assert inst["status"] == "RUNNING" and inst["deadline_at"] == inst["created_at"] + 3 * 3_600_000, inst
        (token,) = page["tokens"]
        assert token["status"] == "RUNNING" and token["lease_owner"] == HOLDER
        assert token["times"] == [
            {"what": "times out at", "at": claimed_at + 2 * 3_600_000},
            {"what": "lease until", "at": claim.lease_expires_at},
        ]
        status, _, html = await call("GET", f"{base}/instances/{claim.instance_id}")
        assert status == 200
        assert f' · times out at <time data-ms="{inst["deadline_at"]}"' in html  # the header: the instance's
        assert (
            f'times out at <time data-ms="{claimed_at + 2 * 3_600_000}"' in html
        )  # the tokens table: the step's
        label = page["node_labels"]["charge"]  # the graph's
        assert label.startswith(f"running on {HOLDER} (attempt 1), times out in ") and label in html, label
        # a step waiting for its key's slot is READY, waiting for a worker, with no time of its own
        status, _, waiting = await call("GET", f"{base}/api/instances/{scene.waiting[0]}")
        assert [(t["status"], t["times"]) for t in waiting["tokens"]] == [("READY", [])]
