"""An in-process server and upstream Wiggle's generated stub, for the service-level tests
(tests/upstream/test_service_*.py) of wiggle/_upstream/service.py.

``open_server`` starts a real ``WiggleServer`` on a loopback port, on the memory store or on
PostgreSQL in a schema of its own, optionally on a VirtualClock (so a lease's expiry is exact).
``Up`` talks to it through ``wiggle._rpc.upstream.wiggle_pb2_grpc.WiggleControlPlaneStub`` and,
to read what the store holds (history, pending signals), through our own stub. Definitions are
written as upstream's JSON by hand (``task``, ``flow``...), never by the code under test.
"""

from __future__ import annotations

import contextlib
import uuid
from collections.abc import AsyncIterator
from typing import Any

import grpc
import msgspec
import pytest
from google.protobuf import json_format, struct_pb2
from google.protobuf.message import Message
from pg import STORES as STORES  # re-exported: the store parameter of these tests
from pg import TEST_DATABASE_URL, async_temp_schema

from wiggle._clock import VirtualClock
from wiggle._rpc import wiggle_pb2 as pb
from wiggle._rpc import wiggle_pb2_grpc as pb_grpc
from wiggle._rpc.upstream import wiggle_pb2 as upb
from wiggle._rpc.upstream import wiggle_pb2_grpc as upb_grpc
from wiggle._server.app import WiggleServer
from wiggle._server.config import ServerConfig

#: "memory" always; "postgres" when WIGGLE_TEST_POSTGRES=1 (as CI sets)
WORKER = "up-worker"
UNKNOWN_INSTANCE = "wi-0123456789abcdef01234567"
FOREVER = {
    "maxAttempts": 2147483647,
    "initialBackoffMillis": 1000,
    "multiplier": 1.0,
    "maxBackoffMillis": 60000,
}

INVALID = grpc.StatusCode.INVALID_ARGUMENT
NOT_FOUND = grpc.StatusCode.NOT_FOUND
PRECONDITION = grpc.StatusCode.FAILED_PRECONDITION
DENIED = grpc.StatusCode.PERMISSION_DENIED


def unique(base: str) -> str:
    """A workflow name (and so a default queue) no other test uses."""
    return f"{base}-{uuid.uuid4().hex[:8]}"


# ---------------------------------------------------------------------------- upstream JSON


def task(uid: str, workflow: str, name: str, nxt: str, queue: str = "", **more: Any) -> dict[str, Any]:
    """An upstream TASK node (activity ``<workflow>#<name>``)."""
    node = {"id": uid, "kind": "TASK", "name": name, "activity": f"{workflow}#{name}", "next": nxt}
    node["queue"] = queue or workflow
    node.update(more)
    return node


def predicate(uid: str, workflow: str, name: str, yes: str, no: str) -> dict[str, Any]:
    """An upstream PREDICATE node: ``next`` on true, ``altNext`` on false."""
    return {
        "id": uid,
        "kind": "PREDICATE",
        "name": name,
        "activity": f"{workflow}#{name}",
        "queue": workflow,
        "next": yes,
        "altNext": no,
    }


def end(uid: str = "end", success: bool = True, reason: str | None = None) -> dict[str, Any]:
    node: dict[str, Any] = {"id": uid, "kind": "END", "success": success}
    if reason is not None:
        node["reason"] = reason
    return node


def document(name: str, nodes: list[dict[str, Any]], **top: Any) -> dict[str, Any]:
    """An upstream definition document starting at the first node."""
    doc: dict[str, Any] = {"name": name, "startNode": nodes[0]["id"], "nodes": nodes}
    doc.update(top)
    return doc


def flow(name: str, *steps: str, **top: Any) -> dict[str, Any]:
    """A chain of TASK steps on the workflow's queue, then END."""
    ids = [f"n{i}" for i in range(len(steps))] + ["end"]
    nodes = [task(ids[i], name, step, ids[i + 1]) for i, step in enumerate(steps)]
    return document(name, [*nodes, end()], **top)


def struct(doc: dict[str, Any]) -> struct_pb2.Struct:
    return json_format.ParseDict(doc, struct_pb2.Struct())


def value(obj: Any) -> struct_pb2.Value:
    return json_format.ParseDict(obj, struct_pb2.Value())


def plain(v: struct_pb2.Value) -> Any:
    """A Value as Python, whole numbers as ints."""
    return _ints(json_format.MessageToDict(v))


def _ints(obj: Any) -> Any:
    if isinstance(obj, float) and obj.is_integer():
        return int(obj)
    if isinstance(obj, dict):
        return {k: _ints(v) for k, v in obj.items()}
    if isinstance(obj, list):
        return [_ints(v) for v in obj]
    return obj


# ---------------------------------------------------------------------------- the server


