"""Operator actions: recorded in the history (who did what, from where) and logged.

The dashboard's actions go through the instance layer like any client's; ``record_action`` adds
one history entry (kind ``OPERATOR``) to the same transition's changes, so the record is
committed with the action itself (docs/semantics.md#operator-actions).

Every operator action also makes one INFO line on the ``wiggle.server`` logger, after it took
effect (docs/metrics.md#logs): the actions recorded in the history are logged from the committed
changes (``log_recorded_actions``, called by wiggle/_server/timings.py), the others (a gRPC
cancel, signal, retry or user-task completion, every schedule action) by the layer that ran them
(``log_action``). Who: the actor the caller named, else the identity of the gRPC call
(wiggle/_server/guard.py ``CALLER``), else "anonymous".

A name the caller gives is its own say: with authentication on, the identity its credential
proved is recorded with it (``attributed``: "ada as ops"), on the gRPC port as on the
dashboard, so no caller can have an action recorded as someone else's alone. Every logged value
is escaped (wiggle/_server/caller_text.py): caller text never starts a line of the log.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence

from .._engine.state import Changes, HistoryEntry, InstanceState
from .._limits import storable_text
from .caller_text import check_name, loggable
from .guard import CALLER

__all__ = [
    "OPERATOR_KIND",
    "MAX_NAME_CHARS",
    "attributed",
    "as_identity",
    "caller_identity",
    "record_action",
    "log_action",
    "log_instance_action",
    "log_recorded_actions",
    "who",
]

log = logging.getLogger("wiggle.server")

OPERATOR_KIND = "OPERATOR"
#: the most characters of a name a caller gives for itself (sender, requested_by)
MAX_NAME_CHARS = 200
#: the most characters of a recorded actor: the caller's name, " as " and its identity (at most
#: 100), and where from ("(dashboard, <address>)"), so that cutting never drops the identity
MAX_ACTOR_CHARS = 400
MAX_DETAIL_CHARS = 300  # of a detail in a log line


def record_action(
    changes: Changes, state: InstanceState, actor: str, action: str, node_id: str, detail: str, now: int
) -> None:
    """Append "``actor`` did ``action`` (on ``node_id``): ``detail``" to the instance's history."""
    changes.history.append(
        HistoryEntry(
            instance_id=state.instance.id,
            token_id="",
            node_id=node_id,
            kind=OPERATOR_KIND,
            attempt=0,
            worker_id=actor[:MAX_ACTOR_CHARS],
            started_at=now,
            ended_at=now,
            outcome=action,
            error=storable_text(detail),
        )
    )


def as_identity(name: str, identity: str) -> str:
    """``name`` (what the caller calls itself) with the ``identity`` its credential proved:
    "ada as ops"; the identity alone when the name is empty or the same."""
    if not name or name == identity:
        return identity
    return f"{name} as {identity}"


def attributed(name: str, field: str) -> str:
    """The actor to record for the name a gRPC caller gave in ``field`` (a signal's sender, a
    retry's requested_by; "" when it gave none): InvalidArgument for a name that is not one
    line of printable text; with authentication on, the caller's identity goes with it
    (``as_identity``), else the name as given."""
    check_name(name, field, MAX_NAME_CHARS)
    identity = CALLER.get()
    return name if identity is None else as_identity(name, identity.name)


def caller_identity() -> str:
    """The name of the gRPC caller's identity; '' with authentication off."""
    identity = CALLER.get()
    return identity.name if identity is not None else ""


def who(actor: str = "") -> str:
    """The operator to name: ``actor`` if given, else the gRPC caller's identity, else anonymous."""
    if actor:
        return actor[:MAX_ACTOR_CHARS]
    identity = CALLER.get()
    return identity.name if identity is not None else "anonymous"


def log_action(
    actor: str, action: str, target: str, detail: str = "", *, workflow: str = "", instance_id: str = ""
) -> None:
    """One INFO line: ``actor`` did ``action`` to ``target`` (an instance, a schedule); every
    part escaped (``loggable``), since each may hold what a caller typed."""
    detail = loggable(detail, MAX_DETAIL_CHARS)
    log.info(
        "operator %s: %s %s%s",
        loggable(actor, MAX_ACTOR_CHARS),
        loggable(action),
        loggable(target),
        f" ({detail})" if detail else "",
        extra={"actor": actor, "action": action, "workflow": workflow, "instance_id": instance_id},
    )


def log_recorded_actions(state: InstanceState, history: Sequence[HistoryEntry]) -> None:
    """Log the operator actions among a committed transition's history entries."""
    for entry in history:
        if entry.kind == OPERATOR_KIND:
            inst = state.instance
            what = f"{entry.outcome} {entry.node_id}".strip() if entry.node_id else str(entry.outcome)
            log_action(
                entry.worker_id,
                what.lower(),
                f"instance {inst.id}",
                entry.error,
                workflow=inst.workflow,
                instance_id=inst.id,
            )


def log_instance_action(actor: str, action: str, state: InstanceState, detail: str = "") -> None:
    """The line of an action on an instance that left no history entry (``actor``: see ``who``)."""
    inst = state.instance
    log_action(who(actor), action, f"instance {inst.id}", detail, workflow=inst.workflow, instance_id=inst.id)
