"""Fixtures of the security tests: a CA, a server certificate, an identity file with one
credential per role, and a server started with them."""

from __future__ import annotations

import json
from collections.abc import AsyncIterator
from dataclasses import dataclass
from pathlib import Path

import pytest

from wiggle._security.credentials import Credentials
from wiggle._security.tokens import hash_token
from wiggle._server.app import WiggleServer
from wiggle._server.config import ServerConfig
from wiggle.client import AsyncClient

from .certs import Authority

#: name -> (roles, queues); each gets the token "tok-<name>"
IDENTITIES: dict[str, tuple[list[str], list[str]]] = {
    "ops": (["admin"], []),
    "app": (["client"], []),
    "pay-worker": (["worker"], ["payments"]),
    "any-worker": (["worker"], ["*"]),
    "watcher": (["viewer"], []),
}


@dataclass
class Pki:
    ca: Authority
    server_cert: Path
    server_key: Path
    auth_file: Path

    def credentials(self, who: str = "", **more: str) -> Credentials:
        return Credentials(ca_file=str(self.ca.ca_file), token=f"tok-{who}" if who else "", **more)

    def client(self, target: str, who: str = "", **more: str) -> AsyncClient:
        return AsyncClient(target, credentials=self.credentials(who, **more))


def write_identities(path: Path, extra: list[dict[str, object]] | None = None) -> None:
    entries: list[dict[str, object]] = []
    for name, (roles, queues) in IDENTITIES.items():
        entry: dict[str, object] = {"name": name, "roles": roles, "token_sha256": hash_token(f"tok-{name}")}
        if queues:
            entry["queues"] = queues
        entries.append(entry)
    path.write_text(json.dumps({"identities": entries + (extra or [])}))


@pytest.fixture
def pki(tmp_path: Path) -> Pki:
    ca = Authority(tmp_path)
    cert, key = ca.issue("localhost", server=True)
    auth = tmp_path / "identities.json"
    write_identities(auth)
    return Pki(ca, cert, key, auth)


@pytest.fixture
async def secured(pki: Pki) -> AsyncIterator[WiggleServer]:
    """A server with TLS and the identity file, on a loopback port."""
    config = ServerConfig(
        port=0, tls_cert=str(pki.server_cert), tls_key=str(pki.server_key), auth_file=str(pki.auth_file)
    )
    server = WiggleServer(config)
    await server.start()
    try:
        yield server
    finally:
        await server.stop(grace=0.5)
