"""The outside security review's findings (its scripts ran a TLS server with an identity file of
one token per role): each is a test here that failed before its fix.

1. a gRPC caller's own name (a signal's sender, a retry's requested_by) was recorded alone: the
   identity its credential proved appeared nowhere;
2. those names, and free text such as a cancel's reason, reached the server's log raw: a newline
   in them forged whole log lines;
3. unknown bearer tokens on the HTTP JSON API and on gRPC were neither throttled nor logged;
5. a TLS failure read "is a `wiggle server` running at ...?", a token file with a byte order
   mark or an inner newline "Illegal metadata";
6. the server started silently with an identity file others could write, a TLS key others could
   read, or an expired certificate;
7. `wiggle token --json` printed text.

Finding 4 (the dashboard's sessions) is tests/dashboard/test_review_sessions.py.
"""

from __future__ import annotations

import asyncio
import datetime
import json
import logging
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import aiohttp
import grpc
import pytest
from clocks import ManualClock
from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import NameOID
from dashboard.helpers import call, secured_server, tls_client

from wiggle import Workflow
from wiggle._rpc import wiggle_pb2 as pb
from wiggle._rpc import wiggle_pb2_grpc as pb_grpc
from wiggle._security.credentials import Credentials
from wiggle._security.file_checks import certificate_validity
from wiggle._server import auth_failures
from wiggle._server.app import WiggleServer
from wiggle._server.auth_failures import MAX_FAILURES, AuthFailures, peer_address
from wiggle._server.caller_text import loggable
from wiggle._server.config import ServerConfig
from wiggle.client import AsyncClient
from wiggle.errors import InvalidArgument, Unauthenticated, Unavailable
from wiggle.testing import EmbeddedServer

from .certs import Authority
from .conftest import Pki

#: waits for a signal, then a person, then fails: a signal, a user task and a retry to record
AUDITED = (
    Workflow.define("audited").wait_signal("go").user_task("approve").end("declined", success=False).build()
)


def _operator_lines(caplog: pytest.LogCaptureFixture) -> list[str]:
    return [r.getMessage() for r in caplog.records if r.getMessage().startswith("operator ")]


# ---------------------------------------------------------------------- 1. who did it


async def test_grpc_actions_record_the_authenticated_identity_with_the_name_given(
    secured: WiggleServer, pki: Pki, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.INFO, logger="wiggle.server")
    async with pki.client(secured.target, "ops") as ops, pki.client(secured.target, "app") as app:
        await ops.register(AUDITED)
        started = await app.start(AUDITED, {})
        # the review's script: a client-role caller signs as the admin
        await app.signal(started, "go", {}, sender="ops (admin, approved by CFO)")
        await app.complete_user_task(started, "approve", {})  # no name field: the identity alone
        assert (await app.get(started)).status == "FAILED"
        await ops.retry(started, from_node="approve", requested_by="alice")
        history = await ops.history(started)
    actors = [(e.outcome, e.worker_id) for e in history if e.outcome in ("SIGNALLED", "COMPLETED", "RESUMED")]
    assert ("SIGNALLED", "(signal go from ops (admin, approved by CFO) as app)") in actors, actors
    assert ("COMPLETED", "app") in actors, actors  # an OPERATOR entry, as the dashboard's is
    assert ("RESUMED", "alice as ops") in actors, actors
    logged = "\n".join(_operator_lines(caplog))
    assert "operator ops (admin, approved by CFO) as app: signal go delivered" in logged, logged
    assert "operator alice as ops: retried" in logged, logged


async def test_a_name_that_is_the_identity_is_not_repeated_and_a_long_one_keeps_the_identity(
    secured: WiggleServer, pki: Pki
) -> None:
    async with pki.client(secured.target, "ops") as ops, pki.client(secured.target, "app") as app:
        await ops.register(AUDITED)
        first = await app.start(AUDITED, {})
        await app.signal(first, "go", {}, sender="app")
        second = await app.start(AUDITED, {})
        await app.signal(second, "go", {}, sender="x" * 200)  # the longest a name may be
        histories = [await ops.history(first), await ops.history(second)]
    [same] = [e.worker_id for e in histories[0] if e.outcome == "SIGNALLED"]
    assert same == "(signal go from app)"
    [long] = [e.worker_id for e in histories[1] if e.outcome == "SIGNALLED"]
    assert long.endswith("x as app)"), long  # never cut before the identity


