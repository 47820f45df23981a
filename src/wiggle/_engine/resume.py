"""Resume a FAILED instance (docs/semantics.md#resuming-a-failed-instance).

When an instance fails, ``tokens.end_instance`` keeps a RetryPoint: copies of the tokens then
active (the failed one included) and the open fork barriers. ``retry`` brings them back as new
tokens at the same nodes with a fresh attempt budget, keeping the context and everything that had
completed; or, given a node, restarts one main-line token there (optionally with a replacement
context). A pure transition: everything is checked before anything changes.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import msgspec

from .._model import NodeKind, WorkflowDefinition
from ..errors import FailedPrecondition, InvalidArgument
from .config import LoadedDefinition
from .state import (
    Changes,
    HistoryEntry,
    HistoryOutcome,
    InstanceState,
    InstanceStatus,
    TokenStatus,
)
from .tokens import new_token

if TYPE_CHECKING:
    from .engine import Engine

__all__ = ["retry", "enclosing"]


def enclosing(definition: WorkflowDefinition) -> dict[str, str]:
    """Each node that lies inside a fork branch or a for_each body (between the FORK / FOR_EACH and
    its join), mapped to "a for_each body" or "a fork branch" (a for_each body wins when both)."""
    nodes = definition.node_map()
    inside: dict[str, str] = {}
    for node in definition.nodes:
        if node.kind not in (NodeKind.FORK, NodeKind.FOR_EACH) or node.join is None:
            continue
        where = "a for_each body" if node.kind is NodeKind.FOR_EACH else "a fork branch"
        seen: set[str] = set()
        stack = list(node.branches)
        while stack:
            n = stack.pop()
            if n == node.join or n in seen or n not in nodes:
                continue
            seen.add(n)
            if inside.get(n) != "a for_each body":
                inside[n] = where
            follow = nodes[n]
            stack.extend(t for t in (follow.next, follow.alt_next) if t is not None)
            stack.extend(follow.branches)
    return inside


def retry(
    engine: Engine,
    loaded: LoadedDefinition,
    state: InstanceState,
    from_node: str,
    context: dict[str, Any] | None,
    requested_by: str,
    now: int,
) -> Changes:
    """Restart a FAILED instance: from where it failed, or from ``from_node``; RUNNING again."""
    inst = state.instance
    if inst.status != InstanceStatus.FAILED:
        raise FailedPrecondition(
            f"instance {inst.id} is {inst.status}; only a FAILED instance can be retried"
        )
    point = inst.retry_point
    if from_node:
        node = loaded.nodes.get(from_node)
        if node is None:
            raise InvalidArgument(
                f"workflow {inst.workflow!r} (version {inst.version}) has no node {from_node!r} to retry from"
            )
        region = enclosing(loaded.definition).get(from_node)
        if node.kind is NodeKind.END or region is not None:
            # A restarted token is a main-line token: inside a fork branch or a for_each body it
            # would miss its branch's context (a for_each's item and index) and fork position.
            where = "an END" if node.kind is NodeKind.END else f"inside {region}"
            raise InvalidArgument(
                f"node {from_node!r} is {where}; retry from a node on the main line "
                "(outside any fork or for_each) that is not an END"
            )
    elif point is None or all(t.status == TokenStatus.JOINED for t in point.tokens):
        # Nothing to restart: it reached a failing END, or failed at a join (a conflict), where
        # re-running the same fold would fail the same way.
        raise FailedPrecondition(
            f"instance {inst.id} failed with no step in progress ({inst.error or 'no error recorded'}); "
            "name a node to retry from (from_node, --from NODE)"
        )
    if context is not None:
        engine.check_context(context, "context")
    # Checked: now change.
    changes = Changes()
    changes.instance_changed = True
    inst.status = InstanceStatus.RUNNING
    inst.finished_at = 0
    inst.updated_at = now
    inst.error = ""
    inst.reason = ""
    inst.retry_point = None
    if context is not None:
        inst.context = context
    if from_node:
        inst.joins = {}
        restarted = [new_token(state, from_node, now, changes)]
        at = from_node
    else:
        assert point is not None
        renamed: dict[str, str] = {}
        restarted = []
        for old in point.tokens:
            tok = new_token(state, old.node_id, now, changes)
            tok.context = old.context
            tok.fork_stack = list(old.fork_stack)
            renamed[old.id] = tok.id
            if old.status == TokenStatus.JOINED:
                tok.status = TokenStatus.JOINED
                tok.kind = NodeKind.JOIN.value
            else:
                restarted.append(tok)
        # Every field kept (a FOR_EACH's progress and results or merged writes too), the arrivals
        # in their order, the joined tokens renamed.
        inst.joins = {
            group: msgspec.structs.replace(
                join,
                arrived=dict(join.arrived),
                joined_tokens=[renamed.get(t, t) for t in join.joined_tokens],
            )
            for group, join in point.joins.items()
        }
        at = ", ".join(sorted({t.node_id for t in point.tokens}))
    changes.history.append(
        HistoryEntry(
            instance_id=inst.id,
            token_id=restarted[0].id if restarted else "",
            node_id=at,
            kind="RETRY",
            attempt=1,
            worker_id=requested_by or "(unknown)",
            started_at=now,
            ended_at=now,
            outcome=HistoryOutcome.RESUMED,
            error="with a replacement context" if context is not None else "",
        )
    )
    for tok in restarted:
        engine.drive(loaded, state, tok, now, changes)
    return changes
