"""Revocation takes effect at the identity reload: open streams and long calls of a removed identity
end UNAUTHENTICATED, and the step its worker holds goes to another worker at once (no lease
expiry); an identity file that repeats a credential is refused; secrets stay out of repr and logs."""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import signal
import subprocess
import sys
import threading
from collections.abc import AsyncIterator
from pathlib import Path

import grpc
import msgspec
import pytest
from pg import STORES, TEST_DATABASE_URL, async_temp_schema
from ports import free_port

from wiggle import Workflow
from wiggle import _tracing as wiggle_tracing
from wiggle._rpc import wiggle_pb2 as pb
from wiggle._security.credentials import Credentials
from wiggle._security.tokens import IdentityTable, hash_token
from wiggle._server.app import WiggleServer
from wiggle._server.config import ServerConfig
from wiggle.client import AsyncClient
from wiggle.errors import FailedPrecondition, Unauthenticated
from wiggle.worker import Worker, WorkerOptions

from .conftest import IDENTITIES, Pki, write_identities

QUEUE = "revocable"
OLD = {
    "name": "old-worker",
    "roles": ["worker"],
    "queues": [QUEUE],
    "token_sha256": hash_token("tok-old-worker"),
}
NEW = {
    "name": "new-worker",
    "roles": ["worker"],
    "queues": [QUEUE],
    "token_sha256": hash_token("tok-new-worker"),
}


class Ctx(msgspec.Struct):
    n: int = 0
    by: str = ""


class Gate:
    """The first run of ``hold`` blocks until the test opens the gate; later runs pass."""

    def __init__(self) -> None:
        self.entered = threading.Event()
        self.open = threading.Event()
        self.runs = 0
        self.lock = threading.Lock()


GATE = Gate()


def hold(c: Ctx) -> Ctx:
    with GATE.lock:
        GATE.runs += 1
        first = GATE.runs == 1
    if first:
        GATE.entered.set()
        GATE.open.wait(60)
        return Ctx(n=c.n + 1, by="old")
    return Ctx(n=c.n + 1, by="new")


HOLD = Workflow.define("revocation-wf", Ctx).step(hold, queue=QUEUE).build()


@pytest.fixture(params=STORES)
async def server(pki: Pki, request: pytest.FixtureRequest) -> AsyncIterator[WiggleServer]:
    """TLS + identity file with both workers; a 60 s lease, so that waiting one out would show."""
    write_identities(pki.auth_file, [OLD, NEW])
    async with contextlib.AsyncExitStack() as stack:
        database: dict[str, str] = {}
        if request.param == "postgres":
            schema = await stack.enter_async_context(async_temp_schema())
            database = {"database_url": TEST_DATABASE_URL, "database_schema": schema}
        config = ServerConfig(
            port=0,
            tls_cert=str(pki.server_cert),
            tls_key=str(pki.server_key),
            auth_file=str(pki.auth_file),
            lease_millis=60_000,
            reload_seconds=3600,  # only the explicit reloads of the tests read the file
            **database,  # type: ignore[arg-type]
        )
        srv = WiggleServer(config)
        await srv.start()
        try:
            yield srv
        finally:
            GATE.open.set()
            await srv.stop(grace=0.5)


async def _wait_for(predicate: object, what: str, timeout: float = 30.0) -> None:
    async def loop() -> None:
        while not predicate():  # type: ignore[operator]
            await asyncio.sleep(0.02)

    try:
        await asyncio.wait_for(loop(), timeout)
    except asyncio.TimeoutError:
        raise AssertionError(f"gave up waiting for {what}") from None


def _options() -> WorkerOptions:
    # stream transport (the default, named here because it is what the test is about); a thread
    # per handler so that the blocked one does not block the worker's event loop
    return WorkerOptions(transport="stream", concurrency=2, poll_wait_seconds=1.0, sync_handlers="thread")


