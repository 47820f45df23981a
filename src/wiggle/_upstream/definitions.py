"""Upstream Wiggle's workflow definitions to ours and back (docs/upstream.md has the table).

Upstream's definition is camelCase JSON (``name``, ``version``, ``startNode``, ``nodes``,
``queues``, ``executionMode``, ``checkpoints``). Its worker runs a step by *activity*
``"<workflow>#<name>"``; ours runs it by node id. So a TASK or PREDICATE gets its upstream
``name`` as our node id, which makes activity == ``<workflow>#<our id>`` both ways; every other
node keeps its upstream ``id`` (made unique if it collides with a step's name), and every edge is
rewritten. Upstream's join rule is "last write wins", so every translated definition has
``join_merge = LAST_WRITE_WINS`` (wiggle/_model.py JoinMerge). The engine also reads that as
"upstream's rules" for a DYN_FORK: a list missing from the context is an empty one, skipped
straight through as upstream's client documents (wiggle/_engine/fanout.py start_for_each), where
our own for_each refuses or fails.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any

from .._limits import MAX_COUNT, MAX_DURATION_MILLIS
from .._model import (
    ExecutionMode,
    JoinMerge,
    Node,
    NodeKind,
    RetryPolicy,
    WorkflowDefinition,
    validate_name,
)
from ..errors import InvalidArgument
from .fields import Fields
from .graph import RawNode, pair_joins

__all__ = [
    "UpstreamDefinition",
    "SUPPORTED_KINDS",
    "UPSTREAM_MAX_ATTEMPTS",
    "UPSTREAM_DEFAULT_RETRY",
    "from_upstream",
    "to_upstream",
    "derived_version",
    "activity_of",
]

#: The node kinds an upstream definition may use.
SUPPORTED_KINDS = ("TASK", "PREDICATE", "SLEEP", "FORK", "JOIN", "END", "SIGNAL", "SUB_WORKFLOW", "DYN_FORK")

#: Upstream's "retry forever": Integer.MAX_VALUE attempts (ours: max_attempts 0).
UPSTREAM_MAX_ATTEMPTS = MAX_COUNT

#: What upstream does for a step without a retry policy: RetryPolicy.forever() there, i.e.
#: unlimited attempts, 1 s apart, multiplier 1, capped at 60 s, no jitter.
UPSTREAM_DEFAULT_RETRY = RetryPolicy(
    max_attempts=0, initial_backoff_millis=1000, multiplier=1.0, max_backoff_millis=60_000, jitter=0.0
)

_MODES = {"SERVER", "LOCAL_SYNC", "LOCAL_ASYNC", "DEFAULT"}
_WORKER_KINDS = ("TASK", "PREDICATE")
_HEX16 = re.compile(r"[0-9a-f]{16}")

# Which edges each kind uses: (next, altNext, branches), each "required", "optional" or "unused".
_R, _O, _U = "required", "optional", "unused"
_EDGES: dict[str, tuple[str, str, str]] = {
    "TASK": (_R, _U, _U),
    "PREDICATE": (_R, _R, _U),
    "SLEEP": (_R, _U, _U),
    "FORK": (_U, _U, _R),
    "JOIN": (_R, _U, _U),
    "END": (_U, _U, _U),
    "SIGNAL": (_R, _O, _U),
    "SUB_WORKFLOW": (_R, _U, _U),
    "DYN_FORK": (_R, _U, _R),
}
_EDGE_ROLES = {
    ("PREDICATE", "next"): "the true path",
    ("PREDICATE", "altNext"): "the false path",
    ("DYN_FORK", "next"): "the JOIN that closes it",
    ("DYN_FORK", "branches"): "the first node of its body",
    ("FORK", "branches"): "the first node of each branch",
}


@dataclass(frozen=True)
class UpstreamDefinition:
    """A translated upstream definition: ours (validated), and the version upstream gave it."""

    definition: WorkflowDefinition
    version: int | None  # 1 .. 2**31-1; None when the document names none


def activity_of(workflow: str, node_id: str) -> str:
    """The activity upstream workers know the step ``node_id`` of ``workflow`` by."""
    return f"{workflow}#{node_id}"


def derived_version(content_hash: str) -> int:
    """A version number in 1 .. 2**31-1 for a definition upstream never numbered.

    Deterministic in ``content_hash`` (``WorkflowDefinition.content_version()``, 16 hex digits):
    the 64-bit hash modulo 2**31-1, plus one, so never 0.
    """
    if not isinstance(content_hash, str) or not _HEX16.fullmatch(content_hash):
        raise InvalidArgument(f"a content hash is 16 lowercase hex digits, got {content_hash!r}")
    return int(content_hash, 16) % MAX_COUNT + 1


# ---------------------------------------------------------------------------- upstream -> ours


def from_upstream(doc: dict[str, Any]) -> UpstreamDefinition:
    """Translate and validate upstream's definition JSON; InvalidArgument names what is wrong."""
    top = Fields(doc, "the workflow definition")
    name = validate_name(top.required_text("name", "the workflow's name"), "workflow name")
    top.where = f"workflow {name!r}"
    version = _version(top)
    start = top.required_text("startNode", "the first node's id")
    top.texts("queues")  # upstream's worker reads its own list; checked for shape only
    mode = _mode(top)
    checkpoints = top.texts("checkpoints")

    raw: dict[str, RawNode] = {}
    for i, item in enumerate(top.items("nodes")):
        node = _read_node(item, f"workflow {name!r}: nodes[{i}]")
        if node.uid in raw:
            raise InvalidArgument(f"workflow {name!r}: two nodes have the id {node.uid!r}")
        raw[node.uid] = node
    if not raw:
        raise InvalidArgument(f"workflow {name!r} has no nodes")
    for node in raw.values():
        for field, target in (("next", node.next), ("altNext", node.alt_next)):
            if target is not None and target not in raw:
                raise InvalidArgument(f"{node.label}: {field!r} points to {target!r}, which does not exist")
        for target in node.branches:
            if target not in raw:
                raise InvalidArgument(f"{node.label}: 'branches' names {target!r}, which does not exist")
    if start not in raw:
        raise InvalidArgument(f"workflow {name!r}: 'startNode' {start!r} is not one of its nodes")
    for cp in checkpoints:
        if cp not in raw:
            raise InvalidArgument(f"workflow {name!r}: checkpoint {cp!r} is not one of its nodes")

    ids = _assign_ids(name, raw)
    join_of, fork_of = pair_joins(raw)
    nodes = tuple(_translate(node, ids, join_of, fork_of) for node in raw.values())
    definition = WorkflowDefinition(
        name=name,
        start_node=ids[start],
        nodes=nodes,
        execution_mode=mode,
        checkpoints=tuple(sorted({ids[cp] for cp in checkpoints})),
        join_merge=JoinMerge.LAST_WRITE_WINS,
    )
    return UpstreamDefinition(definition.validate(), version)


