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
    RetryPoint,
    Token,
    TokenStatus,
)
from .tokens import new_token

if TYPE_CHECKING:
    from .engine import Engine

__all__ = ["retry", "enclosing", "RetryRule", "RETRY_RULES"]


class RetryRule(msgspec.Struct, frozen=True):
    """What a node kind means to ``retry(from_node=...)``.

    ``refused``: why a retry may not restart a main-line token at a node of this kind ("" when it
    may). ``opens``: for a kind whose branches run between it and its join, how a node there is
    named ("a fork branch"); a retry is refused there too, the restarted token being a main-line
    token that would miss its branch's context (a for_each's item and index) and fork position.
    """

    refused: str = ""
    opens: str = ""


#: The resume rules of each node kind (every NodeKind has one: a test checks,
#: tests/engine/test_kind_tables.py).
RETRY_RULES: dict[NodeKind, RetryRule] = {
    NodeKind.TASK: RetryRule(),
    NodeKind.PREDICATE: RetryRule(),
    NodeKind.SLEEP: RetryRule(),
    NodeKind.FORK: RetryRule(opens="a fork branch"),
    # a main-line token has no branch to bring to a join: retry from its fork, or from the node after it
    NodeKind.JOIN: RetryRule(refused="a JOIN"),
    NodeKind.USER_TASK: RetryRule(),
    NodeKind.END: RetryRule(refused="an END"),
    NodeKind.SIGNAL: RetryRule(),
    NodeKind.SUB_WORKFLOW: RetryRule(),
    NodeKind.FOR_EACH: RetryRule(opens="a for_each body"),
}

_FOR_EACH_BODY = RETRY_RULES[NodeKind.FOR_EACH].opens


def enclosing(definition: WorkflowDefinition) -> dict[str, str]:
    """Each node that lies inside a fork branch or a for_each body (between the FORK / FOR_EACH and
    its join), mapped to its kind's ``RetryRule.opens`` (a for_each body wins when both)."""
    nodes = definition.node_map()
    inside: dict[str, str] = {}
    for node in definition.nodes:
        where = RETRY_RULES[node.kind].opens
        if not where or node.join is None:
            continue
        seen: set[str] = set()
        stack = list(node.branches)
        while stack:
            n = stack.pop()
            if n == node.join or n in seen or n not in nodes:
                continue
            seen.add(n)
            if inside.get(n) != _FOR_EACH_BODY:
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
        _check_from_node(loaded, state, from_node)
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
    _reopen(state, context, now, changes)
    if from_node:
        inst.joins = {}
        restarted = [new_token(state, from_node, now, changes)]
        at = from_node
    else:
        assert point is not None
        restarted = _restore(state, point, now, changes)
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


def _check_from_node(loaded: LoadedDefinition, state: InstanceState, from_node: str) -> None:
    """A node a retry may restart at: one of the workflow's, on the main line, of a kind that allows it."""
    inst = state.instance
    node = loaded.nodes.get(from_node)
    if node is None:
        raise InvalidArgument(
            f"workflow {inst.workflow!r} (version {inst.version}) has no node {from_node!r} to retry from"
        )
    refused = RETRY_RULES[node.kind].refused
    region = enclosing(loaded.definition).get(from_node)
    if refused or region is not None:
        where = " and ".join(w for w in (refused, f"inside {region}" if region else "") if w)
        raise InvalidArgument(
            f"node {from_node!r} is {where}; retry from a node on the main line "
            "(outside any fork or for_each) that is not an END or a JOIN (to redo a fork's "
            "branches, retry from the FORK)"
        )


def _reopen(state: InstanceState, context: dict[str, Any] | None, now: int, changes: Changes) -> None:
    """The instance RUNNING again, its failure forgotten, its context replaced if one was given."""
    inst = state.instance
    changes.instance_changed = True
    inst.status = InstanceStatus.RUNNING
    inst.finished_at = 0
    inst.updated_at = now
    inst.error = ""
    inst.reason = ""
    inst.retry_point = None
    if context is not None:
        inst.context = context


def _restore(state: InstanceState, point: RetryPoint, now: int, changes: Changes) -> list[Token]:
    """The retry point's tokens back as new tokens (the ones parked at a join stay parked) and its
    fork barriers; returns the tokens to drive."""
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
    state.instance.joins = {
        group: msgspec.structs.replace(
            join,
            arrived=dict(join.arrived),
            removed=dict(join.removed),
            joined_tokens=[renamed.get(t, t) for t in join.joined_tokens],
        )
        for group, join in point.joins.items()
    }
    return restarted
