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

from .._limits import MAX_COUNT
from .._model import ExecutionMode, JoinMerge, Node, NodeKind, WorkflowDefinition, validate_name
from ..errors import InvalidArgument
from .fields import Fields
from .graph import RawNode, pair_joins
from .kinds import (
    BY_UPSTREAM_NAME,
    KINDS,
    REQUIRED,
    SUPPORTED_KINDS,
    UNUSED,
    UPSTREAM_DEFAULT_RETRY,
    UPSTREAM_MAX_ATTEMPTS,
    Wiring,
    activity_of,
)

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

_MODES = {"SERVER", "LOCAL_SYNC", "LOCAL_ASYNC", "DEFAULT"}
_WORKER_KINDS = ("TASK", "PREDICATE")
_HEX16 = re.compile(r"[0-9a-f]{16}")

# What a missing edge is for, where saying so helps.
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
    wiring = Wiring(ids, join_of, fork_of)
    nodes = tuple(_translate(node, wiring) for node in raw.values())
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
    incoming = BY_UPSTREAM_NAME[kind].incoming
    assert incoming is not None
    for field, present, rule in zip(
        ("next", "altNext", "branches"),
        (nxt is not None, alt is not None, bool(branches)),
        incoming.edges,
        strict=True,
    ):
        if rule == REQUIRED and not present:
            role = _EDGE_ROLES.get((kind, field))
            raise InvalidArgument(f"{label}: {field!r} is missing{f' ({role})' if role else ''}")
        if rule == UNUSED and present:
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


def _translate(node: RawNode, wiring: Wiring) -> Node:
    """The node of ours an upstream node becomes (its kind's row in wiggle/_upstream/kinds.py)."""
    incoming = BY_UPSTREAM_NAME[node.kind].incoming
    assert incoming is not None  # _read_node refused the kinds upstream has not
    return incoming.translate(node, wiring)


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
    """One node in upstream's shape (its kind's row in wiggle/_upstream/kinds.py)."""
    return KINDS[node.kind].outgoing(definition, node, width)
