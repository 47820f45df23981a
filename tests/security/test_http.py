"""The HTTP port (/metrics, /healthz) over TLS, with tokens and roles, or left open by a flag."""

from __future__ import annotations

import asyncio
import json
import shutil
import ssl
import urllib.error
import urllib.request
from pathlib import Path

import pytest
from ports import free_port

from wiggle._server.app import WiggleServer
from wiggle._server.config import ServerConfig

from .certs import Authority
from .conftest import Pki


def _get(url: str, pki: Pki, token: str = "") -> tuple[int, str]:
    context = ssl.create_default_context(cafile=str(pki.ca.ca_file))
    request = urllib.request.Request(url, headers={"Authorization": f"Bearer {token}"} if token else {})
    try:
        with urllib.request.urlopen(request, timeout=10, context=context) as reply:
            return reply.status, reply.read().decode()
    except urllib.error.HTTPError as exc:
        return exc.code, exc.read().decode()


@pytest.mark.parametrize("open_metrics", [False, True])
async def test_metrics_over_tls_with_roles(pki: Pki, open_metrics: bool) -> None:
    port = free_port()
    config = ServerConfig(
        port=0,
        http_port=port,
        tls_cert=str(pki.server_cert),
        tls_key=str(pki.server_key),
        auth_file=str(pki.auth_file),
        open_metrics=open_metrics,
    )
    server = WiggleServer(config)
    await server.start()
    base = f"https://127.0.0.1:{port}"
    try:
        status, body = await asyncio.to_thread(_get, f"{base}/metrics", pki, "tok-watcher")
        assert status == 200 and "wiggle_rpc_calls" in body
        assert (await asyncio.to_thread(_get, f"{base}/healthz", pki, "tok-pay-worker"))[0] == 200
        anonymous = await asyncio.to_thread(_get, f"{base}/metrics", pki)
        if open_metrics:
            assert anonymous[0] == 200
            assert (await asyncio.to_thread(_get, f"{base}/dashboard", pki))[
                0
            ] == 401  # only /metrics and /healthz are opened
        else:
            assert anonymous[0] == 401 and "no credential" in anonymous[1]
        if not open_metrics:
            refused = await asyncio.to_thread(
                _get, f"{base}/metrics", pki, "tok-app"
            )  # a client may not read metrics
            assert refused[0] == 403 and "may not call /metrics" in refused[1]
            assert (await asyncio.to_thread(_get, f"{base}/metrics", pki, "tok-forged"))[0] == 401
        with pytest.raises(OSError):  # plaintext HTTP is not served (reset or refused)
            await asyncio.to_thread(urllib.request.urlopen, f"http://127.0.0.1:{port}/metrics", timeout=5)
    finally:
        await server.stop(grace=0.5)


async def test_metrics_with_client_certificates_and_reload(pki: Pki, tmp_path: Path) -> None:
    clients = Authority(tmp_path, "client-ca")
    dash_cert, dash_key = clients.issue("dash.internal", server=False)
    auth = tmp_path / "certs.json"
    auth.write_text(
        json.dumps({"identities": [{"name": "dash", "roles": ["viewer"], "cert_cn": "dash.internal"}]})
    )
    live_cert, live_key = tmp_path / "live.crt", tmp_path / "live.key"
    shutil.copy(pki.server_cert, live_cert)
    shutil.copy(pki.server_key, live_key)
    port = free_port()
    config = ServerConfig(
        port=0,
        http_port=port,
        tls_cert=str(live_cert),
        tls_key=str(live_key),
        tls_client_ca=str(clients.ca_file),
        auth_file=str(auth),
        reload_seconds=0.05,
    )
    server = WiggleServer(config)
    await server.start()
    url = f"https://127.0.0.1:{port}/metrics"

    def get(ca_file: str, with_cert: bool) -> int:
        context = ssl.create_default_context(cafile=ca_file)
        if with_cert:
            context.load_cert_chain(str(dash_cert), str(dash_key))
        try:
            with urllib.request.urlopen(url, timeout=10, context=context) as reply:
                return int(reply.status)
        except urllib.error.HTTPError as exc:
            return exc.code

    try:
        # the server answers on this test's own loop: the blocking client runs in a thread
        assert await asyncio.to_thread(get, str(pki.ca.ca_file), True) == 200  # the name is a viewer
        with pytest.raises(OSError):  # no client certificate: the handshake fails
            await asyncio.to_thread(get, str(pki.ca.ca_file), False)
        renewed = Authority(tmp_path, "renewed-ca")
        new_cert, new_key = renewed.issue("localhost", server=True)
        shutil.copy(new_key, live_key)
        shutil.copy(new_cert, live_cert)
        for _ in range(400):  # the reload timer picks the files up; wait for it, not for a duration
            try:
                if await asyncio.to_thread(get, str(renewed.ca_file), True) == 200:
                    break
            except OSError:
                pass
            await asyncio.sleep(0.05)
        else:
            raise AssertionError("the HTTP port never served the renewed certificate")
    finally:
        await server.stop(grace=0.5)


def _post(url: str, pki: Pki, token: str, body: dict[str, object]) -> tuple[int, str]:
    context = ssl.create_default_context(cafile=str(pki.ca.ca_file))
    request = urllib.request.Request(
        url,
        data=json.dumps(body).encode(),
        method="POST",
        headers={"Authorization": f"Bearer {token}", "Content-Type": "application/json"},
    )
    try:
        with urllib.request.urlopen(request, timeout=10, context=context) as reply:
            return reply.status, reply.read().decode()
    except urllib.error.HTTPError as exc:
        return exc.code, exc.read().decode()


async def test_dashboard_reads_need_a_role_and_actions_the_admin_role(pki: Pki) -> None:
    from wiggle import Workflow

    def step(ctx: dict[str, object]) -> dict[str, object]:
        return ctx

    flow = Workflow.define("guarded-dash").step(step).build()
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
            started = await admin.start(flow, {})  # no worker: it stays RUNNING
        iid = started.instance_id
        # reading: a viewer may, an anonymous caller may not
        assert (await asyncio.to_thread(_get, f"{base}/api/instances/{iid}", pki, "tok-watcher"))[0] == 200
        assert (await asyncio.to_thread(_get, f"{base}/api/instances/{iid}", pki))[0] == 401
        # acting: a viewer is refused and nothing changes; the admin's cancel is recorded as the admin
        body = {"actor": "eve", "reason": "test"}
        refused = await asyncio.to_thread(
            _post, f"{base}/api/instances/{iid}/cancel", pki, "tok-watcher", body
        )
        assert refused[0] == 403 and "admin" in refused[1]
        assert (await server.instances.get_instance(iid)).instance.status == "RUNNING"
        done = await asyncio.to_thread(_post, f"{base}/api/instances/{iid}/cancel", pki, "tok-ops", body)
        assert done[0] == 200, done
        assert (await server.instances.get_instance(iid)).instance.status == "CANCELLED"
        history = await server.instances.history(iid)
        assert any("eve as ops" in entry.worker_id for entry in history), history
    finally:
        await server.stop(grace=0.5)