async def test_without_authentication_the_name_is_recorded_as_given() -> None:
    async with EmbeddedServer() as server:
        client = server.client
        await client.register(AUDITED)
        started = await client.start(AUDITED, {})
        await client.signal(started, "go", {}, sender="billing")
        await client.complete_user_task(started, "approve", {})
        await client.retry(started, from_node="approve", requested_by="alice")
        history = await client.history(started)
    worker_ids = [e.worker_id for e in history]
    assert "(signal go from billing)" in worker_ids and "alice" in worker_ids, worker_ids
    # no credential, no identity to record: the completion stays unrecorded, as before
    assert not [e for e in history if e.kind == "OPERATOR"], history


# ---------------------------------------------------------------------- 2. log lines of one's own


async def test_names_with_control_characters_are_refused_naming_the_field(
    secured: WiggleServer, pki: Pki
) -> None:
    forged = "x\n2026-12-07 06:00:00,000 INFO wiggle.server: operator ops: FORGED LINE"
    async with pki.client(secured.target, "ops") as ops:
        await ops.register(AUDITED)
        started = await ops.start(AUDITED, {})
        with pytest.raises(InvalidArgument, match="sender .*U\\+000A.*one line of printable text"):
            await ops.signal(started, "go", {}, sender=forged)
        for bad in ("\x1b[2J", "a\u202eb", "a\u2028b"):  # an escape sequence, a bidi override, LS
            with pytest.raises(InvalidArgument, match="requested_by"):
                await ops.retry(started, from_node="approve", requested_by=bad)
        assert (await ops.get(started)).status == "RUNNING"  # nothing was done


async def test_free_text_reaches_the_log_escaped(
    secured: WiggleServer, pki: Pki, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.INFO, logger="wiggle.server")
    async with pki.client(secured.target, "ops") as ops:
        await ops.register(AUDITED)
        started = await ops.start(AUDITED, {})
        await ops.cancel(started, "dup\n2026-12-07 06:00:00,000 INFO wiggle.server: FORGED")
        history = await ops.history(started)
    assert any(e.error.startswith("dup\n2026") for e in history), history  # kept as given
    [line] = [m for m in _operator_lines(caplog) if "cancelled" in m]
    assert "\n" not in line and "dup\\n2026-12-07" in line, line


async def test_the_dashboard_refuses_such_an_actor_and_escapes_a_path(
    pki: Pki, caplog: pytest.LogCaptureFixture
) -> None:
    async with secured_server("memory", "", "", pki) as (server, base):
        async with pki.client(server.target, "ops") as ops:
            await ops.register(AUDITED)
            started = await ops.start(AUDITED, {})
        tls, auth = tls_client(pki), {"Authorization": "Bearer tok-ops"}
        body = {"actor": "eve\nINFO forged", "reason": "r"}
        url = f"{base}/api/instances/{started.instance_id}/cancel"
        status, _, answer = await call("POST", url, tls, body, auth)
        assert status == 400 and '"actor"' in answer["error"] and "U+000A" in answer["error"], answer
        # a refused request's path is decoded (%0A is a newline) and logged: escaped
        status, _, _ = await call(
            "POST", f"{base}/api/x%0Aforged", tls, None, {**auth, "Content-Type": "text/plain"}
        )
        assert status == 415
    refused = [r.getMessage() for r in caplog.records if r.getMessage().startswith("refused POST")]
    assert refused and all("\n" not in m for m in refused) and "/api/x\\nforged" in refused[-1], refused


def test_loggable_escapes_what_would_break_a_line_and_keeps_the_rest() -> None:
    assert loggable("ada 😀 é") == "ada 😀 é"
    assert loggable("a\nb\r\tc\x1b\x00") == "a\\nb\\r\\tc\\x1b\\x00"
    assert loggable("a\u2028b\u202ec") == "a\\u2028b\\u202ec"
    assert loggable("x" * 10, 4) == "xxxx..."


# ---------------------------------------------------------------------- 3. guessing tokens


async def _get_from(url: str, context: Any, token: str, source: str) -> int:
    """GET ``url`` with a bearer ``token`` from the loopback address ``source``."""
    connector = aiohttp.TCPConnector(ssl=context, local_addr=(source, 0))
    async with aiohttp.ClientSession(connector=connector) as http:
        async with http.get(url, headers={"Authorization": f"Bearer {token}"}) as answer:
            await answer.read()
            return answer.status


