"""The HTTP API's malformed-input table: every bad request answers the documented JSON error
(``{"error", "code"}`` with its status) naming the problem, carries the security headers, and
changes nothing (the instance, its history and the schedule are checked after the table)."""

from __future__ import annotations

import json
import logging
from typing import Any

import aiohttp
import pytest
from pg import TEST_DATABASE_URL

from wiggle import Workflow
from wiggle._server.web import api

from .helpers import dashboard_server, until

UNKNOWN = "wi-" + "0" * 24
DEEP = b'{"actor": "ada", "data": ' + b'{"a": ' * 5000 + b"1" + b"}" * 5000 + b"}"
JSON = {"Content-Type": "application/json"}


def rows(iid: str, limit: int) -> list[tuple[str, str, str, dict[str, str], bytes | None, int, str, str]]:
    """(what, method, path, headers, body, status, code, words the message must contain)."""
    cancel = f"/api/instances/{iid}/cancel"
    who = json.dumps({"actor": "ada"}).encode()
    return [
        ("deep JSON", "POST", cancel, JSON, DEEP, 400, "INVALID_ARGUMENT", "nesting limit is 256"),
        (
            "text/plain",
            "POST",
            cancel,
            {"Content-Type": "text/plain"},
            who,
            415,
            "INVALID_ARGUMENT",
            "application/json",
        ),
        (
            "a form",
            "POST",
            cancel,
            {"Content-Type": "application/x-www-form-urlencoded"},
            b"actor=ada",
            415,
            "INVALID_ARGUMENT",
            "application/json",
        ),
        ("no content type", "POST", cancel, {}, who, 415, "INVALID_ARGUMENT", "application/json"),
        ("not JSON", "POST", cancel, JSON, b"{actor: ada", 400, "INVALID_ARGUMENT", "not valid JSON"),
        ("an array", "POST", cancel, JSON, b'["ada"]', 400, "INVALID_ARGUMENT", "must be a JSON object"),
        ("no actor", "POST", cancel, JSON, b"{}", 400, "INVALID_ARGUMENT", '"actor" must name who'),
        ("a number actor", "POST", cancel, JSON, b'{"actor": 7}', 400, "INVALID_ARGUMENT", '"actor"'),
        (
            "oversize body",
            "POST",
            cancel,
            JSON,
            b'{"actor": "ada", "reason": "' + b"x" * (limit + 70_000) + b'"}',
            413,
            "INVALID_ARGUMENT",
            f"larger than {limit + 64 * 1024} bytes",
        ),
        (
            "data over the payload limit",
            "POST",
            f"/api/instances/{iid}/signals/go",
            JSON,
            json.dumps({"actor": "ada", "data": {"blob": "x" * (limit + 10)}}).encode(),
            400,
            "INVALID_ARGUMENT",
            "limit",
        ),
        (
            "unknown instance",
            "POST",
            f"/api/instances/{UNKNOWN}/cancel",
            JSON,
            who,
            404,
            "NOT_FOUND",
            UNKNOWN,
        ),
        (
            "bad instance id",
            "POST",
            "/api/instances/bad%20id/cancel",
            JSON,
            who,
            400,
            "INVALID_ARGUMENT",
            "instance_id",
        ),
        (
            "unknown user task",
            "POST",
            f"/api/instances/{iid}/user-tasks/nope",
            JSON,
            who,
            404,
            "NOT_FOUND",
            "nope",
        ),
        ("unknown signal", "POST", f"/api/instances/{iid}/signals/nope", JSON, who, 404, "NOT_FOUND", "nope"),
        (
            "retry a running one",
            "POST",
            f"/api/instances/{iid}/retry",
            JSON,
            who,
            409,
            "FAILED_PRECONDITION",
            "RUNNING",
        ),
        ("unknown schedule", "POST", "/api/schedules/nope/pause", JSON, who, 404, "NOT_FOUND", "nope"),
        (
            "unknown schedule action",
            "POST",
            "/api/schedules/nightly/explode",
            JSON,
            who,
            400,
            "INVALID_ARGUMENT",
            "explode",
        ),
        (
            "foreign origin",
            "POST",
            cancel,
            {**JSON, "Origin": "http://evil.example"},
            who,
            403,
            "PERMISSION_DENIED",
            "evil.example",
        ),
        (
            "foreign referer",
            "POST",
            cancel,
            {**JSON, "Referer": "http://evil.example/x"},
            who,
            403,
            "PERMISSION_DENIED",
            "Referer",
        ),
        (
            "cross-site fetch",
            "POST",
            cancel,
            {**JSON, "Sec-Fetch-Site": "cross-site"},
            who,
            403,
            "PERMISSION_DENIED",
            "cross-site",
        ),
        ("GET an action", "GET", cancel, {}, None, 405, "INVALID_ARGUMENT", "POST"),
        ("PUT a list", "PUT", "/api/instances", JSON, b"{}", 405, "INVALID_ARGUMENT", "GET"),
        ("unknown path", "GET", "/api/nothing-here", {}, None, 404, "NOT_FOUND", "/api/nothing-here"),
        ("unknown page", "GET", f"/instances/{UNKNOWN}", {}, None, 404, "NOT_FOUND", UNKNOWN),
        (
            "bad status filter",
            "GET",
            "/api/instances?status=BOGUS",
            {},
            None,
            400,
            "INVALID_ARGUMENT",
            "BOGUS",
        ),
        (
            "bad page size",
            "GET",
            "/api/instances?page_size=0",
            {},
            None,
            400,
            "INVALID_ARGUMENT",
            "page_size",
        ),
        (
            "bad time filter",
            "GET",
            "/api/instances?created_after=yesterday",
            {},
            None,
            400,
            "INVALID_ARGUMENT",
            "created_after",
        ),
        *(
            (f"time filter {value} past 9999", method, path, headers, body, 400, "INVALID_ARGUMENT", words)
            for value in ("253402300800000", "9223372036854775807", "99999999999999999999999")
            for name in ("created_after", "created_before")
            for method, path, headers, body, words in (
                ("GET", f"/api/instances?{name}={value}", {}, None, f"{name} must be from 1970-01-01"),
                (
                    "POST",
                    f"/api/bulk/cancel?{name}={value}",
                    JSON,
                    b'{"dry_run": true}',
                    "0 to 253402300799999 milliseconds",
                ),
            )
        ),
        (
            "bad workflow filter",
            "GET",
            "/api/instances?workflow=a%20b",
            {},
            None,
            400,
            "INVALID_ARGUMENT",
            "workflow",
        ),
        (
            "garbage page token",
            "GET",
            "/api/instances?page_token=garbage",
            {},
            None,
            400,
            "INVALID_ARGUMENT",
            "page_token",
        ),
        (
            "foreign Host",
            "GET",
            "/api/instances",
            {"Host": "evil.example"},
            None,
            400,
            "INVALID_ARGUMENT",
            "http_origin",
        ),
    ]


