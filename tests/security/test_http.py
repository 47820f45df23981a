"""The HTTP port (/metrics, /healthz) over TLS, with tokens and roles, or left open by a flag."""

from __future__ import annotations

import asyncio
import json
import shutil
import socket
import ssl
import urllib.error
import urllib.request
from pathlib import Path

import pytest

from wiggle._server.app import WiggleServer
from wiggle._server.config import ServerConfig

from .certs import Authority
from .conftest import Pki


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


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
    port = _free_port()
    config = ServerConfig(
        port=0,
        metrics_port=port,
        tls_cert=str(pki.server_cert),
        tls_key=str(pki.server_key),
        auth_file=str(pki.auth_file),
        open_metrics=open_metrics,
    )
    server = WiggleServer(config)
    await server.start()
    base = f"https://127.0.0.1:{port}"
    try:
        status, body = _get(f"{base}/metrics", pki, "tok-watcher")
        assert status == 200 and "wiggle_rpc_calls" in body
        assert _get(f"{base}/healthz", pki, "tok-pay-worker")[0] == 200
        anonymous = _get(f"{base}/metrics", pki)
        if open_metrics:
            assert anonymous[0] == 200
            assert _get(f"{base}/dashboard", pki)[0] == 401  # only /metrics and /healthz are opened
        else:
            assert anonymous[0] == 401 and "no credential" in anonymous[1]
        if not open_metrics:
            refused = _get(f"{base}/metrics", pki, "tok-app")  # a client may not read metrics
            assert refused[0] == 403 and "may not call /metrics" in refused[1]
            assert _get(f"{base}/metrics", pki, "tok-forged")[0] == 401
        with pytest.raises(OSError):  # plaintext HTTP is not served (reset or refused)
            urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=5)
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
    port = _free_port()
    config = ServerConfig(
        port=0,
        metrics_port=port,
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
        assert get(str(pki.ca.ca_file), with_cert=True) == 200  # the certificate's name is a viewer
        with pytest.raises(OSError):  # no client certificate: the handshake fails
            get(str(pki.ca.ca_file), with_cert=False)
        renewed = Authority(tmp_path, "renewed-ca")
        new_cert, new_key = renewed.issue("localhost", server=True)
        shutil.copy(new_key, live_key)
        shutil.copy(new_cert, live_cert)
        for _ in range(400):  # the reload timer picks the files up; wait for it, not for a duration
            try:
                if get(str(renewed.ca_file), with_cert=True) == 200:
                    break
            except OSError:
                pass
            await asyncio.sleep(0.05)
        else:
            raise AssertionError("the HTTP port never served the renewed certificate")
    finally:
        await server.stop(grace=0.5)