async def test_wrong_bearer_tokens_on_the_http_api_are_throttled_per_address_and_logged(
    pki: Pki, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.WARNING, logger="wiggle.server")
    async with secured_server("memory", "", "", pki) as (server, base):
        tls, url = tls_client(pki), f"{base}/api/queues"
        statuses = [await _get_from(url, tls, f"guess-{i}", "127.0.0.1") for i in range(MAX_FAILURES)]
        assert statuses == [401] * MAX_FAILURES
        # past the limit: 429 for a guess and for the right token alike, from that address only
        assert await _get_from(url, tls, "guess-x", "127.0.0.1") == 429
        status, _, answer = await call("GET", url, tls, None, {"Authorization": "Bearer tok-watcher"})
        assert status == 429 and answer["code"] == "RESOURCE_EXHAUSTED", answer
        assert "unknown credentials from this address (127.0.0.1)" in answer["error"], answer
        assert await _get_from(url, tls, "tok-watcher", "127.0.0.2") == 200
        # the same address is refused on the gRPC port too, with a message saying why
        async with pki.client(server.target, "ops") as ops:
            with pytest.raises(Unauthenticated, match="unknown credentials from this address"):
                await ops.list_workflows()
        for i in range(50):  # a flood: counted, not logged line by line
            await _get_from(url, tls, f"more-{i}", "127.0.0.1")
    lines = [
        r.getMessage() for r in caplog.records if "authentication failed from 127.0.0.1" in r.getMessage()
    ]
    assert len(lines) == 2, lines  # the first failure, and the start of the wait
    assert "the token is not known" in lines[0] and f"{MAX_FAILURES} unknown credentials" in lines[1]


async def test_unknown_tokens_on_grpc_are_throttled_and_a_repeated_one_is_not_a_guess(
    secured: WiggleServer, pki: Pki, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.WARNING, logger="wiggle.server")
    # a worker whose token was revoked sends it again and again: that guesses nothing, and must
    # not lock out the other callers of its host
    async with pki.client(secured.target, "revoked") as stale:
        for _ in range(3 * MAX_FAILURES):
            with pytest.raises(Unauthenticated, match="not known"):
                await stale.list_workflows()
    async with pki.client(secured.target, "app") as app:
        await app.list_workflows()
    for i in range(MAX_FAILURES - 1):  # different tokens: guesses (the stale one was the first)
        async with pki.client(secured.target, f"guess-{i}") as guess:
            with pytest.raises(Unauthenticated, match="not known"):
                await guess.list_workflows()
    async with pki.client(secured.target, "app") as app:
        with pytest.raises(Unauthenticated, match=f"{MAX_FAILURES} unknown credentials from this address"):
            await app.list_workflows()
    lines = [r.getMessage() for r in caplog.records if r.getMessage().startswith("authentication failed")]
    assert len(lines) == 2 and "(gRPC)" in lines[0], lines


def test_the_log_says_how_many_it_left_out_and_caps_its_lines_across_addresses(
    caplog: pytest.LogCaptureFixture, monkeypatch: pytest.MonkeyPatch
) -> None:
    caplog.set_level(logging.WARNING, logger="wiggle.server")
    monkeypatch.setattr(auth_failures, "MAX_LINES_PER_INTERVAL", 3)
    clock = ManualClock(1000.0)
    failures = AuthFailures(clock)
    for _ in range(5):
        failures.failed("10.0.0.1", "same", "the token is not known", "HTTP")
    clock.at += auth_failures.LOG_INTERVAL_SECONDS
    failures.failed("10.0.0.1", "same", "the token is not known", "HTTP")
    for i in range(10):  # many addresses at once: three lines, then counted
        failures.failed(f"10.0.1.{i}", "x", "the token is not known", "HTTP")
    clock.at += auth_failures.LOG_INTERVAL_SECONDS
    failures.failed("10.0.2.1", "x", "the token is not known", "HTTP")
    lines = [r.getMessage() for r in caplog.records]
    assert len(lines) == 5, lines
    assert lines[1].endswith("; 4 more from it since its last line"), lines
    assert "(8 lines of other addresses were left out: too many)" in lines[-1], lines
    assert peer_address("ipv4:10.0.0.5:41234") == "10.0.0.5"
    assert peer_address("ipv6:[::1]:41234") == "::1"
    assert peer_address("ipv6:[::ffff:10.0.0.5]:41234") == "10.0.0.5"  # as the HTTP port sees it


# ---------------------------------------------------------------------- 5. what the client says


