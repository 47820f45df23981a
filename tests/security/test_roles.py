"""Tokens and roles on a TLS server: each role allowed and refused per RPC, queue-scoped workers,
the worker's identity taken from its credential, clear UNAUTHENTICATED / PERMISSION_DENIED."""

from __future__ import annotations

import grpc
import msgspec
import pytest
from google.protobuf.message import Message

from wiggle import ExecutionMode, Workflow
from wiggle._rpc import wiggle_pb2 as pb
from wiggle._security.tokens import Role
from wiggle._server.app import WiggleServer
from wiggle._server.routes import RPC_ROLES, allowed_roles
from wiggle.errors import PermissionDenied, Unauthenticated
from wiggle.worker import Worker, WorkerOptions

from .conftest import Pki


class Pay(msgspec.Struct):
    amount: int = 0
    charged: bool = False


def charge(c: Pay) -> Pay:
    c.charged = True
    return c


PAYMENTS = (
    Workflow.define("payments-wf", Pay).execution(ExecutionMode.SERVER).step(charge, queue="payments").build()
)

OWNER = "pay-worker/w1"
#: one request per RPC of the service; worker calls carry a lease of the pay-worker credential
REQUESTS: dict[str, Message] = {
    "RegisterWorkflow": pb.RegisterWorkflowRequest(definition_json=b"{}"),
    "GetWorkflow": pb.GetWorkflowRequest(name="nope"),
    "ListWorkflows": pb.ListWorkflowsRequest(),
    "StartInstance": pb.StartInstanceRequest(workflow="nope"),
    "GetInstance": pb.GetInstanceRequest(instance_id="wi-000000000000000000000000"),
    "ListInstances": pb.ListInstancesRequest(),
    "CancelInstance": pb.CancelInstanceRequest(instance_id="wi-000000000000000000000000"),
    "CompleteUserTask": pb.CompleteUserTaskRequest(instance_id="wi-000000000000000000000000", task_name="t"),
    "GetHistory": pb.GetHistoryRequest(instance_id="wi-000000000000000000000000"),
    "PollTasks": pb.PollTasksRequest(worker_id="w1", queues=["payments"], wait_millis=0),
    "CompleteTask": pb.CompleteTaskRequest(task_id="tk-0", lease_owner=OWNER),
    "FailTask": pb.FailTaskRequest(task_id="tk-0", lease_owner=OWNER),
    "HeartbeatTask": pb.HeartbeatTaskRequest(task_id="tk-0", lease_owner=OWNER),
    "AdvanceRun": pb.AdvanceRunRequest(task_id="tk-0", lease_owner=OWNER),
    "ListQueues": pb.ListQueuesRequest(),
    "SetQueueLimit": pb.QueueLimit(queue="payments", max_running=1),
    "SignalInstance": pb.SignalInstanceRequest(instance_id="wi-000000000000000000000000", name="go"),
    "RetryInstance": pb.RetryInstanceRequest(instance_id="wi-000000000000000000000000"),
    "StartInstances": pb.StartInstancesRequest(workflow="nope", contexts_json=[b"{}"]),
    "CreateSchedule": pb.ScheduleSpec(id="s", workflow="nope", interval_millis=60_000),
    "UpdateSchedule": pb.ScheduleSpec(id="s", workflow="nope", interval_millis=60_000),
    "GetSchedule": pb.ScheduleRequest(schedule_id="s"),
    "ListSchedules": pb.ListSchedulesRequest(),
    "PauseSchedule": pb.ScheduleRequest(schedule_id="s"),
    "ResumeSchedule": pb.ScheduleRequest(schedule_id="s"),
    "DeleteSchedule": pb.ScheduleRequest(schedule_id="s"),
    "TriggerSchedule": pb.ScheduleRequest(schedule_id="s"),
}
CALLERS = {Role.ADMIN: "ops", Role.CLIENT: "app", Role.WORKER: "pay-worker", Role.VIEWER: "watcher"}


def test_every_rpc_of_the_service_is_in_the_role_table(secured_routes: list[str]) -> None:
    assert sorted(REQUESTS) == sorted(secured_routes)
    for method in secured_routes:
        assert method in RPC_ROLES, f"{method} has no row in wiggle/_server/routes.py ROUTES"


