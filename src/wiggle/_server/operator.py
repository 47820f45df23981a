"""Operator actions in the history: who cancelled an instance or completed a user task, from where.

The dashboard's actions go through the instance layer like any client's; this module adds one
history entry (kind ``OPERATOR``) to the same transition's changes, so the record is committed
with the action itself (docs/semantics.md#operator-actions).
"""

from __future__ import annotations

from .._engine.state import Changes, HistoryEntry, InstanceState
from .._limits import storable_text

__all__ = ["OPERATOR_KIND", "record_action"]

OPERATOR_KIND = "OPERATOR"
MAX_ACTOR_CHARS = 200


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
