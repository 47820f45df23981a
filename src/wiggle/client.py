"""Clients of the control plane: ``Client`` (blocking) and ``AsyncClient`` (asyncio).

Both register workflows, start instances, read them, wait for them, list, cancel and complete
user tasks. Errors arrive as ``wiggle.errors`` exceptions carrying the server's message.
"""

from __future__ import annotations

import builtins
import time
from typing import Any

import grpc
import msgspec

from ._model import WorkflowDefinition
from ._rpc import wiggle_pb2 as pb
from ._rpc import wiggle_pb2_grpc as pb_grpc
from ._wire.status import error_from_rpc
from .errors import WorkflowFailed
from .workflow import Blueprint

__all__ = [
    "Client",
    "AsyncClient",
    "InstanceInfo",
    "TokenInfo",
    "HistoryEntry",
    "WorkflowInfo",
    "DEFAULT_TARGET",
]

DEFAULT_TARGET = "127.0.0.1:7233"
FINISHED = ("COMPLETED", "FAILED", "CANCELLED")
_encode = msgspec.json.Encoder().encode
CHANNEL_OPTIONS = [
    ("grpc.max_receive_message_length", 64 << 20),
    ("grpc.max_send_message_length", 64 << 20),
    ("grpc.keepalive_time_ms", 30_000),
]


class TokenInfo(msgspec.Struct, frozen=True):
    """An active token: where an instance is, and who holds it."""

    token_id: str
    node_id: str
    status: str
    attempt: int
    queue: str
    lease_owner: str
    lease_expires_at: int
    available_at: int
    last_error: str
    local_run_owner: str  # a worker holds this token in a local run (LOCAL_SYNC / LOCAL_ASYNC)
    local_run_steps: int


class InstanceInfo(msgspec.Struct, frozen=True):
    """A snapshot of an instance."""

    instance_id: str
    workflow: str
    version: str
    status: str
    context: dict[str, Any]
    correlation_id: str
    reason: str
    error: str
    created_at: int
    updated_at: int
    finished_at: int
    tokens: tuple[TokenInfo, ...] = ()

    @property
    def finished(self) -> bool:
        """True once COMPLETED, FAILED or CANCELLED."""
        return self.status in FINISHED


class HistoryEntry(msgspec.Struct, frozen=True):
    """One step attempt or server event of an instance."""

    token_id: str
    node_id: str
    kind: str
    attempt: int
    worker_id: str
    started_at: int
    ended_at: int
    outcome: str
    error: str


class WorkflowInfo(msgspec.Struct, frozen=True):
    """A registered workflow version."""

    name: str
    version: str
    definition: WorkflowDefinition
    registered_at: int
    created: bool = False


def _to_definition_json(workflow: Blueprint[Any] | WorkflowDefinition) -> bytes:
    if isinstance(workflow, Blueprint):
        return workflow.definition.to_json()
    if isinstance(workflow, WorkflowDefinition):
        return workflow.to_json()
    raise TypeError(f"register() takes a Blueprint or WorkflowDefinition, got {type(workflow).__name__}")


def _context_json(context: Any) -> bytes:
    if context is None:
        return b""
    return _encode(msgspec.to_builtins(context))


def instance_from_pb(msg: pb.InstanceInfo) -> InstanceInfo:
    """Convert the wire form."""
    return InstanceInfo(
        instance_id=msg.instance_id,
        workflow=msg.workflow,
        version=msg.version,
        status=msg.status,
        context=msgspec.json.decode(msg.context_json) if msg.context_json else {},
        correlation_id=msg.correlation_id,
        reason=msg.reason,
        error=msg.error,
        created_at=msg.created_at,
        updated_at=msg.updated_at,
        finished_at=msg.finished_at,
        tokens=tuple(
            TokenInfo(
                token_id=t.token_id,
                node_id=t.node_id,
                status=t.status,
                attempt=t.attempt,
                queue=t.queue,
                lease_owner=t.lease_owner,
                lease_expires_at=t.lease_expires_at,
                available_at=t.available_at,
                last_error=t.last_error,
                local_run_owner=t.local_run_owner,
                local_run_steps=t.local_run_steps,
            )
            for t in msg.tokens
        ),
    )


def _workflow_from_pb(msg: pb.WorkflowInfo) -> WorkflowInfo:
    return WorkflowInfo(
        name=msg.name,
        version=msg.version,
        definition=msgspec.json.decode(msg.definition_json, type=WorkflowDefinition),
        registered_at=msg.registered_at,
        created=msg.created,
    )


def _history_from_pb(msg: pb.GetHistoryResponse) -> list[HistoryEntry]:
    return [
        HistoryEntry(
            token_id=e.token_id,
            node_id=e.node_id,
            kind=e.kind,
            attempt=e.attempt,
            worker_id=e.worker_id,
            started_at=e.started_at,
            ended_at=e.ended_at,
            outcome=e.outcome,
            error=e.error,
        )
        for e in msg.entries
    ]


