"""Upstream workers' reports and signals, as transitions inside the store's transaction.

Each function hands one action to ``Instances.mutate`` (wiggle/_server/instances.py): the action
runs under the store's instance lock on the state just loaded, so an upstream diff is applied
to the context as it is in the store, never to a cached copy, on any server of a cluster.

Upstream's conflicts get upstream's codes: a report on a task that is no longer leased to the
sender (finished, moved on, re-leased after its lease ran out) is NOT_FOUND, the code its client
treats as an expected race; a signal to an instance that waits for no such signal is
FAILED_PRECONDITION (docs/upstream.md#errors).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import msgspec
from google.protobuf import struct_pb2

from .._engine.config import LoadedDefinition
from .._engine.local_runs import AdvanceOutcome
from .._engine.records import PredicateDone, StepRecord, TaskDone
from .._engine.state import Changes, InstanceState, InstanceStatus, TokenStatus, token_instance_id
from .._engine.tokens import leased_token
from .._model import NodeKind
from .._rpc.upstream import wiggle_pb2 as upb
from .._server.clock_duties import token_missing
from .._server.instances import Instances
from ..errors import FailedPrecondition, InvalidArgument, NotFound
from .values import diff_from_value

__all__ = ["complete", "fail", "heartbeat", "advance", "signal_waiting", "Advanced"]


class Advanced(msgspec.Struct):
    """What upstream's AdvanceRun answers."""

    instance_status: str
    lease_expires_at: int
    next_task_id: str  # the task the worker still holds ("" once it holds none)
    applied_steps: int


def _held(state: InstanceState, token_id: str, owner: str) -> None:
    """NotFound unless ``token_id`` is RUNNING and leased to ``owner`` (upstream's code for it)."""
    try:
        leased_token(state, token_id, owner)
    except FailedPrecondition as exc:
        raise NotFound(f"task {token_id} is not leased to {owner[:200]!r}: {exc}") from None


def _predicate_value(result: struct_pb2.Value | None, node_id: str) -> bool:
    """Upstream completes a predicate with ``{"value": <bool>}``."""
    if result is not None and result.WhichOneof("kind") == "struct_value":
        value = result.struct_value.fields.get("value")
        if value is not None and value.WhichOneof("kind") == "bool_value":
            return value.bool_value
    raise InvalidArgument(
        f'step {node_id!r} is a PREDICATE: complete it with {{"value": true}} or {{"value": false}}'
    )


async def complete(instances: Instances, token_id: str, owner: str, result: struct_pb2.Value | None) -> str:
    """CompleteTask: a task's shallow diff or a predicate's value; the instance status."""
    engine = instances.engine

    def action(loaded: LoadedDefinition, state: InstanceState, now: int) -> tuple[None, Changes]:
        _held(state, token_id, owner)
        node = loaded.nodes[leased_token(state, token_id, owner).node_id]
        if node.kind is NodeKind.PREDICATE:
            value = _predicate_value(result, node.id)
            return None, engine.complete(loaded, state, token_id, owner, now, predicate_value=value)
        diff = diff_from_value(result)
        return None, engine.complete(loaded, state, token_id, owner, now, diff=diff)

    _, state = await instances.mutate(token_instance_id(token_id), token_missing(token_id), action)
    return str(state.instance.status)


async def fail(instances: Instances, token_id: str, owner: str, message: str, retryable: bool) -> str:
    """FailTask; the instance status."""
    engine = instances.engine

    def action(loaded: LoadedDefinition, state: InstanceState, now: int) -> tuple[None, Changes]:
        _held(state, token_id, owner)
        return None, engine.fail(loaded, state, token_id, owner, message, retryable, now)

    _, state = await instances.mutate(token_instance_id(token_id), token_missing(token_id), action)
    return str(state.instance.status)


async def heartbeat(instances: Instances, token_id: str, owner: str, extend_millis: int | None) -> int:
    """HeartbeatTask: the lease's new expiry."""
    engine = instances.engine

    def action(loaded: LoadedDefinition, state: InstanceState, now: int) -> tuple[int, Changes]:
        _held(state, token_id, owner)
        return engine.heartbeat(loaded, state, token_id, owner, now, extend_millis=extend_millis)

    expires, _ = await instances.mutate(token_instance_id(token_id), token_missing(token_id), action)
    return expires


def step_records(steps: Sequence[upb.StepResult]) -> list[StepRecord]:
    """Upstream's StepResults as our step records: a merge is a task's diff, else a predicate."""
    records: list[StepRecord] = []
    for i, step in enumerate(steps):
        if not step.node_id:
            raise InvalidArgument(f"steps[{i}] names no node_id")
        which = step.WhichOneof("outcome")
        if which == "predicate_value":
            records.append(PredicateDone(step.node_id, step.predicate_value))
        else:
            changed, removed = diff_from_value(step.merge if which == "merge" else None)
            records.append(TaskDone(step.node_id, changed, removed))
    return records


async def advance(
    instances: Instances, token_id: str, owner: str, steps: Sequence[upb.StepResult], final: bool
) -> Advanced:
    """AdvanceRun: apply a local run's steps in one transition (wiggle/_engine/local_runs.py)."""
    records = step_records(steps)
    engine = instances.engine

    def action(loaded: LoadedDefinition, state: InstanceState, now: int) -> tuple[AdvanceOutcome, Changes]:
        if state.instance.status == InstanceStatus.RUNNING:  # a finished one answers NOT_RUNNING
            _held(state, token_id, owner)
        return engine.advance_run(loaded, state, token_id, owner, records, final, now, "")

    outcome, _ = await instances.mutate(token_instance_id(token_id), token_missing(token_id), action)
    holding = outcome.token_status == TokenStatus.RUNNING and not final
    return Advanced(
        instance_status=str(outcome.instance_status),
        lease_expires_at=outcome.lease_expires_at,
        next_task_id=outcome.token_id if holding else "",
        applied_steps=outcome.applied_steps,
    )


async def signal_waiting(instances: Instances, instance_id: str, name: str, data: dict[str, Any]) -> None:
    """Deliver the signal ``name`` to a step waiting for it; FailedPrecondition if none waits."""
    engine = instances.engine

    def action(loaded: LoadedDefinition, state: InstanceState, now: int) -> tuple[str, Changes | None]:
        if not any(n.kind is NodeKind.SIGNAL and n.signal == name for n in loaded.definition.nodes):
            # no step of this workflow waits for it: the engine's NOT_FOUND names the ones that do
            return engine.signal(loaded, state, name, data, "", "upstream client", now)
        waiting = any(
            t.status == TokenStatus.AWAITING
            and loaded.nodes[t.node_id].kind is NodeKind.SIGNAL
            and loaded.nodes[t.node_id].signal == name
            for t in state.tokens.values()
        )
        if not waiting:
            inst = state.instance
            raise FailedPrecondition(
                f"instance {inst.id} ({inst.status}) is not waiting for signal {name!r}; "
                "nothing was delivered"
            )
        return engine.signal(loaded, state, name, data, "", "upstream client", now)

    await instances.mutate(instance_id, f"instance {instance_id} does not exist", action)
