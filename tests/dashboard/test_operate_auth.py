"""Under the server's TLS and identities: the Schedules page reads with a viewer's role, and the
new actions (signal, retry, schedule pause / trigger) refuse a viewer and record the admin."""

from __future__ import annotations

import asyncio
import json
import logging
import ssl
import urllib.error
import urllib.request

import pytest
from security.conftest import Pki, pki  # noqa: F401  (pki: a fixture)

from wiggle import Workflow
from wiggle._server.app import WiggleServer
from wiggle._server.config import ServerConfig

from .helpers import free_port, until


def call(url: str, keys: Pki, token: str = "", body: dict[str, object] | None = None) -> tuple[int, str]:
    """GET (or POST ``body``) over TLS with a bearer token; (status, text)."""
    context = ssl.create_default_context(cafile=str(keys.ca.ca_file))
    headers = {"Content-Type": "application/json"}
    if token:
        headers["Authorization"] = f"Bearer {token}"
    data = json.dumps(body).encode() if body is not None else None
    request = urllib.request.Request(
        url, data=data, method="POST" if body is not None else "GET", headers=headers
    )
    try:
        with urllib.request.urlopen(request, timeout=10, context=context) as reply:
            return reply.status, reply.read().decode()
    except urllib.error.HTTPError as exc:
        return exc.code, exc.read().decode()


async def test_signal_retry_and_schedule_actions_need_the_admin_role(
    pki: Pki,  # noqa: F811
    caplog: pytest.LogCaptureFixture,
) -> None:
    flow = Workflow.define("guarded-operate").user_task("approve").build()
    port = free_port()
    config = ServerConfig(
        port=0,
        http_port=port,
        tls_cert=str(pki.server_cert),
        tls_key=str(pki.server_key),
        auth_file=str(pki.auth_file),
    )
    server = WiggleServer(config)
    await server.start()
    base = f"https://127.0.0.1:{port}"
    try:
        async with pki.client(server.target, "ops") as admin:
            await admin.register(flow)
            iid = (await admin.start(flow, {})).instance_id
            await admin.create_schedule("guarded", flow, {}, every=3600)

        async def awaiting() -> bool:
            view = await server.instances.get_instance(iid)
            return any(t.status == "AWAITING" for t in view.tokens)

        await until(awaiting)
        status, body = await asyncio.to_thread(call, f"{base}/api/schedules", pki, "tok-watcher")
        assert status == 200 and '"guarded"' in body
        assert (await asyncio.to_thread(call, f"{base}/schedules", pki))[0] == 401

        who = {"actor": "eve", "data": {}}
        for path in (
            f"/api/instances/{iid}/signals/approve",
            f"/api/instances/{iid}/retry",
            "/api/schedules/guarded/pause",
            "/api/schedules/guarded/trigger",
        ):
            refused = await asyncio.to_thread(call, f"{base}{path}", pki, "tok-watcher", who)
            assert refused[0] == 403 and "admin" in refused[1], (path, refused)
        assert (await server.instances.get_instance(iid)).instance.status == "RUNNING"
        assert not (await server.instances.schedules.get("guarded")).paused
        assert not [e for e in await server.instances.history(iid) if e.kind == "OPERATOR"]

        done = await asyncio.to_thread(
            call, f"{base}/api/instances/{iid}/signals/approve", pki, "tok-ops", who
        )
        assert done[0] == 200, done
        [entry] = [e for e in await server.instances.history(iid) if e.kind == "OPERATOR"]
        assert entry.outcome == "SIGNALLED" and entry.worker_id.startswith("eve as ops (dashboard")
        paused = await asyncio.to_thread(call, f"{base}/api/schedules/guarded/pause", pki, "tok-ops", who)
        assert paused[0] == 200 and (await server.instances.schedules.get("guarded")).paused

        # an action no page has is 400 for every role, before any role check (it named RPCs that
        # do not exist: "may not call GetSchedule"), and no operator's action is logged for it
        with caplog.at_level(logging.INFO, logger="wiggle.server"):
            for token in ("tok-ops", "tok-app", "tok-watcher"):
                for path, words in (
                    ("/api/schedules/guarded/get", "schedule action must be one of pause, resume, trigger"),
                    (
                        "/api/schedules/guarded/delete",
                        "schedule action must be one of pause, resume, trigger",
                    ),
                    ("/api/bulk/list", "bulk action must be one of cancel, retry, got 'list'"),
                ):
                    got = await asyncio.to_thread(call, f"{base}{path}", pki, token, who)
                    assert got[0] == 400 and words in got[1] and "may not call" not in got[1], (token, got)
        acted = [r.getMessage() for r in caplog.records if r.getMessage().startswith("operator ")]
        assert not acted, acted
    finally:
        await server.stop(grace=0.5)