class Up:
    """A running server, upstream's stub and ours."""

    def __init__(
        self, server: WiggleServer, channel: grpc.aio.Channel, clock: VirtualClock | None, store: str
    ) -> None:
        self.server = server
        self.stub = upb_grpc.WiggleControlPlaneStub(channel)
        self.ours = pb_grpc.WiggleControlPlaneStub(channel)
        self.clock = clock
        self.store = store

    async def fails(self, method: str, request: Message, code: grpc.StatusCode) -> str:
        """Call ``method`` of the upstream service; assert it fails with ``code``; its details."""
        with pytest.raises(grpc.aio.AioRpcError) as err:
            await getattr(self.stub, method)(request, timeout=15)
        got = err.value.code()
        details = err.value.details() or ""
        assert got == code, f"{method}: {got.name} {details!r}, expected {code.name}"
        assert details, f"{method} failed with {code.name} but no message"
        return details

    async def register(self, doc: dict[str, Any]) -> upb.RegisterWorkflowResult:
        return await self.stub.RegisterWorkflow(upb.WorkflowDefinition(definition=struct(doc)), timeout=15)

    async def start(
        self, workflow: str, context: dict[str, Any] | None = None, version: int | None = None
    ) -> str:
        request = upb.StartInstanceRequest(workflow=workflow, context=value(context or {}))
        if version is not None:
            request.version = version
        return str((await self.stub.StartInstance(request, timeout=15)).instance_id)

    async def poll(
        self,
        queue: str,
        worker: str = WORKER,
        lease_millis: int = 0,
        max_tasks: int = 1,
        wait_millis: int = 5000,
    ) -> list[upb.TaskActivation]:
        reply = await self.stub.PollTasks(
            upb.PollRequest(
                worker_id=worker,
                queues=[queue],
                max=max_tasks,
                lease_millis=lease_millis,
                wait_millis=wait_millis,
            ),
            timeout=15,
        )
        return list(reply.tasks)

    async def claim(self, queue: str, worker: str = WORKER, lease_millis: int = 0) -> upb.TaskActivation:
        """Exactly one task from ``queue``."""
        tasks = await self.poll(queue, worker, lease_millis)
        assert len(tasks) == 1, tasks
        return tasks[0]

    async def complete(self, t: upb.TaskActivation, result: Any = None) -> None:
        request = upb.TaskResultRequest(task_id=t.task_id, lease_owner=t.lease_owner)
        if result is not None:
            request.result.CopyFrom(value(result))
        await self.stub.CompleteTask(request, timeout=15)

    async def get(self, instance_id: str) -> upb.InstanceDetail:
        return await self.stub.GetInstance(upb.InstanceIdRequest(instance_id=instance_id), timeout=15)

    async def context(self, instance_id: str) -> Any:
        return plain((await self.get(instance_id)).instance.context)

    async def status(self, instance_id: str) -> str:
        return str((await self.get(instance_id)).instance.status)

    async def info(self, instance_id: str) -> pb.InstanceInfo:
        """Our own view of the instance (pending signals, tokens)."""
        return await self.ours.GetInstance(pb.GetInstanceRequest(instance_id=instance_id), timeout=15)

    async def history(self, instance_id: str) -> list[pb.HistoryEntry]:
        reply = await self.ours.GetHistory(pb.GetHistoryRequest(instance_id=instance_id), timeout=15)
        return list(reply.entries)

    async def snapshot(self) -> tuple[object, ...]:
        """Everything the store holds that a request could change, serialized."""
        ours = self.ours
        workflows = await ours.ListWorkflows(pb.ListWorkflowsRequest(), timeout=15)
        listed = await ours.ListInstances(pb.ListInstancesRequest(page_size=1000), timeout=15)
        state = []
        for summary in sorted(listed.instances, key=lambda i: i.instance_id):
            info = await self.info(summary.instance_id)
            entries = await self.history(summary.instance_id)
            state.append(
                (
                    info.SerializeToString(deterministic=True),
                    tuple(e.SerializeToString(deterministic=True) for e in entries),
                )
            )
        schedules = await ours.ListSchedules(pb.ListSchedulesRequest(), timeout=15)
        numbers = []
        for w in sorted({w.name for w in workflows.workflows}):
            got = await self.stub.GetWorkflow(upb.GetWorkflowRequest(name=w), timeout=15)
            numbers.append((w, msgspec.json.encode(json_format.MessageToDict(got.definition))))
        return (
            workflows.SerializeToString(deterministic=True),
            tuple(state),
            schedules.SerializeToString(deterministic=True),
            tuple(numbers),
        )


@contextlib.asynccontextmanager
async def open_server(
    store: str,
    clock: VirtualClock | None = None,
    credentials: grpc.ChannelCredentials | None = None,
    **settings: Any,
) -> AsyncIterator[Up]:
    """A WiggleServer on a free loopback port (``settings``: ServerConfig fields) and its stubs
    (over TLS with ``credentials``)."""
    async with contextlib.AsyncExitStack() as stack:
        fields: dict[str, Any] = {"port": 0, **settings}
        if store == "postgres":
            fields["database_url"] = TEST_DATABASE_URL
            fields["database_schema"] = await stack.enter_async_context(async_temp_schema())
            fields.setdefault("pool_size", 4)
        server = WiggleServer(ServerConfig(**fields), clock=clock)
        await server.start()
        stack.push_async_callback(server.stop, 0.5)
        channel = await stack.enter_async_context(
            grpc.aio.insecure_channel(server.target)
            if credentials is None
            else grpc.aio.secure_channel(server.target, credentials)
        )
        yield Up(server, channel, clock, store)