@pytest.fixture
def secured_routes() -> list[str]:
    from wiggle._server.config import ServerConfig

    return sorted(WiggleServer(ServerConfig()).service.routes)


def test_unknown_rpcs_are_admin_only() -> None:
    assert allowed_roles("FutureThing") == {Role.ADMIN}
    assert allowed_roles("/wiggle.v1.WiggleControlPlane/FutureThing") == {Role.ADMIN}
    assert allowed_roles("/other.Service/StartInstance") == {Role.ADMIN}


@pytest.mark.parametrize("role", list(Role))
async def test_each_role_allowed_and_refused_per_rpc(secured: WiggleServer, pki: Pki, role: Role) -> None:
    async with pki.client(secured.target, CALLERS[role]) as client:
        for method, request in REQUESTS.items():
            allowed = role in allowed_roles(method)
            try:
                await getattr(client.stub, method)(request, timeout=10)
                code = grpc.StatusCode.OK
                details = ""
            except grpc.aio.AioRpcError as exc:
                code, details = exc.code(), exc.details() or ""
            if allowed:
                assert code not in (grpc.StatusCode.PERMISSION_DENIED, grpc.StatusCode.UNAUTHENTICATED), (
                    method,
                    role,
                    details,
                )
            else:
                assert code == grpc.StatusCode.PERMISSION_DENIED, (method, role, code)
                assert method in details and CALLERS[role] in details


async def test_no_token_and_unknown_token_are_unauthenticated(secured: WiggleServer, pki: Pki) -> None:
    async with pki.client(secured.target) as anonymous:
        with pytest.raises(Unauthenticated, match="no credential"):
            await anonymous.list_workflows()
    async with pki.client(secured.target, "forged") as forged:
        with pytest.raises(Unauthenticated, match="not known"):
            await forged.list_workflows()
    async with pki.client(secured.target, "watcher") as viewer:  # the server still answers
        assert await viewer.list_workflows() == []


async def test_worker_token_scoped_to_its_queues_and_leases(secured: WiggleServer, pki: Pki) -> None:
    async with pki.client(secured.target, "ops") as admin, pki.client(secured.target, "app") as app:
        await admin.register(PAYMENTS)
        started = await app.start(PAYMENTS, Pay(amount=5))
    async with (
        pki.client(secured.target, "pay-worker") as pay,
        pki.client(secured.target, "any-worker") as other,
    ):
        with pytest.raises(PermissionDenied, match=r"may serve queues \['payments'\]; not \['orders'\]"):
            await pay._call(pay.stub.PollTasks, pb.PollTasksRequest(worker_id="w1", queues=["orders"]))
        # a worker given queues beyond its credential's is told which it may keep (a docs trial:
        # it served nothing, not even those)
        with pytest.raises(
            PermissionDenied,
            match=r"not \['orders'\]: give this worker only those it may \(--queues payments\)",
        ):
            await pay._call(
                pay.stub.PollTasks, pb.PollTasksRequest(worker_id="w1", queues=["orders", "payments"])
            )
        # the card number is only for the payments credential; any-worker may poll every queue,
        # so the test claims with pay-worker and checks any-worker cannot report on that claim
        reply = await pay._call(
            pay.stub.PollTasks, pb.PollTasksRequest(worker_id="w1", queues=["payments"], wait_millis=5000)
        )
        [task] = reply.tasks
        assert task.lease_owner == "pay-worker/w1"  # the identity comes from the credential
        forged = pb.CompleteTaskRequest(
            task_id=task.task_id, lease_owner=task.lease_owner, context_json=b"{}"
        )
        with pytest.raises(PermissionDenied, match="is not a lease of worker credential 'any-worker'"):
            await other._call(other.stub.CompleteTask, forged)
        # its own report may ask for a next step only on its own queues (chained steps)
        wider = pb.CompleteTaskRequest(
            task_id=task.task_id, lease_owner=task.lease_owner, context_json=b"{}", next_queues=["orders"]
        )
        with pytest.raises(PermissionDenied, match=r"not \['orders'\] \(next_queues\)"):
            await pay._call(pay.stub.CompleteTask, wider)
        # claiming to be pay-worker in the worker id changes nothing: the prefix is the credential's
        spoof = await other._call(
            other.stub.PollTasks, pb.PollTasksRequest(worker_id="pay-worker/w1", queues=["payments"])
        )
        assert not spoof.tasks
    async with pki.client(secured.target, "ops") as admin:
        info = await admin.get(started.instance_id)
        assert info.status == "RUNNING"  # nothing the refused calls did changed the instance