def _version(top: Fields) -> int | None:
    if not top.has("version"):
        return None
    version = top.integer("version", 0)
    if not 1 <= version <= MAX_COUNT:
        raise InvalidArgument(f"{top.where}: 'version' must be in 1..{MAX_COUNT}, got {version}")
    return version


def _mode(top: Fields) -> ExecutionMode:
    mode = top.text("executionMode")
    if mode is None:
        return ExecutionMode.DEFAULT
    if mode not in _MODES:
        raise InvalidArgument(
            f"{top.where}: 'executionMode' {mode!r} is not one of {', '.join(sorted(_MODES))}"
        )
    return ExecutionMode(mode)


def _read_node(item: object, where: str) -> RawNode:
    fields = Fields(item, where)
    uid = fields.required_text("id", "the node's id")
    kind = fields.required_text("kind", "the node's kind")
    if kind not in SUPPORTED_KINDS:
        raise InvalidArgument(
            f"node {uid!r}: kind {kind!r} is not supported; the supported kinds are {', '.join(SUPPORTED_KINDS)}"
        )
    label_name = fields.data.get("name")
    label = f"node {uid!r} ({kind}{f' {label_name!r}' if isinstance(label_name, str) else ''})"
    fields.where = label
    nxt = fields.text("next")
    alt = fields.text("altNext")
    branches = tuple(fields.texts("branches"))
    rules = _EDGES[kind]
    for field, present, rule in zip(
        ("next", "altNext", "branches"),
        (nxt is not None, alt is not None, bool(branches)),
        rules,
        strict=True,
    ):
        if rule == _R and not present:
            role = _EDGE_ROLES.get((kind, field))
            raise InvalidArgument(f"{label}: {field!r} is missing{f' ({role})' if role else ''}")
        if rule == _U and present:
            raise InvalidArgument(f"{label}: has {field!r}, which {kind} nodes do not use")
    if kind == "DYN_FORK" and len(branches) != 1:
        raise InvalidArgument(
            f"{label}: 'branches' must name exactly one node (its body), got {len(branches)}"
        )
    if fields.boolean("compensable", False):
        raise InvalidArgument(f"{label}: compensable steps are not supported")
    if fields.integer("loopBudget", 0) not in (0, -1):
        raise InvalidArgument(f"{label}: a 'loopBudget' is not supported (only -1, the engine default)")
    if kind == "TASK" and fields.has("itemsKey"):
        raise InvalidArgument(f"{label}: combine steps (a TASK with 'itemsKey') are not supported")
    return RawNode(uid, kind, label, fields, nxt, alt, branches)