def _expired_certificate(ca: Authority, directory: Path) -> tuple[Path, Path]:
    """A server certificate for localhost / 127.0.0.1 signed by ``ca`` that expired yesterday."""
    import ipaddress

    key = ec.generate_private_key(ec.SECP256R1())
    now = datetime.datetime.now(datetime.timezone.utc)
    cert = (
        x509.CertificateBuilder()
        .subject_name(x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "localhost")]))
        .issuer_name(ca.cert.subject)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - datetime.timedelta(days=3))
        .not_valid_after(now - datetime.timedelta(days=1))
        .add_extension(
            x509.SubjectAlternativeName(
                [x509.DNSName("localhost"), x509.IPAddress(ipaddress.ip_address("127.0.0.1"))]
            ),
            critical=False,
        )
        .sign(ca.key, hashes.SHA256())
    )
    cert_file, key_file = directory / "expired.crt", directory / "expired.key"
    cert_file.write_bytes(cert.public_bytes(serialization.Encoding.PEM))
    key_file.write_bytes(
        key.private_bytes(
            serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption()
        )
    )
    key_file.chmod(0o600)
    return cert_file, key_file


async def test_a_tls_failure_is_said_to_be_one_with_what_to_check(
    pki: Pki, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.WARNING, logger="wiggle.server")
    other = Authority(tmp_path, "other-ca")
    expired_cert, expired_key = _expired_certificate(pki.ca, tmp_path)
    async with secured_server("memory", "", "", pki) as (server, _):
        async with AsyncClient(server.target, credentials=Credentials(ca_file=str(other.ca_file))) as client:
            with pytest.raises(Unavailable) as wrong_ca:
                await client.list_workflows()
        said = str(wrong_ca.value)
        assert "a TLS problem, not a missing server" in said and "WIGGLE_TLS_CA" in said, said
        assert "is a `wiggle server` running" not in said, said
        # the CLI says the same (its own hint after it is src/wiggle/cli.py's: see the report)
        env = {**os.environ, "WIGGLE_TLS_CA": str(other.ca_file)}
        cli = await asyncio.to_thread(
            subprocess.run,
            [sys.executable, "-m", "wiggle.cli", "--target", server.target, "workflows"],
            capture_output=True,
            text=True,
            env=env,
            timeout=60,
        )
        assert cli.returncode == 5 and "a TLS problem" in cli.stderr and "WIGGLE_TLS_CA" in cli.stderr, (
            cli.stderr
        )
    config = ServerConfig(
        port=0, tls_cert=str(expired_cert), tls_key=str(expired_key), auth_file=str(pki.auth_file)
    )
    server = WiggleServer(config)
    await server.start()  # starts all the same, with a warning (finding 6)
    try:
        async with pki.client(server.target, "ops") as client:
            with pytest.raises(Unavailable, match="TLS problem.*certificate has expired.*renew it"):
                await client.list_workflows()
    finally:
        await server.stop(grace=0.5)
    warned = [r.getMessage() for r in caplog.records if "expired at" in r.getMessage()]
    assert warned and str(expired_cert) in warned[0] and "renew it" in warned[0], warned


async def test_a_token_file_with_a_byte_order_mark_works_and_one_with_a_line_break_is_named(
    secured: WiggleServer, pki: Pki, tmp_path: Path
) -> None:
    bom = tmp_path / "bom-token"
    bom.write_bytes("\ufefftok-ops\r\n".encode())  # as Notepad writes it
    credentials = Credentials(ca_file=str(pki.ca.ca_file), token_file=str(bom))
    assert credentials.bearer() == "tok-ops"
    async with AsyncClient(secured.target, credentials=credentials) as client:
        await client.list_workflows()
    broken = tmp_path / "broken-token"
    broken.write_text("tok-ops\ntok-app\n")
    with pytest.raises(InvalidArgument) as named:
        AsyncClient(
            secured.target, credentials=Credentials(ca_file=str(pki.ca.ca_file), token_file=str(broken))
        )
    said = str(named.value)
    assert str(broken) in said and "a line break at position 7" in said and "tok-ops" not in said, said
    env = {**os.environ, "WIGGLE_TLS_CA": str(pki.ca.ca_file), "WIGGLE_TOKEN_FILE": str(broken)}
    cli = await asyncio.to_thread(
        subprocess.run,
        [sys.executable, "-m", "wiggle.cli", "--target", secured.target, "workflows"],
        capture_output=True,
        text=True,
        env=env,
        timeout=60,
    )
    assert cli.returncode != 0 and str(broken) in cli.stderr and "Illegal metadata" not in cli.stderr, (
        cli.stderr
    )