def _list_request(
    workflow: str,
    status: str,
    correlation_id: str,
    created_after: int,
    created_before: int,
    page_size: int,
    page_token: str,
) -> pb.ListInstancesRequest:
    return pb.ListInstancesRequest(
        workflow=workflow,
        status=status,
        correlation_id=correlation_id,
        created_after=created_after,
        created_before=created_before,
        page_size=page_size,
        page_token=page_token,
    )


def _check_result(info: InstanceInfo) -> InstanceInfo:
    if info.status in ("FAILED", "CANCELLED"):
        raise WorkflowFailed(f"instance {info.instance_id} {info.status}: {info.error or info.reason}")
    return info


class Client:
    """A blocking client. ``Client("127.0.0.1:7233")``; use as a context manager or ``close()``."""

    def __init__(self, target: str = DEFAULT_TARGET) -> None:
        self.target = target
        self._channel = grpc.insecure_channel(target, options=CHANNEL_OPTIONS)
        self._stub = pb_grpc.WiggleControlPlaneStub(self._channel)

    def close(self) -> None:
        """Close the channel."""
        self._channel.close()

    def __enter__(self) -> Client:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def _call(self, method: str, request: Any, timeout: float | None = 30.0) -> Any:
        try:
            return getattr(self._stub, method)(request, timeout=timeout)
        except grpc.RpcError as exc:
            raise error_from_rpc(exc) from None

    def register(self, workflow: Blueprint[Any] | WorkflowDefinition) -> WorkflowInfo:
        """Register a workflow version (a no-op if this exact graph is registered already)."""
        return _workflow_from_pb(
            self._call(
                "RegisterWorkflow", pb.RegisterWorkflowRequest(definition_json=_to_definition_json(workflow))
            )
        )

    def get_workflow(self, name: str, version: str = "") -> WorkflowInfo:
        """A registered workflow (the latest version unless ``version`` is given)."""
        return _workflow_from_pb(self._call("GetWorkflow", pb.GetWorkflowRequest(name=name, version=version)))

    def list_workflows(self, name: str = "") -> builtins.list[WorkflowInfo]:
        """Every registered workflow version (of ``name``)."""
        return [
            _workflow_from_pb(w)
            for w in self._call("ListWorkflows", pb.ListWorkflowsRequest(name=name)).workflows
        ]

    def start(
        self,
        workflow: str | Blueprint[Any],
        context: Any = None,
        *,
        version: str = "",
        correlation_id: str = "",
    ) -> InstanceInfo:
        """Start an instance; ``context`` is a dict or msgspec.Struct. Pins ``version`` if given."""
        name = workflow.name if isinstance(workflow, Blueprint) else workflow
        request = pb.StartInstanceRequest(
            workflow=name, version=version, context_json=_context_json(context), correlation_id=correlation_id
        )
        return instance_from_pb(self._call("StartInstance", request))

    def get(self, instance_id: str) -> InstanceInfo:
        """The instance as it is now."""
        return instance_from_pb(self._call("GetInstance", pb.GetInstanceRequest(instance_id=instance_id)))

    def wait(self, instance_id: str, timeout: float = 60.0) -> InstanceInfo:
        """Wait until the instance finishes (any status) or ``timeout`` passes; returns the snapshot."""
        deadline = time.monotonic() + timeout
        while True:
            remaining = deadline - time.monotonic()
            wait_ms = max(int(min(remaining, 30.0) * 1000), 0)
            info = instance_from_pb(
                self._call(
                    "GetInstance",
                    pb.GetInstanceRequest(instance_id=instance_id, wait_millis=wait_ms),
                    timeout=wait_ms / 1000 + 30,
                )
            )
            if info.finished or remaining <= 0:
                return info

    def result(self, instance_id: str, timeout: float = 60.0) -> InstanceInfo:
        """Wait for completion; raise WorkflowFailed if it FAILED or was CANCELLED, TimeoutError if still running."""
        info = self.wait(instance_id, timeout)
        if not info.finished:
            raise TimeoutError(f"instance {instance_id} is still {info.status} after {timeout} s")
        return _check_result(info)

    def list(
        self,
        *,
        workflow: str = "",
        status: str = "",
        correlation_id: str = "",
        created_after: int = 0,
        created_before: int = 0,
        page_size: int = 50,
        page_token: str = "",
    ) -> tuple[builtins.list[InstanceInfo], str]:
        """One page of instances (newest first) and the next page token ('' on the last page)."""
        response = self._call(
            "ListInstances",
            _list_request(
                workflow, status, correlation_id, created_after, created_before, page_size, page_token
            ),
        )
        return [instance_from_pb(i) for i in response.instances], response.next_page_token

    def cancel(self, instance_id: str, reason: str = "cancelled") -> tuple[InstanceInfo, bool]:
        """Cancel a running instance; (snapshot, changed). A finished instance is left as it is."""
        response = self._call(
            "CancelInstance", pb.CancelInstanceRequest(instance_id=instance_id, reason=reason)
        )
        return instance_from_pb(response.instance), response.changed

    def complete_user_task(self, instance_id: str, name: str, data: Any = None) -> InstanceInfo:
        """Complete the user task ``name``; ``data`` (a dict) merges into the context."""
        request = pb.CompleteUserTaskRequest(
            instance_id=instance_id, task_name=name, payload_json=_context_json(data)
        )
        return instance_from_pb(self._call("CompleteUserTask", request))

    def history(self, instance_id: str) -> builtins.list[HistoryEntry]:
        """Every step attempt and event of the instance, in order."""
        return _history_from_pb(self._call("GetHistory", pb.GetHistoryRequest(instance_id=instance_id)))


