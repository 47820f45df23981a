"""Bulk actions by the Instances page's filter: cancel every live instance it matches, or retry
every FAILED one (docs/dashboard.md#bulk-actions).

Two steps, as the dialog runs them: a dry run counts what the filter matches now (the dialog
shows the count), then the action names that count as ``expected``; if the filter has come to
match a different number meanwhile, nothing is done and the caller is told to look again. Each
instance is acted on through the instance layer like a single action, so each gets its own
history entry naming who did it (operator.py), and one more log line sums the bulk action up.
At most ``BULK_LIMIT`` instances per action: a filter matching more is refused, to be narrowed.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import msgspec

from ..._engine.state import InstanceStatus
from ..._storage.base import InstanceQuery
from ...errors import FailedPrecondition, InvalidArgument, WiggleError
from ..instances import Instances
from ..operator import log_action
from .actions import BULK_CANCEL_REASON

__all__ = ["BULK_ACTIONS", "BULK_LIMIT", "matching", "run_bulk"]

BULK_ACTIONS = ("cancel", "retry")
BULK_LIMIT = 1000
_PAGE = 500

#: the statuses each action applies to (a status filter outside them matches nothing to act on)
_APPLIES_TO = {
    "cancel": (InstanceStatus.SCHEDULED, InstanceStatus.RUNNING),
    "retry": (InstanceStatus.FAILED,),
}


async def matching(instances: Instances, query: InstanceQuery, action: str) -> list[str]:
    """The ids of the instances ``query`` matches that ``action`` applies to, newest first;
    InvalidArgument past BULK_LIMIT."""
    if action not in BULK_ACTIONS:
        raise InvalidArgument(f"bulk action must be one of {', '.join(BULK_ACTIONS)}, got {action!r}")
    statuses = [s for s in _APPLIES_TO[action] if not query.status or query.status == s]
    ids: list[str] = []
    for status in statuses:
        page = msgspec.structs.replace(
            query, status=str(status), page_size=_PAGE, page_token="", with_context=False
        )
        while True:
            views, token = await instances.list_instances(page)
            ids += [v.instance.id for v in views]
            if len(ids) > BULK_LIMIT:
                raise InvalidArgument(
                    f"the filter matches more than {BULK_LIMIT} instances to {action}; narrow it "
                    "(workflow, status, time, search) and act in parts"
                )
            if not token:
                break
            page = msgspec.structs.replace(page, page_token=token)
    return sorted(set(ids), reverse=True)


async def run_bulk(
    instances: Instances, query: InstanceQuery, action: str, body: Mapping[str, Any], actor: str
) -> dict[str, Any]:
    """A dry run ({"count", "ids"}), or the action on what matches: {"count", "done", "errors",
    "skipped"}, done + len(errors) + len(skipped) == count."""
    ids = await matching(instances, query, action)
    if body.get("dry_run") is True:
        return {"action": action, "count": len(ids), "ids": ids[:20]}
    expected = body.get("expected")
    if not isinstance(expected, int) or isinstance(expected, bool):
        raise InvalidArgument('"expected" must be the count the dry run showed (an integer)')
    if expected != len(ids):
        raise FailedPrecondition(
            f"the filter now matches {len(ids)} instances to {action}, not the {expected} you confirmed; "
            "look again and confirm the new count"
        )
    reason = body.get("reason") or BULK_CANCEL_REASON
    if not isinstance(reason, str):
        raise InvalidArgument('"reason" must be a string')
    done = 0
    errors: list[dict[str, str]] = []
    # Finished by the time its turn came, so nothing to do: most often by the bulk action itself
    # (a cancelled child fails its parent, which cancels the other children). Counted apart from
    # done and refused, so that done + errors + skipped is always the count.
    skipped: list[dict[str, str]] = []
    for iid in ids:
        try:
            if action == "cancel":
                view, changed = await instances.cancel(iid, reason[:1000], actor)
                if changed:
                    done += 1
                else:
                    status = str(view.instance.status)
                    skipped.append({"instance_id": iid, "status": status, "reason": f"already {status}"})
            else:
                await instances.retry(iid, "", None, actor)
                done += 1
        except WiggleError as exc:  # one that moved on meanwhile, or cannot be retried as it is
            errors.append({"instance_id": iid, "error": str(exc)})
    log_action(
        actor,
        f"bulk {action}",
        f"{len(ids)} instances",
        f"{done} done, {len(errors)} refused, {len(skipped)} already finished",
    )
    return {"action": action, "count": len(ids), "done": done, "errors": errors, "skipped": skipped}
