"""Our values as upstream Wiggle's messages: instances, tokens, activations, schedules.

The upstream service (wiggle/_upstream/service.py) answers with these; contexts travel as
``google.protobuf.Value`` (wiggle/_upstream/values.py) and versions as int32
(wiggle/_upstream/versions.py). Nothing here reads a store.
"""

from __future__ import annotations

from typing import Any

from google.protobuf import struct_pb2

from .._engine.engine import Claimed
from .._engine.schedules import Schedule
from .._engine.state import Instance, Token, task_id_of
from .._model import NodeKind
from .._rpc.upstream import wiggle_pb2 as upb
from ..errors import InvalidArgument
from .definitions import activity_of
from .values import readable, to_value

__all__ = ["instance_view", "token_view", "activation", "schedule_view"]

_WORKER_KINDS = frozenset({NodeKind.TASK.value, NodeKind.PREDICATE.value})


def instance_view(inst: Instance, version: int) -> upb.InstanceView:
    """An instance as upstream's InstanceView (``version`` already translated)."""
    view = upb.InstanceView(
        id=inst.id,
        workflow=inst.workflow,
        version=version,
        status=str(inst.status.value if hasattr(inst.status, "value") else inst.status),
        context=_shown(inst.context),
        created_at=inst.created_at,
        updated_at=inst.updated_at,
    )
    if inst.reason:
        view.termination_reason = inst.reason
    if inst.error:
        view.error = inst.error
    return view


def _shown(context: dict[str, Any]) -> struct_pb2.Value:
    """A context as a Value for a read: an integer no double holds exactly shows as its text."""
    try:
        return to_value(context, "the context")
    except InvalidArgument:
        return to_value(readable(context), "the context")


def token_view(workflow: str, token: Token) -> upb.Token:
    """An active token as upstream's Token."""
    view = upb.Token(
        # while leased, the claim's task id (what a report names: docs/semantics.md#fencing)
        id=task_id_of(token) if token.lease_owner else token.id,
        node_id=token.node_id,
        kind=token.kind,
        status=str(token.status.value if hasattr(token.status, "value") else token.status),
        activity=activity_of(workflow, token.node_id) if token.kind in _WORKER_KINDS else "",
        attempt=token.attempt,
        available_at=token.available_at,
    )
    if token.lease_owner:
        view.lease_owner = token.lease_owner
    if token.last_error:
        view.last_error = token.last_error
    return view


def activation(claimed: Claimed, version: int) -> upb.TaskActivation:
    """A claimed step as upstream's TaskActivation: ``step_name`` is the node id, ``activity`` is
    what upstream workers look their handler up by."""
    token = claimed.token
    inst = claimed.instance
    return upb.TaskActivation(
        task_id=claimed.task_id,  # <token>@<claim>: upstream's workers echo it (docs/semantics.md#fencing)
        instance_id=inst.id,
        workflow=inst.workflow,
        version=version,
        node_id=token.node_id,
        step_name=token.node_id,
        activity=activity_of(inst.workflow, token.node_id),
        kind=token.kind,
        attempt=token.attempt,
        lease_expires_at=token.lease_expires_at,
        lease_owner=token.lease_owner,
        context=to_value(claimed.context, "the context"),
        execution_mode=claimed.execution_mode,
    )


def schedule_view(schedule: Schedule) -> upb.ScheduleView:
    """A schedule as upstream's ScheduleView (every_millis or cron)."""
    return upb.ScheduleView(
        id=schedule.id,
        workflow=schedule.workflow,
        every_millis=schedule.interval_millis,
        cron=schedule.cron,
        next_fire_at=schedule.next_tick_at,
        created_at=schedule.created_at,
    )
