"""The HTTP port (/metrics, /healthz) over TLS, with tokens and roles, or left open by a flag."""

from __future__ import annotations

import socket
import ssl
import urllib.error
import urllib.request

import pytest

from wiggle._server.app import WiggleServer
from wiggle._server.config import ServerConfig

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
