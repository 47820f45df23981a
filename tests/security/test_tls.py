"""TLS and mTLS on the gRPC port, and certificates reloaded without a restart."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

from wiggle._client import core
from wiggle._rpc import wiggle_pb2 as pb
from wiggle._security.credentials import Credentials
from wiggle._security.tokens import hash_token
from wiggle._server.app import WiggleServer
from wiggle._server.config import ServerConfig
from wiggle.client import AsyncClient
from wiggle.errors import PermissionDenied, Unauthenticated, Unavailable, WiggleError

from .certs import Authority
from .conftest import Pki


async def _reachable(target: str, credentials: Credentials) -> WiggleError | None:
    async with AsyncClient(target, credentials=credentials) as client:
        try:
            await client._call(client.stub.ListWorkflows, pb.ListWorkflowsRequest(), timeout=5)
        except WiggleError as exc:
            return exc
    return None


async def test_tls_server_refuses_plaintext_and_an_untrusted_ca(tmp_path: Path, pki: Pki) -> None:
    server = WiggleServer(ServerConfig(port=0, tls_cert=str(pki.server_cert), tls_key=str(pki.server_key)))
    await server.start()
    try:
        assert await _reachable(server.target, Credentials(ca_file=str(pki.ca.ca_file))) is None
        assert isinstance(await _reachable(server.target, Credentials()), Unavailable)
        stranger = Authority(tmp_path, "stranger-ca")
        assert isinstance(
            await _reachable(server.target, Credentials(ca_file=str(stranger.ca_file))), Unavailable
        )
    finally:
        await server.stop(grace=0.5)


async def test_mtls_requires_a_client_certificate_of_the_client_ca(tmp_path: Path, pki: Pki) -> None:
    clients = Authority(tmp_path, "client-ca")
    cert, key = clients.issue("billing.internal", server=False)
    config = ServerConfig(
        port=0, tls_cert=str(pki.server_cert), tls_key=str(pki.server_key), tls_client_ca=str(clients.ca_file)
    )
    server = WiggleServer(config)
    await server.start()
    try:
        ca = str(pki.ca.ca_file)
        assert isinstance(await _reachable(server.target, Credentials(ca_file=ca)), Unavailable)
        # a certificate from another CA is refused at the handshake too
        rogue_cert, rogue_key = pki.ca.issue("rogue", server=False)
        rogue = Credentials(ca_file=ca, cert_file=str(rogue_cert), key_file=str(rogue_key))
        assert isinstance(await _reachable(server.target, rogue), Unavailable)
        # no identity file: a verified client certificate is trusted with every role
        good = Credentials(ca_file=ca, cert_file=str(cert), key_file=str(key))
        assert await _reachable(server.target, good) is None
    finally:
        await server.stop(grace=0.5)


async def test_client_certificate_names_map_to_roles(tmp_path: Path, pki: Pki) -> None:
    clients = Authority(tmp_path, "client-ca")
    viewer_cert, viewer_key = clients.issue("dash.internal", server=False)
    unknown_cert, unknown_key = clients.issue("unlisted.internal", server=False)
    auth = tmp_path / "certs.json"
    auth.write_text(
        json.dumps({"identities": [{"name": "dash", "roles": ["viewer"], "cert_cn": "dash.internal"}]})
    )
    config = ServerConfig(
        port=0,
        tls_cert=str(pki.server_cert),
        tls_key=str(pki.server_key),
        tls_client_ca=str(clients.ca_file),
        auth_file=str(auth),
    )
    server = WiggleServer(config)
    await server.start()
    try:
        ca = str(pki.ca.ca_file)
        viewer = Credentials(ca_file=ca, cert_file=str(viewer_cert), key_file=str(viewer_key))
        async with AsyncClient(server.target, credentials=viewer) as client:
            assert await client.list_workflows() == []
            with pytest.raises(
                PermissionDenied, match="'dash' \\(roles: viewer\\) may not call StartInstance"
            ):
                await client.start("anything")
        unknown = Credentials(ca_file=ca, cert_file=str(unknown_cert), key_file=str(unknown_key))
        assert isinstance(await _reachable(server.target, unknown), Unauthenticated)
    finally:
        await server.stop(grace=0.5)


async def test_certificate_reloaded_when_the_files_change(tmp_path: Path, pki: Pki) -> None:
    live_cert, live_key = tmp_path / "live.crt", tmp_path / "live.key"
    shutil.copy(pki.server_cert, live_cert)
    shutil.copy(pki.server_key, live_key)
    server = WiggleServer(ServerConfig(port=0, tls_cert=str(live_cert), tls_key=str(live_key)))
    await server.start()
    try:
        old_ca = Credentials(ca_file=str(pki.ca.ca_file))
        assert await _reachable(server.target, old_ca) is None
        renewed = Authority(tmp_path, "renewed-ca")
        new_cert, new_key = renewed.issue("localhost", server=True)
        # replace both files the way a renewal job does (write aside, rename over)
        shutil.copy(new_cert, tmp_path / "next.crt")
        shutil.copy(new_key, tmp_path / "next.key")
        (tmp_path / "next.key").replace(live_key)
        (tmp_path / "next.crt").replace(live_cert)
        # the next handshake uses the new certificate: a client of the new CA gets in, the old CA's
        # clients no longer trust the server; no restart
        assert await _reachable(server.target, Credentials(ca_file=str(renewed.ca_file))) is None
        assert isinstance(await _reachable(server.target, old_ca), Unavailable)
        assert server.security is not None and server.security.tls is not None
        assert server.security.tls.reloads >= 1
    finally:
        await server.stop(grace=0.5)


async def test_identity_file_reloaded_on_sighup_path(secured: WiggleServer, pki: Pki) -> None:
    from .conftest import write_identities

    async with pki.client(secured.target, "late") as late:
        with pytest.raises(Unauthenticated):
            await late.list_workflows()
        write_identities(
            pki.auth_file,
            [
                {
                    "name": "late",
                    "roles": ["viewer"],
                    "token_sha256": hash_token("tok-late"),
                }
            ],
        )
        secured.reload()  # what SIGHUP calls
        assert await late.list_workflows() == []


def test_a_broken_certificate_stops_the_start_naming_the_file(tmp_path: Path, pki: Pki) -> None:
    from wiggle._server.exposure import build_security
    from wiggle.errors import FailedPrecondition

    bad = tmp_path / "bad.crt"
    bad.write_text("not a certificate")
    with pytest.raises(FailedPrecondition, match="bad.crt"):
        build_security(ServerConfig(tls_cert=str(bad), tls_key=str(pki.server_key)))


def test_a_bad_pair_names_no_ca_bundle_unless_one_was_given(tmp_path: Path, pki: Pki) -> None:
    """A certificate and key that are not PEM said "(or '' not a CA bundle)" with no CA given;
    a CA bundle that is not one is named alone, by its flag."""
    from wiggle._server.exposure import build_security
    from wiggle.errors import FailedPrecondition

    bad = tmp_path / "bad.pem"
    bad.write_text("not a certificate")
    with pytest.raises(FailedPrecondition) as caught:
        build_security(ServerConfig(tls_cert=str(bad), tls_key=str(bad)))
    text = str(caught.value)
    assert "--tls-cert" in text and "--tls-key" in text and "not a PEM certificate" in text, text
    assert "CA" not in text and "''" not in text, text
    with pytest.raises(FailedPrecondition) as caught:
        build_security(
            ServerConfig(tls_cert=str(pki.server_cert), tls_key=str(pki.server_key), tls_client_ca=str(bad))
        )
    text = str(caught.value)
    assert f"--tls-client-ca {str(bad)!r} is not a PEM bundle of CA certificates" in text, text
    assert "--tls-cert" not in text, text


async def test_grpc_takes_a_certificate_another_reload_loaded_first(tmp_path: Path, pki: Pki) -> None:
    live_cert, live_key = tmp_path / "live.crt", tmp_path / "live.key"
    shutil.copy(pki.server_cert, live_cert)
    shutil.copy(pki.server_key, live_key)
    server = WiggleServer(ServerConfig(port=0, tls_cert=str(live_cert), tls_key=str(live_key)))
    await server.start()
    try:
        renewed = Authority(tmp_path, "renewed-ca")
        new_cert, new_key = renewed.issue("localhost", server=True)
        shutil.copy(new_key, live_key)
        shutil.copy(new_cert, live_cert)
        server.reload()  # SIGHUP (or the HTTP port's timer) loads the files before any handshake
        assert await _reachable(server.target, Credentials(ca_file=str(renewed.ca_file))) is None
    finally:
        await server.stop(grace=0.5)


async def _refused(target: str, credentials: Credentials) -> str:
    """What a client that never reached ``target`` says (after its first contact's tries)."""
    async with AsyncClient(target, credentials=credentials) as client:
        with pytest.raises(Unavailable) as refused:
            await client.list_workflows()
    return str(refused.value)


async def test_a_connection_closed_unanswered_is_said_to_be_a_likely_tls_mismatch(
    tmp_path: Path, pki: Pki
) -> None:
    # a TLS server closes a plaintext client's connection, an mTLS server a client's without a
    # certificate it takes: gRPC says only "Socket closed", which read as "is a server running?"
    clients = Authority(tmp_path, "client-ca")
    plain = WiggleServer(ServerConfig(port=0, tls_cert=str(pki.server_cert), tls_key=str(pki.server_key)))
    mutual = WiggleServer(
        ServerConfig(
            port=0,
            tls_cert=str(pki.server_cert),
            tls_key=str(pki.server_key),
            tls_client_ca=str(clients.ca_file),
        )
    )
    await plain.start()
    await mutual.start()
    try:
        ca = str(pki.ca.ca_file)
        rogue_cert, rogue_key = pki.ca.issue("rogue", server=False)
        for target, credentials, advice in (
            (plain.target, Credentials(), "may speak TLS: set WIGGLE_TLS_CA (--tls-ca)"),
            (mutual.target, Credentials(ca_file=ca), "may require a client certificate (mTLS)"),
            (
                mutual.target,
                Credentials(ca_file=ca, cert_file=str(rogue_cert), key_file=str(rogue_key)),
                "may refuse this client certificate (WIGGLE_TLS_CLIENT_CERT, --client-cert)",
            ),
        ):
            said = await _refused(target, credentials)
            assert "a TLS problem, likely, not a missing server" in said and advice in said, said
            assert "is a `wiggle server` running" not in said, said
    finally:
        await plain.stop(grace=0.5)
        await mutual.stop(grace=0.5)


def test_a_client_certificate_and_a_key_that_are_no_pair_are_refused_when_the_client_is_made(
    tmp_path: Path, pki: Pki
) -> None:
    cert, _ = pki.ca.issue("billing.internal", server=False)
    _, other_key = pki.ca.issue("another", server=False)
    credentials = Credentials(ca_file=str(pki.ca.ca_file), cert_file=str(cert), key_file=str(other_key))
    with pytest.raises(ValueError) as refused:
        AsyncClient("127.0.0.1:1", credentials=credentials)
    assert str(refused.value) == (
        f"the client certificate {str(cert)!r} and key {str(other_key)!r} (cert_file and key_file, "
        "WIGGLE_TLS_CLIENT_CERT and WIGGLE_TLS_CLIENT_KEY, --client-cert and --client-key) are not a PEM "
        "certificate and its unencrypted private key (KEY_VALUES_MISMATCH): give the key made with that "
        "certificate"
    )


CLOSED = "failed to connect to all addresses; last error: UNAVAILABLE: ipv4:127.0.0.1:46501: Socket closed"
REFUSED = (
    "failed to connect to all addresses; last error: UNKNOWN: ipv6:%5B::1%5D:46501: "
    "Failed to connect to remote host: Connection refused"
)


async def test_a_tls_failure_on_one_address_wins_over_a_refusal_on_another(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # localhost is ::1 and 127.0.0.1; a server on 127.0.0.1 only: gRPC's details name the last
    # address tried, at random. The client says the most telling of its tries (core.more_telling)
    monkeypatch.setattr(core, "FIRST_CONTACT", 0.5)
    tries = iter([CLOSED, REFUSED, CLOSED])

    async def send() -> None:
        raise Unavailable(next(tries, REFUSED))

    async with AsyncClient("localhost:46501", credentials=Credentials()) as client:
        with pytest.raises(Unavailable) as refused:
            await client._again_while_away(send, core.WaitClock(client.patience, from_first_failure=True))
    said = str(refused.value)
    assert said.startswith(CLOSED) and "may speak TLS" in said and "at localhost:46501" in said, said


async def test_a_tls_server_named_localhost_is_said_to_be_one(pki: Pki) -> None:
    server = WiggleServer(ServerConfig(port=0, tls_cert=str(pki.server_cert), tls_key=str(pki.server_key)))
    await server.start()  # on 127.0.0.1 only: localhost's ::1 refuses the connection
    try:
        said = await _refused(server.target.replace("127.0.0.1", "localhost"), Credentials())
        assert "may speak TLS: set WIGGLE_TLS_CA" in said, said
    finally:
        await server.stop(grace=0.5)
