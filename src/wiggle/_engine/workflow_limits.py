"""Workflow-level concurrency limits (docs/flow-control.md#workflow-concurrency).

``Workflow.define(name, concurrency=Limit(key="account_id", max=1, strategy="queue"))`` lets at
most ``max`` instances of the workflow be *live* (RUNNING: started and not finished, whatever it
waits on) per value of the context key. The engine only labels and holds: an instance of a
limited workflow never becomes RUNNING by itself. Its start (or a delayed start's time, or a
retry) leaves it SCHEDULED *waiting for a slot* (``conc_since`` set, no active token), and an
*admission* decides, under a per-key lock held by the store (wiggle/_storage/memory.py,
wiggle/_storage/postgres/workflow_limits.py), from the key's live and waiting instances as they
are then, which waiting ones begin and which instances are cancelled (``decide``); ``admit``
begins one. The count is the instance rows themselves: nothing is kept that a crash could leak.

The instance layer runs an admission after every commit that may change a key's count or queue
(a start, a finish, a hold; wiggle/_server/workflow_limits.py), and the clock duties sweep the
keys with waiting instances now and then, so one lost to a crash between the commit and its
admission is made good.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import msgspec

from .._model import Limit
from .limits import limit_key_of
from .state import Changes, HistoryEntry, Instance, InstanceState, InstanceStatus
from .tokens import new_token

if TYPE_CHECKING:
    from .config import LoadedDefinition
    from .engine import Engine

__all__ = [
    "CONCURRENCY_KIND",
    "Decision",
    "RetryRequest",
    "admit",
    "cancel",
    "decide",
    "hold",
    "label",
    "waiting_reason",
]

#: The history kind of an admission's entries (a start held, begun, or cancelled by a limit).
CONCURRENCY_KIND = "CONCURRENCY"


class RetryRequest(msgspec.Struct, frozen=True):
    """A retry that waits for a slot (``Instance.conc_retry``), carried out when admitted."""

    from_node: str = ""
    context: dict[str, Any] | None = None
    requested_by: str = ""


_encode_retry = msgspec.json.Encoder().encode
_decode_retry = msgspec.json.Decoder(RetryRequest).decode


def label(limit: Limit, context: dict[str, Any]) -> str:
    """The key's label an instance counts under: ``<key>=<value>`` (limits.py ``limit_key_of``)."""
    return limit_key_of(limit.key, context.get(limit.key))


def waiting_reason(inst: Instance) -> str:
    """Why a SCHEDULED instance has not begun, if a slot is what it waits for ("" otherwise)."""
    if inst.status != InstanceStatus.SCHEDULED or not inst.conc_since:
        return ""
    what = "a retry waiting" if inst.conc_retry else "waiting"
    return f"{what} for a concurrency slot of {inst.conc_key} (limit {inst.conc_max})"


def _entry(inst: Instance, outcome: str, detail: str, now: int) -> HistoryEntry:
    return HistoryEntry(
        instance_id=inst.id,
        token_id="",
        node_id="",
        kind=CONCURRENCY_KIND,
        attempt=0,
        worker_id="",
        started_at=now,
        ended_at=now,
        outcome=outcome,
        error=detail,
    )


def hold(state: InstanceState, now: int, changes: Changes, retry: RetryRequest | None = None) -> None:
    """Make the instance wait SCHEDULED for a slot of its key (no active token: nothing runs, nothing
    is due); a ``retry`` is carried out when it is admitted."""
    inst = state.instance
    inst.status = InstanceStatus.SCHEDULED
    inst.conc_since = now
    inst.conc_retry = _encode_retry(retry).decode() if retry is not None else ""
    inst.deadline_at = 0  # a time limit counts from its begin (admit)
    inst.finished_at = 0
    inst.updated_at = now
    changes.instance_changed = True
    changes.history.append(_entry(inst, "WAITING", waiting_reason(inst), now))


def admit(engine: Engine, loaded: LoadedDefinition, state: InstanceState, now: int) -> Changes:
    """Begin a waiting instance (a slot of its key is free): RUNNING, its first token driven from
    the start node, or its waiting retry carried out. Not waiting: nothing changes."""
    changes = Changes()
    inst = state.instance
    if inst.status != InstanceStatus.SCHEDULED or not inst.conc_since:
        return changes
    retry = _decode_retry(inst.conc_retry) if inst.conc_retry else None
    inst.conc_since = 0
    inst.conc_retry = ""
    changes.history.append(_entry(inst, "BEGAN", f"a concurrency slot of {inst.conc_key} was free", now))
    if retry is not None:
        inst.status = InstanceStatus.FAILED  # as it was when the retry was asked for (checked then)
        changes.absorb(
            engine.retry(
                loaded, state, retry.from_node, retry.context, retry.requested_by, now, admitted=True
            )
        )
        return changes
    inst.status = InstanceStatus.RUNNING
    inst.updated_at = now
    if inst.timeout_millis > 0:  # counted from its begin, as a delayed start's (docs/flow-control.md)
        inst.deadline_at = now + inst.timeout_millis
        changes.timers = True
    token = new_token(state, loaded.definition.start_node, now, changes)
    engine.drive(loaded, state, token, now, changes)
    return changes


def cancel(engine: Engine, state: InstanceState, reason: str, now: int) -> Changes:
    """Cancel an instance for its key's limit (cancel_newest, cancel_oldest) as an operator's cancel
    does (its children follow: wiggle/_server/subflows.py), with a history entry naming why."""
    changed, changes = engine.cancel(state, reason, now)
    if changed:
        changes.history.append(_entry(state.instance, "CANCELLED", reason, now))
    return changes


class Decision(msgspec.Struct):
    """An admission's outcome: the waiting instances to begin, and the instances to cancel with
    the reason for each (waiting ones under cancel_newest, live ones under cancel_oldest)."""

    begin: list[str] = []
    cancel: list[tuple[str, str]] = []


def decide(live: list[Instance], waiting: list[tuple[Instance, Limit]]) -> Decision:
    """What the admission of one key does. ``live``: its RUNNING instances, oldest first;
    ``waiting``: its waiting instances in arrival order (FIFO), each with the limit of its version.

    Each waiting instance in turn: a free slot begins it. Without one, a waiting retry (and any
    start under ``queue``) keeps waiting; under ``cancel_newest`` it is cancelled; under
    ``cancel_oldest`` the oldest live instance is cancelled and it begins in that slot.
    """
    out = Decision(begin=[], cancel=[])
    running = [inst.id for inst in live]
    for inst, limit in waiting:
        if len(running) < limit.max:
            out.begin.append(inst.id)
            running.append(inst.id)
            continue
        if inst.conc_retry or limit.strategy == "queue":
            continue  # waits; a later one may still begin or be decided (cancel strategies)
        detail = f"{inst.conc_key} already has {len(running)} live instance(s) (limit {limit.max}, strategy {limit.strategy})"
        if limit.strategy == "cancel_newest":
            out.cancel.append((inst.id, f"cancelled: {detail}"))
            continue
        oldest = running.pop(0)
        out.cancel.append((oldest, f"cancelled to make room for {inst.id}: {detail}"))
        out.begin.append(inst.id)
        running.append(inst.id)
    # an instance begun and then cancelled in one admission is only cancelled
    cancelled = {iid for iid, _ in out.cancel}
    out.begin = [iid for iid in out.begin if iid not in cancelled]
    return out
