"""Tokens and roles on upstream Wiggle's service (docs/semantics.md#security, docs/upstream.md):
the roles column of the routes table (wiggle/_server/routes.py) per method and role, worker
credentials scoped to their queues and their own leases, HealthCheck for any credential.
"""

from __future__ import annotations

import contextlib
import json
from collections.abc import AsyncIterator
from dataclasses import dataclass
from pathlib import Path

import grpc
import pytest
from google.protobuf.message import Message
from security.certs import Authority  # tests/security/certs.py

from wiggle._rpc.upstream import wiggle_pb2 as upb
from wiggle._rpc.upstream import wiggle_pb2_grpc as upb_grpc
from wiggle._security.credentials import Credentials
from wiggle._security.tokens import Role, hash_token
from wiggle._server.routes import UPSTREAM_RPC_ROLES, allowed_roles

from .service_kit import DENIED, NOT_FOUND, STORES, Up, document, end, flow, open_server, struct, task, value

PREFIX = "/dev.wiggle.proto.WiggleControlPlane/"
SERVICE = upb.DESCRIPTOR.services_by_name["WiggleControlPlane"]
#: name -> (roles, queues); each gets the token "tok-<name>"
IDENTITIES: dict[str, tuple[list[str], list[str]]] = {
    "ops": (["admin"], []),
    "app": (["client"], []),
    "pay-worker": (["worker"], ["payments"]),
    "any-worker": (["worker"], ["*"]),
    "watcher": (["viewer"], []),
}
CALLERS = {Role.ADMIN: "ops", Role.CLIENT: "app", Role.WORKER: "pay-worker", Role.VIEWER: "watcher"}
OWNER = "pay-worker/w1"
UNKNOWN = "wi-0123456789abcdef01234567"
#: one request per method; allowed callers get an ordinary answer or error, never a refusal
REQUESTS: dict[str, Message] = {
    "HealthCheck": upb.Empty(),
    "GetCluster": upb.Empty(),
    "ListWorkflows": upb.Empty(),
    "RegisterWorkflow": upb.WorkflowDefinition(),
    "GetWorkflow": upb.GetWorkflowRequest(name="nope"),
    "StartInstance": upb.StartInstanceRequest(workflow="nope"),
    "ListInstances": upb.ListInstancesRequest(),
    "GetInstance": upb.InstanceIdRequest(instance_id=UNKNOWN),
    "CancelInstance": upb.CancelInstanceRequest(instance_id=UNKNOWN),
    "SignalInstance": upb.SignalRequest(instance_id=UNKNOWN, signal="go"),
    "CreateSchedule": upb.CreateScheduleRequest(workflow="nope", every_millis=60_000),
    "ListSchedules": upb.Empty(),
    "DeleteSchedule": upb.ScheduleIdRequest(id="nope"),
    "PollTasks": upb.PollRequest(worker_id="w1", queues=["payments"], max=1, wait_millis=0),
    "CompleteTask": upb.TaskResultRequest(task_id=f"{UNKNOWN}.1@1", lease_owner=OWNER),
    "FailTask": upb.TaskFailureRequest(task_id=f"{UNKNOWN}.1@1", lease_owner=OWNER),
    "HeartbeatTask": upb.HeartbeatRequest(task_id=f"{UNKNOWN}.1@1", lease_owner=OWNER),
    "AdvanceRun": upb.AdvanceRunRequest(task_id=f"{UNKNOWN}.1@1", lease_owner=OWNER),
}


@dataclass
class Secured:
    up: Up  # the admin's view
    ca_file: Path

    @contextlib.asynccontextmanager
    async def stub(self, who: str = "") -> AsyncIterator[upb_grpc.WiggleControlPlaneStub]:
        """Upstream's stub with ``who``'s token (none: no credential), over TLS."""
        credentials = Credentials(ca_file=str(self.ca_file), token=f"tok-{who}" if who else "")
        async with grpc.aio.secure_channel(
            self.up.server.target, credentials.channel_credentials()
        ) as channel:
            yield upb_grpc.WiggleControlPlaneStub(channel)


async def _code(call: object, request: Message) -> tuple[grpc.StatusCode, str]:
    try:
        await call(request, timeout=15)  # type: ignore[operator]
    except grpc.aio.AioRpcError as exc:
        return exc.code(), exc.details() or ""
    return grpc.StatusCode.OK, ""


@pytest.fixture(params=STORES)
async def secured(request: pytest.FixtureRequest, tmp_path: Path) -> AsyncIterator[Secured]:
    ca = Authority(tmp_path)
    cert, key = ca.issue("localhost", server=True)
    auth = tmp_path / "identities.json"
    entries = []
    for name, (roles, queues) in IDENTITIES.items():
        entry: dict[str, object] = {"name": name, "roles": roles, "token_sha256": hash_token(f"tok-{name}")}
        if queues:
            entry["queues"] = queues
        entries.append(entry)
    auth.write_text(json.dumps({"identities": entries}))
    admin = Credentials(ca_file=str(ca.ca_file), token="tok-ops").channel_credentials()
    async with open_server(
        request.param, credentials=admin, tls_cert=str(cert), tls_key=str(key), auth_file=str(auth)
    ) as up:
        yield Secured(up, ca.ca_file)