def _assign_ids(workflow: str, raw: dict[str, RawNode]) -> dict[str, str]:
    """Upstream id -> ours: a step's name for TASK / PREDICATE, else the upstream id, made unique."""
    ids: dict[str, str] = {}
    step_of: dict[str, str] = {}  # step name -> upstream id
    for node in raw.values():
        if node.kind not in _WORKER_KINDS:
            continue
        step = validate_name(node.fields.required_text("name", "the step's name"), f"{node.label} name")
        expected = activity_of(workflow, step)
        activity = node.fields.required_text("activity", f"it must be {expected!r}")
        if activity != expected:
            raise InvalidArgument(
                f"{node.label}: 'activity' is {activity!r}, but it must be {expected!r} "
                "(this server runs a step by its workflow and step name)"
            )
        other = step_of.get(step)
        if other is not None:
            raise InvalidArgument(
                f"workflow {workflow!r}: two steps are named {step!r} ({other!r}, {node.uid!r})"
            )
        step_of[step] = node.uid
        ids[node.uid] = step
    taken = set(step_of) | {n.uid for n in raw.values() if n.kind not in _WORKER_KINDS}
    for node in raw.values():
        if node.kind in _WORKER_KINDS:
            continue
        validate_name(node.uid, "node id")
        new = node.uid
        if new in step_of:  # a step took this id as its name: pick the first free "<id>_<k>"
            k = 1
            while f"{node.uid}_{k}" in taken:
                k += 1
            new = f"{node.uid}_{k}"
            taken.add(new)
        ids[node.uid] = new
    return ids