class AsyncClient:
    """The asyncio client; same methods as ``Client``, as coroutines."""

    def __init__(self, target: str = DEFAULT_TARGET, channel: grpc.aio.Channel | None = None) -> None:
        self.target = target
        self._channel = channel or grpc.aio.insecure_channel(target, options=CHANNEL_OPTIONS)
        self.stub = pb_grpc.WiggleControlPlaneStub(self._channel)

    @property
    def channel(self) -> grpc.aio.Channel:
        """The underlying channel (the worker shares it)."""
        return self._channel

    async def close(self) -> None:
        """Close the channel."""
        await self._channel.close()

    async def __aenter__(self) -> AsyncClient:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.close()

    async def _call(self, method: str, request: Any, timeout: float | None = 30.0) -> Any:
        try:
            return await getattr(self.stub, method)(request, timeout=timeout)
        except grpc.aio.AioRpcError as exc:
            raise error_from_rpc(exc) from None

    async def register(self, workflow: Blueprint[Any] | WorkflowDefinition) -> WorkflowInfo:
        """See Client.register."""
        return _workflow_from_pb(
            await self._call(
                "RegisterWorkflow", pb.RegisterWorkflowRequest(definition_json=_to_definition_json(workflow))
            )
        )

    async def get_workflow(self, name: str, version: str = "") -> WorkflowInfo:
        """See Client.get_workflow."""
        return _workflow_from_pb(
            await self._call("GetWorkflow", pb.GetWorkflowRequest(name=name, version=version))
        )

    async def list_workflows(self, name: str = "") -> builtins.list[WorkflowInfo]:
        """See Client.list_workflows."""
        return [
            _workflow_from_pb(w)
            for w in (await self._call("ListWorkflows", pb.ListWorkflowsRequest(name=name))).workflows
        ]

    async def start(
        self,
        workflow: str | Blueprint[Any],
        context: Any = None,
        *,
        version: str = "",
        correlation_id: str = "",
    ) -> InstanceInfo:
        """See Client.start."""
        name = workflow.name if isinstance(workflow, Blueprint) else workflow
        request = pb.StartInstanceRequest(
            workflow=name, version=version, context_json=_context_json(context), correlation_id=correlation_id
        )
        return instance_from_pb(await self._call("StartInstance", request))

    async def get(self, instance_id: str) -> InstanceInfo:
        """See Client.get."""
        return instance_from_pb(
            await self._call("GetInstance", pb.GetInstanceRequest(instance_id=instance_id))
        )

    async def wait(self, instance_id: str, timeout: float = 60.0) -> InstanceInfo:
        """See Client.wait."""
        deadline = time.monotonic() + timeout
        while True:
            remaining = deadline - time.monotonic()
            wait_ms = max(int(min(remaining, 30.0) * 1000), 0)
            info = instance_from_pb(
                await self._call(
                    "GetInstance",
                    pb.GetInstanceRequest(instance_id=instance_id, wait_millis=wait_ms),
                    timeout=wait_ms / 1000 + 30,
                )
            )
            if info.finished or remaining <= 0:
                return info

    async def result(self, instance_id: str, timeout: float = 60.0) -> InstanceInfo:
        """See Client.result."""
        info = await self.wait(instance_id, timeout)
        if not info.finished:
            raise TimeoutError(f"instance {instance_id} is still {info.status} after {timeout} s")
        return _check_result(info)

    async def list(
        self,
        *,
        workflow: str = "",
        status: str = "",
        correlation_id: str = "",
        created_after: int = 0,
        created_before: int = 0,
        page_size: int = 50,
        page_token: str = "",
    ) -> tuple[builtins.list[InstanceInfo], str]:
        """See Client.list."""
        response = await self._call(
            "ListInstances",
            _list_request(
                workflow, status, correlation_id, created_after, created_before, page_size, page_token
            ),
        )
        return [instance_from_pb(i) for i in response.instances], response.next_page_token

    async def cancel(self, instance_id: str, reason: str = "cancelled") -> tuple[InstanceInfo, bool]:
        """See Client.cancel."""
        response = await self._call(
            "CancelInstance", pb.CancelInstanceRequest(instance_id=instance_id, reason=reason)
        )
        return instance_from_pb(response.instance), response.changed

    async def complete_user_task(self, instance_id: str, name: str, data: Any = None) -> InstanceInfo:
        """See Client.complete_user_task."""
        request = pb.CompleteUserTaskRequest(
            instance_id=instance_id, task_name=name, payload_json=_context_json(data)
        )
        return instance_from_pb(await self._call("CompleteUserTask", request))

    async def history(self, instance_id: str) -> builtins.list[HistoryEntry]:
        """See Client.history."""
        return _history_from_pb(await self._call("GetHistory", pb.GetHistoryRequest(instance_id=instance_id)))
