"""The blocking client, ``Client``: generated, do not edit.

Made by scripts/gen_sync_client.py from wiggle/_client/aio.py (the asyncio client, which is the
source of truth); tests/server/test_client_drift.py fails when the two drift apart.
"""

from __future__ import annotations

import builtins
from typing import Any

import grpc
from google.protobuf.message import Message

from .. import _tracing as tracing
from .._model import WorkflowDefinition
from .._rpc import wiggle_pb2 as pb
from .._rpc import wiggle_pb2_grpc as pb_grpc
from .._wire.convert import history_from_pb, instance_from_pb, queue_from_pb, workflow_from_pb
from .._wire.status import error_from_rpc
from ..workflow import Blueprint
from . import core
from .types import HistoryEntry, InstanceInfo, QueueInfo, WorkflowInfo

__all__ = ["Client"]


class Client:
    """A client of the control plane. ``Client("127.0.0.1:7233")``; close it or use ``with``.

    Errors arrive as ``wiggle.errors`` exceptions carrying the server's message.
    """

    def __init__(self, target: str = core.DEFAULT_TARGET, channel: grpc.Channel | None = None) -> None:
        self.target = target
        self._channel = channel or grpc.insecure_channel(target, options=core.CHANNEL_OPTIONS)
        self.stub = pb_grpc.WiggleControlPlaneStub(self._channel)

    @property
    def channel(self) -> grpc.Channel:
        """The underlying channel (a worker shares it)."""
        return self._channel

    def close(self) -> None:
        """Close the channel."""
        self._channel.close()

    def __enter__(self) -> Client:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def _call(self, rpc: Any, request: Message, timeout: float = core.CALL_TIMEOUT) -> Any:
        # rpc is a stub method (untyped generated code); the caller converts the reply it returns
        try:
            return rpc(request, timeout=timeout, metadata=tracing.outgoing_metadata())
        except grpc.RpcError as exc:
            raise error_from_rpc(exc) from None

    def register(self, workflow: Blueprint[Any] | WorkflowDefinition) -> WorkflowInfo:
        """Register a workflow version (a no-op if this exact graph is registered already)."""
        reply = self._call(self.stub.RegisterWorkflow, core.register_request(workflow))
        return workflow_from_pb(reply)

    def get_workflow(self, name: str, version: str = "") -> WorkflowInfo:
        """A registered workflow (the latest version unless ``version`` is given)."""
        reply = self._call(self.stub.GetWorkflow, pb.GetWorkflowRequest(name=name, version=version))
        return workflow_from_pb(reply)

    def list_workflows(self, name: str = "") -> builtins.list[WorkflowInfo]:
        """Every registered workflow version (of ``name``)."""
        reply = self._call(self.stub.ListWorkflows, pb.ListWorkflowsRequest(name=name))
        return [workflow_from_pb(w) for w in reply.workflows]

    def start(
        self,
        workflow: str | Blueprint[Any],
        context: Any = None,
        *,
        version: str = "",
        correlation_id: str = "",
    ) -> InstanceInfo:
        """Start an instance; ``context`` is a dict or msgspec.Struct. Pins ``version`` if given."""
        request = core.start_request(workflow, context, version, correlation_id)
        with tracing.span("wiggle.start", tracing.CLIENT, attributes={"wiggle.workflow": request.workflow}):
            return instance_from_pb(self._call(self.stub.StartInstance, request))

    def get(self, instance_id: str) -> InstanceInfo:
        """The instance as it is now."""
        reply = self._call(self.stub.GetInstance, pb.GetInstanceRequest(instance_id=instance_id))
        return instance_from_pb(reply)

    def wait(self, instance_id: str, timeout: float = 60.0) -> InstanceInfo:
        """Wait until the instance finishes (any status) or ``timeout`` passes; returns the snapshot."""
        clock = core.WaitClock(timeout)
        while True:
            request, call_timeout = clock.request(instance_id)
            info = instance_from_pb(self._call(self.stub.GetInstance, request, call_timeout))
            if clock.done(info):
                return info

    def result(self, instance_id: str, timeout: float = 60.0) -> InstanceInfo:
        """Wait for completion; raise WorkflowFailed if it FAILED or was CANCELLED, TimeoutError if still running."""
        return core.check_result(self.wait(instance_id, timeout), timeout)

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
        request = core.list_request(
            workflow, status, correlation_id, created_after, created_before, page_size, page_token
        )
        reply = self._call(self.stub.ListInstances, request)
        return [instance_from_pb(i) for i in reply.instances], reply.next_page_token

    def cancel(self, instance_id: str, reason: str = "cancelled") -> tuple[InstanceInfo, bool]:
        """Cancel a running instance; (snapshot, changed). A finished instance is left as it is."""
        request = pb.CancelInstanceRequest(instance_id=instance_id, reason=reason)
        reply = self._call(self.stub.CancelInstance, request)
        return instance_from_pb(reply.instance), reply.changed

    def complete_user_task(self, instance_id: str, name: str, data: Any = None) -> InstanceInfo:
        """Complete the user task ``name``; ``data`` (a dict) merges into the context."""
        request = core.complete_user_task_request(instance_id, name, data)
        return instance_from_pb(self._call(self.stub.CompleteUserTask, request))

    def history(self, instance_id: str) -> builtins.list[HistoryEntry]:
        """Every step attempt and event of the instance, in order."""
        reply = self._call(self.stub.GetHistory, pb.GetHistoryRequest(instance_id=instance_id))
        return [history_from_pb(e) for e in reply.entries]

    def queues(self) -> builtins.list[QueueInfo]:
        """Every queue with ready or leased steps, and the workers polling it (the answering node)."""
        reply = self._call(self.stub.ListQueues, pb.ListQueuesRequest())
        return [queue_from_pb(q) for q in reply.queues]
