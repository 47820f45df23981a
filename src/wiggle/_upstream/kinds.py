"""Each node kind in upstream Wiggle's shape, both ways: one row per NodeKind (``KINDS``).

A row names the kind as upstream does (our FOR_EACH is upstream's DYN_FORK), says which edges an
upstream node of the kind uses and how it becomes one of ours (``Incoming``; None for a kind
upstream has not, which a definition sent to us cannot use), and how one of ours is written in
upstream's shape (``outgoing``, GetWorkflow's answer). wiggle/_upstream/definitions.py reads and
writes whole definitions through it; docs/upstream.md has the table in prose.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, NamedTuple

from .._limits import MAX_COUNT, MAX_DURATION_MILLIS
from .._model import Node, NodeKind, RetryPolicy, WorkflowDefinition
from ..errors import InvalidArgument
from .fields import Fields
from .graph import RawNode

__all__ = [
    "KINDS",
    "BY_UPSTREAM_NAME",
    "SUPPORTED_KINDS",
    "UpstreamKind",
    "Incoming",
    "EdgeUse",
    "Wiring",
    "REQUIRED",
    "OPTIONAL",
    "UNUSED",
    "UPSTREAM_MAX_ATTEMPTS",
    "UPSTREAM_DEFAULT_RETRY",
    "activity_of",
]

#: Upstream's "retry forever": Integer.MAX_VALUE attempts (ours: max_attempts 0).
UPSTREAM_MAX_ATTEMPTS = MAX_COUNT

#: What upstream does for a step without a retry policy: RetryPolicy.forever() there, i.e.
#: unlimited attempts, 1 s apart, multiplier 1, capped at 60 s, no jitter.
UPSTREAM_DEFAULT_RETRY = RetryPolicy(
    max_attempts=0, initial_backoff_millis=1000, multiplier=1.0, max_backoff_millis=60_000, jitter=0.0
)

REQUIRED, OPTIONAL, UNUSED = "required", "optional", "unused"


def activity_of(workflow: str, node_id: str) -> str:
    """The activity upstream workers know the step ``node_id`` of ``workflow`` by."""
    return f"{workflow}#{node_id}"


class EdgeUse(NamedTuple):
    """Which edges an upstream node of a kind uses: each REQUIRED, OPTIONAL or UNUSED."""

    next: str
    alt_next: str
    branches: str


class Wiring(NamedTuple):
    """What translating one node needs of the whole graph: upstream id -> ours, and the JOIN
    closing each FORK / DYN_FORK and the reverse (upstream ids; wiggle/_upstream/graph.py)."""

    ids: dict[str, str]
    join_of: dict[str, str]
    fork_of: dict[str, str]

    def next(self, node: RawNode) -> str | None:
        return self.ids[node.next] if node.next is not None else None

    def alt_next(self, node: RawNode) -> str | None:
        return self.ids[node.alt_next] if node.alt_next is not None else None


class Incoming(NamedTuple):
    """How an upstream node of a kind is read: the edges it uses, and the node of ours it becomes."""

    edges: EdgeUse
    translate: Callable[[RawNode, Wiring], Node]


class UpstreamKind(NamedTuple):
    """One node kind both ways (see the module doc)."""

    name: str  # upstream's name for the kind
    incoming: Incoming | None  # None: upstream has no such kind
    outgoing: Callable[[WorkflowDefinition, Node, dict[str, int]], dict[str, Any]]


# ---------------------------------------------------------------------------- upstream -> ours


def _in_worker(node: RawNode, wiring: Wiring) -> Node:
    """A TASK or PREDICATE: our node id is its step name (wiggle/_upstream/definitions.py)."""
    f = node.fields
    return Node(
        id=wiring.ids[node.uid],
        kind=NodeKind(node.kind),
        next=wiring.next(node),
        alt_next=wiring.alt_next(node),
        queue=f.text("queue"),
        retry=_retry(f),
    )


def _in_sleep(node: RawNode, wiring: Wiring) -> Node:
    millis = node.fields.integer("sleepMillis", 0)
    return Node(id=wiring.ids[node.uid], kind=NodeKind.SLEEP, next=wiring.next(node), sleep_millis=millis)


def _in_fork(node: RawNode, wiring: Wiring) -> Node:
    ids = wiring.ids
    branches = tuple(ids[b] for b in node.branches)
    return Node(id=ids[node.uid], kind=NodeKind.FORK, branches=branches, join=ids[wiring.join_of[node.uid]])


def _in_join(node: RawNode, wiring: Wiring) -> Node:
    ids = wiring.ids
    return Node(
        id=ids[node.uid], kind=NodeKind.JOIN, next=wiring.next(node), fork=ids[wiring.fork_of[node.uid]]
    )


def _in_end(node: RawNode, wiring: Wiring) -> Node:
    f = node.fields
    reason = f.text("reason")
    if reason is not None and "\x00" in reason:  # it becomes the instance's reason, stored as text
        raise InvalidArgument(f"{node.label}: 'reason' contains a NUL character (\\x00)")
    # upstream reads a missing "success" as false (its DSL always writes true)
    return Node(
        id=wiring.ids[node.uid], kind=NodeKind.END, success=f.boolean("success", False), reason=reason
    )


def _in_signal(node: RawNode, wiring: Wiring) -> Node:
    f = node.fields
    return Node(
        id=wiring.ids[node.uid],
        kind=NodeKind.SIGNAL,
        signal=f.required_text("name", "the signal's name"),
        timeout_millis=f.integer("sleepMillis", 0),
        next=wiring.next(node),
        alt_next=wiring.alt_next(node),
    )


def _in_sub_workflow(node: RawNode, wiring: Wiring) -> Node:
    # upstream fails the parent when the child fails: no retry, no error path
    return Node(
        id=wiring.ids[node.uid],
        kind=NodeKind.SUB_WORKFLOW,
        workflow=node.fields.required_text("activity", "the child workflow's name"),
        next=wiring.next(node),
        retry=RetryPolicy.none(),
    )


def _in_dyn_fork(node: RawNode, wiring: Wiring) -> Node:
    # a missing list skips the node (the definition's LAST_WRITE_WINS says so: see
    # wiggle/_upstream/definitions.py's module doc)
    f = node.fields
    item_key = f.required_text("itemKey", "the context key each branch's element goes to")
    return Node(
        id=wiring.ids[node.uid],
        kind=NodeKind.FOR_EACH,
        items_key=f.required_text("itemsKey", "the context key of the list"),
        item_key=item_key,
        index_key=item_key + "Index",
        branches=(wiring.ids[node.branches[0]],),
        join=wiring.next(node),
    )


def _retry(f: Fields) -> RetryPolicy:
    """Upstream's retry object; absent fields read as upstream's reader reads them."""
    r = f.child("retry", f"{f.where} retry")
    if r is None:
        return UPSTREAM_DEFAULT_RETRY
    attempts = r.integer("maxAttempts", 1)
    if attempts < 1:
        raise InvalidArgument(
            f"{r.where}: 'maxAttempts' must be >= 1 (it counts the first attempt), got {attempts}"
        )
    initial = r.integer("initialBackoffMillis", 0)
    cap = r.integer("maxBackoffMillis", 0)
    if cap < 0:
        raise InvalidArgument(f"{r.where}: 'maxBackoffMillis' must be >= 0, got {cap}")
    if cap == 0 and initial > 0:
        cap = MAX_DURATION_MILLIS  # upstream: a cap of 0 is no cap
    return RetryPolicy(
        max_attempts=0 if attempts == UPSTREAM_MAX_ATTEMPTS else attempts,
        initial_backoff_millis=initial,
        multiplier=r.number("multiplier", 1.0),
        max_backoff_millis=cap,
        jitter=r.number("jitter", 0.0),
    )


# ---------------------------------------------------------------------------- ours -> upstream
# Each writer keeps upstream's field order: id, kind, name, the kind's own fields, sleepMillis,
# next, altNext, then branches / expected / success / reason / itemsKey / itemKey.


def _kind(node: Node) -> dict[str, Any]:
    return {"id": node.id, "kind": KINDS[node.kind].name}


def _head(node: Node, name: str | None) -> dict[str, Any]:
    out = _kind(node)
    out["name"] = name
    return out


def _edges_out(out: dict[str, Any], millis: int, nxt: str | None, alt: str | None) -> dict[str, Any]:
    """The wait (upstream keeps a sleep's duration and a wait's deadline in one field) and edges."""
    if millis:
        out["sleepMillis"] = millis
    if nxt is not None:
        out["next"] = nxt
    if alt is not None:
        out["altNext"] = alt
    return out


def _plain(node: Node, out: dict[str, Any]) -> dict[str, Any]:
    return _edges_out(out, node.timeout_millis, node.next, node.alt_next)


def _out_worker(definition: WorkflowDefinition, node: Node, width: dict[str, int]) -> dict[str, Any]:
    out = _head(node, node.id)
    out["activity"] = activity_of(definition.name, node.id)
    out["queue"] = node.queue or definition.name
    out["retry"] = _retry_out(definition.retry_for(node))
    return _plain(node, out)


def _out_plain(definition: WorkflowDefinition, node: Node, width: dict[str, int]) -> dict[str, Any]:
    """A USER_TASK (a kind upstream lacks: it keeps its kind), its deadline and edges."""
    return _plain(node, _head(node, node.id))


def _out_sleep(definition: WorkflowDefinition, node: Node, width: dict[str, int]) -> dict[str, Any]:
    return _edges_out(_head(node, node.id), node.sleep_millis, node.next, node.alt_next)


def _out_fork(definition: WorkflowDefinition, node: Node, width: dict[str, int]) -> dict[str, Any]:
    out = _plain(node, _head(node, node.id))
    out["branches"] = list(node.branches)
    return out


def _out_join(definition: WorkflowDefinition, node: Node, width: dict[str, int]) -> dict[str, Any]:
    out = _plain(node, _head(node, node.id))
    if node.id in width:
        out["expected"] = width[node.id]
    return out


def _out_end(definition: WorkflowDefinition, node: Node, width: dict[str, int]) -> dict[str, Any]:
    out = _plain(node, _kind(node))
    out["success"] = node.success
    if node.reason is not None:
        out["reason"] = node.reason
    return out


def _out_signal(definition: WorkflowDefinition, node: Node, width: dict[str, int]) -> dict[str, Any]:
    return _plain(node, _head(node, node.signal))


def _out_sub_workflow(definition: WorkflowDefinition, node: Node, width: dict[str, int]) -> dict[str, Any]:
    out = _head(node, node.id)
    out["activity"] = node.workflow
    return _plain(node, out)


def _out_for_each(definition: WorkflowDefinition, node: Node, width: dict[str, int]) -> dict[str, Any]:
    """A DYN_FORK, whose ``next`` is its JOIN. Its output and result keys have no place upstream."""
    out = _edges_out(_head(node, node.id), node.timeout_millis, node.join, node.alt_next)
    out["branches"] = list(node.branches)
    out["itemsKey"] = node.items_key
    out["itemKey"] = node.item_key or "item"
    return out


def _retry_out(policy: RetryPolicy) -> dict[str, Any]:
    initial = policy.initial_backoff_millis
    if policy.max_backoff_millis == 0:
        initial = 0  # ours: a cap of 0 means no wait; upstream reads a cap of 0 as no cap
    return {
        "maxAttempts": UPSTREAM_MAX_ATTEMPTS if policy.max_attempts == 0 else policy.max_attempts,
        "initialBackoffMillis": initial,
        "multiplier": float(policy.multiplier),
        "maxBackoffMillis": policy.max_backoff_millis,
        "jitter": float(policy.jitter),
    }


# ---------------------------------------------------------------------------- the table

_R, _O, _U = REQUIRED, OPTIONAL, UNUSED

#: Every NodeKind in upstream's shape (a test checks every kind has a row:
#: tests/engine/test_kind_tables.py).
KINDS: dict[NodeKind, UpstreamKind] = {
    NodeKind.TASK: UpstreamKind("TASK", Incoming(EdgeUse(_R, _U, _U), _in_worker), _out_worker),
    NodeKind.PREDICATE: UpstreamKind("PREDICATE", Incoming(EdgeUse(_R, _R, _U), _in_worker), _out_worker),
    NodeKind.SLEEP: UpstreamKind("SLEEP", Incoming(EdgeUse(_R, _U, _U), _in_sleep), _out_sleep),
    NodeKind.FORK: UpstreamKind("FORK", Incoming(EdgeUse(_U, _U, _R), _in_fork), _out_fork),
    NodeKind.JOIN: UpstreamKind("JOIN", Incoming(EdgeUse(_R, _U, _U), _in_join), _out_join),
    NodeKind.USER_TASK: UpstreamKind("USER_TASK", None, _out_plain),
    NodeKind.END: UpstreamKind("END", Incoming(EdgeUse(_U, _U, _U), _in_end), _out_end),
    NodeKind.SIGNAL: UpstreamKind("SIGNAL", Incoming(EdgeUse(_R, _O, _U), _in_signal), _out_signal),
    NodeKind.SUB_WORKFLOW: UpstreamKind(
        "SUB_WORKFLOW", Incoming(EdgeUse(_R, _U, _U), _in_sub_workflow), _out_sub_workflow
    ),
    NodeKind.FOR_EACH: UpstreamKind("DYN_FORK", Incoming(EdgeUse(_R, _U, _R), _in_dyn_fork), _out_for_each),
}

#: The kinds an upstream definition may use, by upstream's name, in NodeKind order.
BY_UPSTREAM_NAME: dict[str, UpstreamKind] = {k.name: k for k in KINDS.values() if k.incoming is not None}
SUPPORTED_KINDS = tuple(BY_UPSTREAM_NAME)