def _translate(node: RawNode, ids: dict[str, str], join_of: dict[str, str], fork_of: dict[str, str]) -> Node:
    f = node.fields
    our_id = ids[node.uid]
    nxt = ids[node.next] if node.next is not None else None
    alt = ids[node.alt_next] if node.alt_next is not None else None
    kind = node.kind
    if kind in _WORKER_KINDS:
        return Node(
            id=our_id,
            kind=NodeKind(kind),
            next=nxt,
            alt_next=alt,
            queue=f.text("queue"),
            retry=_retry(f),
        )
    if kind == "SLEEP":
        return Node(id=our_id, kind=NodeKind.SLEEP, next=nxt, sleep_millis=f.integer("sleepMillis", 0))
    if kind == "FORK":
        return Node(
            id=our_id,
            kind=NodeKind.FORK,
            branches=tuple(ids[b] for b in node.branches),
            join=ids[join_of[node.uid]],
        )
    if kind == "JOIN":
        return Node(id=our_id, kind=NodeKind.JOIN, next=nxt, fork=ids[fork_of[node.uid]])
    if kind == "END":
        reason = f.text("reason")
        if reason is not None and "\x00" in reason:  # it becomes the instance's reason, stored as text
            raise InvalidArgument(f"{node.label}: 'reason' contains a NUL character (\\x00)")
        # upstream reads a missing "success" as false (its DSL always writes true)
        return Node(id=our_id, kind=NodeKind.END, success=f.boolean("success", False), reason=reason)
    if kind == "SIGNAL":
        return Node(
            id=our_id,
            kind=NodeKind.SIGNAL,
            signal=f.required_text("name", "the signal's name"),
            timeout_millis=f.integer("sleepMillis", 0),
            next=nxt,
            alt_next=alt,
        )
    if kind == "SUB_WORKFLOW":
        # upstream fails the parent when the child fails: no retry, no error path
        return Node(
            id=our_id,
            kind=NodeKind.SUB_WORKFLOW,
            workflow=f.required_text("activity", "the child workflow's name"),
            next=nxt,
            retry=RetryPolicy.none(),
        )
    assert kind == "DYN_FORK"
    # a missing list skips the node (the definition's LAST_WRITE_WINS says so: see the module doc)
    item_key = f.required_text("itemKey", "the context key each branch's element goes to")
    return Node(
        id=our_id,
        kind=NodeKind.FOR_EACH,
        items_key=f.required_text("itemsKey", "the context key of the list"),
        item_key=item_key,
        index_key=item_key + "Index",
        branches=(ids[node.branches[0]],),
        join=nxt,
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


def to_upstream(definition: WorkflowDefinition, version: int) -> dict[str, Any]:
    """Our definition in upstream's shape (GetWorkflow's answer), for any of our definitions.

    Kinds upstream lacks (USER_TASK) keep their kind; fields upstream has no place for (a
    signal's ``result_key``, a for-each's ``output_key``, a combine step...) are left out.
    """
    width = {n.join: len(n.branches) for n in definition.nodes if n.kind is NodeKind.FORK and n.join}
    nodes = [_node_out(definition, node, width) for node in definition.nodes]
    queues = sorted({n.queue or definition.name for n in definition.nodes if n.is_worker_step})
    out: dict[str, Any] = {
        "name": definition.name,
        "version": version,
        "startNode": definition.start_node,
        "nodes": nodes,
        "queues": queues,
        "executionMode": definition.execution_mode.value,
    }
    if definition.checkpoints:
        out["checkpoints"] = sorted(set(definition.checkpoints))
    return out


def _node_out(definition: WorkflowDefinition, node: Node, width: dict[str, int]) -> dict[str, Any]:
    kind = node.kind
    out: dict[str, Any] = {"id": node.id, "kind": "DYN_FORK" if kind is NodeKind.FOR_EACH else kind.value}
    if kind is not NodeKind.END:
        out["name"] = node.signal if kind is NodeKind.SIGNAL else node.id
    if node.is_worker_step:
        out["activity"] = activity_of(definition.name, node.id)
        out["queue"] = node.queue or definition.name
        out["retry"] = _retry_out(definition.retry_for(node))
    elif kind is NodeKind.SUB_WORKFLOW:
        out["activity"] = node.workflow
    # upstream keeps a sleep's duration and a wait's deadline in the same field
    millis = node.sleep_millis if kind is NodeKind.SLEEP else node.timeout_millis
    if millis:
        out["sleepMillis"] = millis
    nxt = node.join if kind is NodeKind.FOR_EACH else node.next
    if nxt is not None:
        out["next"] = nxt
    if node.alt_next is not None:
        out["altNext"] = node.alt_next
    if kind in (NodeKind.FORK, NodeKind.FOR_EACH):
        out["branches"] = list(node.branches)
    if kind is NodeKind.JOIN and node.id in width:
        out["expected"] = width[node.id]
    if kind is NodeKind.END:
        out["success"] = node.success
        if node.reason is not None:
            out["reason"] = node.reason
    if kind is NodeKind.FOR_EACH:
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
