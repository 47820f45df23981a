"""Signals: deliver a named signal to an instance, buffer it, or consume a buffered one.

docs/semantics.md#signal has the rules. A SIGNAL node parks its token AWAITING (like a user task,
with an optional deadline handled by clock.user_task_deadline). A signal sent while no token waits
for it is buffered on the instance (``Instance.signals``) and consumed, oldest first, when a token
arrives at a wait for that name. Pure transitions, no I/O; input is validated before anything
changes.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from .._model import Node, NodeKind
from ..errors import FailedPrecondition, InvalidArgument, NotFound
from .config import LoadedDefinition
from .state import (
    FINISHED_INSTANCE_STATUSES,
    Changes,
    HistoryOutcome,
    InstanceState,
    PendingSignal,
    Token,
    TokenStatus,
)
from .tokens import context_of, fail_instance, move, record, set_context

if TYPE_CHECKING:
    from .engine import Engine

__all__ = ["SignalOutcome", "signal", "take_buffered", "MAX_SIGNAL_IDS", "MAX_BUFFERED_SIGNALS"]

#: How many of the latest signal ids an instance remembers to detect duplicates.
MAX_SIGNAL_IDS = 1000
#: How many signals an instance may buffer (unconsumed) at once.
MAX_BUFFERED_SIGNALS = 1000


class SignalOutcome:
    """What became of a signal: delivered to a waiting token, buffered, or a duplicate."""

    DELIVERED = "DELIVERED"
    BUFFERED = "BUFFERED"
    DUPLICATE = "DUPLICATE"


def _merged(node: Node, context: dict[str, Any], data: dict[str, Any]) -> dict[str, Any]:
    if node.result_key:
        return {**context, node.result_key: data}
    return {**context, **data}


def _sender(name: str, sender: str) -> str:
    return f"(signal {name}" + (f" from {sender})" if sender else ")")


def signal(
    engine: Engine,
    loaded: LoadedDefinition,
    state: InstanceState,
    name: str,
    data: dict[str, Any],
    signal_id: str,
    sender: str,
    now: int,
) -> tuple[str, Changes | None]:
    """Send the signal ``name`` with ``data`` to the instance: (a SignalOutcome value, changes).

    A duplicate (a ``signal_id`` already taken) changes nothing, whatever the instance's status.
    A name no SIGNAL node of the instance's version waits for is NOT_FOUND; a finished instance
    is FAILED_PRECONDITION.
    """
    inst = state.instance
    if signal_id and signal_id in inst.signal_ids:
        # A resend of a signal already taken (even if the instance has finished since): a no-op.
        return SignalOutcome.DUPLICATE, None
    waits = [n for n in loaded.definition.nodes if n.kind is NodeKind.SIGNAL and n.signal == name]
    task = loaded.nodes.get(name)
    if not waits and task is not None and task.kind is NodeKind.USER_TASK:
        # A user task is the unbuffered kind of signal wait: a signal named after it completes it
        # exactly as CompleteUserTask would (refused, changing nothing, if it is not awaited).
        changes = engine.complete_user_task(loaded, state, name, data, now)
        _remember(state, signal_id)
        return SignalOutcome.DELIVERED, changes
    if not waits:
        names = sorted({n.signal for n in loaded.definition.nodes if n.kind is NodeKind.SIGNAL if n.signal})
        raise NotFound(
            f"workflow {inst.workflow!r} (version {inst.version}) waits for no signal {name!r}"
            + (f"; it waits for {', '.join(map(repr, names))}" if names else "; it has no signal wait")
        )
    if inst.status in FINISHED_INSTANCE_STATUSES:
        raise FailedPrecondition(
            f"instance {inst.id} is {inst.status}; the signal {name!r} was not delivered "
            "(only a RUNNING instance takes signals)"
        )
    engine.check_context(data, "signal data")
    waiting = [
        t
        for t in state.tokens.values()
        if t.status == TokenStatus.AWAITING
        and loaded.nodes[t.node_id].kind is NodeKind.SIGNAL
        and loaded.nodes[t.node_id].signal == name
    ]
    changes = Changes()
    if waiting:
        token = min(waiting, key=lambda t: (t.created_at, int(t.id.rpartition(".")[2])))  # the oldest
        node = loaded.nodes[token.node_id]
        merged = _merged(node, context_of(state, token), data)
        engine.check_context(merged, "context after the signal data")
        _remember(state, signal_id)
        _deliver(state, token, node, merged, _sender(name, sender), now, changes)
        changes.instance_changed = True
        inst.updated_at = now
        engine.drive(loaded, state, token, now, changes)
        return SignalOutcome.DELIVERED, changes
    if len(inst.signals) >= MAX_BUFFERED_SIGNALS:
        raise FailedPrecondition(
            f"instance {inst.id} already buffers {len(inst.signals)} signals that no wait has consumed "
            f"(the limit is {MAX_BUFFERED_SIGNALS}); the signal {name!r} was refused"
        )
    _remember(state, signal_id)
    inst.signals = [
        *inst.signals,
        PendingSignal(name=name, data=data, signal_id=signal_id, sent_at=now, sender=sender),
    ]
    inst.updated_at = now
    changes.instance_changed = True
    return SignalOutcome.BUFFERED, changes


def _remember(state: InstanceState, signal_id: str) -> None:
    if signal_id:
        state.instance.signal_ids = [*state.instance.signal_ids, signal_id][-MAX_SIGNAL_IDS:]


def _deliver(
    state: InstanceState,
    token: Token,
    node: Node,
    merged: dict[str, Any],
    who: str,
    now: int,
    changes: Changes,
) -> None:
    set_context(state, token, merged, changes)
    record(state, token, node, HistoryOutcome.SIGNALLED, now, changes, worker=who, started=token.started_at)
    assert node.next is not None
    move(token, node.next)


def take_buffered(
    engine: Engine, state: InstanceState, token: Token, node: Node, now: int, changes: Changes
) -> bool:
    """At a SIGNAL node: consume the oldest buffered signal of its name; True if the token moved on.

    Called by the drive loop when a token arrives. A merged context over the payload limit fails
    the instance (the data fit when it was buffered; the context grew since).
    """
    inst = state.instance
    for i, pending in enumerate(inst.signals):
        if pending.name != node.signal:
            continue
        merged = _merged(node, context_of(state, token), pending.data)
        inst.signals = inst.signals[:i] + inst.signals[i + 1 :]
        changes.instance_changed = True
        try:
            engine.check_context(merged, "context after the signal data")
        except InvalidArgument as exc:
            fail_instance(state, f"signal wait {node.id!r}: {exc}", now, changes, failed=token)
            return False
        token.started_at = now  # a buffered signal: the wait took no time
        _deliver(state, token, node, merged, _sender(pending.name, pending.sender), now, changes)
        return True
    return False