async def test_reload_ends_a_removed_workers_stream_and_hands_its_step_to_another(
    server: WiggleServer, pki: Pki
) -> None:
    GATE.__init__()  # type: ignore[misc]
    async with pki.client(server.target, "ops") as admin:
        await admin.register(HOLD)
        started = await admin.start(HOLD, Ctx(n=1))
        old = Worker(server.target, [HOLD], _options(), credentials=pki.credentials("old-worker"))
        new = Worker(server.target, [HOLD], _options(), credentials=pki.credentials("new-worker"))
        await old.start()
        try:
            await _wait_for(GATE.entered.is_set, "the old worker to hold the step")
            # besides the worker's own stream: a raw WorkerSession stream and a long poll of the
            # same credential, open when the reload comes
            raw = pki.client(server.target, "old-worker")
            stream = raw.stub.WorkerSession(timeout=60)
            await stream.write(
                pb.WorkerBatch(messages=[pb.WorkerMessage(request_id=1, heartbeat=pb.HeartbeatTaskRequest())])
            )
            await stream.read()  # the stream is open (its one request answered, an error or not)
            poll = asyncio.ensure_future(
                raw.stub.PollTasks(
                    pb.PollTasksRequest(worker_id="w", queues=[QUEUE], max_tasks=1, wait_millis=50_000),
                    timeout=60,
                )
            )
            await _wait_for(lambda: len(server.open_calls.of(["old-worker"])) >= 3, "three calls open")
            await new.start()

            write_identities(pki.auth_file, [NEW])  # the old worker's token is gone
            server.reload()  # what SIGHUP does
            assert server.revoker is not None
            await server.revoker.idle()

            with pytest.raises(grpc.aio.AioRpcError) as raised:
                await stream.read()
            assert raised.value.code() == grpc.StatusCode.UNAUTHENTICATED
            assert "'old-worker' was revoked" in (raised.value.details() or "")
            with pytest.raises(grpc.aio.AioRpcError) as raised:
                await poll
            assert raised.value.code() == grpc.StatusCode.UNAUTHENTICATED
            assert "revoked" in (raised.value.details() or "")
            assert server.open_calls.of(["old-worker"]) == []  # the worker's own stream too
            await raw.close()

            done = await admin.result(started.instance_id, timeout=30)
            assert done.status == "COMPLETED" and done.context == {"n": 2, "by": "new"}
            assert server.revoker.released == 1
        finally:
            GATE.open.set()  # the old handler ends; its report is refused (revoked)
            await new.close()
            await old.close()
        history = [e for e in await admin.history(started.instance_id) if e.node_id == "hold"]
        assert [(e.outcome, e.worker_id.split("/")[0], e.attempt) for e in history] == [
            ("RELEASED", "old-worker", 1),  # handed back: the same attempt, no RETRY, no lease expiry
            ("COMPLETED", "new-worker", 1),
        ]
        assert "credential of 'old-worker' revoked" in history[0].error
        assert (await admin.get(started.instance_id)).context == {"n": 2, "by": "new"}


async def test_a_changed_identity_is_revoked_an_unchanged_one_is_not(server: WiggleServer, pki: Pki) -> None:
    seen: list[frozenset[str]] = []
    assert server.security is not None and server.security.identities is not None
    cancel = server.security.identities.on_reload(seen.append)
    async with pki.client(server.target, "new-worker") as worker:
        stream = worker.stub.WorkerSession(timeout=60)
        await stream.write(
            pb.WorkerBatch(messages=[pb.WorkerMessage(request_id=1, heartbeat=pb.HeartbeatTaskRequest())])
        )
        await stream.read()
        # old-worker's queues change; new-worker stays as it was: its stream goes on
        write_identities(pki.auth_file, [{**OLD, "queues": ["other"]}, NEW])
        server.reload()
        assert server.revoker is not None
        await server.revoker.idle()
        assert seen == [frozenset({"old-worker"})]
        await stream.write(
            pb.WorkerBatch(messages=[pb.WorkerMessage(request_id=2, heartbeat=pb.HeartbeatTaskRequest())])
        )
        reply = await stream.read()
        assert reply.messages[0].request_id == 2  # answered: the stream is still open
        await stream.done_writing()
    cancel()
    write_identities(pki.auth_file, [OLD])
    server.reload()
    assert seen == [frozenset({"old-worker"})]  # unregistered: not called again


STARTER = {"name": "starter", "roles": ["client"], "token_sha256": hash_token("tok-starter")}


