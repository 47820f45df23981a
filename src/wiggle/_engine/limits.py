"""Concurrency limits on worker steps (docs/flow-control.md#concurrency-limits).

A step with ``concurrency=Limit(key=..., max=N)`` (wiggle/_model.py ``Limit``) runs at most N
attempts at once per value of its context key, cluster-wide. The engine only labels tokens: when
a token becomes READY at a limited step, ``assign`` gives it its ``limit_key`` (the limit's scope
and the key's value) and ``limit_max``. A token counts against its key while it is RUNNING with
that label; the stores' claims never take a token whose key already has ``limit_max`` RUNNING
tokens (wiggle/_storage/memory_ready.py, wiggle/_storage/postgres/store.py), and the hand-off skips
limited tokens (wiggle/_server/delivery.py). Nothing else is kept: whatever ends a RUNNING
attempt (its report, its failure, its lease's expiry, a cancel) ends what it held, so a crash
cannot leak a slot. ``leave`` drops the label and wakes the pollers of the step's queue, whose
next claim may now take a waiting step of that key. A queue's own limit
(wiggle/_storage/queue_limits.py) counts the RUNNING tokens a claim marked ``queue_held``; their
end wakes the queue the same way.

A step with ``rate_limit=RateLimit(key=..., max=N, period=P)`` is labelled the same way while it
is READY: ``rate_key`` (the rate's scope and the key's value; the scope alone without a key),
``rate_max`` and ``rate_period_millis``. The stores' claims admit at most N claims of a key per P
(wiggle/_storage/step_rates.py); the label only matters to a claim, so it goes with the step.
"""

from __future__ import annotations

import hashlib

import msgspec

from .._model import Node
from .state import Changes, InstanceState, Token, TokenStatus

__all__ = ["assign", "leave", "limit_key_of", "MAX_VALUE_CHARS"]

#: A key's value longer than this is counted under its SHA-256 instead (the label stays small).
MAX_VALUE_CHARS = 200

_json = msgspec.json.Encoder(order="sorted")


def limit_key_of(scope: str, value: object) -> str:
    """The label a key's value is counted under: ``<scope>=<value>`` (a string as it is, anything
    else as JSON, a missing key as ``null``; a long value as ``#<sha256>``)."""
    text = value if isinstance(value, str) else _json.encode(value).decode()
    if len(text) > MAX_VALUE_CHARS or "\x00" in text:
        text = "#" + hashlib.sha256(text.encode()).hexdigest()
    return f"{scope}={text}"


def assign(state: InstanceState, token: Token, node: Node) -> None:
    """Label a token becoming READY at ``node`` with its limits' keys (no limit: no label)."""
    limit, rate = node.limit, node.rate
    if limit is None and rate is None:
        token.limit_key = ""
        token.limit_max = 0
        token.rate_key = ""
        token.rate_max = token.rate_period_millis = 0
        return
    context = token.context if token.context is not None else state.instance.context
    workflow = state.instance.workflow
    if limit is None:
        token.limit_key = ""
        token.limit_max = 0
    else:
        token.limit_key = limit_key_of(limit.scope(workflow, node.id), context.get(limit.key))
        token.limit_max = limit.max
    if rate is None:
        token.rate_key = ""
        token.rate_max = token.rate_period_millis = 0
    else:
        scope = rate.scope(workflow, node.id)
        token.rate_key = scope if rate.key is None else limit_key_of(scope, context.get(rate.key))
        token.rate_max = rate.max
        token.rate_period_millis = rate.period_millis


def leave(token: Token, changes: Changes) -> None:
    """``token`` leaves its limited step: a RUNNING attempt frees its slot, and the pollers of its
    queue are woken (a READY step of its key may be claimable now)."""
    if token.status == TokenStatus.RUNNING and (token.limit_key or token.queue_held):
        changes.ready_queues.add(token.queue)  # and a slot of its queue's limit (queue_held)
        if changes.freed is None:
            changes.freed = set()
        changes.freed.add(token.queue)
    if token.limit_key:
        token.limit_key = ""
        token.limit_max = 0
    if token.rate_key:
        token.rate_key = ""
        token.rate_max = token.rate_period_millis = 0