def test_the_role_table_covers_every_method_of_the_upstream_service() -> None:
    methods = set(SERVICE.methods_by_name)
    assert set(UPSTREAM_RPC_ROLES) == methods, set(UPSTREAM_RPC_ROLES) ^ methods
    assert set(REQUESTS) == methods
    for method in methods:
        assert allowed_roles(PREFIX + method) == UPSTREAM_RPC_ROLES[method] | {Role.ADMIN}
    # a method upstream may add later is closed until it is in the table
    assert allowed_roles(PREFIX + "FutureThing") == {Role.ADMIN}
    # HealthCheck answers any credential
    assert allowed_roles(PREFIX + "HealthCheck") == set(Role)


@pytest.mark.parametrize("role", list(Role))
async def test_each_role_allowed_and_refused_per_upstream_rpc(secured: Secured, role: Role) -> None:
    who = CALLERS[role]
    async with secured.stub(who) as stub:
        for method, request in REQUESTS.items():
            code, details = await _code(getattr(stub, method), request)
            if role in allowed_roles(PREFIX + method):
                assert code not in (DENIED, grpc.StatusCode.UNAUTHENTICATED), (method, role, details)
            else:
                assert code == DENIED, (method, role, code, details)
                assert method in details and who in details


async def test_a_call_without_a_credential_is_unauthenticated(secured: Secured) -> None:
    async with secured.stub() as anonymous, secured.stub("forged") as forged:
        for stub in (anonymous, forged):
            for method in ("HealthCheck", "ListWorkflows", "PollTasks"):
                code, _ = await _code(getattr(stub, method), REQUESTS[method])
                assert code == grpc.StatusCode.UNAUTHENTICATED, method
    for who in IDENTITIES:
        async with secured.stub(who) as stub:
            health = await stub.HealthCheck(upb.Empty(), timeout=15)
            assert health.status == "UP", who


async def test_worker_credentials_are_scoped_to_their_queues_and_leases(secured: Secured) -> None:
    up = secured.up
    name = "up-secured"
    await up.register(document(name, [task("n0", name, "charge", "end", queue="payments"), end()]))
    async with (
        secured.stub("app") as app,
        secured.stub("pay-worker") as pay,
        secured.stub("any-worker") as other,
    ):
        started = await app.StartInstance(
            upb.StartInstanceRequest(workflow=name, context=value({"amount": 5})), timeout=15
        )
        iid = started.instance_id
        # a worker may not register a workflow
        code, details = await _code(
            pay.RegisterWorkflow, upb.WorkflowDefinition(definition=struct(flow(name + "-2", "a")))
        )
        assert code == DENIED and "RegisterWorkflow" in details and "pay-worker" in details
        # nor poll a queue it is not scoped to (and claims nothing for asking)
        code, details = await _code(pay.PollTasks, upb.PollRequest(worker_id="w1", queues=["orders"], max=1))
        assert code == DENIED and "not ['orders']" in details
        code, details = await _code(
            pay.PollTasks, upb.PollRequest(worker_id="w1", queues=["payments", "orders"], max=1)
        )
        assert code == DENIED
        assert (await up.get(iid)).tokens[0].status == "READY"
        # its own queue: the claim is under its credential's name, whatever worker id it sends
        reply = await pay.PollTasks(
            upb.PollRequest(worker_id="w1", queues=["payments"], max=1, wait_millis=5000), timeout=15
        )
        [t] = reply.tasks
        assert t.lease_owner == OWNER
        spoof = await other.PollTasks(
            upb.PollRequest(worker_id="pay-worker/w1", queues=["payments"], max=1), timeout=15
        )
        assert not spoof.tasks
        # another worker credential may not report on that lease, whatever the report
        before = await up.snapshot()
        for method, request in (
            (
                "CompleteTask",
                upb.TaskResultRequest(task_id=t.task_id, lease_owner=OWNER, result=value({"x": 1})),
            ),
            ("FailTask", upb.TaskFailureRequest(task_id=t.task_id, lease_owner=OWNER, message="m")),
            ("HeartbeatTask", upb.HeartbeatRequest(task_id=t.task_id, lease_owner=OWNER)),
            ("AdvanceRun", upb.AdvanceRunRequest(task_id=t.task_id, lease_owner=OWNER, final=True)),
        ):
            code, details = await _code(getattr(other, method), request)
            assert code == DENIED, (method, code, details)
            assert "is not a lease of worker credential 'any-worker'" in details
        # under its own name it holds no such lease
        code, _ = await _code(
            other.CompleteTask, upb.TaskResultRequest(task_id=t.task_id, lease_owner="any-worker/w1")
        )
        assert code == NOT_FOUND
        assert await up.snapshot() == before
        # the lease's holder completes it
        await pay.CompleteTask(
            upb.TaskResultRequest(
                task_id=t.task_id, lease_owner=t.lease_owner, result=value({"charged": True})
            ),
            timeout=15,
        )
    assert await up.status(iid) == "COMPLETED"
    assert await up.context(iid) == {"amount": 5, "charged": True}
