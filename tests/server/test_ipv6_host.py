"""A server on the IPv6 loopback, named ``::1`` or ``[::1]`` (--host): gRPC was "address lookup
failed for ::1:P: Misformatted domain name" (the address was built without brackets), the HTTP
port "cannot listen on [::1]:Q: Unknown error -2" (aiohttp was given the brackets). The server
prints its target as a client takes it, ``[::1]:P``, and a client and an HTTP probe reach it."""

from __future__ import annotations

import subprocess
import sys

import aiohttp
import pytest
from ports import free_port

from wiggle import AsyncClient
from wiggle._server.app import WiggleServer
from wiggle._server.config import ServerConfig
from wiggle._server.exposure import is_loopback


@pytest.mark.parametrize("host", ["::1", "[::1]"])
async def test_a_server_listens_on_the_ipv6_loopback(host: str) -> None:
    http_port = free_port()
    server = WiggleServer(ServerConfig(host=host, port=0, http_port=http_port))
    await server.start()
    try:
        assert server.target == f"[::1]:{server.port}"
        async with AsyncClient(server.target) as client:
            assert await client.list_workflows() == []
        async with aiohttp.ClientSession() as http:
            async with http.get(f"http://[::1]:{http_port}/healthz") as answer:
                assert answer.status == 200
    finally:
        await server.stop()


@pytest.mark.parametrize("host", ["::1", "[::1]"])
def test_wiggle_server_prints_the_target_a_client_takes(host: str) -> None:
    proc = subprocess.Popen(
        [sys.executable, "-m", "wiggle.cli", "server", "--host", host, "--port", "0"],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        assert proc.stdout is not None
        line = proc.stdout.readline()
        assert line.startswith("wiggle server listening on [::1]:"), (line, proc.stderr)
    finally:
        proc.terminate()
        proc.wait(30)


@pytest.mark.parametrize("host", ["::1", "[::1]", "localhost", "127.0.0.1"])
def test_the_ipv6_loopback_needs_no_tls(host: str) -> None:
    assert is_loopback(host)