async def test_reload_ends_a_removed_clients_start_stream(
    server: WiggleServer, pki: Pki, monkeypatch: pytest.MonkeyPatch
) -> None:
    # A client's starts ride one ClientSession stream (wiggle/_client/start_stream.py): removing
    # its identity ends that stream at the reload like any other call, and its next start is
    # refused as a new call with the token would be. (A start under an active trace is a unary
    # call of its own: an earlier test's TracerProvider must not turn the stream off here.)
    monkeypatch.setattr(wiggle_tracing, "active", lambda: False)
    write_identities(pki.auth_file, [OLD, NEW, STARTER])
    server.reload()
    assert server.revoker is not None
    await server.revoker.idle()
    async with pki.client(server.target, "ops") as admin:
        await admin.register(HOLD)
    async with pki.client(server.target, "starter") as client:
        await client.start(HOLD, Ctx())
        stream = client._stream._call
        assert stream is not None and not stream.done()
        write_identities(pki.auth_file, [OLD, NEW])
        server.reload()
        await server.revoker.idle()
        await _wait_for(stream.done, "the start stream to end")
        assert await stream.code() == grpc.StatusCode.UNAUTHENTICATED
        assert "the credential of 'starter' was revoked" in await stream.details()
        with pytest.raises(Unauthenticated, match="not known to this server"):
            await client.start(HOLD, Ctx())


def _doc(*entries: dict[str, object]) -> str:
    return json.dumps({"identities": list(entries)})


VIEWER = {"name": "viewer-1", "roles": ["viewer"], "token_sha256": hash_token("tok-shared")}
ADMIN = {"name": "admin-1", "roles": ["admin"], "token_sha256": hash_token("tok-shared")}


def test_a_repeated_token_hash_is_refused_at_start_naming_both(tmp_path: Path, pki: Pki) -> None:
    path = tmp_path / "ids.json"
    path.write_text(_doc(VIEWER, ADMIN))
    with pytest.raises(ValueError) as raised:
        IdentityTable(str(path))
    message = str(raised.value)
    assert "'viewer-1' (#1) and 'admin-1' (#2) have the same token_sha256" in message
    assert hash_token("tok-shared") not in message  # the hash is not echoed either
    cn_a = {"name": "svc-a", "roles": ["client"], "cert_cn": "svc.internal"}
    cn_b = {"name": "svc-b", "roles": ["admin"], "cert_cn": "svc.internal"}
    path.write_text(_doc(cn_a, cn_b))
    with pytest.raises(
        ValueError, match=r"'svc-a' \(#1\) and 'svc-b' \(#2\) have the same cert_cn 'svc.internal'"
    ):
        IdentityTable(str(path))
    path.write_text(_doc(VIEWER, {**VIEWER, "token_sha256": hash_token("other")}))
    with pytest.raises(ValueError, match=r"names 'viewer-1' twice \(identities #1 and #2\)"):
        IdentityTable(str(path))
    # the server refuses to start with it, naming both entries
    path.write_text(_doc(VIEWER, ADMIN))
    config = ServerConfig(
        port=0, tls_cert=str(pki.server_cert), tls_key=str(pki.server_key), auth_file=str(path)
    )
    with pytest.raises(FailedPrecondition, match="'viewer-1' \\(#1\\) and 'admin-1' \\(#2\\)"):
        asyncio.run(WiggleServer(config).start())


async def test_a_repeated_token_hash_at_reload_keeps_the_old_file(
    server: WiggleServer, pki: Pki, caplog: pytest.LogCaptureFixture
) -> None:
    entries = [
        {"name": n, "roles": r, "token_sha256": hash_token(f"tok-{n}"), **({"queues": q} if q else {})}
        for n, (r, q) in IDENTITIES.items()
    ]
    doubled = {"name": "intruder", "roles": ["admin"], "token_sha256": hash_token("tok-watcher")}
    pki.auth_file.write_text(_doc(*entries, doubled))
    with caplog.at_level(logging.INFO, logger="wiggle.server"):
        server.reload()
    refusals = [r for r in caplog.records if "not reloaded" in r.getMessage()]
    assert len(refusals) == 1 and refusals[0].levelno == logging.ERROR
    assert "'watcher' (#5) and 'intruder' (#6) have the same token_sha256" in refusals[0].getMessage()
    assert not [r for r in caplog.records if "identities loaded" in r.getMessage()]
    async with pki.client(server.target, "watcher") as watcher:
        await watcher.list()  # still the viewer it was
        with pytest.raises(Exception, match="may not call CancelInstance"):
            await watcher.cancel("wi-0")
    # the old file is still in force: nobody was revoked, the intruder is unknown
    assert server.security is not None and server.security.identities is not None
    assert server.security.identities.by_name("old-worker") is not None
    assert server.security.identities.by_name("intruder") is None