# ---------------------------------------------------------------------- 6. files others may change


async def test_the_server_warns_of_files_others_may_write_and_starts(
    pki: Pki, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.WARNING, logger="wiggle.server")
    pki.auth_file.chmod(0o666)
    pki.server_key.chmod(0o644)
    config = ServerConfig(
        port=0, tls_cert=str(pki.server_cert), tls_key=str(pki.server_key), auth_file=str(pki.auth_file)
    )
    server = WiggleServer(config)
    await server.start()
    try:
        warnings = [r.getMessage() for r in caplog.records if r.levelno == logging.WARNING]
        [identity] = [w for w in warnings if str(pki.auth_file) in w]
        assert "writable by its group and others (mode 0666)" in identity and "chmod 600" in identity
        [key] = [w for w in warnings if str(pki.server_key) in w]
        assert "readable by others" in key and "chmod 600" in key
        async with pki.client(server.target, "ops") as ops:
            await ops.list_workflows()  # it serves all the same
        caplog.clear()
        pki.auth_file.write_text(pki.auth_file.read_text() + " ")  # a change: reloaded, warned again
        server.reload()
        assert any(
            str(pki.auth_file) in r.getMessage() and "chmod 600" in r.getMessage() for r in caplog.records
        )
    finally:
        await server.stop(grace=0.5)


def test_certificate_dates_are_read_from_both_time_encodings(pki: Pki, tmp_path: Path) -> None:
    validity = certificate_validity(pki.server_cert.read_bytes())
    assert validity is not None
    not_before, not_after = validity
    assert not_before < datetime.datetime.now(datetime.timezone.utc) < not_after  # UTCTime
    key = ec.generate_private_key(ec.SECP256R1())
    name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "far")])
    far = datetime.datetime(2061, 5, 4, 3, 2, 1, tzinfo=datetime.timezone.utc)  # GeneralizedTime
    cert = (
        x509.CertificateBuilder()
        .subject_name(name)
        .issuer_name(name)
        .public_key(key.public_key())
        .serial_number(1)
        .not_valid_before(datetime.datetime(1999, 1, 1, tzinfo=datetime.timezone.utc))
        .not_valid_after(far)
        .sign(key, hashes.SHA256())
    )
    assert certificate_validity(cert.public_bytes(serialization.Encoding.PEM)) == (
        datetime.datetime(1999, 1, 1, tzinfo=datetime.timezone.utc),
        far,
    )
    assert certificate_validity(b"not a certificate") is None


# ---------------------------------------------------------------------- 7. wiggle token --json


def test_token_json_prints_json_and_the_help_says_what_a_client_may_not() -> None:
    result = subprocess.run(
        [sys.executable, "-m", "wiggle.cli", "token", "billing", "--role", "client", "--json"],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert result.returncode == 0, result.stderr
    printed = json.loads(result.stdout)
    from wiggle._security.tokens import hash_token

    assert printed["identity"] == {
        "name": "billing",
        "roles": ["client"],
        "token_sha256": hash_token(printed["token"]),
    }
    helped = subprocess.run(
        [sys.executable, "-m", "wiggle.cli", "token", "--help"], capture_output=True, text=True, timeout=60
    ).stdout
    assert "start and operate instances" not in helped and "not cancel, retry or schedules" in helped


async def test_a_grpc_call_without_a_wiggle_client_is_attributed_too(secured: WiggleServer, pki: Pki) -> None:
    """The review's script itself: a raw stub, a client token, a forged sender."""
    async with pki.client(secured.target, "ops") as ops:
        await ops.register(AUDITED)
        started = await ops.start(AUDITED, {})
    credentials = grpc.ssl_channel_credentials(pki.ca.ca_file.read_bytes())
    async with grpc.aio.secure_channel(secured.target, credentials) as channel:
        stub = pb_grpc.WiggleControlPlaneStub(channel)
        metadata = (("authorization", "Bearer tok-app"),)
        request = pb.SignalInstanceRequest(instance_id=started.instance_id, name="go", sender="ops")
        await stub.SignalInstance(request, metadata=metadata)
        reply = await stub.GetHistory(
            pb.GetHistoryRequest(instance_id=started.instance_id), metadata=metadata
        )
    assert "(signal go from ops as app)" in [e.worker_id for e in reply.entries]