HEADERS = ("Content-Security-Policy", "X-Frame-Options", "X-Content-Type-Options", "Referrer-Policy")


async def answer(
    http: aiohttp.ClientSession, method: str, url: str, headers: dict[str, str], body: bytes | None
) -> tuple[int, Any, Any]:
    async with http.request(method, url, data=body, headers=headers, skip_auto_headers=["Content-Type"]) as r:
        return r.status, r.headers, await r.json(content_type=None)


async def test_malformed_input_table(store: str, pg_schema: str, caplog: pytest.LogCaptureFixture) -> None:
    flow = Workflow.define(f"errors-{store}").user_task("approve").wait_signal("go").build()
    async with dashboard_server(store, pg_schema, TEST_DATABASE_URL) as (server, base):
        client = server.client
        await client.register(flow)
        iid = (await client.start(flow, {"n": 1})).instance_id
        await client.create_schedule("nightly", flow, {}, every=3600)

        async def awaiting() -> bool:
            return any(t.status == "AWAITING" for t in (await client.get(iid)).tokens)

        await until(awaiting)
        before = (await client.get(iid), await client.history(iid), await client.get_schedule("nightly"))
        limit = server.server.config.max_payload_bytes
        async with aiohttp.ClientSession() as http:
            for what, method, path, headers, body, status, code, words in rows(iid, limit):
                got, reply_headers, reply = await answer(http, method, base + path, headers, body)
                assert (got, reply.get("code")) == (status, code), (what, got, reply)
                assert set(reply) == {"error", "code"} and words in reply["error"], (what, reply)
                assert reply_headers["Content-Type"].startswith("application/json"), what
                assert all(h in reply_headers for h in HEADERS), (what, reply_headers)

            # a bug answers 500 as the same JSON, without the exception's text; the log has it
            original = api.workflows_page

            async def broken(_src: object) -> dict[str, Any]:
                raise RuntimeError("secret internals")

            api.workflows_page = broken  # type: ignore[assignment]
            try:
                with caplog.at_level(logging.ERROR, logger="wiggle.http"):
                    got, _, reply = await answer(http, "GET", f"{base}/api/workflows", {}, None)
            finally:
                api.workflows_page = original  # type: ignore[assignment]
            assert got == 500 and reply["code"] == "INTERNAL" and "secret" not in reply["error"], reply
            assert "secret internals" in caplog.text

            # a browser navigating to a missing page gets the message as a page
            async with http.get(f"{base}/instances/{UNKNOWN}", headers={"Accept": "text/html"}) as r:
                assert r.status == 404 and r.content_type == "text/html" and UNKNOWN in await r.text()
            far = f"{base}/instances?created_before=253402300800000"
            async with http.get(far, headers={"Accept": "text/html"}) as r:
                assert r.status == 400 and "created_before must be from 1970-01-01" in await r.text()

        after = (await client.get(iid), await client.history(iid), await client.get_schedule("nightly"))
        assert after == before  # nothing changed: status, tokens, context, history, schedule
        assert after[0].status == "RUNNING" and not [e for e in after[1] if e.kind == "OPERATOR"]