async def test_secrets_stay_out_of_repr_logs_and_errors(
    server: WiggleServer, pki: Pki, caplog: pytest.LogCaptureFixture
) -> None:
    secret = "tok-old-worker"
    creds = Credentials(ca_file=str(pki.ca.ca_file), token=secret)
    for shown in (repr(creds), str(creds), f"{creds}", repr([creds])):
        assert secret not in shown and "token=<hidden>" in shown
    assert dict(creds.__rich_repr__())["token"] == "<hidden>"
    assert creds.bearer() == secret  # still sent
    assert server.security is not None and server.security.identities is not None
    table = server.security.identities
    identity = table.by_token(secret)
    assert identity is not None
    for shown in (repr(table), repr(identity), str(identity)):
        assert secret not in shown and hash_token(secret) not in shown
    errors: list[str] = []
    with caplog.at_level(logging.DEBUG):
        async with pki.client(server.target, "ops") as admin:
            await admin.register(HOLD)
        wrong = Credentials(ca_file=str(pki.ca.ca_file), token="tok-wrong-secret")
        async with _client(server, wrong) as bad:
            with pytest.raises(Exception) as raised:
                await bad.list()
            errors.append(str(raised.value))
        write_identities(pki.auth_file, [NEW])  # revokes old-worker: logged by name only
        server.reload()
        assert server.revoker is not None
        await server.revoker.idle()
        async with _client(server, creds) as revoked:
            with pytest.raises(Exception) as raised:
                await revoked.list()
            errors.append(str(raised.value))
    assert "old-worker" in caplog.text  # the revocation was logged
    for text in [caplog.text, *errors]:
        for token in (secret, "tok-wrong-secret", hash_token(secret)):
            assert token not in text


def _client(server: WiggleServer, credentials: Credentials) -> AsyncClient:
    return AsyncClient(server.target, credentials=credentials)


async def test_sighup_to_a_server_process_ends_the_revoked_stream(pki: Pki) -> None:
    port = free_port()
    process = subprocess.Popen(
        [sys.executable, "-m", "wiggle.cli", "server", "--port", str(port)]
        + ["--tls-cert", str(pki.server_cert), "--tls-key", str(pki.server_key)]
        + ["--auth-file", str(pki.auth_file), "--reload-seconds", "3600"],
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )
    try:
        assert process.stdout is not None
        for line in process.stdout:
            if "listening on" in line:
                break
        else:
            raise AssertionError("the server did not start")
        # read the server's output from here on: a full pipe would block its logging, and with it
        # the server (and the reload this test waits for)
        lines: list[str] = []
        drain = threading.Thread(target=lambda: lines.extend(process.stdout or ()), daemon=True)
        drain.start()
        async with pki.client(f"127.0.0.1:{port}", "pay-worker") as worker:
            stream = worker.stub.WorkerSession(timeout=60)
            await stream.write(
                pb.WorkerBatch(messages=[pb.WorkerMessage(request_id=1, heartbeat=pb.HeartbeatTaskRequest())])
            )
            await stream.read()  # open, and authenticated
            kept = {n: v for n, v in IDENTITIES.items() if n != "pay-worker"}
            doc = [
                {
                    "name": n,
                    "roles": r,
                    "token_sha256": hash_token(f"tok-{n}"),
                    **({"queues": q} if q else {}),
                }
                for n, (r, q) in kept.items()
            ]
            pki.auth_file.write_text(json.dumps({"identities": doc}))
            process.send_signal(signal.SIGHUP)
            with pytest.raises(grpc.aio.AioRpcError) as raised:
                await stream.read()
            assert raised.value.code() == grpc.StatusCode.UNAUTHENTICATED, "".join(lines)
            assert "'pay-worker' was revoked" in (raised.value.details() or "")
    finally:
        process.send_signal(signal.SIGINT)
        process.wait(timeout=30)
    drain.join(timeout=10)
    output = "".join(lines)
    assert "credential of 'pay-worker' revoked at the identity reload: 1 call(s) ended" in output
    assert "tok-pay-worker" not in output and hash_token("tok-pay-worker") not in output
