"""The dashboard's operator actions beyond cancel: send a signal, retry a failed instance.

Each goes through the instance layer like any client's call, and the operator's name is recorded
in the same transition (wiggle/_server/operator.py), so the history says who did it
(docs/semantics.md#operator-actions).
"""

from __future__ import annotations

from typing import Any

from ..._engine.engine import LoadedDefinition
from ..._engine.state import Changes, InstanceState
from ..._storage.base import InstanceView
from ..instances import Instances
from ..operator import record_action

__all__ = ["send_signal", "retry_failed", "CANCEL_REASON", "BULK_CANCEL_REASON"]

#: the reason a cancel records when the dialog's field is left empty; the dialog shows it as the
#: field's placeholder (pages.py), so what it shows is what is recorded
CANCEL_REASON = "cancelled from the dashboard"
BULK_CANCEL_REASON = "cancelled in bulk from the dashboard"


async def send_signal(
    instances: Instances, instance_id: str, name: str, data: dict[str, Any], actor: str
) -> tuple[str, InstanceView]:
    """Send the signal ``name`` with ``data``; (DELIVERED / BUFFERED, view); ``actor`` recorded."""
    engine = instances.engine

    def action(loaded: LoadedDefinition, state: InstanceState, now: int) -> tuple[str, Changes | None]:
        outcome, changes = engine.signal(loaded, state, name, data, "", actor, now)
        if changes is not None:
            record_action(changes, state, actor, "SIGNALLED", name, f"signal {name} {outcome}", now)
        return outcome, changes

    outcome, state = await instances.mutate(instance_id, f"instance {instance_id} does not exist", action)
    return outcome, instances.store.view(state)


async def retry_failed(instances: Instances, instance_id: str, from_node: str, actor: str) -> InstanceView:
    """Resume a FAILED instance from where it failed (or ``from_node``); ``actor`` recorded."""
    return await instances.retry(instance_id, from_node, None, actor)