async def test_worker_runs_with_its_credential_and_reports_under_its_name(
    secured: WiggleServer, pki: Pki
) -> None:
    async with pki.client(secured.target, "ops") as admin:
        await admin.register(PAYMENTS)
        started = await admin.start(PAYMENTS, Pay(amount=7))
        options = WorkerOptions(concurrency=2, poll_wait_seconds=1.0)
        # the worker's own register is refused (worker role) and skipped with a warning
        async with Worker(secured.target, [PAYMENTS], options, credentials=pki.credentials("pay-worker")):
            done = await admin.result(started.instance_id, timeout=30)
        assert done.context == {"amount": 7, "charged": True}
        history = await admin.history(started.instance_id)
        workers = {e.worker_id for e in history if e.worker_id}
        assert workers and all(w.startswith("pay-worker/") for w in workers)


async def test_worker_session_stream_is_scoped_per_message(secured: WiggleServer, pki: Pki) -> None:
    async def one(client_who: str, message: pb.WorkerMessage) -> pb.ServerMessage:
        async with pki.client(secured.target, client_who) as client:
            call = client.stub.WorkerSession(iter([pb.WorkerBatch(messages=[message])]), timeout=10)
            async for batch in call:
                return batch.messages[0]
        raise AssertionError("no reply")

    poll_orders = pb.WorkerMessage(
        request_id=1, poll=pb.PollTasksRequest(worker_id="w", queues=["orders"], wait_millis=0)
    )
    reply = await one("pay-worker", poll_orders)
    assert reply.WhichOneof("body") == "error" and "not ['orders']" in reply.error.message
    # A role without worker methods is refused when the stream opens, before any message is read
    # (wiggle/_server/guard.py): the call sends none, since a message written while the server
    # ends the call can fail on the client's side first (INTERNAL, "Failed execute_batch").
    with pytest.raises(grpc.aio.AioRpcError) as refused:
        async with pki.client(secured.target, "watcher") as client:
            async for _ in client.stub.WorkerSession(iter([]), timeout=10):
                raise AssertionError("a reply to a watcher's worker session")
    assert refused.value.code() == grpc.StatusCode.PERMISSION_DENIED


@pytest.mark.parametrize(
    "who, code, says",
    [
        ("", grpc.StatusCode.UNAUTHENTICATED, "no credential"),
        ("forged", grpc.StatusCode.UNAUTHENTICATED, "not known"),
        ("pay-worker", grpc.StatusCode.PERMISSION_DENIED, "may not call StartInstance"),
    ],
)
async def test_a_call_its_metadata_refuses_is_refused_before_its_request_is_read(
    secured: WiggleServer, pki: Pki, who: str, code: grpc.StatusCode, says: str
) -> None:
    """Read first, a refused request stayed in memory until a full garbage collection: anyone who
    could reach the port grew the server by 64 MiB a call, with no credential. A request over the
    server's message limit shows whether it was read: read, it is RESOURCE_EXHAUSTED."""
    big = pb.StartInstanceRequest(workflow="anything", context_json=b"x" * (70 << 20))  # over 64 MiB

    async def start(token: str) -> grpc.aio.AioRpcError:
        creds = grpc.ssl_channel_credentials(pki.ca.ca_file.read_bytes())
        if token:
            creds = grpc.composite_channel_credentials(creds, grpc.access_token_call_credentials(token))
        async with grpc.aio.secure_channel(secured.target, creds) as channel:
            call = channel.unary_unary(
                "/wiggle.v1.WiggleControlPlane/StartInstance",
                request_serializer=pb.StartInstanceRequest.SerializeToString,
                response_deserializer=pb.InstanceInfo.FromString,
            )
            with pytest.raises(grpc.aio.AioRpcError) as failed:
                await call(big, timeout=30)
        return failed.value

    refused = await start(f"tok-{who}" if who else "")
    assert refused.code() == code, refused
    assert says in (refused.details() or ""), refused.details()
    read = await start("tok-ops")  # an admitted caller's request is read, and is too big
    assert read.code() == grpc.StatusCode.RESOURCE_EXHAUSTED, read
